"""Lowering an optimized graph to a ``Program``: values numbered, one step per op, an implementation per step.

The program is shape-independent; ``specialize.Specialization`` binds it to the concrete shapes of one input
signature. Each step's implementation comes from the target's table (``ops.choose``). A Transpose whose every
reader takes strided inputs (a BLAS operand) becomes a view. A step that reads or makes a sequence or optional
value (``tlc.ir.types``) runs its reference implementation, whatever the table says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.graph import TLC_DOMAIN, Graph, Node, Value
from ..ir.types import ValueType, is_tensor
from ..ops import opdef_of
from .impl import ReferenceImpl, StepImpl
from .library import TransposeImpl, TransposeViewImpl
from .ops import choose
from .options import CompileOptions


@dataclass
class Step:
    index: int
    node: Node
    label: str                   # op, or "tlc.Fused[kind]"
    inputs: tuple[int, ...]      # value ids; Program.missing for an absent optional input
    outputs: tuple[int, ...]
    impl: StepImpl


@dataclass
class Program:
    graph: Graph
    values: list[Value]                          # value id -> (node, port) in ``graph``
    value_names: list[str]
    value_types: list[ValueType | None]          # TensorType but for sequence and optional values
    feeds: list[tuple[str, int, ValueType]]      # (input name, value id, declared type)
    consts: dict[int, np.ndarray]
    steps: list[Step]
    outputs: list[tuple[str, int]]

    @property
    def missing(self) -> int:
        """The value id of an absent optional input (never assigned)."""
        return len(self.value_names)


def is_fused(node: Node) -> bool:
    return node.domain == TLC_DOMAIN and node.op == "Fused"


def label_of(node: Node) -> str:
    if is_fused(node):
        return f"{node.qualified_op}[{opdef_of(node).resolved_attrs(node)['kind']}]"
    return node.qualified_op


#: why a step on sequence or optional values runs its reference (``plan.stats()``)
NON_TENSOR_REASON = "sequence and optional values run on the reference implementation"


def lower(graph: Graph, options: CompileOptions) -> Program:
    """Number the values of ``graph`` and choose an implementation for each op (the graph is not changed)."""
    ids: dict[Value, int] = {}
    refs: list[Value] = []
    names: list[str] = []
    types: list[ValueType | None] = []

    def number(v: Value) -> int:
        ids[v] = len(names)
        refs.append(v)
        names.append(graph.value_name(v))
        types.append(graph.type_of(v))
        return ids[v]

    feeds, consts, steps = [], {}, []
    for node in graph.nodes():
        if node.domain == "" and node.op == "Input":
            feeds.append((node.name, number(node.output(0)), node.output_types[0]))
            continue
        if node.domain == "" and node.op == "Constant":
            consts[number(node.output(0))] = np.asarray(node.attrs["value"])
            continue
        ins = tuple(-1 if v is None else ids[v] for v in graph.inputs_of(node))
        outs = tuple(number(v) for v in node.outputs)
        if all(is_tensor(types[i]) for i in ins + outs if i >= 0):
            impl = choose(node, options)
        else:
            impl = ReferenceImpl(NON_TENSOR_REASON)
        steps.append(Step(len(steps), node, label_of(node), ins, outs, impl))
    missing = len(names)
    for st in steps:
        st.inputs = tuple(missing if i < 0 else i for i in st.inputs)
    outputs = [(name, ids[v]) for v, name in graph.outputs]
    transposes_as_views(steps, {v for _, v in outputs})
    return Program(graph, refs, names, types, feeds, consts, steps, outputs)


def transposes_as_views(steps: list[Step], outputs: set[int]) -> None:
    """A Transpose whose every reader takes strided inputs (BLAS operands) becomes a view: no copy.

    In a BERT block the per-head Q, K^T and V transposes feed matmuls only; a copy of each cost more than the
    strided matmul saves (337 us strided vs 318 us contiguous + 150 us of copies for 12 heads of 128x64, both on
    BLAS). Except a float32 transpose that moves the last axis into a product's B (K^T): copied, B takes the
    panel product where it is, which a transposed B cannot (ViT-Tiny's scores, 3 heads of 197 x 64 x 197: 139
    us on BLAS from the view, 62 + 11 us of copy in panels).
    """
    readers: dict[int, list[tuple[Step, int]]] = {}
    for st in steps:
        for port, v in enumerate(st.inputs):
            readers.setdefault(v, []).append((st, port))
    for st in steps:
        if not isinstance(st.impl, TransposeImpl) or len(st.outputs) != 1 or st.outputs[0] in outputs:
            continue
        users = readers.get(st.outputs[0], [])
        perm = st.impl.perm
        moves_last = perm is None or perm[-1] != len(perm) - 1
        out_type = st.node.output_types[0]
        if moves_last and out_type is not None and any(user.impl.wants_unit_columns(port, out_type.dtype)
                                                        for user, port in users):
            continue
        if users and all(user.impl.accepts_strided(port) for user, port in users):
            st.impl = TransposeViewImpl(st.impl.perm)
