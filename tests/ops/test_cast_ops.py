"""Cast, CastLike, BitCast and the ml_dtypes element types: ONNX backend cases, onnxruntime on random inputs,
float8 saturation and float8e8m0 rounding, strings, compiled plans, and ONNX round trips."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from nn_helpers import run_ort, run_tlc, single_node_model
from onnx import TensorProto, helper, numpy_helper

import tlc
from tests.onnx_cases import PASS, CompiledRunner, quick_cases_for, run_case
from tlc.io.onnx import from_onnx, to_onnx
from tlc.ir.types import DTYPES, ML_DTYPES, ONNX_TYPE_CODES, np_dtype
from tlc.kernels.plan import SUPPORTED_DTYPES
from tlc.ops.cast import cast_array
from tlc.targets import all_targets

CAST_OPS = ("Cast", "CastLike", "BitCast")
#: the node cases of these ops (not the expanded cases of other ops that happen to start with a Cast)
CASES = [c for c in quick_cases_for(*CAST_OPS) if c.name.startswith(("test_cast_", "test_castlike_", "test_bitcast_"))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    status, detail = run_case(case)
    assert status == PASS, f"{case.name}: {status}: {detail}"


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8 if a.dtype.itemsize == 1 else np.uint16)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal dtype, shape and values; NaNs match NaNs (their sign and payload may differ)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(g[~np.isnan(g)], w[~np.isnan(w)])


# ---------------------------------------------------------------------------- against onnxruntime
SPECIAL = np.array([0.0, -0.0, 0.1, -1.75, 3.0, 100.0, 239.9, 241.0, 447.0, 449.0, 465.0, 1e4, 6e4, 1e6, -1e6,
                    np.inf, -np.inf, np.nan, 1e-9, 2.5e-3, 5e-3], np.float32)


def _round_trip_model(x: np.ndarray, to: str, back: str, attrs: dict) -> onnx.ModelProto:
    """``Cast(x -> to)`` then ``Cast(-> back)``, with x an initializer: onnxruntime's Python API neither takes
    nor returns most ml_dtypes arrays, and the cast back is exact, so the first conversion is what is compared."""
    nodes = [helper.make_node("Cast", ["x"], ["mid"], to=ONNX_TYPE_CODES[to], **attrs),
             helper.make_node("Cast", ["mid"], ["y"], to=ONNX_TYPE_CODES[back])]
    result = helper.make_tensor_value_info("y", ONNX_TYPE_CODES[back], None)
    graph = helper.make_graph(nodes, "cast_twice", [], [result], initializer=[numpy_helper.from_array(x, "x")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _check_twice(x: np.ndarray, to: str, back: str = "float32", **attrs) -> None:
    model = _round_trip_model(x, to, back, attrs)
    (want,), (_, (got,)) = run_ort(model, {}), run_tlc(model, {})
    _same(got, want)


@pytest.mark.parametrize("to", ["bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_small_floats_matches_onnxruntime(rng, to, saturate):
    if to == "bfloat16" and not saturate:
        pytest.skip("saturate applies to float8 only")
    x = np.concatenate([SPECIAL, rng.standard_normal(64).astype(np.float32) * 50])
    _check_twice(x, to, **({"saturate": saturate} if to != "bfloat16" else {}))


@pytest.mark.parametrize("source", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4"])
def test_cast_from_ml_types_matches_onnxruntime(rng, source):
    x = (rng.standard_normal(40) * 6).astype(np.float32).astype(np_dtype(source))
    for to in ("float16", "int8") if source not in ("int4", "uint4") else ("int8", "int32", "float16"):
        _check_twice(x, to)


@pytest.mark.parametrize("to", ["int4", "uint4"])
def test_cast_integers_to_int4_wrap_like_onnxruntime(to):
    _check_twice(np.arange(-20, 20, dtype=np.int32), to, "int32")


# ---------------------------------------------------------------------------- rules by hand
def test_float8_saturation_from_float8_and_integers():
    big = np.array([57344, -57344, np.inf], ml_dtypes.float8_e5m2)
    _same(cast_array(big, "float8_e4m3fn"), np.array([448, -448, 448], ml_dtypes.float8_e4m3fn))
    assert np.isnan(cast_array(big, "float8_e4m3fn", saturate=False).astype(np.float32)).all()
    _same(cast_array(np.array([1000, -7], np.int64), "float8_e4m3fnuz"),
          np.array([240, -7], ml_dtypes.float8_e4m3fnuz))


@pytest.mark.parametrize(("mode", "want"), [("up", [0.25, 0.5, 0.5, 1.0, 4.0]), ("down", [0.25, 0.25, 0.5, 0.5, 2.0]),
                                            ("nearest", [0.25, 0.25, 0.5, 1.0, 4.0])])
def test_e8m0_round_modes(mode, want):
    x = np.array([0.25, 0.3, 0.5, 0.75, 3.0], np.float32)
    np.testing.assert_array_equal(cast_array(x, "float8_e8m0fnu", True, mode).astype(np.float32), want)


def test_e8m0_saturation_and_its_absence():
    x = np.array([0.0, np.inf, 1e-40, 2.0**127 * 1.5, np.nan], np.float64)
    got = cast_array(x, "float8_e8m0fnu", True, "up").view(np.uint8)
    np.testing.assert_array_equal(got, [0, 254, 0, 254, 255])
    np.testing.assert_array_equal(cast_array(x, "float8_e8m0fnu", False, "up").view(np.uint8), [255] * 5)


def test_strings_parse_and_print():
    s = np.array(["+INF", "-inf", "NaN", "1e-5", " 3.5", "1E8"], dtype=object)
    got = cast_array(s, "float32")
    np.testing.assert_array_equal(got, np.array([np.inf, -np.inf, np.nan, 1e-5, 3.5, 1e8], np.float32))
    big = cast_array(np.array(["9007199254740993", "-1", "100.5"], dtype=object), "int64")
    np.testing.assert_array_equal(big, [9007199254740993, -1, 100])
    text = cast_array(np.array([0.1, 1.5], ml_dtypes.bfloat16), "string")
    assert text.dtype == object and [np.float32(t) for t in text] == [np.float32(ml_dtypes.bfloat16(0.1)), 1.5]
    with pytest.raises(tlc.TlcError, match="does not hold a number"):
        cast_array(np.array(["twelve"], dtype=object), "float32")


def test_bitcast_sub_byte_and_width_mismatch():
    x = np.array([-8, -1, 0, 7], ml_dtypes.int4)
    model = single_node_model("BitCast", {"x": x}, {"to": TensorProto.UINT4}, opset=26)
    _, (got,) = run_tlc(model, {"x": x})
    np.testing.assert_array_equal(got.astype(np.int32), [8, 15, 0, 7])
    model = single_node_model("BitCast", {"x": np.zeros(2, np.float32)}, {"to": TensorProto.FLOAT16}, opset=26)
    with pytest.raises(tlc.ShapeInferenceError, match="same bit width.*float32 has 32 bits.*float16 has 16"):
        from_onnx(model)


def test_bad_round_mode_is_refused_by_name():
    g = tlc.Graph("g")
    x = g.input("x", "float32", (2,))
    with pytest.raises(tlc.ShapeInferenceError, match="round_mode 'sideways' is not one of up, down, nearest"):
        g.add_node("Cast", [x], attrs={"to": 24, "round_mode": "sideways"})


# ---------------------------------------------------------------------------- compiled plans, IR, ONNX files
def test_no_kernel_computes_in_ml_types():
    assert ML_DTYPES <= set(DTYPES)
    assert not ML_DTYPES & SUPPORTED_DTYPES and not any(ML_DTYPES & t.internal_dtypes for t in all_targets())


@pytest.mark.parametrize("level", [2, 3])
def test_cast_cases_compile_with_reference_steps(level):
    plans = []
    runner = CompiledRunner(opt_level=level, jit="off", on_plan=plans.append)
    for name in ("test_cast_FLOAT_to_BFLOAT16", "test_cast_FLOAT_to_INT4"):
        (case,) = [c for c in CASES if c.name == name]
        assert run_case(case, runner) == (PASS, "")
    stats = str(plans[0].stats())
    assert "no kernel for dtypes bfloat16" in stats


def test_bfloat16_and_int4_initializers_round_trip_through_onnx():
    w = np.array([1.5, -2.0, 0.1], ml_dtypes.bfloat16)
    q = np.array([[-8, 7, 1], [0, 3, -1]], ml_dtypes.int4)
    nodes = [helper.make_node("Cast", ["w"], ["a"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["q"], ["b"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["c"], to=TensorProto.BFLOAT16)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(n, t, None) for n, t in
                               (("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT), ("c", TensorProto.BFLOAT16))],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(q, "q")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    g, _ = from_onnx(model)
    exported = to_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    kinds = {t.name: t.data_type for t in exported.graph.initializer}
    assert kinds == {"w": TensorProto.BFLOAT16, "q": TensorProto.INT4}
    again, _ = from_onnx(exported)
    feeds = {"x": np.array([0.1, 3.0], np.float32)}
    first, second = tlc.reference.run(g, feeds), tlc.reference.run(again, feeds)
    for name in ("a", "b", "c"):
        _same(second[name], first[name])
    np.testing.assert_array_equal(first["b"], q.astype(np.float32))
    assert first["c"].dtype == ml_dtypes.bfloat16
