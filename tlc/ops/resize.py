"""Resize (opset 19): nearest, linear and cubic interpolation with every coordinate transformation mode,
antialiasing, ``axes`` and ``keep_aspect_ratio_policy``.

Resizing is separable, so the reference resizes one axis at a time. Along an axis every output position reads
a few input positions ("taps") with weights: one tap for nearest, two for linear, four for cubic, and a footprint
widened by 1/scale when antialiasing a downscale. Taps past either end read the edge value, as ONNX specifies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir.types import Dim, TensorType, format_shape
from . import dims
from .registry import Attr, InferContext, OpDef, Trait, register

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")

ATTRS = {
    "antialias": Attr("int", 0),
    "axes": Attr("ints"),
    "coordinate_transformation_mode": Attr("string", "half_pixel"),
    "cubic_coeff_a": Attr("float", -0.75),
    "exclude_outside": Attr("int", 0),
    "extrapolation_value": Attr("float", 0.0),
    "keep_aspect_ratio_policy": Attr("string", "stretch"),
    "mode": Attr("string", "nearest"),
    "nearest_mode": Attr("string", "round_prefer_floor"),
}


def _given(array: np.ndarray | None) -> list[float] | None:
    """An optional input's values; an empty tensor stands for "absent" (older exporters write one)."""
    if array is None or np.asarray(array).size == 0:
        return None
    return [v.item() for v in np.asarray(array).ravel()]


def plan(shape: Sequence[Dim], axes: list[int], scales: list[float] | None, sizes: list[int] | None,
         policy: str) -> tuple[list[Dim], dict[int, float | None]]:
    """Output dims and the scale each resized axis uses for its coordinate mapping.

    With ``scales`` the output is floor(dim * scale); with ``sizes`` the scale is size / dim, and a
    keep_aspect_ratio_policy other than stretch uses one scale (the min or max) for all ``axes``.
    """
    out, scale_of = list(shape), {}
    if scales is not None:
        for a, s in zip(axes, scales):
            d = shape[a]
            scale_of[a] = float(s)
            out[a] = int(np.floor(d * float(s))) if isinstance(d, int) else (d if s == 1 else None)
        return out, scale_of
    assert sizes is not None
    if policy == "stretch":
        for a, n in zip(axes, sizes):
            d = shape[a]
            out[a] = int(n)
            scale_of[a] = n / d if isinstance(d, int) and d else None
        return out, scale_of
    if not all(isinstance(shape[a], int) and shape[a] for a in axes):
        return [None if a in axes else d for a, d in enumerate(shape)], dict.fromkeys(axes)
    ratios = [n / shape[a] for a, n in zip(axes, sizes)]
    s = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        scale_of[a] = s
        out[a] = int(s * shape[a] + 0.5)  # round half up
    return out, scale_of


# ---------------------------------------------------------------------------- inference
def _resize_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    a = ctx.attrs
    for key, allowed in (("mode", MODES), ("coordinate_transformation_mode", COORDINATE_MODES),
                         ("nearest_mode", NEAREST_MODES), ("keep_aspect_ratio_policy", ASPECT_POLICIES)):
        if a[key] not in allowed:
            ctx.fail(f"{key} {a[key]!r} is not one of {', '.join(allowed)}")
    if a["antialias"] and a["mode"] == "nearest":
        ctx.fail("antialias applies to linear and cubic modes, not nearest")
    has_scales = ctx.has_input(2) and not _is_empty(ctx, 2)
    has_sizes = ctx.has_input(3) and not _is_empty(ctx, 3)
    if has_scales == has_sizes:
        ctx.fail(f"expected exactly one of scales and sizes, got {'both' if has_scales else 'neither'}")
    if t.shape is None:
        return [t]
    axes = dims.normalize_axes_unique(ctx, a["axes"] if a["axes"] is not None else range(t.rank), t.rank)
    values = _given(ctx.const(2 if has_scales else 3))
    if values is None:
        return [TensorType(t.dtype, tuple(None if i in axes else d for i, d in enumerate(t.shape)))]
    if len(values) != len(axes):
        ctx.fail(f"{'scales' if has_scales else 'sizes'} {values} should hold one value per axis of {axes} "
                 f"(input {format_shape(t.shape)})")
    if has_scales and any(s <= 0 for s in values):
        ctx.fail(f"scales {values} must be > 0")
    out, _ = plan(t.shape, axes, values if has_scales else None, None if has_scales else [int(v) for v in values],
                  a["keep_aspect_ratio_policy"])
    return [TensorType(t.dtype, tuple(out))]


def _is_empty(ctx: InferContext, i: int) -> bool:
    value = ctx.const(i)
    if value is not None:
        return value.size == 0
    t = ctx.input_types[i]
    return t is not None and t.shape is not None and 0 in t.shape


# ---------------------------------------------------------------------------- reference
def source_coords(mode: str, out_len: int, in_len: int, scale: float,
                  roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
    """Input coordinates of the output positions along one axis, and (tf_crop_and_resize) which lie outside."""
    y = np.arange(out_len, dtype=np.float64)
    width = scale * in_len  # NOTE: ONNX maps with the unrounded output length
    if mode == "align_corners":
        return (np.zeros(out_len) if width == 1 else y * (in_len - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "pytorch_half_pixel":
        return (np.full(out_len, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        return offset + (y + 0.5) / scale - 0.5, None
    lo, hi = roi
    if width == 1:
        x = np.full(out_len, (hi - lo) * (in_len - 1) / 2)
    else:
        x = y * (hi - lo) * (in_len - 1) / (width - 1)
    x = x + lo * (in_len - 1)
    return x, (x < 0) | (x > in_len - 1)


def _nearest_index(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    rounding = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                "floor": np.floor, "ceil": np.ceil}[nearest_mode]
    return rounding(x).astype(np.int64)[:, None]


def _kernel(mode: str, t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    if mode == "linear":
        return np.clip(1 - t, 0, 1)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def taps(x: np.ndarray, in_len: int, scale: float, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each [out, taps]: the input positions each output reads, clamped to the axis."""
    mode = attrs["mode"]
    if mode == "nearest":
        idx, weights = _nearest_index(x, attrs["nearest_mode"]), np.ones((x.size, 1))
    else:
        base = np.floor(x)
        ratio = x - base
        # NOTE: an integral coordinate is read as ratio 1 from the tap on its left, as the ONNX reference does;
        # it selects the same taps as ratio 0 but keeps the tap window aligned for even footprints.
        base = np.where(ratio == 0, base - 1, base).astype(np.int64)
        ratio = np.where(ratio == 0, 1.0, ratio)
        s = min(scale, 1.0) if attrs["antialias"] else 1.0
        radius = 1 if mode == "linear" else 2
        start = int(np.floor(-radius / s)) + 1
        offsets = np.arange(start, 2 - start)
        idx = base[:, None] + offsets
        weights = _kernel(mode, s * (offsets - ratio[:, None]), attrs["cubic_coeff_a"])
        if attrs["antialias"]:
            weights = weights / weights.sum(axis=1, keepdims=True)
        if attrs["exclude_outside"]:
            weights = np.where((idx < 0) | (idx >= in_len), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, max(in_len - 1, 0)), weights


def resize_axis(data: np.ndarray, axis: int, out_len: int, scale: float, roi: tuple[float, float],
                attrs: dict) -> np.ndarray:
    """Resize float64 ``data`` along one axis."""
    x, outside = source_coords(attrs["coordinate_transformation_mode"], out_len, data.shape[axis], scale, roi)
    idx, weights = taps(x, data.shape[axis], scale, attrs)
    gathered = np.take(data, idx, axis=axis)  # [..., out, taps, ...]
    shape = (1,) * axis + weights.shape + (1,) * (data.ndim - axis - 1)
    result = (gathered * weights.reshape(shape)).sum(axis=axis + 1)
    if outside is not None and outside.any():
        mask = outside.reshape((1,) * axis + (out_len,) + (1,) * (data.ndim - axis - 1))
        result = np.where(mask, attrs["extrapolation_value"], result)
    return result


def axis_passes(shape: Sequence[int], axes_attr: Sequence[int] | None, roi: np.ndarray | None,
                scales: np.ndarray | None, sizes: np.ndarray | None,
                policy: str) -> tuple[list[int], list[tuple[int, int, float, tuple[float, float]]]]:
    """The output shape of a concrete input, and the passes that resize it, in order: (axis, output length,
    scale, roi bounds) per axis; an axis left as it is (scale 1, same length, the whole roi) has no pass."""
    rank = len(shape)
    axes = list(range(rank)) if axes_attr is None else [a % rank for a in axes_attr]
    scale_list, size_list = _given(scales), _given(sizes)
    out_shape, scale_of = plan(shape, axes, scale_list, None if size_list is None else [int(s) for s in size_list],
                               policy)
    roi_values = _given(roi)
    passes = []
    for i, a in enumerate(axes):
        bounds = (0.0, 1.0)
        if roi_values is not None:
            k = len(roi_values) // 2
            j = i if k == len(axes) else a
            bounds = (roi_values[j], roi_values[j + k])
        if scale_of[a] == 1.0 and out_shape[a] == shape[a] and bounds == (0.0, 1.0):
            continue  # identity along this axis
        passes.append((a, int(out_shape[a]), float(scale_of[a]), bounds))
    return [int(d) for d in out_shape], passes


def _resize(x, roi=None, scales=None, sizes=None, **attrs):
    _, passes = axis_passes(x.shape, attrs["axes"], roi, scales, sizes, attrs["keep_aspect_ratio_policy"])
    result = x.astype(np.float64)
    for axis, out_len, scale, bounds in passes:
        result = resize_axis(result, axis, out_len, scale, bounds, attrs)
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        return np.clip(np.round(result), info.min, info.max).astype(x.dtype)
    return result.astype(x.dtype)


register(OpDef(name="Resize", infer=_resize_infer, reference=_resize, inputs=(1, 4), attrs=ATTRS,
               traits=frozenset({Trait.PURE, Trait.FOLDABLE, Trait.LAYOUT_SENSITIVE}), cost=8,
               doc="Interpolates the input to `sizes` or by `scales` (nearest, linear, cubic; ONNX coordinate modes)."))
