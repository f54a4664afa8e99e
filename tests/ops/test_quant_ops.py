"""Quantization ops: ONNX backend cases, onnxruntime on random inputs (per tensor, per axis, blocked; int8, uint8,
int16, int4, float8), refusals by name, and compiled plans."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from nn_helpers import run_ort, run_tlc, single_node_model
from onnx import helper, numpy_helper

import tlc
from tests.onnx_cases import PASS, CompiledRunner, quick_cases_for, run_case
from tlc.io.onnx import from_onnx
from tlc.ir.types import ONNX_TYPE_CODES, np_dtype

QUANT_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearMatMul", "QLinearConv",
             "MatMulInteger", "ConvInteger")
CASES = quick_cases_for(*QUANT_OPS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    status, detail = run_case(case)
    assert status == PASS, f"{case.name}: {status}: {detail}"


@pytest.mark.parametrize("level", [2, 3])
def test_cases_compile_with_reference_steps(level):
    runner = CompiledRunner(opt_level=level, jit="off")
    for name in ("test_quantizelinear_int4", "test_dequantizelinear_e4m3fn", "test_qlinearconv"):
        (case,) = [c for c in CASES if c.name == name]
        assert run_case(case, runner) == (PASS, "")


def _model(op: str, consts: dict[str, np.ndarray | None], feeds: dict[str, np.ndarray], attrs=None,
           outputs: int = 1, widen: bool = False) -> onnx.ModelProto:
    """One ``op`` node whose parameters are initializers (onnxruntime wants constant scales and zero points, and its
    Python API takes no ml_dtypes arrays); ``widen`` casts the output to int8 (onnxruntime returns no int4)."""
    names = [n if a is not None else "" for n, a in consts.items()]
    nodes = [helper.make_node(op, names, [f"y{i}" for i in range(outputs)], **dict(attrs or {}))]
    if widen:
        nodes = [helper.make_node(op, names, ["narrow"], **dict(attrs or {})),
                 helper.make_node("Cast", ["narrow"], ["y0"], to=onnx.TensorProto.INT8)]
    declared = [helper.make_tensor_value_info(n, ONNX_TYPE_CODES[str(a.dtype)], list(a.shape))
                for n, a in feeds.items()]
    inits = [numpy_helper.from_array(a, n) for n, a in consts.items() if a is not None and n not in feeds]
    graph = helper.make_graph(nodes, op, declared, [helper.make_empty_tensor_value_info(f"y{i}")
                                                    for i in range(outputs)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray], atol: float = 0.0) -> None:
    want, (_, got) = run_ort(model, feeds), run_tlc(model, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if g.dtype.itemsize == 1 and w.dtype == np.uint8 and g.dtype != w.dtype:  # onnxruntime's float8: raw bytes
            g = g.view(np.uint8)
        assert g.dtype == w.dtype, f"dtype {g.dtype}, onnxruntime gives {w.dtype}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=0, atol=atol)


# ---------------------------------------------------------------------------- QuantizeLinear, DequantizeLinear
GRANULARITIES = {"tensor": ((), {}), "axis": ((6,), {"axis": 1}), "blocked": ((4, 2, 5), {"axis": 1, "block_size": 4})}


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int4", "float8_e4m3fn"])
@pytest.mark.parametrize("granularity", sorted(GRANULARITIES))
def test_quantize_and_dequantize_match_onnxruntime(rng, dtype, granularity):
    shape, attrs = GRANULARITIES[granularity]
    x = (rng.standard_normal((4, 6, 5)) * 8).astype(np.float32)
    scale = rng.uniform(0.02, 0.2, shape).astype(np.float32)
    if dtype.startswith("float8"):
        zero = np.zeros(shape, np_dtype(dtype))
    else:
        zero = rng.integers(-3, 4, shape).astype(np_dtype(dtype)) if dtype.startswith("int") else \
            rng.integers(0, 10, shape).astype(np_dtype(dtype))
    quantize = {"x": x, "scale": scale, "zero": zero}
    _compare(_model("QuantizeLinear", quantize, {"x": x}, attrs, widen=dtype == "int4"), {"x": x})
    q = run_tlc(_model("QuantizeLinear", quantize, {"x": x}, attrs), {"x": x})[1][0]
    dq = _model("DequantizeLinear", {"q": q, "scale": scale, "zero": zero}, {}, attrs)
    _compare(dq, {}, atol=1e-6)


def test_quantize_float8_saturates_unless_told_not_to(rng):
    x = np.array([1e4, -1e4, 300.0, 1.0, np.inf], np.float32)
    scale, zero = np.array(0.5, np.float32), np.zeros((), np_dtype("float8_e4m3fn"))
    for saturate in (1, 0):
        model = _model("QuantizeLinear", {"x": x, "scale": scale, "zero": zero}, {"x": x}, {"saturate": saturate})
        _compare(model, {"x": x})


def test_dynamic_quantize_linear_matches_onnxruntime(rng):
    x = (rng.standard_normal((3, 7)) * 4 + 1).astype(np.float32)
    _compare(_model("DynamicQuantizeLinear", {"x": x}, {"x": x}, outputs=3), {"x": x}, atol=1e-7)


# ---------------------------------------------------------------------------- products
def test_qlinear_matmul_matches_onnxruntime(rng):
    a = rng.integers(0, 255, (2, 5, 8)).astype(np.uint8)
    b = rng.integers(-128, 127, (8, 3)).astype(np.int8)
    a_scale, a_zero = np.array(0.03, np.float32), np.array(131, np.uint8)
    params = {"a": a, "a_scale": a_scale, "a_zero": a_zero, "b": b, "b_scale": np.array(0.02, np.float32),
              "b_zero": np.array(1, np.int8), "y_scale": np.array(0.3, np.float32), "y_zero": np.array(7, np.uint8)}
    _compare(_model("QLinearMatMul", params, {"a": a}), {"a": a})


def test_matmul_integer_matches_onnxruntime(rng):
    a = rng.integers(0, 255, (2, 4, 9)).astype(np.uint8)
    b = rng.integers(-128, 127, (9, 6)).astype(np.int8)
    params = {"a": a, "b": b, "a_zero": np.array(128, np.uint8), "b_zero": rng.integers(-3, 3, 6).astype(np.int8)}
    _compare(_model("MatMulInteger", params, {"a": a}), {"a": a})


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 2, "dilations": [2, 1]}])
def test_integer_convolutions_match_onnxruntime(rng, attrs):
    x = rng.integers(0, 255, (2, 4, 7, 6)).astype(np.uint8)
    w = rng.integers(-128, 127, (6, 4 // attrs.get("group", 1), 3, 3)).astype(np.int8)
    x_zero, w_zero = np.array(120, np.uint8), np.array(0, np.int8)
    _compare(_model("ConvInteger", {"x": x, "w": w, "x_zero": x_zero, "w_zero": w_zero}, {"x": x}, attrs), {"x": x})
    params = {"x": x, "x_scale": np.array(0.02, np.float32), "x_zero": x_zero, "w": w,
              "w_scale": rng.uniform(0.005, 0.02, 6).astype(np.float32), "w_zero": np.zeros(6, np.int8),
              "y_scale": np.array(0.5, np.float32), "y_zero": np.array(128, np.uint8),
              "B": rng.integers(-500, 500, 6).astype(np.int32)}
    _compare(_model("QLinearConv", params, {"x": x}, attrs), {"x": x})


# ---------------------------------------------------------------------------- refusals
def test_output_dtype_and_zero_point_must_agree():
    inputs = {"x": np.zeros(4, np.float32), "scale": np.array(1.0, np.float32), "zero": np.array(0, np.int8)}
    model = single_node_model("QuantizeLinear", inputs, {"output_dtype": onnx.TensorProto.UINT8})
    with pytest.raises(tlc.ShapeInferenceError, match="output_dtype uint8 differs from the zero point's dtype int8"):
        from_onnx(model)


def test_blocked_scale_of_the_wrong_shape_is_refused():
    inputs = {"x": np.zeros((2, 8), np.float32), "scale": np.ones((2, 3), np.float32)}
    model = single_node_model("DequantizeLinear", {"x": np.zeros((2, 8), np.int8), "scale": inputs["scale"]},
                              {"axis": 1, "block_size": 4})
    with pytest.raises(tlc.ShapeInferenceError, match="block_size 4 on axis 1 \\(dim 1 should be 2\\)"):
        from_onnx(model)
