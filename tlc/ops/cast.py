"""Cast, CastLike and BitCast: element type conversion and reinterpretation (ONNX semantics).

Conversions go through numpy and ``ml_dtypes`` (``cast_array``), with ONNX's rules where the two differ:

- float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) with ``saturate`` (the default): out-of-range values and infinities
  become +/- the type's largest finite value; without it ml_dtypes' own conversion applies (NaN, or +/-inf for
  e5m2), which is the spec's non-saturating table. Rounding is to nearest even in both.
- float8e8m0 (a power of two, no sign, no zero) is computed here: ``round_mode`` up / down / nearest (ties up) on
  the exponent; ``saturate`` clamps to [2^-127, 2^127] (zero and infinity included), else those become NaN.
- float4 and float6 have no infinity or NaN: they always saturate (ml_dtypes does; NaN becomes -0 as in ONNX).
- Integer targets wrap (discard high bits), int4/int2 included; bool is "nonzero".
- Strings parse as numbers (``"+INF"``, ``"-inf"``, ``"NaN"`` in any case, scientific notation; integers
  exactly); numbers print in their shortest round-trip form.

ml_dtypes converts only some pairs of its own types directly, so an ml_dtypes source is widened first (floats to
float32, which holds every one of them exactly; ints to int64).
"""

from __future__ import annotations

import numpy as np

from ..errors import ExecutionError
from ..ir.types import ML_FLOAT_DTYPES, ML_INT_DTYPES, TensorType, dtype_name, dtype_of_onnx_code, np_dtype
from . import expr as E
from .elementwise import EW
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

#: the float8 types whose conversion ``saturate`` governs
SATURABLE = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
E8M0 = "float8_e8m0fnu"
ROUND_MODES = ("up", "down", "nearest")
_E8M0_BIAS, _E8M0_NAN = 127, 255


# ---------------------------------------------------------------------------- conversion
def cast_array(x: np.ndarray, dtype: str, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` converted to the named dtype with ONNX Cast semantics (see the module docstring)."""
    x = np.asarray(x)
    if dtype == "string":
        return _to_strings(x)
    if x.dtype == object:
        x = _parse_strings(x, dtype)
    x = _widen(x)
    if dtype == E8M0:
        return _to_e8m0(x, saturate, round_mode)
    if dtype in SATURABLE and saturate and x.dtype.kind in "iuf":
        limit = float(_finfo_max(dtype))
        x = x if x.dtype.kind == "f" else x.astype(np.float64)
        x = np.where(np.isnan(x), x, np.clip(x, -limit, limit))
    with np.errstate(all="ignore"):
        return x.astype(np_dtype(dtype))


def _widen(x: np.ndarray) -> np.ndarray:
    """An ml_dtypes array as float32 (exact for every ml float) or int64; others unchanged."""
    name = dtype_name(x.dtype) if x.dtype != object else "string"
    if name in ML_FLOAT_DTYPES:
        return x.astype(np.float32)
    if name in ML_INT_DTYPES:
        return x.astype(np.int64)
    return x


def _finfo_max(dtype: str):
    import ml_dtypes  # noqa: PLC0415 - only the float8 paths need finfo

    return ml_dtypes.finfo(np_dtype(dtype)).max


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float8e8m0: the exponent of |x| rounded per ``round_mode``, as the biased code (255 is NaN)."""
    magnitude = np.abs(x.astype(np.float64))
    with np.errstate(all="ignore"):
        mantissa, exponent = np.frexp(magnitude)        # magnitude = mantissa * 2^exponent, mantissa in [0.5, 1)
    floor = exponent.astype(np.int64) - 1               # 2^floor <= magnitude < 2^(floor + 1)
    if round_mode == "up":
        e = np.where(mantissa == 0.5, floor, floor + 1)
    elif round_mode == "down":
        e = floor
    else:                                               # nearest, ties up: 2 * mantissa >= 1.5
        e = np.where(mantissa >= 0.75, floor + 1, floor)
    finite = np.isfinite(magnitude) & (magnitude > 0)
    e = np.where(finite, e, 0)
    if saturate:
        e = np.where(np.isinf(magnitude), _E8M0_BIAS, e)
        e = np.where(magnitude == 0, -_E8M0_BIAS, e)
        code = np.clip(e, -_E8M0_BIAS, _E8M0_BIAS) + _E8M0_BIAS
        code = np.where(np.isnan(magnitude), _E8M0_NAN, code)
    else:
        in_range = finite & (e >= -_E8M0_BIAS) & (e <= _E8M0_BIAS)
        code = np.where(in_range, e + _E8M0_BIAS, _E8M0_NAN)
    return code.astype(np.uint8).view(np_dtype(E8M0))


def _to_strings(x: np.ndarray) -> np.ndarray:
    if x.dtype == object:
        return x.copy()
    flat = _widen(x).ravel()
    # NOTE: str of a numpy float is the shortest text that reads back to the same value of its type
    texts = [str(v) for v in flat] if flat.dtype.kind == "f" else [str(v) for v in flat.tolist()]
    return np.array(texts, dtype=object).reshape(x.shape)


def _parse_strings(x: np.ndarray, dtype: str) -> np.ndarray:
    """Strings as float64 (float targets) or as integers wrapped to 64 bits (integer and bool targets)."""
    flat = [str(s).strip() for s in x.ravel()]
    try:
        if dtype == "bool":
            values = [s.lower() == "true" or (s.lower() != "false" and float(s) != 0) for s in flat]
            return np.array(values, dtype=bool).reshape(x.shape)
        if dtype.startswith(("int", "uint")):
            ints = [_parse_int(s) & 0xFFFFFFFFFFFFFFFF for s in flat]
            return np.array(ints, dtype=np.uint64).reshape(x.shape)
        return np.array([float(s) for s in flat], dtype=np.float64).reshape(x.shape)
    except ValueError as exc:
        raise ExecutionError(f"Cast: a string does not hold a number ({exc}); expected e.g. '3.14', '1e-5', "
                             f"'-INF' or 'NaN'") from None


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return int(float(text))  # "100.5" -> 100 (truncation; the spec leaves it undefined)


# ---------------------------------------------------------------------------- Cast, CastLike
def _round_mode(ctx: InferContext) -> None:
    if ctx.attrs["round_mode"] not in ROUND_MODES:
        ctx.fail(f"round_mode {ctx.attrs['round_mode']!r} is not one of {', '.join(ROUND_MODES)}")


def _cast_infer(ctx: InferContext) -> list[TensorType]:
    _round_mode(ctx)
    try:
        dtype = dtype_of_onnx_code(ctx.attrs["to"])
    except Exception as exc:  # ValidationError naming the codes tlc holds
        ctx.fail(f"attribute 'to': {exc}")
    return [TensorType(dtype, ctx.shape(0))]


CAST_ATTRS = {"saturate": Attr("int", 1), "round_mode": Attr("string", "up")}


def float_to_int_undefined(x: np.ndarray, dtype: str) -> str | None:
    """Why a cast of float ``x`` to integer ``dtype`` is undefined (ONNX: "fixed point: undefined if OOR"):
    NaN, an infinity or a value outside the type's range after truncation; None when it is defined."""
    if dtype not in _INT_RANGES or x.dtype == object or not dtype_name(x.dtype).startswith(("float", "bfloat")):
        return None
    lo, hi = _INT_RANGES[dtype]
    with np.errstate(all="ignore"):
        t = np.trunc(x.astype(np.float64))
        bad = ~np.isfinite(t) | (t < lo) | (t >= hi)
    return f"{int(bad.sum())} value(s) NaN, infinite or out of {dtype}'s range" if bad.any() else None


#: [min, max + 1) of each integer type, as float64 (exact: powers of two)
_INT_RANGES = {d: (float(np.iinfo(d).min), float(np.iinfo(d).max) + 1.0)
               for d in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}

register(OpDef(name="Cast", ml_dtypes=True,
               infer=_cast_infer, traits=EW, attrs={"to": Attr("int", REQUIRED), **CAST_ATTRS},
               reference=lambda x, *, to, saturate, round_mode: cast_array(x, dtype_of_onnx_code(to), bool(saturate),
                                                                           round_mode),
               expr=lambda x, *, to, saturate, round_mode: E.cast(x, dtype_of_onnx_code(to)),
               undefined_at=lambda inputs, attrs: float_to_int_undefined(inputs[0], dtype_of_onnx_code(attrs["to"])),
               doc="element type conversion; saturate and round_mode apply to float8 targets"))


def _castlike_infer(ctx: InferContext) -> list[TensorType]:
    _round_mode(ctx)
    return [TensorType(ctx.type(1).dtype, ctx.shape(0))]


def _castlike(x: np.ndarray, like: np.ndarray, *, saturate: int, round_mode: str) -> np.ndarray:
    return cast_array(x, "string" if like.dtype == object else dtype_name(like.dtype), bool(saturate), round_mode)


register(OpDef(name="CastLike", ml_dtypes=True, infer=_castlike_infer, inputs=(2, 2), attrs=dict(CAST_ATTRS),
               traits=frozenset({Trait.PURE, Trait.FOLDABLE}), reference=_castlike,
               undefined_at=lambda inputs, attrs: None if inputs[1].dtype == object else
               float_to_int_undefined(inputs[0], dtype_name(inputs[1].dtype)),
               doc="Cast to the element type of the second input"))


# ---------------------------------------------------------------------------- BitCast
def bit_width(dtype: str) -> int:
    """Bits per element of a dtype (ml_dtypes keeps each sub-byte element in a byte of its own)."""
    if dtype in ("int4", "uint4", "float4_e2m1fn"):
        return 4
    if dtype in ("int2", "uint2"):
        return 2
    if dtype in ("float6_e2m3fn", "float6_e3m2fn"):
        return 6
    if dtype == "bool":
        return 8
    return np_dtype(dtype).itemsize * 8


def _bitcast_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    try:
        dtype = dtype_of_onnx_code(ctx.attrs["to"])
    except Exception as exc:
        ctx.fail(f"attribute 'to': {exc}")
    if "string" in (x.dtype, dtype):
        ctx.fail(f"BitCast takes no strings (from {x.dtype} to {dtype})")
    if bit_width(x.dtype) != bit_width(dtype):
        ctx.fail(f"BitCast needs types of the same bit width; {x.dtype} has {bit_width(x.dtype)} bits, "
                 f"{dtype} has {bit_width(dtype)}")
    return [TensorType(dtype, x.shape)]


def _bits(x: np.ndarray) -> np.ndarray:
    """The bit pattern of every element, as unsigned integers (little endian, the low bits of a byte for
    sub-byte types)."""
    name = dtype_name(x.dtype)
    width = bit_width(name)
    if width < 8:
        raw = x.astype(np.int64) if name in ML_INT_DTYPES else x.view(np.uint8)
        return (raw & ((1 << width) - 1)).astype(np.uint8)
    return x.view(np.dtype(f"<u{width // 8}"))


def _from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    width = bit_width(dtype)
    if dtype == "bool":
        return bits != 0  # NOTE: a byte other than 0 or 1 is no bool; such bytes read as True
    if width < 8:
        if dtype in ("uint4", "uint2"):
            return bits.astype(np_dtype(dtype))
        if dtype in ("int4", "int2"):
            sign = 1 << (width - 1)
            return ((bits.astype(np.int64) ^ sign) - sign).astype(np_dtype(dtype))
        return bits.astype(np.uint8).view(np_dtype(dtype))
    return bits.view(np_dtype(dtype).newbyteorder("<")).astype(np_dtype(dtype))


def _bitcast(x: np.ndarray, *, to: int) -> np.ndarray:
    # NOTE: np.require, not np.ascontiguousarray, which turns a 0-d array into shape [1]
    return _from_bits(np.require(_bits(np.require(x, requirements="C")), requirements="C"), dtype_of_onnx_code(to))


def _nan_payload(inputs, attrs) -> str | None:
    """A NaN's bits are not specified (IEEE 754 leaves the payload and sign of a computed NaN to the hardware)."""
    x = inputs[0]
    if x.dtype != object and dtype_name(x.dtype).startswith(("float", "bfloat")) and x.size:
        with np.errstate(all="ignore"):
            if np.isnan(x.astype(np.float32)).any():
                return "the bits of a NaN (its sign and payload are not specified)"
    return None


register(OpDef(name="BitCast", ml_dtypes=True,
               infer=_bitcast_infer, attrs={"to": Attr("int", REQUIRED)}, reference=_bitcast,
               undefined_at=_nan_payload,
               doc="reinterpret the bits of each element as another type of the same width"))
