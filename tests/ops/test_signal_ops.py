"""Signal processing and stragglers (DFT, STFT, windows, MelWeightMatrix, Det, MaxUnpool, Upsample, Scatter):
ONNX backend cases, onnxruntime on random inputs, inferred shapes, and errors that name the node."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types, run_ort, single_node_model

import tlc
from tests.onnx_cases import PASS, CompiledRunner, quick_cases_for, run_case

SIGNAL_OPS = ("DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix", "Det", "MaxUnpool",
              "Upsample", "Scatter")
KNOWN_FAILURES = {
    # NOTE: onnxruntime and the spec ("indices ... in the range [0, N x C x D1 x ... x Dn)") index the output
    # tensor; the case decodes its indices against the shape without output_shape. tlc follows onnxruntime,
    # which is what MaxPool's Indices need (test_max_unpool_after_max_pool_with_output_shape).
    "test_maxunpool_export_with_output_shape": ("Mismatched elements: 8 / 25", "indices index the output_shape "
                                                "tensor, as in onnxruntime"),
}
CASES = quick_cases_for(*SIGNAL_OPS)


def _scalar(value, dtype=np.int64):
    return np.array(value, dtype)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, KNOWN_FAILURES)


@pytest.mark.parametrize("name", ["test_dft_rfft", "test_stft_with_window",
                                  "test_maxunpool_export_without_output_shape"])
def test_backend_case_compiled(name):
    (case,) = [c for c in CASES if c.name == name]
    assert run_case(case, CompiledRunner(opt_level=2)) == (PASS, "")


# ---------------------------------------------------------------------------- DFT
@pytest.mark.parametrize("parts, inverse, onesided, length", [
    (1, 0, 0, None), (2, 0, 0, None), (2, 1, 0, None), (1, 1, 0, 4), (1, 0, 1, None), (1, 0, 1, 9),
    (2, 0, 0, 9), (2, 1, 1, None), (2, 1, 1, 11)])
@pytest.mark.parametrize("axis", [1, -2])
def test_dft_matches_onnxruntime(rng, parts, inverse, onesided, length, axis):
    x = rng.standard_normal((2, 6, 5, parts)).astype(np.float32)
    inputs = {"x": x, "n": None if length is None else _scalar(length), "axis": _scalar(axis)}
    check_against_ort("DFT", inputs, dict(inverse=inverse, onesided=onesided), rtol=1e-4, atol=1e-4)


def test_dft_shapes_follow_constant_axis_and_length():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 16, 3, 1))
    z = g.input("z", "float32", ("N", 9, 3, 2))
    rfft = g.add_node("DFT", [x, g.constant(_scalar(10)), g.constant(_scalar(1))], onesided=1)
    irfft = g.add_node("DFT", [z, None, g.constant(_scalar(-3))], inverse=1, onesided=1)
    plain = g.add_node("DFT", [x, None, g.input("axis", "int64", ())])
    assert g.type_of(rfft).shape == ("N", 6, 3, 2)
    assert g.type_of(irfft).shape == ("N", 16, 3, 1)
    assert g.type_of(plain).shape == ("N", 16, 3, 2)


def test_dft_errors_name_the_node():
    g = tlc.Graph()
    x = g.input("x", "float32", (4, 8, 1))
    z = g.input("z", "float32", (4, 8, 2))
    with pytest.raises(tlc.ShapeInferenceError, match="'last'.*axis -1 is out of range for rank 3"):
        g.add_node("DFT", [x, None, g.constant(_scalar(-1))], name="last")
    with pytest.raises(tlc.ShapeInferenceError, match="'rfft'.*RFFT\\) takes a real input"):
        g.add_node("DFT", [z], onesided=1, name="rfft")
    with pytest.raises(tlc.ShapeInferenceError, match="'irfft'.*IRFFT\\) takes a complex input"):
        g.add_node("DFT", [x], onesided=1, inverse=1, name="irfft")
    with pytest.raises(tlc.ShapeInferenceError, match="'three'.*last axis must be 1 \\(real\\) or 2"):
        g.add_node("DFT", [g.input("w", "float32", (4, 3))], name="three")


# ---------------------------------------------------------------------------- STFT
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("step, window, length", [(3, True, None), (5, False, 7), (4, True, 8)])
def test_stft_matches_onnxruntime(rng, onesided, step, window, length):
    inputs = {"signal": rng.standard_normal((2, 40, 1)).astype(np.float32), "step": _scalar(step),
              "window": rng.random(8).astype(np.float32) if window else None,
              "length": None if length is None else _scalar(length)}
    g = check_against_ort("STFT", inputs, dict(onesided=onesided), rtol=1e-4, atol=1e-4)
    n = length or 8  # frame_length is a graph input here: the bins are known only from the window
    bins = None if length is not None else n // 2 + 1 if onesided else n
    assert output_types(g)[0].shape == (2, None, bins, 2)  # frame_step is a graph input: frames unknown


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_complex_signal_matches_onnxruntime(rng, onesided):
    """A complex signal with onesided=1 (the default) keeps the first bins, as onnxruntime does."""
    inputs = {"signal": rng.standard_normal((1, 30, 2)).astype(np.float32), "step": _scalar(4),
              "window": np.hanning(10).astype(np.float32)}
    check_against_ort("STFT", inputs, dict(onesided=onesided), rtol=1e-4, atol=1e-4)


def test_stft_window_and_frame_length_must_agree():
    g = tlc.Graph()
    signal = g.input("s", "float32", (1, 64, 1))
    window = g.constant(np.ones(16, np.float32))
    with pytest.raises(tlc.ShapeInferenceError, match="'stft'.*frame_length 8 and the window's length 16 differ"):
        g.add_node("STFT", [signal, g.constant(_scalar(4)), window, g.constant(_scalar(8))], name="stft")


# ---------------------------------------------------------------------------- windows, MelWeightMatrix
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("output_datatype, size", [(1, 10), (11, 7), (1, 1)])
def test_windows_match_onnxruntime(op, periodic, output_datatype, size):
    check_against_ort(op, {"size": _scalar(size)}, dict(periodic=periodic, output_datatype=output_datatype),
                      rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow"])
def test_integer_windows_match_onnxruntime(op):
    check_against_ort(op, {"size": _scalar(16, np.int32)}, dict(output_datatype=7))


def test_window_shape_from_constant_size_and_bad_datatype():
    g = tlc.Graph()
    w = g.add_node("HannWindow", [g.constant(_scalar(12))], output_datatype=11)
    assert g.type_of(w) == tlc.TensorType("float64", (12,))
    with pytest.raises(tlc.ShapeInferenceError, match="'bad'.*output_datatype 8 is not a numeric type"):
        g.add_node("HammingWindow", [g.constant(_scalar(12))], output_datatype=8, name="bad")


@pytest.mark.parametrize("bins, length, rate, low, high", [(8, 16, 8192, 0.0, 4096.0), (10, 512, 16000, 20.0, 7000.0),
                                                           (40, 400, 16000, 0.0, 8000.0)])
def test_mel_weight_matrix_matches_onnxruntime(bins, length, rate, low, high):
    inputs = {"bins": _scalar(bins), "length": _scalar(length), "rate": _scalar(rate),
              "low": _scalar(low, np.float32), "high": _scalar(high, np.float32)}
    check_against_ort("MelWeightMatrix", inputs, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- Det
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 5, 5), (1, 1)])
def test_det_matches_onnxruntime(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    g = check_against_ort("Det", {"x": x}, dims={"x": ("N",) + shape[1:]} if len(shape) > 2 else None,
                          rtol=1e-4, atol=1e-5)
    assert output_types(g)[0].shape == (("N",) + shape[1:-2] if len(shape) > 2 else ())


def test_det_needs_square_matrices():
    g = tlc.Graph()
    with pytest.raises(tlc.ShapeInferenceError, match="'det'.*last two dims must be equal"):
        g.add_node("Det", [g.input("x", "float32", (2, 3, 4))], name="det")


# ---------------------------------------------------------------------------- MaxUnpool
@pytest.mark.parametrize("shape, kernel, strides, pads, with_shape", [
    ((1, 2, 5, 5), [2, 2], [2, 2], [0, 0, 0, 0], True), ((2, 3, 6, 7), [3, 3], [2, 2], [1, 1, 1, 1], True),
    ((2, 2, 8, 6), [2, 2], [2, 2], [0, 0, 0, 0], False), ((1, 2, 9), [3], [3], [0, 0], False)])
def test_max_unpool_after_max_pool_matches_onnxruntime(rng, shape, kernel, strides, pads, with_shape):
    x = rng.standard_normal(shape).astype(np.float32)
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads)
    pooled, indices = run_ort(single_node_model("MaxPool", {"x": x}, attrs, outputs=2), {"x": x})
    inputs = {"x": pooled, "i": indices, "output_shape": np.array(shape, np.int64) if with_shape else None}
    g = check_against_ort("MaxUnpool", inputs, attrs)
    if not with_shape:
        assert output_types(g)[0].shape == shape


def test_max_unpool_after_max_pool_with_output_shape():
    """Unpooling puts every max back where MaxPool found it, also where output_shape is not the default."""
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    pooled, indices = tlc.ops.get("MaxPool").run_reference([x], dict(kernel_shape=[2, 2], strides=[2, 2]))
    (out,) = tlc.ops.get("MaxUnpool").run_reference([pooled, indices, np.array(x.shape)],
                                                    dict(kernel_shape=[2, 2], strides=[2, 2]))
    np.testing.assert_array_equal(out, np.where(np.isin(x, pooled), x, 0))


def test_max_unpool_indices_out_of_range_are_named():
    g = tlc.Graph()
    x = g.input("x", "float32", (1, 1, 2, 2))
    g.output(g.add_node("MaxUnpool", [x, g.input("i", "int64", (1, 1, 2, 2))], kernel_shape=[2, 2], strides=[2, 2],
                        name="unpool"), "y")
    assert output_types(g)[0].shape == (1, 1, 4, 4)
    feeds = {"x": np.ones((1, 1, 2, 2), np.float32), "i": np.array([0, 3, 9, 16]).reshape(1, 1, 2, 2)}
    with pytest.raises(tlc.ExecutionError, match="'unpool'.*indices in \\[0, 16\\], outside the 16 elements"):
        tlc.reference.run(g, feeds)


# ---------------------------------------------------------------------------- Upsample, Scatter (deprecated)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 1.5, 2.5], [1, 2, 1.7, 1]])
def test_upsample_matches_onnxruntime_opset9(rng, mode, scales):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    inputs = {"x": x, "scales": np.array(scales, np.float32)}
    (want,) = run_ort(single_node_model("Upsample", inputs, dict(mode=mode), opset=9), inputs)
    g = tlc.Graph()
    y = g.add_node("Upsample", [g.input("x", "float32", x.shape), g.constant(inputs["scales"])], mode=mode)
    got = tlc.ops.get("Upsample").run_reference([x, inputs["scales"]], dict(mode=mode))[0]
    assert g.type_of(y) == tlc.TensorType.of(want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_upsample_opset7_scales_attribute_and_strings():
    x = np.array([["a", "b"], ["c", "d"]], dtype=object)
    (got,) = tlc.ops.get("Upsample").run_reference([x], dict(scales=[1.0, 2.0]))
    assert got.tolist() == [["a", "a", "b", "b"], ["c", "c", "d", "d"]]
    g = tlc.Graph()
    with pytest.raises(tlc.ShapeInferenceError, match="'both'.*exactly one of them"):
        g.add_node("Upsample", [g.input("x", "float32", (2, 2)), g.constant(np.ones(2, np.float32))],
                   scales=[1.0, 2.0], name="both")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_is_scatter_elements(rng, axis):
    data = rng.standard_normal((4, 5)).astype(np.float32)
    indices = rng.integers(-4, 4, (2, 3))
    updates = rng.standard_normal((2, 3)).astype(np.float32)
    got = tlc.ops.get("Scatter").run_reference([data, indices, updates], dict(axis=axis))[0]
    want = tlc.ops.get("ScatterElements").run_reference([data, indices, updates], dict(axis=axis))[0]
    np.testing.assert_array_equal(got, want)


def test_signal_traits():
    for op in SIGNAL_OPS:
        opdef = tlc.ops.get(op)
        assert opdef.is_pure and opdef.is_foldable and opdef.doc
    for op in ("MaxUnpool", "Upsample"):
        assert tlc.ops.get(op).has(tlc.ops.Trait.LAYOUT_SENSITIVE)
