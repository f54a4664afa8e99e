"""Shared pieces of type and shape inference: broadcasting with symbolic dims, axis normalisation."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ShapeInferenceError
from ..ir.types import Dim, Shape, TensorType
from .registry import InferContext


def broadcast_dims(a: Dim, b: Dim) -> Dim:
    """numpy broadcasting of two dims; a symbol against 1 stays the symbol, two unequal symbols are unknown."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ShapeInferenceError(f"dims {a} and {b} do not broadcast")
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return None


def broadcast_shapes(*shapes: Shape | None) -> Shape | None:
    """The numpy broadcast of several shapes (None when any rank is unknown)."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        padded = (1,) * (rank - len(s)) + tuple(s)
        try:
            out = [broadcast_dims(x, y) for x, y in zip(out, padded)]
        except ShapeInferenceError:
            raise ShapeInferenceError(
                f"shapes {', '.join(map(str, shapes))} do not broadcast") from None
    return tuple(out)


def normalize_axis(axis: int, rank: int, ctx: InferContext | None = None) -> int:
    """An axis in [-rank, rank) mapped to [0, rank)."""
    if not -rank <= axis < rank:
        message = f"axis {axis} is out of range for rank {rank}"
        if ctx is not None:
            ctx.fail(message)
        raise ShapeInferenceError(message)
    return axis % rank if rank else 0


def normalize_axes(axes: Sequence[int], rank: int, ctx: InferContext | None = None) -> list[int]:
    return [normalize_axis(int(a), rank, ctx) for a in axes]


def same_as_input(index: int = 0):
    """Inference for ops whose single output has the type of input ``index``."""

    def infer(ctx: InferContext) -> list[TensorType]:
        return [ctx.type(index)]

    return infer


def elementwise(result_dtype: str | None = None, type_from: int = 0):
    """Inference for broadcasting elementwise ops: output dtype ``result_dtype`` or that of input ``type_from``."""

    def infer(ctx: InferContext) -> list[TensorType]:
        types = [t for t in ctx.input_types if t is not None]
        if not types:
            ctx.fail("no typed inputs")
        shape = broadcast_shapes(*(t.shape for t in types))
        dtype = result_dtype or ctx.type(type_from).dtype
        return [TensorType(dtype, shape)]

    return infer


def numel(shape: Shape | None) -> Dim:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n
