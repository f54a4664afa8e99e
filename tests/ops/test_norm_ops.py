"""Normalisations: ONNX backend cases, onnxruntime on random inputs (ranks, axes, symbolic batch), errors."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types, run_ort, run_tlc, single_node_model

import tlc
from tests.onnx_cases import cases_for

NORM_OPS = ("BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LRN",
            "LpNormalization", "MeanVarianceNormalization")
KNOWN_FAILURES: dict = {}


@pytest.mark.parametrize("case", cases_for(*NORM_OPS), ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, KNOWN_FAILURES)


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_batch_norm_matches_onnxruntime(rng, shape):
    c = shape[1]
    inputs = {"x": _rand(rng, *shape), "scale": _rand(rng, c), "bias": _rand(rng, c), "mean": _rand(rng, c),
              "var": rng.random(c, dtype=np.float32) + 0.1}
    dims = {"x": ("N",) + shape[1:]}
    g = check_against_ort("BatchNormalization", inputs, dict(epsilon=1e-3), dims=dims, rtol=1e-5, atol=1e-5)
    assert output_types(g)[0].shape == dims["x"]


def test_batch_norm_training_mode_matches_onnxruntime(rng):
    c = 3
    inputs = {"x": _rand(rng, 2, c, 4, 5), "scale": _rand(rng, c), "bias": _rand(rng, c), "mean": _rand(rng, c),
              "var": rng.random(c, dtype=np.float32) + 0.1}
    model = single_node_model("BatchNormalization", inputs, dict(training_mode=1, momentum=0.8), outputs=3,
                              opset=15)
    feeds = dict(inputs)
    want = run_ort(model, feeds)
    g, have = run_tlc(model, feeds)
    for h, w in zip(have, want):
        np.testing.assert_allclose(h, w, rtol=1e-5, atol=1e-5)
    assert [t.shape for t in output_types(g)] == [(2, c, 4, 5), (c,), (c,)]


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_norm_all_outputs_match_onnxruntime(rng, axis, with_bias):
    shape = (3, 4, 6)
    norm_shape = shape[axis % 3:]
    inputs = {"x": _rand(rng, *shape) * 3 + 1, "scale": _rand(rng, *norm_shape),
              "bias": _rand(rng, *norm_shape) if with_bias else None}
    g = check_against_ort("LayerNormalization", inputs, dict(axis=axis, epsilon=1e-4), outputs=3,
                          dims={"x": ("N", 4, 6)} if axis != 0 else None, rtol=1e-5, atol=1e-5)
    if axis != 0:
        stats = ("N",) + tuple(4 if i < axis % 3 else 1 for i in (1, 2))
        assert [t.shape for t in output_types(g)] == [("N", 4, 6), stats, stats]


def test_layer_norm_float16_keeps_float32_statistics(rng):
    inputs = {"x": _rand(rng, 2, 8, dtype=np.float16), "scale": _rand(rng, 8, dtype=np.float16)}
    g = check_against_ort("LayerNormalization", inputs, outputs=3, rtol=2e-3, atol=2e-3)
    assert [t.dtype for t in output_types(g)] == ["float16", "float32", "float32"]


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 3)])
def test_instance_norm_matches_onnxruntime(rng, shape):
    inputs = {"x": _rand(rng, *shape) * 2 + 3, "scale": _rand(rng, shape[1]), "bias": _rand(rng, shape[1])}
    check_against_ort("InstanceNormalization", inputs, dict(epsilon=1e-4), dims={"x": ("N",) + shape[1:]},
                      rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm_matches_onnxruntime(rng, groups):
    inputs = {"x": _rand(rng, 2, 6, 4, 3) + 1, "scale": _rand(rng, 6), "bias": _rand(rng, 6)}
    check_against_ort("GroupNormalization", inputs, dict(num_groups=groups, epsilon=1e-4), rtol=1e-4, atol=1e-5)


def test_group_norm_opset18_per_group_scale_matches_onnxruntime(rng):
    """onnx's version converter keeps opset 18's per-group scale and bias; tlc applies them per group."""
    inputs = {"x": _rand(rng, 2, 6, 3, 3), "scale": _rand(rng, 3), "bias": _rand(rng, 3)}
    model = single_node_model("GroupNormalization", inputs, dict(num_groups=3), opset=18)
    (want,) = run_ort(model, inputs)
    _, (got,) = run_tlc(model, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_onnxruntime(rng, size):
    inputs = {"x": _rand(rng, 2, 7, 5, 4) * 4}
    check_against_ort("LRN", inputs, dict(size=size, alpha=1e-2, beta=0.6, bias=2.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_even_size_follows_the_spec(rng, size):
    """onnxruntime refuses even sizes; the oracle is the spec's formula, one channel at a time in float64."""
    x = _rand(rng, 2, 6, 3, 3)
    alpha, beta, bias = 1e-2, 0.6, 2.0
    want = np.empty(x.shape)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + -(-(size - 1) // 2))
        square_sum = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
        want[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    got = tlc.ops.get("LRN").run_reference([x], dict(size=size, alpha=alpha, beta=beta, bias=bias))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization_matches_onnxruntime(rng, p, axis):
    x = _rand(rng, 3, 4, 5)
    check_against_ort("LpNormalization", {"x": x}, dict(p=p, axis=axis), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axes", [None, [1], [2, 3], [0, 1, 2, 3]])
def test_mean_variance_normalization_matches_onnxruntime(rng, axes):
    attrs = {} if axes is None else {"axes": axes}
    check_against_ort("MeanVarianceNormalization", {"x": _rand(rng, 2, 3, 4, 5) * 2 + 1}, attrs, rtol=1e-4,
                      atol=1e-5)


def test_norm_errors_name_node_and_dims():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 4, 8, 8))
    vec3 = g.constant(np.ones(3, np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="'bn'.*input 1 is float32\\[3\\], expected shape \\[4\\]"):
        g.add_node("BatchNormalization", [x, vec3, vec3, vec3, vec3], name="bn")
    vec4 = g.constant(np.ones(4, np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="'gn'.*num_groups 3 does not divide the 4 channels"):
        g.add_node("GroupNormalization", [x, vec4, vec4], num_groups=3, name="gn")
    with pytest.raises(tlc.ShapeInferenceError, match="'ln'.*axis 4 is out of range for rank 4"):
        g.add_node("LayerNormalization", [x, vec4], axis=4, name="ln")
    with pytest.raises(tlc.ShapeInferenceError, match="'ln4'.*4 outputs; LayerNormalization has at most 3"):
        g.add_node("LayerNormalization", [x, vec4], num_outputs=4, name="ln4")
    ints = g.input("i", "int64", (2, 3))
    with pytest.raises(tlc.ShapeInferenceError, match="'lp'.*dtype int64"):
        g.add_node("LpNormalization", [ints], name="lp")


def test_norm_traits():
    T = tlc.ops.Trait
    for op in NORM_OPS:
        opdef = tlc.ops.get(op)
        assert opdef.is_pure and opdef.is_foldable and opdef.doc
    for op in ("BatchNormalization", "InstanceNormalization", "LRN"):
        assert tlc.ops.get(op).has(T.LAYOUT_SENSITIVE)
    for op in ("LayerNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization"):
        assert tlc.ops.get(op).has(T.REDUCTION)
