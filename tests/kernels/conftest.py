"""Fixtures of the kernel tests: one kernel cache for the whole session (each kernel compiles once)."""

from __future__ import annotations

import pytest

from tlc.kernels import KernelCache


@pytest.fixture(scope="session")
def kcache(tmp_path_factory) -> KernelCache:
    """One on-disk cache per test session, so each distinct kernel is compiled once."""
    return KernelCache(tmp_path_factory.mktemp("tlc-kernel-cache"))
