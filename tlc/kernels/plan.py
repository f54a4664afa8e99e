"""Analysis of a fused group's body into a target-independent kernel plan.

A plan is a straight-line scalar program over named variables: loads of the kernel's array operands, scalar
ops whose expressions come from the op registry (``OpDef.expr``), row reductions (for ``"reduction"``
groups, from each op's ``OpDef.row_form``) and stores into the outputs. Renderers (CPU, CUDA) turn it into
loops. Variable names are generated here (``a0``, ``t3``); nothing named in the model reaches a plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from ..errors import CompileError
from ..ir.graph import Graph, Node, Value
from ..ir.types import Shape
from ..ops import expr as E
from ..ops import lookup
from ..ops.infer import broadcast_shapes

#: dtypes generated kernels compute in. Everything else goes to the reference path by design: float16, strings and
#: the ml_dtypes types (``tlc.ir.types.ML_DTYPES``: bfloat16, float8, int4, ...), which Numba cannot compute in; a
#: step or group touching one is a reference step whose reason names the dtype, never a failed compile.
SUPPORTED_DTYPES = frozenset(
    {"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"}
)
KINDS = ("elementwise", "reduction")


@dataclass(frozen=True)
class Operand:
    """An array the kernel reads or writes: its dtype and (possibly symbolic) shape."""

    dtype: str
    shape: Shape


@dataclass(frozen=True)
class ScalarOp:
    """``target = expr`` where ``arg(i)`` of ``expr`` is variable ``args[i]`` (of dtype ``arg_dtypes[i]``)."""

    target: str
    expr: E.Expr
    args: tuple[str | None, ...]
    arg_dtypes: tuple[str | None, ...]
    dtype: str


@dataclass(frozen=True)
class Reduce:
    """``target`` = the ``op`` ("sum", "max", "min") of ``source`` over the row (the last axis)."""

    target: str
    source: str
    op: str
    dtype: str


@dataclass
class KernelPlan:
    kind: str
    operands: list[Operand]
    outputs: list[Operand]
    full_shape: Shape
    loads: list[tuple[str, int]] = field(default_factory=list)  # (variable, operand index)
    steps: list[ScalarOp | Reduce] = field(default_factory=list)
    stores: list[tuple[int, str]] = field(default_factory=list)  # (output index, variable)
    constants: dict[int, np.ndarray] = field(default_factory=dict)  # operand index -> hoisted array
    row_length: set[str] = field(default_factory=set)  # dtypes of the row-length variable
    dtypes: dict[str, str] = field(default_factory=dict)  # variable -> dtype

    def fingerprint(self) -> str:
        """The plan's structure as text (what a renderer draws from; hoisted constants' values left out)."""
        return repr((self.kind, self.operands, self.outputs, self.full_shape, self.loads, self.steps, self.stores,
                     sorted(self.constants), sorted(self.row_length), sorted(self.dtypes.items())))

    def uses(self) -> set[str]:
        """Variables some store or step reads."""
        used = {var for _, var in self.stores}
        for step in self.steps:
            used |= {a for a in step.args if a is not None} if isinstance(step, ScalarOp) else {step.source}
        return used


def row_length_var(dtype: str) -> str:
    """The name under which a row kernel provides the row length, converted to ``dtype``."""
    return f"rowlen_{dtype}"


class PlanBuilder:
    """Walks the body in topological order; row forms (``OpDef.row_form``) write through it: it is the
    ``tlc.ops.rowform.RowBuilder`` they are handed."""

    def __init__(self, body: Graph, kind: str):
        self.body = body
        self.kind = kind
        self.plan = KernelPlan(kind, [], [], ())
        self.var_of: dict[Value, str] = {}
        self._count = 0
        self._seen: dict[tuple, str] = {}  # structural key of a step -> its variable (CSE within the group)

    def new_var(self, dtype: str) -> str:
        name = f"t{self._count}"
        self._count += 1
        self.plan.dtypes[name] = dtype
        return name

    def add_op(self, expr: E.Expr, args: list[str | None], dtype: str) -> str:
        key = ("op", repr(expr), tuple(args), dtype)
        if key not in self._seen:
            target = self._seen[key] = self.new_var(dtype)
            arg_dtypes = tuple(None if a is None else self.plan.dtypes[a] for a in args)
            self.plan.steps.append(ScalarOp(target, expr, tuple(args), arg_dtypes, dtype))
        return self._seen[key]

    def add_reduce(self, source: str, op: str) -> str:
        key = ("reduce", source, op)
        if key not in self._seen:
            dtype = self.plan.dtypes[source]
            if dtype == "bool":   # the renderers' accumulators are numbers (Numba failed to type max's start)
                self.fail(None, f"a row {op} of bool values (no row kernel reduces bool; the reference does)")
            target = self._seen[key] = self.new_var(dtype)
            self.plan.steps.append(Reduce(target, source, op, dtype))
        return self._seen[key]

    def row_length(self, dtype: str) -> str:
        self.plan.row_length.add(dtype)
        self.plan.dtypes[row_length_var(dtype)] = dtype
        return row_length_var(dtype)

    def fail(self, node: Node | None, message: str) -> NoReturn:
        where = f"{node.qualified_op} node #{node.id}: " if node is not None else ""
        raise CompileError(f"cannot compile {self.kind} group: {where}{message}")

    def type_of(self, value: Value):
        t = self.body.type_of(value)
        if t is None or t.shape is None:
            self.fail(self.body.node(value.node), "a value has no known rank")
        if t.dtype not in SUPPORTED_DTYPES:
            self.fail(
                self.body.node(value.node),
                f"dtype {t.dtype} is not supported by generated kernels "
                f"(supported: {', '.join(sorted(SUPPORTED_DTYPES))})",
            )
        return t


def typed_body(body: Graph, input_types: list) -> Graph:
    """``body`` re-typed for ``input_types``; a body those types do not fit cannot be compiled."""
    from ..errors import TlcError
    from ..ops.fused import body_with_input_types

    try:
        return body_with_input_types(body, list(input_types))
    except TlcError as exc:
        types = ", ".join(map(str, input_types))
        raise CompileError(f"cannot type the group's body for inputs ({types}): {exc}") from exc


def build_plan(body: Graph, kind: str) -> KernelPlan:
    """The plan of a typed body (see ``tlc.ops.fused.body_with_input_types``); CompileError if it has none."""
    from .rowops import expand_row_op  # rowops builds on PlanBuilder

    if kind not in KINDS:
        raise CompileError(f"cannot compile a group of kind {kind!r}; expected one of {', '.join(KINDS)}")
    b = PlanBuilder(body, kind)
    if not body.outputs:
        b.fail(None, "the body has no outputs")
    shapes = []
    for i, node in enumerate(body.inputs):
        t = b.type_of(node.output(0))
        b.plan.operands.append(Operand(t.dtype, t.shape))
        shapes.append(t.shape)
        b.var_of[node.output(0)] = _load(b, i, t.dtype)
    for node in body.nodes():
        if node.domain == "" and node.op == "Input":
            continue
        if node.domain == "" and node.op == "Constant":
            _constant(b, node)
            continue
        opdef = lookup(node.op, node.domain)
        if opdef is not None and opdef.is_elementwise:
            _elementwise(b, node, opdef)
        elif kind == "reduction" and opdef is not None:
            results = expand_row_op(b, node, opdef)
            for port, var in enumerate(results):
                b.var_of[node.output(port)] = var
        else:
            b.fail(node, "only elementwise ops (and last-axis reductions in reduction groups) are supported")
        for v in node.outputs:
            shapes.append(b.type_of(v).shape)
    b.plan.full_shape = _full_shape(b, shapes)
    for value, _ in body.outputs:
        t = b.type_of(value)
        _check_output_shape(b, t.shape, body.node(value.node))
        b.plan.stores.append((len(b.plan.outputs), b.var_of[value]))
        b.plan.outputs.append(Operand(t.dtype, t.shape))
    _drop_unused(b.plan)
    return b.plan


def _load(b: PlanBuilder, operand: int, dtype: str) -> str:
    var = f"a{operand}"
    b.plan.dtypes[var] = dtype
    b.plan.loads.append((var, operand))
    return var


def _constant(b: PlanBuilder, node: Node) -> None:
    value = np.asarray(node.attrs["value"])
    out = node.output(0)
    if value.dtype.kind not in "biuf":
        return  # e.g. a string constant: fine as long as nothing computes with it (checked on use)
    dtype = b.type_of(out).dtype
    if value.size == 1:
        # NOTE: Expr("const") accepts only numbers, so a scalar constant reaches the source as a number
        b.var_of[out] = b.add_op(E.const(value.reshape(()).item()), [], dtype)
    else:  # a small broadcast constant: passed to the kernel as an extra operand, never written into source
        index = len(b.plan.operands)
        b.plan.operands.append(Operand(dtype, tuple(value.shape)))
        b.plan.constants[index] = np.array(value, order="C")  # writeable: Numba types read-only arrays apart
        b.var_of[out] = _load(b, index, dtype)


def _elementwise(b: PlanBuilder, node: Node, opdef) -> None:
    if node.num_outputs != 1:
        b.fail(node, f"elementwise op with {node.num_outputs} outputs")
    args: list[str | None] = []
    leaves: list[E.Expr | None] = []
    for port, v in enumerate(b.body.inputs_of(node)):
        scalar = _scalar_constant(b.body, v)
        if scalar is not None:  # folded into the expression: typed by its use, visible to peepholes (x ** 2)
            args.append(None)
            leaves.append(E.const(scalar))
            continue
        if v is not None and v not in b.var_of:
            b.fail(node, f"input {port} is not a computed value (a non-numeric constant?)")
        args.append(None if v is None else b.var_of[v])
        leaves.append(None if v is None else E.arg(port))
    try:
        expr = opdef.expr(*leaves, **opdef.resolved_attrs(node))
    except (TypeError, ValueError, KeyError) as exc:
        b.fail(node, f"the op's scalar expression could not be built: {exc}")
    out = node.output(0)
    b.var_of[out] = b.add_op(E.lift(expr), args, b.type_of(out).dtype)


def _scalar_constant(body: Graph, value: Value | None) -> float | int | bool | None:
    array = body.const_value(value)
    if array is None or np.asarray(array).size != 1 or np.asarray(array).dtype.kind not in "biuf":
        return None
    return np.asarray(array).reshape(()).item()


def _full_shape(b: PlanBuilder, shapes: list[Shape]) -> Shape:
    try:
        full = broadcast_shapes(*shapes)
    except Exception as exc:  # ShapeInferenceError: the body is not a broadcast-consistent group
        b.fail(None, f"value shapes do not broadcast to one iteration space: {exc}")
    if full is None:
        b.fail(None, "a value has no known rank")
    return full


def _check_output_shape(b: PlanBuilder, shape: Shape, node: Node) -> None:
    full = b.plan.full_shape
    if len(shape) == len(full) and _dims_match(shape, full):
        return
    if (
        b.kind == "reduction"
        and len(shape) == len(full)
        and full
        and shape[-1] == 1
        and _dims_match(shape[:-1], full[:-1])
    ):
        return
    expected = "the full shape" + (" or the row-reduced shape" if b.kind == "reduction" else "")
    b.fail(node, f"an output has shape {list(shape)}; expected {expected} {list(full)}")


def _dims_match(a: Shape, b: Shape) -> bool:
    return all(x == y or x is None or y is None for x, y in zip(a, b, strict=True))


def _drop_unused(plan: KernelPlan) -> None:
    """Remove steps and loads nothing reads (e.g. a reduction's constant axes)."""
    live = {var for _, var in plan.stores}
    kept: list[ScalarOp | Reduce] = []
    for step in reversed(plan.steps):
        if step.target not in live:
            continue
        kept.append(step)
        live |= {a for a in step.args if a is not None} if isinstance(step, ScalarOp) else {step.source}
    plan.steps = kept[::-1]
    plan.loads = [(var, i) for var, i in plan.loads if var in live]
