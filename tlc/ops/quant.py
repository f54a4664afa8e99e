"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul, QLinearConv,
MatMulInteger and ConvInteger.

Quantized values are integers (int8/uint8/int16/uint16/int4/uint4/int2/uint2) or small floats (float8, float4,
float6; ml_dtypes arrays). Integer products accumulate exactly (int64, or float64 for convolutions, exact below
2^53) and wrap to int32 where the op outputs int32, as the spec allows ("accumulation may overflow if and only if
in 32 bits"). Requantization rounds to nearest even and saturates to the target range; float targets convert
with Cast's rules (``tlc.ops.cast.cast_array``), ``saturate`` included.

A scale/zero point pair is per tensor (a scalar or one value), per axis (1-D along ``axis``) or blocked (the
input's rank, ``ceil(D / block_size)`` along ``axis``); ``expand_param`` broadcasts it against the input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir.types import ML_FLOAT_DTYPES, Shape, TensorType, dtype_name, dtype_of_onnx_code, np_dtype
from .cast import cast_array
from .conv import conv
from .infer import broadcast_shapes, normalize_axis
from .registry import Attr, InferContext, OpDef, register, widened
from .window import kernel_from, make_window, window_attrs

INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
    "int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3),
}
FLOAT_TARGETS = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn",
                           "float6_e2m3fn", "float6_e3m2fn"})
QUANTIZED = frozenset(INTEGER_RANGES) | FLOAT_TARGETS
HIGH_PRECISION = frozenset({"float32", "float16", "bfloat16", "int32"})
SCALES = frozenset({"float32", "float16", "bfloat16", "int32", "float8_e8m0fnu"})
OUT_FLOATS = frozenset({"float32", "float16", "bfloat16"})
BYTES = frozenset({"int8", "uint8"})
FLOAT8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})


# ---------------------------------------------------------------------------- shared pieces
def _wide(x: np.ndarray) -> np.ndarray:
    """Values in a type arithmetic is exact in: int64 for integers, float32 for the small floats."""
    name = dtype_name(x.dtype)
    if name in ML_FLOAT_DTYPES or name in ("float16",):
        return x.astype(np.float32)
    if x.dtype.kind == "f":
        return x
    return x.astype(np.int64)


def quantize_values(v: np.ndarray, zero: np.ndarray | None, dtype: str, saturate: bool = True) -> np.ndarray:
    """``v`` (values already divided by the scale) plus the zero point, in the quantized type: integers round
    ``v`` to nearest even first, then add and saturate; floats convert ``v + zero`` with Cast's rules."""
    if dtype in INTEGER_RANGES:
        lo, hi = INTEGER_RANGES[dtype]
        with np.errstate(invalid="ignore"):
            q = np.rint(v)
            return np.clip(q if zero is None else q + _wide(zero), lo, hi).astype(np_dtype(dtype))
    return cast_array(v if zero is None else v + _wide(zero).astype(v.dtype), dtype, saturate)


def _param_kind(x_shape: Shape, p_shape: Shape, axis: int, block_size: int) -> str:
    """"tensor", "axis" or "blocked" from the shapes (ValueError when they fit none)."""
    if block_size < 0:
        raise ValueError(f"block_size must be >= 0, got {block_size}")
    if block_size == 0:
        if len(p_shape) == 0 or (len(p_shape) == 1 and p_shape[0] == 1):
            return "tensor"
        if len(p_shape) != 1:
            raise ValueError(f"a scale of shape {list(p_shape)} needs block_size (blocked quantization) or must be "
                             f"a scalar or 1-D (per tensor, per axis)")
        axis = normalize_axis(axis, len(x_shape))
        d = x_shape[axis]
        if isinstance(d, int) and isinstance(p_shape[0], int) and d != p_shape[0]:
            raise ValueError(f"a per-axis scale of length {p_shape[0]} does not fit axis {axis} of size {d}")
        return "axis"
    if len(p_shape) != len(x_shape):
        raise ValueError(f"blocked quantization needs a scale of the input's rank {len(x_shape)}, got shape "
                         f"{list(p_shape)}")
    axis = normalize_axis(axis, len(x_shape))
    for i, (d, s) in enumerate(zip(x_shape, p_shape)):
        if not (isinstance(d, int) and isinstance(s, int)):
            continue
        want = -(-d // block_size) if i == axis else d
        if s != want:
            raise ValueError(f"blocked scale of shape {list(p_shape)} does not fit input {list(x_shape)} with "
                             f"block_size {block_size} on axis {axis} (dim {i} should be {want})")
    return "blocked"


def expand_param(p: np.ndarray, x_shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast against an input of ``x_shape``."""
    kind = _param_kind(x_shape, p.shape, axis, block_size)
    if kind == "tensor":
        return p.reshape(())
    axis = normalize_axis(axis, len(x_shape))
    if kind == "axis":
        return p.reshape([-1 if i == axis else 1 for i in range(len(x_shape))])
    return np.repeat(p, block_size, axis=axis)[tuple(slice(0, x_shape[axis]) if i == axis else slice(None)
                                                     for i in range(len(x_shape)))]


def _check_params(ctx: InferContext, x_index: int, scale: int, zero: int | None, axis: int = 1,
                  block_size: int = 0) -> None:
    """A scale/zero point pair fits input ``x_index`` (when the shapes are known) and has one shape."""
    x, s = ctx.type(x_index), ctx.type(scale)
    if zero is not None and ctx.has_input(zero):
        z = ctx.type(zero)
        one = s.numel == 1 and z.numel == 1  # a scalar and a [1] both mean per tensor (ONNX's own cases mix them)
        if s.shape is not None and z.shape is not None and len(s.shape) != len(z.shape) and not one:
            ctx.fail(f"scale {s} and zero point {z} must have the same shape")
    if x.shape is None or s.shape is None:
        return
    try:
        _param_kind(x.shape, s.shape, axis, block_size)
    except Exception as exc:  # ValueError, ShapeInferenceError of an axis out of range
        ctx.fail(str(exc))


def _dtype_attr(ctx: InferContext, name: str) -> str | None:
    code = ctx.attrs[name]
    if not code:
        return None
    try:
        return dtype_of_onnx_code(code)
    except Exception as exc:
        ctx.fail(f"attribute {name!r}: {exc}")


def _expect(ctx: InferContext, i: int, allowed: frozenset[str], what: str) -> TensorType:
    t = ctx.type(i)
    if t.dtype not in allowed:
        ctx.fail(f"{what} (input {i}) has dtype {t.dtype}; expected one of {', '.join(sorted(allowed))}")
    return t


# ---------------------------------------------------------------------------- QuantizeLinear, DequantizeLinear
QUANT_ATTRS = {"axis": Attr("int", 1), "block_size": Attr("int", 0), "output_dtype": Attr("int", 0)}


def _quantize_infer(ctx: InferContext) -> list[TensorType]:
    x = _expect(ctx, 0, HIGH_PRECISION, "x")
    _expect(ctx, 1, SCALES, "y_scale")
    out = _dtype_attr(ctx, "output_dtype")
    if ctx.has_input(2):
        zero = ctx.type(2).dtype
        if out is not None and out != zero:
            ctx.fail(f"output_dtype {out} differs from the zero point's dtype {zero}")
        out = zero
    out = out or "uint8"
    if out not in QUANTIZED:
        ctx.fail(f"cannot quantize to {out}; expected one of {', '.join(sorted(QUANTIZED))}")
    precision = _dtype_attr(ctx, "precision")
    if precision is not None and precision not in OUT_FLOATS:
        ctx.fail(f"precision {precision} is not one of {', '.join(sorted(OUT_FLOATS))}")
    _check_params(ctx, 0, 1, 2, ctx.attrs["axis"], ctx.attrs["block_size"])
    return [TensorType(out, x.shape)]


def _division_dtype(scale: np.ndarray, precision: int) -> np.dtype:
    if precision:
        return np_dtype(dtype_of_onnx_code(precision))
    name = dtype_name(scale.dtype)
    if name in ("float32", "float16", "bfloat16"):
        return scale.dtype
    return np.dtype(np.float64) if name == "int32" else np.dtype(np.float32)  # int32, e8m0: no arithmetic of their own


def _quantized_dtype(y_zero_point: np.ndarray | None, output_dtype: int) -> str:
    """QuantizeLinear's output type: the zero point's, else ``output_dtype``'s, else uint8."""
    if y_zero_point is not None:
        return dtype_name(y_zero_point.dtype)
    return dtype_of_onnx_code(output_dtype) if output_dtype else "uint8"


def _quotient(x: np.ndarray, y_scale: np.ndarray, axis: int, block_size: int, precision: int) -> np.ndarray:
    """x / y_scale in QuantizeLinear's division type, the scale expanded per axis or block."""
    dtype = _division_dtype(y_scale, precision)
    return x.astype(dtype) / expand_param(y_scale, x.shape, axis, block_size).astype(dtype)


def quantize_linear(x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None, *, axis: int = 1,
                    block_size: int = 0, output_dtype: int = 0, saturate: int = 1, precision: int = 0) -> np.ndarray:
    v = _quotient(x, y_scale, axis, block_size, precision)
    zero = None if y_zero_point is None else expand_param(y_zero_point, x.shape, axis, block_size)
    return quantize_values(v, zero, _quantized_dtype(y_zero_point, output_dtype), bool(saturate))


def _nan_quotient(inputs, attrs) -> str | None:
    """x / y_scale NaN (a NaN in x, or 0 / 0) quantized to an integer: ONNX does not say (onnxruntime and ONNX's
    evaluator give the type's minimum, tlc 0; fuzz seeds 806732, 809146). Asked after the reference ran."""
    x, scale = inputs[0], inputs[1]
    if not _quantized_dtype(inputs[2] if len(inputs) > 2 else None, attrs["output_dtype"]).startswith(
            ("int", "uint")):
        return None   # a float8 output holds NaN
    with np.errstate(all="ignore"):
        v = _quotient(widened(x), widened(scale), attrs["axis"], attrs["block_size"], attrs["precision"])
    return "x / y_scale is NaN (a NaN input, or 0 / 0) for an integer output" if np.isnan(v).any() else None


register(OpDef(name="QuantizeLinear", ml_dtypes=True, infer=_quantize_infer, reference=quantize_linear, inputs=(2, 3),
               attrs={**QUANT_ATTRS, "saturate": Attr("int", 1), "precision": Attr("int", 0)},
               undefined_at=_nan_quotient,
               doc="y = saturate(round(x / y_scale) + y_zero_point), per tensor, per axis or blocked"))


def _dequantize_infer(ctx: InferContext) -> list[TensorType]:
    x = _expect(ctx, 0, QUANTIZED | {"int32"}, "x")
    scale = _expect(ctx, 1, frozenset(OUT_FLOATS | {"float8_e8m0fnu"}), "x_scale")
    if ctx.has_input(2) and ctx.type(2).dtype != x.dtype:
        ctx.fail(f"the zero point has dtype {ctx.type(2).dtype}; x has {x.dtype}")
    out = _dtype_attr(ctx, "output_dtype") or scale.dtype
    if out not in OUT_FLOATS:
        ctx.fail(f"cannot dequantize to {out} (set output_dtype to float, float16 or bfloat16 when x_scale is "
                 f"{scale.dtype})")
    _check_params(ctx, 0, 1, 2, ctx.attrs["axis"], ctx.attrs["block_size"])
    return [TensorType(out, x.shape)]


def dequantize_linear(x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None, *,
                      axis: int = 1, block_size: int = 0, output_dtype: int = 0) -> np.ndarray:
    out = np_dtype(dtype_of_onnx_code(output_dtype)) if output_dtype else x_scale.dtype
    v = _wide(x)
    if x_zero_point is not None:
        v = v - _wide(expand_param(x_zero_point, x.shape, axis, block_size))
    scale = expand_param(x_scale, x.shape, axis, block_size)
    if dtype_name(scale.dtype) not in OUT_FLOATS:
        scale = scale.astype(np.float32)
    return v.astype(out) * scale.astype(out)


register(OpDef(name="DequantizeLinear", ml_dtypes=True,
               infer=_dequantize_infer, reference=dequantize_linear, inputs=(2, 3),
               attrs=dict(QUANT_ATTRS), doc="y = (x - x_zero_point) * x_scale, per tensor, per axis or blocked"))


# ---------------------------------------------------------------------------- DynamicQuantizeLinear
def _dynamic_infer(ctx: InferContext) -> list[TensorType]:
    x = _expect(ctx, 0, frozenset({"float32"}), "x")
    return [TensorType("uint8", x.shape), TensorType("float32", ()), TensorType("uint8", ())]


def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo = min(0.0, float(x.min())) if x.size else 0.0
    hi = max(0.0, float(x.max())) if x.size else 0.0
    scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
    if scale == 0:  # an all-zero input: any scale represents it; zero point 0, every value 0
        return np.zeros(x.shape, np.uint8), scale.reshape(()), np.array(0, np.uint8)
    zero = np.clip(np.rint(np.float32(0) - np.float32(lo) / scale), 0, 255).astype(np.uint8)
    y = quantize_values(x / scale, zero, "uint8")
    return y, np.array(scale, np.float32), np.array(zero, np.uint8)


def _zero_range(inputs, attrs) -> str | None:
    """ONNX's formula gives an input of zero range (all zeros) y_scale 0 and the zero point 0 / 0; implementations
    pick a scale (onnxruntime 1, ONNX's reference evaluator 1/255, tlc 0); nor does it say what NaN does to the
    range."""
    x = inputs[0]
    if x.size and np.isnan(x).any():
        return "NaN in the input (its range is not defined)"
    if x.size == 0 or (min(0.0, float(x.min())) == 0.0 and max(0.0, float(x.max())) == 0.0):
        return "an input of zero range (the scale is 0 and the zero point 0 / 0)"
    return None


register(OpDef(name="DynamicQuantizeLinear", ml_dtypes=True,
               infer=_dynamic_infer, reference=dynamic_quantize_linear, outputs=3, undefined_at=_zero_range,
               doc="uint8 quantization with a scale and zero point computed from the input's range"))


# ---------------------------------------------------------------------------- products
def matmul_shape(ctx: InferContext, a: Shape | None, b: Shape | None) -> Shape | None:
    """numpy matmul's output shape (symbolic batch dims broadcast), failing inference on mismatched inner dims."""
    if a is None or b is None:
        return None
    if not a or not b:
        ctx.fail("matrix product inputs must have rank >= 1")
    sa, sb = ((1,) + a if len(a) == 1 else a), (b + (1,) if len(b) == 1 else b)
    if isinstance(sa[-1], int) and isinstance(sb[-2], int) and sa[-1] != sb[-2]:
        ctx.fail(f"inner dims differ: {list(a)} @ {list(b)}")
    out = list(broadcast_shapes(sa[:-2], sb[:-2])) + [sa[-2], sb[-1]]
    if len(a) == 1:
        out.pop(-2)
    if len(b) == 1:
        out.pop(-1)
    return tuple(out)


def _row_param(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A's per-row scale or zero point: a 1-D vector runs along A's rows."""
    return p.reshape(-1, 1) if p.ndim == 1 and p.size > 1 and a.ndim >= 2 else p


def _centered(a: np.ndarray, zero: np.ndarray | None) -> np.ndarray:
    return _wide(a) if zero is None else _wide(a) - _wide(zero)


def _qlinear_matmul_infer(ctx: InferContext) -> list[TensorType]:
    a = _expect(ctx, 0, BYTES | FLOAT8, "a")
    b = _expect(ctx, 3, BYTES | FLOAT8, "b")
    y = _expect(ctx, 7, BYTES | FLOAT8, "y_zero_point")
    for i, what in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")):
        _expect(ctx, i, OUT_FLOATS, what)
    for i, like in ((2, a), (5, b)):
        if ctx.type(i).dtype != like.dtype:
            ctx.fail(f"zero point (input {i}) has dtype {ctx.type(i).dtype}, expected {like.dtype}")
    rows = a.shape[-2] if a.shape is not None and len(a.shape) >= 2 else 1
    cols = b.shape[-1] if b.shape is not None and len(b.shape) >= 2 else 1
    for i, what, along in ((1, "a_scale", rows), (2, "a_zero_point", rows), (4, "b_scale", cols),
                           (5, "b_zero_point", cols), (6, "y_scale", cols), (7, "y_zero_point", cols)):
        shape = ctx.type(i).shape
        if shape is not None and (len(shape) > 1 or (len(shape) == 1 and isinstance(shape[0], int)
                                                     and isinstance(along, int) and shape[0] not in (1, along))):
            ctx.fail(f"{what} has shape {list(shape)}; expected a scalar or a vector of 1 or {along} elements "
                     f"(per tensor, or per row of a / per column of b)")
    return [TensorType(y.dtype, matmul_shape(ctx, a.shape, b.shape))]


def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point) -> np.ndarray:
    acc = np.matmul(_centered(a, _row_param(a_zero_point, a)), _centered(b, b_zero_point))
    real = acc.astype(np.float64) * _row_param(a_scale, a).astype(np.float64) * b_scale.astype(np.float64)
    # NOTE: one-element scales and zero points of shape [1] must not give a product of vectors a dim
    return _requantize(real, y_scale, y_zero_point).reshape(acc.shape)


def _requantize(real: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray) -> np.ndarray:
    return quantize_values(real / y_scale.astype(np.float64), y_zero_point, dtype_name(y_zero_point.dtype))


register(OpDef(name="QLinearMatMul", ml_dtypes=True,
               infer=_qlinear_matmul_infer, reference=qlinear_matmul, inputs=(8, 8),
               cost=2, doc="quantized matrix product: int32-exact accumulation, then requantized to y's type"))


def _matmul_integer_infer(ctx: InferContext) -> list[TensorType]:
    a, b = _expect(ctx, 0, BYTES, "A"), _expect(ctx, 1, BYTES, "B")
    for i, like in ((2, a), (3, b)):
        if ctx.has_input(i) and ctx.type(i).dtype != like.dtype:
            ctx.fail(f"zero point (input {i}) has dtype {ctx.type(i).dtype}, expected {like.dtype}")
    for i, what, operand in ((2, "a_zero_point", a), (3, "b_zero_point", b)):
        zero = ctx.type(i).shape if ctx.has_input(i) else None
        if zero is None or operand.shape is None or len(zero) == 0 or (len(zero) == 1 and zero[0] in (1, None)):
            continue
        along = operand.shape[-2] if i == 2 and len(operand.shape) >= 2 else operand.shape[-1]
        try:  # per row of A ([M]) or per column of B ([N], or [D1, ..., 1, N]): never widening the operand
            ok = zero[0] == along if len(zero) == 1 else (
                len(zero) <= len(operand.shape) and broadcast_shapes(operand.shape, zero) == operand.shape)
        except Exception:
            ok = False
        if not ok:
            ctx.fail(f"{what} has shape {list(zero)}; expected a scalar, a vector of 1 or {along} elements, or a "
                     f"shape that broadcasts to {list(operand.shape)}")
    return [TensorType("int32", matmul_shape(ctx, a.shape, b.shape))]


def matmul_integer(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
    a_zero = None if a_zero_point is None else _row_param(a_zero_point, a)
    return np.matmul(_centered(a, a_zero), _centered(b, b_zero_point)).astype(np.int32)


register(OpDef(name="MatMulInteger", ml_dtypes=True,
               infer=_matmul_integer_infer, reference=matmul_integer, inputs=(2, 4), cost=2,
               doc="integer matrix product with zero points, accumulated in (wrapping) int32"))


# ---------------------------------------------------------------------------- convolutions
CONV_ATTRS = {**window_attrs(kernel_required=False), "group": Attr("int", 1)}


def conv_shape(ctx: InferContext, x: TensorType, w: TensorType) -> Shape | None:
    """Conv's output shape for input ``x`` and weight ``w`` (symbolic where the window allows)."""
    rank = x.rank if x.rank is not None else w.rank
    if rank is None:
        return None
    if rank < 3 or (w.rank is not None and w.rank != rank):
        ctx.fail(f"X {x} and W {w} must both have rank >= 3 (N, C, spatial...)")
    xs = x.shape or (None,) * rank
    ws = w.shape or (None,) * rank
    group = ctx.attrs["group"]
    if group < 1:
        ctx.fail(f"group must be >= 1, got {group}")
    if isinstance(xs[1], int) and isinstance(ws[1], int) and xs[1] != ws[1] * group:
        ctx.fail(f"X {x} has {xs[1]} channels; W {w} with group {group} expects {ws[1] * group}")
    try:
        kernel = kernel_from(ctx.attrs, w.shape, rank - 2)
        if any(not isinstance(k, int) for k in kernel):
            return (xs[0], ws[0]) + (None,) * (rank - 2)
        window = make_window(ctx.attrs, kernel)
        return (xs[0], ws[0], *(window.output_dim(i, d) for i, d in enumerate(xs[2:])))
    except ValueError as exc:
        ctx.fail(str(exc))


def _channel_param(ctx: InferContext, i: int, what: str, channels: Sequence[object]) -> None:
    """A zero point or scale that is a scalar or has one value per output channel."""
    if not ctx.has_input(i) or ctx.shape(i) is None:
        return
    shape = ctx.shape(i)
    if len(shape) > 1 or (len(shape) == 1 and isinstance(shape[0], int) and shape[0] != 1
                          and isinstance(channels[0], int) and shape[0] != channels[0]):
        ctx.fail(f"{what} of shape {list(shape)} must be a scalar or hold one value per output channel "
                 f"({channels[0]})")


def _conv_integer_infer(ctx: InferContext) -> list[TensorType]:
    x, w = _expect(ctx, 0, BYTES, "x"), _expect(ctx, 1, BYTES, "w")
    for i, like in ((2, x), (3, w)):
        if ctx.has_input(i) and ctx.type(i).dtype != like.dtype:
            ctx.fail(f"zero point (input {i}) has dtype {ctx.type(i).dtype}, expected {like.dtype}")
    shape = conv_shape(ctx, x, w)
    _channel_param(ctx, 3, "w_zero_point", (w.shape or (None,))[:1])
    return [TensorType("int32", shape)]


def _channel(p: np.ndarray | None, ndim: int) -> np.ndarray | None:
    """A per-output-channel vector shaped to broadcast against a weight (M, C, k...)."""
    if p is None or p.size == 1:
        return None if p is None else p.reshape(())
    return p.reshape((-1,) + (1,) * (ndim - 1))


def _integer_conv(x, w, x_zero, w_zero, attrs) -> np.ndarray:
    """The exact integer convolution of (x - x_zero) with (w - w_zero) as float64 integers."""
    xc = _centered(x, None if x_zero is None else x_zero.reshape(())).astype(np.float64)
    wc = _centered(w, _channel(w_zero, w.ndim)).astype(np.float64)
    # NOTE: float64 sums of int8 products are exact while below 2^53 (2^37 taps), far past any real kernel
    return conv(xc, wc, **attrs)


def conv_integer(x, w, x_zero_point=None, w_zero_point=None, **attrs) -> np.ndarray:
    return _integer_conv(x, w, x_zero_point, w_zero_point, attrs).astype(np.int64).astype(np.int32)


register(OpDef(name="ConvInteger", ml_dtypes=True, infer=_conv_integer_infer, reference=conv_integer, inputs=(2, 4),
               attrs=dict(CONV_ATTRS), cost=2, doc="integer convolution with zero points, int32 accumulation"))


def _qlinear_conv_infer(ctx: InferContext) -> list[TensorType]:
    x, w = _expect(ctx, 0, BYTES, "x"), _expect(ctx, 3, BYTES, "w")
    y = _expect(ctx, 7, BYTES, "y_zero_point")
    for i, what in ((1, "x_scale"), (4, "w_scale"), (6, "y_scale")):
        _expect(ctx, i, frozenset({"float32"}), what)
    for i, like in ((2, x), (5, w)):
        if ctx.type(i).dtype != like.dtype:
            ctx.fail(f"zero point (input {i}) has dtype {ctx.type(i).dtype}, expected {like.dtype}")
    if ctx.has_input(8):
        _expect(ctx, 8, frozenset({"int32"}), "B")
    shape = conv_shape(ctx, x, w)
    channels = (w.shape or (None,))[:1]
    for i, what in ((4, "w_scale"), (5, "w_zero_point"), (8, "B")):
        _channel_param(ctx, i, what, channels)
    return [TensorType(y.dtype, shape)]


def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None,
                 **attrs) -> np.ndarray:
    acc = _integer_conv(x, w, x_zero_point, w_zero_point, attrs)
    spatial = (1,) * (x.ndim - 2)
    if B is not None:
        acc = acc + B.astype(np.float64).reshape((-1, *spatial))
    w_scale = w_scale.astype(np.float64)
    w_scale = w_scale.reshape(()) if w_scale.size == 1 else w_scale.reshape((-1, *spatial))
    real = acc * (x_scale.astype(np.float64).reshape(()) * w_scale)
    return _requantize(real, y_scale.reshape(()), y_zero_point.reshape(()))


register(OpDef(name="QLinearConv", ml_dtypes=True, infer=_qlinear_conv_infer, reference=qlinear_conv, inputs=(8, 9),
               attrs=dict(CONV_ATTRS), cost=2, doc="quantized convolution: exact accumulation, then requantized"))
