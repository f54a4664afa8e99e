"""Tensor ops against onnxruntime on random inputs, where the ONNX backend cases are thin.

Each graph is built with tlc, exported with ``to_onnx`` and run in onnxruntime; tlc's reference must agree.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import tlc
from tlc.io.onnx import to_onnx
from tlc.ir.graph import Value

i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731


def compare(op: str, x: np.ndarray, consts: list[np.ndarray | None], rtol: float = 1e-5, atol: float = 1e-6,
            **attrs) -> list[np.ndarray]:
    """Run ``op(x, *consts)`` in tlc's reference and in onnxruntime; assert they agree; return tlc's outputs."""
    g = tlc.Graph("t")
    inputs = [g.input("x", x.dtype, x.shape)] + [None if c is None else g.constant(c, name=f"c{i}")
                                                  for i, c in enumerate(consts)]
    outs = g.add_node(op, inputs, attrs=attrs)
    outs = (outs,) if isinstance(outs, Value) else outs
    for k, v in enumerate(outs):
        g.output(v, f"y{k}")
    want = ort.InferenceSession(to_onnx(g).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = tlc.reference.run(g, {"x": x})
    for k, (v, expected) in enumerate(zip(outs, want)):
        have = got[f"y{k}"]
        assert have.dtype == expected.dtype and have.shape == expected.shape, (have.shape, expected.shape)
        np.testing.assert_allclose(have, expected, rtol=rtol, atol=atol)
        assert g.type_of(v).matches(have)
    return [got[f"y{k}"] for k in range(len(outs))]


@pytest.mark.parametrize("seed", range(12))
def test_slice_negative_steps_and_out_of_range_bounds(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 6, size=3))
    x = rng.random(shape, dtype=np.float32)
    axes = rng.permutation(3)[: rng.integers(1, 4)]
    steps = rng.choice([-3, -2, -1, 1, 2], size=axes.size)
    extremes = [2**63 - 1, -(2**63), 2**31 - 1, -(2**31)]
    starts = [int(rng.choice(extremes)) if rng.random() < 0.25 else int(rng.integers(-8, 8)) for _ in axes]
    ends = [int(rng.choice(extremes)) if rng.random() < 0.25 else int(rng.integers(-8, 8)) for _ in axes]
    compare("Slice", x, [i64(*starts), i64(*ends), axes.astype(np.int64), steps.astype(np.int64)])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("seed", range(3))
def test_pad_modes(mode, seed):
    rng = np.random.default_rng(seed)
    x = rng.random((2, 5, 6), dtype=np.float32)
    pads = rng.integers(0, 4, size=6)
    if mode == "reflect":  # reflecting needs pads < dim (numpy would reflect repeatedly; onnxruntime refuses)
        pads = np.minimum(pads, np.array(x.shape * 2) - 1)
    if mode == "constant":
        pads[rng.integers(0, 6)] = -1  # a negative pad crops
    compare("Pad", x, [pads.astype(np.int64), np.array(1.5, np.float32)], mode=mode)
    compare("Pad", x, [i64(2, 1, 3, 2), None, i64(-1, 1)], mode=mode)  # axes input


@pytest.mark.parametrize("mode, coord, extra", [
    ("linear", "half_pixel", {}),
    ("linear", "asymmetric", {}),
    ("linear", "pytorch_half_pixel", {}),
    ("linear", "half_pixel_symmetric", {}),
    ("cubic", "half_pixel", {}),
    ("cubic", "half_pixel", {"exclude_outside": 1, "cubic_coeff_a": -0.5}),
    ("nearest", "half_pixel", {"nearest_mode": "round_prefer_ceil"}),
    ("nearest", "asymmetric", {"nearest_mode": "floor"}),
    ("nearest", "pytorch_half_pixel", {"nearest_mode": "ceil"}),
    ("linear", "half_pixel", {"antialias": 1}),
])
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 1.5), (1, 1, 0.5, 0.75), (1, 1, 1.37, 0.71)])
def test_resize_4d_scales(mode, coord, extra, scales):
    # NOTE: the scales avoid coordinates that land exactly on a rounding tie: tlc maps coordinates in float64 as
    # the ONNX reference (and so the backend data) does, onnxruntime in float32, and the two can round a tie
    # apart (e.g. 3 / 0.6f is 4.9999998 in float64 and 5.0 in float32).
    x = np.random.default_rng(0).random((2, 3, 7, 9), dtype=np.float32)
    compare("Resize", x, [None, np.array(scales, np.float32)], mode=mode, coordinate_transformation_mode=coord,
            rtol=1e-4, atol=1e-5, **extra)


@pytest.mark.parametrize("sizes", [(5, 11), (3, 4), (14, 2)])
@pytest.mark.parametrize("mode, coord", [("linear", "half_pixel"), ("cubic", "half_pixel"), ("nearest", "half_pixel"),
                                         ("linear", "align_corners"), ("nearest", "align_corners")])
def test_resize_4d_sizes_on_axes(sizes, mode, coord):
    # NOTE: align_corners is checked with sizes only. With a scale whose output length is fractional, the ONNX
    # reference (whose numbers the backend cases hold, and tlc follows) divides by the fractional length and
    # onnxruntime by the integral one.
    x = np.random.default_rng(1).random((1, 2, 6, 8), dtype=np.float32)
    compare("Resize", x, [None, None, i64(*sizes)], mode=mode, coordinate_transformation_mode=coord, axes=[2, 3],
            rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_resize_tf_crop_and_resize_with_roi(mode):
    x = np.random.default_rng(5).random((1, 2, 6, 8), dtype=np.float32)
    roi = np.array([0, 0, -0.1, 0.3, 1, 1, 0.8, 1.2], np.float32)  # reaches outside: extrapolation_value there
    compare("Resize", x, [roi, None, i64(1, 2, 5, 7)], mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=-3.0, rtol=1e-4, atol=1e-5)


def test_resize_uint8_rounds_and_saturates():
    x = np.random.default_rng(2).integers(0, 256, (1, 1, 5, 5)).astype(np.uint8)
    compare("Resize", x, [None, np.array([1, 1, 1.6, 2.3], np.float32)], mode="linear", atol=1)


def test_topk_with_ties_and_gathers_and_scatters():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, (3, 11)).astype(np.float32)  # many ties
    for largest in (0, 1):
        compare("TopK", x, [i64(5)], axis=1, largest=largest)
        compare("TopK", x, [i64(2)], axis=0, largest=largest)
    data = rng.random((2, 3, 4), dtype=np.float32)
    compare("GatherND", data, [rng.integers(-3, 3, (2, 5, 1))], batch_dims=1)
    compare("GatherND", data, [rng.integers(0, 2, (4, 2))])
    compare("GatherElements", data, [rng.integers(-4, 4, (2, 3, 6))], axis=2)
    unique_rows = np.argsort(rng.random((2, 3, 4)), axis=1)  # a permutation along axis 1: no duplicates
    compare("ScatterElements", data, [unique_rows, rng.random((2, 3, 4), dtype=np.float32)], axis=1)
    repeated = rng.integers(-3, 3, (2, 5, 4))
    for reduction in ("add", "mul", "max", "min"):
        compare("ScatterElements", data, [repeated, rng.random((2, 5, 4), dtype=np.float32)], axis=1,
                reduction=reduction)
        compare("ScatterND", data, [rng.integers(0, 2, (6, 2)), rng.random((6, 4), dtype=np.float32)],
                reduction=reduction)


def test_layout_ops():
    rng = np.random.default_rng(4)
    x = rng.random((2, 8, 3, 5), dtype=np.float32)
    for mode in ("DCR", "CRD"):
        compare("DepthToSpace", x, [], blocksize=2, mode=mode)
    compare("SpaceToDepth", rng.random((1, 3, 4, 6), dtype=np.float32), [], blocksize=2)
    compare("Tile", x, [i64(1, 2, 1, 3)])
    compare("Expand", rng.random((3, 1), dtype=np.float32), [i64(2, 1, 4)])
    compare("Trilu", x, [i64(-1)], upper=0)
    compare("Trilu", x, [i64(2)], upper=1)
    compare("CumSum", x, [i64(2)], exclusive=1, reverse=1)
    compare("OneHot", rng.integers(-3, 3, (2, 3)).astype(np.int64), [i64(3), np.array([0, 5], np.float32)], axis=1)
    compare("ReverseSequence", rng.random((6, 4), dtype=np.float32), [i64(1, 3, 6, 4)], batch_axis=1, time_axis=0)
    compare("ReverseSequence", rng.random((3, 5, 2), dtype=np.float32), [i64(5, 2, 1)], batch_axis=0, time_axis=1)
    compare("Compress", x, [np.array([True, False, True], bool)], axis=2)
