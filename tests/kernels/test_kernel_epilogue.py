"""Epilogue groups: the split after the contraction (structure and numbers) and their compiled functions."""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest
from kernel_helpers import compile_for, random_array

from tlc.errors import CompileError
from tlc.ir import Graph, TensorType
from tlc.kernels import KernelOptions, compile_group, epilogue_inputs, gemm, panel, split_epilogue
from tlc.kernels.common import Contraction
from tlc.kernels.epilogue import EpilogueKernel
from tlc.kernels.plan import build_plan, typed_body
from tlc.reference import run_graph


def matmul_bias_relu_residual(with_constant_weight: bool, cols: int = 16) -> Graph:
    """relu(x @ w + bias) + residual, with the weight [32, cols] an input or a constant of the body."""
    g = Graph("epi")
    x = g.input("x", "float32", ("N", 32))
    rng = np.random.default_rng(0)
    w = (
        g.constant(random_array(rng, (32, cols), "float32"))
        if with_constant_weight
        else g.input("w", "float32", (32, cols))
    )
    bias = g.input("bias", "float32", (cols,))
    residual = g.input("residual", "float32", ("N", cols))
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


GEMM_PART = Contraction("tlc.kernels.gemm", "gemm_part", before=2, after=4)


def epilogue_kernel(body: Graph, rows: int, kcache, parallel: bool, in_place: bool) -> EpilogueKernel:
    _, rest = split_epilogue(body)
    types = [n.output_types[0] for n in rest.inputs]
    types = [TensorType(t.dtype, tuple(rows if d == "N" else d for d in t.shape)) for t in types]
    t = numba.types
    f32 = t.Array(t.float32, 2, "C")
    contraction_types = (f32, f32, f32, t.int64[:, ::1], t.float64, t.boolean, t.float32[::1])
    plan = build_plan(typed_body(rest, types), "elementwise")
    return EpilogueKernel(plan, KernelOptions(), kcache, GEMM_PART, contraction_types, parallel,
                          alias=(0,) if in_place else None)


@pytest.mark.parametrize("parallel", [False, True])
def test_epilogue_kernel_runs_each_part_then_its_epilogue(kcache, parallel):
    """The compiled epilogue function: BLAS parts by rows (epilogue on each part) or by columns (epilogue after
    them all), in place in the product's buffer or into an output of its own, with B on BLAS or packed in
    panels (40 columns: one panel and eight on BLAS; 9 rows: a tile of six and one of three), against the
    reference."""
    n = 40
    body = matmul_bias_relu_residual(with_constant_weight=False, cols=n)
    rng = np.random.default_rng(3)
    rows = 9
    x, w = random_array(rng, (rows, 32), "float32"), random_array(rng, (32, n), "float32")
    bias, residual = random_array(rng, (n,), "float32"), random_array(rng, (rows, n), "float32")
    (want,) = run_graph(body, [x, w, bias, residual])
    offs = gemm.batch_offsets(x.shape, x.strides, w.shape, w.strides, (rows, n), 4)
    for in_place in (True, False):
        kernel = epilogue_kernel(body, rows, kcache, parallel, in_place)
        assert kernel.kind == "epilogue" and "cm.gemm_part" in kernel.source
        dims = np.asarray(kernel.layout.dims((rows, n), [(rows, n), (n,), (rows, n)]), np.int64)
        for (nparts, cols), packed in itertools.product([(1, False), (3, False), (2, True)],
                                                        [gemm.UNPACKED, panel.pack(w)]):
            acc = np.full((rows, n), np.nan, np.float32)
            out = acc if in_place else np.full((rows, n), np.nan, np.float32)
            outs = () if in_place else (out.reshape(-1),)
            kernel.function(dims, rows * n, nparts, 0, cols, x, w, acc, offs, 1.0, cols, packed, acc.reshape(-1),
                            bias, residual.reshape(-1), *outs)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=f"{nparts} {cols} {packed.size}")


def test_epilogue_needs_a_leading_contraction(kcache):
    g = Graph("no")
    x = g.input("x", "float32", (4, 4))
    g.output(g.add_node("MatMul", [g.add_node("Relu", [x]), x]), "y")
    with pytest.raises(CompileError, match="contraction"):
        split_epilogue(g)
    with pytest.raises(CompileError, match="epilogue"):
        compile_group(g, "epilogue", [n.output_types[0] for n in g.inputs], cache=kcache)


def _product_plus(a, b, c=None):
    """a @ b plus a bias per row of the result (along axis 0)."""
    return a @ b if c is None else a @ b + c.reshape(-1, 1)


def _product_infer(ctx):
    return [TensorType(ctx.type(0).dtype, (ctx.shape(0)[0], ctx.shape(1)[1]))]


def test_a_newly_registered_bias_moves_with_no_other_table(monkeypatch):
    """A contraction declaring ``OpDef.bias`` (per output column: axis 1 of [M, N]) has it moved into the
    elementwise part, reshaped to broadcast along that axis, by the registry entry alone."""
    from tlc.ops import OpDef, Trait, registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # restored after the test
    registry.register(OpDef(name="ProductPlus", domain="test.bias", infer=_product_infer, reference=_product_plus,
                            inputs=(2, 3), traits=frozenset({Trait.PURE, Trait.CONTRACTION}), bias=(2, 0)))
    g = Graph("bias")
    x, w = g.input("x", "float32", (5, 8)), g.input("w", "float32", (8, 3))
    bias = g.input("bias", "float32", (5,))   # along axis 0 of the [5, 3] result: [5] becomes [5, 1]
    g.output(g.add_node("Relu", [g.add_node("ProductPlus", [x, w, bias], domain="test.bias")]), "y")
    head, rest = split_epilogue(g)
    assert [n.qualified_op for n in head.ops()] == ["test.bias.ProductPlus"]
    assert len(head.inputs_of(head.ops()[0])) == 2
    assert [n.op for n in rest.ops()] == ["Add", "Relu"]
    assert rest.inputs[1].name == "bias" and rest.inputs[1].output_types[0].shape == (5, 1)
    rng = np.random.default_rng(3)
    feeds = [random_array(rng, s, "float32") for s in ((5, 8), (8, 3), (5,))]
    (product,) = run_graph(head, feeds[:2])
    (split,) = run_graph(rest, [product, feeds[2].reshape(5, 1)])
    (whole,) = run_graph(g, feeds)
    np.testing.assert_allclose(split, whole, rtol=1e-6)


def test_register_refuses_a_bias_outside_a_contraction(monkeypatch):
    from tlc.ops import OpDef, Trait, registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(ValueError, match="a bias needs a contraction"):
        registry.register(OpDef(name="NotAProduct", domain="test.bias", infer=_product_infer,
                                reference=_product_plus, inputs=(2, 3), bias=(2, None)))
    with pytest.raises(ValueError, match="a bias needs a contraction"):   # port 2 must be an optional input
        registry.register(OpDef(name="NoSuchPort", domain="test.bias", infer=_product_infer,
                                reference=_product_plus, inputs=(2, 2), traits=frozenset({Trait.CONTRACTION}),
                                bias=(2, None)))
