"""Epilogue groups: the split after the contraction (structure and numbers) and whole epilogue kernels."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import check_against_reference, compile_for, random_array

from tlc.errors import CompileError
from tlc.ir import Graph
from tlc.kernels import compile_group, epilogue_inputs, split_epilogue
from tlc.reference import run_graph


def matmul_bias_relu_residual(with_constant_weight: bool) -> Graph:
    """relu(x @ w + bias) + residual, with the weight an input or a constant of the body."""
    g = Graph("epi")
    x = g.input("x", "float32", ("N", 32))
    rng = np.random.default_rng(0)
    w = (
        g.constant(random_array(rng, (32, 16), "float32"))
        if with_constant_weight
        else g.input("w", "float32", (32, 16))
    )
    bias = g.input("bias", "float32", (16,))
    residual = g.input("residual", "float32", ("N", 16))
    y = g.add_node("Relu", [g.add_node("Add", [g.add_node("MatMul", [x, w]), bias])])
    g.output(g.add_node("Add", [y, residual]), "out")
    return g


def test_split_cuts_after_the_contraction():
    body = matmul_bias_relu_residual(with_constant_weight=False)
    head, rest = split_epilogue(body)
    assert [n.op for n in head.ops()] == ["MatMul"]
    assert [n.name for n in head.inputs] == ["x", "w"]
    assert [n.op for n in rest.ops()] == ["Add", "Relu", "Add"]
    assert [n.name for n in rest.inputs] == ["contraction", "bias", "residual"]
    assert [name for _, name in rest.outputs] == ["out"]
    assert epilogue_inputs(body) == ([0, 1], [2, 3])
    rng = np.random.default_rng(1)
    x, w = random_array(rng, (5, 32), "float32"), random_array(rng, (32, 16), "float32")
    bias, residual = random_array(rng, (16,), "float32"), random_array(rng, (5, 16), "float32")
    (product,) = run_graph(head, [x, w])
    (split,) = run_graph(rest, [product, bias, residual])
    (whole,) = run_graph(body, [x, w, bias, residual])
    np.testing.assert_allclose(split, whole, rtol=1e-6)


def test_runtime_style_in_place_epilogue(kcache):
    """The runtime's way: contraction into the output buffer, then the elementwise kernel in place."""
    body = matmul_bias_relu_residual(with_constant_weight=False)
    head, rest = split_epilogue(body)
    kernel = compile_for(rest, "elementwise", kcache)
    rng = np.random.default_rng(2)
    x, w = random_array(rng, (7, 32), "float32"), random_array(rng, (32, 16), "float32")
    bias, residual = random_array(rng, (16,), "float32"), random_array(rng, (7, 16), "float32")
    out = np.empty((7, 16), np.float32)
    np.matmul(x, w, out=out)
    kernel([out, bias, residual], [out])
    np.testing.assert_allclose(out, run_graph(body, [x, w, bias, residual])[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("with_constant_weight", [False, True])
def test_epilogue_kernel_matches_reference(kcache, with_constant_weight):
    body = matmul_bias_relu_residual(with_constant_weight)
    kernel = compile_for(body, "epilogue", kcache)
    assert kernel.kind == "epilogue"
    rng = np.random.default_rng(3)
    inputs = [random_array(rng, (9, 32), "float32")]
    if not with_constant_weight:
        inputs.append(random_array(rng, (32, 16), "float32"))
    inputs += [random_array(rng, (16,), "float32"), random_array(rng, (9, 16), "float32")]
    check_against_reference(kernel, body, inputs, tolerance=(1e-5, 1e-5))


def test_epilogue_needs_a_leading_contraction(kcache):
    g = Graph("no")
    x = g.input("x", "float32", (4, 4))
    g.output(g.add_node("MatMul", [g.add_node("Relu", [x]), x]), "y")
    with pytest.raises(CompileError, match="contraction"):
        compile_group(g, "epilogue", [n.output_types[0] for n in g.inputs], cache=kcache)
