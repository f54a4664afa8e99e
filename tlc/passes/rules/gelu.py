"""Written-out GELU -> Gelu (-O2): the erf form and the tanh approximation, in their exported association orders.

    erf:  x * 0.5 * (1 + Erf(x / sqrt(2)))                    (or Erf(x * 0.70710678))
    tanh: 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   (x^3 as Pow(x, 3) or x*x*x)

The outer product appears as ``(x*0.5)*(1+f)`` (hand-written), ``(x*(1+f))*0.5`` (torch.onnx's gelu),
``x*((1+f)*0.5)`` or ``(x*(1+f))/2``; commutative matching covers the operand orders of each. sqrt(2), 1/sqrt(2),
sqrt(2/pi) and 0.044715 match within a relative ``CONST_RTOL`` (exporters print them to 5-8 digits); 0.5, 1 and 2
must be exact. The replacement uses the exact constants: a recognition, checked with a tolerance.
"""

from __future__ import annotations

import math

from ..rewrite import FLOAT, Builder, Const, Match, OneOf, Op, Pattern, Rule, RuleSet, Var
from .common import root_keeps_type

CONST_RTOL = 1e-4


def _approx(value: float) -> Const:
    return Const(value, rtol=CONST_RTOL)


def _outer_forms(x: Pattern, one_plus: Pattern) -> OneOf:
    """The association orders of x * 0.5 * one_plus."""
    return OneOf(
        Op("Mul", Op("Mul", x, Const(0.5)), one_plus),
        Op("Mul", Op("Mul", x, one_plus), Const(0.5)),
        Op("Mul", x, Op("Mul", one_plus, Const(0.5))),
        Op("Div", Op("Mul", x, one_plus), Const(2.0)),
    )


def _erf_form() -> OneOf:
    x = Var("x", dtype=FLOAT)
    scaled = OneOf(Op("Div", x, _approx(math.sqrt(2))), Op("Mul", x, _approx(1 / math.sqrt(2))))
    return _outer_forms(x, Op("Add", Op("Erf", scaled), Const(1.0)))


def _tanh_form() -> OneOf:
    x = Var("x", dtype=FLOAT)
    cube = OneOf(Op("Pow", x, Const(3.0)), Op("Mul", Op("Mul", x, x), x))
    inner = Op("Add", x, Op("Mul", cube, _approx(0.044715)))
    scaled = Op("Mul", inner, _approx(math.sqrt(2 / math.pi)))
    return _outer_forms(x, Op("Add", Op("Tanh", scaled), Const(1.0)))


def _gelu(approximate: str):
    attrs = {} if approximate == "none" else {"approximate": approximate}  # "none" is the default

    def rewrite(m: Match, b: Builder):
        return b.op("Gelu", m["x"], **attrs)

    return rewrite


RULES = RuleSet("gelu", (
    Rule("gelu-erf", _erf_form(), _gelu("none"), root_keeps_type, min_level=2, produces=("Gelu",),
         description="x * 0.5 * (1 + Erf(x / sqrt 2)) -> Gelu(x)"),
    Rule("gelu-tanh", _tanh_form(), _gelu("tanh"), root_keeps_type, min_level=2, produces=("Gelu",),
         description="0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> Gelu(x, approximate=tanh)"),
), "GELU recognition")
