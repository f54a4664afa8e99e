"""How each op runs on the CUDA target: the device op table ``CUDA_OPS`` (``tlc.targets.cuda`` names it as its
``ops``), read when a graph is lowered for ``target="cuda"``.

Every step reads and writes device arrays (the plan is device-resident: ``tlc.runtime.device``). ``tlc.Fused``
groups and lone elementwise ops in the target's dtypes are generated Numba CUDA kernels (``tlc.kernels.cuda``),
2-D depthwise convolutions a library kernel (``tlc.kernels.cuda_conv``); products, other convolutions, pooling,
reductions, normalisations and data movement are written once against the array module ``xp``: CuPy on a GPU
(cuBLAS for every product: convolutions as a strided window view copied to columns, then one batched product;
transposed convolutions as a product then one strided add per tap; linear and cubic resizes as one product per
resized axis), numpy under Numba's simulator, where device memory is host memory. Temporaries come from CuPy's
memory pool (reused across runs, not from the arena). An op the table does not list runs its reference on the
host, its inputs copied from the device and its results back, and ``plan.stats()`` lists it with that reason:
nothing falls back silently.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.graph import TLC_DOMAIN, Node
from ..ops import quant as quant_ops
from ..ops import recurrent as recurrent_ops
from ..ops import resize as resize_ops
from ..ops.conv import transpose_attrs, transpose_axis
from ..ops.window import make_window
from . import native
from .bound import Bound, Call, F, KernelRequest, NotNative, V
from .control import IfImpl, LoopImpl, ScanImpl
from .device import DEVICE_DTYPES, memory_of
from .impl import BindContext, StepImpl, fallback_calls, spatial_window
from .library import ViewImpl
from .ops import ELEMENTWISE
from .options import CompileOptions

Factory = Callable[[dict[str, Any], Node, CompileOptions], StepImpl]
Make = Callable[..., None]     # fn(*inputs, *outputs): writes the outputs on the device
Made = Make | tuple[Make, str]  # a Make, or a Make and the step's note when it is not the class's ``what``


class DeviceImpl(StepImpl):
    """A step written against the array module: ``make(ctx, xp, memory)`` returns ``fn(*inputs, *outputs)``,
    which computes into the planned device outputs (or ``(fn, note)`` when it chose what the note must say)."""

    mode = "library"
    what = ""

    def __init__(self, attrs: dict[str, Any], node: Node, options: CompileOptions):
        self.attrs = attrs
        self.node = node
        self.reason = self.what or node.op

    def bind(self, ctx: BindContext) -> Bound:
        ctx.out_shapes()
        memory = memory_of(ctx.options.target)
        made = self.make(ctx, memory.xp, memory)
        fn, note = made if isinstance(made, tuple) else (made, f"{self.reason} ({memory.xp.__name__})")
        args = tuple(V(i) for i in ctx.inputs) + tuple(V(o) for o in ctx.outputs)
        return Bound([Call(fn, args)], note=note)

    def make(self, ctx: BindContext, xp, memory) -> Made:
        raise NotImplementedError


def _single(cls: type[DeviceImpl]) -> Factory:
    def factory(attrs: dict[str, Any], node: Node, options: CompileOptions) -> StepImpl:
        if node.num_outputs != 1:
            raise NotNative(f"only the single-output form runs on the device ({node.num_outputs} outputs)")
        return cls(attrs, node, options)

    return factory


def _axes(ctx: BindContext, attrs: dict[str, Any], port: int, rank: int) -> tuple[int, ...] | None:
    """Axes from the attribute (older opsets) or a constant input ``port``, normalised; None when absent."""
    axes = attrs.get("axes")
    if axes is None and port < len(ctx.inputs) and ctx.in_types[port] is not None:
        axes = ctx.require_const(port, "axes")
    if axes is None or len(axes) == 0:
        return None
    return tuple(int(a) % rank for a in np.asarray(axes).reshape(-1))


# ---------------------------------------------------------------------------- products
class MatMulImpl(DeviceImpl):
    what = "matmul"

    def make(self, ctx, xp, memory):
        def fn(a, b, out):
            xp.matmul(a, b, out=out)

        return fn


class GemmImpl(DeviceImpl):
    what = "matmul (Gemm)"

    def make(self, ctx, xp, memory):
        a = self.attrs
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
        dtype = ctx.out_dtype()

        def fn(x, w, *rest):
            c, out = (rest[0] if len(rest) > 1 else None), rest[-1]
            xp.matmul(x.T if ta else x, w.T if tb else w, out=out)
            if alpha != 1.0:
                xp.multiply(out, dtype.type(alpha), out=out)
            if c is not None and beta != 0.0:
                xp.add(out, c if beta == 1.0 else c * dtype.type(beta), out=out)

        return fn


def _strided(xp):
    return xp.lib.stride_tricks.as_strided


class ConvImpl(DeviceImpl):
    """N-D grouped, dilated convolution: columns (a strided window view of the padded input, copied once), then
    one batched product over (image, group); a 1x1 convolution of stride 1 reads the input as its columns. A 2-D
    depthwise convolution (group == C == M) in float32 or float64 is the direct kernel of
    ``tlc.kernels.cuda_conv`` instead (a batched product of one row by kh*kw rows per channel is slow on a GPU).
    """

    what = "conv as columns and one batched matmul"

    def make(self, ctx, xp, memory):
        x_shape, w_shape = ctx.in_shapes()[:2]
        (y_shape,) = ctx.out_shapes()[:1]
        n, c, *spatial = x_shape
        m, cg, *kernel = w_shape
        group = int(self.attrs.get("group", 1))
        if not spatial or c != cg * group or m % group:
            raise NotNative(f"Conv of X {list(x_shape)}, W {list(w_shape)}, group {group}")
        window, begins, ends = spatial_window(self.attrs, tuple(kernel), tuple(spatial))
        dtype = ctx.out_dtype()
        with_bias = len(ctx.inputs) > 2 and ctx.in_types[2] is not None
        if group == c == m and len(spatial) == 2 and dtype.name in ("float32", "float64"):
            try:
                return (self._depthwise(x_shape, w_shape, y_shape, window, begins, dtype, with_bias),
                        "direct depthwise kernel (cuda.jit)")
            except Exception as exc:  # noqa: BLE001 - Numba cannot compile it for this device: columns, said so
                reason = f"the direct depthwise kernel could not be compiled ({type(exc).__name__}: {exc})"
                warnings.warn(f"{reason}; depthwise convolutions run as columns and a batched matmul",
                              RuntimeWarning, stacklevel=2)
                return (self._columns(xp, x_shape, w_shape, y_shape, window, begins, ends, dtype, with_bias),
                        f"{self.reason}: {reason}")
        return self._columns(xp, x_shape, w_shape, y_shape, window, begins, ends, dtype, with_bias)

    @staticmethod
    def _depthwise(x_shape, w_shape, y_shape, window, begins, dtype, with_bias: bool) -> Make:
        from ..kernels.cuda_conv import depthwise_conv2d  # numba.cuda: imported by the plans that use it

        launch = depthwise_conv2d(x_shape, w_shape, y_shape, window.strides, window.dilations, begins, dtype)

        def fn(x, w, *rest):
            launch(x, w, rest[0] if with_bias else None, rest[-1])

        return fn

    def _columns(self, xp, x_shape, w_shape, y_shape, window, begins, ends, dtype, with_bias: bool) -> Make:
        """``fn(x, w, [bias,] out)`` computing in ``dtype`` (QLinearConv's: float64, exact on integers)."""
        n, c, *spatial = x_shape
        m, cg, *kernel = w_shape
        group = int(self.attrs.get("group", 1))
        out_spatial = tuple(y_shape[2:])
        mg, taps, positions = m // group, math.prod(kernel), math.prod(out_spatial)
        rank = len(spatial)
        direct = (all(k == 1 for k in kernel) and all(s == 1 for s in window.strides)
                  and not any(begins) and not any(ends))
        padded_shape = (n, c) + tuple(b + s + e for b, s, e in zip(begins, spatial, ends))
        inner = (slice(None), slice(None)) + tuple(slice(b, b + s) for b, s in zip(begins, spatial))
        as_strided = _strided(xp)

        def fn(x, w, *rest):
            out = rest[-1]
            if direct:
                cols = x.reshape(n, group, cg, positions)
            else:
                if any(begins) or any(ends):
                    p = xp.zeros(padded_shape, dtype)
                    p[inner] = x
                else:
                    p = x
                s = p.strides
                view = as_strided(p, (n, group, cg) + tuple(kernel) + out_spatial,
                                  (s[0], s[1] * cg, s[1])
                                  + tuple(s[2 + i] * window.dilations[i] for i in range(rank))
                                  + tuple(s[2 + i] * window.strides[i] for i in range(rank)))
                cols = view.reshape(n, group, cg * taps, positions)
            xp.matmul(w.reshape(group, mg, cg * taps), cols, out=out.reshape(n, group, mg, positions))
            if with_bias:
                xp.add(out, rest[0].reshape((1, m) + (1,) * rank), out=out)

        return fn


class ConvTransposeImpl(DeviceImpl):
    """N-D grouped transposed convolution: one batched product W^T X per (image, group), then per kernel tap a
    strided add into the uncropped output, cropped by the pads."""

    what = "transposed conv as a batched matmul and one strided add per tap"

    def make(self, ctx, xp, memory):
        x_shape, w_shape = ctx.in_shapes()[:2]
        (y_shape,) = ctx.out_shapes()[:1]
        n, c, *spatial = x_shape
        cw, mg, *kernel = w_shape
        group = int(self.attrs.get("group", 1))
        rank = len(spatial)
        try:
            window = make_window(self.attrs, tuple(kernel))
            padding, shape = transpose_attrs(self.attrs, rank)
            geometry = [transpose_axis(window, i, size, padding[i], shape[i]) for i, size in enumerate(spatial)]
        except ValueError as exc:
            raise NotNative(str(exc)) from None
        if c != cw or c % group or (n, mg * group, *[g[0] for g in geometry]) != tuple(y_shape):
            raise NotNative(f"ConvTranspose of X {list(x_shape)}, W {list(w_shape)} gives {list(y_shape)}")
        cg, m, taps, positions = c // group, mg * group, math.prod(kernel), math.prod(spatial)
        full = tuple(max(window.strides[i] * (s - 1) + window.extents[i], geometry[i][1] + geometry[i][0])
                     for i, s in enumerate(spatial))
        tap_slices = [tuple(slice(k[i] * window.dilations[i], k[i] * window.dilations[i]
                                  + window.strides[i] * (spatial[i] - 1) + 1, window.strides[i]) for i in range(rank))
                      for k in itertools.product(*(range(k) for k in kernel))]
        crop = (slice(None), slice(None)) + tuple(slice(b, b + o) for o, b in geometry)
        with_bias = len(ctx.inputs) > 2 and ctx.in_types[2] is not None
        dtype = ctx.out_dtype()

        def fn(x, w, *rest):
            out = rest[-1]
            wt = w.reshape(group, cg, mg * taps).transpose(0, 2, 1)
            cols = xp.matmul(wt, x.reshape(n, group, cg, positions)).reshape(n, m, taps, *spatial)
            acc = xp.zeros((n, m) + full, dtype)
            for t, sl in enumerate(tap_slices):
                target = acc[(slice(None), slice(None)) + sl]
                xp.add(target, cols[:, :, t], out=target)
            xp.copyto(out, acc[crop])
            if with_bias:
                xp.add(out, rest[0].reshape((1, m) + (1,) * rank), out=out)

        return fn


# ---------------------------------------------------------------------------- pooling
class PoolImpl(DeviceImpl):
    """N-D MaxPool / AveragePool: a strided window view of the padded input, reduced over the window's axes; an
    average divides by a per-position count computed once (pads counted or not, ceil_mode's overhang never)."""

    def __init__(self, attrs, node, options):
        super().__init__(attrs, node, options)
        self.reduce = "max" if node.op == "MaxPool" else "avg"
        self.reason = f"{self.reduce} pool over a window view"

    def make(self, ctx, xp, memory):
        x_shape = ctx.in_shapes()[0]
        (y_shape,) = ctx.out_shapes()[:1]
        n, c, *spatial = x_shape
        kernel = tuple(int(k) for k in self.attrs["kernel_shape"])
        window, begins, ends = spatial_window(self.attrs, kernel, tuple(spatial))
        out_spatial = tuple(y_shape[2:])
        rank = len(spatial)
        needed = [(o - 1) * window.strides[i] + (kernel[i] - 1) * window.dilations[i] + 1
                  for i, o in enumerate(out_spatial)]
        padded = tuple(max(b + s + e, nd) for b, s, e, nd in zip(begins, spatial, ends, needed))
        inner = tuple(slice(b, b + s) for b, s in zip(begins, spatial))
        dtype = ctx.out_dtype()
        if self.reduce == "max":
            fill = -np.inf if dtype.kind == "f" else np.iinfo(dtype).min
        elif dtype.kind != "f":
            raise NotNative(f"AveragePool of {dtype} runs the reference")
        else:
            fill = 0

        def windows(as_strided, p, lead):
            s = p.strides
            return as_strided(p, lead + out_spatial + kernel,
                              s[:len(lead)] + tuple(s[len(lead) + i] * window.strides[i] for i in range(rank))
                              + tuple(s[len(lead) + i] * window.dilations[i] for i in range(rank)))

        counts = None
        if self.reduce == "avg":   # the divisor per output position, on the host once
            counted = np.zeros(padded, np.float64)
            if self.attrs.get("count_include_pad", 0):
                counted[tuple(slice(0, b + s + e) for b, s, e in zip(begins, spatial, ends))] = 1
            else:
                counted[inner] = 1
            sums = windows(np.lib.stride_tricks.as_strided, counted, ()).sum(axis=tuple(range(rank, 2 * rank)))
            counts = memory.to_device(np.maximum(sums, 1).astype(dtype))
        axes = tuple(range(2 + rank, 2 + 2 * rank))
        as_strided = _strided(xp)
        pad = padded != tuple(spatial)

        def fn(x, out):
            if pad:
                p = xp.full((n, c) + padded, fill, dtype)
                p[(slice(None), slice(None)) + inner] = x
            else:
                p = x
            view = windows(as_strided, p, (n, c))
            if counts is None:
                xp.max(view, axis=axes, out=out)
            else:
                xp.sum(view, axis=axes, out=out)
                xp.divide(out, counts, out=out)

        return fn


class GlobalPoolImpl(DeviceImpl):
    what = "global pool"

    def make(self, ctx, xp, memory):
        rank = len(ctx.in_shapes()[0])
        axes = tuple(range(2, rank))
        reduce = xp.max if self.node.op.startswith("GlobalMax") else xp.mean

        def fn(x, out):
            reduce(x, axis=axes, keepdims=True, out=out)

        return fn


# ---------------------------------------------------------------------------- normalisations, reductions
class BatchNormImpl(DeviceImpl):
    """Inference BatchNormalization as ``x * a + b``, a and b per channel (computed once when the statistics
    are constants)."""

    what = "scale-shift"

    def make(self, ctx, xp, memory):
        if self.attrs.get("training_mode"):
            raise NotNative("training_mode BatchNormalization runs the reference")
        rank = len(ctx.in_shapes()[0])
        shape = (1, -1) + (1,) * (rank - 2)
        eps = float(self.attrs.get("epsilon", 1e-5))
        dtype = ctx.out_dtype()
        consts = [ctx.const(p) for p in range(1, 5)]
        fixed = None
        if all(v is not None for v in consts):
            scale, bias, mean, var = (np.asarray(v, np.float64) for v in consts)
            a = scale / np.sqrt(var + eps)
            fixed = (memory.to_device(a.astype(dtype).reshape(shape)),
                     memory.to_device((bias - mean * a).astype(dtype).reshape(shape)))

        def fn(x, scale, bias, mean, var, *outs):
            if fixed is None:
                a = scale / xp.sqrt(var + dtype.type(eps))
                mul, add = a.reshape(shape), (bias - mean * a).reshape(shape)
            else:
                mul, add = fixed
            xp.multiply(x, mul, out=outs[0])
            xp.add(outs[0], add, out=outs[0])

        return fn


def _batchnorm(attrs, node, options):
    if node.num_outputs != 1:
        raise NotNative("training outputs of BatchNormalization run the reference")
    return BatchNormImpl(attrs, node, options)


class SoftmaxImpl(DeviceImpl):
    what = "softmax"

    def make(self, ctx, xp, memory):
        axis = int(self.attrs.get("axis", -1))
        log = self.node.op == "LogSoftmax"

        def fn(x, out):
            xp.subtract(x, xp.max(x, axis=axis, keepdims=True), out=out)
            if log:
                xp.subtract(out, xp.log(xp.sum(xp.exp(out), axis=axis, keepdims=True)), out=out)
            else:
                xp.exp(out, out=out)
                xp.divide(out, xp.sum(out, axis=axis, keepdims=True), out=out)

        return fn


class LayerNormImpl(DeviceImpl):
    what = "layer norm"

    def make(self, ctx, xp, memory):
        rank = len(ctx.in_shapes()[0])
        axes = tuple(range(int(self.attrs.get("axis", -1)) % rank, rank))
        eps = ctx.out_dtype().type(float(self.attrs.get("epsilon", 1e-5)))

        def fn(x, scale, *rest):
            bias, out = (rest[0] if len(rest) > 1 else None), rest[-1]
            xp.subtract(x, xp.mean(x, axis=axes, keepdims=True), out=out)
            var = xp.mean(xp.square(out), axis=axes, keepdims=True)
            xp.multiply(out, 1 / xp.sqrt(var + eps), out=out)
            xp.multiply(out, scale, out=out)
            if bias is not None:
                xp.add(out, bias, out=out)

        return fn


_REDUCERS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod"}


class ReduceImpl(DeviceImpl):
    what = "reduction"

    def make(self, ctx, xp, memory):
        rank = len(ctx.in_shapes()[0])
        axes = _axes(ctx, self.attrs, 1, rank)
        keep = bool(self.attrs.get("keepdims", 1))
        op = _REDUCERS[self.node.op]
        if op == "mean" and ctx.out_dtype().kind != "f":
            raise NotNative("an integer ReduceMean runs the reference")
        if axes is None and self.attrs.get("noop_with_empty_axes", 0):
            return lambda x, *rest: xp.copyto(rest[-1], x)
        axes = tuple(range(rank)) if axes is None else axes
        reduce = getattr(xp, op)
        if len(axes) == rank:
            # NOTE: CuPy 14's min over every axis with keepdims into out= failed on an H100 (a NotImplemented
            # from equal(); max and the other axes passed): one element, so it is reduced then copied
            return lambda x, *rest: xp.copyto(rest[-1], reduce(x, axis=axes, keepdims=keep))

        def fn(x, *rest):
            reduce(x, axis=axes, keepdims=keep, out=rest[-1])

        return fn


# ---------------------------------------------------------------------------- data movement
class TransposeImpl(DeviceImpl):
    what = "transpose copy"

    def make(self, ctx, xp, memory):
        perm = tuple(int(p) for p in self.attrs["perm"]) if self.attrs.get("perm") else None
        return lambda x, out: xp.copyto(out, x.transpose(perm))


class ConcatImpl(DeviceImpl):
    what = "concatenate"

    def make(self, ctx, xp, memory):
        axis = int(self.attrs["axis"])

        def fn(*arrays):
            xp.concatenate(arrays[:-1], axis=axis, out=arrays[-1])

        return fn


class GatherImpl(DeviceImpl):
    what = "take"

    def make(self, ctx, xp, memory):
        axis = int(self.attrs.get("axis", 0))
        return lambda x, idx, out: xp.take(x, idx, axis=axis, out=out)


class SliceImpl(DeviceImpl):
    what = "slice copy"

    def make(self, ctx, xp, memory):
        rank = len(ctx.in_shapes()[0])
        if "starts" in self.attrs and self.attrs["starts"] is not None:   # opset < 10: attributes
            starts, ends = self.attrs["starts"], self.attrs["ends"]
            axes = self.attrs.get("axes") or range(len(starts))
            steps = [1] * len(starts)
        else:
            starts = ctx.require_const(1, "starts").reshape(-1)
            ends = ctx.require_const(2, "ends").reshape(-1)
            axes = ctx.const(3) if len(ctx.inputs) > 3 and ctx.in_types[3] is not None else range(len(starts))
            steps = ctx.const(4) if len(ctx.inputs) > 4 and ctx.in_types[4] is not None else [1] * len(starts)
            if axes is None or steps is None:
                raise NotNative("axes or steps of Slice are not constants")
        index = [slice(None)] * rank
        for s, e, a, st in zip(starts, ends, np.asarray(axes).reshape(-1), np.asarray(steps).reshape(-1)):
            index[int(a) % rank] = slice(int(s), int(e), int(st))
        index = tuple(index)

        def fn(x, *rest):
            xp.copyto(rest[-1], x[index])

        return fn


class SplitImpl(DeviceImpl):
    what = "split copies"

    def make(self, ctx, xp, memory):
        rank = len(ctx.in_shapes()[0])
        axis = int(self.attrs.get("axis", 0)) % rank
        index, at = [], 0
        for shape in ctx.out_shapes():
            index.append((slice(None),) * axis + (slice(at, at + shape[axis]),))
            at += shape[axis]
        outputs = len(index)

        def fn(*arrays):
            x = arrays[0]
            for k, out in enumerate(arrays[-outputs:]):
                xp.copyto(out, x[index[k]])

        return fn


class ExpandImpl(DeviceImpl):
    what = "broadcast copy"

    def make(self, ctx, xp, memory):
        return lambda x, shape, out: xp.copyto(out, xp.broadcast_to(x, out.shape))


class TileImpl(DeviceImpl):
    what = "tile"

    def make(self, ctx, xp, memory):
        reps = tuple(o // max(i, 1) for o, i in zip(ctx.out_shapes()[0], ctx.in_shapes()[0]))
        return lambda x, repeats, out: xp.copyto(out, xp.tile(x, reps))


class PadImpl(DeviceImpl):
    what = "pad"

    def make(self, ctx, xp, memory):
        rank = len(ctx.in_shapes()[0])
        mode = self.attrs.get("mode", "constant")
        if isinstance(mode, bytes):
            mode = mode.decode()
        pads = self.attrs.get("pads")
        if pads is None:
            pads = ctx.require_const(1, "pads").reshape(-1)
        value = self.attrs.get("value", 0.0)
        if len(ctx.inputs) > 2 and ctx.in_types[2] is not None:
            found = ctx.require_const(2, "constant_value")
            value = found.reshape(-1)[0] if found.size else 0
        axes = _axes(ctx, {}, 3, rank) or tuple(range(rank))
        width = [(0, 0)] * rank
        for k, a in enumerate(axes):
            width[a] = (int(pads[k]), int(pads[k + len(axes)]))
        if any(b < 0 or e < 0 for b, e in width) or mode not in ("constant", "reflect", "edge", "wrap"):
            raise NotNative(f"Pad of mode {mode} with pads {list(pads)} runs the reference")
        kwargs = {"constant_values": value} if mode == "constant" else {}

        def fn(x, *rest):
            xp.copyto(rest[-1], xp.pad(x, width, mode=mode, **kwargs))

        return fn


class TriluImpl(DeviceImpl):
    what = "triangle"

    def make(self, ctx, xp, memory):
        k = 0
        if len(ctx.inputs) > 1 and ctx.in_types[1] is not None:
            k = int(ctx.require_const(1, "k").reshape(-1)[0])
        keep = xp.triu if self.attrs.get("upper", 1) else xp.tril

        def fn(x, *rest):
            xp.copyto(rest[-1], keep(x, k))

        return fn


#: dtypes a cast converts on the device: the real ones CuPy holds (float8 and the other ml_dtypes, and complex
#: values, run the reference)
_CAST_DTYPES = DEVICE_DTYPES - {"complex64", "complex128"}


class CastImpl(DeviceImpl):
    what = "cast"

    def make(self, ctx, xp, memory):
        dtypes = {t.dtype for t in ctx.in_types + ctx.out_types}
        if not dtypes <= _CAST_DTYPES:
            raise NotNative(f"Cast between {' and '.join(sorted(dtypes))} runs the reference")
        return lambda x, out: xp.copyto(out, x, casting="unsafe")


class WhereImpl(DeviceImpl):
    what = "where"

    def make(self, ctx, xp, memory):
        return lambda c, a, b, out: xp.copyto(out, xp.where(c, a, b))


class IndexMapImpl(DeviceImpl):
    """An op whose output elements are copies of input elements (nearest Resize, DepthToSpace, SpaceToDepth):
    the source of every output element is found once, by running the op's reference on the input's flat
    indices, and each run is one gather."""

    what = "gather through an index map"

    def make(self, ctx, xp, memory):
        x_shape = ctx.in_shapes()[0]
        size = math.prod(x_shape)
        if size >= 1 << 52:
            raise NotNative("too large for an index map")
        if self.attrs.get("mode", "nearest") not in ("nearest", b"nearest", "DCR", "CRD", b"DCR", b"CRD"):
            raise NotNative(f"{self.node.op} of mode {self.attrs.get('mode')} runs the reference")
        others = []
        for port in range(1, len(ctx.inputs)):
            if ctx.in_types[port] is None:
                others.append(None)
            else:
                others.append(ctx.require_const(port, f"input {port}"))
        source = np.arange(size, dtype=np.float64).reshape(x_shape)
        (found,) = ctx.run_node(ctx.node, [source, *others])[:1]
        found = np.asarray(found)
        if found.shape != tuple(ctx.out_shapes()[0]) or not np.array_equal(found, np.round(found)):
            raise NotNative(f"{self.node.op} does not copy input elements here")
        index = memory.to_device(found.astype(np.int64).reshape(-1))

        def fn(x, *rest):
            xp.take(x.reshape(-1), index, out=rest[-1].reshape(-1))

        return fn


class ResizeImpl(DeviceImpl):
    """Linear and cubic Resize (antialiased too): resizing is separable, so each resized axis is one product
    with a matrix of the registry's taps and weights (``tlc.ops.resize``), built once."""

    what = "resize as one matrix product per resized axis"

    def make(self, ctx, xp, memory):
        shape = ctx.in_shapes()[0]
        dtype = ctx.out_dtype()
        if dtype.kind != "f":
            raise NotNative(f"Resize of {dtype} rounds in float64: the reference")
        given = [None if port >= len(ctx.inputs) or ctx.in_types[port] is None
                 else ctx.require_const(port, name) for port, name in ((1, "roi"), (2, "scales"), (3, "sizes"))]
        a = self.attrs
        try:
            _, passes = resize_ops.axis_passes(shape, a["axes"], *given, a["keep_aspect_ratio_policy"])
        except ValueError as exc:
            raise NotNative(str(exc)) from None
        mats = []
        for axis, out_len, scale, bounds in passes:
            x, outside = resize_ops.source_coords(a["coordinate_transformation_mode"], out_len, shape[axis], scale,
                                                  bounds)
            if outside is not None and outside.any():
                raise NotNative("tf_crop_and_resize extrapolates here: the reference")
            idx, weights = resize_ops.taps(x, shape[axis], scale, a)
            matrix = np.zeros((out_len, shape[axis]))
            np.add.at(matrix, (np.repeat(np.arange(out_len), idx.shape[1]), idx.reshape(-1)), weights.reshape(-1))
            mats.append((axis, memory.to_device(np.ascontiguousarray(matrix.T, dtype))))

        def fn(x, *rest):
            y = x
            for axis, transposed in mats:
                y = xp.moveaxis(xp.matmul(xp.moveaxis(y, axis, -1), transposed), -1, axis)
            xp.copyto(rest[-1], y)

        return fn


def _resize(attrs, node, options):
    if node.num_outputs != 1:
        raise NotNative(f"{node.num_outputs} outputs")
    mode = attrs.get("mode", "nearest")
    return (IndexMapImpl if mode in ("nearest", b"nearest") else ResizeImpl)(attrs, node, options)


class RecurrentImpl(DeviceImpl):
    """RNN, GRU and LSTM on the device with the registry's own cells (``tlc.ops.recurrent``: the step functions
    and activations are written in numpy's API, so they take CuPy arrays): the whole sequence projected through
    W in one product per direction, then one step a time step. Every sequence runs its full length: a
    ``sequence_lens`` input that is not the constant full length runs the reference on the host."""

    what = "one projection product, then the registry's cell a step"

    def make(self, ctx, xp, memory):
        (rec,) = [r for r in recurrent_ops.RECURRENCES if r.name == self.node.op]
        attrs = self.attrs
        dtype = ctx.out_dtype()
        if dtype.name not in ("float32", "float64"):
            raise NotNative(f"{rec.name} of {dtype} runs the reference (which computes float16 in float32)")
        try:
            directions, acts = recurrent_ops.settings(attrs, rec)
        except ValueError as exc:
            raise NotNative(str(exc)) from None
        x_shape, _, r_shape = ctx.in_shapes()[:3]
        batch_first = attrs["layout"] == 1
        seq, batch = (x_shape[1], x_shape[0]) if batch_first else (x_shape[0], x_shape[1])
        hidden = r_shape[2]
        if attrs["hidden_size"] not in (None, hidden) or 0 in (seq, batch, hidden):
            raise NotNative(f"X {list(x_shape)}, R {list(r_shape)}: the reference")
        if len(ctx.inputs) > 4 and ctx.in_types[4] is not None:
            lens = ctx.const(4)
            if lens is None or not np.all(np.asarray(lens) == seq):
                raise NotNative("sequence_lens that are not the constant full length: the reference")
        gh, n_in = rec.gates * hidden, len(ctx.inputs)
        reverse = [attrs["direction"] == "reverse" or d == 1 for d in range(directions)]

        def fn(*arrays):
            x, w, r = arrays[:3]
            opt = list(arrays[3:n_in]) + [None] * (8 - n_in)
            b, h0, c0, p = opt[0], opt[2], opt[3], opt[4]
            outs = arrays[n_in:]
            if batch_first:
                x = x.transpose(1, 0, 2)
            initial = [h0, c0][:rec.states]
            if batch_first:
                initial = [None if v is None else v.transpose(1, 0, 2) for v in initial]
            y = xp.empty((seq, directions, batch, hidden), dtype)
            finals = [xp.empty((directions, batch, hidden), dtype) for _ in range(rec.states)]
            flat = x.reshape(seq * batch, -1)
            for d in range(directions):
                xw = xp.matmul(flat, w[d].T).reshape(seq, batch, gh)
                if b is not None:
                    xw += b[d, :gh]
                    rb = b[d, gh:]
                else:
                    rb = xp.zeros(gh, dtype)
                state = tuple(xp.zeros((batch, hidden), dtype) if v is None else v[d] for v in initial)
                for step in range(seq):
                    t = seq - 1 - step if reverse[d] else step
                    state = rec.step(xw[t], state, r[d], rb, None if p is None else p[d], acts[d], attrs)
                    y[t, d] = state[0]
                for final, value in zip(finals, state):
                    final[d] = value
            results = [y.transpose(2, 0, 1, 3) if batch_first else y]
            results += [f.transpose(1, 0, 2) if batch_first else f for f in finals]
            for out, value in zip(outs, results):
                if out is not None:
                    xp.copyto(out, value)

        return fn


# ---------------------------------------------------------------------------- quantized arithmetic
def _integer_output(dtype: np.dtype) -> tuple[int, int]:
    """The range of a quantized integer type CuPy holds (8 and 16 bits; int4, int2 and the float8 types: the
    reference)."""
    if dtype.name not in quant_ops.INTEGER_RANGES or dtype.name not in _CAST_DTYPES:
        raise NotNative(f"a quantized {dtype} (not an 8- or 16-bit integer type) runs the reference")
    return quant_ops.INTEGER_RANGES[dtype.name]


def _requantize(xp, real, y_scale, y_zero, lo: int, hi: int, out) -> None:
    """``out`` = saturate(rint(real / y_scale) + y_zero), in float64 as the registry's reference computes it."""
    q = xp.rint(real / y_scale.astype(np.float64))
    if y_zero is not None:
        q += y_zero.astype(np.float64)
    xp.copyto(out, xp.clip(q, lo, hi), casting="unsafe")


def _param(p, shape: tuple[int, ...], axis: int):
    """A per-tensor or per-axis scale or zero point shaped to broadcast against ``shape``."""
    if p.size == 1:
        return p.reshape(())
    return p.reshape([-1 if i == axis % len(shape) else 1 for i in range(len(shape))])


class QuantizeImpl(DeviceImpl):
    """QuantizeLinear to an integer type, per tensor or per axis: x / scale in the reference's division type,
    rounded to nearest even, the zero point added, saturated."""

    what = "quantize"

    def make(self, ctx, xp, memory):
        a = self.attrs
        lo, hi = _integer_output(ctx.out_dtype())
        if a.get("block_size") or a.get("precision"):
            raise NotNative("blocked or precision-set QuantizeLinear runs the reference")
        if ctx.in_types[1].dtype not in ("float32", "float16"):
            raise NotNative(f"a {ctx.in_types[1].dtype} scale runs the reference")
        shape, axis = tuple(ctx.in_shapes()[0]), int(a.get("axis", 1))
        division = np.dtype(ctx.in_types[1].dtype)

        def fn(x, scale, *rest):
            zero, out = (rest[0] if len(rest) > 1 else None), rest[-1]
            q = xp.rint(x.astype(division) / _param(scale, shape, axis).astype(division))
            if zero is not None:
                q = q.astype(np.int64) + _param(zero, shape, axis).astype(np.int64)
            xp.copyto(out, xp.clip(q, lo, hi), casting="unsafe")

        return fn


class DequantizeImpl(DeviceImpl):
    """DequantizeLinear of an integer type, per tensor or per axis: (x - zero) * scale in the output type."""

    what = "dequantize"

    def make(self, ctx, xp, memory):
        a = self.attrs
        _integer_output(np.dtype(ctx.in_types[0].dtype))
        if a.get("block_size"):
            raise NotNative("blocked DequantizeLinear runs the reference")
        out_dtype = ctx.out_dtype()
        if out_dtype.name not in ("float32", "float16", "float64") or ctx.in_types[1].dtype not in (
                "float32", "float16", "float64"):
            raise NotNative(f"DequantizeLinear to {out_dtype} runs the reference")
        shape, axis = tuple(ctx.in_shapes()[0]), int(a.get("axis", 1))

        def fn(x, scale, *rest):
            zero, out = (rest[0] if len(rest) > 1 else None), rest[-1]
            v = x.astype(np.int64)
            if zero is not None:
                v = v - _param(zero, shape, axis).astype(np.int64)
            xp.multiply(v.astype(out_dtype), _param(scale, shape, axis).astype(out_dtype), out=out)

        return fn


class QLinearMatMulImpl(DeviceImpl):
    """QLinearMatMul: the exact integer product as a float64 product of the centred operands (exact below 2^53),
    scaled and requantized in float64 as the reference does."""

    what = "quantized matmul (float64 product of integers)"

    def make(self, ctx, xp, memory):
        lo, hi = _integer_output(ctx.out_dtype())
        a_shape = ctx.in_shapes()[0]

        def row(p):   # A's per-row parameter
            return p.reshape(-1, 1) if p.ndim == 1 and p.size > 1 and len(a_shape) >= 2 else p

        def fn(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero, out):
            ac = a.astype(np.float64) - row(a_zero).astype(np.float64)
            bc = b.astype(np.float64) - b_zero.astype(np.float64)
            real = xp.matmul(ac, bc) * row(a_scale).astype(np.float64) * b_scale.astype(np.float64)
            _requantize(xp, real.reshape(out.shape), y_scale, y_zero, lo, hi, out)

        return fn


class QLinearConvImpl(ConvImpl):
    """QLinearConv: the convolution's columns and batched product in float64 on the centred integers (exact),
    plus the int32 bias, scaled and requantized in float64 as the reference does."""

    what = "quantized conv (float64 columns and product of integers)"

    def make(self, ctx, xp, memory):
        lo, hi = _integer_output(ctx.out_dtype())
        x_shape, w_shape = ctx.in_shapes()[0], ctx.in_shapes()[3]
        (y_shape,) = ctx.out_shapes()[:1]
        spatial = tuple(x_shape[2:])
        window, begins, ends = spatial_window(self.attrs, tuple(w_shape[2:]), spatial)
        conv = self._columns(xp, x_shape, w_shape, y_shape, window, begins, ends, np.dtype(np.float64), False)
        channel = (1, -1) + (1,) * len(spatial)
        with_bias = len(ctx.inputs) > 8 and ctx.in_types[8] is not None

        def fn(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, *rest):
            out = rest[-1]
            xc = x.astype(np.float64) - x_zero.reshape(()).astype(np.float64)
            wz = w_zero.reshape(()) if w_zero.size == 1 else w_zero.reshape((-1,) + (1,) * (len(w_shape) - 1))
            wc = w.astype(np.float64) - wz.astype(np.float64)
            acc = xp.empty(tuple(y_shape), np.float64)
            conv(xc, wc, acc)
            if with_bias:
                acc += rest[0].astype(np.float64).reshape(channel)
            ws = w_scale.astype(np.float64)
            ws = ws.reshape(()) if ws.size == 1 else ws.reshape(channel)
            _requantize(xp, acc * (x_scale.astype(np.float64).reshape(()) * ws), y_scale.reshape(()),
                        y_zero.reshape(()), lo, hi, out)

        return fn


# ---------------------------------------------------------------------------- generated kernels
class ElementwiseImpl(native.ElementwiseImpl):
    """A lone elementwise op in the target's dtypes: a one-op generated CUDA kernel; in other dtypes (integer
    arithmetic) the reference on the host."""

    def bind(self, ctx: BindContext) -> Bound:
        dtypes = {t.dtype for t in ctx.in_types + ctx.out_types if t is not None}
        if not dtypes <= ctx.options.target.internal_dtypes:
            raise NotNative(f"no CUDA kernel for {ctx.node.op} of {', '.join(sorted(dtypes))}")
        return super().bind(ctx)


def _kernel_or(cls: type[DeviceImpl]) -> Factory:
    """A generated kernel where the op's dtypes are the target's, else ``cls`` (Where and Cast of integers)."""
    def factory(attrs, node, options):
        return _Either(cls(attrs, node, options))

    return factory


class _Either(StepImpl):
    mode = "native"

    def __init__(self, other: DeviceImpl):
        self.other = other
        self.reason = f"generated elementwise kernel, or {other.reason}"

    def bind(self, ctx: BindContext) -> Bound:
        try:
            return ElementwiseImpl().bind(ctx)
        except NotNative:
            return self.other.bind(ctx)


class EpilogueImpl(native.EpilogueImpl):
    """A contraction group: the product or convolution (this table's implementation of its head) written into
    the output's buffer, then the group's elementwise rest (the bias, activations, a residual add) as one
    generated kernel over it, in place: one pass over the output after the product."""

    reason = "product, then one epilogue kernel in place"

    def accepts_strided(self, port: int) -> bool:
        return False

    def bind(self, ctx: BindContext) -> Bound:
        elementwise, ew_types = self.typed_epilogue(ctx)
        make_head = CUDA_OPS.get(self.head.qualified_op)
        if make_head is None or self.head.qualified_op == f"{TLC_DOMAIN}.Fused":
            raise NotNative(f"no device contraction for {self.head.qualified_op}")
        if not ctx.options.jit_enabled:
            return Bound(fallback_calls(ctx), mode="reference", note="jit='off'")
        memory = memory_of(ctx.options.target)
        sub = native.contraction_context(ctx, self.c_sources)
        acc_type = sub.out_types[0] = ew_types[0]
        out0 = ctx.out_types[0]
        in_place = (len(ctx.outputs) == 1 and tuple(out0.shape) == tuple(acc_type.shape)
                    and out0.dtype == acc_type.dtype)
        scratch = native.Scratch()
        acc = (V(ctx.outputs[0]), F(ctx.outputs[0])) if in_place else native.scratch_pair(scratch, acc_type)
        head = make_head(self.head_attrs, self.head, ctx.options)
        made = head.make(sub, memory.xp, memory)
        head_fn, head_note = made if isinstance(made, tuple) else (made, head.reason)
        head_args = tuple(None if s is None else V(ctx.inputs[s[1]]) if s[0] == "in"
                          else memory.to_device(np.ascontiguousarray(s[1])) for s in self.c_sources)
        head_call = Call(head_fn, head_args + (acc[0],))
        copies, ew_refs = native.flat_inputs(ctx, self.ew_sources, scratch)
        out_refs = [F(o) for o in ctx.outputs]
        alias = (0 if in_place else -1,) + (-1,) * (len(out_refs) - 1)
        ew = native.kernel_request(ctx, elementwise, "elementwise", ew_types, [acc[1]] + ew_refs, out_refs,
                                   "epilogue kernel", fixed_alias=alias)
        request = KernelRequest("epilogue", ew.build,
                                       lambda kernel, _: [head_call] + copies + ew.calls(kernel, None))
        return Bound(fallback_calls(ctx), mode="native", note=f"{head_note} + epilogue kernel",
                     workspace=scratch.shapes, request=request)


def _fused(attrs: dict[str, Any], node: Node, options: CompileOptions) -> StepImpl:
    if attrs["kind"] not in options.target.group_kinds:
        raise NotNative(f"the cuda target does not run {attrs['kind']} groups")
    if attrs["kind"] == "epilogue":
        return EpilogueImpl(attrs["body"])
    return native.FusedImpl(attrs["body"], attrs["kind"])


_view = _single(lambda attrs, node, options: ViewImpl())

#: qualified op name -> factory(resolved attrs, node, options) -> StepImpl (the CUDA target's op table)
CUDA_OPS: dict[str, Factory] = {
    f"{TLC_DOMAIN}.Fused": _fused,
    ELEMENTWISE: lambda attrs, node, options: ElementwiseImpl(),
    "MatMul": _single(MatMulImpl),
    "Gemm": _single(GemmImpl),
    "Conv": _single(ConvImpl),
    "ConvTranspose": _single(ConvTransposeImpl),
    "MaxPool": _single(PoolImpl),
    "AveragePool": _single(PoolImpl),
    "GlobalAveragePool": _single(GlobalPoolImpl),
    "GlobalMaxPool": _single(GlobalPoolImpl),
    "BatchNormalization": _batchnorm,
    "Softmax": _single(SoftmaxImpl),
    "LogSoftmax": _single(SoftmaxImpl),
    "LayerNormalization": _single(LayerNormImpl),
    **{op: _single(ReduceImpl) for op in _REDUCERS},
    "Transpose": _single(TransposeImpl),
    "Concat": _single(ConcatImpl),
    "Gather": _single(GatherImpl),
    "Slice": _single(SliceImpl),
    "Split": lambda attrs, node, options: SplitImpl(attrs, node, options),
    "Expand": _single(ExpandImpl),
    "Tile": _single(TileImpl),
    "Pad": _single(PadImpl),
    "Trilu": _single(TriluImpl),
    "Cast": _kernel_or(CastImpl),
    "Where": _kernel_or(WhereImpl),
    "Resize": _resize,
    "RNN": RecurrentImpl, "GRU": RecurrentImpl, "LSTM": RecurrentImpl,
    "If": IfImpl, "Loop": LoopImpl, "Scan": ScanImpl,
    "QuantizeLinear": _single(QuantizeImpl), "DequantizeLinear": _single(DequantizeImpl),
    "QLinearMatMul": _single(QLinearMatMulImpl), "QLinearConv": _single(QLinearConvImpl),
    "Upsample": _single(IndexMapImpl),
    "DepthToSpace": _single(IndexMapImpl),
    "SpaceToDepth": _single(IndexMapImpl),
    "Reshape": _view, "Flatten": _view, "Squeeze": _view, "Unsqueeze": _view, "Identity": _view,
}
