"""Pow with a constant exponent, strength-reduced (the exact forms at -O1, the others with fast_math).

Decided as LLVM's library-call simplifier does without fast-math flags:
- exact: ``x^1 -> x``; ``x^2 -> x*x`` (one correctly rounded multiply, what pow returns);
  ``x^-1 -> Reciprocal(x)`` (one correctly rounded division; ±0 -> ±inf and ±inf -> ±0 as pow gives);
  ``x^0 -> 1`` (IEEE pow gives 1 for every x, nan and 0 included; needs a static shape to build the ones).
- fast_math: ``x^3 -> x*x*x`` (two roundings); ``x^-0.5 -> Reciprocal(Sqrt(x))`` (two roundings);
  ``x^0.5 -> Sqrt(x)``: sqrt is correctly rounded but differs from pow at -0 (sqrt gives -0, pow +0) and
  at -inf (sqrt gives nan, pow +inf).
Only when the exponent does not broadcast x to a bigger shape (a one-element exponent of rank <= x's).
"""

from __future__ import annotations

import numpy as np

from ...ir.types import FLOAT_DTYPES, NUMERIC_DTYPES
from ..rewrite import Builder, Const, Match, Op, Rule, RuleSet, Var
from .common import root_keeps_type


def _pow(exponent: float, numeric: bool = False) -> Op:
    x = Var("x", dtype=NUMERIC_DTYPES if numeric else FLOAT_DTYPES)
    return Op("Pow", x, Const(exponent, "e", scalar=True))


def _exact_check(m: Match) -> str | None:
    """Integer x: only with an integer exponent (a float one makes the reference go through float and back)."""
    if m.type("x").dtype not in FLOAT_DTYPES and m.const("e").dtype.kind == "f":
        return "integer x with a float exponent is computed in floating point, not by multiplies"
    return root_keeps_type(m)


def _ones(m: Match, b: Builder):
    ttype = m.type("x")
    return b.constant(np.ones(ttype.shape, dtype=ttype.dtype))


def _static_check(m: Match) -> str | None:
    reason = _exact_check(m)
    if reason is None and not m.type("x").is_static:
        return f"x has shape {m.type('x')}, a static shape is needed to build the ones"
    return reason


def _cube(m: Match, b: Builder):
    x = m["x"]
    return b.op("Mul", b.op("Mul", x, x), x)


RULES = RuleSet("power", (
    Rule("pow-one", _pow(1.0, numeric=True), lambda m, b: m["x"], _exact_check, description="x^1 -> x"),
    Rule("pow-two", _pow(2.0, numeric=True), lambda m, b: b.op("Mul", m["x"], m["x"]), _exact_check,
         description="x^2 -> x*x (exact)"),
    Rule("pow-minus-one", _pow(-1.0), lambda m, b: b.op("Reciprocal", m["x"]), root_keeps_type,
         description="x^-1 -> Reciprocal(x) (exact)"),
    Rule("pow-zero", _pow(0.0, numeric=True), _ones, _static_check, description="x^0 -> 1 (static shape)"),
    Rule("pow-three", _pow(3.0, numeric=True), _cube, _exact_check, fast_math=True,
         description="x^3 -> x*x*x (two roundings)"),
    Rule("pow-half", _pow(0.5), lambda m, b: b.op("Sqrt", m["x"]), root_keeps_type, fast_math=True,
         description="x^0.5 -> Sqrt(x) (differs at -0 and -inf)"),
    Rule("pow-minus-half", _pow(-0.5), lambda m, b: b.op("Reciprocal", b.op("Sqrt", m["x"])), root_keeps_type,
         fast_math=True, description="x^-0.5 -> Reciprocal(Sqrt(x)) (two roundings)"),
), "Pow with a constant exponent strength-reduced")
