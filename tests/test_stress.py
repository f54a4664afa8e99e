"""The runtime under stress, bounded for CI (``tools/stress.py`` runs the long versions): threads on one plan
against serial results bit for bit, two processes compiling into one fresh cache, damaged and unwritable cache
folders, and memory over a few thousand runs."""

from __future__ import annotations

import errno
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import tlc
from tlc.kernels import KernelCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import stress  # noqa: E402


@pytest.fixture(scope="module")
def plan():
    return tlc.compile(stress.small_model(), jit="eager")


def test_eight_threads_match_serial_bitwise(plan):
    result = stress.stress_threads(8, runs_per_thread=200, plan=plan)
    assert result["errors"] == [] and result["calls"] == 1600
    assert result["mismatches"] == 0
    stats = plan.stats()
    assert stats.totals["kernels_ready"] == stats.totals["kernels"] >= 3   # the threads ran the native kernels


def _fresh_cache_compile(folder: Path, **options):
    """Compile the tiny model with a new ``KernelCache`` over ``folder`` (nothing in memory: as a new process)."""
    from tlc.runtime import native

    native._CACHES.pop(str(folder), None)
    return tlc.compile(stress.tiny_model(), jit="eager", cache_dir=str(folder), **options)


def test_two_processes_compile_one_fresh_cache(cache_with_ir_kernels):
    # (the IR kernels' machine code is per machine and not what the processes race on here)
    tmp_path = cache_with_ir_kernels
    procs = [stress._spawn(tmp_path, start_at=0.0, model="tiny") for _ in range(2)]
    results = [stress._result(p) for p in procs]
    assert all(r.get("ok") and r["failed"] == 0 for r in results), results
    assert results[0]["digest"] == results[1]["digest"]
    plan = _fresh_cache_compile(tmp_path)   # what they wrote loads: every kernel a cache hit
    assert plan.stats().totals["cache_hits"] == plan.stats().totals["kernels"] >= 1


def test_damaged_cache_entries_are_rebuilt(tmp_path):
    """A warm cache whose every file is damaged (garbage, cut short, another kernel's code under this one's
    name, an index from another Numba): the next compile runs natively with the same results, no warning."""
    cases = stress.feeds(4)
    want = [_fresh_cache_compile(tmp_path).run(f) for f in cases]
    for fault in ("corrupt", "truncated", "foreign"):
        assert stress.damage(tmp_path, fault) > 0, fault
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # a rebuilt entry is no failure: nothing to warn about
            plan = _fresh_cache_compile(tmp_path)
        totals = plan.stats().totals
        assert totals["kernels_failed"] == 0 and totals["kernels_ready"] == totals["kernels"], fault
        assert all(stress.bitwise_equal(plan.run(f), w) for f, w in zip(cases, want)), fault


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC], ids=["readonly", "full"])
def test_unwritable_cache_folder_warns_and_still_compiles(tmp_path, code):
    with stress.deny_writes(tmp_path, code), pytest.warns(RuntimeWarning, match="cannot be written") as caught:
        plan = _fresh_cache_compile(tmp_path)
    assert any(f"[Errno {code}]" in str(w.message) for w in caught)
    stats = plan.stats()
    assert stats.totals["kernels_failed"] == 0 and stats.totals["kernels_ready"] == stats.totals["kernels"]
    assert "cannot be written" in str(stats) and stats.totals["cache_note"]
    assert not list(tmp_path.rglob("*.py"))   # nothing was written there
    feed = stress.feeds(1)[0]
    assert stress.close_to_reference(stress.tiny_model(), feed, plan.run(feed))


def test_numba_save_failure_moves_the_cache_aside(tmp_path, monkeypatch):
    """The source was written but Numba's own files cannot be (the disk filled in between): the kernel still
    compiles, in the private folder, and the cache says why."""
    from numba.core import caching

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    cache = KernelCache(tmp_path)
    monkeypatch.setattr(caching.IndexDataCacheFile, "save", full)
    body = tlc.Graph("body")
    x = body.input("x", "float32", ("N",))
    body.output(body.add_node("Add", [body.add_node("Mul", [x, body.constant(np.float32(3.0))]), x]), "y")
    with pytest.raises(tlc.CompileError):   # the private folder is on the same "full" disk: a named error
        tlc.kernels.compile_group(body, "elementwise", [tlc.ir.TensorType("float32", ("N",))], cache=cache)
    assert cache.problem and "[Errno 28]" in cache.problem


def test_memory_flat_over_runs():
    result = stress.stress_memory(1000, plan=tlc.compile(stress.tiny_model(), jit="eager"), warmup=200)
    assert result["traced_growth"] < 16 << 10, result   # Python objects: nothing kept per run
    assert result["rss_growth"] < 2 << 20, result
