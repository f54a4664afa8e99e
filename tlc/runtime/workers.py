"""The runtime's own worker threads: a step split into parts (rows of a GEMM and its epilogue) runs them here.

Why not OpenBLAS's threads: after every GEMM they spin (yielding) for ~0.1 s, and while another process holds a
core, a 2-thread OpenBLAS GEMM waited out whole time slices at each of its barriers: 64x784x1024 took 12-64 ms
(median) against 1.2 ms on one thread, on this 2-core machine under a load of 3-4. A part here is a plain
single-threaded call (BLAS with one thread, a serial Numba kernel) that releases the GIL; idle workers block on
a queue (no spinning), and the caller runs the first part itself, so a busy core delays a step by at most its
part instead of stalling it. The epilogue of a GEMM part runs on the same thread right after it, on rows still
in that core's cache.

One pool per process, sized for the most threads any plan asked for; a step takes it for its parts, and a
step of a concurrent run that finds it taken runs its parts on its own thread, in order (correct, just serial).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

Part = Callable[[], None]


class Workers:
    """``threads - 1`` daemon threads; ``run(parts)`` runs part 0 on the caller and the others on them."""

    def __init__(self, threads: int):
        self.threads = max(1, threads)
        self._busy = threading.Lock()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._inboxes: list[queue.SimpleQueue] = []
        for k in range(self.threads - 1):
            inbox: queue.SimpleQueue = queue.SimpleQueue()
            thread = threading.Thread(target=self._serve, args=(inbox,), name=f"tlc-worker-{k + 1}", daemon=True)
            thread.start()
            self._inboxes.append(inbox)

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while True:
            part = inbox.get()
            try:
                part()
            except BaseException as exc:  # handed to the caller, which raises it
                self._done.put(exc)
            else:
                self._done.put(None)

    def run(self, parts: Sequence[Part]) -> None:
        """Run every part (concurrently where workers are free); re-raise the first failure."""
        if len(parts) <= 1 or len(parts) > self.threads or not self._busy.acquire(blocking=False):
            for part in parts:
                part()
            return
        try:
            for inbox, part in zip(self._inboxes, parts[1:]):
                inbox.put(part)
            failure: BaseException | None = None
            try:
                parts[0]()
            except BaseException as exc:
                failure = exc
            for _ in parts[1:]:
                exc = self._done.get()
                failure = failure or exc
            if failure is not None:
                raise failure
        finally:
            self._busy.release()


_POOL: Workers | None = None
_POOL_LOCK = threading.Lock()


def workers(threads: int) -> Workers:
    """The process's pool, grown to ``threads`` when a plan asks for more than it has."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.threads < threads:
            _POOL = Workers(threads)   # an outgrown pool's threads stay idle, blocked on their queues
        return _POOL


def split_rows(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``range(n)``, sizes differing by at most one (none empty)."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for k in range(parts):
        stop = start + base + (k < extra)
        bounds.append((start, stop))
        start = stop
    return bounds
