"""Division by constants and reassociation of constants.

``div-pow2-to-mul`` (-O2, exact): x / c -> x * (1/c) when every element of c is a power of two whose reciprocal
is representable: both sides round the same exact real x * 2^-k once, so the results are identical.
The rest change rounding and run only with fast_math:
``div-const-to-mul``: x / c -> x * (1/c) for any finite nonzero c;
``mul-const-reassoc``: (x * c1) * c2 -> x * (c1 * c2); ``add-const-reassoc``: (x + c1) + c2 -> x + (c1 + c2).
"""

from __future__ import annotations

import numpy as np

from ..rewrite import FLOAT, Builder, Const, Match, Op, Rule, RuleSet, Var


def _reciprocal(c: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore"):
        return (np.asarray(1, c.dtype) / c).astype(c.dtype)


def _exact_reciprocal(c: np.ndarray) -> bool:
    if c.dtype.kind != "f" or c.size == 0 or not np.all(np.isfinite(c)) or np.any(c == 0):
        return False
    mantissa, _ = np.frexp(c)
    r = _reciprocal(c)
    return bool(np.all(np.abs(mantissa) == 0.5) and np.all(np.isfinite(r))
                and np.all(r.astype(np.float64) * c.astype(np.float64) == 1.0))


def _finite_nonzero(c: np.ndarray) -> bool:
    return c.dtype.kind == "f" and c.size > 0 and bool(np.all(np.isfinite(c)) and np.all(c != 0)
                                                      and np.all(np.isfinite(_reciprocal(c))))


def _div_to_mul(m: Match, b: Builder):
    return b.op("Mul", m["x"], b.constant(_reciprocal(m.const("c"))))


def _same_dtype(m: Match) -> str | None:
    x, c = m.type("x"), m.const("c")
    return None if x.dtype == c.dtype.name else f"x has dtype {x.dtype}, the constant {c.dtype}"


def _reassoc(op: str, fn):
    def rewrite(m: Match, b: Builder):
        c1, c2 = m.const("c1"), m.const("c2")
        return b.op(op, m["x"], b.constant(fn(c1, c2).astype(c1.dtype)))

    return rewrite


def _reassoc_check(m: Match) -> str | None:
    c1, c2 = m.const("c1"), m.const("c2")
    if c1.dtype != c2.dtype:
        return f"the constants have dtypes {c1.dtype} and {c2.dtype}"
    return None  # NOTE: x * (c1 * c2) broadcasts to the same shape as (x * c1) * c2


def _chain(op: str) -> Op:
    return Op(op, Op(op, Var("x", dtype=FLOAT), Const(name="c1"), name="inner"), Const(name="c2"))


RULES = RuleSet("arith", (
    Rule("div-pow2-to-mul", Op("Div", Var("x", dtype=FLOAT), Const(name="c", where=_exact_reciprocal)),
         _div_to_mul, _same_dtype, min_level=2, description="x / 2^k -> x * 2^-k (exact)"),
    Rule("div-const-to-mul", Op("Div", Var("x", dtype=FLOAT), Const(name="c", where=_finite_nonzero)),
         _div_to_mul, _same_dtype, min_level=2, fast_math=True, description="x / c -> x * (1/c) (rounding)"),
    Rule("mul-const-reassoc", _chain("Mul"), _reassoc("Mul", np.multiply), _reassoc_check, min_level=2,
         fast_math=True, description="(x * c1) * c2 -> x * (c1 * c2) (rounding)"),
    Rule("add-const-reassoc", _chain("Add"), _reassoc("Add", np.add), _reassoc_check, min_level=2,
         fast_math=True, description="(x + c1) + c2 -> x + (c1 + c2) (rounding)"),
), "division by constants and constant reassociation")
