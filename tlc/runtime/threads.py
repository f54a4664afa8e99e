"""Thread counts for Numba and BLAS (``CompileOptions.num_threads``).

Numba's thread count is per calling thread, so a plan sets it at the start of every run (cheap). BLAS
(OpenBLAS in numpy's wheels) has one process-wide count; it is read and, when it differs from the plan's, set
through ``threadpoolctl`` at every run (~1 us). Without ``threadpoolctl`` the BLAS count cannot be governed:
``blas_note()`` says so and ``stats()`` shows it.

With ``CompileOptions.own_threads`` (the default) BLAS runs single-threaded and the runtime splits large GEMMs
over its own workers (``tlc.runtime.workers`` says why).

Numba's OpenMP workers (libgomp) busy-wait ~300,000 pause loops (~11 ms on this machine) after every parallel
kernel, without yielding; OpenBLAS's workers spin too (yielding) after every GEMM. On a machine with as many
cores as threads the two pools then fight: a GEMM after a parallel kernel waited up to 10 ms for its worker's
core (the mlp took 16 ms instead of 1.4 ms at 2 threads). ``quiet_openmp`` therefore makes libgomp's idle
workers sleep at once (``OMP_WAIT_POLICY=PASSIVE``, which costs a parallel kernel ~50 us of wake-up, so small
kernels run serially anyway), unless the user set a wait policy. libgomp reads it when Numba first loads it, so
it is set before any plan runs; a process whose Numba pool already started keeps what it had.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.RLock()
_controller: list | None = None     # threadpoolctl's controllers of the BLAS libraries loaded (numpy's OpenBLAS)
_blas_touched = False               # whether some plan has set BLAS's thread count (else: the library's default)
_numba_set = threading.local()       # Numba's count is per thread: has a plan set it on this one?
_depth = 0                          # runs in progress that govern the BLAS count (process-wide)
_blas_before: list[int] = []        # the BLAS counts found when the first of them began, restored by the last


def cores() -> int:
    return os.cpu_count() or 1


def blas_note(num_threads: int | None) -> str:
    """Empty when the BLAS thread count is as asked; otherwise why not."""
    if num_threads is None:
        return ""
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return "BLAS threads not governed: install threadpoolctl (OPENBLAS_NUM_THREADS works before start-up)"
    return ""


SPINNING_NOTE = ("Numba's OpenMP workers busy-wait after each parallel kernel (OMP_WAIT_POLICY is not PASSIVE, or "
                 "Numba's pool started before tlc could set it): they slow the BLAS calls that follow")


def quiet_openmp(environ: dict | None = None) -> bool:
    """Ask libgomp for sleeping idle workers, unless the user chose a policy or the pool has started.

    Returns whether the policy in force (or to be) is the quiet one.
    """
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" in env or "GOMP_SPINCOUNT" in env:
        return env.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"
    if _numba_pool_started():
        return False
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def _numba_pool_started() -> bool:
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return bool(parallel is not None and getattr(parallel, "_is_initialized", False))


def apply(num_threads: int | None, blas_threads: int | None = None) -> None:
    """Make Numba (this thread) use ``num_threads`` (None: every core) and BLAS (the process) ``blas_threads``
    (None: as many as Numba; 1 when tlc's own workers run the parts of large GEMMs)."""
    global _blas_touched
    numba = sys.modules.get("numba")
    # NOTE: asking Numba starts its thread pool; leave it alone until some plan sets a count on this thread
    if numba is not None and (num_threads is not None or getattr(_numba_set, "on_this_thread", False)):
        want = min(num_threads or cores(), numba.config.NUMBA_NUM_THREADS)
        if numba.get_num_threads() != want:
            numba.set_num_threads(want)
        _numba_set.on_this_thread = True
    if blas_threads is None and num_threads is None and not _blas_touched:
        return
    want = blas_threads or num_threads or cores()
    # NOTE: read back every time (~1 us): OpenBLAS 0.3.31 ignores a count set from a thread other than the one
    # that set it before, so a cached "what we set" could be wrong
    for lib in _blas_libraries():
        if lib.get_num_threads() != want:
            with _lock:
                lib.set_num_threads(want)
        _blas_touched = True


def _blas_libraries() -> list:
    global _controller
    if _controller is None:
        with _lock:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _controller = []
            else:
                _controller = ThreadpoolController().select(user_api="blas").lib_controllers
    return _controller


@contextmanager
def governed(num_threads: int | None, blas_threads: int | None = None) -> Iterator[None]:
    """``apply`` for the duration of a run, then give the caller's numpy back its BLAS thread count.

    The BLAS count is process-wide: the first of several concurrent runs records it and the last one to finish
    restores it (a plan asks for 1 BLAS thread when its own workers split GEMMs; left behind, that would make
    the user's own ``numpy.dot`` single-threaded and change its summation order). Numba's count is per
    calling thread and only governs Numba's own parallel loops; it stays as the plan set it.
    """
    global _depth, _blas_before
    with _lock:
        if _depth == 0:
            _blas_before = [lib.get_num_threads() for lib in _blas_libraries()]
        _depth += 1
    try:
        apply(num_threads, blas_threads)
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for lib, count in zip(_blas_libraries(), _blas_before):
                    if lib.get_num_threads() != count:
                        lib.set_num_threads(count)
