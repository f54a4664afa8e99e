"""Elementwise operators: unary math, activations, broadcasting binary and variadic ops, comparisons, bitwise ops.

Each op gives a numpy reference (dtype-preserving) and a scalar expression (``tlc.ops.expr``) that the code
generator composes; tests check the two agree.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidModelError
from ..ir.types import FLOAT_DTYPES, INT_DTYPES
from . import expr as E
from .infer import elementwise
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

EW = frozenset({Trait.ELEMENTWISE, Trait.BROADCAST, Trait.PURE, Trait.FOLDABLE})
EW_COMMUTATIVE = EW | {Trait.COMMUTATIVE}

_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return _erf_scalar(x.astype(np.float64)).astype(x.dtype) if x.size else x.copy()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return E.int_div(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b)


def _gelu(x: np.ndarray, *, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        c = np.asarray(math.sqrt(2 / math.pi), x.dtype)
        return (0.5 * x * (1 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x ** 3)))).astype(x.dtype)
    return (0.5 * x * (1 + _erf(x / np.asarray(math.sqrt(2), x.dtype)))).astype(x.dtype)


def _gelu_expr(x: E.Expr, *, approximate: str) -> E.Expr:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + E.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + E.erf(x * (1 / math.sqrt(2))))


def _clip(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    out = x
    if lo is not None:
        out = np.maximum(out, lo.astype(x.dtype))
    if hi is not None:
        out = np.minimum(out, hi.astype(x.dtype))
    return out.astype(x.dtype, copy=False)


def _clip_expr(x: E.Expr, lo: E.Expr | None = None, hi: E.Expr | None = None) -> E.Expr:
    out = x
    if lo is not None:
        out = E.maximum(out, lo)
    if hi is not None:
        out = E.minimum(out, hi)
    return out


def _typed(fn):
    """Wrap a numpy function so the result keeps the first input's dtype."""

    def ref(x, *rest, **attrs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x, *rest, **attrs)).astype(x.dtype, copy=False)

    return ref


def _unary(name: str, ref, expr, attrs: dict[str, Attr] | None = None, cost: float = 1.0, doc: str = ""):
    register(OpDef(name=name, infer=elementwise(), reference=_typed(ref), expr=expr, attrs=attrs or {},
                   traits=EW, cost=cost, doc=doc))


_unary("Abs", np.abs, E.absolute)
_unary("Neg", np.negative, lambda x: -x)
_unary("Sqrt", np.sqrt, E.sqrt, cost=4)
_unary("Reciprocal", lambda x: 1 / x, lambda x: 1.0 / x, cost=4)
_unary("Exp", np.exp, E.exp, cost=8)
_unary("Log", np.log, E.log, cost=8)
_unary("Erf", _erf, E.erf, cost=10)
_unary("Tanh", np.tanh, E.tanh, cost=10)
_unary("Sin", np.sin, E.sin, cost=10)
_unary("Cos", np.cos, E.cos, cost=10)
_unary("Floor", np.floor, E.floor)
_unary("Ceil", np.ceil, E.ceil)
_unary("Round", np.round, E.round_even)
_unary("Sign", np.sign, E.sign)
_unary("Sigmoid", _sigmoid, E.sigmoid, cost=10)
_unary("Relu", lambda x: np.maximum(x, 0), lambda x: E.maximum(x, 0))
_unary("Softsign", lambda x: x / (1 + np.abs(x)), lambda x: x / (1.0 + E.absolute(x)), cost=4)
_unary("Softplus", lambda x: np.logaddexp(x, 0), lambda x: E.maximum(x, 0.0) + E.log(1.0 + E.exp(-E.absolute(x))),
       cost=16)
_unary("HardSwish", lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
       lambda x: x * E.maximum(0.0, E.minimum(1.0, x * (1 / 6) + 0.5)))
_unary("LeakyRelu", lambda x, *, alpha: np.where(x < 0, x * np.asarray(alpha, x.dtype), x),
       lambda x, *, alpha: E.where(E.lt(x, 0.0), x * alpha, x), {"alpha": Attr("float", 0.01)})
_unary("Elu", lambda x, *, alpha: np.where(x < 0, np.asarray(alpha, x.dtype) * (np.exp(x) - 1), x),
       lambda x, *, alpha: E.where(E.lt(x, 0.0), alpha * (E.exp(x) - 1.0), x), {"alpha": Attr("float", 1.0)},
       cost=8)
_unary("Celu", lambda x, *, alpha: np.maximum(x, 0) + np.minimum(0, np.asarray(alpha, x.dtype)
                                                                 * (np.exp(x / np.asarray(alpha, x.dtype)) - 1)),
       lambda x, *, alpha: E.maximum(x, 0.0) + E.minimum(0.0, alpha * (E.exp(x / alpha) - 1.0)),
       {"alpha": Attr("float", 1.0)}, cost=8)
_SELU_ALPHA, _SELU_GAMMA = 1.6732632423543772, 1.0507009873554805
_unary("Selu", lambda x, *, alpha, gamma: np.asarray(gamma, x.dtype)
       * np.where(x <= 0, np.asarray(alpha, x.dtype) * (np.exp(x) - 1), x),
       lambda x, *, alpha, gamma: gamma * E.where(E.le(x, 0.0), alpha * (E.exp(x) - 1.0), x),
       {"alpha": Attr("float", _SELU_ALPHA), "gamma": Attr("float", _SELU_GAMMA)}, cost=8)
_unary("HardSigmoid",
       lambda x, *, alpha, beta: np.clip(np.asarray(alpha, x.dtype) * x + np.asarray(beta, x.dtype), 0, 1),
       lambda x, *, alpha, beta: E.maximum(0.0, E.minimum(1.0, alpha * x + beta)),
       {"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)})
_unary("ThresholdedRelu", lambda x, *, alpha: np.where(x > alpha, x, 0),
       lambda x, *, alpha: E.where(E.gt(x, alpha), x, 0.0), {"alpha": Attr("float", 1.0)})
_unary("Gelu", _gelu, _gelu_expr, {"approximate": Attr("string", "none")}, cost=12)

register(OpDef(name="Clip", infer=elementwise(), reference=_clip, expr=_clip_expr, inputs=(1, 3), traits=EW))


def _binary(name: str, ref, expr, traits=EW, result_dtype: str | None = None, cost: float = 1.0,
            attrs: dict[str, Attr] | None = None):
    register(OpDef(name=name, infer=elementwise(result_dtype), reference=ref, expr=expr, inputs=(2, 2),
                   traits=traits, cost=cost, attrs=attrs or {}))


_binary("Add", _typed(np.add), lambda a, b: a + b, EW_COMMUTATIVE)
_binary("Sub", _typed(np.subtract), lambda a, b: a - b)
_binary("Mul", _typed(np.multiply), lambda a, b: a * b, EW_COMMUTATIVE)
_binary("Div", _typed(_div), lambda a, b: a / b, cost=4)
_binary("Pow", _typed(lambda a, b: np.power(a, b.astype(a.dtype) if a.dtype.kind == "f" else b)),
        lambda a, b: E.power(a, b), cost=16)
def _prelu_infer(ctx: InferContext) -> list:
    """Broadcasting one way only: the slope to X's shape (ONNX), so the output has X's shape."""
    out = elementwise()(ctx)
    x, y = ctx.shape(0), out[0].shape
    if x is not None and y is not None and (len(x) != len(y) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(x, y))):
        ctx.fail(f"the slope of shape {list(ctx.shape(1))} does not broadcast to X's shape {list(x)} "
                 f"(PRelu broadcasts one way: slope to X)")
    return out


def _prelu(x, slope):
    if np.broadcast_shapes(x.shape, slope.shape) != x.shape:   # one way, slope to X (fuzz seed 807356)
        raise ValueError(f"the slope of shape {list(slope.shape)} does not broadcast to X's shape {list(x.shape)}")
    return np.where(x < 0, x * slope, x)


register(OpDef(name="PRelu", infer=_prelu_infer, reference=_typed(_prelu),
               expr=lambda x, s: E.where(E.lt(x, 0.0), x * s, x), inputs=(2, 2), traits=EW))
_binary("Mod", _typed(lambda a, b, *, fmod: np.fmod(a, b) if fmod else np.mod(a, b)),
        lambda a, b, *, fmod: E.fmod(a, b) if fmod else E.mod(a, b), attrs={"fmod": Attr("int", 0)}, cost=4)
_binary("Equal", lambda a, b: np.equal(a, b), E.eq, EW_COMMUTATIVE, "bool")
_binary("Less", lambda a, b: np.less(a, b), E.lt, EW, "bool")
_binary("LessOrEqual", lambda a, b: np.less_equal(a, b), E.le, EW, "bool")
_binary("Greater", lambda a, b: np.greater(a, b), E.gt, EW, "bool")
_binary("GreaterOrEqual", lambda a, b: np.greater_equal(a, b), E.ge, EW, "bool")
_binary("And", lambda a, b: np.logical_and(a, b), E.logical_and, EW_COMMUTATIVE, "bool")
_binary("Or", lambda a, b: np.logical_or(a, b), E.logical_or, EW_COMMUTATIVE, "bool")
_binary("Xor", lambda a, b: np.logical_xor(a, b), E.logical_xor, EW_COMMUTATIVE, "bool")

register(OpDef(name="Not", infer=elementwise("bool"), reference=np.logical_not, expr=E.logical_not, traits=EW))
register(OpDef(name="IsNaN", infer=elementwise("bool"), reference=np.isnan, expr=E.isnan, traits=EW))


def _isinf(x, *, detect_negative, detect_positive):
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


def _isinf_expr(x, *, detect_negative, detect_positive):
    pos = E.eq(x, math.inf) if detect_positive else E.const(False)
    neg = E.eq(x, -math.inf) if detect_negative else E.const(False)
    return E.logical_or(pos, neg)


register(OpDef(name="IsInf", infer=elementwise("bool"), reference=_isinf, expr=_isinf_expr, traits=EW,
               attrs={"detect_negative": Attr("int", 1), "detect_positive": Attr("int", 1)}))


def _variadic(name: str, ref, expr, traits=EW_COMMUTATIVE):
    register(OpDef(name=name, infer=elementwise(), reference=ref, expr=expr, inputs=(1, None), traits=traits))


def _fold(fn):
    def ref(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return np.asarray(out).astype(xs[0].dtype, copy=False)

    return ref


def _fold_expr(fn):
    def build(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out

    return build


_variadic("Sum", _fold(np.add), _fold_expr(lambda a, b: a + b))
_variadic("Max", _fold(np.maximum), _fold_expr(E.maximum))
_variadic("Min", _fold(np.minimum), _fold_expr(E.minimum))
_variadic("Mean", lambda *xs: (_fold(np.add)(*xs) / np.asarray(len(xs), xs[0].dtype)).astype(xs[0].dtype),
          lambda *xs: _fold_expr(lambda a, b: a + b)(*xs) * (1.0 / len(xs)))


def _where_infer(ctx):
    return elementwise(type_from=1)(ctx)


register(OpDef(name="Where", infer=_where_infer, inputs=(3, 3), traits=EW, expr=E.where,
               reference=lambda c, a, b: np.where(c, a, b).astype(a.dtype, copy=False)))


# ---------------------------------------------------------------------------- more float math and activations
#: the float types of these ops' ONNX type constraints (bfloat16 runs in the reference executor only)
_FLOATS = FLOAT_DTYPES | {"bfloat16"}


def _only(dtypes: frozenset[str], what: str):
    """Elementwise inference that refuses inputs outside ``dtypes`` (and inputs of different dtypes)."""
    base = elementwise()

    def infer(ctx: InferContext):
        types = [t for t in ctx.input_types if t is not None]
        for i, t in enumerate(ctx.input_types):
            if t is not None and t.dtype not in dtypes:
                ctx.fail(f"{ctx.node.op} takes {what} tensors, input {i} is {t.dtype}")
        if len({t.dtype for t in types}) > 1:
            ctx.fail(f"{ctx.node.op} takes inputs of one dtype, got {', '.join(t.dtype for t in types)}")
        return base(ctx)

    return infer


def _in_float64(fn):
    """A float reference computed in float64 and rounded once to the input's dtype."""

    def ref(x, **attrs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(np.float64), **attrs)).astype(x.dtype)

    return ref


def _float_unary(name: str, ref, expr, attrs: dict[str, Attr] | None = None, cost: float = 10.0):
    register(OpDef(name=name, infer=_only(_FLOATS, "float"), reference=_typed(ref), expr=expr, attrs=attrs or {},
                   traits=EW, cost=cost))


_float_unary("Tan", np.tan, E.tan)
_float_unary("Atan", np.arctan, E.atan)
_float_unary("Asin", np.arcsin, E.asin)
_float_unary("Acos", np.arccos, E.acos)
_float_unary("Sinh", np.sinh, E.sinh)
_float_unary("Cosh", np.cosh, E.cosh)
_float_unary("Asinh", np.arcsinh, E.asinh)
_float_unary("Acosh", np.arccosh, E.acosh)
_float_unary("Atanh", np.arctanh, E.atanh)


#: tanh(softplus(x)) rounds to 1 in float32 and float64 from here on (1 - tanh(softplus(x)) ~ 2 e**(-2x))
_MISH_FLAT = 20.0


def _mish_expr(x: E.Expr) -> E.Expr:
    """x tanh(log(1 + e**x)) through the identity tanh(log(1 + n)) = n (n + 2) / (n (n + 2) + 2), n = e**x: one
    exp and one division, and no cancellation for x << 0 (where 1 + e**x rounds to 1 and the log form gives 0).
    n is taken at min(x, 20), past which the factor is 1 in float32 and float64 (and n would overflow)."""
    n = E.exp(E.minimum(x, _MISH_FLAT))
    p = n * (n + 2.0)
    return x * (p / (p + 2.0))


_float_unary("Mish", _in_float64(lambda x: x * np.tanh(np.logaddexp(x, 0.0))), _mish_expr, cost=16)
_float_unary("Swish", lambda x, *, alpha: x * _sigmoid(np.asarray(alpha, x.dtype) * x),
             lambda x, *, alpha: x * E.sigmoid(alpha * x), {"alpha": Attr("float", 1.0)}, cost=12)


def _shrink(x: np.ndarray, *, bias: float, lambd: float) -> np.ndarray:
    # NOTE: computed in float64 (onnxruntime computes in float): an integer x shrinks by a fractional bias exactly
    v = x.astype(np.float64)
    return np.where(v < -lambd, v + bias, np.where(v > lambd, v - bias, 0.0))


def _shrink_expr(x: E.Expr, *, bias: float, lambd: float) -> E.Expr:
    v = E.cast(x, "float64")  # the output conversion rounds once (float32) or truncates (integers)
    return E.where(E.lt(v, -lambd), v + bias, E.where(E.gt(v, lambd), v - bias, 0.0))


register(OpDef(name="Shrink", infer=_only(FLOAT_DTYPES | INT_DTYPES | {"bfloat16"}, "numeric"),
               reference=_typed(_shrink), expr=_shrink_expr, traits=EW, cost=2,
               attrs={"bias": Attr("float", 0.0), "lambd": Attr("float", 0.5)}))


# ---------------------------------------------------------------------------- bitwise ops (integers only)
def _bitwise(name: str, ref, expr, traits=EW_COMMUTATIVE, inputs: tuple[int, int] = (2, 2),
             attrs: dict[str, Attr] | None = None, infer=None):
    register(OpDef(name=name, infer=infer or _only(INT_DTYPES, "integer"), reference=ref, expr=expr, inputs=inputs,
                   traits=traits, attrs=attrs or {}))


_bitwise("BitwiseAnd", np.bitwise_and, E.bitwise_and)
_bitwise("BitwiseOr", np.bitwise_or, E.bitwise_or)
_bitwise("BitwiseXor", np.bitwise_xor, E.bitwise_xor)
_bitwise("BitwiseNot", np.invert, E.bitwise_not, EW, inputs=(1, 1))

_DIRECTIONS = ("LEFT", "RIGHT")


def _bitshift_infer(ctx: InferContext):
    if ctx.attrs["direction"] not in _DIRECTIONS:
        ctx.fail(f"BitShift direction must be LEFT or RIGHT, got {ctx.attrs['direction']!r}")
    return _only(INT_DTYPES, "integer")(ctx)


def _bitshift(x: np.ndarray, y: np.ndarray, *, direction: str) -> np.ndarray:
    """Shift by y bits; an amount outside [0, bits) leaves only the sign fill (ONNX BitShift, opset 28)."""
    if direction not in _DIRECTIONS:
        raise InvalidModelError(f"BitShift direction must be LEFT or RIGHT, got {direction!r}")
    x, y = np.broadcast_arrays(x, y)
    bits = x.dtype.itemsize * 8
    out = np.zeros(x.shape, x.dtype)
    if direction == "RIGHT" and x.dtype.kind == "i":
        out[x < 0] = -1
    ok = (y >= 0) & (y < bits)
    shift = np.left_shift if direction == "LEFT" else np.right_shift
    out[ok] = shift(x[ok], y[ok].astype(x.dtype))
    return out


def _bitshift_expr(x: E.Expr, y: E.Expr, *, direction: str) -> E.Expr:
    return E.shift_left(x, y) if direction == "LEFT" else E.shift_right(x, y)


_bitwise("BitShift", _bitshift, _bitshift_expr, EW, attrs={"direction": Attr("string", REQUIRED)},
         infer=_bitshift_infer)
