"""Scalar expressions: how an elementwise op computes one output element from its input elements.

An elementwise ``OpDef`` gives ``expr(*args, **attrs) -> Expr``; ``args`` are ``Expr`` leaves for its inputs
(None for a missing optional input). Expressions are small trees over a fixed set of primitive functions;
the code generator renders them per target (CPU, CUDA) and ``evaluate`` runs them with numpy, which the
registry tests use to check each expression against the op's reference implementation.

A primitive computes in the dtype of its first non-constant operand (the output dtype when all are constants;
for most ops simply the output dtype), other operands and constants converted to it; comparisons give bool.
Renderers and ``evaluate`` follow this one rule. Constants are Python numbers only, so nothing but validated
numbers can reach generated source.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: primitive -> arity. Renderers must implement every one of these (a test checks it).
PRIMITIVES: dict[str, int] = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "pow": 2, "max": 2, "min": 2, "mod": 2, "fmod": 2,
    "neg": 1, "abs": 1, "sqrt": 1, "exp": 1, "log": 1, "tanh": 1, "erf": 1, "floor": 1, "ceil": 1,
    "sin": 1, "cos": 1, "round": 1, "sign": 1, "isnan": 1,
    "tan": 1, "atan": 1, "asin": 1, "acos": 1, "sinh": 1, "cosh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "bitand": 2, "bitor": 2, "bitxor": 2, "bitnot": 1, "shl": 2, "shr": 2,
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2,
    "and": 2, "or": 2, "xor": 2, "not": 1,
    "where": 3, "cast": 1,
}

COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne", "isnan"})
LOGICAL = frozenset({"and", "or", "xor", "not"})
#: on integers only (two's complement bits). A shift by a negative amount or by the width or more gives the sign
#: fill (ONNX BitShift): 0, or -1 for a right shift of a negative signed value.
BITWISE = frozenset({"bitand", "bitor", "bitxor", "bitnot", "shl", "shr"})


class Expr:
    """A node of a scalar expression: ``arg`` (input index), ``const`` (a number) or a primitive call."""

    __slots__ = ("fn", "args", "value")

    def __init__(self, fn: str, args: tuple[Expr, ...] = (), value: Any = None):
        if fn not in ("arg", "const") and PRIMITIVES.get(fn) != len(args):
            raise ValueError(f"bad scalar expression: {fn} with {len(args)} arguments")
        if fn == "const":
            if isinstance(value, (bool, np.bool_)):
                value = bool(value)
            elif isinstance(value, (int, np.integer)):
                value = int(value)
            else:
                value = float(value)  # NOTE: only numbers may become constants (generated-source safety)
        if fn == "arg":
            value = int(value)
        if fn == "cast":
            from ..ir.types import dtype_name

            value = dtype_name(value)
        self.fn = fn
        self.args = args
        self.value = value

    # arithmetic sugar -------------------------------------------------------
    def __add__(self, o: Any) -> Expr:
        return Expr("add", (self, lift(o)))

    def __radd__(self, o: Any) -> Expr:
        return Expr("add", (lift(o), self))

    def __sub__(self, o: Any) -> Expr:
        return Expr("sub", (self, lift(o)))

    def __rsub__(self, o: Any) -> Expr:
        return Expr("sub", (lift(o), self))

    def __mul__(self, o: Any) -> Expr:
        return Expr("mul", (self, lift(o)))

    def __rmul__(self, o: Any) -> Expr:
        return Expr("mul", (lift(o), self))

    def __truediv__(self, o: Any) -> Expr:
        return Expr("div", (self, lift(o)))

    def __rtruediv__(self, o: Any) -> Expr:
        return Expr("div", (lift(o), self))

    def __neg__(self) -> Expr:
        return Expr("neg", (self,))

    def __pow__(self, o: Any) -> Expr:
        return Expr("pow", (self, lift(o)))

    def __repr__(self) -> str:
        if self.fn == "arg":
            return f"x{self.value}"
        if self.fn == "const":
            return repr(self.value)
        if self.fn == "cast":
            return f"cast<{self.value}>({self.args[0]!r})"
        return f"{self.fn}({', '.join(map(repr, self.args))})"

    def walk(self):
        """Every node of the tree, children before parents."""
        for a in self.args:
            yield from a.walk()
        yield self


def lift(x: Any) -> Expr:
    return x if isinstance(x, Expr) else Expr("const", value=x)


def arg(i: int) -> Expr:
    return Expr("arg", value=i)


def const(v: float | int | bool) -> Expr:
    return Expr("const", value=v)


def _fn(name: str):
    def build(*args: Any) -> Expr:
        return Expr(name, tuple(lift(a) for a in args))

    build.__name__ = name
    return build


exp, log, tanh, erf, sqrt, floor, ceil, sin, cos = (
    _fn(n) for n in ("exp", "log", "tanh", "erf", "sqrt", "floor", "ceil", "sin", "cos"))
absolute, sign, round_even, isnan = _fn("abs"), _fn("sign"), _fn("round"), _fn("isnan")
maximum, minimum, power, mod, fmod = _fn("max"), _fn("min"), _fn("pow"), _fn("mod"), _fn("fmod")
lt, le, gt, ge, eq, ne = (_fn(n) for n in ("lt", "le", "gt", "ge", "eq", "ne"))
logical_and, logical_or, logical_xor, logical_not = _fn("and"), _fn("or"), _fn("xor"), _fn("not")
where = _fn("where")
tan, atan, asin, acos, sinh, cosh, asinh, acosh, atanh = (
    _fn(n) for n in ("tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh"))
bitwise_and, bitwise_or, bitwise_xor, bitwise_not = _fn("bitand"), _fn("bitor"), _fn("bitxor"), _fn("bitnot")
shift_left, shift_right = _fn("shl"), _fn("shr")


def cast(x: Any, dtype: str) -> Expr:
    return Expr("cast", (lift(x),), value=dtype)


def sigmoid(x: Expr) -> Expr:
    return 1.0 / (1.0 + exp(-x))


# ---------------------------------------------------------------------------- numpy evaluation
def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _np_shift(x: np.ndarray, amount: np.ndarray, left: bool) -> np.ndarray:
    """x << amount or x >> amount (arithmetic on signed types), with BITWISE's rule for amounts out of range."""
    width = x.dtype.itemsize * 8
    inside = (amount >= 0) & (amount < width)
    safe = np.where(inside, amount, 0).astype(x.dtype)
    shifted = np.left_shift(x, safe) if left else np.right_shift(x, safe)
    fill = np.right_shift(x, width - 1) if not left and x.dtype.kind == "i" else np.zeros_like(x)
    return np.where(inside, shifted, fill).astype(x.dtype)


_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "max": np.maximum, "min": np.minimum, "fmod": np.fmod, "mod": np.mod,
    "neg": np.negative, "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "tanh": np.tanh,
    "erf": _np_erf, "floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos, "round": np.round,
    "sign": np.sign, "isnan": np.isnan,
    "tan": np.tan, "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor, "bitnot": np.invert,
    "shl": lambda x, s: _np_shift(x, s, left=True), "shr": lambda x, s: _np_shift(x, s, left=False),
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
    "not": np.logical_not, "where": np.where,
}


def _typed_dtype(values: list[np.ndarray | None], default: str) -> str:
    """The dtype a primitive computes in: its first typed operand's (None marks a constant), else ``default``."""
    for v in values:
        if v is not None:
            return v.dtype.name
    return default if default != "bool" else "float64"


def int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C semantics, as onnxruntime computes it), exact over the whole
    range (no float64 detour), 0 for a zero divisor; the one integer division of the reference and of plans."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return (q + fix).astype(np.result_type(a, b))


def evaluate(expr: Expr, inputs: list[np.ndarray | None], dtype: str) -> np.ndarray:
    """Evaluate ``expr`` with numpy on broadcast ``inputs``, typed as the renderers type it (``tlc.kernels.render``):
    a primitive computes in the dtype of its first non-constant operand (``dtype`` when all are constants),
    converting the other operands to it; comparisons compare there and give bool; logical ops take bools."""

    def ev(e: Expr) -> np.ndarray | None:
        """The value of ``e``; None for a constant (typed by the primitive that uses it)."""
        if e.fn == "arg":
            return np.asarray(inputs[e.value])
        if e.fn == "const":
            return None
        vals = [ev(a) for a in e.args]
        if e.fn == "cast":
            return None if vals[0] is None else vals[0].astype(e.value)
        if e.fn in LOGICAL:
            args = [as_type(a, v, "bool") for a, v in zip(e.args, vals)]
        elif e.fn == "where":
            at = _typed_dtype(vals[1:], dtype)
            args = [as_type(e.args[0], vals[0], "bool")] + [as_type(a, v, at) for a, v in zip(e.args[1:], vals[1:])]
        else:
            at = _typed_dtype(vals, "float64" if e.fn in COMPARISONS else dtype)
            args = [as_type(a, v, at) for a, v in zip(e.args, vals)]
        if e.fn == "div" and np.issubdtype(args[0].dtype, np.integer):
            return int_div(*args)
        return np.asarray(_NUMPY[e.fn](*args))

    def as_type(e: Expr, value: np.ndarray | None, at: str) -> np.ndarray:
        if value is None:
            return np.asarray(_const_value(e), dtype=at)
        return value if value.dtype.name == at else value.astype(at)

    with np.errstate(all="ignore"):
        out = ev(expr)
        return np.asarray(_const_value(expr), dtype=dtype) if out is None else out


def _const_value(e: Expr) -> float | int | bool:
    """The number a constant subtree stands for (casts of constants stay untyped, as the renderers keep them)."""
    while e.fn == "cast":
        e = e.args[0]
    return e.value
