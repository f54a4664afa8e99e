"""Order-dependent operators: TopK, Unique and the running scans CumSum and CumProd."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType, format_shape
from . import dims
from .infer import normalize_axis
from .registry import Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


# ---------------------------------------------------------------------------- TopK
def _topk_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    k_type = ctx.type(1)
    if k_type.dtype != "int64":
        ctx.fail(f"K must be int64, got {k_type.dtype}")
    if t.shape is None:
        return [TensorType(t.dtype, None), TensorType("int64", None)]
    axis = normalize_axis(ctx.attrs["axis"], t.rank, ctx)
    k = dims.const_ints(ctx, 1)
    if k is not None:
        if len(k) != 1 or k[0] < 0:
            ctx.fail(f"K must be one non-negative value, got {k}")
        if isinstance(t.shape[axis], int) and k[0] > t.shape[axis]:
            ctx.fail(f"K = {k[0]} is larger than axis {axis} of {format_shape(t.shape)}")
    shape = t.shape[:axis] + (None if k is None else k[0],) + t.shape[axis + 1:]
    return [TensorType(t.dtype, shape), TensorType("int64", shape)]


def topk_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Indices that sort ``x`` along ``axis`` (descending when ``largest``); equal values keep index order."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    # A stable ascending sort of the reversed axis, read backwards, is descending with ties in index order.
    n = x.shape[axis]
    order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return n - 1 - np.flip(order, axis)


def _topk(x, k, *, axis, largest, sorted):  # noqa: A002 - ONNX's attribute name
    axis = axis % x.ndim
    count = int(np.asarray(k).ravel()[0])
    # NOTE: ONNX leaves the order unspecified when sorted=0; sorted order is one valid answer.
    idx = np.take(topk_order(x, axis, bool(largest)), np.arange(count), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def _unsorted_order(inputs, attrs) -> str | None:
    """With ``sorted = 0`` ONNX does not say in which order the K elements come (tlc sorts them anyway)."""
    k = int(np.asarray(inputs[1]).ravel()[0]) if inputs[1] is not None and np.asarray(inputs[1]).size else 0
    return "the order of unsorted TopK outputs" if attrs.get("sorted") == 0 and k > 1 else None


register(OpDef(name="TopK", infer=_topk_infer, reference=_topk, inputs=(2, 2), outputs=2,
               attrs={"axis": Attr("int", -1), "largest": Attr("int", 1), "sorted": Attr("int", 1)}, traits=PURE,
               undefined_at=_unsorted_order,
               cost=4, doc="The K largest (or smallest) values along `axis` and their int64 indices; ties keep the "
                           "lower index."))


# ---------------------------------------------------------------------------- Unique
def _unique_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    axis = ctx.attrs["axis"]
    if axis is None:
        values = TensorType(t.dtype, (None,))
        inverse = TensorType("int64", (dims.product(t.shape) if t.shape is not None else None,))
    elif t.shape is None:
        values, inverse = TensorType(t.dtype, None), TensorType("int64", (None,))
    else:
        axis = normalize_axis(axis, t.rank, ctx)
        values = TensorType(t.dtype, t.shape[:axis] + (None,) + t.shape[axis + 1:])
        inverse = TensorType("int64", (t.shape[axis],))
    vector = TensorType("int64", (None,))
    return [values, vector, inverse, vector][: ctx.node.num_outputs]


def _unique(x, *, axis, sorted):  # noqa: A002 - ONNX's attribute name
    data, along = (x.ravel(), 0) if axis is None else (x, axis % x.ndim)
    values, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True,
                                               axis=None if axis is None else along)
    inverse = inverse.reshape(-1)
    if not sorted:  # order of first occurrence
        order = np.argsort(first, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        values, first, counts, inverse = np.take(values, order, axis=along), first[order], counts[order], \
            position[inverse]
    return [values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


register(OpDef(name="Unique", infer=_unique_infer, reference=_unique, outputs=4,
               attrs={"axis": Attr("int"), "sorted": Attr("int", 1)}, traits=PURE, cost=4,
               doc="The distinct values (or slices along `axis`) with first indices, inverse indices and counts."))


# ---------------------------------------------------------------------------- CumSum, CumProd
def _scan_infer(ctx: InferContext) -> list[TensorType]:
    t, axis_t = ctx.type(0), ctx.type(1)
    if axis_t.dtype not in ("int32", "int64") or (axis_t.rank is not None and axis_t.rank > 1):
        ctx.fail(f"axis must be an int32/int64 scalar, got {axis_t}")
    axis = dims.const_ints(ctx, 1)
    if axis is not None and t.rank is not None:
        normalize_axis(axis[0], t.rank, ctx)
    return [t]


def _scan(fn, identity: int):
    def ref(x, axis, *, exclusive, reverse):
        a = normalize_axis(int(np.asarray(axis).ravel()[0]), x.ndim)   # (out of range: an error, not a wrap)
        y = np.flip(x, a) if reverse else x
        out = fn(y, axis=a, dtype=x.dtype)
        if exclusive:
            head = np.full(y.shape[:a] + (1,) + y.shape[a + 1:], identity, dtype=x.dtype)
            out = np.take(np.concatenate([head, out], axis=a), np.arange(y.shape[a]), axis=a)
        return np.flip(out, a) if reverse else out

    return ref


SCAN_ATTRS = {"exclusive": Attr("int", 0), "reverse": Attr("int", 0)}
register(OpDef(name="CumSum", infer=_scan_infer, reference=_scan(np.cumsum, 0), inputs=(2, 2), attrs=SCAN_ATTRS,
               traits=PURE, doc="Running sums along `axis` (exclusive: shifted by one; reverse: from the end)."))
register(OpDef(name="CumProd", infer=_scan_infer, reference=_scan(np.cumprod, 1), inputs=(2, 2),
               attrs=dict(SCAN_ATTRS), traits=PURE,
               doc="Running products along `axis` (exclusive: shifted by one; reverse: from the end)."))
