"""``Kernel.launcher``: the runtime's per-shape fast path gives the numbers ``Kernel.__call__`` gives, computes in
place when an output is an input, and picks the parallel function by the estimated work."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import check_against_reference, compile_for, random_array

from tlc.errors import ShapeMismatchError
from tlc.ir import Graph
from tlc.kernels import KernelOptions
from tlc.kernels.kernel import PARALLEL_MIN_ELEMENTS, parallel_threshold


def bias_relu(width: int = 64) -> Graph:
    g = Graph("bias_relu")
    x = g.input("x", "float32", ("N", width))
    b = g.input("b", "float32", (width,))
    g.output(g.add_node("Relu", [g.add_node("Add", [x, b])]), "y")
    return g


def gelu_silu() -> Graph:
    g = Graph("gelu_silu")
    x = g.input("x", "float32", ("N", 32))
    t = g.add_node("Gelu", [x], approximate="tanh")
    g.output(g.add_node("Mul", [t, g.add_node("Sigmoid", [t])]), "y")
    return g


@pytest.mark.parametrize("rows", [1, 7, 3000])  # 3000 x 64 elements run the parallel function
def test_launcher_matches_the_reference_and_call(kcache, rows):
    body = bias_relu()
    kernel = compile_for(body, "elementwise", kcache, options=KernelOptions(num_threads=2))
    rng = np.random.default_rng(rows)
    x, b = random_array(rng, (rows, 64), "float32"), random_array(rng, (64,), "float32")
    launch = kernel.launcher([x.shape, b.shape], [x.shape])
    assert launch.parallel == (rows * 64 >= parallel_threshold(kernel.plan))
    expected = check_against_reference(kernel, body, [x, b])[0]
    out = np.full_like(x, np.nan)
    launch([x, b], [out])
    np.testing.assert_array_equal(out, expected)


def test_launcher_computes_in_place_when_the_output_is_the_input(kcache):
    body = bias_relu()
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(3)
    x, b = random_array(rng, (9, 64), "float32"), random_array(rng, (64,), "float32")
    expected = np.maximum(x + b, 0)
    launch = kernel.launcher([x.shape, b.shape], [x.shape])
    launch([x, b], [x])
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    assert (0,) in launch._functions  # the in-place variant ran: one pointer read and written


def test_launcher_checks_shapes_once_when_made(kcache):
    kernel = compile_for(bias_relu(), "elementwise", kcache)
    with pytest.raises(ShapeMismatchError, match="output 0 has shape"):
        kernel.launcher([(4, 64), (64,)], [(4, 63)])
    with pytest.raises(ShapeMismatchError, match="do not broadcast"):
        kernel.launcher([(4, 64), (65,)], [(4, 64)])


def test_costly_elements_go_parallel_sooner(kcache):
    cheap = compile_for(bias_relu(), "elementwise", kcache).plan
    costly = compile_for(gelu_silu(), "elementwise", kcache).plan
    assert parallel_threshold(cheap) == PARALLEL_MIN_ELEMENTS
    assert parallel_threshold(costly) < parallel_threshold(cheap)
