"""simplify, rule set ``gemm``: MatMul + bias -> Gemm for 2-D A and 2-D constant B; everything else stays."""

from __future__ import annotations

import numpy as np
import pytest

import tlc

try:
    from .simplify_testlib import check_rewrite, temporary_ops
except ImportError:
    from simplify_testlib import check_rewrite, temporary_ops

RULE = "matmul-add-to-gemm"


@pytest.fixture(autouse=True, scope="module")
def _ops():
    with temporary_ops():
        yield


def linear(rng, a_shape=("N", 8), bias_shape=(5,), const_b=True, bias_first=False, const_bias=True):
    g = tlc.Graph("linear")
    a = g.input("a", "float32", a_shape)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    b = g.constant(w, name="w") if const_b else g.input("w", "float32", (8, 5))
    mm = g.add_node("MatMul", [a, b])
    if const_bias:
        bias = g.constant(rng.standard_normal(bias_shape).astype(np.float32), name="bias")
    else:
        bias = g.input("bias", "float32", bias_shape)
    g.output(g.add_node("Add", [bias, mm] if bias_first else [mm, bias]), "y")
    return g, mm


@pytest.mark.parametrize("bias_shape, bias_first, const_bias", [
    ((5,), False, True), ((1, 5), True, True), ((), False, True), (("N", 5), False, False), (("N", 1), True, False),
])
def test_matmul_bias_becomes_gemm(bias_shape, bias_first, const_bias, rng):
    g, _ = linear(rng, bias_shape=bias_shape, bias_first=bias_first, const_bias=const_bias)
    after = check_rewrite(g, RULE, ["Gemm"], rng)
    gemm = after.ops()[0]
    assert [after.value_name(v) for v in after.inputs_of(gemm)][:2] == ["a", "w"]
    assert after.value_name(after.outputs[0][0]) == "y"


@pytest.mark.parametrize("kwargs, why", [
    ({"a_shape": (2, "N", 8)}, "rank-3 A is kept as MatMul + Add (fusion applies the bias as an epilogue)"),
    ({"const_b": False}, "B is not a constant"),
    ({"bias_shape": (2, 1, 5)}, "the bias broadcasts the product to [2, N, 5]"),
])
def test_matmul_add_that_must_stay(kwargs, why, rng):
    g, _ = linear(rng, **kwargs)
    check_rewrite(g, RULE, ["MatMul", "Add"], rng, fires=False)


def test_matmul_used_elsewhere_stays(rng):
    g, mm = linear(rng)
    g.output(mm, "logits")
    check_rewrite(g, RULE, ["MatMul", "Add"], rng, fires=False)


def test_not_at_O1(rng):
    g, _ = linear(rng)
    check_rewrite(g, RULE, ["MatMul", "Add"], rng, fires=False, opt_level=1)
