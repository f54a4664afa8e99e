"""tlc.backend under ONNX's own backend test suite (``onnx.backend.test.BackendTest``), for a selection of ops
tlc supports, plus the backend's interface (input forms, run_node, devices)."""

from __future__ import annotations

import unittest
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tlc
import tlc.backend

OPS = ["abs", "add", "and", "ceil", "celu", "clip", "concat", "constantofshape", "cos", "div", "elu", "equal", "erf",
       "exp", "expand", "flatten", "floor", "gather", "gelu", "greater", "hardsigmoid", "hardswish", "identity",
       "isinf", "isnan", "leakyrelu", "less", "log", "matmul", "max", "mean", "min", "mod", "mul", "neg", "not", "or",
       "pad", "pow", "prelu", "reciprocal", "reduce_sum", "relu", "reshape", "round", "selu", "shape", "sigmoid",
       "sign", "sin", "size", "slice", "softmax", "softplus", "softsign", "split", "sqrt", "squeeze", "sub", "sum",
       "tanh", "thresholdedrelu", "tile", "transpose", "unsqueeze", "where", "xor",
       # nn and reductions: library kernels (conv, pooling, GEMM) and generated row kernels
       "conv", "convtranspose", "maxpool", "averagepool", "globalaveragepool", "globalmaxpool", "batchnorm", "gemm",
       "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2", "reduce_log_sum",
       "layer_normalization", "instancenorm", "lrn", "logsoftmax", "argmax", "argmin", "einsum", "hardmax"]
# Cases of those ops that tlc refuses by design (sequences, optionals, training mode) or
# whose expanded form needs ops outside this selection.
EXCLUDE = r"_opt|sequence|training_mode|split_to_sequence"
MUST_RUN = ["test_relu_cpu", "test_add_bcast_cpu", "test_softmax_axis_0_cpu", "test_matmul_4d_cpu",
            "test_where_example_cpu", "test_celu_expanded_cpu", "test_pow_types_int32_float32_cpu",
            "test_transpose_default_cpu", "test_slice_neg_steps_cpu", "test_gather_negative_indices_cpu",
            "test_conv_with_strides_padding_cpu", "test_maxpool_2d_pads_cpu", "test_batchnorm_example_cpu",
            "test_gemm_all_attributes_cpu", "test_layer_normalization_4d_axis_negative_1_expanded_cpu",
            "test_reduce_mean_keepdims_example_cpu", "test_einsum_batch_matmul_cpu",
            "test_argmax_default_axis_example_cpu"]


class _Recorder(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.passed: list[str] = []

    def addSuccess(self, test):  # noqa: N802 - unittest's name
        self.passed.append(test.id().rsplit(".", 1)[-1])


def _reason(traceback: str) -> str:
    lines = [ln.strip() for ln in traceback.strip().splitlines()]
    return next((ln for ln in lines if "Error" in ln and not ln.startswith("File")), lines[-1])


@pytest.mark.parametrize("selection", [
    "core", pytest.param("all", marks=pytest.mark.sweep)])   # all: 300+ cases, each a compiled plan (~40 s)
def test_onnx_backend_suite_selection_passes(selection):
    """ONNX's own harness drives tlc.backend (prepare, run, run_node) over the selected ops' cases. CI runs the
    core cases (MUST_RUN: one or two per kind of step); every case of every op here is the sweep, and the
    conformance test already runs all node cases through the reference executor and a sample compiled."""
    import onnx.backend.test

    pattern = ("|".join(name.removeprefix("test_").removesuffix("_cpu") for name in MUST_RUN) if selection == "core"
               else "(" + "|".join(OPS) + r")(_.*)?")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = onnx.backend.test.BackendTest(tlc.backend, __name__)
        runner.include(r"^test_(" + pattern + r")_cpu$").exclude(EXCLUDE)
        result = _Recorder()
        runner.test_suite.run(result)
    problems = [f"{t.id().rsplit('.', 1)[-1]}: {_reason(tb)}" for t, tb in result.failures + result.errors]
    assert not problems, f"{len(problems)} backend cases fail:\n" + "\n".join(problems)
    # NOTE: BackendTest marks the cases it filters out as skipped; the selection must really have run.
    assert len(result.passed) == result.testsRun - len(result.skipped) >= (300 if selection == "all" else 18)
    assert set(MUST_RUN) <= set(result.passed)


def _model(opset: int = 21) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node("Relu", ["p"], ["r"])]
    graph = helper.make_graph(nodes, "g", [vi("a", TensorProto.FLOAT, [2]), vi("b", TensorProto.FLOAT, [2])],
                              [vi("r", TensorProto.FLOAT, [2]), vi("p", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_rep_takes_lists_dicts_and_returns_outputs_in_order():
    rep = tlc.backend.prepare(_model())
    a, b = np.array([1.0, -2.0], np.float32), np.array([3.0, 4.0], np.float32)
    relu, prod = rep.run([a, b])
    np.testing.assert_array_equal(prod, a * b)
    np.testing.assert_array_equal(relu, np.maximum(a * b, 0))
    by_name = rep.run({"b": b, "a": a})
    np.testing.assert_array_equal(by_name["r"], relu)
    np.testing.assert_array_equal(tlc.backend.run_model(_model().SerializeToString(), [a, b])[1], prod)
    with pytest.raises(tlc.InputError, match="got 1 inputs, the model takes 2: a, b"):
        rep.run([a])
    with pytest.raises(tlc.DTypeMismatchError):
        rep.run([a.astype(np.float64), b])


def test_run_node_uses_the_given_opset():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = tlc.backend.run_node(helper.make_node("Softmax", ["x"], ["y"], axis=0), [x])
    e = np.exp(x - x.max(axis=0))
    np.testing.assert_allclose(y, e / e.sum(axis=0), rtol=1e-6)
    (z,) = tlc.backend.run_node(helper.make_node("Neg", ["x"], ["z"]), [x], opset_version=13)
    np.testing.assert_array_equal(z, -x)


def test_devices_and_compatibility():
    assert tlc.backend.supports_device("CPU")
    assert tlc.backend.supports_device("CUDA")   # the cuda target, under Numba's simulator here
    assert not tlc.backend.supports_device("TPU")
    with pytest.raises(tlc.BackendError, match="device 'TPU'"):
        tlc.backend.prepare(_model(), "TPU")
    rep = tlc.backend.prepare(_model(), "CUDA", jit="off")
    assert rep.plan.options.target.name == "cuda"
    assert tlc.backend.is_compatible(_model())
    unknown = _model()
    unknown.graph.node[1].op_type = "NoSuchOp"
    assert not tlc.backend.is_compatible(unknown)


def test_prepare_compiles_a_plan_by_default_and_the_reference_on_request():
    a = np.array([1.0, -2.0], np.float32)
    b = np.array([3.0, 4.0], np.float32)
    rep = tlc.backend.prepare(_model())
    assert isinstance(rep.plan, tlc.Plan)
    assert (rep.plan.options.opt_level, rep.plan.options.jit) == (2, "eager")
    fused = [(s.op, s.mode) for s in rep.plan.stats().steps if s.op.startswith("tlc.Fused")]
    assert fused == [("tlc.Fused[elementwise]", "native")]  # Mul+Relu, generated
    compiled = rep.run([a, b])
    reference = tlc.backend.prepare(_model(), executor="reference")
    assert reference.plan is None
    for got, want in zip(compiled, reference.run([a, b])):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(compiled[0], np.maximum(a * b, 0))
    assert rep.plan.runs == 1


def test_prepare_passes_compile_options_and_refuses_bad_ones():
    rep = tlc.backend.prepare(_model(), opt_level=0, jit="off", num_threads=1)
    assert (rep.plan.options.opt_level, rep.plan.options.jit, rep.plan.options.num_threads) == (0, "off", 1)
    assert [s.op for s in rep.plan.stats().steps] == ["Mul", "Relu"]  # -O0 fuses nothing
    (z,) = tlc.backend.run_node(helper.make_node("Neg", ["x"], ["z"]), [np.ones(3, np.float32)], opt_level=3)
    np.testing.assert_array_equal(z, -np.ones(3, np.float32))
    with pytest.raises(tlc.BackendError, match="unknown executor 'numpy'; expected one of compiled, reference"):
        tlc.backend.prepare(_model(), executor="numpy")
    with pytest.raises(tlc.BackendError, match="reference executor takes no compile options; got opt_level"):
        tlc.backend.prepare(_model(), executor="reference", opt_level=3)
    with pytest.raises(TypeError, match="unknown compile option"):
        tlc.backend.prepare(_model(), no_such_option=1)
