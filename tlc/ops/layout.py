"""Operators that cut, join and rearrange tensors: Concat, Split, Slice, Pad, CenterCropPad, Tile, DepthToSpace,
SpaceToDepth, Trilu, ReverseSequence.

Shape-like inputs (Split's sizes, Slice's bounds, Pad's pads, Tile's repeats) give exact output shapes when they
are constants; otherwise only the dims they may touch become unknown.
"""

from __future__ import annotations

import numpy as np

from ..errors import ValidationError
from ..ir.types import Dim, TensorType, format_shape
from . import dims
from .infer import normalize_axis
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


# ---------------------------------------------------------------------------- Concat
def _concat_infer(ctx: InferContext) -> list[TensorType]:
    types = [ctx.type(i) for i in range(ctx.num_inputs)]
    dtype = types[0].dtype
    for i, t in enumerate(types):
        if t.dtype != dtype:
            ctx.fail(f"input {i} has dtype {t.dtype}, expected {dtype} like input 0")
    ranked = [(i, t) for i, t in enumerate(types) if t.shape is not None]
    if not ranked:
        return [TensorType(dtype, None)]
    first, ref = ranked[0]
    for i, t in ranked:
        if t.rank != ref.rank:
            ctx.fail(f"input {i} has shape {format_shape(t.shape)} of rank {t.rank}, expected rank {ref.rank} like "
                     f"input {first} {format_shape(ref.shape)}")
    axis = normalize_axis(ctx.attrs["axis"], ref.rank, ctx)
    out = list(ref.shape)
    for i, t in ranked[1:]:
        for a in range(ref.rank):
            if a != axis:
                try:
                    out[a] = dims.merge(out[a], t.shape[a])
                except ValueError:
                    ctx.fail(f"inputs differ off the concat axis {axis}: input {i} has shape {format_shape(t.shape)}, "
                             f"input {first} has {format_shape(ref.shape)} (dim {a} must agree)")
    out[axis] = dims.total([t.shape[axis] for t in types]) if len(ranked) == len(types) else None
    return [TensorType(dtype, tuple(out))]


register(OpDef(name="Concat", infer=_concat_infer, reference=lambda *xs, axis: np.concatenate(xs, axis=axis),
               inputs=(1, None), attrs={"axis": Attr("int", REQUIRED)}, traits=PURE,
               doc="Joins the inputs along `axis`; every other dim must agree."))


# ---------------------------------------------------------------------------- Split
def equal_split(dim: int, parts: int) -> list[int]:
    """Split's sizes for ``num_outputs``: chunks of ceil(dim / parts), the last one smaller when uneven."""
    chunk = -(-dim // parts)
    last = dim - chunk * (parts - 1)
    if last < 0:
        raise ValueError(f"cannot split a dim of {dim} into {parts} chunks of ceil({dim}/{parts}) = {chunk}")
    return [chunk] * (parts - 1) + [last]


def _split_outputs(attrs: dict, num_inputs: int) -> int:
    if attrs.get("num_outputs") is None:
        raise ValidationError("Split's output count comes from its node: give the num_outputs attribute "
                              "(attrs={'num_outputs': n}) or, with a `split` input, num_outputs=n to add_node")
    return int(attrs["num_outputs"])


def _split_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    n = ctx.node.num_outputs
    if t.shape is None:
        return [TensorType(t.dtype, None)] * n
    axis = normalize_axis(ctx.attrs["axis"], t.rank, ctx)
    dim = t.shape[axis]
    num_outputs = ctx.attrs["num_outputs"]
    sizes: list[Dim]
    if ctx.has_input(1):
        if num_outputs is not None:
            ctx.fail("give either the `split` input or the num_outputs attribute, not both")
        split = dims.const_ints(ctx, 1)
        sizes = [None] * n if split is None else split
        if split is not None and len(split) != n:
            ctx.fail(f"split {split} has {len(split)} sizes for {n} outputs")
        if split is not None and (any(s < 0 for s in split) or (isinstance(dim, int) and sum(split) != dim)):
            ctx.fail(f"split {split} must be sizes >= 0 summing to dim {axis} of {format_shape(t.shape)}")
    elif num_outputs is None:
        ctx.fail("Split needs the `split` input or the num_outputs attribute")
    elif num_outputs != n:
        ctx.fail(f"num_outputs is {num_outputs} but the node has {n} outputs")
    elif isinstance(dim, int):
        try:
            sizes = list(equal_split(dim, n))
        except ValueError as exc:
            ctx.fail(str(exc))
    else:
        sizes = [dim] if n == 1 else [None] * n
    return [TensorType(t.dtype, t.shape[:axis] + (s,) + t.shape[axis + 1:]) for s in sizes]


def _split(x, split=None, *, axis, num_outputs):
    if split is not None:
        sizes = [int(s) for s in split.ravel()]
    elif num_outputs is not None:
        sizes = equal_split(x.shape[axis], num_outputs)
    else:
        raise ValueError("Split needs the `split` input or the num_outputs attribute")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


register(OpDef(name="Split", infer=_split_infer, reference=_split, inputs=(1, 2), outputs=_split_outputs,
               attrs={"axis": Attr("int", 0), "num_outputs": Attr("int")}, traits=PURE,
               doc="Cuts the input along `axis` into parts sized by `split` or into num_outputs equal chunks."))


# ---------------------------------------------------------------------------- Slice
def slice_params(starts, ends, axes, steps, rank: int) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, axes normalised; raises ValueError on malformed inputs."""
    if len(starts) != len(ends):
        raise ValueError(f"starts {starts} and ends {ends} differ in length")
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(axes) == len(steps) == len(starts):
        raise ValueError(f"starts, ends, axes {axes} and steps {steps} must have one length")
    if any(s == 0 for s in steps):
        raise ValueError(f"steps {steps} contain 0")
    if any(not -rank <= a < rank for a in axes):
        raise ValueError(f"axes {axes} out of range for rank {rank}")
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes {axes} repeat an axis")
    return list(zip(axes, starts, ends, steps))


def _slice_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.shape is None:
        return [t]
    values = [dims.const_ints(ctx, i) if ctx.has_input(i) else None for i in range(1, 5)]
    given = [ctx.has_input(i) for i in range(1, 5)]
    known = [v is not None or not g for v, g in zip(values, given)]
    out = list(t.shape)
    if all(known):
        try:
            params = slice_params(*values, t.rank)
        except ValueError as exc:
            ctx.fail(str(exc))
        for axis, start, end, step in params:
            out[axis] = dims.slice_length(t.shape[axis], start, end, step)
        return [TensorType(t.dtype, tuple(out))]
    touched = range(t.rank)
    if given[2] and values[2] is not None:
        touched = dims.normalize_axes_unique(ctx, values[2], t.rank)
    elif not given[2] and (n := dims.vector_length(ctx, 1)) is not None:
        touched = range(n)
    for a in touched:
        out[a] = None
    return [TensorType(t.dtype, tuple(out))]


def _slice(x, starts, ends, axes=None, steps=None):
    as_list = (lambda v: None if v is None else [int(i) for i in v.ravel()])
    index = [slice(None)] * x.ndim
    for axis, start, end, step in slice_params(*map(as_list, (starts, ends, axes, steps)), x.ndim):
        lo, hi = dims.slice_bounds(x.shape[axis], start, end, step)
        index[axis] = slice(lo, None if hi < 0 else hi, step)
    return x[tuple(index)]


register(OpDef(name="Slice", infer=_slice_infer, reference=_slice, inputs=(3, 5), traits=PURE,
               doc="x[starts:ends:steps] on `axes`, with negative indices and steps and clamped bounds."))


# ---------------------------------------------------------------------------- Pad, CenterCropPad
PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if ctx.attrs["mode"] not in PAD_MODES:
        ctx.fail(f"mode {ctx.attrs['mode']!r} is not one of {', '.join(PAD_MODES)}")
    for port, name in ((1, "pads"), (3, "axes")):   # ONNX: 1-D (a [6, 1, 1] pads was read two ways; seed 700821)
        if ctx.has_input(port) and ctx.type(port).rank not in (None, 1):
            ctx.fail(f"{name} must be a 1-D tensor, got {ctx.type(port)}")
    if t.shape is None:
        return [t]
    axes = list(range(t.rank))
    if ctx.has_input(3):
        given = dims.const_ints(ctx, 3)
        if given is None:
            return [TensorType(t.dtype, dims.unknown(t.rank))]
        axes = dims.normalize_axes_unique(ctx, given, t.rank)
    pads = dims.const_ints(ctx, 1)
    out = list(t.shape)
    if pads is None:
        for a in axes:
            out[a] = None
        return [TensorType(t.dtype, tuple(out))]
    if len(pads) != 2 * len(axes):
        ctx.fail(f"pads {pads} should hold 2 x {len(axes)} values (begins then ends for axes {axes})")
    for i, a in enumerate(axes):
        out[a] = dims.add(t.shape[a], pads[i] + pads[i + len(axes)])
        if isinstance(out[a], int) and out[a] < 0:
            ctx.fail(f"pads {pads} crop axis {a} of {format_shape(t.shape)} below size 0")
    return [TensorType(t.dtype, tuple(out))]


def _pad(x, pads, constant_value=None, axes=None, *, mode):
    if pads.ndim != 1 or (axes is not None and axes.ndim != 1):
        raise ValueError(f"pads and axes must be 1-D tensors, got shapes {list(pads.shape)} and "
                         f"{None if axes is None else list(axes.shape)}")
    axes = list(range(x.ndim)) if axes is None else [int(a) % x.ndim for a in axes.ravel()]
    pads = [int(p) for p in pads.ravel()]
    crops, width = [(0, 0)] * x.ndim, [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        begin, end = pads[i], pads[i + len(axes)]
        crops[a] = (max(-begin, 0), max(-end, 0))
        width[a] = (max(begin, 0), max(end, 0))
    if mode == "constant":
        # padded, then cropped: an axis of size + begin + end even where a crop reaches into the other side's
        # padding (size 1, pads -2 and +5: 4; cropping first left 5; fuzz seed 806779)
        fill = 0 if constant_value is None or constant_value.size == 0 else constant_value.ravel()[0]
        y = np.pad(x, width, mode="constant", constant_values=fill)
        return y[tuple(slice(lo, y.shape[a] - hi) for a, (lo, hi) in enumerate(crops))]
    # NOTE: other modes crop first, as onnxruntime does (the ONNX reference rejects negative pads): they pad
    # from the cropped values, so a crop may not take more than the axis holds
    for a, (lo, hi) in enumerate(crops):
        if lo + hi > x.shape[a]:
            raise ValueError(f"pads crop {lo + hi} from axis {a} of size {x.shape[a]} in mode {mode!r}")
    x = x[tuple(slice(lo, x.shape[a] - hi) for a, (lo, hi) in enumerate(crops))]
    return np.pad(x, width, mode=mode)


register(OpDef(name="Pad", infer=_pad_infer, reference=_pad, inputs=(2, 4), attrs={"mode": Attr("string", "constant")},
               traits=PURE, doc="Pads (or, with negative pads, crops) each axis; modes constant/reflect/edge/wrap."))


def _center_crop_pad_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.shape is None:
        return [t]
    attr_axes = ctx.attrs["axes"]
    axes = dims.normalize_axes_unique(ctx, list(range(t.rank)) if attr_axes is None else attr_axes, t.rank)
    shape = dims.const_ints(ctx, 1)
    out = list(t.shape)
    if shape is not None and len(shape) != len(axes):
        ctx.fail(f"shape {shape} should hold one size per axis of {axes}")
    for i, a in enumerate(axes):
        out[a] = None if shape is None else shape[i]
    return [TensorType(t.dtype, tuple(out))]


def _center_crop_pad(x, shape, *, axes):
    if axes is not None and (any(not -x.ndim <= a < x.ndim for a in axes)
                             or len({a % x.ndim for a in axes}) != len(axes)):
        raise ValueError(f"axes {list(axes)} are not distinct axes of a rank-{x.ndim} input")
    axes = range(x.ndim) if axes is None else [a % x.ndim for a in axes]
    if shape.size != len(axes):
        raise ValueError(f"shape {shape.ravel().tolist()} should hold one size per axis of {list(axes)}")
    out_shape, src, dst = list(x.shape), [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for a, size in zip(axes, (int(s) for s in shape.ravel())):
        dim = x.shape[a]
        out_shape[a] = size
        offset = abs(dim - size) // 2  # the extra odd element goes to the end
        window = slice(offset, offset + min(dim, size))
        if size < dim:
            src[a] = window
        else:
            dst[a] = window
    out = np.zeros(out_shape, dtype=x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    return out


register(OpDef(name="CenterCropPad", infer=_center_crop_pad_infer, reference=_center_crop_pad, inputs=(2, 2),
               attrs={"axes": Attr("ints")}, traits=PURE,
               doc="Crops or zero-pads `axes` around the centre to the sizes in `shape`."))


# ---------------------------------------------------------------------------- Tile
def _tile_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.shape is None:
        return [t]
    repeats = dims.const_ints(ctx, 1)
    if repeats is None:
        return [TensorType(t.dtype, tuple(0 if d == 0 else None for d in t.shape))]
    if len(repeats) != t.rank or any(r < 0 for r in repeats):
        ctx.fail(f"repeats {repeats} should hold {t.rank} counts >= 0 for shape {format_shape(t.shape)}")
    return [TensorType(t.dtype, tuple(dims.product([d, r]) for d, r in zip(t.shape, repeats)))]


register(OpDef(name="Tile", infer=_tile_infer, reference=lambda x, repeats: np.tile(x, [int(r) for r in repeats]),
               inputs=(2, 2), traits=PURE, doc="Repeats the input `repeats[i]` times along each axis i."))


# ---------------------------------------------------------------------------- DepthToSpace, SpaceToDepth
def _block_infer(to_space: bool):
    def infer(ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        b = ctx.attrs["blocksize"]
        if to_space and ctx.attrs["mode"] not in ("DCR", "CRD"):
            ctx.fail(f"mode {ctx.attrs['mode']!r} is not DCR or CRD")
        if b is None or b < 1:
            ctx.fail(f"blocksize must be >= 1, got {b}")
        if t.shape is None:
            return [TensorType(t.dtype, dims.unknown(4))]
        if t.rank != 4:
            ctx.fail(f"expected a 4-D NCHW input, got {format_shape(t.shape)}")
        n, c, h, w = t.shape
        if to_space:
            if isinstance(c, int) and c % (b * b):
                ctx.fail(f"channels {c} are not divisible by blocksize^2 = {b * b}")
            return [TensorType(t.dtype, (n, _div(c, b * b), dims.product([h, b]), dims.product([w, b])))]
        for name, d in (("height", h), ("width", w)):
            if isinstance(d, int) and d % b:
                ctx.fail(f"{name} {d} is not divisible by blocksize {b}")
        return [TensorType(t.dtype, (n, dims.product([c, b * b]), _div(h, b), _div(w, b)))]

    return infer


def _div(d: Dim, k: int) -> Dim:
    return d // k if isinstance(d, int) else (d if k == 1 else None)


def _depth_to_space(x, *, blocksize, mode):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ValueError(f"mode {mode!r} is not DCR or CRD")
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(x, *, blocksize):
    n, c, h, w = x.shape
    b = blocksize
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


LAYOUT = PURE | {Trait.LAYOUT_SENSITIVE}
register(OpDef(name="DepthToSpace", infer=_block_infer(True), reference=_depth_to_space, traits=LAYOUT,
               attrs={"blocksize": Attr("int", REQUIRED), "mode": Attr("string", "DCR")},
               doc="Moves channel blocks into blocksize x blocksize spatial tiles (NCHW; modes DCR, CRD)."))
register(OpDef(name="SpaceToDepth", infer=_block_infer(False), reference=_space_to_depth, traits=LAYOUT,
               attrs={"blocksize": Attr("int", REQUIRED)},
               doc="Moves blocksize x blocksize spatial tiles into channels (NCHW, opset 21: DCR order)."))


# ---------------------------------------------------------------------------- Trilu, ReverseSequence
def _trilu_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.rank is not None and t.rank < 2:
        ctx.fail(f"expected rank >= 2, got {format_shape(t.shape)}")
    return [t]


def _trilu(x, k=None, *, upper):
    if x.ndim < 2:   # as inference says (a symbolic rank reaches here unchecked; fuzz seed 804174)
        raise ValueError(f"Trilu takes rank >= 2, got shape {list(x.shape)}")
    diagonal = 0 if k is None else int(np.asarray(k).ravel()[0])
    return np.triu(x, diagonal) if upper else np.tril(x, diagonal)


register(OpDef(name="Trilu", infer=_trilu_infer, reference=_trilu, inputs=(1, 2), attrs={"upper": Attr("int", 1)},
               traits=PURE, doc="The upper (or lower) triangle of the last two axes from diagonal k; zeros elsewhere."))


def _reverse_sequence_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.rank is not None:
        if t.rank < 2:
            ctx.fail(f"expected rank >= 2, got {format_shape(t.shape)}")
        axes = {ctx.attrs["batch_axis"], ctx.attrs["time_axis"]}
        if axes != {0, 1}:
            ctx.fail(f"batch_axis and time_axis must be 0 and 1 in some order, got {ctx.attrs['batch_axis']} and "
                     f"{ctx.attrs['time_axis']}")
    return [t]


def _reverse_sequence(x, sequence_lens, *, batch_axis, time_axis):
    # the checks inference makes where it knows the rank (a symbolic one reaches here unchecked: fuzz seed
    # 700434 ran a rank-1 input with both axes 0), and onnxruntime's on the lengths
    if x.ndim < 2 or {batch_axis, time_axis} != {0, 1}:
        raise ValueError(f"ReverseSequence takes rank >= 2 and batch_axis, time_axis 0 and 1 in some order, got "
                         f"rank {x.ndim}, batch_axis {batch_axis}, time_axis {time_axis}")
    if sequence_lens.shape != (x.shape[batch_axis],):
        raise ValueError(f"sequence_lens has shape {list(sequence_lens.shape)}, expected [{x.shape[batch_axis]}] "
                         f"(the batch axis)")
    if ((sequence_lens < 0) | (sequence_lens > x.shape[time_axis])).any():
        raise ValueError(f"sequence_lens {sequence_lens.tolist()} must lie in [0, {x.shape[time_axis]}] (the "
                         f"time axis)")
    out = x.copy()
    for b, length in enumerate(int(v) for v in sequence_lens.ravel()):
        index = [slice(None)] * x.ndim
        index[batch_axis] = b
        index[time_axis] = slice(0, length)
        src = x[tuple(index)]
        out[tuple(index)] = np.flip(src, axis=0)  # after fixing batch, time is the first remaining axis
    return out


register(OpDef(name="ReverseSequence", infer=_reverse_sequence_infer, reference=_reverse_sequence, inputs=(2, 2),
               attrs={"batch_axis": Attr("int", 1), "time_axis": Attr("int", 0)}, traits=PURE,
               doc="Reverses the first sequence_lens[b] steps along time_axis for each batch entry b."))
