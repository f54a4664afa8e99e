"""Dim arithmetic for shape inference over symbolic dims, and reading shape-like inputs that are constants.

A dim is an ``int``, a symbol (``"N"``) or ``None`` (unknown). tlc does not build symbolic expressions such as
``N*3`` or ``N+2``: an arithmetic result that is not an int, and not a symbol passed through unchanged, is None.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir.types import Dim, Shape
from .registry import InferContext

#: A slice bound at or beyond this magnitude means "to the end" whatever the (symbolic) dim is: exporters
#: write INT64_MAX / INT32_MAX / -INT64_MAX there, and no real axis holds 2**31 elements.
UNBOUNDED = 2**31 - 1


def unknown(rank: int) -> Shape:
    return (None,) * rank


def product(dims: Sequence[Dim]) -> Dim:
    """The product of dims: an int when all are ints, a symbol when it is the only non-1 factor, else None."""
    if any(d == 0 for d in dims):
        return 0
    if any(d is None for d in dims):
        return None
    n = int(np.prod([d for d in dims if isinstance(d, int)], dtype=np.int64))
    symbols = [d for d in dims if isinstance(d, str)]
    if not symbols:
        return n
    if len(symbols) == 1 and n == 1:
        return symbols[0]
    return None


def add(a: Dim, b: int) -> Dim:
    """``a + b`` for an int ``b``: exact for int ``a``; a symbol survives only ``+ 0``."""
    if isinstance(a, int):
        return a + b
    return a if b == 0 else None


def total(dims: Sequence[Dim]) -> Dim:
    """The sum of dims (Concat's axis): exact for ints; zeros drop out, so ``N + 0`` stays ``N``."""
    rest = [d for d in dims if d != 0]
    if not rest:
        return 0
    if len(rest) == 1:
        return rest[0]
    if all(isinstance(d, int) for d in rest):
        return sum(rest)  # type: ignore[arg-type]
    return None


def merge(a: Dim, b: Dim) -> Dim:
    """Two dims that must be equal: the better known of the two; raises ValueError when ints differ."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ValueError(f"{a} != {b}")
    return a if isinstance(a, int) else b if isinstance(b, int) else a


def const_ints(ctx: InferContext, i: int) -> list[int] | None:
    """Input ``i`` as a flat list of ints when it is a constant, else None."""
    value = ctx.const(i)
    return None if value is None else [int(v) for v in np.asarray(value).ravel()]


def vector_length(ctx: InferContext, i: int) -> int | None:
    """The length of 1-D input ``i`` when its type says it (its value need not be known)."""
    value = ctx.const(i)
    if value is not None:
        return int(np.asarray(value).size)
    t = ctx.input_types[i] if i < len(ctx.input_types) else None
    if t is None or t.shape is None:
        return None
    if len(t.shape) == 0:
        return 1
    return t.shape[0] if len(t.shape) == 1 and isinstance(t.shape[0], int) else None


def normalize_axes_unique(ctx: InferContext, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    """Axes mapped into [0, rank); fails naming the node when one is out of range or repeated."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            ctx.fail(f"{what} {list(axes)}: axis {a} is out of range for rank {rank} (expected [-{rank}, {rank}))")
        out.append(a % rank)
    if len(set(out)) != len(out):
        ctx.fail(f"{what} {list(axes)} repeat an axis")
    return out


def slice_length(dim: Dim, start: int, end: int, step: int) -> Dim:
    """The length of ``x[start:end:step]`` along a dim, with ONNX's negative-index and clamping rules.

    For a symbolic dim the length is known only when the slice takes the whole axis for every size
    (start and end at or past the ends, step 1 or -1); otherwise it is None.
    """
    if isinstance(dim, int):
        s, e = slice_bounds(dim, start, end, step)
        return max(0, -(-(e - s) // step)) if step > 0 else max(0, -(-(s - e) // -step))
    if step == 1 and (start == 0 or start <= -UNBOUNDED) and end >= UNBOUNDED:
        return dim
    if step == -1 and (start == -1 or start >= UNBOUNDED) and end <= -UNBOUNDED:
        return dim
    return None


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice's effective (start, end) on an axis of size ``dim``; end -1 with a negative step = "past 0"."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


#: how far ``shape_value`` follows producers back (Shape -> Gather -> Unsqueeze -> Concat chains are short)
_VALUE_DEPTH = 12
_INT_KINDS = "iu"


def shape_value(ctx: InferContext, i: int) -> list[Dim] | None:
    """Input ``i`` (a 0-D or 1-D integer tensor) as a list of dims when its elements are known, each an int, a
    symbol or None: a constant, or computed from shapes by the chains exporters write for dynamic shapes
    (Shape, Gather / Slice of it, Unsqueeze / Squeeze, Concat, Cast, Identity, integer Add / Sub / Mul / Div with
    constants). None when the value is not of that kind."""
    return _value_of(ctx.graph, ctx.inputs[i], 0) if ctx.has_input(i) else None


def _value_of(graph, value, depth: int) -> list[Dim] | None:
    if value is None or depth > _VALUE_DEPTH:
        return None
    array = graph.const_value(value)
    if array is not None:
        array = np.asarray(array)
        if array.dtype.kind in _INT_KINDS and array.ndim <= 1:
            return [int(v) for v in array.ravel()]
        return None
    node = graph.node(value.node)
    t = graph.type_of(value)
    if node.domain != "" or t is None or t.dtype not in ("int64", "int32") or (t.rank or 0) > 1:
        return None
    ins = graph.inputs_of(node)
    op = node.op
    if op == "Shape":
        shape = graph.type_of(ins[0]).shape if graph.type_of(ins[0]) is not None else None
        if shape is None:
            return None
        rank = len(shape)
        start, end = node.attrs.get("start", 0) or 0, node.attrs.get("end")
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
        return list(shape[start:end])
    if op in ("Identity", "Cast", "Squeeze", "Unsqueeze", "Reshape", "Flatten"):
        return _value_of(graph, ins[0], depth + 1)
    if op == "Concat":
        parts = [_value_of(graph, v, depth + 1) for v in ins]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if op == "Gather" and node.attrs.get("axis", 0) == 0:
        data, index = _value_of(graph, ins[0], depth + 1), graph.const_value(ins[1])
        if data is None or index is None:
            return None
        picks = [int(k) for k in np.asarray(index).ravel()]
        if any(not -len(data) <= k < len(data) for k in picks):
            return None
        return [data[k] for k in picks]
    if op == "Slice":
        data = _value_of(graph, ins[0], depth + 1)
        bounds = [graph.const_value(v) if v is not None else None for v in ins[1:5]] + [None] * (5 - len(ins))
        if data is None or bounds[0] is None or bounds[1] is None:
            return None
        start, end = int(np.asarray(bounds[0]).ravel()[0]), int(np.asarray(bounds[1]).ravel()[0])
        step = 1 if bounds[3] is None else int(np.asarray(bounds[3]).ravel()[0])
        if step == 0:
            return None
        s, e = slice_bounds(len(data), start, end, step)
        return data[s:e:step] if step > 0 or e >= 0 else data[s::step]
    if op in ("Add", "Sub", "Mul", "Div"):
        a, b = _value_of(graph, ins[0], depth + 1), _value_of(graph, ins[1], depth + 1)
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        n = max(len(a), len(b))
        a, b = a * n if len(a) == 1 else a, b * n if len(b) == 1 else b
        return [_arith(op, x, y) for x, y in zip(a, b)]
    return None


def _arith(op: str, a: Dim, b: Dim) -> Dim:
    """``a op b`` on dims: exact on ints (Div truncating toward zero, as integer Div does); a symbol survives
    ``+ 0``, ``- 0``, ``* 1`` and ``/ 1``; anything else is None."""
    if isinstance(a, int) and isinstance(b, int):
        if op == "Div":
            return None if b == 0 else int(a / b) if (a < 0) != (b < 0) else a // b
        return a + b if op == "Add" else a - b if op == "Sub" else a * b
    identity = {"Add": 0, "Sub": 0, "Mul": 1, "Div": 1}[op]
    if b == identity and isinstance(a, str):
        return a
    if op in ("Add", "Mul") and a == identity and isinstance(b, str):
        return b
    return None
