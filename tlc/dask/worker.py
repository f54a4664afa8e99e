"""What runs inside a Dask task: the model as shipped (``ShippedModel``), the per-process plan cache, the thread
count, and one chunk's run with its checks.

NOTE: nothing here holds native code: a task receives the model as text IR plus its tensors and a dict of
compile options, and each worker process compiles it once (kernels from the on-disk cache, ``TLC_CACHE_DIR``),
keeping the plan for every later task and thread. A ``Plan`` is safe to run from several threads (each run takes
its own arena), so the threads of one worker share one plan.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import socket
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ChunkError, TlcError
from ..ir.text import parse_graph, print_graph
from ..ir.types import np_dtype
from ..runtime import CompileOptions, Plan, compile_with_options

#: plans kept per process (the newest): one per (model, options, thread count)
MAX_PLANS = 8
NAN_POLICIES = ("propagate", "raise")


@dataclass(frozen=True)
class Feed:
    """One model input as a chunk must bring it: ``batched`` feeds are cut along axis 0, the rest go whole."""

    name: str
    dtype: str
    shape: tuple[int, ...]      # the non-batch dims of a batched feed; the whole shape of another
    batched: bool


@dataclass(frozen=True)
class Chunk:
    """A block of rows: its index along the batch axis and its rows [start, stop)."""

    index: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def __str__(self) -> str:
        return f"chunk {self.index} (rows {self.start}:{self.stop})"


class ShippedModel:
    """The graph as data (text IR and its tensors) and the compile options: all a worker needs to compile.

    ``digest`` (a sha256 of both) keys the per-process plan cache. Pickles as plain data.
    """

    def __init__(self, graph: Any, options: dict[str, Any], feeds: list[Feed], outputs: list[str],
                 nan_policy: str = "propagate", keep_errors: bool = False, collect: bool = False,
                 profile: bool = False):
        tensors: dict[str, np.ndarray] = {}
        self.text = print_graph(graph, tensors=tensors)
        self.tensors = tensors
        self.name = graph.name
        self.options = dict(options)
        self.feeds = list(feeds)
        self.outputs = list(outputs)
        self.nan_policy = nan_policy
        self.keep_errors = keep_errors
        self.collect = collect or profile
        self.profile = profile
        h = hashlib.sha256(self.text.encode())
        for key in sorted(tensors):
            a = np.ascontiguousarray(tensors[key])
            h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
        h.update(repr(sorted(self.options.items())).encode())
        self.digest = h.hexdigest()


# ---------------------------------------------------------------------------- the per-process plan cache
_plans: OrderedDict[tuple[str, int], Plan] = OrderedDict()
_plans_lock = threading.Lock()
_host_slots: int | None = None    # a distributed worker's host, asked once


def plan_for(model: ShippedModel) -> Plan:
    """The plan of ``model`` in this process, compiled by the first task that asks (the others wait for it)."""
    options = CompileOptions.from_env(**model.options)     # NOTE: the worker's TLC_CACHE_DIR / TLC_NUM_THREADS
    threads = options.num_threads or auto_threads()
    key = (model.digest, threads)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    with _plans_lock:
        plan = _plans.get(key)
        if plan is None:
            graph = parse_graph(model.text, tensors=model.tensors, source=f"the model {model.name!r} as shipped")
            plan = compile_with_options(graph, CompileOptions.from_env(**{**model.options, "num_threads": threads}))
            _plans[key] = plan
            while len(_plans) > MAX_PLANS:
                _plans.popitem(last=False)
        return plan


def cached_plans() -> list[Plan]:
    """The plans this process holds (for tests and reports)."""
    with _plans_lock:
        return list(_plans.values())


def auto_threads() -> int:
    """Threads for a plan when none were asked for: the CPUs this process may use over the tasks that run at once
    on this machine (so that Dask's workers x threads x tlc's threads never exceed the cores), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // concurrent_tasks())


def concurrent_tasks() -> int:
    """How many Dask tasks this machine runs at once, as seen from inside a task: on a distributed worker the
    threads of every worker on this host (asked of the scheduler once per process); in the processes scheduler's
    children and the threaded scheduler's pool Dask's ``num_workers`` (default: one per CPU); on the synchronous
    scheduler (the main thread of the main process) 1."""
    global _host_slots
    worker = _distributed_worker()
    if worker is not None:
        if _host_slots is None:
            _host_slots = _host_threads(worker)
        return _host_slots
    if multiprocessing.parent_process() is None and threading.current_thread() is threading.main_thread():
        return 1
    import dask

    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def _distributed_worker() -> Any:
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        return distributed.get_worker()
    except ValueError:
        return None


def _host_threads(worker: Any) -> int:
    """The threads of all workers on this worker's host (this worker's own if the scheduler cannot be asked)."""
    mine = int(worker.state.nthreads)
    try:
        import distributed

        host = _host_of(worker.address)
        workers = distributed.get_client().scheduler_info(n_workers=-1)["workers"]
        total = sum(int(w["nthreads"]) for addr, w in workers.items() if _host_of(addr) == host)
        return max(mine, total)
    except Exception:  # NOTE: a thread count is no reason to fail a task
        return mine


def _host_of(address: str) -> str:
    return address.split("://")[-1].rsplit(":", 1)[0]


def worker_name() -> str:
    """The Dask worker's address on a distributed cluster, else host:pid."""
    worker = _distributed_worker()
    if worker is not None:
        return str(worker.address)
    return f"{socket.gethostname()}:{os.getpid()}"


# ---------------------------------------------------------------------------- one chunk
def run_chunk(model: ShippedModel, chunk: Chunk, *arrays: Any) -> dict[str, Any]:
    """Run the plan on one chunk's arrays (in ``model.feeds`` order). Returns ``{"outputs": [arrays in
    model.outputs order], "error": None, "report": this process's record when collecting}``; a bad chunk raises
    ``ChunkError``, or with ``keep_errors`` comes back as ``{"outputs": None, "error": ChunkError}``.

    NOTE: the tasks that read this result are given ints and tuples, never strings, which Dask could take for
    the keys of other tasks."""
    wall0, t0 = time.time_ns(), time.perf_counter_ns()
    try:
        plan = plan_for(model)
        feeds = check_chunk(model, chunk, arrays)
        try:
            outputs = plan.run(feeds, profile=model.profile)
        except TlcError as exc:
            raise ChunkError(f"{chunk} of {model.name!r} failed: {type(exc).__name__}: {exc}", chunk.index,
                             (chunk.start, chunk.stop), "run") from exc
        check_outputs(model, chunk, outputs)
    except ChunkError as exc:
        if not model.keep_errors:
            raise
        return {"rows": chunk.rows, "outputs": None, "error": exc, "report": None}
    report = None
    if model.collect:
        report = snapshot(plan, chunk, wall0, time.perf_counter_ns() - t0, model.profile)
    return {"rows": chunk.rows, "outputs": [outputs[name] for name in model.outputs], "error": None,
            "report": report}


def check_chunk(model: ShippedModel, chunk: Chunk, arrays: tuple[Any, ...]) -> dict[str, np.ndarray]:
    """The chunk's feeds, each checked against what the model and the Dask array's chunks promised."""
    feeds = {}
    for feed, raw in zip(model.feeds, arrays):
        a = np.asarray(raw)
        where = f"{chunk}, input {feed.name!r}"
        want = ((chunk.rows,) if feed.batched else ()) + feed.shape
        if a.dtype != np_dtype(feed.dtype):
            raise ChunkError(f"{where}: expected dtype {feed.dtype}, got {a.dtype} (shape {list(a.shape)})",
                             chunk.index, (chunk.start, chunk.stop), "dtype", feed.name)
        if a.shape != want:
            raise ChunkError(f"{where}: expected shape {list(want)}, got {list(a.shape)}", chunk.index,
                             (chunk.start, chunk.stop), "shape", feed.name)
        if model.nan_policy == "raise":
            _refuse_nan(a, where, chunk, feed.name, feed.batched)
        feeds[feed.name] = a
    return feeds


def check_outputs(model: ShippedModel, chunk: Chunk, outputs: dict[str, np.ndarray]) -> None:
    for name in model.outputs:
        a = outputs[name]
        if a.ndim == 0 or a.shape[0] != chunk.rows:   # NOTE: run() refused such models; a model lying about it
            raise ChunkError(f"{chunk}, output {name!r}: expected {chunk.rows} rows, got shape {list(a.shape)}",
                             chunk.index, (chunk.start, chunk.stop), "shape", name)
        if model.nan_policy == "raise":
            _refuse_nan(a, f"{chunk}, output {name!r}", chunk, name, True)


def _refuse_nan(a: np.ndarray, where: str, chunk: Chunk, name: str, batched: bool) -> None:
    if a.dtype.kind not in "fc":
        return
    nan = np.isnan(a)
    if not nan.any():
        return
    first = int(np.argwhere(nan)[0][0]) if batched and a.ndim else 0
    at = f"; the first in row {chunk.start + first}" if batched and a.ndim else ""
    raise ChunkError(f"{where}: {int(nan.sum())} NaN value(s) and nan_policy='raise'{at}", chunk.index,
                     (chunk.start, chunk.stop), "nan", name)


def _one(result: Any) -> dict[str, Any]:
    """A chunk's result, out of the lists Dask wraps it in where the runs have axes the reader has not (each of
    them one chunk)."""
    while isinstance(result, list):
        (result,) = result
    return result


def pick(result: Any, index: int, rest: tuple[int, ...], dtype: np.dtype, fill: Any) -> np.ndarray:
    """Output ``index``'s block of a chunk's result; a failed chunk's rows are ``fill`` (errors="keep")."""
    result = _one(result)
    if result["outputs"] is None:
        return np.full((result["rows"],) + tuple(rest), fill, dtype=dtype)
    return result["outputs"][index]


def error_of(result: dict[str, Any]) -> ChunkError | None:
    return result["error"]


def valid_rows(result: Any) -> np.ndarray:
    result = _one(result)
    return np.full(result["rows"], result["outputs"] is not None, dtype=bool)


def report_of(result: dict[str, Any]) -> dict[str, Any] | None:
    return result["report"]


# ---------------------------------------------------------------------------- what a worker reports
def snapshot(plan: Plan, chunk: Chunk, wall_start_ns: int, duration_ns: int, profile: bool) -> dict[str, Any]:
    """This chunk's timing, the plan's stats as they stand in this process, and (``profile``) the profiled runs
    recorded since the last snapshot (each run is handed out once, so the union over chunks has every run)."""
    thread = threading.current_thread()
    record: dict[str, Any] = {
        "model": plan.name, "worker": worker_name(), "host": socket.gethostname(), "pid": os.getpid(),
        "thread": thread.name, "thread_id": threading.get_ident(),
        "chunk": chunk.index, "rows": chunk.rows, "start_ns": wall_start_ns, "duration_ns": duration_ns,
        "plan_id": id(plan), "threads": plan.options.threads, "stats": plan.stats().to_dict(), "runs": [],
    }
    if profile:
        # perf_counter_ns -> wall clock of this process, so that traces of several processes line up
        offset = time.time_ns() - time.perf_counter_ns()
        record["runs"] = [(r.thread_id, r.thread_name, r.start_ns + offset, r.duration_ns,
                           tuple((t, s + offset, d) for t, s, d in r.events))
                          for r in plan.profile(reset=True).runs]
    return record
