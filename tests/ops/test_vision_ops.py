"""Vision and detection ops: ONNX backend cases, onnxruntime on random inputs, inferred shapes, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types, run_ort, run_tlc, single_node_model

import tlc
from tests import onnx_cases
from tlc.io.onnx import from_onnx

VISION_OPS = ("GridSample", "AffineGrid", "Col2Im", "DeformConv", "RoiAlign", "NonMaxSuppression")
CASES = onnx_cases.quick_cases_for(*VISION_OPS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.parametrize("name", ["test_gridsample_bicubic", "test_affine_grid_3d", "test_col2im_pads",
                                  "test_deform_conv_with_mask_bias", "test_roialign_mode_max",
                                  "test_nonmaxsuppression_two_batches"])
def test_backend_case_compiled(name):
    (case,) = [c for c in CASES if c.name == name]
    assert onnx_cases.run_case(case, onnx_cases.CompiledRunner(opt_level=2)) == (onnx_cases.PASS, "")


def _rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------------------- GridSample
@pytest.mark.parametrize("mode, padding_mode, align_corners",
                         list(itertools.product(["linear", "nearest", "cubic"], ["zeros", "border", "reflection"],
                                                [0, 1])))
def test_grid_sample_2d_matches_onnxruntime(rng, mode, padding_mode, align_corners):
    # positions reach well outside [-1, 1], so every padding rule (and repeated reflection) is exercised
    inputs = {"x": _rand(rng, 2, 3, 5, 6), "grid": rng.uniform(-1.6, 1.6, (2, 4, 7, 2)).astype(np.float32)}
    dims = {"x": ("N", 3, 5, 6), "grid": ("N", 4, 7, 2)}
    g = check_against_ort("GridSample", inputs, dict(mode=mode, padding_mode=padding_mode,
                                                      align_corners=align_corners), dims=dims)
    assert output_types(g)[0].shape == ("N", 3, 4, 7)


@pytest.mark.parametrize("mode, padding_mode", [("linear", "zeros"), ("linear", "reflection"),
                                                ("nearest", "border"), ("linear", "border")])
def test_grid_sample_3d_matches_onnxruntime(rng, mode, padding_mode):
    inputs = {"x": _rand(rng, 2, 2, 4, 5, 3), "grid": rng.uniform(-1.3, 1.3, (2, 3, 2, 4, 3)).astype(np.float32)}
    check_against_ort("GridSample", inputs, dict(mode=mode, padding_mode=padding_mode, align_corners=1))


def test_grid_sample_opset16_names_and_integer_nearest(rng):
    """Opset 16's bilinear is linear; an int64 X samples with nearest (a plain gather)."""
    inputs = {"x": _rand(rng, 1, 2, 4, 4), "grid": rng.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)}
    model = single_node_model("GridSample", inputs, dict(mode="bilinear"), opset=16)
    (want,) = run_ort(model, inputs)
    _, (got,) = run_tlc(model, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ints = {"x": rng.integers(-9, 9, (1, 2, 4, 4)), "grid": inputs["grid"]}
    got = tlc.ops.get("GridSample").run_reference(list(ints.values()), dict(mode="nearest"))[0]
    floats = tlc.ops.get("GridSample").run_reference([ints["x"].astype(np.float64), ints["grid"]],
                                                     dict(mode="nearest"))[0]
    assert got.dtype == np.int64 and np.array_equal(got, floats)


def test_grid_sample_integer_linear_is_refused_by_name():
    g = tlc.Graph()
    x, grid = g.input("x", "int32", (1, 1, 4, 4)), g.input("grid", "float32", (1, 2, 2, 2))
    with pytest.raises(tlc.UnsupportedOperatorError, match="GridSample of int32 X.*mode nearest only"):
        g.add_node("GridSample", [x, grid], mode="linear", name="gs")
    with pytest.raises(tlc.ShapeInferenceError, match="'gs2'.*padding_mode 'wrap' is not one of"):
        g.add_node("GridSample", [g.input("f", "float32", (1, 1, 4, 4)), grid], padding_mode="wrap", name="gs2")
    with pytest.raises(tlc.ShapeInferenceError, match="'gs3'.*grid float32\\[1,2,2,2,2\\] should end in 3"):
        g.add_node("GridSample", [g.input("v", "float32", (1, 1, 4, 4, 4)),
                                  g.input("g5", "float32", (1, 2, 2, 2, 2))], name="gs3")


# ---------------------------------------------------------------------------- AffineGrid
@pytest.mark.parametrize("size, align_corners", [([2, 3, 5, 4], 0), ([2, 3, 5, 4], 1), ([2, 1, 3, 4, 2], 0),
                                                 ([2, 1, 3, 4, 2], 1)])
def test_affine_grid_matches_onnxruntime(rng, size, align_corners):
    r = len(size) - 2
    inputs = {"theta": _rand(rng, 2, r, r + 1), "size": np.array(size, np.int64)}
    check_against_ort("AffineGrid", inputs, dict(align_corners=align_corners))


def test_affine_grid_single_position_axis_is_at_zero():
    """With align_corners a 1-long axis has no step; PyTorch (which the spec follows) puts its position at 0.
    onnxruntime and the ONNX reference disagree with it and with each other (+1 and -1)."""
    theta = np.array([[[1, 0, 0.25], [0, 1, -0.5]]], np.float32)
    grid = tlc.ops.get("AffineGrid").run_reference([theta, np.array([1, 1, 1, 3])], dict(align_corners=1))[0]
    np.testing.assert_allclose(grid[0, 0], [[-0.75, -0.5], [0.25, -0.5], [1.25, -0.5]])


def test_affine_grid_shape_from_constant_size():
    g = tlc.Graph()
    theta = g.input("theta", "float32", ("N", 3, 4))
    out = g.add_node("AffineGrid", [theta, g.constant(np.array([2, 1, 3, 4, 5], np.int64))])
    assert g.type_of(out).shape == (2, 3, 4, 5, 3)
    fed = g.add_node("AffineGrid", [theta, g.input("size", "int64", (5,))])
    assert g.type_of(fed).shape == ("N", None, None, None, 3)
    with pytest.raises(tlc.ShapeInferenceError, match="size has 4 values; expected 5"):
        g.add_node("AffineGrid", [theta, g.constant(np.array([2, 1, 3, 4], np.int64))])


# ---------------------------------------------------------------------------- Col2Im
@pytest.mark.parametrize("image, block, attrs", [([5, 6], [2, 3], dict(pads=[1, 0, 1, 1], strides=[2, 1],
                                                                          dilations=[1, 2])),
                                                 ([4, 5], [3, 2], {}), ([3, 4, 5], [2, 2, 3], dict(strides=[1, 2, 1]))])
def test_col2im_matches_onnxruntime(rng, image, block, attrs):
    window = tlc.ops.window.make_window(attrs, block)
    blocks = int(np.prod([window.axis(i, n)[0] for i, n in enumerate(image)]))
    inputs = {"x": _rand(rng, 2, 3 * int(np.prod(block)), blocks), "image": np.array(image, np.int64),
              "block": np.array(block, np.int64)}
    check_against_ort("Col2Im", inputs, attrs)


def test_col2im_errors_name_the_block_count():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 12, 10))
    image, block = g.constant(np.array([5, 6], np.int64)), g.constant(np.array([2, 3], np.int64))
    with pytest.raises(tlc.ShapeInferenceError, match="'c2i'.*holds 10 blocks, but \\[4, 4\\] = 16 fit"):
        g.add_node("Col2Im", [x, image, block], name="c2i")
    ok = g.add_node("Col2Im", [g.input("y", "float32", ("N", 12, 16)), image, block])
    assert g.type_of(ok).shape == ("N", 2, 5, 6)


# ---------------------------------------------------------------------------- DeformConv
@pytest.mark.parametrize("with_mask, with_bias", [(True, True), (False, False), (True, False)])
def test_deform_conv_matches_onnxruntime(rng, with_mask, with_bias):
    attrs = dict(group=2, offset_group=2, pads=[1, 0, 1, 1], strides=[2, 2], dilations=[1, 2])
    inputs = {"x": _rand(rng, 2, 4, 6, 7), "w": _rand(rng, 6, 2, 3, 2), "offset": _rand(rng, 2, 24, 3, 3, scale=2),
              "b": _rand(rng, 6) if with_bias else None,
              "mask": rng.random((2, 12, 3, 3)).astype(np.float32) if with_mask else None}
    g = check_against_ort("DeformConv", inputs, attrs, dims={"x": ("N", 4, 6, 7), "offset": ("N", 24, 3, 3)},
                          rtol=1e-4, atol=1e-4)
    assert output_types(g)[0].shape == ("N", 6, 3, 3)


def test_deform_conv_zero_offsets_is_conv(rng):
    x, w = _rand(rng, 1, 4, 5, 5), _rand(rng, 4, 2, 3, 3)
    offset = np.zeros((1, 18, 3, 3), np.float32)
    got = tlc.ops.get("DeformConv").run_reference([x, w, offset], dict(group=2, pads=[0, 1, 0, 1],
                                                                       strides=[1, 2]))[0]
    want = tlc.ops.get("Conv").run_reference([x, w], dict(group=2, pads=[0, 1, 0, 1], strides=[1, 2]))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_deform_conv_offset_channels_are_checked():
    g = tlc.Graph()
    x, w = g.input("x", "float32", (1, 4, 6, 6)), g.input("w", "float32", (2, 4, 3, 3))
    with pytest.raises(tlc.ShapeInferenceError, match="'dc'.*offset_group \\* prod\\(kernel\\) \\* 2 = 18"):
        g.add_node("DeformConv", [x, w, g.input("o", "float32", (1, 9, 4, 4))], name="dc")


# ---------------------------------------------------------------------------- RoiAlign
@pytest.mark.parametrize("mode, coordinate_mode, sampling_ratio",
                         list(itertools.product(["avg", "max"], ["half_pixel", "output_half_pixel"], [0, 2])))
def test_roi_align_matches_onnxruntime(rng, mode, coordinate_mode, sampling_ratio):
    # RoIs partly off the map, some smaller than a pixel; corners in either order of the width
    corners = np.sort(rng.uniform(-3, 15, (6, 2, 2)), axis=1)
    rois = corners.transpose(0, 2, 1).reshape(6, 4)[:, [0, 2, 1, 3]].astype(np.float32)
    rois[0, 2:] = rois[0, :2] + 0.3
    inputs = {"x": _rand(rng, 2, 3, 12, 10), "rois": rois, "batch_indices": rng.integers(0, 2, 6)}
    g = check_against_ort("RoiAlign", inputs, dict(mode=mode, coordinate_transformation_mode=coordinate_mode,
                                                   sampling_ratio=sampling_ratio, output_height=3, output_width=4,
                                                   spatial_scale=0.7),
                          dims={"rois": ("R", 4), "batch_indices": ("R",)})
    assert output_types(g)[0].shape == ("R", 3, 3, 4)


def test_roi_align_errors():
    g = tlc.Graph()
    x, rois, idx = g.input("x", "float32", (1, 3, 8, 8)), g.input("r", "float32", (5, 4)), g.input("i", "int64", (4,))
    with pytest.raises(tlc.ShapeInferenceError, match="'ra'.*rois and batch_indices count differently: 5 != 4"):
        g.add_node("RoiAlign", [x, rois, idx], name="ra")
    with pytest.raises(tlc.ShapeInferenceError, match="mode 'min' is not one of avg, max"):
        g.add_node("RoiAlign", [x, rois, g.input("j", "int64", (5,))], mode="min")


# ---------------------------------------------------------------------------- NonMaxSuppression
@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("limits", [(5, 0.3, 0.2), (50, 0.1, None), (3, 0.6, 0.5), (None, None, None)])
def test_nms_matches_onnxruntime(rng, center_point_box, limits):
    boxes = rng.uniform(0, 10, (2, 30, 4)).astype(np.float32)
    scores = rng.random((2, 3, 30)).astype(np.float32)
    scores[0, 0, 5:9] = scores[0, 0, 4]  # ties keep index order
    max_boxes, iou, score = limits
    inputs = {"boxes": boxes, "scores": scores,
              "max_output_boxes_per_class": None if max_boxes is None else np.array([max_boxes], np.int64),
              "iou_threshold": None if iou is None else np.array([iou], np.float32),
              "score_threshold": None if score is None else np.array([score], np.float32)}
    g = check_against_ort("NonMaxSuppression", inputs, dict(center_point_box=center_point_box),
                          dims={"boxes": ("B", 30, 4), "scores": ("B", 3, 30)})
    assert output_types(g)[0] == tlc.TensorType("int64", (None, 3))


def test_nms_errors():
    g = tlc.Graph()
    boxes, scores = g.input("b", "float32", (1, 6, 5)), g.input("s", "float32", (1, 2, 6))
    with pytest.raises(tlc.ShapeInferenceError, match="'nms'.*boxes float32\\[1,6,5\\] should end in 4"):
        g.add_node("NonMaxSuppression", [boxes, scores], name="nms")
    with pytest.raises(tlc.ShapeInferenceError, match="hold different numbers of boxes: 6 != 7"):
        g.add_node("NonMaxSuppression", [g.input("b4", "float32", (1, 6, 4)), g.input("s7", "float32", (1, 2, 7))])


def test_vision_traits_and_import():
    T = tlc.ops.Trait
    for op in VISION_OPS:
        opdef = tlc.ops.get(op)
        assert opdef.is_pure and opdef.is_foldable and opdef.doc
    for op in ("GridSample", "DeformConv", "RoiAlign", "Col2Im"):
        assert tlc.ops.get(op).has(T.LAYOUT_SENSITIVE)
    inputs = {"x": np.zeros((1, 1, 2, 2), np.float32), "grid": np.zeros((1, 1, 1, 2), np.float32)}
    graph, _ = from_onnx(single_node_model("GridSample", inputs, dict(mode="cubic")))
    assert [n.op for n in graph.nodes() if n.op != "Input"] == ["GridSample"]
