"""Library steps: ops that run as one or a few numpy calls into their planned outputs (no JIT, no reference).

Data movement (views, transposes, concatenation, gathers, slices, splits, pads, expands), reductions over any
axes (over one run of adjacent axes ``tlc.kernels.reduce``'s kernel), Softmax over a middle axis, inference
BatchNormalization, pooling and LRN through numpy, Resize (a gather or an interpolation product per axis), 2-D
ConvTranspose (GEMM then col2im by strided slices), and a single elementwise op evaluated from its scalar
expression (the fallback of its native kernel). Every ``bind`` reads the attributes and the known constant inputs
(slice bounds, axes, pads, scales, weights) once, for one input-shape signature, so a run makes only the numpy
calls.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import numpy as np

from ..ir.types import np_dtype
from ..kernels import conv as kconv
from ..kernels import gemm, lib_conv_nhwc, lib_pool, lib_pool_nhwc, resample
from ..kernels import recurrent as krec
from ..kernels import reduce as kreduce
from ..kernels import transpose as ktranspose
from ..ops import conv as conv_ops
from ..ops import dims as op_dims
from ..ops import expr as E
from ..ops import opdef_of
from ..ops import recurrent as recurrent_ops
from ..ops import resize as resize_ops
from ..ops.layout import equal_split, slice_params
from ..ops.window import make_window
from .bound import Bound, Call, F, KernelRequest, NotNative, Ref, V, W, contiguous_strides, serial
from .impl import BindContext, StepImpl, fallback_calls, spatial_window


# ---------------------------------------------------------------------------- views and copies
@serial
def reshape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return x.reshape(shape)


@serial
def copy_reshaped(x: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out.reshape(x.shape), x)


class ViewImpl(StepImpl):
    """Reshape-like ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity): a view of input 0, no copy; a copy
    into the output where the input is a strided view (numpy could not reshape it without one)."""

    mode = "view"
    reason = "a view of its input"

    def bind(self, ctx: BindContext) -> Bound:
        (shape,) = ctx.out_shapes()[:1]
        if len(ctx.outputs) != 1:
            raise NotNative(f"{len(ctx.outputs)} outputs")
        if ctx.contiguous(0):
            return Bound([Call(reshape, (V(ctx.inputs[0]), shape), result=ctx.outputs)], mode="view",
                         writes_outputs=False)
        return Bound([Call(copy_reshaped, (V(ctx.inputs[0]), V(ctx.outputs[0])))], note="copy of a strided input")


@serial
def transpose_into(x: np.ndarray, perm: tuple[int, ...] | None, out: np.ndarray) -> None:
    np.copyto(out, x.transpose(perm))


def _warm_transpose(dtype, nparts: int = 1) -> str:
    """Compile the tiled transposed copy for ``dtype`` (on the JIT thread), in parts where ``nparts`` > 1."""
    one = np.ones(ktranspose.RANK, np.int64)
    ktranspose.copy(np.zeros(1, dtype), np.zeros(1, dtype), one, one * 0, one * 0)
    if nparts > 1:
        ktranspose.copy_parallel(np.zeros(1, dtype), np.zeros(1, dtype), one, one * 0, one * 0, nparts)
    return "transpose"


#: bytes from which a transposed copy of whole rows runs in parts at several threads (``TransposeImpl._rows``)
PARALLEL_COPY_BYTES = 1 << 20
#: the dtypes whose whole-row transposes take the row kernel (one compile each)
ROW_COPY_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8, bool))
#: a block (a Concat's input, a Split's output) of at least this many bytes is copied in a part a thread at
#: several threads: GPT-2's QKV split at batch 1 (three blocks of 384 KiB) 126 -> 62 us at 2 threads in the model,
#: at batch 8 1308 -> 418; UNet's Concats at batch 8 2.9 -> 2.2 ms (numpy's copies: one thread at any count)
PARALLEL_BLOCK_BYTES = 1 << 18


class TransposeImpl(StepImpl):
    """A transposed copy: ``tlc.kernels.transpose``'s tiles where the last axis moves (numpy's bad strides, and
    large arrays in parts at several threads: ``ktranspose.plan``), its rows where it stays; numpy's copy
    otherwise."""

    reason = "numpy copy of a transposed view"

    def __init__(self, attrs: dict[str, Any]):
        self.perm = tuple(int(p) for p in attrs["perm"]) if attrs.get("perm") else None

    def bind(self, ctx: BindContext) -> Bound:
        ctx.out_shapes()
        (x,) = ctx.in_shapes()[:1]
        fallback = [Call(transpose_into, (V(ctx.inputs[0]), self.perm, V(ctx.outputs[0])))]
        dtype = ctx.out_dtype()
        perm = self.perm or tuple(reversed(range(len(x))))
        tiles = ktranspose.plan(tuple(x), perm, dtype.itemsize, ctx.threads) \
            if ctx.options.jit_enabled and ctx.contiguous(0) and dtype in (np.float32, np.float64) else None
        if tiles is None:
            return self._rows(ctx, x, perm, dtype, fallback)
        *walk, nparts = tiles
        args = (F(ctx.inputs[0]), F(ctx.outputs[0])) + tuple(np.array(a, np.int64) for a in walk)
        native = [Call(ktranspose.copy_parallel, args + (nparts,)) if nparts > 1 else Call(ktranspose.copy, args)]
        note = "tiles of 16 x 16" + (f" in {nparts} parts" if nparts > 1 else "")
        return Bound(fallback, mode="native", note=note,
                     request=KernelRequest("transpose", lambda alias: _warm_transpose(dtype, nparts),
                                           lambda kern, alias: native))

    @staticmethod
    def _rows(ctx: BindContext, x: tuple[int, ...], perm: tuple[int, ...], dtype: np.dtype,
              fallback: list[Call]) -> Bound:
        """A copy of whole rows (the last axis stays last): ``tlc.kernels.transpose``'s rows, in one run a thread
        from ``PARALLEL_COPY_BYTES`` at several threads; numpy's copy where the kernel does not apply. Against
        numpy's copy, one thread: ViT-Tiny's head split [1, 197, 3, 3, 64] 23 -> 16 us, at batch 8 188 -> 138 (79
        in two runs), rows of 8 [1, 196, 16, 8] 25 -> 11."""
        rows = ktranspose.rows_plan(tuple(x), perm) if (
            ctx.options.jit_enabled and ctx.contiguous(0) and dtype in ROW_COPY_DTYPES) else None
        if rows is None:
            return Bound(fallback)
        shape, src, row = (np.array(rows[0], np.int64), np.array(rows[1], np.int64), rows[2])
        count = int(np.prod(x, dtype=np.int64)) // max(row, 1)
        nparts = ctx.threads if count * row * dtype.itemsize >= PARALLEL_COPY_BYTES else 1
        if nparts > 1:
            fn, args, note = ktranspose.copy_rows_parallel, (shape, src, row, nparts), f"rows in {nparts} parts"
        else:
            fn, args, note = ktranspose.copy_rows, (shape, src, row, 0, count), "rows"
        native = [Call(fn, (F(ctx.inputs[0]), F(ctx.outputs[0])) + args)]

        def build(alias):
            one = np.zeros(1, dtype)
            ones, zeros = np.ones(ktranspose.ROWS_RANK, np.int64), np.zeros(ktranspose.ROWS_RANK, np.int64)
            fn(one, one.copy(), ones, zeros, 1, *((1,) if nparts > 1 else (0, 1)))
            return "transpose rows"

        return Bound(fallback, mode="native", note=note,
                     request=KernelRequest("transpose rows", build, lambda kern, alias: native))

@serial
def transpose_view(x: np.ndarray, perm: tuple[int, ...] | None) -> np.ndarray:
    return x.transpose(perm)


class TransposeViewImpl(StepImpl):
    """Transpose as a strided view of its input, for readers that take any strides (BLAS operands): no copy."""

    mode = "view"
    reason = "strided view (every reader takes strides)"

    def __init__(self, perm: tuple[int, ...] | None):
        self.perm = perm

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        itemsize = ctx.out_dtype().itemsize
        base = ctx.strides.get(ctx.inputs[0]) or contiguous_strides(x, itemsize)
        perm = self.perm or tuple(reversed(range(len(x))))
        return Bound([Call(transpose_view, (V(ctx.inputs[0]), self.perm), result=ctx.outputs)], mode="view",
                     writes_outputs=False, out_strides=[tuple(base[p] for p in perm)])


@serial
def concat_into(out: np.ndarray, axis: int, *parts: np.ndarray) -> None:
    np.concatenate(parts, axis=axis, out=out)


def _block_copies(ctx: BindContext, blocks: list[tuple[int, int, int, int, int, int, int, int]], fallback: list[Call],
                  dtype: np.dtype, what: str, **bound) -> Bound:
    """Copies of blocks of rows (``tlc.kernels.transpose.copy_block``): (input port or -1, output port or -1: the
    step's one input or output, rows, width, input row stride and offset, output row stride and offset) each, in a
    run a thread from ``PARALLEL_BLOCK_BYTES`` at several threads; the fallback where the JIT is off, a dtype it
    does not take or an input on strides."""
    if not ctx.options.jit_enabled or dtype not in ROW_COPY_DTYPES \
            or not all(ctx.contiguous(k) for k in range(len(ctx.inputs))):
        return Bound(fallback, **bound)
    native, parts = [], set()
    for i, o, rows, width, x_stride, x_off, out_stride, out_off in blocks:
        total = rows * width
        if total == 0:
            continue
        x, out = F(ctx.inputs[max(i, 0)]), F(ctx.outputs[max(o, 0)])
        nparts = ctx.threads if total * dtype.itemsize >= PARALLEL_BLOCK_BYTES else 1
        parts.add(nparts)
        if nparts > 1:
            native.append(Call(ktranspose.copy_block_parallel, (x, out, width, x_stride, x_off, out_stride, out_off,
                                                                total, nparts)))
        else:
            native.append(Call(ktranspose.copy_block, (x, out, width, x_stride, x_off, out_stride, out_off, 0,
                                                       total)))

    most = max(parts, default=1)

    def build(alias):
        one = np.zeros(1, dtype)
        ktranspose.copy_block(one, one.copy(), 1, 1, 0, 1, 0, 0, 1)
        if most > 1:
            ktranspose.copy_block_parallel(one, one.copy(), 1, 1, 0, 1, 0, 1, 2)
        return what

    note = "blocks of rows" + (f", in {most} parts" if most > 1 else "")
    return Bound(fallback, mode="native", note=note,
                 request=KernelRequest(what, build, lambda kern, alias: native), **bound)


class ConcatImpl(StepImpl):
    """Concat: each input into its range of every row of the output (the output viewed [P, S]: P the product of
    the dims before the axis) by ``tlc.kernels.transpose.copy_block``; numpy's concatenate where that does not
    apply. UNet's [8, 32, 128, 128] + [8, 16, 128, 128] at batch 8: 1.57 ms one thread, 1.69 at two in numpy's
    (memory-bound; the other core's bandwidth unused)."""

    reason = "numpy concatenate"

    def __init__(self, attrs: dict[str, Any]):
        self.axis = int(attrs["axis"])

    def bind(self, ctx: BindContext) -> Bound:
        (out,) = ctx.out_shapes()
        ins = ctx.in_shapes()
        axis = self.axis % len(out)
        fallback = [Call(concat_into, (V(ctx.outputs[0]), self.axis) + tuple(V(i) for i in ctx.inputs))]
        # the inputs are consecutive ranges of the output where every dim before the axis is 1 (a channel
        # Concat at batch 1): the memory planner may then place them there (``Bound.joins``)
        rows = int(np.prod(out[:axis], dtype=np.int64))
        widths = [int(np.prod(s[axis:], dtype=np.int64)) for s in ins]
        offsets = np.concatenate([[0], np.cumsum(widths)]).astype(int)
        blocks = [(k, -1, rows, w, w, 0, int(offsets[-1]), int(offsets[k])) for k, w in enumerate(widths)]
        return _block_copies(ctx, blocks, fallback, ctx.out_dtype(), "concat", joins=rows == 1)


@serial
def take_into(x: np.ndarray, indices: np.ndarray, axis: int, out: np.ndarray) -> None:
    x.take(indices, axis=axis, out=out)   # the method: np.take's wrapper cost ~1 us a call


class GatherImpl(StepImpl):
    reason = "numpy take"

    def __init__(self, attrs: dict[str, Any]):
        self.axis = int(attrs.get("axis", 0))

    def bind(self, ctx: BindContext) -> Bound:
        x, idx = ctx.in_shapes()[:2]
        axis = self.axis % len(x)
        known = ctx.const(1)
        if known is not None:   # checked once: numpy's take would raise mid-run, the reference says why first
            if known.size and (known.min() < -x[axis] or known.max() >= x[axis]):
                raise NotNative(f"indices outside [-{x[axis]}, {x[axis]})")
            indices: Any = np.asarray(known, np.int64, order="C")   # keeps a 0-d index 0-d
        else:
            indices = V(ctx.inputs[1])
        return Bound([Call(take_into, (V(ctx.inputs[0]), indices, axis, V(ctx.outputs[0])))])


def copy_index(x: np.ndarray, index: tuple, out: np.ndarray) -> None:
    np.copyto(out, x[index])


class SliceImpl(StepImpl):
    reason = "numpy strided copy"

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        values = [ctx.const(p) if p < len(ctx.inputs) else None for p in range(1, 5)]
        for p, v in zip(range(1, 5), values):
            if v is None and p < len(ctx.inputs) and ctx.in_types[p] is not None:
                raise NotNative(f"Slice input {p} is not a constant")
        as_list = (lambda v: None if v is None else [int(i) for i in np.asarray(v).ravel()])
        index: list[slice] = [slice(None)] * len(x)
        try:
            for axis, start, end, step in slice_params(*map(as_list, values), len(x)):
                lo, hi = op_dims.slice_bounds(x[axis], start, end, step)
                index[axis] = slice(lo, None if hi < 0 else hi, step)
        except ValueError as exc:
            raise NotNative(str(exc)) from None
        return Bound([Call(copy_index, (V(ctx.inputs[0]), tuple(index), V(ctx.outputs[0])))])


@serial
def split_into(x: np.ndarray, indices: tuple, *outs: np.ndarray) -> None:
    for index, out in zip(indices, outs):
        np.copyto(out, x[index])


@serial
def split_views(x: np.ndarray, indices: tuple) -> tuple[np.ndarray, ...]:
    return tuple(x[index] for index in indices)


class SplitImpl(StepImpl):
    """Split: views of its input where each part is one contiguous run of it (a contiguous input split along an
    axis with only unit axes before it: ViT's fused QKV, split after its head transpose, 57 us a split in
    copies), else each output's range of every row of the input copied (``_block_copies``; numpy copies of the
    slices where that does not apply)."""

    reason = "numpy copies of slices"

    def __init__(self, attrs: dict[str, Any]):
        self.axis = int(attrs.get("axis", 0))
        self.num_outputs = attrs.get("num_outputs")

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        axis = self.axis % len(x)
        if len(ctx.inputs) > 1 and ctx.in_types[1] is not None:
            sizes = [int(s) for s in ctx.require_const(1, "split").ravel()]
        else:
            sizes = equal_split(x[axis], self.num_outputs or len(ctx.outputs))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        indices = tuple((slice(None),) * axis + (slice(int(a), int(b)),) for a, b in zip(bounds[:-1], bounds[1:]))
        rows = int(np.prod(x[:axis], dtype=np.int64))
        if ctx.contiguous(0) and rows == 1:
            return Bound([Call(split_views, (V(ctx.inputs[0]), indices), result=ctx.outputs, unpack=True)],
                         mode="view", note="views of its input", writes_outputs=False)
        fallback = [Call(split_into, (V(ctx.inputs[0]), indices) + tuple(V(o) for o in ctx.outputs))]
        inner = int(np.prod(x[axis + 1:], dtype=np.int64))
        total = int(x[axis]) * inner
        blocks = [(-1, k, rows, int(n) * inner, total, int(a) * inner, int(n) * inner, 0)
                  for k, (a, n) in enumerate(zip(bounds[:-1], sizes))]
        return _block_copies(ctx, blocks, fallback, ctx.out_dtype(), "split")


@serial
def expand_into(x: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, x)


class ExpandImpl(StepImpl):
    reason = "numpy broadcast copy"

    def bind(self, ctx: BindContext) -> Bound:
        ctx.out_shapes()
        return Bound([Call(expand_into, (V(ctx.inputs[0]), V(ctx.outputs[0])))])


def tile_into(x: np.ndarray, reps: tuple[int, ...], out: np.ndarray) -> None:
    np.copyto(out, np.tile(x, reps))


class TileImpl(StepImpl):
    reason = "numpy tile"

    def bind(self, ctx: BindContext) -> Bound:
        reps = tuple(int(r) for r in ctx.require_const(1, "repeats").ravel())
        return Bound([Call(tile_into, (V(ctx.inputs[0]), reps, V(ctx.outputs[0])))])


def pad_constant(x: np.ndarray, crop: tuple, inner: tuple, fill: Any, out: np.ndarray) -> None:
    out.fill(fill)
    out[inner] = x[crop]


def pad_mode(x: np.ndarray, crop: tuple, width: tuple, mode: str, out: np.ndarray) -> None:
    np.copyto(out, np.pad(x[crop], width, mode=mode))


class PadImpl(StepImpl):
    reason = "numpy fill and copy"

    def __init__(self, attrs: dict[str, Any]):
        self.mode = attrs.get("mode", "constant")

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        pads = [int(p) for p in ctx.require_const(1, "pads").ravel()]
        fill_value = ctx.const(2) if len(ctx.inputs) > 2 and ctx.in_types[2] is not None else None
        if len(ctx.inputs) > 2 and ctx.in_types[2] is not None and fill_value is None:
            raise NotNative("the constant_value input is not a constant")
        axes = ctx.const(3) if len(ctx.inputs) > 3 and ctx.in_types[3] is not None else None
        axes = list(range(len(x))) if axes is None else [int(a) % len(x) for a in np.asarray(axes).ravel()]
        crop, inner, width = [slice(None)] * len(x), [slice(None)] * len(x), [(0, 0)] * len(x)
        # NOTE: negative pads crop first; the same as the reference (which pads, then crops) while no crop
        # reaches into the other side's padding, and such pads are left to the reference
        for i, a in enumerate(axes):
            begin, end = pads[i], pads[i + len(axes)]
            if max(-begin, 0) + max(-end, 0) > x[a]:
                raise NotNative(f"pads crop more than axis {a} holds (into the other side's padding)")
            crop[a] = slice(max(-begin, 0), x[a] - max(-end, 0))
            kept = x[a] - max(-begin, 0) - max(-end, 0)
            inner[a] = slice(max(begin, 0), max(begin, 0) + kept)
            width[a] = (max(begin, 0), max(end, 0))
        out = V(ctx.outputs[0])
        if self.mode == "constant":
            fill = 0 if fill_value is None or fill_value.size == 0 else fill_value.ravel()[0]
            fill = ctx.out_dtype().type(fill)
            return Bound([Call(pad_constant, (V(ctx.inputs[0]), tuple(crop), tuple(inner), fill, out))])
        return Bound([Call(pad_mode, (V(ctx.inputs[0]), tuple(crop), tuple(width), self.mode, out))],
                     note=f"numpy pad ({self.mode})")


def trilu_into(x: np.ndarray, k: int, upper: bool, out: np.ndarray) -> None:
    np.copyto(out, np.triu(x, k) if upper else np.tril(x, k))


class TriluImpl(StepImpl):
    reason = "numpy triu/tril"

    def __init__(self, attrs: dict[str, Any]):
        self.upper = bool(attrs.get("upper", 1))

    def bind(self, ctx: BindContext) -> Bound:
        k = 0
        if len(ctx.inputs) > 1 and ctx.in_types[1] is not None:
            k = int(ctx.require_const(1, "k").ravel()[0])
        return Bound([Call(trilu_into, (V(ctx.inputs[0]), k, self.upper, V(ctx.outputs[0])))])


# ---------------------------------------------------------------------------- reductions and normalizations
# NOTE: the ufuncs' own reduce where numpy's functions are only wrappers of it (np.max is maximum.reduce after
# ~1.3 us of argument handling a call: a Loop body reducing a [1, 256] row each step paid it every iteration)
_REDUCERS = {"ReduceSum": np.add.reduce, "ReduceMean": np.mean, "ReduceMax": np.maximum.reduce,
             "ReduceMin": np.minimum.reduce, "ReduceProd": np.multiply.reduce}


@serial
def reduce_into(reducer, x: np.ndarray, axes: tuple[int, ...], kept: tuple[int, ...], out: np.ndarray) -> None:
    reducer(x, axis=axes, keepdims=True, out=out.reshape(kept))


class ReduceImpl(StepImpl):
    """ReduceSum/Mean/Max/Min/Prod over constant axes, into the output (viewed with the kept dims)."""

    def __init__(self, op: str, attrs: dict[str, Any]):
        self.op = op
        self.reducer = _REDUCERS[op]
        self.noop = bool(attrs.get("noop_with_empty_axes", 0))
        self.reason = f"numpy {op[6:].lower()}"

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        axes = []
        if len(ctx.inputs) > 1 and ctx.in_types[1] is not None:
            axes = sorted({int(a) % max(len(x), 1) for a in ctx.require_const(1, "axes").ravel()})
        if not axes:
            if self.noop:
                raise NotNative("noop_with_empty_axes: an identity")
            axes = list(range(len(x)))
        if any(x[a] == 0 for a in axes) and self.op in ("ReduceMax", "ReduceMin"):
            raise NotNative("an empty max/min reduction")
        kept = tuple(1 if a in axes else d for a, d in enumerate(x))
        fallback = [Call(reduce_into, (self.reducer, V(ctx.inputs[0]), tuple(axes), kept, V(ctx.outputs[0])))]
        return _axes_reduction(ctx, kreduce.CODES[self.op], axes, Bound(fallback))


def _axes_reduction(ctx: BindContext, op: int, axes: list[int], fallback: Bound) -> Bound:
    """``tlc.kernels.reduce``'s kernel for the input reduced over ``axes`` (sorted), viewed [A, R, B] (in parts over
    the outputs from ~64K elements at several threads; the runner calls the compiled function's entry point);
    ``fallback`` where the axes are no one run, R is 0, the JIT is off, the dtype no float or the input strided."""
    x = ctx.in_shapes()[0]
    view = kreduce.axes_view(tuple(x), axes)
    dtype = ctx.out_dtype()
    if view is None or view[1] == 0 or not ctx.options.jit_enabled or dtype not in (np.float32, np.float64) \
            or not ctx.contiguous(0):
        return fallback
    a, r, b = view
    nparts = _plane_parts(a * r * b, a * b, ctx.threads)
    parts = (nparts,) if nparts > 1 else ()
    run = kreduce.reduce_parallel if nparts > 1 else kreduce.reduce_serial
    native = [Call(run, (V(ctx.inputs[0]), V(ctx.outputs[0]), r, b, op) + parts)]
    in_rank, out_rank = len(x), len(ctx.out_shapes()[0])

    def build(alias):
        run(np.ones((1,) * in_rank, dtype), np.zeros((1,) * out_rank, dtype), 1, 1, op, *parts)
        return "axes reduction"

    return Bound(fallback.calls, mode="native", note=f"axes kernel, {nparts} part(s)",
                 request=KernelRequest("axes reduction", build, lambda kern, alias: native))


def arg_into(pick, x: np.ndarray, axis: int, last: bool, kept: tuple[int, ...], out: np.ndarray) -> None:
    """ArgMax/ArgMin (``pick``: np.argmax/argmin) into ``out`` viewed with the axis kept; ``last``: the last of
    equal extremes (searched on the reversed axis, the position mapped back)."""
    index = out.reshape(kept)
    if last:
        pick(np.flip(x, axis), axis=axis, out=index, keepdims=True)
        np.subtract(x.shape[axis] - 1, index, out=index)
    else:
        pick(x, axis=axis, out=index, keepdims=True)


class ArgImpl(StepImpl):
    """ArgMax/ArgMin: numpy's, written into the int64 output (numpy's index type is int64 wherever tlc runs)."""

    def __init__(self, op: str, attrs: dict[str, Any]):
        self.pick = np.argmax if op == "ArgMax" else np.argmin
        self.axis, self.last = int(attrs["axis"]), bool(attrs["select_last_index"])
        self.reason = f"numpy {op[3:].lower()} index"

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        if np.dtype(np.intp) != np.int64:
            raise NotNative("numpy's index type is not int64 here")
        if np_dtype(ctx.in_types[0].dtype).kind not in "biuf":
            raise NotNative(f"numpy cannot order {ctx.in_types[0].dtype} values")
        axis = self.axis % max(len(x), 1)
        if not x or x[axis] == 0:
            raise NotNative("an index over an empty axis")
        kept = tuple(1 if a == axis else d for a, d in enumerate(x))
        return Bound([Call(arg_into, (self.pick, V(ctx.inputs[0]), axis, self.last, kept, V(ctx.outputs[0])))])


def softmax_into(x: np.ndarray, axis: int, log: bool, out: np.ndarray) -> None:
    m = np.max(x, axis=axis, keepdims=True)
    np.subtract(x, m, out=out)
    if log:
        s = np.log(np.sum(np.exp(out), axis=axis, keepdims=True))
        np.subtract(out, s, out=out)
        return
    np.exp(out, out=out)
    np.divide(out, np.sum(out, axis=axis, keepdims=True), out=out)


class SoftmaxImpl(StepImpl):
    """Softmax/LogSoftmax along one axis (opset 13), through the output (row kernels take the last axis)."""

    reason = "numpy, through the output"
    inplace = True

    def __init__(self, attrs: dict[str, Any], log: bool):
        self.axis = int(attrs.get("axis", -1))
        self.log = log

    def bind(self, ctx: BindContext) -> Bound:
        ctx.out_shapes()
        return Bound([Call(softmax_into, (V(ctx.inputs[0]), self.axis, self.log, V(ctx.outputs[0])))],
                     inplace=True)


def batchnorm_into(x, scale, bias, mean, var, eps, bshape, out) -> None:
    a = scale / np.sqrt(var + var.dtype.type(eps))
    np.multiply(x, a.reshape(bshape), out=out)
    np.add(out, (bias - mean * a).reshape(bshape), out=out)


class BatchNormImpl(StepImpl):
    """Inference BatchNormalization: ``x * a + b`` with per-channel a, b (elementwise in x: may run in place)."""

    reason = "numpy scale-shift"

    def __init__(self, attrs: dict[str, Any]):
        if attrs.get("training_mode"):
            raise NotNative("training_mode BatchNormalization is not native")
        self.epsilon = float(attrs.get("epsilon", 1e-5))

    def bind(self, ctx: BindContext) -> Bound:
        if len(ctx.outputs) != 1:
            raise NotNative(f"{len(ctx.outputs)} outputs (training mode)")
        (y,) = ctx.out_shapes()
        bshape = (-1,) + (1,) * (len(y) - 2)
        args = tuple(V(i) for i in ctx.inputs[:5]) + (self.epsilon, bshape, V(ctx.outputs[0]))
        return Bound([Call(batchnorm_into, args)], inplace=True)


# ---------------------------------------------------------------------------- pooling (numpy taps)
class PoolImpl(StepImpl):
    """MaxPool / AveragePool (2-D, NCHW): the conv family's pooling kernel in parts over (image, channel) planes
    for floats; numpy strided taps while it compiles, and for other dtypes or with the JIT off."""

    def __init__(self, attrs: dict[str, Any], reduce: str):
        self.attrs = attrs
        self.reduce = reduce
        self.reason = f"{reduce} pool"
        if reduce == "avg" and any(d != 1 for d in attrs.get("dilations") or ()):
            raise NotNative("AveragePool with dilations is not native")

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        (y,) = ctx.out_shapes()[:1]
        if len(x) != 4 or len(ctx.outputs) != 1:
            raise NotNative(f"only 2-D single-output pooling is native (input rank {len(x)})")
        kernel = tuple(int(k) for k in self.attrs["kernel_shape"])
        window, begin, end = spatial_window(self.attrs, kernel, x[2:])
        if kernel == tuple(x[2:]) and tuple(y[2:]) == (1, 1) and not any(begin) and not any(end) \
                and all(d == 1 for d in window.dilations):
            # the window is the whole plane (ResNet's 7x7 AveragePool on 7x7): the global pool's plane
            # reduction (ResNet-50's 2048 planes: 133 us in the window kernel, its passes a plane, against 10)
            return GlobalPoolImpl("max" if self.reduce == "max" else "mean").bind(ctx)
        geo = lib_pool.PoolGeometry(*x, *kernel, *y[2:], *window.strides, *window.dilations, *begin, *end)
        dtype = ctx.out_dtype()
        work = [(s, dtype) for s in lib_pool.workspace(geo)]
        xin, out = V(ctx.inputs[0]), V(ctx.outputs[0])
        divisor = None
        if self.reduce == "max":
            fallback = [Call(_max_pool, (xin, out, geo) + _work_refs(work))]
        else:
            divisor = lib_pool.avg_divisor(geo, bool(self.attrs.get("count_include_pad", 0)), dtype)
            fallback = [Call(_avg_pool, (xin, out, geo, divisor) + _work_refs(work))]
        if not ctx.options.jit_enabled or dtype not in (np.float32, np.float64) or not ctx.contiguous(0):
            return Bound(fallback, workspace=work, note="numpy taps")
        kind = kconv.MAX if self.reduce == "max" else kconv.AVG
        kgeo = kconv.pool_geometry(x, kernel, y, window.strides, begin, window.dilations, kind)
        vector = kconv.use_vector_pool(kgeo, dtype)
        div = np.ascontiguousarray(divisor if divisor is not None else np.ones((1, 1), dtype), dtype)
        nparts = _plane_parts(int(np.prod(y)) * len(kernel) * max(kernel), x[0] * x[1], ctx.threads)
        work.append(((kconv.pool_scratch(kgeo, nparts),), dtype))
        native = [Call(kconv.pool_run, (xin, kgeo, div, out, W(len(work) - 1), nparts))]
        sample = (np.zeros((1, 1, 1, 1), dtype), kgeo, div, np.zeros((1, 1, 1, 1), dtype), nparts)
        how = "vector pool kernel" if vector else "pool kernel"
        return Bound(fallback, mode="native", workspace=work, note=f"{how}, {nparts} part(s)",
                     request=KernelRequest("pool", lambda alias: _warm_pool(sample),
                                           lambda kern, alias: native))


def _plane_parts(work: int, planes: int, threads: int) -> int:
    """Parts for a plane-parallel kernel: the threads when there is enough work (~64K element-steps) and planes."""
    return max(1, min(threads, planes)) if work >= 1 << 16 else 1


def _warm_pool(sample) -> str:
    """Compile the pooling kernels for ``sample``'s types (on the JIT thread): a 1x1 pool of one plane."""
    x, geo, div, out, nparts = sample
    g = geo.copy()
    g[:kconv.LAYOUT] = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0)
    g[kconv.ALGO] = kconv.POOL_PHASES
    kconv.pool_run(x, g, div, out, np.zeros(kconv.pool_scratch(g, nparts), x.dtype), nparts)
    return "pool"


def _work_refs(work: list) -> tuple:
    return tuple(W(k) for k in range(len(work)))


def _max_pool(x, out, geo, *work) -> None:
    lib_pool.max_pool(x, out, geo, list(work))


def _avg_pool(x, out, geo, divisor, *work) -> None:
    lib_pool.avg_pool(x, out, geo, list(work), divisor)


def global_pool_into(x: np.ndarray, reduce, out: np.ndarray) -> None:
    reduce(x, axis=tuple(range(2, x.ndim)), keepdims=True, out=out)


class GlobalPoolImpl(StepImpl):
    """GlobalAveragePool / GlobalMaxPool: ``tlc.kernels.reduce``'s rows (the planes) for floats, numpy's otherwise.
    (A plane kernel of its own, summing in float64, took MobileNetV2's 1280 planes of 49 10.6 us in the model at
    batch 1 and 74 at batch 8, one thread; the rows 7.0 and 43.)"""

    def __init__(self, reduce: str):
        self.is_max = reduce == "max"
        self.reduce = np.max if self.is_max else np.mean
        self.reason = f"global {reduce} pool"

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        ctx.out_shapes()
        fallback = Bound([Call(global_pool_into, (V(ctx.inputs[0]), self.reduce, V(ctx.outputs[0])))], note="numpy")
        if len(x) < 3:
            return fallback
        return _axes_reduction(ctx, kreduce.MAX if self.is_max else kreduce.MEAN, list(range(2, len(x))), fallback)


class LRNImpl(StepImpl):
    reason = "numpy channel taps"

    def __init__(self, attrs: dict[str, Any]):
        self.kw = {"size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
                   "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))}

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        work = [(s, ctx.out_dtype()) for s in lib_pool.lrn_workspace(x, self.kw["size"])]
        return Bound([Call(_lrn, (V(ctx.inputs[0]), V(ctx.outputs[0]), self.kw) + _work_refs(work))],
                     workspace=work)


def _lrn(x, out, kw, *work) -> None:
    lib_pool.lrn(x, out, list(work), **kw)


# ---------------------------------------------------------------------------- one elementwise op, numpy
def expression_into(tree: E.Expr, dtype: str, out: np.ndarray, *ins: np.ndarray) -> None:
    np.copyto(out, E.evaluate(tree, list(ins), dtype), casting="unsafe")


def expression_calls(ctx: BindContext) -> list[Call]:
    """An elementwise op evaluated with numpy from its scalar expression, into its output."""
    opdef = opdef_of(ctx.node)
    tree = opdef.expr(*[None if t is None else E.arg(i) for i, t in enumerate(ctx.in_types)], **ctx.attrs)
    return [Call(expression_into, (E.lift(tree), ctx.out_types[0].dtype, V(ctx.outputs[0]))
                 + tuple(V(i) for i in ctx.inputs))]


# ---------------------------------------------------------------------------- channels-last twins (-O3)
class ConvNhwcImpl(StepImpl):
    reason = "NHWC conv: GEMM (1x1), im2col/BLAS, or depthwise taps, chosen per shape"

    def __init__(self, attrs: dict[str, Any]):
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        work: list = []
        bound = self.bind_into(ctx, V(ctx.outputs[0]), work)
        bound.workspace, bound.blas = work, True
        return bound

    def bind_into(self, ctx: BindContext, out: Ref, work: list) -> Bound:
        """The conv of ``ctx``'s inputs (with its bias) into ``out``; its scratch appended to ``work``."""
        x, w, *_ = ctx.in_shapes()
        y = tuple(ctx.out_types[0].shape)
        if len(x) != 4:
            raise NotNative(f"only 2-D convolutions are native (input rank {len(x)})")
        window, begin, _ = spatial_window(self.attrs, w[1:3], x[1:3])
        geo = lib_conv_nhwc.geometry(x, w, y, window.strides, begin, window.dilations,
                                     int(self.attrs.get("group", 1)))
        algo = lib_conv_nhwc.choose_algorithm(geo)
        dtype = np_dtype(ctx.in_types[0].dtype)
        first = len(work)
        work += [(s, dtype) for s in lib_conv_nhwc.workspace(geo, algo)]
        refs = tuple(W(k) for k in range(first, len(work)))
        args = (algo, _input(ctx, 0), _input(ctx, 1), _input(ctx, 2), out, geo) + refs
        return Bound([Call(_conv_nhwc, args)], note=f"nhwc {algo}")


def _input(ctx: BindContext, port: int) -> Any:
    """Input ``port`` as a call argument: its value when known, else a reference; None when absent."""
    if port >= len(ctx.inputs) or ctx.in_types[port] is None:
        return None
    known = ctx.const(port)
    return known if known is not None else V(ctx.inputs[port])


def _conv_nhwc(algo, x, w, b, out, geo, *work) -> None:
    lib_conv_nhwc.run(algo, x, w, b, out, geo, list(work))


class PoolNhwcImpl(StepImpl):
    def __init__(self, attrs: dict[str, Any], reduce: str):
        self.attrs = attrs
        self.reduce = reduce
        self.reason = f"NHWC {reduce} pool: strided taps"
        if reduce == "avg" and any(d != 1 for d in attrs.get("dilations") or ()):
            raise NotNative("AveragePool with dilations is not native")

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        (y,) = ctx.out_shapes()[:1]
        if len(x) != 4 or len(ctx.outputs) != 1:
            raise NotNative(f"only 2-D single-output pooling is native (input rank {len(x)})")
        kernel = tuple(int(k) for k in self.attrs["kernel_shape"])
        window, begin, end = spatial_window(self.attrs, kernel, x[1:3])
        n, h, w, c = x
        geo = lib_pool.PoolGeometry(n, c, h, w, *kernel, *y[1:3], *window.strides, *window.dilations, *begin, *end)
        dtype = ctx.out_dtype()
        work = [(s, dtype) for s in lib_pool_nhwc.workspace(geo)]
        xin, out = V(ctx.inputs[0]), V(ctx.outputs[0])
        if self.reduce == "max":
            return Bound([Call(_max_pool_nhwc, (xin, out, geo) + _work_refs(work))], workspace=work)
        divisor = lib_pool.avg_divisor(geo, bool(self.attrs.get("count_include_pad", 0)), dtype)
        return Bound([Call(_avg_pool_nhwc, (xin, out, geo, divisor) + _work_refs(work))], workspace=work)


def _max_pool_nhwc(x, out, geo, *work) -> None:
    lib_pool_nhwc.max_pool(x, out, geo, list(work))


def _avg_pool_nhwc(x, out, geo, divisor, *work) -> None:
    lib_pool_nhwc.avg_pool(x, out, geo, list(work), divisor)


def global_pool_nhwc_into(x: np.ndarray, reduce, out: np.ndarray) -> None:
    reduce(x, axis=tuple(range(1, x.ndim - 1)), keepdims=True, out=out)


class GlobalPoolNhwcImpl(StepImpl):
    """A channels-last global pool: ``tlc.kernels.reduce``'s kernel on x viewed [N, H * W, C] (numpy's otherwise)."""

    def __init__(self, reduce: str):
        self.reduce = np.mean if reduce == "mean" else np.max
        self.code = kreduce.MEAN if reduce == "mean" else kreduce.MAX
        self.reason = f"{reduce} over the spatial axes"

    def bind(self, ctx: BindContext) -> Bound:
        (x,) = ctx.in_shapes()[:1]
        ctx.out_shapes()
        fallback = [Call(global_pool_nhwc_into, (V(ctx.inputs[0]), self.reduce, V(ctx.outputs[0])))]
        return _axes_reduction(ctx, self.code, list(range(1, len(x) - 1)), Bound(fallback, note="numpy"))


# ---------------------------------------------------------------------------- resampling: Resize, ConvTranspose
class AxisPass(NamedTuple):
    """One resized axis of a Resize, on its source and destination viewed as [outer, length, inner].

    ``kind``: "take" (nearest: ``data`` the index per output position), "matmul" (``data`` the [out, in]
    interpolation matrix, or its transpose when ``inner`` is 1) or "taps" (``data`` (indices, weights), each
    [taps, out], for a long axis, where a dense matrix would cost more than the taps). ``src``/``dst``: -1 the
    input, -2 the output, k scratch array k. ``outside``: tf_crop_and_resize positions set to ``fill``.
    """

    kind: str
    data: Any
    src: int
    dst: int
    src_shape: tuple[int, int, int]
    dst_shape: tuple[int, int, int]
    outside: np.ndarray | None
    fill: Any


def _dense_pass(in_len: int, num_taps: int, inner: int) -> bool:
    """Whether one axis pass is a product with the dense [out, in] matrix rather than tap by tap.

    A product costs ``in_len`` multiply-adds per output, a tap ~3 memory passes over the output (a gather, a
    scale, an add). Along the last axis (``inner`` 1) a gather moves single elements, so BLAS wins up to ~100
    (64 -> 128 bilinear of [1, 32, 64, 64]: 0.18 ms against 0.35 ms); along other axes it gathers whole rows,
    and the taps win (0.34 ms against 0.61 ms) unless there are many (an antialiased downscale).
    """
    if inner == 1:
        return in_len <= 96 or num_taps * 8 >= in_len
    return num_taps * 8 >= in_len


class ResizeImpl(StepImpl):
    """Resize one axis at a time: a gather (nearest), a product with the axis's interpolation matrix, or its
    taps one by one (a long axis), each built once per signature from the reference's own coordinate and tap
    routines (``ops.resize.source_coords``, ``taps``), so every mode and attribute means what the reference
    says. Only the order of the passes may differ from the reference's (they commute; float rounding aside)."""

    reason = "per-axis gathers and interpolation matrices"

    def __init__(self, attrs: dict[str, Any]):
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        x = ctx.in_shapes()[0]
        (y,) = ctx.out_shapes()
        consts = [_optional_const(ctx, port, name) for port, name in ((1, "roi"), (2, "scales"), (3, "sizes"))]
        out_shape, passes = resize_ops.axis_passes(x, self.attrs["axes"], *consts,
                                                   self.attrs["keep_aspect_ratio_policy"])
        if tuple(out_shape) != y:
            raise NotNative(f"Resize gives {out_shape}, planned {list(y)}")
        if 0 in x or 0 in y:
            raise NotNative("an empty input or output")
        dtype = ctx.out_dtype()
        nearest = self.attrs["mode"] == "nearest"
        if dtype.kind == "f" and dtype.itemsize >= 4:
            compute = dtype
        elif nearest and dtype.kind in "biuf":
            compute = dtype   # a gather is exact in any dtype
        else:
            raise NotNative(f"{self.attrs['mode']} Resize of {dtype} is not native")
        if not passes:
            return Bound([Call(expand_into, (V(ctx.inputs[0]), V(ctx.outputs[0])))], note="identity")
        if self.attrs["coordinate_transformation_mode"] != "tf_crop_and_resize":
            # NOTE: the passes commute but for extrapolation; shrinking first, then the last axis first (its dense
            # product is cheaper on the smaller array) does the least work: 0.87 -> 0.52 ms for a 2x bilinear
            passes = sorted(passes, key=lambda p: (p[1] / x[p[0]], -p[0]))
        work: list = []
        steps = []
        shape, src = list(x), -1
        for i, (axis, out_len, scale, bounds) in enumerate(passes):
            src_shape = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
            shape[axis] = out_len
            dst_shape = (src_shape[0], out_len, src_shape[2])
            if i == len(passes) - 1:
                dst = -2
            else:
                work.append((tuple(shape), compute))
                dst = len(work) - 1
            steps.append(self._axis_pass(src_shape, dst_shape, scale, bounds, compute, src, dst, work))
            src = dst
        kinds = "+".join(s.kind for s in steps)
        blas = any(s.kind == "matmul" for s in steps)
        calls = [Call(resize_into, (V(ctx.inputs[0]), V(ctx.outputs[0]), tuple(steps)) + _work_refs(work))]
        planes = self._planes(ctx, x, y, passes, compute)
        if planes is None:
            return Bound(calls, workspace=work, blas=blas, note=kinds)
        args, nparts = planes
        nearest = self.attrs["mode"] == "nearest"

        def build(alias):   # compile for these types (on the JIT thread): one 1x1 plane, one tap
            plane, index, weight = np.zeros((1, 1, 1), compute), np.zeros((1, 1), np.int64), np.ones((1, 1), compute)
            resample.resample(plane, plane.copy(), index, weight, index, weight, *resample.pairs(index, weight, 1),
                              nearest, nparts)
            return "resize"

        native = [Call(_resample, (V(ctx.inputs[0]), V(ctx.outputs[0]), *args))]
        return Bound(calls, mode="native", workspace=work, blas=blas, note=f"plane kernel, {nparts} part(s)",
                     request=KernelRequest("resize", build, lambda kern, alias: native))

    def _planes(self, ctx: BindContext, x, y, passes, compute):
        """The plane kernel's arguments (after the input and output) and its parts, where it applies: floats,
        only the last two axes resized, no extrapolated positions, the JIT on; else None."""
        rank = len(x)
        if (not ctx.options.jit_enabled or compute not in (np.float32, np.float64) or rank < 3
                or any(axis < rank - 2 for axis, *_ in passes) or not ctx.contiguous(0)
                or self.attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"):
            return None
        taps = []
        for axis in (rank - 2, rank - 1):
            found = [p for p in passes if p[0] == axis]
            if not found:   # this axis as it is: one tap of weight 1
                taps += [np.arange(x[axis], dtype=np.int64)[:, None], np.ones((x[axis], 1), compute)]
                continue
            _, out_len, scale, bounds = found[0]
            coords, _ = resize_ops.source_coords(self.attrs["coordinate_transformation_mode"], out_len, x[axis],
                                                 scale, bounds)
            idx, weights = resize_ops.taps(coords, x[axis], scale, self.attrs)
            taps += [np.ascontiguousarray(idx, np.int64), np.ascontiguousarray(weights, compute)]
        planes = math.prod(x[:-2])
        nearest = self.attrs["mode"] == "nearest"
        work = math.prod(y) * (1 if nearest else taps[1].shape[1] + taps[3].shape[1])
        nparts = _plane_parts(work, planes, ctx.threads)
        return ((planes, *x[-2:]), (planes, *y[-2:]), *taps, *resample.pairs(taps[2], taps[3], x[-1]), nearest,
                nparts), nparts

    def _axis_pass(self, src_shape, dst_shape, scale, bounds, compute, src, dst, work) -> AxisPass:
        in_len, out_len = src_shape[1], dst_shape[1]
        coords, outside = resize_ops.source_coords(self.attrs["coordinate_transformation_mode"], out_len, in_len,
                                                   scale, bounds)
        idx, weights = resize_ops.taps(coords, in_len, scale, self.attrs)
        fill = None
        if outside is not None and outside.any():
            if compute.kind != "f":
                raise NotNative("tf_crop_and_resize extrapolation of integers is not native")
            outside, fill = np.flatnonzero(outside), compute.type(self.attrs["extrapolation_value"])
        else:
            outside = None
        if self.attrs["mode"] == "nearest":
            return AxisPass("take", np.ascontiguousarray(idx[:, 0]), src, dst, src_shape, dst_shape, outside, fill)
        if _dense_pass(in_len, idx.shape[1], src_shape[2]):
            matrix = np.zeros((out_len, in_len))
            np.add.at(matrix, (np.repeat(np.arange(out_len), idx.shape[1]), idx.ravel()), weights.ravel())
            matrix = matrix.T if src_shape[2] == 1 else matrix
            return AxisPass("matmul", np.ascontiguousarray(matrix, compute), src, dst, src_shape, dst_shape,
                            outside, fill)
        work.append((dst_shape, compute))   # each tap's gather
        data = (np.ascontiguousarray(idx.T), np.ascontiguousarray(weights.T[:, :, None], compute), len(work) - 1)
        return AxisPass("taps", data, src, dst, src_shape, dst_shape, outside, fill)


def _optional_const(ctx: BindContext, port: int, what: str) -> np.ndarray | None:
    if port >= len(ctx.inputs) or ctx.in_types[port] is None:
        return None
    return ctx.require_const(port, what)


def _resample(x, out, in_shape, out_shape, iy, wy, ix, wx, pair, pw, nearest, nparts) -> None:
    resample.resample(x.reshape(in_shape), out.reshape(out_shape), iy, wy, ix, wx, pair, pw, nearest, nparts)


def resize_into(x: np.ndarray, out: np.ndarray, steps: tuple[AxisPass, ...], *work: np.ndarray) -> None:
    for step in steps:
        src = (x if step.src == -1 else work[step.src]).reshape(step.src_shape)
        dst = (out if step.dst == -2 else work[step.dst]).reshape(step.dst_shape)
        # NOTE: the indices are in range (clamped in bind); mode "raise" would buffer the output (~20x slower)
        if step.kind == "take":
            np.take(src, step.data, axis=1, out=dst, mode="wrap")
        elif step.kind == "matmul" and step.src_shape[2] == 1:
            np.matmul(src[:, :, 0], step.data, out=dst[:, :, 0])
        elif step.kind == "matmul":
            np.matmul(step.data, src, out=dst)
        else:
            indices, weights, k = step.data
            gathered = work[k].reshape(step.dst_shape)
            for t in range(len(indices)):
                np.take(src, indices[t], axis=1, out=dst if t == 0 else gathered, mode="wrap")
                if t == 0:
                    np.multiply(dst, weights[0], out=dst)
                else:
                    np.multiply(gathered, weights[t], out=gathered)
                    np.add(dst, gathered, out=dst)
        if step.outside is not None:
            dst[:, step.outside, :] = step.fill


class ConvTransposeImpl(StepImpl):
    """2-D ConvTranspose (NCHW): one GEMM per group into columns [M/group * kh * kw, H * W], then col2im: per
    kernel tap a strided copy (taps that never overlap) or add into the output, then the bias."""

    reason = "GEMM per group, then a strided copy or add per kernel tap"

    def __init__(self, attrs: dict[str, Any]):
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        x, w, *_ = ctx.in_shapes()
        (y,) = ctx.out_shapes()
        if len(x) != 4:
            raise NotNative(f"only 2-D transposed convolutions are native (input rank {len(x)})")
        dtype = ctx.out_dtype()
        if dtype not in (np.float32, np.float64):
            raise NotNative(f"ConvTranspose of {dtype} is not native")
        group = int(self.attrs.get("group", 1))
        n, c, h, wd = x
        mg, kernel = w[1], w[2:]
        try:
            window = make_window(self.attrs, kernel)
            padding, shape = conv_ops.transpose_attrs(self.attrs, 2)
            geometry = [conv_ops.transpose_axis(window, i, size, padding[i], shape[i])
                        for i, size in enumerate(x[2:])]
        except ValueError as exc:
            raise NotNative(str(exc)) from None
        outs = [g[0] for g in geometry]
        if (n, mg * group, *outs) != y or c != w[0] or c % group or 0 in x or 0 in w:
            raise NotNative(f"ConvTranspose of X {list(x)}, W {list(w)} gives {list(y)}")
        taps, coverage = [], np.zeros(outs, np.int64)
        for k, (i, j) in enumerate(itertools.product(range(kernel[0]), range(kernel[1]))):
            spans = [_tap_span(o * d - begin, s, size, out) for o, d, s, size, (out, begin)
                     in zip((i, j), window.dilations, window.strides, x[2:], geometry)]
            if all(spans):
                dst, src = (tuple(sp[q] for sp in spans) for q in (0, 1))
                taps.append((k, dst, src))
                coverage[dst] += 1
        assign = coverage.max(initial=0) <= 1
        known = ctx.const(1)
        if known is not None:
            weight: Any = np.ascontiguousarray(
                known.reshape(group, c // group, mg * math.prod(kernel)).transpose(0, 2, 1), dtype)
        else:
            weight = V(ctx.inputs[1])
        bias = _input(ctx, 2)
        cols_shape = (n, mg * group, math.prod(kernel), h, wd)
        geo = ConvTransposeGeometry(group, c // group, mg * math.prod(kernel), cols_shape, known is None,
                                    tuple(taps), assign, not assign or coverage.min(initial=1) == 0)
        cols = (n, group, geo.rows, h * wd)
        work = [(cols, dtype)]
        args = (V(ctx.inputs[0]), weight, bias, V(ctx.outputs[0]), geo, W(0))
        note = "copy per tap" if assign else "add per tap"
        numpy_calls = [Call(conv_transpose_into, args)]
        if known is None or not ctx.options.jit_enabled:
            return Bound(numpy_calls, workspace=work, blas=True, note=note)
        # the product on the pool (in parts; the panel product on X where it is, for float32): what MatMul runs
        item = dtype.itemsize
        x_cols = (n, group, c // group, h * wd)
        offs = gemm.batch_offsets(weight.shape, weight.strides, x_cols, contiguous_strides(x_cols, item), cols,
                                  item)
        nparts = gemm.parts_for(n * c * geo.rows * h * wd, ctx.threads)
        packed = gemm.IN_PLACE if gemm.in_place(dtype, True, h * wd, c // group, 1.0) else gemm.UNPACKED
        native = [Call(conv_transpose_into, args + ((offs, nparts, packed),))]

        def build(alias):   # the product's driver for these types, on one element (on the JIT thread)
            one = np.zeros((1, 1, 1, 1), dtype)
            gemm.matmul(np.zeros((1, 1, 1), dtype), one, one.copy(), np.zeros((1, 3), np.int64), 1.0, False, nparts,
                        packed)
            return "conv transpose product"

        kind = "panels in place" if packed.size else "BLAS"
        interleaved = self._interleaved(geo, kernel, x, outs, bias, dtype)
        if interleaved is not None:   # every output element one tap's: the taps and the bias in one kernel pass
            note = "taps interleaved"
            native = [Call(conv_transpose_interleaved, args[:2] + (interleaved,) + args[3:] + ((offs, nparts, packed),
                                                                                           tuple(kernel)))]
            build_product = build

            def build(alias):
                one = np.zeros((1, 1, 1, 1, 1), dtype)
                ktranspose.interleave_taps(one, np.zeros(1, dtype), np.zeros((1, 1, 1, 1), dtype), 1, 1)
                return build_product(alias)

        return Bound(numpy_calls, mode="native", workspace=work, blas=True,
                     note=f"{kind} in {nparts} part(s), {note}",
                     request=KernelRequest("conv transpose", build, lambda kern, alias: native))

    @staticmethod
    def _interleaved(geo: ConvTransposeGeometry, kernel, x, outs, bias, dtype) -> np.ndarray | None:
        """The bias (or -0.0 per channel where there is none) where the kernel is the stride and every output
        element is exactly one tap's (``ktranspose.interleave_taps``); else None."""
        (kh, kw), (h, w) = kernel, x[2:]
        if not geo.assign or geo.fill or list(outs) != [h * kh, w * kw] or len(geo.taps) != kh * kw:
            return None
        for k, dst, src in geo.taps:
            i, j = divmod(k, kw)
            if dst != (slice(i, i + (h - 1) * kh + 1, kh), slice(j, j + (w - 1) * kw + 1, kw)) \
                    or src != (slice(0, h), slice(0, w)):
                return None
        channels = geo.cols_shape[1]
        if bias is None:
            return np.full(channels, -0.0, dtype)
        if not isinstance(bias, np.ndarray):   # a bias fed at run time
            return None
        return np.ascontiguousarray(bias.reshape(channels), dtype)


def _tap_span(offset: int, stride: int, size: int, out: int) -> tuple[slice, slice] | None:
    """(output slice, input slice) of one kernel tap along one axis: input position p lands on output
    p * stride + offset, kept where that lies in [0, out); None when no position does."""
    first = max(0, -(offset // stride))
    last = min(size - 1, (out - 1 - offset) // stride)
    if first > last:
        return None
    return (slice(first * stride + offset, last * stride + offset + 1, stride), slice(first, last + 1))


class ConvTransposeGeometry(NamedTuple):
    group: int
    per_group: int                       # input channels per group
    rows: int                            # column rows per group: M / group * kh * kw
    cols_shape: tuple[int, ...]          # (N, M, kh * kw, H, W)
    raw_weight: bool                     # the weight is an input, reshaped each run
    taps: tuple                          # (tap, output slices, input slices)
    assign: bool                         # no two taps write one output element
    fill: bool                           # zero the output first: some element is written by no tap


def conv_transpose_into(x, weight, bias, out, geo: ConvTransposeGeometry, cols, product=None) -> None:
    """The columns (per group: weight^T @ X), then each kernel tap's copy or add into the output, then the bias;
    ``product`` (offsets, parts, panels): the product through ``tlc.kernels.gemm`` rather than numpy's."""
    m = geo.cols_shape[1]
    _conv_transpose_columns(x, weight, geo, cols, product)
    taps = cols.reshape(geo.cols_shape)
    bias_first = bias is not None and not geo.assign   # the adds start from the bias: one pass fewer
    if bias_first:
        np.copyto(out, bias.reshape(m, 1, 1))
    elif geo.fill:
        out.fill(0)
    everything = (slice(None), slice(None))
    for k, dst, src in geo.taps:
        if geo.assign:
            out[everything + dst] = taps[(slice(None), slice(None), k) + src]
        else:
            out[everything + dst] += taps[(slice(None), slice(None), k) + src]
    if bias is not None and not bias_first:
        np.add(out, bias.reshape(m, 1, 1), out=out)


def _conv_transpose_columns(x, weight, geo: ConvTransposeGeometry, cols, product=None) -> None:
    """The columns of a ConvTranspose, per group weight^T @ X, into ``cols``: numpy's product, or (``product``:
    offsets, parts, panels) ``tlc.kernels.gemm``'s."""
    n, _, _, h, w = geo.cols_shape
    if geo.raw_weight:
        weight = weight.reshape(geo.group, geo.per_group, geo.rows).transpose(0, 2, 1)
    if product is None:
        np.matmul(weight, x.reshape(n, geo.group, geo.per_group, h * w), out=cols)
    else:
        offs, nparts, packed = product
        gemm.matmul(weight, x.reshape(n, geo.group, geo.per_group, h * w), cols, offs, 1.0, False, nparts, packed)


def conv_transpose_interleaved(x, weight, bias, out, geo: ConvTransposeGeometry, cols, product, kernel) -> None:
    """``conv_transpose_into`` where the kernel is the stride: the product, then every tap and the bias in one
    pass (``ktranspose.interleave_taps``; ``bias`` [M], -0.0 each where the conv has none)."""
    _conv_transpose_columns(x, weight, geo, cols, product)
    ktranspose.interleave_taps(cols.reshape(geo.cols_shape), bias, out, kernel[0], kernel[1])


# ---------------------------------------------------------------------------- recurrent layers: RNN, GRU, LSTM
class RecurrentImpl(StepImpl):
    """RNN, GRU and LSTM: the whole sequence projected through W in one product (every direction; BLAS or the
    panel product in parts), then the step loop compiled per cell type (``tlc.kernels.recurrent``), the two
    directions of a bidirectional layer on two threads. Every attribute and optional input and output of the
    reference is native but activations other than Sigmoid, Tanh and Relu, and float16 (the reference computes
    it in float32): those run the reference, with the reason in ``plan.stats()``."""

    mode = "native"
    reason = "one projection product, then the compiled step loop"

    def __init__(self, op: str, attrs: dict[str, Any]):
        (self.recurrence,) = [r for r in recurrent_ops.RECURRENCES if r.name == op]
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        rec, attrs = self.recurrence, self.attrs
        dtype = ctx.out_dtype()
        if dtype not in (np.float32, np.float64):
            raise NotNative(f"{rec.name} of {dtype} runs the reference (which computes float16 in float32)")
        if not ctx.options.jit_enabled:
            raise NotNative("jit='off': the step loop is compiled code")
        x, _, r = ctx.in_shapes()[:3]
        directions = 2 if attrs["direction"] == "bidirectional" else 1
        acts = self._activation_codes(directions)
        batch_first = attrs["layout"] == 1
        seq, batch = (x[1], x[0]) if batch_first else (x[0], x[1])
        hidden = r[2]
        if attrs["hidden_size"] not in (None, hidden):
            raise NotNative(f"hidden_size {attrs['hidden_size']} but R has {hidden} columns")
        if 0 in (seq, batch, x[2], hidden):
            raise NotNative(f"an empty dimension (X {list(x)}, hidden {hidden})")
        reverse = [attrs["direction"] == "reverse" or d == 1 for d in range(directions)]
        flag = bool(attrs.get("input_forget", attrs.get("linear_before_reset", 0)))
        macs = seq * batch * x[2] * directions * rec.gates * hidden
        proj_parts = gemm.parts_for(macs, ctx.threads)
        layer = krec.Layer(rec.name, seq, batch, x[2], hidden, directions, rec.gates, batch_first,
                           np.array(acts, np.int64), np.array(reverse, np.int64), float(attrs["clip"] or 0.0), flag,
                           proj_parts, gemm.column_split(seq * batch, directions * rec.gates * hidden, 1, proj_parts),
                           max(1, min(directions, ctx.threads)))
        ports = {"w": 1, "r": 2, "b": 3, "lens": 4, "h0": 5, "c0": 6, "p": 7}
        arg = {k: _input(ctx, port) for k, port in ports.items()}
        weights = None
        if all(not isinstance(arg[k], Ref) for k in ("w", "r", "b", "p")):
            weights = krec.prepare(layer, dtype, arg["w"], arg["r"], arg["b"], arg["p"], pack=True)
        lens = arg["lens"]
        if lens is not None and not isinstance(lens, Ref):
            try:
                lens = recurrent_ops.sequence_lengths(lens, seq, batch)
            except ValueError as exc:   # the reference raises it when run
                raise NotNative(str(exc)) from None
        outs = tuple(V(o) for o in ctx.outputs) + (None,) * (3 - len(ctx.outputs))
        work = [(shape, dtype) for shape in layer.workspace()]
        args = (layer, weights, *(arg[k] for k in ports), *outs) + _work_refs(work)
        native = [Call(_recurrent, (V(ctx.inputs[0]),) + args)]
        packed = weights is not None and weights.packed.size > 1
        recurrence = "panels" if weights is not None and weights.rp.size else "BLAS"
        note = (f"projection by {'panels' if packed else 'BLAS'} in {proj_parts} part(s), {rec.name} loop on "
                f"{layer.loop_parts} thread(s), h @ R^T by {recurrence}")
        return Bound(fallback_calls(ctx), mode="native", workspace=work, blas=True, note=note,
                     request=KernelRequest(f"{rec.name} loop", lambda alias: krec.warm(layer, dtype),
                                           lambda kern, alias: native))

    def _activation_codes(self, directions: int) -> list[list[int]]:
        """The kernels' code of each direction's activations; NotNative names one they do not have."""
        rec, attrs = self.recurrence, self.attrs
        try:
            bound = recurrent_ops.bind_activations(attrs["activations"], attrs["activation_alpha"],
                                                   attrs["activation_beta"], attrs["clip"], rec.activations,
                                                   directions)
        except ValueError as exc:
            raise NotNative(str(exc)) from None
        names = {id(kind): name for name, kind in recurrent_ops.ACTIVATIONS.items()}
        codes = []
        for acts in bound:
            for a in acts:
                if names[id(a.kind)] not in krec.CODES:
                    raise NotNative(f"activation {names[id(a.kind)]} is not native (Sigmoid, Tanh and Relu are)")
            codes.append([krec.CODES[names[id(a.kind)]] for a in acts])
        return codes


def _recurrent(x, layer, weights, w, r, b, lens, h0, c0, p, y, yh, yc, *work) -> None:
    """One recurrent step of the run: absent arrays made empty, a sequence_lens input checked (as the
    reference does), then ``tlc.kernels.recurrent.run``."""
    dtype = y.dtype
    lens = recurrent_ops.sequence_lengths(lens, layer.seq, layer.batch)
    empty3 = np.zeros((0, 0, 0), dtype)
    krec.run(layer, weights, x, w, r, b, lens, empty3 if h0 is None else h0, empty3 if c0 is None else c0, p, y,
             empty3 if yh is None else yh, empty3 if yc is None else yc, *work)
