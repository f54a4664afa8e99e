"""Shared test fixtures. Tests run on the CPU only; CUDA tests use Numba's simulator.

Sweeps: a case marked ``@pytest.mark.sweep`` repeats, on more or bigger models, what a CI case already checks
(every light model channels-last, the whole ONNX backend selection, every conformance case compiled). CI skips
them to stay inside its 10-minute budget; ``TLC_TESTS_FULL=1 python -m pytest`` runs them.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

#: run the sweeps too (see the module's docstring)
FULL = bool(os.environ.get("TLC_TESTS_FULL"))


@pytest.fixture(autouse=True, scope="session")
def _other_workers_are_not_contention():
    """Under pytest-xdist the other workers keep the CPUs busy, and tlc's runs would see other processes holding
    the cores their threads need and run their parallel steps' parts in turn (``threads.Placement.contended``):
    the tests would stop running the parallel code they check. The policy's own tests patch it themselves."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    from tlc.runtime import threads

    place = threads.placement()
    place._busy_elsewhere = lambda mask, n: False
    yield
    del place._busy_elsewhere


def pytest_collection_modifyitems(config, items):
    if FULL:
        return
    skip = pytest.mark.skip(reason="a sweep: TLC_TESTS_FULL=1 runs it")
    for item in items:
        if "sweep" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def cache_with_ir_kernels(tmp_path):
    """An empty kernel-cache folder (``tmp_path``) holding only the IR kernels' machine code, copied from the
    default cache (``tlc.kernels.irjit``: per machine, built by this process's ``import tlc``): a process started
    on it skips the ~4 s MCJIT compile that ``import tlc`` does on a cold folder."""
    from tlc.kernels.cache import default_cache_dir

    for obj in default_cache_dir().glob("*panel-*.o"):
        shutil.copy(obj, tmp_path / obj.name)
    return tmp_path
