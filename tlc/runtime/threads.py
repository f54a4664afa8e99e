"""Thread counts for Numba and BLAS (``CompileOptions.num_threads``).

Numba's thread count is per calling thread, so a plan sets it at the start of every run (cheap). BLAS
(OpenBLAS in numpy's wheels) has one process-wide count; it is changed through ``threadpoolctl`` when that
package is installed, and only when a plan asks for a count other than the one in force. Without
``threadpoolctl`` the BLAS count cannot be governed: ``blas_note()`` says so and ``stats()`` shows it.
"""

from __future__ import annotations

import os
import sys
import threading

_lock = threading.Lock()
_controller = None
_blas_threads: int | None = None     # what we last set; None: untouched (the library's default)
_numba_set = threading.local()       # Numba's count is per thread: has a plan set it on this one?


def cores() -> int:
    return os.cpu_count() or 1


def _threadpool_controller():
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller


def blas_note(num_threads: int | None) -> str:
    """Empty when the BLAS thread count is as asked; otherwise why not."""
    if num_threads is None:
        return ""
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return "BLAS threads not governed: install threadpoolctl (OPENBLAS_NUM_THREADS works before start-up)"
    return ""


def apply(num_threads: int | None) -> None:
    """Make Numba (this thread) and BLAS (the process) use ``num_threads`` (None: every core)."""
    global _blas_threads
    numba = sys.modules.get("numba")
    # NOTE: asking Numba starts its thread pool; leave it alone until some plan sets a count on this thread
    if numba is not None and (num_threads is not None or getattr(_numba_set, "on_this_thread", False)):
        want = min(num_threads or cores(), numba.config.NUMBA_NUM_THREADS)
        if numba.get_num_threads() != want:
            numba.set_num_threads(want)
        _numba_set.on_this_thread = True
    if num_threads is None and _blas_threads is None:
        return
    want = num_threads or cores()
    if want == _blas_threads:
        return
    with _lock:
        try:
            _threadpool_controller().limit(limits=want, user_api="blas")
        except ImportError:
            return
        _blas_threads = want
