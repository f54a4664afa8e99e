"""A program bound to one input-shape signature: concrete types, values fixed by the shapes, bound steps,
a memory plan and the kernels its steps need.

Binding walks the steps once. A step whose inputs are all known for this signature (constants, and values
computed only from shapes: ``Shape``, ``Size`` and the index arithmetic exporters build on them) is evaluated
here, once, and leaves the program: a dynamic-batch model's ``Shape -> Gather -> Concat -> Reshape`` costs
nothing per run. Every other step is bound (``StepImpl.bind``); one that cannot bind runs its reference and says
why. The memory planner then places the values the steps write, and each step that needs a native kernel gets
a ``jit.Job`` for the variant the memory plan implies (an output written over a dying input is a kernel of its
own); ``runner.py`` turns the bound steps into one generated function.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeInferenceError, ShapeMismatchError, TlcError
from ..ir.graph import Graph, Value
from ..ir.types import TensorType, ValueType, is_tensor, np_dtype
from ..ops import Trait, opdef_of
from .bound import Bound, NotNative
from .impl import BindContext, ReferenceImpl, RunNode, opdef_attrs
from .jit import Job
from .lower import Program, Step
from .memory import MemoryPlan, StepSpec, plan_memory
from .options import CompileOptions

#: a step whose inputs are known is evaluated once per signature when its output has at most this many elements
FOLD_MAX_ELEMENTS = 1 << 16


@dataclass
class Active:
    """A step that runs: its bound form and, when it needs a kernel, the job that builds it."""

    step: Step
    bound: Bound
    job: Job | None = None
    alias: tuple[int, ...] | None = None    # per output: the input whose buffer it takes (-1: its own)


class Specialization:
    """``program`` bound to concrete ``types`` (see the module docstring)."""

    def __init__(self, program: Program, types: list[ValueType | None], options: CompileOptions,
                 run_node: RunNode, signature: str):
        self.program = program
        self.options = options
        self.types = list(types)
        self.signature = signature
        self.known: dict[int, np.ndarray] = dict(program.consts)
        self.strides: dict[int, tuple[int, ...]] = {}
        self.active: list[Active] = []
        self.folded: list[Step] = []
        types = self.types
        for step in program.steps:
            if not all(_static(types[o]) for o in step.outputs):
                self._infer(step)
            if self._fold(step, run_node):
                self.folded.append(step)
                continue
            ctx = BindContext(step.node, opdef_attrs(step.node), step.inputs, step.outputs,
                              [types[i] if i < len(types) else None for i in step.inputs],
                              [types[o] for o in step.outputs], self.known, self.strides, options, run_node)
            try:
                if (not all(_static(t) for t in ctx.out_types) and all(map(is_tensor, ctx.in_types + ctx.out_types))
                        and not step.impl.shapes_from_data):
                    raise NotNative("the output's shape depends on the input data")
                bound = step.impl.bind(ctx)
            except NotNative as exc:
                bound = ReferenceImpl(f"reference here: {exc}").bind(ctx)
            for o, s in zip(step.outputs, bound.out_strides or []):
                if s is not None:
                    self.strides[o] = s
            self.active.append(Active(step, bound))
        self.uses_blas = any(a.bound.blas for a in self.active)
        #: whether runs time themselves at all cores and at one thread (``plan.SpecState``), and what they chose
        self.probe_threads = options.threads > 1
        self.threads_note = ""
        #: values whose arrays come back from a call whose layout is not known here (reference results)
        self.unknown_layout = {o for a in self.active if not a.bound.writes_outputs and a.bound.out_strides is None
                               and a.bound.mode != "view" for o in a.step.outputs}
        graph_outputs = {v for _, v in program.outputs if v not in self.known}
        self.memory: MemoryPlan = plan_memory(
            [StepSpec(a.step.inputs, a.step.outputs, a.bound.writes_outputs, a.bound.inplace, a.bound.workspace,
                      a.bound.joins, a.bound.donors) for a in self.active], types, graph_outputs)
        for t in self.memory.joined:   # its producers wrote its inputs where its output lies: nothing to run
            self.active[t].bound = Bound([], mode="view", note="its inputs are written in place as its output's "
                                                              "ranges: no copy")
        inplace = {(t, o): i for t, o, i in self.memory.inplace}
        for t, a in enumerate(self.active):
            a.alias = tuple(a.step.inputs.index(inplace[(t, o)]) if (t, o) in inplace else -1
                            for o in a.step.outputs)
        self._lock = threading.Lock()
        self.generation = 0            # bumped when a kernel arrives: runners made before are stale

    # ------------------------------------------------------------------ folding values fixed by the shapes
    def _infer(self, step: Step) -> None:
        """Re-infer ``step``'s output types from its inputs' types and the values known for this signature (a
        Reshape whose shape was computed from the input shapes has a static output only now). A step on sequence
        or optional values keeps its types (it runs its reference, whatever they are)."""
        types = [self.types[v] for v in step.inputs + step.outputs if v < len(self.types)]
        if any(t is not None and not isinstance(t, TensorType) for t in types):
            return
        g = Graph("infer")
        ins = []
        for port, v in enumerate(step.inputs):
            if v in self.known:
                ins.append(g.constant(self.known[v]))
            elif v >= len(self.types) or self.types[v] is None:
                ins.append(None)
            else:
                ins.append(g.input(f"in{port}", self.types[v].dtype, self.types[v].shape))
        node = step.node
        try:
            out = g.add_node(node.op, ins, domain=node.domain, num_outputs=node.num_outputs, attrs=dict(node.attrs))
        except TlcError:  # inference stays where the graph's left it; the step then says why it cannot bind
            return
        for o, v in zip(step.outputs, [out] if isinstance(out, Value) else out):
            self.types[o] = g.type_of(v)

    def _fold(self, step: Step, run_node: RunNode) -> bool:
        opdef = opdef_of(step.node)
        if not opdef.has(Trait.PURE) or opdef.has(Trait.SUBGRAPH):
            return False
        types = self.types
        ins = []
        for port, v in enumerate(step.inputs):
            if v in self.known:
                ins.append(self.known[v])
            elif v >= len(types):
                ins.append(None)
            elif port == 0 and opdef.has(Trait.SHAPE_ONLY) and _static(types[v]):
                t = types[v]   # only the shape is read: a broadcast zero, nothing allocated
                ins.append(np.broadcast_to(np.zeros((), np_dtype(t.dtype)), tuple(t.shape)))
            else:
                return False
        outs = [types[o] for o in step.outputs]
        if any(not _static(t) or int(np.prod(t.shape)) > FOLD_MAX_ELEMENTS for t in outs):
            return False
        try:
            results = run_node(step.node, ins)
        except Exception:  # the step then runs, and fails there with a message that names it
            return False
        for o, r in zip(step.outputs, results):
            self.known[o] = np.asarray(r)
        return True

    # ------------------------------------------------------------------ kernels
    def jobs(self) -> list[Job]:
        return [a.job for a in self.active if a.job is not None]

    def make_jobs(self, on_done: Callable[[Job], None]) -> list[Job]:
        """A job per step that needs a kernel (not started); ``on_done`` is called as each finishes."""
        made = []
        for a in self.active:
            request = a.bound.request
            if request is None or a.job is not None:
                continue
            alias = a.alias
            a.job = Job(f"{a.step.label} {a.step.node.name}", lambda r=request, al=alias: r.build(al))
            a.job.on_done(self._arrived)
            a.job.on_done(on_done)
            made.append(a.job)
        return made

    def _arrived(self, job: Job) -> None:
        with self._lock:
            self.generation += 1

    def calls_of(self, a: Active) -> tuple[list, str]:
        """The calls step ``a`` makes now, and how it runs: its kernel's once ready, else its fallback."""
        job = a.job
        if job is not None and job.status == "ready":
            return a.bound.request.calls(job.result, a.alias), a.bound.mode
        if a.bound.request is None:
            return a.bound.calls, a.bound.mode
        return a.bound.calls, "fallback"


def _static(t: ValueType | None) -> bool:
    """A tensor type whose every dim is known (a sequence or optional value never is)."""
    return isinstance(t, TensorType) and t.is_static


def bound_types(program: Program, shapes: dict[str, tuple[int, ...]]) -> list[ValueType | None]:
    """Every value's type with the feeds' shapes bound (type inference re-run on a copy of the graph)."""
    g = program.graph.copy()
    for name, _, t in program.feeds:
        if name in shapes:
            g.node(name).output_types[0] = TensorType(t.dtype, shapes[name])
    try:
        g.infer_types()
    except ShapeInferenceError as exc:
        given = ", ".join(f"{n}: {list(s)}" for n, s in shapes.items())
        raise ShapeMismatchError(f"the input shapes ({given}) do not fit the model: {exc}") from None
    return [g.type_of(v) for v in program.values]
