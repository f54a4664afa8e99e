"""Pooling: MaxPool (with Indices), AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool, MaxRoiPool.

The references loop over kernel taps, each a vectorised strided slice of the padded input, never over pixels.
Windows that ceil_mode lets run past the end pads read padding that is never counted: MaxPool pads with the
dtype's lowest value, AveragePool divides by the number of taps inside the input (count_include_pad=0) or
inside input plus declared pads (count_include_pad=1), exactly as onnxruntime does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register
from .window import Window, end_pads_for, make_window, pad_spatial, taps, window_attrs

POOL_TRAITS = frozenset({Trait.PURE, Trait.FOLDABLE, Trait.LAYOUT_SENSITIVE})
GLOBAL_TRAITS = POOL_TRAITS | {Trait.REDUCTION}


def _pool_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    kernel = ctx.attrs["kernel_shape"]
    if not kernel:
        ctx.fail("required attribute 'kernel_shape' is missing")
    try:
        window = make_window(ctx.attrs, kernel, ctx.attrs.get("ceil_mode", 0))
    except ValueError as exc:
        ctx.fail(str(exc))
    if x.rank is not None and x.rank != len(kernel) + 2:
        ctx.fail(f"X {x} has {x.rank - 2} spatial axes but kernel_shape {list(kernel)} has {len(kernel)}")
    if ctx.node.op == "LpPool" and ctx.attrs["p"] < 1:
        ctx.fail(f"p must be >= 1, got {ctx.attrs['p']}")
    if x.shape is None:
        out = TensorType(x.dtype, None)
    else:
        try:
            spatial = [window.output_dim(i, d) for i, d in enumerate(x.shape[2:])]
        except ValueError as exc:
            ctx.fail(f"X {x}: {exc}")
        out = TensorType(x.dtype, (*x.shape[:2], *spatial))
    if ctx.node.num_outputs > (2 if ctx.node.op == "MaxPool" else 1):
        ctx.fail(f"{ctx.node.num_outputs} outputs; MaxPool has Y and Indices, the other pools only Y")
    return [out, out.with_dtype("int64")][:ctx.node.num_outputs]


def _lowest(dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def _prepare(x: np.ndarray, attrs: dict[str, Any], value: Any) -> tuple[Window, list[int], list[int], list[int],
                                                                   np.ndarray]:
    """The window, output sizes, begin and end pads, and the input padded with ``value`` so that every window
    fits (ceil_mode windows may run past the end pads)."""
    window = make_window(attrs, attrs["kernel_shape"], attrs.get("ceil_mode", 0))
    sizes = list(x.shape[2:])
    if len(sizes) != window.rank:
        raise ValueError(f"X has {len(sizes)} spatial axes, kernel_shape {window.kernel} has {window.rank}")
    outs, begins, ends = window.resolve(sizes)
    return window, outs, begins, ends, pad_spatial(x, begins, end_pads_for(window, sizes, outs, begins, ends), value)


def max_pool(x: np.ndarray, *, storage_order: int = 0, **attrs: Any) -> list[np.ndarray]:
    """ONNX MaxPool; returns [Y, Indices] (the executor keeps as many outputs as the node has)."""
    window, outs, begins, _, xp = _prepare(x, attrs, _lowest(x.dtype))
    best = arg = None
    lead = (slice(None), slice(None))
    for t, (_, slices) in enumerate(taps(window, outs)):
        tap = xp[lead + slices]
        if best is None:
            best, arg = tap.copy(), np.zeros(tap.shape, dtype=np.int32)
            continue
        better = tap > best  # strict: the first maximum in row-major window order wins, as in onnxruntime
        np.copyto(best, tap, where=better)
        arg[better] = t
    return [best, _flat_indices(x.shape, window, outs, begins, arg, storage_order)]


def _flat_indices(shape: tuple[int, ...], window: Window, outs: list[int], begins: list[int], arg: np.ndarray,
                  storage_order: int) -> np.ndarray:
    """Indices into the flattened input (N and C included) of each maximum; column-major spatial axes when
    storage_order is 1 (N and C stay outermost, as onnxruntime computes them)."""
    nsp = window.rank
    sizes = shape[2:]
    tap_offsets = np.array(list(np.ndindex(*window.kernel)), dtype=np.int64).reshape(-1, nsp)
    spatial_strides = [int(np.prod(sizes[i + 1:], dtype=np.int64)) for i in range(nsp)]
    if storage_order:
        spatial_strides = [int(np.prod(sizes[:i], dtype=np.int64)) for i in range(nsp)]
    flat = np.zeros(arg.shape, dtype=np.int64)
    for i in range(nsp):
        pos = np.arange(outs[i], dtype=np.int64) * window.strides[i] - begins[i]
        coord = pos.reshape((-1,) + (1,) * (nsp - 1 - i)) + tap_offsets[arg, i] * window.dilations[i]
        flat += coord * spatial_strides[i]
    plane = int(np.prod(sizes, dtype=np.int64))
    channel = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[:2] + (1,) * nsp)
    return flat + channel * plane


def _accumulate_dtype(dtype: np.dtype) -> np.dtype:
    """Sums of float16 run in float32 (onnxruntime's kernels do the same); others in their own type."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _tap_counts(window: Window, sizes: list[int], outs: list[int], begins: list[int], ends: list[int],
                include_pad: bool) -> np.ndarray:
    """How many taps of each window fall inside the input (or inside input plus declared pads): the divisor of
    AveragePool. The window is a product of per-axis tap sets, so the count is the product of per-axis counts."""
    counts = np.ones((1,) * len(sizes))
    for i, size in enumerate(sizes):
        starts = np.arange(outs[i]) * window.strides[i] - begins[i]
        offsets = np.arange(window.kernel[i]) * window.dilations[i]
        pos = starts[:, None] + offsets[None, :]
        lo, hi = (-begins[i], size + ends[i]) if include_pad else (0, size)
        axis_count = ((pos >= lo) & (pos < hi)).sum(axis=1)
        counts = counts * axis_count.reshape((1,) * i + (-1,) + (1,) * (len(sizes) - 1 - i))
    return counts


def average_pool(x: np.ndarray, *, count_include_pad: int = 0, **attrs: Any) -> np.ndarray:
    window, outs, begins, ends, xp = _prepare(x, attrs, 0)
    acc = np.zeros(x.shape[:2] + tuple(outs), dtype=_accumulate_dtype(x.dtype))
    for _, slices in taps(window, outs):
        acc += xp[(slice(None), slice(None)) + slices]
    counts = _tap_counts(window, list(x.shape[2:]), outs, begins, ends, bool(count_include_pad))
    return (acc / counts.astype(acc.dtype)).astype(x.dtype)


def lp_pool(x: np.ndarray, *, p: int = 2, **attrs: Any) -> np.ndarray:
    window, outs, _, _, xp = _prepare(x, attrs, 0)
    acc = np.zeros(x.shape[:2] + tuple(outs), dtype=_accumulate_dtype(x.dtype))
    for _, slices in taps(window, outs):
        tap = xp[(slice(None), slice(None)) + slices].astype(acc.dtype, copy=False)
        acc += tap * tap if p == 2 else np.abs(tap) ** p
    return (np.sqrt(acc) if p == 2 else acc ** (1.0 / p)).astype(x.dtype)


_CEIL = {"ceil_mode": Attr("int", 0)}


def _nan_in_window(inputs, attrs) -> str | None:
    """ONNX does not say what NaN does to a window's max: tlc counts it as a window's first tap only (the ONNX
    reference's loop), onnxruntime skips it, numpy's maximum spreads it (fuzz seed 808425)."""
    x = inputs[0]
    if x.dtype.kind == "f" and np.isnan(x).any():
        return "NaN in a max pool's window"
    return None


register(OpDef(name="MaxPool", infer=_pool_infer, reference=max_pool, inputs=(1, 1), undefined_at=_nan_in_window,
               attrs={**window_attrs(kernel_required=True), **_CEIL, "storage_order": Attr("int", 0)},
               traits=POOL_TRAITS, cost=1, doc="Max pooling (NCHW), with the optional Indices output."))
register(OpDef(name="AveragePool", infer=_pool_infer, reference=average_pool,
               attrs={**window_attrs(kernel_required=True), **_CEIL, "count_include_pad": Attr("int", 0)},
               traits=POOL_TRAITS, cost=1, doc="Average pooling (NCHW)."))
register(OpDef(name="LpPool", infer=_pool_infer, reference=lp_pool,
               attrs={**window_attrs(kernel_required=True), **_CEIL, "p": Attr("int", 2)},
               traits=POOL_TRAITS, cost=2, doc="Lp-norm pooling (NCHW): (sum |x|^p)^(1/p) over each window."))


# ---------------------------------------------------------------------------- global pools
def _global_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    if x.rank is not None and x.rank < 3:
        ctx.fail(f"X {x} must have rank >= 3 (N, C, spatial...)")
    if ctx.node.op == "GlobalAveragePool" and x.dtype not in FLOAT_DTYPES:
        ctx.fail(f"X has dtype {x.dtype}; GlobalAveragePool takes float types")
    shape = None if x.shape is None else (*x.shape[:2], *(1,) * (x.rank - 2))
    return [TensorType(x.dtype, shape)]


def _spatial(x: np.ndarray) -> tuple[int, ...]:
    if x.ndim < 3:  # as inference says (reached at run time when the rank was unknown)
        raise ValueError(f"X of shape {list(x.shape)} must have rank >= 3 (N, C, spatial...)")
    return tuple(range(2, x.ndim))


def _global_average(x: np.ndarray) -> np.ndarray:
    return np.mean(x, axis=_spatial(x), keepdims=True, dtype=_accumulate_dtype(x.dtype)).astype(x.dtype)


def _global_lp(x: np.ndarray, *, p: int) -> np.ndarray:
    acc = np.abs(x.astype(_accumulate_dtype(x.dtype), copy=False))
    return (np.sum(acc ** p, axis=_spatial(x), keepdims=True) ** (1.0 / p)).astype(x.dtype)


register(OpDef(name="GlobalAveragePool", infer=_global_infer, reference=_global_average, traits=GLOBAL_TRAITS,
               doc="Mean over all spatial axes (NCHW), kept as size-1 dims."))
register(OpDef(name="GlobalMaxPool", infer=_global_infer, undefined_at=_nan_in_window,
               reference=lambda x: np.max(x, axis=_spatial(x), keepdims=True), traits=GLOBAL_TRAITS,
               doc="Max over all spatial axes (NCHW), kept as size-1 dims."))
register(OpDef(name="GlobalLpPool", infer=_global_infer, reference=_global_lp, attrs={"p": Attr("int", 2)},
               traits=GLOBAL_TRAITS, cost=2, doc="Lp norm over all spatial axes (NCHW), kept as size-1 dims."))


# ---------------------------------------------------------------------------- MaxRoiPool
def _max_roi_pool_infer(ctx: InferContext) -> list[TensorType]:
    x, rois = ctx.type(0), ctx.type(1)
    if x.dtype not in FLOAT_DTYPES or rois.dtype != x.dtype:
        ctx.fail(f"X is {x.dtype} and rois {rois.dtype}; MaxRoiPool takes one float type for both")
    if x.rank is not None and x.rank != 4:
        ctx.fail(f"X {x} must be 4-D (N, C, H, W)")
    if rois.rank is not None and (rois.rank != 2 or rois.shape[1] not in (5, None)):
        ctx.fail(f"rois {rois} must be [num_rois, 5] (batch index, x1, y1, x2, y2)")
    pooled = ctx.attrs["pooled_shape"]
    if len(pooled) != 2 or min(pooled) < 1:
        ctx.fail(f"pooled_shape {list(pooled)} must be two positive ints")
    rois_n = None if rois.shape is None else rois.shape[0]
    channels = None if x.shape is None else x.shape[1]
    return [TensorType(x.dtype, (rois_n, channels, *pooled))]


def _max_roi_pool(x: np.ndarray, rois: np.ndarray, *, pooled_shape, spatial_scale: float) -> np.ndarray:
    """Per RoI (corners scaled by ``spatial_scale`` and rounded, at least 1 x 1), bins of (rows / ph, cols / pw):
    bin i covers [floor(i * size), ceil((i + 1) * size)) from the RoI's start, clipped to the map; the max of
    each bin, 0 where a bin is empty (Caffe's RoI pooling, as onnxruntime computes it)."""
    ph, pw = pooled_shape
    n, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, ph, pw), x.dtype)
    for r, (batch, *corners) in enumerate(rois.astype(np.float64)):
        if not 0 <= int(batch) < n:
            raise ValueError(f"RoI {r} names batch index {int(batch)} of an input with {n}")
        # rounded half away from zero (C's round, as onnxruntime), not numpy's half to even
        x1, y1, x2, y2 = (int(np.sign(v) * np.floor(abs(v * spatial_scale) + 0.5)) for v in corners)
        bin_h, bin_w = max(y2 - y1 + 1, 1) / ph, max(x2 - x1 + 1, 1) / pw
        plane = x[int(batch)]
        for i in range(ph):
            top = min(max(int(np.floor(i * bin_h)) + y1, 0), h)
            bottom = min(max(int(np.ceil((i + 1) * bin_h)) + y1, 0), h)
            for j in range(pw):
                left = min(max(int(np.floor(j * bin_w)) + x1, 0), w)
                right = min(max(int(np.ceil((j + 1) * bin_w)) + x1, 0), w)
                if bottom > top and right > left:
                    out[r, :, i, j] = plane[:, top:bottom, left:right].max(axis=(1, 2))
    return out


register(OpDef(name="MaxRoiPool", infer=_max_roi_pool_infer, reference=_max_roi_pool, inputs=(2, 2),
               attrs={"pooled_shape": Attr("ints", REQUIRED), "spatial_scale": Attr("float", 1.0)},
               traits=POOL_TRAITS, cost=2, doc="Max pooling of each region of interest into a fixed grid."))
