"""``Plan``: a lowered program, specialised per input-shape signature, run by a tight executor loop.

A ``Specialization`` binds every step to concrete shapes (type inference re-run with the bound dims), plans
memory for them and keeps a pool of arenas. ``run`` takes an arena from the pool for the duration of the run,
so concurrent runs never share a buffer, and nothing else that a run touches is mutable (JIT swaps excepted,
which replace a kernel by one assignment).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ExecutionError, ShapeInferenceError, ShapeMismatchError, TlcError
from ..ir.feeds import check_feeds
from ..ir.graph import Graph
from ..ir.types import TensorType, np_dtype
from . import threads
from .fused import Counter, GroupState
from .impl import Impl, NotNative
from .lower import Program, lower
from .memory import MemoryPlan, StepSpec, plan_memory
from .options import CompileOptions
from .profiler import Profile, set_part_sink
from .stats import PlanStats, build_stats


class BoundStep:
    __slots__ = ("fn", "inputs", "outputs", "fresh", "release", "impl", "note", "alias")

    def __init__(self, fn, inputs, outputs, impl: Impl, note: str, alias: tuple[int, ...] | None = None):
        self.fn = fn
        self.inputs = inputs
        self.outputs = outputs
        self.impl = impl
        self.note = note
        self.alias = alias
        self.fresh: list[tuple[int, tuple[int, ...], np.dtype]] = []
        self.release: list[int] = []


def _view(buffer: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return buffer[:n].view(dtype).reshape(shape)


class Arena:
    """One run's buffers: the slots of the memory plan and, per step, the output and scratch views into them."""

    __slots__ = ("outs", "work")

    def __init__(self, memory: MemoryPlan, steps: list[BoundStep], types: list[TensorType | None]):
        buffers = [np.empty(n, np.uint8) for n in memory.slot_bytes]
        views = {v: _view(buffers[s], tuple(types[v].shape), np_dtype(types[v].dtype))
                 for v, s in memory.placement.items()}
        for _, out, donor in memory.inplace:   # NOTE: one array object, so a kernel sees it runs in place
            views[out] = views[donor]
        self.outs = [[views.get(o) for o in st.outputs] for st in steps]
        self.work = [[_view(buffers[s], shape, dtype) for s, shape, dtype in w] for w in memory.work]


class Specialization:
    """The program bound to one input-shape signature: concrete types, bound steps, memory plan, arenas."""

    def __init__(self, program: Program, types: list[TensorType | None]):
        self.program = program
        self.types = types
        self.steps: list[BoundStep] = []
        specs: list[StepSpec] = []
        for step in program.steps:
            in_types = [types[i] if i < len(types) else None for i in step.inputs]
            out_types = [types[o] for o in step.outputs]
            impl = step.impl
            try:
                bound = impl.bind(in_types, out_types)
                note = bound.note
            except NotNative as exc:
                impl = step.fallback
                bound = impl.bind(in_types, out_types)
                note = f"reference here: {exc}"
            self.steps.append(BoundStep(bound.fn, step.inputs, step.outputs, impl, note, bound.alias))
            specs.append(StepSpec(step.inputs, step.outputs, impl.writes_outputs, impl.inplace, bound.workspace))
        self.memory = plan_memory(specs, types, {v for _, v in program.outputs})
        for bs, release in zip(self.steps, self.memory.release):
            bs.release = release
            bs.fresh = [(k, tuple(types[o].shape), np_dtype(types[o].dtype))
                        for k, o in enumerate(bs.outputs) if o in self.memory.fresh]
        self.env_template: list[Any] = [None] * (len(types) + 1)
        for v, array in program.consts.items():
            self.env_template[v] = array
        self._pool: list[Arena] = []
        self._pool_lock = threading.Lock()

    def acquire(self) -> Arena:
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return Arena(self.memory, self.steps, self.types)

    def release(self, arena: Arena) -> None:
        with self._pool_lock:
            if len(self._pool) < 8:
                self._pool.append(arena)

    def execute(self, env: list, arena: Arena, events: list | None = None, parts: list | None = None) -> None:
        """Run every step; with ``events`` (a list), append (step, start ns, duration ns) per step, and tag the
        (part, start, duration) records steps append to ``parts`` (the part sink) with their step."""
        outs_all, work_all = arena.outs, arena.work
        clock = time.perf_counter_ns
        t = start = -1
        try:
            for t, st in enumerate(self.steps):
                if events is not None:
                    start = clock()
                outs = outs_all[t]
                if st.fresh:
                    outs = list(outs)
                    for k, shape, dtype in st.fresh:
                        outs[k] = np.empty(shape, dtype)
                res = st.fn([env[i] for i in st.inputs], outs, work_all[t])
                for v, a in zip(st.outputs, res):
                    env[v] = a
                for v in st.release:
                    env[v] = None
                if events is not None:
                    events.append((t, start, clock() - start))
                    if parts:
                        parts[:] = [p if len(p) == 4 else (t, *p) for p in parts]
        except TlcError:
            raise
        except Exception as exc:  # a kernel failed: say which step, op and shapes
            raise self.failure(t, env, exc) from exc

    def failure(self, t: int, env: list, exc: Exception) -> ExecutionError:
        node = self.program.steps[t].node
        shapes = ", ".join("-" if env[i] is None else f"{env[i].dtype}{list(env[i].shape)}"
                           for i in self.steps[t].inputs)
        return ExecutionError(f"node {node.name!r} ({node.qualified_op}, {self.steps[t].impl.mode} kernel) "
                              f"failed on inputs ({shapes}): {type(exc).__name__}: {exc}")


class Plan:
    """A compiled graph: ``run(feeds) -> {name: array}``, ``stats()``, ``profile()``, ``wait_for_jit()``."""

    def __init__(self, graph: Graph, options: CompileOptions, timings: dict[str, float] | None = None):
        """Lower ``graph`` (already optimized; it is not changed) for ``options``; fused groups compile later."""
        start = time.perf_counter()
        self.options = options
        self.timings = dict(timings or {})
        self.pass_report: object | None = None     # the pass manager's report, when the pipeline ran
        self.name = graph.name
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()
        self.program = program = lower(graph, options, self.group_failed)
        self._feed_specs = [(name, t) for name, _, t in program.feeds]
        self._dynamic_feeds = [(name, v) for name, v, t in program.feeds if not t.is_static]
        self._const_ids = {id(a) for a in program.consts.values()}
        self._specs: OrderedDict[tuple, Specialization] = OrderedDict()
        self._specs_lock = threading.Lock()
        self._runs = Counter()
        self._profile = Profile(self)
        quiet = threads.quiet_openmp()
        self.blas_note = threads.blas_note(options.num_threads)
        if self.blas_note:
            self.warn_once("blas", self.blas_note)
        self.thread_note = threads.SPINNING_NOTE if not quiet and options.threads > 1 else ""
        if not self._dynamic_feeds:
            self._specs[()] = Specialization(program, program.value_types)
        self.timings["lower_ms"] = (time.perf_counter() - start) * 1e3

    # ------------------------------------------------------------------ interface
    @property
    def inputs(self) -> list[tuple[str, TensorType]]:
        return list(self._feed_specs)

    @property
    def outputs(self) -> list[tuple[str, TensorType | None]]:
        return [(name, self.program.value_types[v]) for name, v in self.program.outputs]

    @property
    def groups(self) -> list[GroupState]:
        return self.program.groups

    def run(self, feeds: Mapping[str, object], *, profile: bool = False) -> dict[str, np.ndarray]:
        """Run on ``feeds`` (input name -> array); returns output name -> a new array owned by the caller."""
        arrays, _ = check_feeds(self._feed_specs, feeds)
        spec = self._specialization(arrays)
        with threads.governed(self.options.num_threads, 1 if self.options.own_threads else None):
            return self._run(spec, arrays, profile)

    def _run(self, spec: Specialization, arrays: dict[str, np.ndarray], profile: bool) -> dict[str, np.ndarray]:
        env = list(spec.env_template)
        for name, v, _ in self.program.feeds:
            env[v] = arrays[name]
        arena = spec.acquire()
        try:
            if profile:
                events: list[tuple[int, int, int]] = []
                parts: list = []
                set_part_sink(parts)
                try:
                    start = time.perf_counter_ns()
                    spec.execute(env, arena, events, parts)
                    self._profile.record(start, time.perf_counter_ns() - start, events, parts)
                finally:
                    set_part_sink(None)
            else:
                spec.execute(env, arena)
            result = self._collect(env, spec, arrays)
        finally:
            spec.release(arena)
        self._runs.incr()
        return result

    def _collect(self, env: list, spec: Specialization, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs, copied wherever one might alias a buffer, a feed, a constant or another output."""
        protected = self._const_ids | {id(a) for a in feeds.values()}
        seen: set[int] = set()
        result = {}
        for name, v in self.program.outputs:
            array = env[v]
            owned = v in spec.memory.fresh or (array.base is None and array.flags.owndata
                                                and id(array) not in protected)
            if not owned or id(array) in seen:
                array = np.array(array, copy=True)
            seen.add(id(array))
            result[name] = array
        return result

    def _specialization(self, arrays: dict[str, np.ndarray]) -> Specialization:
        key = tuple(arrays[name].shape for name, _ in self._dynamic_feeds)
        with self._specs_lock:
            spec = self._specs.get(key)
            if spec is not None:
                self._specs.move_to_end(key)
                return spec
        spec = Specialization(self.program, self._bound_types(arrays))
        with self._specs_lock:
            spec = self._specs.setdefault(key, spec)
            while len(self._specs) > self.options.max_specializations:
                self._specs.popitem(last=False)
        return spec

    def _bound_types(self, arrays: dict[str, np.ndarray]) -> list[TensorType | None]:
        """Every value's type with the feeds' shapes bound (type inference re-run on a copy of the graph)."""
        program = self.program
        g = program.graph.copy()
        for name, v in self._dynamic_feeds:
            g.node(name).output_types[0] = TensorType(program.value_types[v].dtype, arrays[name].shape)
        try:
            g.infer_types()
        except ShapeInferenceError as exc:
            shapes = ", ".join(f"{n}: {list(arrays[n].shape)}" for n, _ in self._dynamic_feeds)
            raise ShapeMismatchError(f"the input shapes ({shapes}) do not fit the model: {exc}") from None
        return [g.type_of(v) for v in program.values]

    # ------------------------------------------------------------------ JIT, stats, profile
    def compile_groups(self) -> None:
        """Compile every fused group now (eager JIT), each in the variant the static shapes will run."""
        start = time.perf_counter()
        hints = self._alias_hints()
        for state in self.program.groups:
            state.compile(hints.get(id(state)))
        self.timings["jit_ms"] = (time.perf_counter() - start) * 1e3

    def _alias_hints(self) -> dict[int, tuple[int, ...]]:
        """Per group (by id): which input each output is written into when the static specialization runs."""
        spec = self._specs.get(())
        if spec is None:
            return {}
        hints = {}
        for t, step in enumerate(self.program.steps):
            state = getattr(step.impl, "state", None)
            if state is None or spec.steps[t].impl is not step.impl:
                continue
            alias = spec.steps[t].alias
            if alias is None:
                donors = {o: i for s, o, i in spec.memory.inplace if s == t}
                alias = tuple(step.inputs.index(donors[o]) if o in donors else -1 for o in step.outputs)
            hints[id(state)] = alias
        return hints

    def wait_for_jit(self, timeout: float | None = None) -> bool:
        """Wait for background (lazy) compilations; True when none is left running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for state in self.program.groups:
            future = state.future
            if future is not None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    future.result(left)
                except TimeoutError:
                    return False
        return True

    def warn_once(self, key: str, message: str) -> None:
        with self._warn_lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(f"plan {self.name!r}: {message}", RuntimeWarning, stacklevel=3)

    def group_failed(self, state: GroupState) -> None:
        failed = [g.name for g in self.program.groups if g.status == "failed"]
        self.warn_once("compile", f"fused group {state.name!r} could not be compiled and runs on the reference "
                                  f"path: {state.reason}" + (f" ({len(failed)} failed so far; see plan.stats())"
                                                             if len(failed) > 1 else ""))

    def compile_report(self) -> dict[str, float]:
        """Compile time split into passes, lowering (with the first specialization) and JIT, in seconds."""
        return {f"{key[:-3]}_s": ms / 1e3 for key, ms in self.timings.items()}

    @property
    def runs(self) -> int:
        return self._runs.value

    def stats(self) -> PlanStats:
        with self._specs_lock:
            specs = list(self._specs.values())
        return build_stats(self, specs)

    def profile(self, reset: bool = False) -> Profile:
        """Step timings of the runs made with ``profile=True`` (``reset`` starts a new record after this one)."""
        return self._profile.snapshot(reset=reset)

    def __repr__(self) -> str:
        return f"<Plan {self.name!r}: {len(self.program.steps)} steps, jit={self.options.jit}>"
