"""Quantized products on the CPU: MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv as integer products
(``tlc.kernels.qgemm``) with the weight's zero point subtracted once, at bind time.

Where the host has AVX-512 VNNI (``tlc.kernels.qpanel``) the product runs on int8 ``vpdpbusd`` with the weight
packed once for it and the zero points as a column term (the kernel's start) and, where the weight's zero point
does not fit the signed bytes, a row term; else, and for requantized sums that could pass 2^31, on exact float32
BLAS chunks. A depthwise conv (one input channel a group) runs on ``tlc.kernels.qdw``'s direct int32 kernel.
``plan.stats()`` says which, and why not VNNI.

What runs natively: a constant weight (B of a MatMul, 2-D; W of a 2-D Conv), uint8/int8 operands, a per-tensor
activation zero point and scale, a per-tensor or per-output-channel (per-column for a MatMul) weight zero point
and scale, a per-tensor output scale and zero point, and constant scales and zero points. Anything else (a
runtime weight, float8, per-row A parameters, 1-D or 3-D convolutions, the JIT off) runs the op's reference,
with the reason in ``plan.stats()``.

QuantizeLinear and DequantizeLinear run natively (``LinearQuantizerImpl``) between float32 and uint8/int8 with
constant scales and zero points per tensor or per axis; other types (int16, int4, float8), blocked parameters and
runtime ones run the reference, with the reason in ``plan.stats()``.

The table entries (``CPU_OPS``) are meant for ``tlc.runtime.ops.CPU_OPS``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..ir.graph import Node
from ..kernels import gemm
from .bound import Bound, Call, KernelRequest, NotNative, V, W
from .impl import BindContext, StepImpl, fallback_calls, spatial_window
from .options import CompileOptions


class Ports(NamedTuple):
    """Where each operand of a quantized product is among its node's inputs (-1: the op has none)."""

    x: int
    x_scale: int
    x_zero: int
    w: int
    w_scale: int
    w_zero: int
    y_scale: int
    y_zero: int
    bias: int
    conv: bool


PORTS = {
    "MatMulInteger": Ports(0, -1, 2, 1, -1, 3, -1, -1, -1, False),
    "QLinearMatMul": Ports(0, 1, 2, 3, 4, 5, 6, 7, -1, False),
    "ConvInteger": Ports(0, -1, 2, 1, -1, 3, -1, -1, -1, True),
    "QLinearConv": Ports(0, 1, 2, 3, 4, 5, 6, 7, 8, True),
}
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
#: multiply-adds a VNNI product needs before it runs in parts (~50 us on one core): the VNNI convs of the
#: QDQ conv net run at 36-47 GMAC/s in the model (its 3 -> 16 3x3 at batch 8, 3.5M MACs, 97 us; a 1x1 32 -> 64,
#: 4.2M, 90 us), not the ~100 of a long product, so 8M left them on one thread of two: the net at batch 8 and 2
#: threads 0.52 -> 0.40 ms (medians in one process, alternated), onnxruntime ~0.42-0.46. A 1M-MAC product (its
#: 16 -> 32 3x3 s2 at batch 1) stays whole. (A part whose worker waits for a CPU another process holds ran 2.5
#: ms a call; the contention check now runs such parts in turn: ``threads.Placement``.)
VNNI_PARALLEL_MIN_MACS = 1 << 21
#: ... and a depthwise conv on ``tlc.kernels.qdw`` (int32 taps, ~6 GMAC/s: the net's 32-channel 3x3 at 16x16,
#: batch 8, 0.6M MACs, 105 us)
QDW_PARALLEL_MIN_MACS = 1 << 18


def _present(ctx: BindContext, port: int) -> bool:
    return 0 <= port < len(ctx.inputs) and ctx.in_types[port] is not None


def _const(ctx: BindContext, port: int, what: str) -> np.ndarray | None:
    """Input ``port`` as a constant array, None when the op has no such input or it is absent."""
    return ctx.require_const(port, what) if _present(ctx, port) else None


def _scalar(array: np.ndarray | None, what: str, default: float = 0.0) -> float:
    if array is None:
        return default
    if array.size != 1:
        raise NotNative(f"{what} has {array.size} values; only a per-tensor {what} is native")
    return float(array.reshape(()))


def _per_channel(array: np.ndarray | None, channels: int, what: str) -> np.ndarray:
    """A weight parameter as a vector over the output channels (one value repeated for a per-tensor one)."""
    if array is None:
        return np.zeros(channels)
    flat = array.reshape(-1)
    if flat.size not in (1, channels):
        raise NotNative(f"{what} has {flat.size} values for {channels} output channels")
    return np.broadcast_to(flat, (channels,))


class QuantizedProductImpl(StepImpl):
    """One quantized product (see the module docstring)."""

    mode = "native"
    reason = "integer product: VNNI int8 kernel or exact float32 BLAS chunks, int32 wrap or requantization"

    def __init__(self, op: str, attrs: dict[str, Any]):
        self.op = op
        self.ports = PORTS[op]
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        from ..kernels import qdw, qgemm  # NOTE: on first use (qgemm builds the VNNI kernel)
        if not ctx.options.jit_enabled:
            raise NotNative("the JIT is off (the product is a compiled kernel)")
        ports = self.ports
        shapes = ctx.in_shapes()
        (y,) = ctx.out_shapes()
        x_dtype, out_dtype = np.dtype(ctx.in_types[ports.x].dtype), ctx.out_dtype()
        w = ctx.require_const(ports.w, "the weight")
        if x_dtype not in BYTES or w.dtype not in BYTES:
            raise NotNative(f"{x_dtype} x {w.dtype} is not native (uint8/int8 only)")
        if not ctx.contiguous(ports.x):
            raise NotNative("a strided input")
        if 0 in shapes[ports.x] or 0 in w.shape or 0 in y:
            raise NotNative("an empty operand")
        x_zero = int(_scalar(_const(ctx, ports.x_zero, "x_zero_point"), "x_zero_point"))
        if ports.conv:
            geo_args, weight, macs = self._conv(ctx, shapes[ports.x], w, y)
        else:
            geo_args, weight, macs = self._matmul(shapes[ports.x], w, y)
        channels = weight.shape[0] * weight.shape[1]
        w_zero = _per_channel(_const(ctx, ports.w_zero, "w_zero_point"), channels, "w_zero_point")
        centered = weight.astype(np.int64) - w_zero.astype(np.int64).reshape(weight.shape[:2] + (1,))
        a_bound, w_bound = qgemm.centered_bound(x_dtype, x_zero), int(np.abs(centered).max())
        requant = out_dtype != np.int32
        s1, s2, y_scale, y_zero, lo, hi, bias = self._epilogue(ctx, channels, requant)
        nparts = gemm.parts_for(macs, ctx.threads)
        epilogue = (bias, s1, s2, y_scale, y_zero, lo, hi)
        if ports.conv and geo_args[2] == 1:
            taps = int(np.prod(geo_args[6]))
            if qdw.exact(taps, a_bound, w_bound, requant):
                nparts = ctx.threads if ctx.threads > 1 and macs >= QDW_PARALLEL_MIN_MACS else 1
                return self._bind_depthwise(ctx, geo_args, centered, x_dtype, x_zero, out_dtype, epilogue, nparts)
        vnni = self._vnni_refusal(weight, a_bound, w_bound, requant)
        if not vnni:
            nparts = ctx.threads if ctx.threads > 1 and macs >= VNNI_PARALLEL_MIN_MACS else 1
            return self._bind_vnni(ctx, geo_args, weight, w_zero, x_dtype, x_zero, out_dtype, epilogue, nparts)
        kc = qgemm.chunk_depth(a_bound, w_bound)
        geo = qgemm.geometry(*geo_args, signed=x_dtype == np.int8, x_zero=x_zero, kc=kc,
                             mode=qgemm.MODE_REQUANT if requant else qgemm.MODE_INT32,
                             per_channel=s2.size > 1, nparts=nparts)
        cols, prods = qgemm.scratch_sizes(geo, nparts)
        work = [((nparts, cols), np.dtype(np.float32)), ((nparts, prods), np.dtype(np.float32)),
                ((nparts, prods), np.dtype(np.float64))]
        args = (V(ctx.inputs[ports.x]), np.ascontiguousarray(centered, np.float32), V(ctx.outputs[0]), geo, bias,
                s1, s2, y_scale, y_zero, lo, hi, W(0), W(1), W(2), nparts)
        native = [Call(qgemm.run, args)]
        note = (f"integer product, float32 BLAS in depth chunks of {kc}, {nparts} part(s), "
                f"{int(geo[qgemm.G_SLABS])} slab(s) ({vnni})")
        return Bound(fallback_calls(ctx), mode="native", workspace=work, blas=True, note=note,
                     request=KernelRequest("qgemm", lambda alias: qgemm.compile_for(out_dtype, nparts),
                                           lambda kern, alias: native))

    def _bind_depthwise(self, ctx: BindContext, geo_args: tuple, centered: np.ndarray, x_dtype: np.dtype,
                        x_zero: int, out_dtype: np.dtype, epilogue: tuple, nparts: int) -> Bound:
        """A conv with one input channel a group on ``tlc.kernels.qdw``: int32 taps over a centered plane, in
        parts over (image, channel) items when the plan has threads."""
        from ..kernels import qdw, qgemm  # NOTE: on first use (qgemm builds the VNNI kernel)
        requant = out_dtype != np.int32
        bias, s1, s2, y_scale, y_zero, lo, hi = epilogue
        n, channels = geo_args[0], geo_args[1] * geo_args[3]
        items = max(1, n * channels)
        nparts = min(nparts, items)
        geo = qgemm.geometry(*geo_args, signed=x_dtype == np.int8, x_zero=x_zero, kc=0,
                             mode=qgemm.MODE_REQUANT if requant else qgemm.MODE_INT32, per_channel=s2.size > 1,
                             nparts=nparts)
        wc = np.ascontiguousarray(centered.reshape(channels, -1), np.int32)
        size = qdw.scratch_size(geo)
        work = [((nparts, 2 * size), np.dtype(np.int32))]
        args = (V(ctx.inputs[self.ports.x]), wc, V(ctx.outputs[0]), geo, bias, s1, s2, y_scale, y_zero, lo, hi,
                W(0), nparts)
        native = [Call(qdw.run, args)]
        note = f"integer product, depthwise int32 kernel, {nparts} part(s)"
        return Bound(fallback_calls(ctx), mode="native", workspace=work, note=note,
                     request=KernelRequest("qdw", lambda alias: qdw.compile_for(out_dtype, nparts),
                                           lambda kern, alias: native))

    def _vnni_refusal(self, weight: np.ndarray, a_bound: int, w_bound: int, requant: bool) -> str:
        """Why the product stays off the VNNI kernel ("" when it runs there)."""
        from ..kernels import qgemm, qpanel  # NOTE: on first use (qgemm builds the VNNI kernel)
        if not qpanel.available():
            return qpanel.REASON
        if weight.shape[1] == 1 and weight.shape[2] <= 9:
            return "no VNNI: a depthwise conv (one output channel a group)"
        if not qgemm.vnni_exact(weight.shape[2], a_bound, w_bound, requant):
            return f"no VNNI: int32 sums of depth {weight.shape[2]} could pass 2^31 before requantization"
        return ""

    def _bind_vnni(self, ctx: BindContext, geo_args: tuple, weight: np.ndarray, w_zero: np.ndarray,
                   x_dtype: np.dtype, x_zero: int, out_dtype: np.dtype, epilogue: tuple, nparts: int) -> Bound:
        """The product on ``tlc.kernels.qpanel``: a conv transposed (C = W' A^T over phase planes of its input,
        ``qgemm.trun``) unless its weight needs a row term; the rest row-major (``_row_major``)."""
        from ..kernels import qgemm  # NOTE: on first use (qgemm builds the VNNI kernel)
        taps = int(np.prod(geo_args[6]))
        requant = out_dtype != np.int32
        bias, s1, s2, y_scale, y_zero, lo, hi = epilogue
        channels = weight.shape[0] * weight.shape[1]   # the VNNI epilogue reads a bias and a scale per channel
        bias = np.ascontiguousarray(np.broadcast_to(bias if bias.size else np.zeros(1), (channels,)), np.float64)
        s2 = np.ascontiguousarray(np.broadcast_to(s2, (channels,)), np.float64)
        mode = qgemm.MODE_REQUANT if requant else qgemm.MODE_INT32
        transposed = qgemm.vnni_weights_t(weight, w_zero, taps, x_dtype, x_zero) if self.ports.conv else None
        if transposed is not None:   # a conv: C = W' A^T, the output's planes whole
            packed, init, za = transposed
            geo = qgemm.geometry(*geo_args, signed=x_dtype == np.int8, x_zero=x_zero, kc=0, mode=mode,
                                 per_channel=s2.size > 1, nparts=nparts)
            offsets = qgemm.vnni_fields_t(geo, za, nparts)
            _, cs, _, copy = qgemm.vnni_scratch_sizes(geo)
            work = [((nparts, cs), np.dtype(np.int32)), ((copy // 4,), np.dtype(np.uint32)),
                    ((qgemm.interleaved_words(geo),), np.dtype(np.uint32))]
            args = (V(ctx.inputs[self.ports.x]), packed, init, offsets, V(ctx.outputs[0]), geo, bias, s1, s2,
                    y_scale, y_zero, lo, hi, W(0), W(1), W(2), nparts)
            native = [Call(qgemm.trun, args)]
            note = (f"integer product, VNNI int8 kernel, transposed on phase planes, {nparts} part(s), "
                    f"{int(geo[qgemm.G_SLABS])} slab(s) of {int(geo[qgemm.G_SLABW])} row(s)")
            return Bound(fallback_calls(ctx), mode="native", workspace=work, note=note,
                         request=KernelRequest("qgemm-transposed",
                                               lambda alias: qgemm.compile_transposed_for(out_dtype, nparts),
                                               lambda kern, alias: native))
        geo, packed, init, zbp, rowterm, how = self._row_major(geo_args, weight, w_zero, x_dtype, x_zero, mode, s2,
                                                               nparts, taps)
        rows, cs, width, copy = qgemm.vnni_scratch_sizes(geo)
        work = [((nparts, rows), np.dtype(np.uint8)), ((nparts, cs), np.dtype(np.int32)),
                ((nparts, width), np.dtype(np.int64)), ((copy,), np.dtype(np.uint8))]
        args = (V(ctx.inputs[self.ports.x]), packed, init, zbp, V(ctx.outputs[0]), geo, bias, s1, s2, y_scale,
                y_zero, lo, hi, W(0), W(1), W(2), W(3), nparts)
        native = [Call(qgemm.vrun, args)]
        note = (f"integer product, VNNI int8 kernel on {how}{', row term' if rowterm else ''}, {nparts} part(s), "
                f"{int(geo[qgemm.G_SLABS])} slab(s)")
        return Bound(fallback_calls(ctx), mode="native", workspace=work, note=note,
                     request=KernelRequest("qgemm-vnni", lambda alias: qgemm.compile_vnni_for(out_dtype, nparts),
                                           lambda kern, alias: native))

    def _row_major(self, geo_args: tuple, weight: np.ndarray, w_zero: np.ndarray, x_dtype: np.dtype, x_zero: int,
                   mode: int, s2: np.ndarray, nparts: int, taps: int):
        """(geo, packed weight, init, row zero points, whether a row term is added, a note) of the row-major
        product C = A W'^T: a MatMul's (A's rows in place), or a conv's whose weight needs a row term."""
        from ..kernels import qgemm  # NOTE: on first use (qgemm builds the VNNI kernel)
        if self.ports.conv:   # the depth in the order the im2row rows hold it: (kh, kw, c)
            g, mg, depth = weight.shape
            weight = weight.reshape(g, mg, depth // taps, taps).transpose(0, 1, 3, 2).reshape(g, mg, depth)
            in_place = taps == 1 and geo_args[7] == (1, 1) and geo_args[8] == (0, 0) and geo_args[10] == geo_args[4]
            rows_from = qgemm.ROWS_CHANNELS_LAST if in_place else qgemm.ROWS_IM2ROW
            kpad = -(-depth // 4) * 4
            positions = geo_args[0] * g * geo_args[10][0] * geo_args[10][1]
            if not in_place and depth // taps < qgemm.FEW_CHANNELS and positions * kpad <= qgemm.PLANES_BYTES:
                rows_from = qgemm.ROWS_PLANES
        else:
            rows_from = qgemm.ROWS_INPUT
        packed, init, zbp, rowterm, za, a_xor = qgemm.vnni_weights(weight, w_zero, x_dtype, x_zero)
        geo = qgemm.geometry(*geo_args, signed=x_dtype == np.int8, x_zero=x_zero, kc=0, mode=mode,
                             per_channel=s2.size > 1, nparts=nparts, max_slab=qgemm.vnni_slab(weight.shape[2]))
        qgemm.vnni_fields(geo, taps, rows_from, za, rowterm, a_xor)
        how = {qgemm.ROWS_INPUT: "A's rows in place", qgemm.ROWS_CHANNELS_LAST: "channels-last rows",
               qgemm.ROWS_IM2ROW: "im2row bytes", qgemm.ROWS_PLANES: "an im2row of the planes"}[rows_from]
        return geo, packed, init, zbp, rowterm, how

    def _conv(self, ctx: BindContext, x: tuple[int, ...], w: np.ndarray, y: tuple[int, ...]):
        """(geometry arguments, weight as [G, MG, depth], multiply-adds) of a 2-D convolution."""
        if len(x) != 4:
            raise NotNative(f"only 2-D convolutions are native (input rank {len(x)})")
        group = int(self.attrs.get("group", 1))
        window, begins, _ = spatial_window(self.attrs, w.shape[2:], x[2:])
        m, cg = w.shape[:2]
        if m % group or cg * group != x[1]:
            raise NotNative(f"weight {list(w.shape)} does not fit input {list(x)} with group {group}")
        n, c, h, wd = x
        oh, ow = y[2], y[3]
        geo_args = (n, group, cg, m // group, (h, wd), (c * h * wd, h * wd, wd, 1), tuple(w.shape[2:]),
                    tuple(window.strides), tuple(begins), tuple(window.dilations), (oh, ow),
                    (m * oh * ow, oh * ow, 1))
        weight = w.reshape(group, m // group, -1)
        return geo_args, weight, n * m * oh * ow * int(np.prod(w.shape[1:]))

    def _matmul(self, x: tuple[int, ...], w: np.ndarray, y: tuple[int, ...]):
        """A [..., M, K] @ B [K, N] as the product of B^T's rows with A's rows (see ``tlc.kernels.qgemm``)."""
        if w.ndim != 2 or len(x) < 2:
            raise NotNative(f"only A [..., M, K] @ constant B [K, N] is native (shapes {list(x)}, {list(w.shape)})")
        k, n = w.shape
        rows = math.prod(x[:-1])
        geo_args = (1, 1, k, n, (1, rows), (0, 1, 0, k), (1, 1), (1, 1), (0, 0), (1, 1), (1, rows), (0, 1, n))
        return geo_args, w.T.reshape(1, n, k), rows * n * k

    def _epilogue(self, ctx: BindContext, channels: int, requant: bool):
        """(s1, s2, y_scale, y_zero, lo, hi, bias) of the kernel's epilogue, in the reference's float64 order."""
        ports = self.ports
        bias = np.zeros(0)
        b = _const(ctx, ports.bias, "the bias")
        if b is not None:
            bias = np.ascontiguousarray(_per_channel(b, channels, "the bias"), np.float64)
        if not requant:
            return 1.0, np.ones(1), 1.0, 0.0, 0.0, 0.0, bias
        x_scale = _scalar(_const(ctx, ports.x_scale, "x_scale"), "x_scale")
        w_scale = ctx.require_const(ports.w_scale, "w_scale").astype(np.float64).reshape(-1)
        if w_scale.size not in (1, channels):
            raise NotNative(f"w_scale has {w_scale.size} values for {channels} output channels")
        y_scale = _scalar(ctx.require_const(ports.y_scale, "y_scale"), "y_scale")
        y_zero_array = ctx.require_const(ports.y_zero, "y_zero_point")
        y_zero = _scalar(y_zero_array, "y_zero_point")
        info = np.iinfo(y_zero_array.dtype)
        if ports.conv:   # the reference: acc * (x_scale * w_scale)
            s1, s2 = 1.0, np.float64(x_scale) * w_scale
        else:            # the reference: acc * a_scale * b_scale
            s1, s2 = x_scale, w_scale
        return s1, np.ascontiguousarray(s2), y_scale, y_zero, float(info.min), float(info.max), bias


class LinearQuantizerImpl(StepImpl):
    """QuantizeLinear (float32 to uint8/int8) or DequantizeLinear (uint8/int8 to float32) with a constant scale
    and zero point per tensor or per axis, on ``tlc.kernels.qdw``'s kernels in the reference's rounding (round
    half to even, saturation); other types, blocked parameters and runtime ones run the reference."""

    mode = "native"
    reason = "linear (de)quantization kernel"

    def __init__(self, quantize: bool, attrs: dict[str, Any]):
        self.quantize = quantize
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        from ..kernels import qdw  # NOTE: on first use (it imports qgemm, which builds the VNNI kernel)
        if not ctx.options.jit_enabled:
            raise NotNative("the JIT is off (the (de)quantization is a compiled kernel)")
        (shape,) = ctx.in_shapes()[:1]
        x_dtype, out_dtype = np.dtype(ctx.in_types[0].dtype), ctx.out_dtype()
        floats, ints = (x_dtype, out_dtype) if self.quantize else (out_dtype, x_dtype)
        if floats != np.float32 or ints not in BYTES:
            raise NotNative(f"{x_dtype} to {out_dtype} is not native (float32 and uint8/int8 only)")
        if int(self.attrs.get("block_size", 0)):
            raise NotNative("blocked quantization is not native")
        if self.quantize and int(self.attrs.get("precision", 0)) not in (0, 1):
            raise NotNative("a division precision other than float32 is not native")
        scale = ctx.require_const(1, "the scale")
        if scale.dtype != np.float32:
            raise NotNative(f"a {scale.dtype} scale is not native (float32 only)")
        zero = _const(ctx, 2, "the zero point")
        if not ctx.contiguous(0):
            raise NotNative("a strided input")
        if scale.size == 1 and (zero is None or zero.size == 1):
            outer, chans, inner = 1, 1, math.prod(shape)
        elif scale.ndim == 1 and len(shape) > 0:
            axis = int(self.attrs.get("axis", 1))
            axis = axis + len(shape) if axis < 0 else axis
            if not 0 <= axis < len(shape) or scale.size != shape[axis]:
                raise NotNative(f"a scale of {scale.size} values does not fit axis {axis} of {list(shape)}")
            outer, chans, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        else:
            raise NotNative(f"a scale of shape {list(scale.shape)} is not native (per tensor or per axis only)")
        scales = np.ascontiguousarray(np.broadcast_to(scale.reshape(-1), (chans,)), np.float32)
        zeros = np.zeros(chans) if zero is None else np.ascontiguousarray(
            np.broadcast_to(zero.reshape(-1), (chans,)), np.float64)
        x, y = V(ctx.inputs[0]), V(ctx.outputs[0])
        if self.quantize:
            info = np.iinfo(out_dtype)
            call = Call(qdw.quantize, (x, y, scales, zeros, outer, chans, inner, float(info.min), float(info.max)))
            request = KernelRequest("quantize", lambda alias: qdw.compile_quantize(), lambda kern, alias: [call])
        else:
            call = Call(qdw.dequantize, (x, y, scales, zeros, outer, chans, inner, x_dtype == np.int8))
            request = KernelRequest("dequantize", lambda alias: qdw.compile_dequantize(), lambda kern, alias: [call])
        kind = "per tensor" if chans == 1 else f"per axis ({chans} channels)"
        note = f"{'quantize' if self.quantize else 'dequantize'} kernel, {kind}"
        return Bound(fallback_calls(ctx), mode="native", note=note, request=request)


def _quantizer(quantize: bool):
    def factory(attrs: dict[str, Any], node: Node, options: CompileOptions) -> StepImpl:
        return LinearQuantizerImpl(quantize, attrs)

    return factory


def _factory(op: str):
    def factory(attrs: dict[str, Any], node: Node, options: CompileOptions) -> StepImpl:
        if node.num_outputs != 1:
            raise NotNative(f"only the single-output form is native ({node.num_outputs} outputs)")
        return QuantizedProductImpl(op, attrs)

    return factory


#: qualified op name -> factory, the entries for ``tlc.runtime.ops.CPU_OPS``
CPU_OPS = {**{op: _factory(op) for op in PORTS}, "QuantizeLinear": _quantizer(True),
           "DequantizeLinear": _quantizer(False)}
