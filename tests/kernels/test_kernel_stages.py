"""Elementwise kernels with several transcendentals run as staged loops over sub-blocks, and 1 + tanh(y) is
drawn as 2 * sigmoid(2y): both against the reference executor, in place and out of place, at every size."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import check_against_reference, compile_for, random_array

from tlc.ir import Graph
from tlc.kernels.cpu import STAGE_BLOCK, element_stages


def gelu_silu_residual(width) -> Graph:
    """x*a + b, tanh-GELU (the op the fusion pass makes of the written-out form), SiLU, residual add:
    elementwise_chain's body, with the GELU as a second output."""
    g = Graph("chain")
    x = g.input("x", "float32", ("N", width))
    a = g.input("a", "float32", (width,))
    b = g.input("b", "float32", (width,))
    gelu = g.add_node("Gelu", [g.add_node("Add", [g.add_node("Mul", [x, a]), b])], approximate="tanh")
    silu = g.add_node("Mul", [gelu, g.add_node("Sigmoid", [gelu])])
    g.output(g.add_node("Add", [silu, x]), "y")
    g.output(gelu, "gelu")   # computed in the first stage, stored in the last
    return g


def test_the_chain_is_cut_after_each_transcendental_but_the_last(kcache):
    kernel = compile_for(gelu_silu_residual(16), "elementwise", kcache)
    stages = element_stages(kernel.plan)
    assert len(stages) == 2
    assert "sc_" in kernel.source and "ml.tanh_f32" not in kernel.source   # 1 + tanh drawn as a sigmoid


@pytest.mark.parametrize("rows, width", [(1, 1), (3, 5), (2, STAGE_BLOCK + 3), (40, 1000)])
def test_staged_kernel_matches_reference(kcache, rows, width):
    body = gelu_silu_residual(width)
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(width)
    inputs = [random_array(rng, (rows, width), "float32", scale=4.0), random_array(rng, (width,), "float32"),
              random_array(rng, (width,), "float32")]
    check_against_reference(kernel, body, inputs, tolerance=(1e-5, 1e-6))


def test_staged_kernel_in_place_reads_its_input_in_every_stage(kcache):
    """The residual reads x in the last stage: stores come after every stage's reads of a sub-block."""
    body = gelu_silu_residual(STAGE_BLOCK * 2 + 7)
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(5)
    x = random_array(rng, (6, STAGE_BLOCK * 2 + 7), "float32", scale=3.0)
    a, b = random_array(rng, (x.shape[1],), "float32"), random_array(rng, (x.shape[1],), "float32")
    expected = check_against_reference(kernel, body, [x.copy(), a, b])
    gelu = np.empty_like(x)
    kernel([x, a, b], [x, gelu])
    np.testing.assert_array_equal(x, expected[0])
    np.testing.assert_array_equal(gelu, expected[1])


def test_one_plus_tanh_keeps_its_value_where_the_sum_cancels(kcache):
    """GELU's 0.5 * y * (1 + tanh(u)) drawn as y * sigmoid(2u): accurate where 1 + tanh(u) cancels (y << 0)."""
    g = Graph("gelu")
    y = g.input("y", "float32", ("N",))
    g.output(g.add_node("Gelu", [y], approximate="tanh"), "out")
    kernel = compile_for(g, "elementwise", kcache)
    assert "sigmoid_f32" in kernel.source and "tanh_f32" not in kernel.source
    y = np.array([-40.0, -9.0, -5.0, -3.0, -0.5, -1e-8, 0.0, 1e-3, 2.0, 20.0, np.inf, -np.inf, np.nan], np.float32)
    out = np.empty_like(y)
    kernel([y], [out])
    y64 = y.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        u = np.sqrt(2 / np.pi) * (y64 + 0.044715 * y64**3)
        exact = y64 / (1 + np.exp(-2 * u))   # 0.5 * (1 + tanh(u)) in float64 without its cancellation
    finite = np.isfinite(y)
    np.testing.assert_allclose(out[finite], exact[finite], rtol=1e-5, atol=0)   # the tanh form gives 0 at -9
    assert out[-3] == np.inf and np.isnan(out[-2]) and np.isnan(out[-1])   # -inf * 0, as the tanh form gives
