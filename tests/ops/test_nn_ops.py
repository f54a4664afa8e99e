"""MatMul, Gemm, Einsum and the softmax family: backend cases, onnxruntime on random inputs, inference."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types

import tlc
from tests.onnx_cases import cases_for

NN_OPS = ("MatMul", "Gemm", "Einsum", "Softmax", "LogSoftmax", "Hardmax")
KNOWN_FAILURES: dict = {}


@pytest.mark.parametrize("case", cases_for(*NN_OPS), ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, KNOWN_FAILURES)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


GEMM_CASES = {
    "plain": ((4, 5), (5, 3), None, {}),
    "trans_both_alpha_beta": ((5, 4), (3, 5), (4, 3), dict(transA=1, transB=1, alpha=0.5, beta=-2.0)),
    "row_bias": ((4, 5), (5, 3), (3,), dict(beta=0.25)),
    "column_bias": ((4, 5), (3, 5), (4, 1), dict(transB=1)),
    "scalar_bias": ((4, 5), (5, 3), (), dict(alpha=3.0)),
    "beta_zero": ((4, 5), (5, 3), (4, 3), dict(beta=0.0)),
}


@pytest.mark.parametrize("name", GEMM_CASES)
def test_gemm_matches_onnxruntime(rng, name):
    a, b, c, attrs = GEMM_CASES[name]
    inputs = {"a": _rand(rng, *a), "b": _rand(rng, *b), "c": None if c is None else _rand(rng, *c)}
    dims = {"a": ("M", a[1]) if not attrs.get("transA") else (a[0], "M")}
    if c is not None and len(c) == 2 and c[0] != 1:
        dims = {}
    g = check_against_ort("Gemm", inputs, attrs, dims=dims, rtol=1e-5, atol=1e-5)
    if dims:
        assert output_types(g)[0].shape == ("M", b[0] if attrs.get("transB") else b[1])


def test_gemm_inference_errors():
    g = tlc.Graph()
    a = g.input("a", "float32", ("M", 5))
    b = g.constant(np.zeros((4, 3), np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="'fc'.*K = 5 and 4"):
        g.add_node("Gemm", [a, b], name="fc")
    b = g.constant(np.zeros((5, 3), np.float32))
    c = g.constant(np.zeros((2, 3), np.float32))
    assert g.type_of(g.add_node("Gemm", [a, b, c])).shape == ("M", 3)  # fine when M is 2: not refused
    a = g.input("a4", "float32", (4, 5))
    with pytest.raises(tlc.ShapeInferenceError, match="'fc2'.*C float32\\[2,3\\] does not broadcast"):
        g.add_node("Gemm", [a, b, c], name="fc2")


EINSUM_CASES = {
    "batch_matmul": ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    "ellipsis_matmul": ("...ij,...jk", [(2, 3, 4), (1, 4, 5)]),
    "implicit_output": ("ij,jk", [(3, 4), (4, 5)]),
    "outer_transpose": ("i,j->ji", [(3,), (4,)]),
    "trace_like_sum": ("ij->", [(3, 3)]),
    "three_operands": ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    "spaces_and_broadcast": ("b i j , b j -> b i", [(2, 3, 4), (2, 4)]),
}


@pytest.mark.parametrize("name", EINSUM_CASES)
def test_einsum_matches_onnxruntime_and_infers_shape(rng, name):
    equation, shapes = EINSUM_CASES[name]
    inputs = {f"x{i}": _rand(rng, *s) for i, s in enumerate(shapes)}
    check_against_ort("Einsum", inputs, dict(equation=equation), rtol=1e-5, atol=1e-5)


def test_einsum_symbolic_inference():
    g = tlc.Graph()
    q = g.input("q", "float32", ("B", "H", "S", 64))
    k = g.input("k", "float32", ("B", "H", "T", 64))
    scores = g.add_node("Einsum", [q, k], equation="bhsd,bhtd->bhst")
    assert g.type_of(scores).shape == ("B", "H", "S", "T")
    ell = g.add_node("Einsum", [q, k], equation="...sd,...td")
    assert g.type_of(ell).shape == ("B", "H", "S", "T")
    with pytest.raises(tlc.ShapeInferenceError, match="'bad'.*2 input terms for 1 inputs"):
        g.add_node("Einsum", [q], equation="ij,jk->ik", name="bad")
    with pytest.raises(tlc.ShapeInferenceError, match="label 'd' has sizes 64 and 32"):
        g.add_node("Einsum", [q, g.input("v", "float32", (1, 1, 5, 32))], equation="bhsd,bhtd->bhst")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_matches_onnxruntime(rng, op, axis):
    x = _rand(rng, 3, 4, 5) * 10
    x[0, 0, :2] = x[0, 0].max() + 1  # ties: Hardmax picks the first
    check_against_ort(op, {"x": x}, dict(axis=axis), dims={"x": ("N", 4, 5)}, rtol=1e-5, atol=1e-6)


def test_traits():
    T = tlc.ops.Trait
    for op in ("MatMul", "Gemm", "Einsum"):
        assert tlc.ops.get(op).has(T.CONTRACTION)
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        assert tlc.ops.get(op).has(T.REDUCTION)
    for op in NN_OPS:
        opdef = tlc.ops.get(op)
        assert opdef.is_pure and opdef.is_foldable and opdef.doc
