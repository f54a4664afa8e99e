"""Inverse and hyperbolic trig, Mish, Swish, Shrink and the bitwise ops: ONNX backend cases (reference executor and
two compiled), onnxruntime on random inputs, each scalar expression against its reference (specials, every
integer dtype, out-of-range shifts), generated kernels (CPU, and CUDA under Numba's simulator), and dtype errors."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, run_ort, run_tlc, single_node_model

import tlc
from tests.onnx_cases import PASS, CompiledRunner, quick_cases_for, run_case
from tlc.io.onnx import from_onnx
from tlc.ir import Graph, TensorType
from tlc.kernels import KernelCache, KernelOptions, compile_group
from tlc.ops import expr as E
from tlc.ops import registry
from tlc.reference import run_graph

TRIG_OPS = ("Tan", "Atan", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
FLOAT_OPS = TRIG_OPS + ("Mish", "Swish", "Shrink")
BITWISE_OPS = ("BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
CASES = {c.name: c for c in quick_cases_for(*FLOAT_OPS, *BITWISE_OPS)}


@pytest.mark.parametrize("case", list(CASES.values()), ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.parametrize("name", ["test_atanh", "test_bitshift_right_int8_negative_input"])
def test_backend_case_compiled(name):
    status, detail = run_case(CASES[name], CompiledRunner(opt_level=2))
    assert status == PASS, f"{name}: {status}: {detail}"


# ---------------------------------------------------------------------------- expressions against references
def float_inputs(rng: np.random.Generator, dtype: str) -> np.ndarray:
    specials = [0.0, -0.0, 1.0, -1.0, 0.5, 30.0, -30.0, 100.0, -100.0, 1e-30, np.inf, -np.inf, np.nan]
    values = np.concatenate([rng.standard_normal(200) * 4, rng.uniform(-1.2, 1.2, 100), rng.uniform(1, 6, 50),
                             specials])
    return values.astype(dtype)


def int_inputs(rng: np.random.Generator, dtype: str, n: int = 300) -> np.ndarray:
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, 0, 1, info.max // 2], dtype)
    return np.concatenate([rng.integers(info.min, info.max, n - len(edges), dtype=dtype, endpoint=True), edges])


def shift_amounts(rng: np.random.Generator, dtype: str, n: int = 300) -> np.ndarray:
    width = np.dtype(dtype).itemsize * 8
    lo = -3 if np.dtype(dtype).kind == "i" else 0
    return rng.integers(lo, width + 4, n).astype(dtype)


def expression_and_reference(op: str, inputs: list[np.ndarray], **attrs) -> tuple[np.ndarray, np.ndarray]:
    """(the op's scalar expression evaluated with numpy, its reference), both in the output dtype."""
    opdef = registry.get(op)
    full = {k: a.default for k, a in opdef.attrs.items() if not a.required} | attrs
    want = opdef.run_reference(inputs, full)[0]
    tree = opdef.expr(*[E.arg(i) for i in range(len(inputs))], **full)
    got = np.empty(want.shape, want.dtype)
    np.copyto(got, E.evaluate(tree, inputs, want.dtype.name), casting="unsafe")  # as a compiled plan stores it
    return got, want


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op, attrs", [(op, {}) for op in TRIG_OPS] + [
    ("Mish", {}), ("Swish", {}), ("Swish", {"alpha": 0.25}), ("Shrink", {}), ("Shrink", {"bias": 1.5, "lambd": 1.5})])
def test_float_expression_matches_reference(op, attrs, dtype):
    x = float_inputs(np.random.default_rng(1), dtype)
    got, want = expression_and_reference(op, [x], **attrs)
    assert got.dtype == want.dtype == np.dtype(dtype)
    rtol = 4e-7 if dtype == "float32" else 1e-15
    np.testing.assert_allclose(got, want, rtol=rtol, atol=np.finfo(dtype).tiny)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "int64"])
def test_shrink_of_integers_uses_the_fractional_bias(dtype):
    x = np.arange(-6, 7).astype(dtype) if dtype.startswith("int") else np.arange(0, 13).astype(dtype)
    got, want = expression_and_reference("Shrink", [x], bias=1.5, lambd=1.5)
    np.testing.assert_array_equal(got, want)
    v = x.astype(np.float64)
    np.testing.assert_array_equal(want, np.where(v < -1.5, v + 1.5, np.where(v > 1.5, v - 1.5, 0)).astype(dtype))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_expressions_match_reference(dtype):
    rng = np.random.default_rng(2)
    a, b = int_inputs(rng, dtype), int_inputs(rng, dtype)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        got, want = expression_and_reference(op, [a, b])
        np.testing.assert_array_equal(got, want)
    got, want = expression_and_reference("BitwiseNot", [a])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, ~a)
    amounts = shift_amounts(rng, dtype)
    for direction in ("LEFT", "RIGHT"):
        got, want = expression_and_reference("BitShift", [a, amounts], direction=direction)
        assert got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want, err_msg=direction)


def test_bitshift_out_of_range_amounts_leave_the_sign_fill():
    x = np.array([-5, 5, -128, 127, -1, 3], np.int8)
    y = np.array([8, 8, -1, -2, 100, 7], np.int8)
    shift = registry.get("BitShift").reference
    np.testing.assert_array_equal(shift(x, y, direction="RIGHT"), [-1, 0, -1, 0, -1, 0])
    np.testing.assert_array_equal(shift(x, y, direction="LEFT"), [0, 0, 0, 0, 0, -128])


# ---------------------------------------------------------------------------- onnxruntime
@pytest.mark.parametrize("op", TRIG_OPS + ("Mish",))
def test_float_ops_match_onnxruntime(rng, op):
    x = (rng.uniform(0.4, 0.95, (2, 3, 5)) * rng.choice([-1, 1], (2, 3, 5))).astype(np.float32)
    if op == "Acosh":
        x = np.abs(x) * 4 + 1
    elif op not in ("Asin", "Acos", "Atanh"):
        x = x * 5
    g = check_against_ort(op, {"x": x}, dims={"x": ("N", 3, 5)}, rtol=2e-6, atol=1e-6)
    assert g.type_of(g.outputs[0][0]).shape == ("N", 3, 5)


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_swish_matches_onnxruntime(rng, alpha):
    inputs = {"x": (rng.standard_normal((4, 7)) * 6).astype(np.float32)}
    model = single_node_model("Swish", inputs, {"alpha": alpha}, opset=24)
    (want,) = run_ort(model, inputs)
    _, (got,) = run_tlc(model, inputs)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_shrink_matches_onnxruntime(rng, dtype):
    x = (rng.standard_normal((3, 8)) * 4).astype(dtype)
    check_against_ort("Shrink", {"x": x}, {"bias": 1.5, "lambd": 1.25}, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", ["uint8", "uint64", "int16", "int32"])
def test_bitwise_ops_match_onnxruntime(rng, dtype):
    a, b = int_inputs(rng, dtype, 60).reshape(3, 4, 5), int_inputs(rng, dtype, 5)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check_against_ort(op, {"a": a, "b": b}, rtol=0, atol=0)
    check_against_ort("BitwiseNot", {"a": a}, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["uint8", "uint32", "int8", "int64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_matches_onnxruntime_opset_28(rng, dtype, direction):
    inputs = {"x": int_inputs(rng, dtype, 40).reshape(4, 10), "y": shift_amounts(rng, dtype, 10)}
    model = single_node_model("BitShift", inputs, {"direction": direction}, opset=28)
    (want,) = run_ort(model, inputs)
    _, (got,) = run_tlc(model, inputs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------- errors
def _import_error(op: str, inputs: dict, attrs: dict | None = None) -> str:
    with pytest.raises(tlc.TlcError) as info:
        from_onnx(single_node_model(op, inputs, attrs))
    return str(info.value)


def test_bitwise_ops_refuse_floats_and_mixed_dtypes():
    message = _import_error("BitwiseAnd", {"a": np.zeros(3, np.float32), "b": np.zeros(3, np.float32)})
    assert "integer" in message and "float32" in message
    message = _import_error("BitShift", {"a": np.zeros(3, np.int32), "b": np.zeros(3, np.int64)},
                            {"direction": "LEFT"})
    assert "one dtype" in message and "int64" in message
    assert "LEFT or RIGHT" in _import_error("BitShift", {"a": np.zeros(3, np.uint8), "b": np.zeros(3, np.uint8)},
                                            {"direction": "UP"})


def test_float_ops_refuse_integers():
    message = _import_error("Atanh", {"x": np.zeros(3, np.int32)})
    assert "float" in message and "int32" in message


# ---------------------------------------------------------------------------- generated kernels
def _float_body() -> Graph:
    g = Graph("more_float")
    x = g.input("x", "float32", ("N",))
    for op in FLOAT_OPS:
        g.output(g.add_node(op, [x]), f"o_{op}")
    g.output(g.add_node("Swish", [x], alpha=0.5), "o_swish_half")
    g.output(g.add_node("Shrink", [x], bias=0.25, lambd=1.0), "o_shrink_soft")
    return g


def _bitwise_body() -> Graph:
    g = Graph("more_int")
    a, b = g.input("a", "int8", ("N",)), g.input("b", "int8", ("N",))
    c, d = g.input("c", "uint64", ("N",)), g.input("d", "uint64", ("N",))
    for x, y, tag in ((a, b, "i8"), (c, d, "u64")):
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
            g.output(g.add_node(op, [x, y]), f"o_{op}_{tag}")
        g.output(g.add_node("BitwiseNot", [x]), f"o_not_{tag}")
        for direction in ("LEFT", "RIGHT"):
            g.output(g.add_node("BitShift", [x, y], direction=direction), f"o_{direction}_{tag}")
    g.output(g.add_node("Shrink", [a], bias=1.5, lambd=1.5), "o_shrink_i8")
    return g


def _check_kernel(kernel, body: Graph, inputs: list[np.ndarray]) -> None:
    want = run_graph(body, inputs)
    got = [np.empty(w.shape, w.dtype) for w in want]
    kernel(inputs, got)
    for (_, name), g, w in zip(body.outputs, got, want, strict=True):
        assert g.dtype == w.dtype, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=4e-6, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.fixture(scope="module")
def kcache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("more-ew-kernels"))


def _compile(body: Graph, kcache: KernelCache, target: str = "cpu"):
    types = [TensorType(n.output_types[0].dtype, n.output_types[0].shape) for n in body.inputs]
    # the serial variant only: the parallel one compiles the same scalar code again
    return compile_group(body, "elementwise", types, cache=kcache, target=target,
                         options=KernelOptions(parallel=False))


def test_cpu_kernel_of_float_ops_matches_reference(kcache):
    body = _float_body()
    kernel = _compile(body, kcache)
    assert "np.arctanh" in kernel.source and "ml.sigmoid_f32" in kernel.source
    _check_kernel(kernel, body, [float_inputs(np.random.default_rng(3), "float32")])


def test_cpu_kernel_of_bitwise_ops_matches_reference(kcache):
    body = _bitwise_body()
    kernel = _compile(body, kcache)
    assert "<<" in kernel.source and "~" in kernel.source
    rng = np.random.default_rng(4)
    _check_kernel(kernel, body, [int_inputs(rng, "int8"), shift_amounts(rng, "int8"), int_inputs(rng, "uint64"),
                                 shift_amounts(rng, "uint64")])


def test_cuda_kernel_under_the_simulator(kcache):
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("no CUDA device and no simulator")
    g = Graph("more_cuda")
    x, a, b = g.input("x", "float64", ("N",)), g.input("a", "int32", ("N",)), g.input("b", "int32", ("N",))
    g.output(g.add_node("Asinh", [x]), "asinh")
    g.output(g.add_node("Mish", [x]), "mish")
    g.output(g.add_node("BitShift", [a, b], direction="RIGHT"), "shr")
    g.output(g.add_node("BitwiseXor", [a, b]), "xor")
    kernel = _compile(g, kcache, target="cuda")
    assert "cl.asinh_f64" in kernel.source
    rng = np.random.default_rng(5)
    _check_kernel(kernel, g, [float_inputs(rng, "float64")[:40], int_inputs(rng, "int32", 40),
                              shift_amounts(rng, "int32", 40)])
