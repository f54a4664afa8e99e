"""Conv and ConvTranspose: ONNX backend cases, onnxruntime on shapes the cases miss, inference and errors."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types, run_tlc, single_node_model
from onnx.reference import ReferenceEvaluator

import tlc
from tests.onnx_cases import cases_for

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("case", cases_for("Conv", "ConvTranspose"), ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


CONV_CASES = {
    "asym_pads_stride_dilation": ((2, 3, 11, 10), (5, 3, 3, 2), dict(pads=[1, 0, 2, 1], strides=[2, 1],
                                                                     dilations=[1, 2])),
    "grouped": ((1, 8, 9, 9), (12, 2, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    "depthwise_same_upper_stride2": ((2, 6, 10, 7), (6, 1, 3, 3), dict(group=6, strides=[2, 2],
                                                                        auto_pad="SAME_UPPER")),
    "same_lower_even_kernel": ((1, 3, 8, 9), (4, 3, 4, 4), dict(strides=[2, 3], auto_pad="SAME_LOWER")),
    "valid_1d_dilated": ((2, 4, 20), (3, 4, 3), dict(dilations=[2], strides=[3], auto_pad="VALID")),
    "conv_3d_group2": ((1, 4, 5, 6, 7), (6, 2, 3, 2, 3), dict(group=2, pads=[1, 0, 1, 0, 1, 2])),
    "pointwise_stride2": ((2, 16, 9, 9), (8, 16, 1, 1), dict(strides=[2, 2])),
    "large_7x7_stride2": ((1, 3, 32, 32), (8, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
}


@pytest.mark.parametrize("name", CONV_CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_matches_onnxruntime(rng, name, with_bias):
    xs, ws, attrs = CONV_CASES[name]
    inputs = {"x": _rand(rng, *xs), "w": _rand(rng, *ws), "b": _rand(rng, ws[0]) if with_bias else None}
    check_against_ort("Conv", inputs, attrs, rtol=1e-4, atol=1e-4)


def test_conv_symbolic_batch_flows_through(rng):
    inputs = {"x": _rand(rng, 3, 4, 9, 9), "w": _rand(rng, 6, 4, 3, 3), "b": _rand(rng, 6)}
    g = check_against_ort("Conv", inputs, dict(strides=[2, 2], pads=[1, 1, 1, 1]),
                          dims={"x": ("N", 4, 9, 9)}, rtol=1e-4, atol=1e-4)
    assert output_types(g)[0] == tlc.TensorType("float32", ("N", 6, 5, 5))


def test_conv_symbolic_spatial_dims():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 4, "H", "W"))
    w = g.constant(np.zeros((6, 4, 3, 3), np.float32))
    same = g.add_node("Conv", [x, w], auto_pad="SAME_UPPER")
    padded = g.add_node("Conv", [x, w], pads=[1, 1, 1, 1])
    strided = g.add_node("Conv", [x, w], strides=[2, 2], pads=[1, 1, 1, 1])
    assert g.type_of(same).shape == ("N", 6, "H", "W")
    assert g.type_of(padded).shape == ("N", 6, "H", "W")
    assert g.type_of(strided).shape == ("N", 6, None, None)


def test_conv_weight_channel_mismatch_names_node_and_dims():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 3, 32, 32))
    w = g.constant(np.zeros((8, 4, 3, 3), np.float32))
    with pytest.raises(tlc.ShapeInferenceError) as info:
        g.add_node("Conv", [x, w], name="stem_conv")
    message = str(info.value)
    assert "'stem_conv'" in message and "Conv" in message
    assert "3 channels" in message and "4 channels per group" in message and "group 1" in message


def test_conv_group_must_divide_output_channels():
    g = tlc.Graph()
    x = g.input("x", "float32", (1, 4, 8, 8))
    w = g.constant(np.zeros((6, 1, 3, 3), np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="6 output channels.*group 4"):
        g.add_node("Conv", [x, w], group=4, name="bad_group")


def test_conv_kernel_larger_than_input_is_an_inference_error():
    g = tlc.Graph()
    x = g.input("x", "float32", (1, 1, 2, 2))
    w = g.constant(np.zeros((1, 1, 3, 3), np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="larger than the padded input"):
        g.add_node("Conv", [x, w], name="too_big")


def test_conv_bad_attribute_lengths_are_named():
    g = tlc.Graph()
    x = g.input("x", "float32", (1, 1, 8, 8))
    w = g.constant(np.zeros((1, 1, 3, 3), np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="strides has 1 values, expected 2"):
        g.add_node("Conv", [x, w], strides=[2])
    with pytest.raises(tlc.ShapeInferenceError, match="auto_pad 'SAME'"):
        g.add_node("Conv", [x, w], auto_pad="SAME")
    # both: ONNX forbids it, and onnxruntime pools by the pads where the spec's SAME formula ignores them
    with pytest.raises(tlc.ShapeInferenceError, match=r"pads \[0, 1, 0, 0\] cannot be used with auto_pad"):
        g.add_node("MaxPool", [x], auto_pad="SAME_LOWER", kernel_shape=[2, 2], pads=[0, 1, 0, 0])
    g.add_node("AveragePool", [x], auto_pad="VALID", kernel_shape=[2, 2], pads=[0, 0, 0, 0])   # zeros are fine


CONV_T_CASES = {
    "stride2_asym_pads_output_padding": ((1, 3, 5, 4), (3, 2, 3, 3), dict(strides=[2, 2], pads=[1, 0, 0, 1],
                                                                           output_padding=[1, 1])),
    "group2_dilation2_stride3": ((2, 4, 4, 5), (4, 3, 2, 3), dict(group=2, dilations=[2, 2], strides=[3, 2])),
    "output_shape_odd_total": ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[2, 2], output_shape=[10, 10])),
    "output_shape_bigger": ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[2, 2], output_shape=[12, 12])),
    "same_upper": ((1, 2, 5, 6), (2, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    "same_lower": ((1, 2, 5, 6), (2, 3, 4, 3), dict(strides=[2, 3], auto_pad="SAME_LOWER")),
    "depthwise_1d": ((2, 4, 7), (4, 1, 3), dict(group=4, strides=[2], pads=[1, 2])),
    "conv_t_3d": ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 1])),
}


@pytest.mark.parametrize("name", CONV_T_CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_transpose_matches_onnxruntime(rng, name, with_bias):
    xs, ws, attrs = CONV_T_CASES[name]
    m = ws[1] * attrs.get("group", 1)
    inputs = {"x": _rand(rng, *xs), "w": _rand(rng, *ws), "b": _rand(rng, m) if with_bias else None}
    check_against_ort("ConvTranspose", inputs, attrs, rtol=1e-4, atol=1e-4)


def test_conv_transpose_symbolic_batch(rng):
    inputs = {"x": _rand(rng, 2, 3, 4, 4), "w": _rand(rng, 3, 5, 3, 3)}
    g = check_against_ort("ConvTranspose", inputs, dict(strides=[2, 2]), dims={"x": ("N", 3, 4, 4)},
                          rtol=1e-4, atol=1e-4)
    assert output_types(g)[0] == tlc.TensorType("float32", ("N", 5, 9, 9))


def test_conv_transpose_channel_mismatch():
    g = tlc.Graph()
    x = g.input("x", "float32", (1, 3, 4, 4))
    w = g.constant(np.zeros((2, 5, 3, 3), np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="'up'.*3 channels.*2 input channels"):
        g.add_node("ConvTranspose", [x, w], name="up")


def test_conv_float64_matches_onnx_reference_evaluator(rng):
    """onnxruntime has no float64 Conv; onnx's own ReferenceEvaluator is the oracle here."""
    inputs = {"x": rng.standard_normal((1, 4, 7, 6)), "w": rng.standard_normal((6, 2, 3, 2))}
    attrs = dict(group=2, pads=[1, 0, 1, 1], strides=[2, 1])
    model = single_node_model("Conv", inputs, attrs)
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    _, (got,) = run_tlc(model, inputs)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_registry_traits():
    for op in ("Conv", "ConvTranspose"):
        opdef = tlc.ops.get(op)
        assert opdef.has(tlc.ops.Trait.CONTRACTION) and opdef.has(tlc.ops.Trait.LAYOUT_SENSITIVE)
        assert opdef.is_pure and opdef.is_foldable and opdef.doc
