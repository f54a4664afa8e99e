"""simplify, rule set ``arith``: x / 2^k -> x * 2^-k (exact, -O2); x / c and constant reassociation only with
fast_math."""

from __future__ import annotations

import numpy as np
import pytest

import tlc

try:
    from .simplify_testlib import check_rewrite, simplify
except ImportError:
    from simplify_testlib import check_rewrite, simplify


def div_graph(c, dtype="float32"):
    g = tlc.Graph("div")
    x = g.input("x", dtype, ("N", 3))
    g.output(g.add_node("Relu", [g.add_node("Div", [x, g.constant(np.asarray(c, dtype))])]), "y")
    return g


@pytest.mark.parametrize("c", [2.0, 0.25, -8.0, [2.0, 0.5, 1024.0], 2.0**-126])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_power_of_two_division_is_exact(c, dtype, rng):
    after = check_rewrite(div_graph(c, dtype), "div-pow2-to-mul", ["Mul", "Relu"], rng)
    mul = after.ops()[0]
    np.testing.assert_array_equal(after.const_value(after.inputs_of(mul)[1]), 1 / np.asarray(c, dtype))


def test_subnormal_results_are_the_same(rng):
    g = div_graph(2.0**20)
    feeds = {"x": np.array([[1e-30, -3e-33, 1.5e-38], [7e-39, 0.0, -0.0]], np.float32)}
    after, stats = simplify(g)
    assert stats["div-pow2-to-mul"] == 1
    assert tlc.reference.run(g, feeds)["y"].tobytes() == tlc.reference.run(after, feeds)["y"].tobytes()


@pytest.mark.parametrize("c", [3.0, 2.0**-140, 0.0])
def test_other_divisors_stay_without_fast_math(c, rng):
    check_rewrite(div_graph(c), "div-pow2-to-mul", ["Div", "Relu"], rng, fires=False)


def test_integer_division_stays(rng):
    check_rewrite(div_graph(2, "int32"), "div-pow2-to-mul", ["Div", "Relu"], rng, fires=False)


def test_division_by_constant_with_fast_math(rng):
    check_rewrite(div_graph(3.0), "div-const-to-mul", ["Mul", "Relu"], rng, fast_math=True, exact=False,
                  rtol=2.5e-7, atol=0)
    check_rewrite(div_graph(0.0), "div-const-to-mul", ["Div", "Relu"], rng, fires=False, fast_math=True)


def chain(op, c1, c2, inner_used=False):
    g = tlc.Graph("chain")
    x = g.input("x", "float32", ("N", 4))
    inner = g.add_node(op, [x, g.constant(np.float32(c1))])
    g.output(g.add_node(op, [g.constant(np.asarray(c2, np.float32)), inner]), "y")
    if inner_used:
        g.output(inner, "inner")
    return g


@pytest.mark.parametrize("op, rule", [("Mul", "mul-const-reassoc"), ("Add", "add-const-reassoc")])
def test_reassociation_needs_fast_math(op, rule, rng):
    g = chain(op, 3.0, [0.1, 7.0, -2.0, 5.0])
    check_rewrite(g, rule, [op, op], rng, fires=False)
    after = check_rewrite(g, rule, [op], rng, fast_math=True, exact=False, rtol=5e-7, atol=1e-6)
    const = after.const_value(after.inputs_of(after.ops()[0])[1])
    assert const.shape == (4,) and const.dtype == np.float32
    check_rewrite(chain(op, 3.0, 2.0, inner_used=True), rule, [op, op], rng, fires=False, fast_math=True)
