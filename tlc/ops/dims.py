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
