"""One thread governance: Numba's pool runs every parallel step of a plan; BLAS runs single-threaded inside it.

Why (measured on the 2-core machine, see docs/architecture.md): three pools used to meet in one run: Numba's
OpenMP workers (parallel kernels), OpenBLAS's own threads (large products) and tlc's own worker threads (product
slabs). Each pool's idle workers either spin, stealing the core the next step needs, or sleep, so every hand-off
paid a wake-up (~50 us with ``OMP_WAIT_POLICY=PASSIVE``, the policy tlc had set to stop the spinning). A second
thread made models slower. Now:

- products and convolutions are cut into parts that run as single-threaded BLAS calls inside Numba parallel
  loops (``tlc.kernels.gemm``), epilogues right after each part on the same thread: one pool owns the cores;
- OpenBLAS is set to one thread for the length of each run (process-wide in OpenBLAS; the first of concurrent
  runs records the caller's count and the last one gives it back, so the user's own numpy keeps its threads);
- libgomp's idle workers spin for a bounded time (``GOMP_SPINCOUNT``, about a millisecond) before sleeping: long
  enough to bridge the Python between two steps (a parallel region then costs ~2 us instead of ~50), short
  enough not to burn a core after a run. tlc sets it before Numba starts its pool, unless the user set
  ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``;
- Numba's thread count is per calling thread; each run sets it to the plan's ``num_threads``.
"""

from __future__ import annotations

import os
import sys
import threading

from ..kernels import blas

#: libgomp spin iterations before an idle worker sleeps (~0.5-1.5 ms on the 2-core machine: 10,000 bridged
#: gaps of 100 us between parallel regions, 30,000 gaps of 300 us, 100,000 gaps of 1 ms)
SPIN_COUNT = 50_000

_lock = threading.Lock()
_depth = 0                  # runs in progress (process-wide), for BLAS's count
_blas_before = 0            # BLAS's count when the first of them began


def cores() -> int:
    return os.cpu_count() or 1


def configure_openmp(environ: dict | None = None) -> None:
    """Set libgomp's bounded spin before Numba starts its pool (unless the user chose a policy)."""
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env and not _numba_pool_started():
        env["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def _numba_pool_started() -> bool:
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return bool(parallel is not None and getattr(parallel, "_is_initialized", False))


def _thread_count_functions():
    """Numba's own getter and setter of this thread's count, without the checks of its public functions (the
    pool is started once here); the public ones where this Numba has no such internals."""
    import numba

    try:
        from numba.np.ufunc import parallel

        parallel._launch_threads()
        return parallel._get_num_threads, numba.set_num_threads
    except (ImportError, AttributeError):  # another Numba: its public API (slower by ~0.5 us a call)
        return numba.get_num_threads, numba.set_num_threads


class Governor:
    """``with governor:`` around a run: Numba's count for this thread and, for plans that call BLAS
    (``uses_blas``), BLAS single-threaded meanwhile."""

    def __init__(self, threads: int, uses_blas: bool = True):
        import numba

        self.threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
        self.uses_blas = uses_blas and blas.AVAILABLE
        self._get = self._set = None

    def __enter__(self) -> None:
        global _depth, _blas_before
        if self._get is None:
            self._get, self._set = _thread_count_functions()
        if self._get() != self.threads:
            self._set(self.threads)
        if self.uses_blas:
            with _lock:
                if _depth == 0:
                    _blas_before = blas.get_threads()
                    if _blas_before != 1:
                        blas.set_threads(1)
                _depth += 1

    def __exit__(self, *exc) -> None:
        global _depth
        if self.uses_blas:
            with _lock:
                _depth -= 1
                if _depth == 0 and _blas_before != 1:
                    blas.set_threads(_blas_before)
