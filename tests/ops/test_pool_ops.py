"""Pools: ONNX backend cases, onnxruntime on windows the cases miss (asymmetric pads, dilation with stride,
ceil_mode, count_include_pad, Indices with storage_order), symbolic dims and errors."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types, run_ort, run_tlc, single_node_model

import tlc
from tests.onnx_cases import cases_for

POOL_OPS = ("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")


@pytest.mark.parametrize("case", cases_for(*POOL_OPS), ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


WINDOWS = {
    "asym_pads_ceil": ((2, 3, 11, 10), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1)),
    "dilation_stride_ceil": ((1, 2, 13, 12), dict(kernel_shape=[3, 2], strides=[2, 3], dilations=[2, 2],
                                                  pads=[2, 1, 1, 0], ceil_mode=1)),
    "dilation_stride_floor": ((1, 2, 13, 12), dict(kernel_shape=[2, 3], strides=[3, 2], dilations=[3, 1])),
    "same_lower_stride2": ((1, 3, 9, 8), dict(kernel_shape=[4, 3], strides=[2, 2], auto_pad="SAME_LOWER")),
    "same_upper_stride3": ((2, 2, 10, 7), dict(kernel_shape=[3, 3], strides=[3, 3], auto_pad="SAME_UPPER")),
    "valid_1d": ((2, 3, 17), dict(kernel_shape=[4], strides=[3], auto_pad="VALID")),
    "pool_3d_ceil": ((1, 2, 7, 6, 5), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 2], pads=[1, 0, 0, 0, 1, 1],
                                           ceil_mode=1)),
    "resnet_stem": ((1, 4, 112, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
}


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_with_indices_matches_onnxruntime(rng, name, storage_order):
    shape, attrs = WINDOWS[name]
    x = rng.standard_normal(shape).astype(np.float32)
    check_against_ort("MaxPool", {"x": x}, {**attrs, "storage_order": storage_order}, outputs=2, rtol=0, atol=0)


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_matches_onnxruntime(rng, name, count_include_pad):
    shape, attrs = WINDOWS[name]
    x = rng.standard_normal(shape).astype(np.float32)
    check_against_ort("AveragePool", {"x": x}, {**attrs, "count_include_pad": count_include_pad}, rtol=1e-5,
                      atol=1e-6)


@pytest.mark.parametrize("name", ["asym_pads_ceil", "dilation_stride_floor", "valid_1d", "pool_3d_ceil"])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_onnxruntime(rng, name, p):
    shape, attrs = WINDOWS[name]
    x = rng.standard_normal(shape).astype(np.float32)
    check_against_ort("LpPool", {"x": x}, {**attrs, "p": p}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_max_pool_integers_match_onnxruntime(rng, dtype):
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 2, 7, 7), dtype=dtype)
    check_against_ort("MaxPool", {"x": x}, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                      rtol=0, atol=0)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools_symbolic_batch(rng, op):
    x = rng.standard_normal((3, 5, 6, 7)).astype(np.float32)
    g = check_against_ort(op, {"x": x}, dims={"x": ("N", 5, "H", "W")}, rtol=1e-5, atol=1e-6)
    assert output_types(g)[0] == tlc.TensorType("float32", ("N", 5, 1, 1))


def test_pools_symbolic_dims(rng):
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    g = check_against_ort("MaxPool", {"x": x}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), outputs=2,
                          dims={"x": ("N", 3, "H", "W")}, rtol=0, atol=0)
    assert output_types(g) == [tlc.TensorType("float32", ("N", 3, "H", "W")),
                               tlc.TensorType("int64", ("N", 3, "H", "W"))]
    g = check_against_ort("AveragePool", {"x": x}, dict(kernel_shape=[3, 3], strides=[2, 2]),
                          dims={"x": ("N", 3, "H", 9)})
    assert output_types(g)[0] == tlc.TensorType("float32", ("N", 3, None, 4))


def test_pool_errors_name_the_node():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 3, 8, 8))
    with pytest.raises(tlc.ShapeInferenceError, match="'pool1'.*2 spatial axes but kernel_shape \\[3\\] has 1"):
        g.add_node("MaxPool", [x], kernel_shape=[3], name="pool1")
    with pytest.raises(tlc.ShapeInferenceError, match="'pool2'.*larger than the padded input"):
        g.add_node("AveragePool", [x], kernel_shape=[9, 9], name="pool2")
    with pytest.raises(tlc.ShapeInferenceError, match="'pool3'.*required attribute 'kernel_shape'"):
        g.add_node("MaxPool", [x], name="pool3")


def test_pool_traits():
    for op in ("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool"):
        opdef = tlc.ops.get(op)
        assert opdef.has(tlc.ops.Trait.LAYOUT_SENSITIVE) and opdef.is_pure and opdef.doc
    assert tlc.ops.get("GlobalAveragePool").has(tlc.ops.Trait.REDUCTION)


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25])
def test_max_roi_pool_matches_onnxruntime(rng, scale):
    """RoIs inside, across and outside the map, one of a single pixel; corners at .5 after scaling."""
    x = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    rois = np.array([[0, 1, 1, 6, 8], [1, 0, 0, 9, 11], [1, 3.4, 2.6, 3.4, 2.6], [0, -2, -3, 4, 20],
                     [1, 8, 8, 30, 30], [0, 3, 5, 5, 7]], np.float32)
    model = single_node_model("MaxRoiPool", {"x": x, "rois": rois}, dict(pooled_shape=[3, 2], spatial_scale=scale))
    feeds = {"x": x, "rois": rois}
    (want,) = run_ort(model, feeds)
    g, (have,) = run_tlc(model, feeds)
    np.testing.assert_array_equal(have, want)
    assert output_types(g)[0].shape == (6, 3, 3, 2)
