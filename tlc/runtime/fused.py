"""``tlc.Fused`` steps: a generated kernel from ``tlc.kernels.compile_group``, or the body on the reference path.

A ``GroupState`` holds one group's kernel. It starts on the reference path (``tlc.reference.run_graph`` of
the body, copied into the planned outputs) and a compiled kernel is swapped in by one attribute assignment, so
runs in flight finish with whichever they read. Eager JIT compiles in ``compile()``; lazy JIT compiles on a
background thread once the group has run ``hot_threshold`` times. A group that fails to compile stays on the
reference path; the plan warns once and ``stats()`` gives the reason (no silent fallback).

``codegen()`` is the one adapter to ``tlc.kernels``; everything else here calls through it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import CompileError, ExecutionError
from ..ir.graph import Graph
from ..ir.types import TensorType
from ..reference import run_graph
from .impl import Bound, Impl, NotNative, static_shapes
from .library import library_impl
from .options import CompileOptions
from .parts import PartsBound, Split, output_split, part_of, parts_note, slab
from .profiler import part_sink
from .workers import workers

CompileFn = Callable[..., Any]   # (body, kind, input types, options, alias=None) -> kernel
_CACHES: dict[str, Any] = {}
_CACHES_LOCK = threading.Lock()


def codegen() -> tuple[CompileFn, Callable[[Graph], tuple[Graph, Graph]]]:
    """``(compile_fn, split_epilogue)`` over ``tlc.kernels``; CompileError while code generation is missing.

    ``compile_fn(body, kind, input_types, options)`` turns ``CompileOptions`` into the kernel library's options
    and cache (one ``KernelCache`` per directory, shared by all plans; None: the library's default cache).
    """
    try:
        from ..kernels import KernelCache, KernelOptions, compile_group, split_epilogue
    except ImportError as exc:
        raise CompileError(f"code generation is not available: {exc}") from None

    def compile_fn(body: Graph, kind: str, input_types: list, options: CompileOptions,
                   alias: tuple[int, ...] | None = None) -> Any:
        cache = None
        if options.cache_dir is not None:
            with _CACHES_LOCK:
                cache = _CACHES.setdefault(options.cache_dir, KernelCache(options.cache_dir))
        kernel_options = KernelOptions(fast_math=options.fast_math, num_threads=options.num_threads)
        return compile_group(body, kind, input_types, target=options.target, options=kernel_options, cache=cache,
                             alias=alias if kind == "elementwise" else None)

    return compile_fn, split_epilogue


class Counter:
    """A thread-safe counter (runs call groups from several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def incr(self) -> int:
        with self._lock:
            self.value += 1
            return self.value


_JIT_POOL: ThreadPoolExecutor | None = None
_JIT_POOL_LOCK = threading.Lock()


def jit_pool() -> ThreadPoolExecutor:
    """The background JIT thread, shared by all plans (Numba compiles one function at a time anyway)."""
    global _JIT_POOL
    with _JIT_POOL_LOCK:
        if _JIT_POOL is None:
            _JIT_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlc-jit")
        return _JIT_POOL


def _why(exc: Exception) -> str:
    """A failure's reason for ``stats()``: a CompileError's message, or the type and message of a bug."""
    return str(exc) if isinstance(exc, CompileError) else f"{type(exc).__name__}: {exc}"


class GroupState:
    """One fused group's compiled kernel (or None: reference path), its counters and compile record."""

    def __init__(self, name: str, body: Graph, kind: str, input_types: list[TensorType | None],
                 options: CompileOptions, on_failure: Callable[[GroupState], None]):
        self.name = name
        self.body = body
        self.kind = kind
        self.input_types = input_types
        self.options = options
        self.on_failure = on_failure
        self.kernel: Any = None            # NOTE: swapped in by one assignment; readers take it once per call
        self.split: EpilogueSplit | None = None
        self.split_error = ""
        self.status = "reference"          # reference | compiling | native | failed
        self.reason = {"off": "jit='off'", "lazy": "lazy JIT: not hot yet"}.get(options.jit, "not compiled yet")
        self.compile_ms: float | None = None
        self.cache_hit: bool | None = None
        self.calls = Counter()
        self.future: Future | None = None
        self._lock = threading.Lock()
        if kind == "epilogue":
            self._split()

    # ------------------------------------------------------------------ compiling
    def compile(self, alias: tuple[int, ...] | None = None) -> None:
        """Compile now (on the calling thread); on failure keep the reference path and record why. ``alias``:
        the in-place pattern the first runs will use (see ``tlc.kernels.compile_group``)."""
        start = time.perf_counter()
        try:
            kernel = self._build(alias)
        except Exception as exc:  # a codegen bug too must reach the user, also from the JIT thread
            self.reason = _why(exc)
            self.status = "failed"
            self.on_failure(self)
            return
        finally:
            self.compile_ms = (time.perf_counter() - start) * 1e3
        self.cache_hit = bool(getattr(kernel, "cache_hit", False))
        self.reason = f"compiled {getattr(kernel, 'name', 'kernel')}"
        self.status = "native"
        self.kernel = kernel

    def _build(self, alias: tuple[int, ...] | None) -> Any:
        compile_fn, _ = codegen()
        if self.kind != "epilogue":
            return compile_fn(self.body, self.kind, self.input_types, self.options, alias)
        if self.split is None:
            raise CompileError(f"epilogue group {self.name!r} could not be split: {self.split_error}")
        ew = self.split.elementwise
        return compile_fn(ew, "elementwise", [n.output_types[0] for n in ew.inputs], self.options, alias)

    def _split(self) -> None:
        try:
            _, split_epilogue = codegen()
            self.split = EpilogueSplit(self.body, *split_epilogue(self.body))
        except Exception as exc:  # a codegen bug too: the group then stays on the reference path, with why
            self.split_error = _why(exc)

    def schedule(self) -> Future:
        """Compile on the background JIT thread (once)."""
        with self._lock:
            if self.future is None:
                self.status = "compiling"
                self.future = jit_pool().submit(self.compile)
            return self.future

    # ------------------------------------------------------------------ running
    def run_reference(self, ins: list, outs: list) -> list:
        n = self.calls.incr()
        if n == self.options.hot_threshold and self.options.jit == "lazy":
            self.schedule()
        results = run_graph(self.body, ins)
        for port, (out, res) in enumerate(zip(outs, results)):
            if out.shape != res.shape:
                raise ExecutionError(f"fused group {self.name!r}: body output {port} has shape "
                                     f"{list(res.shape)}, planned {list(out.shape)}")
            np.copyto(out, res)
        return outs


class EpilogueSplit:
    """An epilogue group cut in two: the contraction (a library kernel) and the elementwise part (generated).

    ``c_sources`` gives, per input port of the contraction op, a group input index or a constant array;
    ``ew_sources`` gives, per input of the elementwise body, "acc" (input 0: the contraction) or a group input,
    which gets trailing 1-dims where the body declares it with more (a bias moved out of the contraction).
    """

    def __init__(self, body: Graph, contraction: Graph, elementwise: Graph):
        self.contraction = contraction
        self.elementwise = elementwise
        ops = contraction.ops()
        if len(ops) != 1:
            raise CompileError(f"contraction part has {len(ops)} ops, expected 1")
        self.node = ops[0]
        group_inputs = {n.name: i for i, n in enumerate(body.inputs)}
        self.c_sources: list[Any] = []
        for v in contraction.inputs_of(self.node):
            producer = None if v is None else contraction.node(v)
            if producer is None:
                self.c_sources.append(None)
            elif producer.op == "Constant":
                self.c_sources.append(contraction.const_value(v))
            elif producer.name in group_inputs:
                self.c_sources.append(group_inputs[producer.name])
            else:
                raise CompileError(f"contraction input {producer.name!r} is not a group input")
        # NOTE: tlc.kernels' contract: the elementwise body's input 0 is the contraction's result; the others
        # (and the contraction body's inputs) keep the names of the group body's inputs.
        self.ew_sources: list[Any] = ["acc"]
        self.ew_ranks: list[int | None] = [None]   # per elementwise input: the rank it is declared with
        for node in elementwise.inputs[1:]:
            if node.name not in group_inputs:
                raise CompileError(f"epilogue input {node.name!r} is not a group input")
            self.ew_sources.append(group_inputs[node.name])
            shape = node.output_types[0].shape
            self.ew_ranks.append(None if shape is None else len(shape))

    def bind(self, in_types: list[TensorType | None], out_types: list[TensorType | None],
             options: CompileOptions) -> tuple[Bound, bool, PartsBound | None]:
        """The contraction bound to concrete types, whether it can write straight into output 0, and its parts
        when the runtime's workers should run it (and the epilogue) in slabs of the output."""
        types = [TensorType.of(s) if isinstance(s, np.ndarray) else None if s is None else in_types[s]
                 for s in self.c_sources]
        typed = self.contraction.copy()
        for v, t in zip(typed.inputs_of(self.node), types):
            if v is not None:
                typed.set_type(v, t)
        typed.infer_node(typed.node(self.node.id))
        acc_type = typed.node(self.node.id).output_types[0]
        impl = library_impl(self.node.qualified_op, self.node.attrs, self.node.num_outputs, options)
        if impl is None:
            raise NotNative(f"no library kernel for contraction {self.node.op}")
        in_place = len(self.elementwise.outputs) == 1 and acc_type == out_types[0]
        bind_parts = getattr(impl, "bind_parts", None)
        parts = bind_parts(types, [acc_type]) if bind_parts is not None else None
        if parts is not None and any(t is None or t.shape != acc_type.shape for t in out_types):
            parts = None   # an output of another shape than the product: no common slabs
        bound = impl.bind(types, [acc_type]) if parts is None else Bound(None, parts.workspace, parts_note(parts))
        if not in_place:
            static_shapes([acc_type], "contraction output")
            bound = Bound(bound.fn, bound.workspace + [(tuple(acc_type.shape), np.dtype(acc_type.dtype))],
                          bound.note)
        return bound, in_place, parts


class FusedImpl(Impl):
    """A ``tlc.Fused`` step: whatever kernel its ``GroupState`` holds at the moment of each call."""

    def __init__(self, state: GroupState):
        self.state = state

    @property
    def mode(self) -> str:  # type: ignore[override]
        return "native" if self.state.kernel is not None else "reference"

    @property
    def reason(self) -> str:  # type: ignore[override]
        return self.state.reason

    @property
    def inplace(self) -> bool:  # type: ignore[override]
        return self.state.kind == "elementwise"

    def accepts_strided(self, port: int) -> bool:
        """An input that only the contraction of an epilogue reads (BLAS takes strides; the kernel does not)."""
        split = self.state.split
        if split is None or port in split.ew_sources:
            return False
        c_ports = [p for p, s in enumerate(split.c_sources) if isinstance(s, int) and s == port]
        if not c_ports:
            return False
        try:
            impl = library_impl(split.node.op, split.node.attrs, split.node.num_outputs, self.state.options)
        except NotNative:
            return False
        return impl is not None and all(impl.accepts_strided(p) for p in c_ports)

    def bind(self, in_types, out_types) -> Bound:
        out_shapes = static_shapes(out_types, "output")
        state = self.state
        split = state.split
        if split is None:
            launch = _launcher(state, in_types, out_shapes)

            def fn(ins, outs, work):
                kernel = state.kernel
                if kernel is None:
                    return state.run_reference(ins, outs)
                launch(kernel, [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in ins], outs)
                return outs

            return Bound(fn)
        cbound, in_place, parts = split.bind(in_types, out_types, state.options)
        c_sources, ew_sources, cfn = split.c_sources, split.ew_sources, cbound.fn
        cnote = f"{split.node.op} {cbound.note}".strip()
        acc_type = out_types[0] if in_place else TensorType(out_types[0].dtype, cbound.workspace[-1][0])
        ew_types = [acc_type if s == "acc" else _expanded_type(in_types[s], r) for s, r in zip(ew_sources,
                                                                                              split.ew_ranks)]
        expand = [(k, t.shape) for k, (s, t) in enumerate(zip(ew_sources, ew_types))
                  if s != "acc" and t is not None and t.shape != in_types[s].shape]
        launch = _launcher(state, ew_types, out_shapes)
        alias = (0,) + (-1,) * (len(out_shapes) - 1) if in_place else None
        if parts is not None and all(t is not None and t.is_static for t in ew_types):
            fn = _epilogue_in_parts(state, parts, c_sources, ew_sources, ew_types, expand, out_shapes, in_place)
            return Bound(fn, cbound.workspace, cbound.note, alias)

        def fn_epilogue(ins, outs, work):
            kernel = state.kernel
            if kernel is None:
                return state.run_reference(ins, outs)
            acc = outs[0] if in_place else work[-1]
            sink = part_sink()
            start = time.perf_counter_ns() if sink is not None else 0
            cfn([s if not isinstance(s, int) else ins[s] for s in c_sources], [acc], work)
            if sink is not None:
                middle = time.perf_counter_ns()
                sink.append((f"contraction ({cnote})", start, middle - start))
            ew_ins = [acc if s == "acc" else ins[s] for s in ew_sources]
            for k, shape in expand:
                ew_ins[k] = ew_ins[k].reshape(shape)
            launch(kernel, [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in ew_ins], outs)
            if sink is not None:
                sink.append(("elementwise kernel", middle, time.perf_counter_ns() - middle))
            return outs

        return Bound(fn_epilogue, cbound.workspace, cbound.note, alias)


def _epilogue_in_parts(state: GroupState, parts: PartsBound, c_sources, ew_sources, ew_types, expand,
                       out_shapes, in_place: bool):
    """An epilogue step whose contraction runs in slabs on the runtime's workers, each slab's elementwise
    kernel right after it on the same thread (the slab still in that core's cache). Column slabs (strided:
    ``parts.column_split``) all finish first; the kernel then runs in row slabs of the whole product."""
    split, rank = parts.split, len(out_shapes[0])
    count = len(split.bounds)
    contraction_parts = None
    if split.axis == rank - 1 and rank > 1:
        # column slabs are strided: the contraction runs in them, then the kernel in row slabs of the result
        contraction_parts = parts.parts
        split = output_split(tuple(out_shapes[0][:-1]) + (1,), count) or Split(0, [(0, out_shapes[0][0])])
        count = len(split.bounds)
    ew_slabs = [[slab(tuple(t.shape), rank, split, k) for t in ew_types] for k in range(count)]
    out_slabs = [slab(tuple(out_shapes[0]), rank, split, k) for k in range(count)]
    launches = [_launcher(state, [TensorType(t.dtype, _sliced(t.shape, i)) for t, i in zip(ew_types, ew_slabs[k])],
                          [_sliced(s, out_slabs[k]) for s in out_shapes], serial=True) for k in range(count)]
    alias = (0,) + (-1,) * (len(out_shapes) - 1) if in_place else (-1,) * len(out_shapes)
    pool = workers(len(parts.parts))

    def part(k, c_ins, ew_ins, outs, acc, work, kernel):
        if contraction_parts is None:
            parts.parts[k](c_ins, [acc], work)
        launches[k](kernel, [part_of(a, i) for a, i in zip(ew_ins, ew_slabs[k])],
                    [part_of(o, out_slabs[k]) for o in outs], alias)

    def fn(ins, outs, work):
        kernel = state.kernel
        if kernel is None:
            return state.run_reference(ins, outs)
        acc = outs[0] if in_place else work[-1]
        c_ins = [s if not isinstance(s, int) else ins[s] for s in c_sources]
        if parts.prepare:
            pool.run([functools.partial(f, c_ins, [acc], work) for f in parts.prepare])
        sink = part_sink()
        start = time.perf_counter_ns() if sink is not None else 0
        if contraction_parts is not None:
            pool.run([functools.partial(f, c_ins, [acc], work) for f in contraction_parts])
        ew_ins = [acc if s == "acc" else ins[s] for s in ew_sources]
        for k, shape in expand:
            ew_ins[k] = ew_ins[k].reshape(shape)
        ew_ins = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in ew_ins]
        pool.run([functools.partial(part, k, c_ins, ew_ins, outs, acc, work, kernel) for k in range(count)])
        if sink is not None:
            label = (f"{count} parts: contraction + kernel" if contraction_parts is None
                     else f"{len(contraction_parts)} column parts, then {count} kernel parts")
            sink.append((label, start, time.perf_counter_ns() - start))
        return outs

    return fn


def _sliced(shape, index) -> tuple[int, ...]:
    """The shape of ``array[index]`` for an array of ``shape`` (``index``: a slab or None)."""
    if index is None:
        return tuple(shape)
    out = list(shape)
    axis = len(index) - 1
    out[axis] = index[axis].stop - index[axis].start
    return tuple(out)


def _expanded_type(t: TensorType | None, rank: int | None) -> TensorType | None:
    """``t`` with trailing 1-dims up to ``rank`` (how a moved bias broadcasts in the elementwise body)."""
    if t is None or t.shape is None or rank is None or rank <= len(t.shape):
        return t
    return TensorType(t.dtype, tuple(t.shape) + (1,) * (rank - len(t.shape)))


def _launcher(state: GroupState, in_types: list[TensorType | None], out_shapes: list,
              serial: bool = False) -> Callable[..., None]:
    """``launch(kernel, ins, outs, alias=None)``: the kernel's ``Launcher`` for these shapes, made for each kernel
    swapped in (or its checked ``__call__`` where the shapes are not static); ``serial`` for a part of a step
    that already runs on several threads."""
    try:
        in_shapes = static_shapes(in_types, "input")
    except NotNative:
        return lambda kernel, ins, outs, alias=None: kernel(ins, outs)
    bound: list[tuple[Any, Any]] = [(None, None)]  # (kernel, its launcher), replaced as one tuple

    def launch(kernel, ins, outs, alias=None) -> None:
        made_for, launcher = bound[0]
        if made_for is not kernel:
            launcher = kernel.launcher(in_shapes, out_shapes, serial=serial)
            bound[0] = (kernel, launcher)
        launcher(ins, outs, alias)

    return launch
