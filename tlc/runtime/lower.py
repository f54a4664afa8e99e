"""Lowering an optimized graph to a ``Program``: values numbered, one step per op, an ``Impl`` chosen per step.

The program is shape-independent; ``Specialization`` (plan.py) binds it to the concrete shapes of one input
signature. The choice per node, in order: a ``tlc.Fused`` group gets a ``FusedImpl`` (generated kernel or
reference body); an op with a library kernel gets it (``library.LIBRARY``); an elementwise op whose scalar
expression is one ufunc runs that ufunc; anything else runs its reference implementation, and the step says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ir.graph import TLC_DOMAIN, Graph, Node, Value
from ..ir.types import TensorType
from ..ops import opdef_of
from ..reference import Interpreter
from .fused import FusedImpl, GroupState
from .impl import Impl, NotNative, ReferenceImpl, TransposeViewImpl, ufunc_impl
from .library import TransposeImpl, library_impl
from .options import CompileOptions


@dataclass
class Step:
    index: int
    node: Node
    label: str                   # op, or "tlc.Fused[kind]"
    inputs: tuple[int, ...]      # value ids; Program.missing for an absent optional input
    outputs: tuple[int, ...]
    impl: Impl
    fallback: ReferenceImpl      # used where ``impl`` cannot bind to a specialization's shapes


@dataclass
class Program:
    graph: Graph
    values: list[Value]                          # value id -> (node, port) in ``graph``
    value_names: list[str]
    value_types: list[TensorType | None]
    feeds: list[tuple[str, int, TensorType]]     # (input name, value id, declared type)
    consts: dict[int, np.ndarray]
    steps: list[Step]
    outputs: list[tuple[str, int]]
    groups: list[GroupState]

    @property
    def missing(self) -> int:
        """The value id of an absent optional input (its slot in the environment always holds None)."""
        return len(self.value_names)


def is_fused(node: Node) -> bool:
    return node.domain == TLC_DOMAIN and node.op == "Fused"


def lower(graph: Graph, options: CompileOptions, on_group_failure: Callable[[GroupState], None]) -> Program:
    """Number the values of ``graph`` and choose an implementation for each op (the graph is not changed)."""
    ids: dict[Value, int] = {}
    refs: list[Value] = []
    names: list[str] = []
    types: list[TensorType | None] = []

    def number(v: Value) -> int:
        ids[v] = len(names)
        refs.append(v)
        names.append(graph.value_name(v))
        types.append(graph.type_of(v))
        return ids[v]

    feeds, consts, steps, groups = [], {}, [], []
    interp = Interpreter(graph)
    for node in graph.nodes():
        if node.domain == "" and node.op == "Input":
            feeds.append((node.name, number(node.output(0)), node.output_types[0]))
            continue
        if node.domain == "" and node.op == "Constant":
            consts[number(node.output(0))] = node.attrs["value"]
            continue
        ins = tuple(-1 if v is None else ids[v] for v in graph.inputs_of(node))
        outs = tuple(number(v) for v in node.outputs)
        impl, label = _choose(graph, node, options, interp, on_group_failure, groups)
        fallback = impl if isinstance(impl, ReferenceImpl) else ReferenceImpl(node, interp.run_node, "")
        steps.append(Step(len(steps), node, label, ins, outs, impl, fallback))
    missing = len(names)
    for st in steps:
        st.inputs = tuple(missing if i < 0 else i for i in st.inputs)
    outputs = [(name, ids[v]) for v, name in graph.outputs]
    transposes_as_views(steps, {v for _, v in outputs})
    return Program(graph, refs, names, types, feeds, consts, steps, outputs, groups)


def transposes_as_views(steps: list[Step], outputs: set[int]) -> None:
    """A Transpose whose every reader takes strided inputs (MatMul through BLAS) becomes a view: no copy.

    In a BERT block the per-head Q, K^T and V transposes feed matmuls only; a copy of each cost more than the
    strided matmul saves (337 us strided vs 318 us contiguous + 150 us of copies for 12 heads of 128x64).
    """
    readers: dict[int, list[tuple[Step, int]]] = {}
    for st in steps:
        for port, v in enumerate(st.inputs):
            readers.setdefault(v, []).append((st, port))
    for st in steps:
        if not isinstance(st.impl, TransposeImpl) or len(st.outputs) != 1 or st.outputs[0] in outputs:
            continue
        users = readers.get(st.outputs[0], [])
        if users and all(user.impl.accepts_strided(port) for user, port in users):
            st.impl = TransposeViewImpl(st.impl.perm_tuple)


def _choose(graph: Graph, node: Node, options: CompileOptions, interp: Interpreter,
            on_group_failure: Callable[[GroupState], None], groups: list[GroupState]) -> tuple[Impl, str]:
    if is_fused(node):
        attrs = opdef_of(node).resolved_attrs(node)
        input_types = [None if v is None else graph.type_of(v) for v in graph.inputs_of(node)]
        state = GroupState(node.name, attrs["body"], attrs["kind"], input_types, options, on_group_failure)
        groups.append(state)
        return FusedImpl(state), f"{node.qualified_op}[{attrs['kind']}]"
    reason = f"no native kernel for {node.qualified_op}"
    attrs = {k: v for k, v in opdef_of(node).resolved_attrs(node).items() if v is not None}
    try:
        impl = library_impl(node.qualified_op, attrs, node.num_outputs, options)
        if impl is not None:
            return impl, node.qualified_op
    except NotNative as exc:
        reason = str(exc)
    if node.domain == "":
        impl = ufunc_impl(node)
        if impl is not None:
            return impl, node.op
    return ReferenceImpl(node, interp.run_node, reason), node.qualified_op
