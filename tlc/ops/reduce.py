"""Reductions (opset 18+ form: ``axes`` is an optional second input) and ArgMax/ArgMin."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .infer import normalize_axes
from .registry import Attr, InferContext, OpDef, Trait, register

REDUCE = frozenset({Trait.PURE, Trait.FOLDABLE, Trait.REDUCTION})
REDUCE_ATTRS = {"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)}


def reduce_axes(rank: int, axes: np.ndarray | None, noop_with_empty_axes: int) -> tuple[int, ...] | None:
    """The axes a reduction reduces; None means "no reduction" (empty axes with noop set)."""
    if axes is None or axes.size == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    return tuple(sorted(set(normalize_axes(axes.ravel().tolist(), rank))))


def _reduce_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.shape is None:
        return [t]
    if ctx.has_input(1) and ctx.const(1) is None:
        if ctx.attrs["keepdims"]:
            return [TensorType(t.dtype, (None,) * t.rank)]
        return [TensorType(t.dtype, None)]
    axes = reduce_axes(t.rank, ctx.const(1), ctx.attrs["noop_with_empty_axes"])
    if axes is None:
        return [t]
    if ctx.attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    else:
        shape = tuple(d for i, d in enumerate(t.shape) if i not in axes)
    return [TensorType(t.dtype, shape)]


def reduction(name: str, fn, cost: float = 1.0, doc: str = "") -> None:
    """Register an opset-18 style reduction computed by ``fn(x, axis=tuple, keepdims=bool)``."""

    def ref(x, axes=None, *, keepdims, noop_with_empty_axes):
        ax = reduce_axes(x.ndim, axes, noop_with_empty_axes)
        if ax is None:
            return x
        return np.asarray(fn(x, axis=ax, keepdims=bool(keepdims))).astype(x.dtype, copy=False)

    register(OpDef(name=name, infer=_reduce_infer, reference=ref, inputs=(1, 2), attrs=dict(REDUCE_ATTRS),
                   traits=REDUCE, cost=cost, doc=doc))


reduction("ReduceSum", np.sum)
