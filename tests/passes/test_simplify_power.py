"""simplify, rule set ``power``: exact strength reductions at -O1 (bit-identical, specials included), the
rounding-changing ones only with fast_math, and no rewrite for a non-constant or broadcasting exponent."""

from __future__ import annotations

import numpy as np
import pytest

import tlc

try:
    from .simplify_testlib import check_rewrite, ops, simplify
except ImportError:
    from simplify_testlib import check_rewrite, ops, simplify


def pow_graph(exponent, dtype="float32", shape=("N", 4), exp_dtype=None):
    g = tlc.Graph("t")
    x = g.input("x", dtype, shape)
    e = g.constant(np.asarray(exponent, exp_dtype or dtype)) if not isinstance(exponent, str) else \
        g.input(exponent, dtype, ())
    g.output(g.add_node("Relu", [g.add_node("Pow", [x, e])]), "y")
    return g


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("exponent, rule, after", [
    (1.0, "pow-one", []),
    (2.0, "pow-two", ["Mul"]),
    (-1.0, "pow-minus-one", ["Reciprocal"]),
])
def test_exact_reductions_are_bit_identical(exponent, rule, after, dtype, rng):
    check_rewrite(pow_graph(exponent, dtype), rule, after + ["Relu"], rng, opt_level=1)


@pytest.mark.parametrize("exponent, rule, after", [(1, "pow-one", []), (2, "pow-two", ["Mul"])])
def test_integer_base_with_integer_exponent(exponent, rule, after, rng):
    check_rewrite(pow_graph(exponent, "int32", exp_dtype="int64"), rule, after + ["Relu"], rng)


def test_integer_reciprocal_stays():
    """int ** -1 is an error in numpy's reference (there is nothing to compare); the rule is for floats only."""
    after, stats = simplify(pow_graph(-1, "int32", exp_dtype="int64"))
    assert ops(after) == ["Pow", "Relu"] and not stats


def test_integer_base_with_float_exponent_stays(rng):
    """int ** 2.0 goes through float and back in the reference; x*x wraps: not the same on overflow."""
    check_rewrite(pow_graph(2.0, "int32", exp_dtype="float32"), "pow-two", ["Pow", "Relu"], rng, fires=False)


def test_pow_zero_needs_a_static_shape(rng):
    after = check_rewrite(pow_graph(0.0, shape=(3, 4)), "pow-zero", ["Relu"], rng)
    relu = after.ops()[0]
    np.testing.assert_array_equal(after.const_value(after.inputs_of(relu)[0]), np.ones((3, 4), np.float32))
    check_rewrite(pow_graph(0.0), "pow-zero", ["Pow", "Relu"], rng, fires=False)


def test_non_constant_exponent_stays(rng):
    check_rewrite(pow_graph("e"), "pow-two", ["Pow", "Relu"], rng, fires=False)


def test_broadcasting_exponent_stays(rng):
    g = tlc.Graph("t")
    x = g.input("x", "float32", (3, 4))
    g.output(g.add_node("Pow", [x, g.constant(np.full((2, 1, 1), 2.0, np.float32))]), "y")
    check_rewrite(g, "pow-two", ["Pow"], rng, fires=False)
    g2 = tlc.Graph("t")
    x = g2.input("x", "float32", (3, 4))
    g2.output(g2.add_node("Pow", [x, g2.constant(np.array([2.0, 2.0, 3.0, 2.0], np.float32))]), "y")
    check_rewrite(g2, "pow-two", ["Pow"], rng, fires=False)


@pytest.mark.parametrize("exponent, rule, after", [
    (3.0, "pow-three", ["Mul", "Mul"]),
    (0.5, "pow-half", ["Sqrt"]),
    (-0.5, "pow-minus-half", ["Sqrt", "Reciprocal"]),
])
def test_rounding_changing_reductions_need_fast_math(exponent, rule, after, rng):
    g = pow_graph(exponent)
    kept, stats = simplify(g, opt_level=3)
    assert ops(kept) == ["Pow", "Relu"] and not stats
    check_rewrite(g, rule, after + ["Relu"], rng, fast_math=True, exact=False, specials=False, rtol=3e-7, atol=0)


def test_pow_half_differs_from_sqrt_at_minus_inf_and_minus_zero():
    """Why pow-half is fast-math only: IEEE pow (onnxruntime) gives pow(-inf, 0.5) = +inf, pow(-0, 0.5) = +0;
    Sqrt gives nan and -0. (numpy's power with a 0-d exponent of 0.5 takes a sqrt fast path, so the oracle
    here is onnxruntime, not the reference executor.)"""
    import onnxruntime as ort
    from onnx import helper

    node = helper.make_node("Pow", ["x", "e"], ["y"])
    model = helper.make_model(helper.make_graph(
        [node], "pow", [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])],
        [helper.make_tensor("e", 1, [], [0.5])]), opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feed = {"x": np.array([-np.inf, -0.0], np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    g = tlc.Graph("t")
    x = g.input("x", "float32", (2,))
    g.output(g.add_node("Pow", [x, g.constant(np.float32(0.5))]), "y")
    after, _ = simplify(g, fast_math=True)
    assert ops(after) == ["Sqrt"]
    got = tlc.reference.run(after, feed)["y"]
    assert want[0] == np.inf and np.isnan(got[0])
    assert not np.signbit(want[1]) and np.signbit(got[1])
