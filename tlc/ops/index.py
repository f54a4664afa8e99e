"""Indexing operators: Gather, GatherElements, GatherND, ScatterElements, ScatterND, TensorScatter, OneHot,
NonZero, Compress.

Indices may be negative (counted from the end of their axis) wherever ONNX allows it; an index out of range
is an execution error, never a silent clamp.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType, format_shape
from .infer import normalize_axis
from .registry import Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})
REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _check_indices(ctx: InferContext, i: int, name: str = "indices") -> TensorType:
    t = ctx.type(i)
    if t.dtype not in ("int32", "int64"):
        ctx.fail(f"{name} must be int32 or int64, got {t.dtype}")
    return t


def _wrap(indices: np.ndarray, dim) -> np.ndarray:
    """Indices with negative entries counted from the end of an axis of size ``dim`` (broadcasts)."""
    idx = indices.astype(np.int64)
    return np.where(idx < 0, idx + dim, idx)


# ---------------------------------------------------------------------------- gathers
def _gather_infer(ctx: InferContext) -> list[TensorType]:
    data, idx = ctx.type(0), _check_indices(ctx, 1)
    if data.shape is None or idx.shape is None:
        return [TensorType(data.dtype, None)]
    if data.rank == 0:
        ctx.fail("data must have rank >= 1")
    axis = normalize_axis(ctx.attrs["axis"], data.rank, ctx)
    return [TensorType(data.dtype, data.shape[:axis] + idx.shape + data.shape[axis + 1:])]


def _gather(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    if data.ndim == 0:   # numpy takes from a scalar as from one element (fuzz seed 136, data of unknown rank)
        raise ValueError("Gather's data must have rank >= 1, got a scalar")
    return np.take(data, indices.astype(np.int64), axis=normalize_axis(axis, data.ndim))


register(OpDef(name="Gather", infer=_gather_infer, inputs=(2, 2), attrs={"axis": Attr("int", 0)}, traits=PURE,
               reference=_gather,
               doc="Takes the slices at `indices` along `axis` (numpy take)."))


def _gather_elements_infer(ctx: InferContext) -> list[TensorType]:
    data, idx = ctx.type(0), _check_indices(ctx, 1)
    if data.rank is not None and idx.rank is not None:
        if data.rank != idx.rank or data.rank == 0:
            ctx.fail(f"data {format_shape(data.shape)} and indices {format_shape(idx.shape)} must have one rank >= 1")
        axis = normalize_axis(ctx.attrs["axis"], data.rank, ctx)
        if data.shape is not None and idx.shape is not None and any(
                i != axis and isinstance(n, int) and isinstance(d, int) and n > d
                for i, (n, d) in enumerate(zip(idx.shape, data.shape))):
            ctx.fail(f"indices {format_shape(idx.shape)} are longer than data {format_shape(data.shape)} on an axis "
                     f"other than {axis}")
    return [TensorType(data.dtype, idx.shape)]


def _gather_elements(data, indices, *, axis):
    axis = axis % data.ndim
    if indices.ndim != data.ndim or any(i != axis and n > d for i, (n, d) in enumerate(zip(indices.shape,
                                                                                           data.shape))):
        raise ValueError(f"indices {list(indices.shape)} do not fit data {list(data.shape)} off axis {axis}")
    # NOTE: out[i][j] = data[indices[i][j]][j]: on the other axes indices may be shorter than data (never
    # broadcast, as take_along_axis would): only data's leading part is read there
    data = data[tuple(slice(None) if i == axis else slice(0, n) for i, n in enumerate(indices.shape))]
    return np.take_along_axis(data, _wrap(indices, data.shape[axis]), axis=axis)


register(OpDef(name="GatherElements", infer=_gather_elements_infer, reference=_gather_elements, inputs=(2, 2),
               attrs={"axis": Attr("int", 0)}, traits=PURE,
               doc="out[i][j] = data[indices[i][j]][j] for axis 0 (numpy take_along_axis)."))


def _gather_nd_infer(ctx: InferContext) -> list[TensorType]:
    data, idx = ctx.type(0), _check_indices(ctx, 1)
    b = ctx.attrs["batch_dims"]
    if data.shape is None or idx.shape is None or not idx.shape or not isinstance(idx.shape[-1], int):
        return [TensorType(data.dtype, None)]
    k = idx.shape[-1]
    if b < 0 or b >= min(data.rank, idx.rank) or b + k > data.rank:
        ctx.fail(f"batch_dims {b} and index depth {k} do not fit data {format_shape(data.shape)} and indices "
                 f"{format_shape(idx.shape)}")
    return [TensorType(data.dtype, idx.shape[:-1] + data.shape[b + k:])]


def _gather_nd(data, indices, *, batch_dims):
    b, k = batch_dims, indices.shape[-1]
    nb = int(np.prod(data.shape[:b], dtype=np.int64))
    per_batch = int(np.prod(indices.shape[b:-1], dtype=np.int64))
    flat = data.reshape((nb,) + data.shape[b:])
    idx = _wrap(indices.reshape(nb, per_batch, k), np.array(data.shape[b:b + k], dtype=np.int64))
    picked = flat[(np.arange(nb)[:, None],) + tuple(idx[..., j] for j in range(k))]
    return picked.reshape(indices.shape[:-1] + data.shape[b + k:])


register(OpDef(name="GatherND", infer=_gather_nd_infer, reference=_gather_nd, inputs=(2, 2),
               attrs={"batch_dims": Attr("int", 0)}, traits=PURE,
               doc="Gathers slices of data addressed by the last axis of indices (after batch_dims shared axes)."))


# ---------------------------------------------------------------------------- scatters
def _scatter_infer(ctx: InferContext) -> list[TensorType]:
    data, updates = ctx.type(0), ctx.type(2)
    _check_indices(ctx, 1)
    if updates.dtype != data.dtype:
        ctx.fail(f"updates have dtype {updates.dtype}, expected {data.dtype} like data")
    if ctx.attrs["reduction"] not in ("none", *REDUCTIONS):
        ctx.fail(f"reduction {ctx.attrs['reduction']!r} is not one of none, {', '.join(REDUCTIONS)}")
    return [data]


def _scatter_at(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[where] = updates
    else:
        REDUCTIONS[reduction].at(out, where, updates)
    return out


def _scatter_elements(data, indices, updates, *, axis, reduction):
    if indices.ndim != data.ndim or updates.shape != indices.shape:  # as inference says at known shapes
        raise ValueError(f"indices {list(indices.shape)} and updates {list(updates.shape)} must have one shape, of "
                         f"the rank of data {list(data.shape)}")
    axis = axis % data.ndim
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = _wrap(indices, data.shape[axis])
    return _scatter_at(data.copy(), tuple(where), updates, reduction)


def _scatter_nd(data, indices, updates, *, reduction):
    k = indices.shape[-1]
    idx = _wrap(indices.reshape(-1, k), np.array(data.shape[:k], dtype=np.int64))
    flat_updates = updates.reshape((-1,) + data.shape[k:])
    return _scatter_at(data.copy(), tuple(idx.T), flat_updates, reduction)


register(OpDef(name="ScatterElements", infer=_scatter_infer, reference=_scatter_elements, inputs=(3, 3),
               attrs={"axis": Attr("int", 0), "reduction": Attr("string", "none")}, traits=PURE,
               doc="A copy of data with updates written (or reduced) at indices along `axis`."))
register(OpDef(name="ScatterND", infer=_scatter_infer, reference=_scatter_nd, inputs=(3, 3),
               attrs={"reduction": Attr("string", "none")}, traits=PURE,
               doc="A copy of data with update slices written (or reduced) at the index tuples of indices."))


def _tensor_scatter_infer(ctx: InferContext) -> list[TensorType]:
    cache, update = ctx.type(0), ctx.type(1)
    if ctx.attrs["mode"] not in ("linear", "circular"):
        ctx.fail(f"mode {ctx.attrs['mode']!r} is not linear or circular")
    if update.dtype != cache.dtype:
        ctx.fail(f"update has dtype {update.dtype}, expected {cache.dtype} like past_cache")
    if cache.rank is not None:
        axis = normalize_axis(ctx.attrs["axis"], cache.rank, ctx)
        if axis == 0:
            ctx.fail("axis 0 is the batch axis; the sequence axis must come after it")
    return [cache]


def _tensor_scatter(past_cache, update, write_indices=None, *, mode, axis):
    axis = axis % past_cache.ndim
    out = past_cache.copy()
    starts = np.zeros(past_cache.shape[0], np.int64) if write_indices is None else write_indices.ravel()
    lead = (slice(None),) * (axis - 1)
    for b, start in enumerate(int(s) for s in starts):
        positions = start + np.arange(update.shape[axis])
        if mode == "circular":
            positions %= past_cache.shape[axis]
        out[b][(*lead, positions)] = update[b]  # out[b] is a view; one array index keeps its place
    return out


register(OpDef(name="TensorScatter", infer=_tensor_scatter_infer, reference=_tensor_scatter, inputs=(2, 3),
               attrs={"mode": Attr("string", "linear"), "axis": Attr("int", -2)}, traits=PURE,
               doc="A KV-cache update: writes `update` into `past_cache` along `axis` from write_indices[batch]."))


# ---------------------------------------------------------------------------- OneHot, NonZero, Compress
def _one_hot_infer(ctx: InferContext) -> list[TensorType]:
    idx, values, depth_t = ctx.type(0), ctx.type(2), ctx.type(1)
    if values.rank is not None and (values.rank != 1 or values.shape[0] not in (2, None)):
        ctx.fail(f"values must be [off_value, on_value], got shape {format_shape(values.shape)}")
    if depth_t.rank is not None and (depth_t.rank > 1 or (depth_t.rank == 1 and depth_t.shape[0] not in (1, None))):
        ctx.fail(f"depth must be a scalar (or a vector of one element), got shape {format_shape(depth_t.shape)}")
    if idx.shape is None:
        return [TensorType(values.dtype, None)]
    rank = idx.rank + 1
    axis = normalize_axis(ctx.attrs["axis"], rank, ctx)
    depth = ctx.const(1)
    depth_dim = None if depth is None else int(np.asarray(depth).ravel()[0])
    return [TensorType(values.dtype, idx.shape[:axis] + (depth_dim,) + idx.shape[axis:])]


def _one_hot(indices, depth, values, *, axis):
    if np.size(depth) != 1 or values.shape != (2,):
        raise ValueError(f"depth {list(np.shape(depth))} must hold one value and values {list(values.shape)} two")
    depth = int(np.asarray(depth).ravel()[0])
    axis = axis % (indices.ndim + 1)
    idx = np.expand_dims(_wrap(indices, depth), axis)
    classes = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    return np.where(idx == classes, values[1], values[0]).astype(values.dtype)


register(OpDef(name="OneHot", infer=_one_hot_infer, reference=_one_hot, inputs=(3, 3),
               attrs={"axis": Attr("int", -1)}, traits=PURE,
               doc="on_value where a new `axis` of size depth equals the index, off_value elsewhere."))


def _nonzero_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    return [TensorType("int64", (t.rank, None))]


def _nonzero(x):
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


register(OpDef(name="NonZero", infer=_nonzero_infer, reference=_nonzero, traits=PURE,
               doc="The coordinates of the non-zero elements, one column each (int64 [rank, count])."))


def _compress_infer(ctx: InferContext) -> list[TensorType]:
    t, cond = ctx.type(0), ctx.type(1)
    if cond.dtype != "bool" or (cond.rank is not None and cond.rank != 1):
        ctx.fail(f"condition must be a 1-D bool tensor, got {cond}")
    value = ctx.const(1)
    count = None if value is None else int(np.count_nonzero(value))
    axis = ctx.attrs["axis"]
    if axis is None:
        return [TensorType(t.dtype, (count,))]
    if t.shape is None:
        return [TensorType(t.dtype, None)]
    axis = normalize_axis(axis, t.rank, ctx)
    return [TensorType(t.dtype, t.shape[:axis] + (count,) + t.shape[axis + 1:])]


register(OpDef(name="Compress", infer=_compress_infer, inputs=(2, 2), attrs={"axis": Attr("int")}, traits=PURE,
               reference=lambda x, condition, *, axis: np.compress(condition.astype(bool), x, axis=axis),
               doc="The slices along `axis` (of the flattened input when absent) where condition is true."))
