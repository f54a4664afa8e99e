"""simplify, rule set ``gelu``: written-out erf and tanh GELU in their exported association orders -> Gelu,
and the near misses (another x, a wrong constant, a shared intermediate) that must stay."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tlc

try:
    from .simplify_testlib import check_rewrite
except ImportError:
    from simplify_testlib import check_rewrite

TOL = {"exact": False, "rtol": 1e-5, "atol": 2e-6, "specials": False}
SQRT2 = math.sqrt(2)


def f32(g, v):
    return g.constant(np.float32(v))


def erf_gelu(g, x, form, sqrt2=SQRT2, erf_x=None):
    """x * 0.5 * (1 + erf(x / sqrt 2)) in the orders exporters and hand-written models produce."""
    xe = erf_x or x
    scaled = g.add_node("Mul", [xe, f32(g, 1 / sqrt2)]) if form == "mul-inv" else g.add_node("Div", [xe, f32(g, sqrt2)])
    erf = g.add_node("Erf", [scaled], name="erf")
    one_plus = g.add_node("Add", [f32(g, 1.0), erf] if form == "hf" else [erf, f32(g, 1.0)])
    if form in ("torch", "mul-inv"):      # torch.onnx: (x * (1 + erf)) * 0.5
        return g.add_node("Mul", [g.add_node("Mul", [x, one_plus]), f32(g, 0.5)])
    if form == "hf":                       # HF: (x * 0.5) * (1 + erf)
        return g.add_node("Mul", [g.add_node("Mul", [x, f32(g, 0.5)]), one_plus])
    if form == "half-first":               # (0.5 * x) * (1 + erf)
        return g.add_node("Mul", [one_plus, g.add_node("Mul", [f32(g, 0.5), x])])
    if form == "inner-half":               # x * ((1 + erf) * 0.5)
        return g.add_node("Mul", [x, g.add_node("Mul", [f32(g, 0.5), one_plus])])
    return g.add_node("Div", [g.add_node("Mul", [one_plus, x]), f32(g, 2.0)])   # (x * (1 + erf)) / 2


def tanh_gelu(g, x, cube="pow", coeff=0.044715):
    """HF NewGELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    if cube == "pow":
        x3 = g.add_node("Pow", [x, f32(g, 3.0)])
    elif cube == "mul":
        x3 = g.add_node("Mul", [g.add_node("Mul", [x, x]), x])
    else:
        x3 = g.add_node("Mul", [x, g.add_node("Mul", [x, x])])
    inner = g.add_node("Add", [x, g.add_node("Mul", [f32(g, coeff), x3])])
    t = g.add_node("Tanh", [g.add_node("Mul", [f32(g, math.sqrt(2 / math.pi)), inner])])
    return g.add_node("Mul", [g.add_node("Mul", [f32(g, 0.5), x]), g.add_node("Add", [f32(g, 1.0), t])])


def graph(build, shape=("N", 7)):
    g = tlc.Graph("gelu")
    x = g.input("x", "float32", shape)
    g.output(build(g, x), "y")
    return g


@pytest.mark.parametrize("form", ["torch", "hf", "half-first", "inner-half", "div-two", "mul-inv"])
def test_erf_gelu_forms(form, rng):
    after = check_rewrite(graph(lambda g, x: erf_gelu(g, x, form)), "gelu-erf", ["Gelu"], rng, **TOL)
    assert after.ops()[0].attrs == {}, "approximate='none' is the default"


def test_erf_gelu_with_a_rounded_constant(rng):
    check_rewrite(graph(lambda g, x: erf_gelu(g, x, "torch", sqrt2=1.4142)), "gelu-erf", ["Gelu"], rng,
                  exact=False, rtol=1e-4, atol=1e-5, specials=False)


@pytest.mark.parametrize("cube", ["pow", "mul", "mul-right"])
def test_tanh_gelu_forms(cube, rng):
    after = check_rewrite(graph(lambda g, x: tanh_gelu(g, x, cube)), "gelu-tanh", ["Gelu"], rng, **TOL)
    assert after.ops()[0].attrs == {"approximate": "tanh"}


def test_tanh_gelu_after_fast_math_pow_reduction(rng):
    check_rewrite(graph(lambda g, x: tanh_gelu(g, x)), "gelu-tanh", ["Gelu"], rng, fast_math=True, **TOL)


def test_erf_of_another_value_stays(rng):
    def build(g, x):
        return erf_gelu(g, x, "torch", erf_x=g.input("x2", "float32", ("N", 7)))
    check_rewrite(graph(build), "gelu-erf", ["Div", "Erf", "Add", "Mul", "Mul"], rng, fires=False, **TOL)


def test_wrong_constants_stay(rng):
    check_rewrite(graph(lambda g, x: erf_gelu(g, x, "torch", sqrt2=math.sqrt(3))), "gelu-erf",
                  ["Div", "Erf", "Add", "Mul", "Mul"], rng, fires=False, **TOL)
    check_rewrite(graph(lambda g, x: tanh_gelu(g, x, coeff=0.05)), "gelu-tanh",
                  ["Pow", "Mul", "Add", "Mul", "Tanh", "Mul", "Add", "Mul"], rng, fires=False, **TOL)


def test_shared_intermediate_stays(rng):
    g = graph(lambda g, x: erf_gelu(g, x, "torch"))
    g.output(g.value("erf"), "erf_out")
    check_rewrite(g, "gelu-erf", ["Div", "Erf", "Add", "Mul", "Mul"], rng, fires=False, **TOL)


def test_not_at_O1(rng):
    check_rewrite(graph(lambda g, x: erf_gelu(g, x, "torch")), "gelu-erf", ["Div", "Erf", "Add", "Mul", "Mul"],
                  rng, fires=False, opt_level=1)
