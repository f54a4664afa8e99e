"""Control flow: ONNX ``If``, ``Loop`` and ``Scan`` (opset-21 semantics), their bodies held as tlc ``Graph``s.

Outer-scope captures are explicit (NOTE: the convention every part relies on). An ONNX body may read values of
the graphs around it by name; in tlc every such value is an extra trailing *input of the node*, matched
position by position to extra trailing *inputs of each body*, so passes see the use as an ordinary edge (DCE
keeps the captured value, CSE and fold rewire it like any other):

- ``If(cond, c_1..c_k)``: both branches take exactly ``c_1..c_k`` as their inputs (ONNX branches take none).
- ``Loop(M, cond, v_1..v_N, c_1..c_k)`` with attribute ``num_captures = k``: the body takes
  ``(iter_num, cond_in, v_1..v_N, c_1..c_k)`` and returns ``(cond_out, v_1..v_N, scan_1..scan_K)``.
- ``Scan(s_1..s_N, x_1..x_M, c_1..c_k)`` with ``num_scan_inputs = M`` and ``num_captures = k``: the body takes
  ``(s_1..s_N, x_1[t]..x_M[t], c_1..c_k)`` and returns ``(s_1..s_N, y_1..y_K)``.
- ``SequenceMap(seq, extra_1..extra_M, c_1..c_k)`` (``tlc.ops.sequence``) with ``num_captures = k``: the body takes
  ``(seq[i], extra_1[i]..extra_M[i], c_1..c_k)`` (a tensor extra as it is) and returns one element of each output.
- ``ai.onnx.preview.FlexAttention(Q, K, V, c_1..c_k)`` (``tlc.ops.attention``) with ``num_captures = k``: each
  modifier (``score_mod``, ``prob_mod``) takes ``(scores, c_1..c_k)`` and returns the modified scores.

Bodies carry sequence and optional values as they do tensors (types merge with ``tlc.ir.types.merge_types``).

``num_captures`` is tlc's own attribute (default 0); the ONNX exporter drops it and writes captures back as
references to the outer names, the importer recreates it. A value captured two levels up is a capture of the
middle body as well (its body input is then captured again by the inner node).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ExecutionError
from ..ir.graph import Graph, Node
from ..ir.types import OptionalType, TensorType, is_tensor, merge_types, np_dtype
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, lookup, register

#: (domain, op) of the ops whose bodies follow the capture convention (``SequenceMap`` is defined in
#: ``tlc.ops.sequence``, ``FlexAttention`` in ``tlc.ops.attention``)
CONTROL_OPS = frozenset({("", "If"), ("", "Loop"), ("", "Scan"), ("", "SequenceMap"),
                         ("ai.onnx.preview", "FlexAttention")})
_TRAITS = frozenset({Trait.PURE, Trait.SUBGRAPH})


# ---------------------------------------------------------------------------- the capture convention
def is_control_op(op: str, domain: str = "") -> bool:
    """True for an op whose graph attributes follow the capture convention."""
    return (domain, op) in CONTROL_OPS


def is_control(node: Node) -> bool:
    return is_control_op(node.op, node.domain)


def _is_if(node: Node) -> bool:
    """If's captures are all its inputs but the condition; the others count theirs in ``num_captures``."""
    return node.domain == "" and node.op == "If"


def bodies(node: Node) -> list[tuple[str, Graph]]:
    """The node's graph-valued attributes (name, body), sorted by name."""
    return [(k, v) for k, v in sorted(node.attrs.items()) if isinstance(v, Graph)]


def num_captures(node: Node) -> int:
    """How many trailing inputs of a control-flow node are outer-scope captures (0 for other ops)."""
    if not is_control(node):
        return 0
    if _is_if(node):
        return max(0, node.num_inputs - 1)
    return int(node.attrs.get("num_captures", 0))


def drop_unused_captures(graph: Graph, node: Node) -> int:
    """Remove the captures no body reads (their body inputs are unused everywhere); returns how many."""
    k = num_captures(node)
    if k == 0:
        return 0
    first = node.num_inputs - k
    graphs = [b for _, b in bodies(node)]
    body_inputs = [b.inputs[len(b.inputs) - k:] for b in graphs]
    keep = [j for j in range(k) if any(b.num_uses(ins[j].output(0)) for b, ins in zip(graphs, body_inputs))]
    if len(keep) == k:
        return 0
    for b, ins in zip(graphs, body_inputs):
        for j in range(k):
            if j not in keep:
                b.erase(ins[j])
    values = graph.inputs_of(node)
    graph.set_inputs(node, values[:first] + [values[first + j] for j in keep])
    if not _is_if(node):
        if keep:
            node.attrs["num_captures"] = len(keep)
        else:
            node.attrs.pop("num_captures", None)
    return k - len(keep)


def bodies_pure(node: Node) -> bool:
    """True when every op in the node's bodies (recursively) is pure, so the node may be merged or removed."""
    for _, body in bodies(node):
        for inner in body.nodes():
            if inner.domain == "" and inner.op in ("Input", "Constant"):
                continue
            opdef = lookup(inner.op, inner.domain)
            if opdef is None or not opdef.pure_at(body, inner) or not bodies_pure(inner):
                return False
    return True


# ---------------------------------------------------------------------------- type helpers
def _output_types(ctx: InferContext, body: Graph, what: str) -> list[TensorType]:
    types = [body.type_of(v) for v, _ in body.outputs]
    if any(t is None for t in types):
        typed = body.copy()
        typed.infer_missing_types()
        types = [typed.type_of(v) for v, _ in typed.outputs]
    if any(t is None for t in types):
        ctx.fail(f"{what} has untyped outputs")
    return types


def _check_inputs(ctx: InferContext, body: Graph, want: int, what: str) -> None:
    if len(body.inputs) != want:
        ctx.fail(f"{what} has {len(body.inputs)} inputs, expected {want} (formal inputs and "
                 f"{num_captures(ctx.node)} captures)")


def _const_int(ctx: InferContext, port: int) -> int | None:
    value = ctx.const(port)
    if value is None or value.size != 1:
        return None
    n = int(value.reshape(-1)[0])
    return n if 0 <= n < 1 << 40 else None


# ---------------------------------------------------------------------------- If
def _if_infer(ctx: InferContext) -> list[TensorType]:
    then_b, else_b = ctx.attrs["then_branch"], ctx.attrs["else_branch"]
    k = num_captures(ctx.node)
    _check_inputs(ctx, then_b, k, "then_branch")
    _check_inputs(ctx, else_b, k, "else_branch")
    if ctx.type(0).dtype != "bool" or ctx.type(0).numel not in (1, None):
        ctx.fail(f"the condition must be one bool, got {ctx.type(0)}")
    then_t, else_t = _output_types(ctx, then_b, "then_branch"), _output_types(ctx, else_b, "else_branch")
    if len(then_t) != len(else_t) or len(then_t) != ctx.node.num_outputs:
        ctx.fail(f"then_branch has {len(then_t)} outputs, else_branch {len(else_t)}, the node "
                 f"{ctx.node.num_outputs}")
    cond = ctx.const(0)
    if cond is not None and cond.size == 1:
        return then_t if bool(cond.reshape(-1)[0]) else else_t
    out = []
    for i, (a, b) in enumerate(zip(then_t, else_t)):
        try:
            out.append(merge_types(a, b))
        except ValueError as exc:
            ctx.fail(f"output {i}: the branches disagree: {exc}")
    return out


def _if_reference(cond, *captures, then_branch, else_branch, run_graph):
    if cond is None or cond.size != 1:
        raise ExecutionError(f"If: the condition must hold one element, got {None if cond is None else cond.shape}")
    branch = then_branch if bool(cond.reshape(-1)[0]) else else_branch
    return run_graph(branch, list(captures))


register(OpDef(
    name="If", infer=_if_infer, reference=_if_reference, inputs=(1, None),
    outputs=lambda attrs, n: len(attrs["then_branch"].outputs) if "then_branch" in attrs else 1,
    attrs={"then_branch": Attr("graph", REQUIRED), "else_branch": Attr("graph", REQUIRED)},
    traits=_TRAITS, cost=4.0,
    doc="If(cond, captures...): runs then_branch or else_branch on the captured outer values."))


# ---------------------------------------------------------------------------- Loop
def _split(values: Sequence[Any], k: int) -> tuple[list[Any], list[Any]]:
    values = list(values)
    return (values[: len(values) - k], values[len(values) - k:]) if k else (values, [])


def loop_trip_count(ctx: InferContext, body: Graph, n_carried: int) -> int | None:
    """The static trip count: M when constant and nothing can end the loop early (no cond input or a constant true
    one, and a body whose cond output is a constant true or its cond input passed through)."""
    m = _const_int(ctx, 0) if ctx.has_input(0) else None
    if m is None:
        return None
    if ctx.has_input(1):
        cond = ctx.const(1)
        if cond is None or cond.size != 1 or not bool(cond.reshape(-1)[0]):
            return None
    cond_out = body.outputs[0][0]
    const = body.const_value(cond_out)
    if const is not None and const.size == 1 and bool(const.reshape(-1)[0]):
        return m
    return m if len(body.inputs) > 1 and cond_out == body.inputs[1].output(0) else None


def _loop_infer(ctx: InferContext) -> list[TensorType]:
    body: Graph = ctx.attrs["body"]
    k = num_captures(ctx.node)
    n = max(0, ctx.num_inputs - 2 - k)
    _check_inputs(ctx, body, 2 + n + k, "the body")
    out_t = _output_types(ctx, body, "the body")
    if len(out_t) < 1 + n or len(out_t) - 1 != ctx.node.num_outputs:
        ctx.fail(f"the body has {len(out_t)} outputs; expected the condition, {n} loop-carried values and the "
                 f"node's {ctx.node.num_outputs - n} scan outputs")
    trip = loop_trip_count(ctx, body, n)
    result = []
    for i in range(n):
        initial = ctx.type(2 + i)
        if isinstance(initial, OptionalType) and not isinstance(out_t[1 + i], OptionalType):
            # NOTE: ONNX (and onnxruntime) type the output as the body returns it: an optional initial value whose
            # body returns its content gives the content's type (a loop that runs zero times returns it as it came)
            initial = initial.elem
        try:
            result.append(merge_types(initial, out_t[1 + i]))
        except ValueError as exc:
            ctx.fail(f"loop-carried value {i}: {exc}")
    for j, t in enumerate(out_t[1 + n:]):
        if not is_tensor(t):
            ctx.fail(f"scan output {j} of the body is {t}; scan outputs are tensors")
        result.append(t.with_shape(None if t.shape is None else (trip,) + tuple(t.shape)))
    return result


def _stacked(items: list[np.ndarray], body: Graph, port: int, axis: int = 0) -> np.ndarray:
    if items:
        return np.stack(items, axis=axis)
    t = body.type_of(body.outputs[port][0])
    inner = tuple(t.shape) if t is not None and t.is_static else ()
    dtype = np_dtype(t.dtype) if t is not None else np.float32
    shape = list(inner)
    shape.insert(axis if axis >= 0 else len(shape) + 1 + axis, 0)
    return np.zeros(shape, dtype)


def _loop_reference(*inputs, body, num_captures, run_graph):
    formal, captures = _split(inputs, num_captures)
    formal += [None] * (2 - len(formal))
    m, cond, carried = formal[0], formal[1], list(formal[2:])
    n = len(carried)
    k_scan = len(body.outputs) - 1 - n
    trip = None if m is None else int(np.asarray(m).reshape(-1)[0])
    keep = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    scans: list[list[np.ndarray]] = [[] for _ in range(k_scan)]
    i = 0
    while keep and (trip is None or i < trip):
        outs = run_graph(body, [np.array(i, np.int64), np.array(keep), *carried, *captures])
        keep = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = list(outs[1:1 + n])
        for j in range(k_scan):
            scans[j].append(outs[1 + n + j])
        i += 1
    return carried + [_stacked(s, body, 1 + n + j) for j, s in enumerate(scans)]


register(OpDef(
    name="Loop", infer=_loop_infer, reference=_loop_reference, inputs=(0, None),
    outputs=lambda attrs, n: len(attrs["body"].outputs) - 1 if "body" in attrs else 1,
    attrs={"body": Attr("graph", REQUIRED), "num_captures": Attr("int", 0)},
    traits=_TRAITS, cost=8.0,
    doc="Loop(M, cond, carried..., captures...): runs the body while i < M and cond; scan outputs stacked."))


# ---------------------------------------------------------------------------- Scan
def _axes(values: Sequence[int] | None, count: int) -> list[int]:
    values = list(values or [])
    return values + [0] * (count - len(values))


def _scan_layout(node_inputs: int, attrs: dict[str, Any]) -> tuple[int, int, int]:
    """(N states, M scan inputs, k captures) of a Scan node."""
    m, k = int(attrs["num_scan_inputs"]), int(attrs.get("num_captures") or 0)
    return node_inputs - m - k, m, k


def _scan_infer(ctx: InferContext) -> list[TensorType]:
    body: Graph = ctx.attrs["body"]
    n, m, k = _scan_layout(ctx.num_inputs, ctx.attrs)
    if n < 0 or m < 1:
        ctx.fail(f"num_scan_inputs={m} and {k} captures do not fit the node's {ctx.num_inputs} inputs")
    _check_inputs(ctx, body, n + m + k, "the body")
    out_t = _output_types(ctx, body, "the body")
    if len(out_t) < n or len(out_t) != ctx.node.num_outputs:
        ctx.fail(f"the body has {len(out_t)} outputs; expected {n} states and the node's scan outputs")
    in_axes = _axes(ctx.attrs["scan_input_axes"], m)
    seq = None
    for j in range(m):
        shape = ctx.shape(n + j)
        if shape is not None:
            rank = len(shape)
            if not -rank <= in_axes[j] < rank:
                ctx.fail(f"scan_input_axes[{j}]={in_axes[j]} is out of range for rank {rank}")
            seq = shape[in_axes[j] % rank]
            break
    result = []
    for i in range(n):
        try:
            result.append(merge_types(ctx.type(i), out_t[i]))
        except ValueError as exc:
            ctx.fail(f"state {i}: {exc}")
    out_axes = _axes(ctx.attrs["scan_output_axes"], len(out_t) - n)
    for j, t in enumerate(out_t[n:]):
        if t.shape is None:
            result.append(t)
            continue
        rank = len(t.shape) + 1
        if not -rank <= out_axes[j] < rank:
            ctx.fail(f"scan_output_axes[{j}]={out_axes[j]} is out of range for rank {rank}")
        shape = list(t.shape)
        shape.insert(out_axes[j] % rank, seq)
        result.append(t.with_shape(tuple(shape)))
    return result


def _scan_reference(*inputs, body, num_scan_inputs, scan_input_axes, scan_input_directions, scan_output_axes,
                    scan_output_directions, num_captures, run_graph):
    formal, captures = _split(inputs, num_captures)
    m = num_scan_inputs
    n = len(formal) - m
    states, xs = list(formal[:n]), formal[n:]
    in_axes = [a % x.ndim for a, x in zip(_axes(scan_input_axes, m), xs)]
    in_dirs = _axes(scan_input_directions, m)
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise ExecutionError(f"Scan: the scan inputs have different sequence lengths {sorted(lengths)}")
    (steps,) = lengths
    k_out = len(body.outputs) - n
    collected: list[list[np.ndarray]] = [[] for _ in range(k_out)]
    for t in range(steps):
        slices = [np.take(x, steps - 1 - t if d else t, axis=a) for x, a, d in zip(xs, in_axes, in_dirs)]
        outs = run_graph(body, [*states, *slices, *captures])
        states = list(outs[:n])
        for j in range(k_out):
            collected[j].append(outs[n + j])
    out_axes, out_dirs = _axes(scan_output_axes, k_out), _axes(scan_output_directions, k_out)
    results = []
    for j, items in enumerate(collected):
        items = items[::-1] if out_dirs[j] else items
        rank = (items[0].ndim if items else 0) + 1
        results.append(_stacked(items, body, n + j, out_axes[j] % rank if items else out_axes[j]))
    return states + results


register(OpDef(
    name="Scan", infer=_scan_infer, reference=_scan_reference, inputs=(1, None),
    outputs=lambda attrs, n: len(attrs["body"].outputs) if "body" in attrs else 1,
    attrs={"body": Attr("graph", REQUIRED), "num_scan_inputs": Attr("int", REQUIRED),
           "scan_input_axes": Attr("ints"), "scan_input_directions": Attr("ints"),
           "scan_output_axes": Attr("ints"), "scan_output_directions": Attr("ints"),
           "num_captures": Attr("int", 0)},
    traits=_TRAITS, cost=8.0,
    doc="Scan(states..., scan inputs..., captures...): runs the body once per slice along the scan axes."))
