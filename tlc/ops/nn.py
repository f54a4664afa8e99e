"""Neural-network operators: MatMul, Gemm, convolutions, pooling, normalisations, Softmax."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .infer import broadcast_shapes, normalize_axis
from .registry import Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


def _matmul_infer(ctx: InferContext) -> list[TensorType]:
    a, b = ctx.type(0), ctx.type(1)
    if a.dtype != b.dtype:
        ctx.fail(f"input dtypes differ: {a.dtype} and {b.dtype}")
    if a.shape is None or b.shape is None:
        return [TensorType(a.dtype, None)]
    sa, sb = list(a.shape), list(b.shape)
    if not sa or not sb:
        ctx.fail("MatMul inputs must have rank >= 1")
    squeeze_a, squeeze_b = len(sa) == 1, len(sb) == 1
    if squeeze_a:
        sa = [1] + sa
    if squeeze_b:
        sb = sb + [1]
    k1, k2 = sa[-1], sb[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(f"inner dims differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    out = list(batch) + [sa[-2], sb[-1]]
    if squeeze_a:
        out.pop(-2)
    if squeeze_b:
        out.pop(-1)
    return [TensorType(a.dtype, tuple(out))]


register(OpDef(name="MatMul", infer=_matmul_infer, reference=np.matmul, inputs=(2, 2),
               traits=PURE | {Trait.CONTRACTION}, cost=2))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype, copy=False)


def _softmax_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.rank is not None:
        normalize_axis(ctx.attrs["axis"], t.rank, ctx)
    return [t]


register(OpDef(name="Softmax", infer=_softmax_infer, reference=lambda x, *, axis: softmax(x, axis),
               attrs={"axis": Attr("int", -1)}, traits=PURE | {Trait.REDUCTION}, cost=12))
