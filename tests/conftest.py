"""Shared test fixtures. Tests run on the CPU only; CUDA tests use Numba's simulator."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
