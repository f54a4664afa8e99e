"""Compiling native kernels now or in the background: ``Job``s on one JIT thread shared by every plan.

A plan's steps ask for kernels (``bound.KernelRequest``). With ``jit="eager"`` each is built in ``compile()``;
with ``"auto"`` (the default) every build goes to the JIT thread at once and the plan runs the steps' fallbacks
until their kernels arrive (a warm cache loads a kernel in milliseconds, a cold one compiles in about a second);
with ``"lazy"`` a plan submits its jobs once it has run ``hot_threshold`` times. A job that fails keeps its step
on the fallback for good; the plan warns once and ``stats()`` gives the reason (no silent fallback).

Numba compiles one function at a time and holds the GIL for much of it, so one thread is enough.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import CompileError

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlc-jit", initializer=_one_thread)
        return _POOL


def _one_thread() -> None:
    """The JIT thread runs Numba's parallel functions (a build that calls its kernel once) on itself alone.

    libgomp keeps a team of workers per thread that starts a parallel region, counts the threads of every
    team, and where they outnumber the CPUs cuts every idle worker's spin to almost nothing: a JIT thread's team
    of its own (jit="auto") made each parallel region of every later run wake a sleeping worker (2 cores:
    dynamic_batch at 2 threads 0.75 ms against 0.39 with the kernels built in ``compile()``)."""
    import numba

    numba.set_num_threads(1)


def why(exc: BaseException) -> str:
    """A failure's reason for ``stats()``: a CompileError's message, or the type and message of a bug."""
    return str(exc) if isinstance(exc, CompileError) else f"{type(exc).__name__}: {exc}"


class Job:
    """One kernel build: ``status`` pending | compiling | ready | failed; ``result`` once ready."""

    def __init__(self, name: str, build: Callable[[], Any]):
        self.name = name
        self._build = build
        self.status = "pending"
        self.result: Any = None
        self.reason = ""
        self.compile_ms: float | None = None
        self.cache_hit: bool | None = None
        self.future: Future | None = None
        self._callbacks: list[Callable[[Job], None]] = []
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self.status in ("ready", "failed")

    def on_done(self, callback: Callable[[Job], None]) -> None:
        """Call ``callback(job)`` when the job is done (now, if it is)."""
        with self._lock:
            if not self.done:
                self._callbacks.append(callback)
                return
        callback(self)

    def run(self) -> None:
        """Build now, on the calling thread (once; later calls return at once)."""
        with self._lock:
            if self.status not in ("pending", "queued"):
                return
            self.status = "compiling"
        start = time.perf_counter()
        try:
            result = self._build()
        except Exception as exc:  # a codegen bug too must reach the user, also from the JIT thread
            self.reason, self.status = why(exc), "failed"
        else:
            self.result, self.status = result, "ready"
            self.cache_hit = bool(getattr(result, "cache_hit", False))
            self.reason = f"compiled {getattr(result, 'name', self.name)}"
        finally:
            self.compile_ms = (time.perf_counter() - start) * 1e3
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def submit(self) -> None:
        """Build on the JIT thread (once)."""
        with self._lock:
            if self.status != "pending":
                return
            self.status = "queued"
            self.future = _pool().submit(self.run)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until done (building it now if it was never submitted); True when done."""
        if self.status == "pending":
            self.run()
        future = self.future
        if future is not None and not self.done:
            try:
                future.result(timeout)
            except TimeoutError:
                return False
        return self.done
