"""Vision and detection ops: GridSample, AffineGrid, Col2Im, DeformConv, RoiAlign and NonMaxSuppression.

GridSample and DeformConv read an input at fractional positions. Both are written as "taps": along each spatial
axis a position reads one (nearest), two (linear) or four (cubic) integer indices with weights; an N-D sample is
the sum over every combination of one tap per axis, one vectorised gather each. A tap outside the input has
its index clamped into range and, where the padding mode reads zeros there, its weight set to 0.
RoiAlign keeps its own bilinear rule (Caffe2's: samples just outside the map clamp to the edge), as onnxruntime
and the ONNX reference do. Positions and weights are computed in float64; results come back in the input type.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..errors import UnsupportedOperatorError
from ..ir.types import FLOAT_DTYPES, INT_DTYPES, Dim, TensorType, format_shape
from . import dims
from .infer import numel
from .registry import Attr, InferContext, OpDef, Trait, register
from .window import Window, make_window, prod, taps

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})
VISION_TRAITS = PURE | {Trait.LAYOUT_SENSITIVE}

#: a tap along one axis: (indices clamped into the axis, weights that are 0 where the tap reads nothing)
Tap = tuple[np.ndarray, np.ndarray]


def _float_type(ctx: InferContext, i: int, what: str) -> TensorType:
    t = ctx.type(i)
    if t.dtype not in FLOAT_DTYPES:
        ctx.fail(f"{what} has dtype {t.dtype}; {ctx.node.op} takes float types there")
    return t


def _check_rank(ctx: InferContext, t: TensorType, what: str, ranks: Sequence[int], layout: str) -> None:
    if t.rank is not None and t.rank not in ranks:
        ctx.fail(f"{what} {t} should have rank {' or '.join(map(str, ranks))} ({layout})")


def _merge(ctx: InferContext, a: Dim, b: Dim, what: str) -> Dim:
    try:
        return dims.merge(a, b)
    except ValueError:
        ctx.fail(f"{what}: {a} != {b}")


def _scalar(array: np.ndarray | None, default):
    """An optional scalar input (shape [] or [1]); ``default`` when absent or empty."""
    if array is None or np.asarray(array).size == 0:
        return default
    return np.asarray(array).ravel()[0].item()


# ---------------------------------------------------------------------------- taps along one axis
def _linear_taps(x: np.ndarray, size: int, zeros_outside: bool) -> list[Tap]:
    low = np.floor(x)
    frac = x - low
    return [_tap(low.astype(np.int64) + k, w, size, zeros_outside) for k, w in ((0, 1 - frac), (1, frac))]


def _nearest_taps(x: np.ndarray, size: int, zeros_outside: bool) -> list[Tap]:
    # NOTE: np.rint rounds halves to even, as the spec asks
    return [_tap(np.rint(x).astype(np.int64), np.ones_like(x), size, zeros_outside)]


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    """Keys' cubic convolution weights of the four taps floor(x) - 1 .. floor(x) + 2 (a = -0.75, as PyTorch)."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _tap(index: np.ndarray, weight: np.ndarray, size: int, zeros_outside: bool) -> Tap:
    if zeros_outside:
        weight = np.where((index >= 0) & (index < size), weight, 0.0)
    return np.clip(index, 0, size - 1), weight


def _reflect(x: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Positions folded back into the image by repeated reflection at its borders: the pixel centres 0 and
    size - 1 with align_corners, the outer pixel edges -0.5 and size - 0.5 without; then clipped into range."""
    low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    span = high - low
    if span <= 0:
        return np.zeros_like(x)
    dist = np.abs(x - low)
    flips = np.floor(dist / span)
    extra = dist - flips * span
    folded = np.where(flips % 2 == 0, low + extra, high - extra)
    return np.clip(folded, 0, size - 1)


def _gather_sum(table: np.ndarray, lead: tuple[np.ndarray, ...], axis_taps: Sequence[list[Tap]]) -> np.ndarray:
    """The sum over every combination of one tap per axis of ``table[(*lead, *indices)] * weights``.

    ``table`` holds the channels last, so each gather gives the position's shape plus a channel axis.
    """
    total = None
    for combo in itertools.product(*axis_taps):
        weight = combo[0][1]
        for _, w in combo[1:]:
            weight = weight * w
        value = table[lead + tuple(index for index, _ in combo)] * weight[..., None]
        total = value if total is None else total + value
    return total


# ---------------------------------------------------------------------------- GridSample
GRID_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic", "bicubic": "cubic"}
PADDING_MODES = ("zeros", "border", "reflection")


def _grid_sample_mode(mode: str, padding_mode: str, dtype: str, where: str) -> str:
    if mode not in GRID_MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(GRID_MODES)}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"padding_mode {padding_mode!r} is not one of {', '.join(PADDING_MODES)}")
    mode = GRID_MODES[mode]
    if dtype not in FLOAT_DTYPES and not (mode == "nearest" and (dtype in INT_DTYPES or dtype == "bool")):
        raise UnsupportedOperatorError(f"{where}: GridSample of {dtype} X is supported with mode nearest only "
                                       f"(got mode {mode}); interpolating needs a float X", {("", "GridSample"): 1})
    return mode


def _grid_sample_infer(ctx: InferContext) -> list[TensorType]:
    x, grid = ctx.type(0), _float_type(ctx, 1, "grid")
    try:
        _grid_sample_mode(ctx.attrs["mode"], ctx.attrs["padding_mode"], x.dtype,
                          f"node {ctx.node.name!r} (GridSample)")
    except ValueError as exc:
        ctx.fail(str(exc))
    if x.rank is not None and x.rank < 3:
        ctx.fail(f"X {x} should have rank >= 3 (N, C, D1, ..., Dr)")
    if grid.rank is not None and grid.rank < 3:
        ctx.fail(f"grid {grid} should have rank >= 3 (N, D1_out, ..., Dr_out, r)")
    if x.rank is not None and grid.rank is not None:
        if x.rank != grid.rank:
            ctx.fail(f"X {x} and grid {grid} should have the same rank (r + 2)")
        if isinstance(grid.shape[-1], int) and grid.shape[-1] != x.rank - 2:
            ctx.fail(f"grid {grid} should end in {x.rank - 2} (one coordinate per spatial axis of X {x})")
    if grid.shape is None:
        return [TensorType(x.dtype, None if x.shape is None else (x.shape[0], x.shape[1]) + (None,) * (x.rank - 2))]
    batch = _merge(ctx, None if x.shape is None else x.shape[0], grid.shape[0], "the batch of X and grid differ")
    channels = None if x.shape is None else x.shape[1]
    return [TensorType(x.dtype, (batch, channels, *grid.shape[1:-1]))]


def grid_sample(x: np.ndarray, grid: np.ndarray, *, align_corners: int, mode: str, padding_mode: str) -> np.ndarray:
    """Sample X (N, C, D1..Dr) at the normalised positions of grid (N, O1..Or, r), x (innermost axis) first."""
    mode = _grid_sample_mode(mode, padding_mode, str(x.dtype), "GridSample")
    r = x.ndim - 2
    if grid.ndim != x.ndim or grid.shape[-1] != r or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid {list(grid.shape)} does not fit X {list(x.shape)}: expected [N, ..., {r}]")
    axis_taps = []
    for axis in range(r):
        size = x.shape[2 + axis]
        g = grid[..., r - 1 - axis].astype(np.float64)
        pos = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
        if mode == "cubic":  # each of the four taps is padded on its own (as PyTorch and onnxruntime do)
            low = np.floor(pos)
            weights = _cubic_weights(pos - low)
            index = [low + k for k in (-1, 0, 1, 2)]
            if padding_mode == "reflection":
                index = [np.rint(_reflect(i, size, align_corners)) for i in index]
            axis_taps.append([_tap(i.astype(np.int64), w, size, padding_mode == "zeros")
                              for i, w in zip(index, weights)])
            continue
        if padding_mode == "border":
            pos = np.clip(pos, 0, size - 1)
        elif padding_mode == "reflection":
            pos = _reflect(pos, size, align_corners)
        build = _nearest_taps if mode == "nearest" else _linear_taps
        axis_taps.append(build(pos, size, padding_mode == "zeros"))
    n_index = np.arange(x.shape[0]).reshape((-1,) + (1,) * r)
    table = np.moveaxis(x, 1, -1)
    if mode == "nearest":  # one tap: a plain gather, any dtype
        picked = table[(n_index,) + tuple(t[0][0] for t in axis_taps)]
        keep = np.logical_and.reduce([t[0][1] != 0 for t in axis_taps])
        y = np.where(keep[..., None], picked, np.zeros((), x.dtype))
    else:
        y = _gather_sum(table, (n_index,), axis_taps)
    return np.ascontiguousarray(np.moveaxis(y, -1, 1)).astype(x.dtype, copy=False)


register(OpDef(name="GridSample", infer=_grid_sample_infer, reference=grid_sample, inputs=(2, 2),
               attrs={"align_corners": Attr("int", 0), "mode": Attr("string", "linear"),
                      "padding_mode": Attr("string", "zeros")},
               traits=VISION_TRAITS, cost=8,
               doc="Sample X at the normalised positions of grid: nearest, N-linear or N-cubic; zeros, border or "
                   "reflection padding (opset 20, N-D; opset 16's bilinear/bicubic names read as linear/cubic)."))


# ---------------------------------------------------------------------------- AffineGrid
def _affine_grid_infer(ctx: InferContext) -> list[TensorType]:
    theta = _float_type(ctx, 0, "theta")
    if ctx.type(1).dtype != "int64":
        ctx.fail(f"size has dtype {ctx.type(1).dtype}, expected int64")
    _check_rank(ctx, theta, "theta", (3,), "N, 2, 3 or N, 3, 4")
    r = None
    if theta.shape is not None and isinstance(theta.shape[1], int):
        r = theta.shape[1]
        if r not in (2, 3) or (isinstance(theta.shape[2], int) and theta.shape[2] != r + 1):
            ctx.fail(f"theta {theta} should be [N, 2, 3] (2-D) or [N, 3, 4] (3-D)")
    size = dims.const_ints(ctx, 1)
    length = dims.vector_length(ctx, 1)
    if length is not None:
        if length not in (4, 5) or (r is not None and length != r + 2):
            ctx.fail(f"size has {length} values; expected {'4 or 5' if r is None else r + 2} (N, C, spatial...) "
                     f"for theta {theta}")
        r = length - 2
    if r is None:
        return [TensorType(theta.dtype, None)]
    batch = None if theta.shape is None else theta.shape[0]
    spatial: list[Dim] = [None] * r
    if size is not None:
        if any(v < 0 for v in size):
            ctx.fail(f"size {size} has a negative dim")
        batch = _merge(ctx, batch, size[0], "theta's batch and size[0] differ")
        spatial = list(size[2:])
    return [TensorType(theta.dtype, (batch, *spatial, r))]


def _base_coords(n: int, align_corners: int) -> np.ndarray:
    """n positions spread over [-1, 1]: pixel centres at the ends with align_corners, pixel edges without."""
    if n <= 1:
        return np.zeros(n)
    if align_corners:
        return np.linspace(-1.0, 1.0, n)
    return (np.arange(n) * 2 + 1) / n - 1


def affine_grid(theta: np.ndarray, size: np.ndarray, *, align_corners: int) -> np.ndarray:
    """grid[n, d.., :] = theta[n] @ (x, y[, z], 1): the base positions of size's spatial dims, mapped."""
    size = [int(v) for v in np.asarray(size).ravel()]
    r = len(size) - 2
    if r not in (2, 3) or theta.shape[1:] != (r, r + 1) or theta.shape[0] != size[0]:
        raise ValueError(f"theta {list(theta.shape)} and size {size} do not fit: expected [N, 2, 3] with 4 sizes "
                         f"or [N, 3, 4] with 5, N the same")
    axes = [_base_coords(n, align_corners) for n in size[2:]]
    mesh = np.meshgrid(*axes, indexing="ij")  # tensor order: (D,) H, W
    base = np.stack([*reversed(mesh), np.ones_like(mesh[0])], axis=-1)  # (..., x, y[, z], 1)
    grid = np.einsum("...k,nik->n...i", base, theta.astype(np.float64))
    return grid.astype(theta.dtype)


register(OpDef(name="AffineGrid", infer=_affine_grid_infer, reference=affine_grid, inputs=(2, 2),
               attrs={"align_corners": Attr("int", 0)}, traits=PURE, cost=2,
               doc="The sampling grid of affine matrices theta (2-D [N, 2, 3] or 3-D [N, 3, 4]) over size."))


# ---------------------------------------------------------------------------- Col2Im
def _col2im_geometry(image: Sequence[int], block: Sequence[int], attrs: dict) -> tuple[Window, list[int]]:
    """The window of the blocks and how many blocks fit along each axis; ValueError when they do not."""
    if len(image) != len(block) or len(image) < 1:
        raise ValueError(f"image_shape {list(image)} and block_shape {list(block)} should have one value per "
                         f"spatial axis each")
    window = make_window({**attrs, "auto_pad": "NOTSET"}, block)
    return window, [window.axis(i, n)[0] for i, n in enumerate(image)]


def _col2im_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    if x.dtype not in FLOAT_DTYPES | INT_DTYPES:
        ctx.fail(f"input has dtype {x.dtype}; Col2Im takes numeric types")
    for i, what in ((1, "image_shape"), (2, "block_shape")):
        if ctx.type(i).dtype != "int64":
            ctx.fail(f"{what} has dtype {ctx.type(i).dtype}, expected int64")
    _check_rank(ctx, x, "input", (3,), "N, C * prod(block_shape), L")
    image, block = dims.const_ints(ctx, 1), dims.const_ints(ctx, 2)
    r = dims.vector_length(ctx, 1) or dims.vector_length(ctx, 2)
    xs = x.shape or (None, None, None)
    channels: Dim = None
    if block is not None:
        if any(b <= 0 for b in block):
            ctx.fail(f"block_shape {block} must be positive")
        if isinstance(xs[1], int) and xs[1] % prod(block):
            ctx.fail(f"input {x}: dim 1 is not a multiple of prod(block_shape {block}) = {prod(block)}")
        channels = xs[1] // prod(block) if isinstance(xs[1], int) else None
    if image is not None and block is not None:
        try:
            _, counts = _col2im_geometry(image, block, ctx.attrs)
        except ValueError as exc:
            ctx.fail(str(exc))
        if isinstance(xs[2], int) and xs[2] != prod(counts):
            ctx.fail(f"input {x} holds {xs[2]} blocks, but {counts} = {prod(counts)} fit the image {image}")
    if r is None:
        return [TensorType(x.dtype, None)]
    return [TensorType(x.dtype, (xs[0], channels, *(image or [None] * r)))]


def col2im(x: np.ndarray, image_shape: np.ndarray, block_shape: np.ndarray, *, dilations=None, pads=None,
           strides=None) -> np.ndarray:
    """Sum the column blocks back into an image: one strided scatter-add per block element."""
    image = [int(v) for v in np.asarray(image_shape).ravel()]
    block = [int(v) for v in np.asarray(block_shape).ravel()]
    window, counts = _col2im_geometry(image, block, {"dilations": dilations, "pads": pads, "strides": strides})
    n, cols, length = x.shape
    if cols % prod(block) or length != prod(counts):
        raise ValueError(f"input {list(x.shape)} does not hold [N, C * {prod(block)}, {prod(counts)}] blocks")
    r = len(image)
    begins, ends = list(window.pads[:r]), list(window.pads[r:])
    padded = np.zeros((n, cols // prod(block), *(i + b + e for i, b, e in zip(image, begins, ends))), x.dtype)
    blocks = x.reshape(n, cols // prod(block), *block, *counts)
    for offset, slices in taps(window, counts):
        padded[(slice(None), slice(None), *slices)] += blocks[(slice(None), slice(None), *offset)]
    return np.ascontiguousarray(padded[(slice(None), slice(None),
                                        *(slice(b, b + i) for b, i in zip(begins, image)))])


register(OpDef(name="Col2Im", infer=_col2im_infer, reference=col2im, inputs=(3, 3),
               attrs={"dilations": Attr("ints"), "pads": Attr("ints"), "strides": Attr("ints")},
               traits=VISION_TRAITS, cost=2,
               doc="Column blocks [N, C * prod(block), L] summed back into an image [N, C, *image_shape]."))


# ---------------------------------------------------------------------------- DeformConv
def _deform_window(attrs: dict, kernel: Sequence[int]) -> Window:
    return make_window({"dilations": attrs.get("dilations"), "pads": attrs.get("pads"),
                        "strides": attrs.get("strides")}, kernel)


def _deform_conv_infer(ctx: InferContext) -> list[TensorType]:
    x, w, offset = (_float_type(ctx, i, what) for i, what in enumerate(("X", "W", "offset")))
    ranks = {t.rank for t in (x, w, offset) if t.rank is not None}
    if len(ranks) > 1 or (ranks and min(ranks) < 3):
        ctx.fail(f"X {x}, W {w} and offset {offset} should share one rank >= 3 (N, C, spatial...)")
    if not ranks:
        return [TensorType(x.dtype, None)]
    r = ranks.pop() - 2
    xs, ws, os_ = (t.shape or (None,) * (r + 2) for t in (x, w, offset))
    group, offset_group = ctx.attrs["group"], ctx.attrs["offset_group"]
    if group < 1 or offset_group < 1:
        ctx.fail(f"group {group} and offset_group {offset_group} should be >= 1")
    kernel = list(ctx.attrs["kernel_shape"] or ws[2:])
    if len(kernel) != r:
        ctx.fail(f"kernel_shape {kernel} has {len(kernel)} dims for {r} spatial axes")
    checks = [(isinstance(xs[1], int) and isinstance(ws[1], int) and xs[1] != ws[1] * group,
               f"X {x} has {xs[1]} channels but W {w} with group {group} expects {ws[1]} * {group}"),
              (isinstance(ws[0], int) and ws[0] % group, f"W {w}: {ws[0]} output channels, not a multiple of group"),
              (isinstance(xs[1], int) and xs[1] % offset_group,
               f"X {x}: {xs[1]} channels, not a multiple of offset_group {offset_group}")]
    if all(isinstance(k, int) for k in kernel) and isinstance(os_[1], int):
        want = offset_group * prod(kernel) * r
        checks.append((os_[1] != want, f"offset {offset} should have offset_group * prod(kernel) * {r} = {want} "
                                       f"channels (dim 1)"))
    for bad, message in checks:
        if bad:
            ctx.fail(message)
    out: list[Dim] = list(os_[2:])
    if all(isinstance(k, int) for k in kernel):
        try:
            window = _deform_window(ctx.attrs, kernel)
            for i, d in enumerate(xs[2:]):
                if isinstance(d, int):
                    out[i] = _merge(ctx, window.axis(i, d)[0], out[i], f"offset {offset}: spatial dim {i} "
                                                                       f"differs from the convolution's output")
        except ValueError as exc:
            ctx.fail(str(exc))
    if ctx.has_input(3) and ctx.type(3).shape not in (None, (ws[0],)) and isinstance(ws[0], int):
        ctx.fail(f"B {ctx.type(3)} should have shape [{ws[0]}] (one value per output channel)")
    if ctx.has_input(4):
        mask = ctx.type(4)
        want = offset_group * prod(kernel) if all(isinstance(k, int) for k in kernel) else None
        if mask.rank not in (None, r + 2) or (mask.shape and isinstance(mask.shape[1], int)
                                              and want is not None and mask.shape[1] != want):
            ctx.fail(f"mask {mask} should be [N, {want}, output spatial...] (offset_group * prod(kernel))")
    batch = _merge(ctx, xs[0], os_[0], "the batch of X and offset differ")
    return [TensorType(x.dtype, (batch, ws[0], *out))]


def deform_conv(x: np.ndarray, w: np.ndarray, offset: np.ndarray, b: np.ndarray | None = None,
                mask: np.ndarray | None = None, *, dilations=None, group: int, kernel_shape=None,
                offset_group: int, pads=None, strides=None) -> np.ndarray:
    """Deformable convolution: each kernel tap reads X bilinearly (zeros outside) at its grid position plus a
    learned offset, times the mask; then a grouped matmul with W as in Conv."""
    n, c = x.shape[:2]
    r = x.ndim - 2
    m = w.shape[0]
    kernel = [int(k) for k in (kernel_shape or w.shape[2:])]
    window = _deform_window({"dilations": dilations, "pads": pads, "strides": strides}, kernel)
    outs, begins, _ = window.resolve(x.shape[2:])
    k = prod(kernel)
    if c != w.shape[1] * group or c % offset_group or offset.shape != (n, offset_group * k * r, *outs):
        raise ValueError(f"X {list(x.shape)}, W {list(w.shape)} and offset {list(offset.shape)} do not fit "
                         f"group {group}, offset_group {offset_group} (offset expected "
                         f"{[n, offset_group * k * r, *outs]})")
    shifts = offset.reshape(n, offset_group, k, r, *outs).astype(np.float64)
    grid_shape = (1, 1, k) + tuple(outs)
    taps_of_kernel = np.array(list(itertools.product(*(range(kk) for kk in kernel))))  # (K, r)
    axis_taps = []
    for axis in range(r):
        tap = taps_of_kernel[:, axis].reshape((1, 1, k) + (1,) * r) * window.dilations[axis]
        base = np.arange(outs[axis]) * window.strides[axis] - begins[axis]
        base = base.reshape((1, 1, 1) + tuple(-1 if a == axis else 1 for a in range(r)))
        pos = np.broadcast_to(tap + base, grid_shape) + shifts[:, :, :, axis]
        axis_taps.append(_linear_taps(pos, x.shape[2 + axis], zeros_outside=True))
    table = np.moveaxis(x.reshape(n, offset_group, c // offset_group, *x.shape[2:]), 2, -1)
    lead = (np.arange(n).reshape((-1,) + (1,) * (r + 2)), np.arange(offset_group).reshape((1, -1) + (1,) * (r + 1)))
    cols = _gather_sum(table, lead, axis_taps)  # (N, offset_group, K, *outs, C / offset_group)
    if mask is not None:
        cols = cols * mask.reshape(n, offset_group, k, *outs, 1)
    cols = np.moveaxis(cols, -1, 2).reshape(n, group, (c // group) * k, prod(outs)).astype(x.dtype)
    y = np.matmul(w.reshape(group, m // group, (c // group) * k), cols).reshape(n, m, *outs)
    if b is not None:
        y = y + b.reshape((m,) + (1,) * r)
    return y.astype(x.dtype, copy=False)


register(OpDef(name="DeformConv", infer=_deform_conv_infer, reference=deform_conv, inputs=(3, 5),
               attrs={"dilations": Attr("ints"), "group": Attr("int", 1), "kernel_shape": Attr("ints"),
                      "offset_group": Attr("int", 1), "pads": Attr("ints"), "strides": Attr("ints")},
               traits=VISION_TRAITS, cost=12,
               doc="Deformable convolution (N-D): kernel taps moved by offset, weighted by an optional mask."))


# ---------------------------------------------------------------------------- RoiAlign
ROI_COORDINATE_MODES = ("half_pixel", "output_half_pixel")
ROI_MODES = ("avg", "max")


def _roi_align_infer(ctx: InferContext) -> list[TensorType]:
    x, rois = _float_type(ctx, 0, "X"), _float_type(ctx, 1, "rois")
    indices = ctx.type(2)
    attrs = ctx.attrs
    if attrs["mode"] not in ROI_MODES:
        ctx.fail(f"mode {attrs['mode']!r} is not one of {', '.join(ROI_MODES)}")
    if attrs["coordinate_transformation_mode"] not in ROI_COORDINATE_MODES:
        ctx.fail(f"coordinate_transformation_mode {attrs['coordinate_transformation_mode']!r} is not one of "
                 f"{', '.join(ROI_COORDINATE_MODES)}")
    if attrs["output_height"] < 1 or attrs["output_width"] < 1 or attrs["sampling_ratio"] < 0:
        ctx.fail(f"output_height {attrs['output_height']} and output_width {attrs['output_width']} should be >= 1, "
                 f"sampling_ratio {attrs['sampling_ratio']} >= 0")
    if indices.dtype != "int64":
        ctx.fail(f"batch_indices has dtype {indices.dtype}, expected int64")
    _check_rank(ctx, x, "X", (4,), "N, C, H, W")
    _check_rank(ctx, rois, "rois", (2,), "num_rois, 4")
    _check_rank(ctx, indices, "batch_indices", (1,), "num_rois")
    if rois.shape is not None and rois.shape[1] not in (None, 4) and isinstance(rois.shape[1], int):
        ctx.fail(f"rois {rois} should be [num_rois, 4] (x1, y1, x2, y2)")
    count = _merge(ctx, None if rois.shape is None else rois.shape[0],
                   None if indices.shape is None else indices.shape[0], "rois and batch_indices count differently")
    return [TensorType(x.dtype, (count, None if x.shape is None else x.shape[1], attrs["output_height"],
                                 attrs["output_width"]))]


def _roi_axis(pos: np.ndarray, size: int) -> tuple[list[Tap], np.ndarray]:
    """Caffe2's bilinear taps along one axis: a sample in [-1, 0) reads the edge, one at or past the last pixel
    reads it alone; samples beyond -1 or size read nothing (the returned mask)."""
    inside = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, pos - low)
    return [(low, 1 - frac), (high, frac)], inside


def roi_align(x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, *, coordinate_transformation_mode: str,
              mode: str, output_height: int, output_width: int, sampling_ratio: int,
              spatial_scale: float) -> np.ndarray:
    """Pool each RoI into output_height x output_width bins, each the avg (or max) of a grid of bilinear samples."""
    _, c, height, width = x.shape
    out = np.zeros((rois.shape[0], c, output_height, output_width), np.float64)
    shift = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    for i, (roi, b) in enumerate(zip(rois.astype(np.float64), np.asarray(batch_indices).ravel())):
        if not 0 <= b < x.shape[0]:
            raise ValueError(f"batch_indices[{i}] = {b} is outside the batch of X {list(x.shape)}")
        start_x, start_y, end_x, end_y = roi * spatial_scale - shift
        roi_w, roi_h = end_x - start_x, end_y - start_y
        if coordinate_transformation_mode == "output_half_pixel":  # the legacy mode keeps RoIs at least 1 x 1
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        grid_h = sampling_ratio or int(np.ceil(roi_h / output_height))
        grid_w = sampling_ratio or int(np.ceil(roi_w / output_width))
        if grid_h <= 0 or grid_w <= 0:
            continue  # no samples: the bins stay 0
        ys = start_y + np.arange(output_height)[:, None] * bin_h + (np.arange(grid_h) + 0.5) * bin_h / grid_h
        xs = start_x + np.arange(output_width)[:, None] * bin_w + (np.arange(grid_w) + 0.5) * bin_w / grid_w
        (y_taps, y_in), (x_taps, x_in) = _roi_axis(ys.ravel(), height), _roi_axis(xs.ravel(), width)
        inside = (y_in[:, None] & x_in[None, :])[None]
        plane = x[b].astype(np.float64)
        terms = [plane[:, yi[:, None], xi[None, :]] * (wy[:, None] * wx[None, :]) * inside
                 for (yi, wy), (xi, wx) in itertools.product(y_taps, x_taps)]
        shape = (c, output_height, grid_h, output_width, grid_w)
        if mode == "max":  # onnxruntime's rule: the largest weighted corner of each sample, then over samples
            out[i] = np.max(np.maximum.reduce(terms).reshape(shape), axis=(2, 4))
        else:
            out[i] = np.sum(sum(terms).reshape(shape), axis=(2, 4)) / (grid_h * grid_w)
    return out.astype(x.dtype)


register(OpDef(name="RoiAlign", infer=_roi_align_infer, reference=roi_align, inputs=(3, 3),
               attrs={"coordinate_transformation_mode": Attr("string", "half_pixel"), "mode": Attr("string", "avg"),
                      "output_height": Attr("int", 1), "output_width": Attr("int", 1),
                      "sampling_ratio": Attr("int", 0), "spatial_scale": Attr("float", 1.0)},
               traits=VISION_TRAITS, cost=8,
               doc="RoI pooling with bilinear samples (opset 16: half_pixel or output_half_pixel; avg or max)."))


# ---------------------------------------------------------------------------- NonMaxSuppression
def _nms_infer(ctx: InferContext) -> list[TensorType]:
    boxes, scores = _float_type(ctx, 0, "boxes"), _float_type(ctx, 1, "scores")
    if ctx.attrs["center_point_box"] not in (0, 1):
        ctx.fail(f"center_point_box should be 0 or 1, got {ctx.attrs['center_point_box']}")
    _check_rank(ctx, boxes, "boxes", (3,), "num_batches, spatial_dimension, 4")
    _check_rank(ctx, scores, "scores", (3,), "num_batches, num_classes, spatial_dimension")
    if boxes.shape is not None and isinstance(boxes.shape[2], int) and boxes.shape[2] != 4:
        ctx.fail(f"boxes {boxes} should end in 4 (one box each)")
    if boxes.shape is not None and scores.shape is not None:
        _merge(ctx, boxes.shape[0], scores.shape[0], "boxes and scores have different batches")
        _merge(ctx, boxes.shape[1], scores.shape[2], "boxes and scores hold different numbers of boxes")
    for i, (what, dtype) in enumerate((("max_output_boxes_per_class", "int64"), ("iou_threshold", None),
                                       ("score_threshold", None)), start=2):
        if ctx.has_input(i):
            t = ctx.type(i)
            if (dtype and t.dtype != dtype) or (not dtype and t.dtype not in FLOAT_DTYPES):
                ctx.fail(f"{what} has dtype {t.dtype}, expected {dtype or 'float'}")
            if t.shape is not None and numel(t.shape) not in (None, 0, 1):
                ctx.fail(f"{what} should be a scalar, got shape {format_shape(t.shape)}")
    # NOTE: how many boxes survive depends on the values: the first dim stays unknown
    return [TensorType("int64", (None, 3))]


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as [y_min, x_min, y_max, x_max] from [y1, x1, y2, x2] (any diagonal) or [x_c, y_c, w, h]."""
    if center_point_box:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one corner box against many; 0 where either area or the intersection is empty."""
    inter_h = np.maximum(0, np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]))
    inter_w = np.maximum(0, np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]))
    inter = inter_h * inter_w
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    valid = (area > 0) & (areas > 0) & (inter > 0)
    return np.where(valid, inter / np.where(valid, union, 1), 0)


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output_boxes_per_class: np.ndarray | None = None,
                        iou_threshold: np.ndarray | None = None, score_threshold: np.ndarray | None = None, *,
                        center_point_box: int) -> np.ndarray:
    """Greedy NMS per (batch, class): the best-scoring box left is kept and suppresses those overlapping it
    with IoU > iou_threshold; equal scores keep index order. Rows [batch, class, box], batch then class."""
    limit = int(_scalar(max_output_boxes_per_class, 0))
    iou_limit = _scalar(iou_threshold, 0.0)
    min_score = _scalar(score_threshold, None)
    if boxes.shape[0] != scores.shape[0] or boxes.shape[1] != scores.shape[2] or boxes.shape[2] != 4:
        raise ValueError(f"boxes {list(boxes.shape)} and scores {list(scores.shape)} do not fit: expected "
                         f"[B, S, 4] and [B, C, S]")
    corners = _corners(boxes, center_point_box)
    rows: list[tuple[int, int, int]] = []
    for b, c in itertools.product(range(scores.shape[0]), range(scores.shape[1])):
        if limit <= 0:
            break
        s = scores[b, c]
        order = np.argsort(-s, kind="stable")
        if min_score is not None:
            order = order[s[order] > min_score]
        kept = 0
        while order.size and kept < limit:
            best, order = order[0], order[1:]
            rows.append((b, c, int(best)))
            kept += 1
            order = order[_iou(corners[b, best], corners[b, order]) <= iou_limit]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


register(OpDef(name="NonMaxSuppression", infer=_nms_infer, reference=non_max_suppression, inputs=(2, 5),
               attrs={"center_point_box": Attr("int", 0)}, traits=PURE, cost=10,
               doc="Greedy non-max suppression per batch and class; selected [batch, class, box] rows (int64 "
                   "[?, 3])."))
