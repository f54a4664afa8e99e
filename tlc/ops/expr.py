"""Scalar expressions: how an elementwise op computes one output element from its input elements.

An elementwise ``OpDef`` gives ``expr(*args, **attrs) -> Expr``; ``args`` are ``Expr`` leaves for its inputs
(None for a missing optional input). Expressions are small trees over a fixed set of primitive functions;
the code generator renders them per target (CPU, CUDA) and ``evaluate`` runs them with numpy, which the
registry tests use to check each expression against the op's reference implementation.

Arithmetic happens in the output dtype; comparisons give bool. Constants are Python numbers only, so nothing
but validated numbers can reach generated source.
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
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2,
    "and": 2, "or": 2, "xor": 2, "not": 1,
    "where": 3, "cast": 1,
}

COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne", "isnan"})
LOGICAL = frozenset({"and", "or", "xor", "not"})


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


def cast(x: Any, dtype: str) -> Expr:
    return Expr("cast", (lift(x),), value=dtype)


def sigmoid(x: Expr) -> Expr:
    return 1.0 / (1.0 + exp(-x))


# ---------------------------------------------------------------------------- numpy evaluation
def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "pow": np.power,
    "max": np.maximum, "min": np.minimum, "fmod": np.fmod, "mod": np.mod,
    "neg": np.negative, "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "tanh": np.tanh,
    "erf": _np_erf, "floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos, "round": np.round,
    "sign": np.sign, "isnan": np.isnan,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
    "not": np.logical_not, "where": np.where,
}


def evaluate(expr: Expr, inputs: list[np.ndarray | None], dtype: str) -> np.ndarray:
    """Evaluate ``expr`` with numpy on broadcast ``inputs``; arithmetic in ``dtype``."""
    np_type = np.dtype(dtype)

    def ev(e: Expr) -> np.ndarray:
        if e.fn == "arg":
            return np.asarray(inputs[e.value])
        if e.fn == "const":
            return np.asarray(e.value, dtype=np_type if not isinstance(e.value, bool) else bool)
        args = [ev(a) for a in e.args]
        if e.fn == "cast":
            return args[0].astype(e.value)
        if e.fn == "div":
            a, b = args
            if np.issubdtype(np.result_type(a, b), np.integer):
                with np.errstate(divide="ignore", invalid="ignore"):
                    return np.trunc(np.true_divide(a, b)).astype(np.result_type(a, b))
            return np.divide(a, b)
        with np.errstate(all="ignore"):
            return np.asarray(_NUMPY[e.fn](*args))

    with np.errstate(all="ignore"):
        out = ev(expr)
    return out
