"""Loss operators: ONNX backend cases (expanded ones too), onnxruntime on random inputs, inferred types, errors."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types, run_tlc, single_node_model
from onnx import defs

import tlc
from tests import onnx_cases

LOSS_OPS = ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
CASE_PREFIXES = ("test_nllloss_", "test_sce_")


def loss_cases() -> list:
    """The node cases of the loss ops, ``_expanded`` ones included (104), without collecting all ~1,900 cases.

    ``onnx_cases.quick_cases_for`` cannot serve here: it finds onnx's case module by the lowercased op name (the
    SoftmaxCrossEntropyLoss module is ``softmax_cross_entropy_loss``) and keeps only cases whose first node is the
    op, which drops the expanded ones. Importing the modules records their cases in the list ``all_cases`` returns.
    """
    from onnx.backend.test.case import node  # noqa: PLC0415 - building the cases is slow; only when collecting

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in ("negativeloglikelihoodloss", "softmax_cross_entropy_loss"):
            importlib.import_module(f"{node.__name__}.{module}")
    # NOTE: _NodeTestCases is where onnx's ``expect`` records every case it builds (as in quick_cases_for)
    return [c for c in node._NodeTestCases if c.name.startswith(CASE_PREFIXES)]


CASES = loss_cases()


def test_every_loss_case_is_collected():
    assert len(CASES) == 104
    assert {op for c in CASES for op in onnx_cases.case_ops(c)} >= set(LOSS_OPS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.parametrize("name", ["test_sce_mean_weight_ii_3d_log_prob", "test_nllloss_NCd1d2d3_sum_weight_high_ii"])
def test_backend_case_compiled(name):
    (case,) = [c for c in CASES if c.name == name]
    assert onnx_cases.run_case(case, onnx_cases.CompiledRunner(opt_level=2)) == (onnx_cases.PASS, "")


def _loss_inputs(rng, shape, weighted, dtype=np.float32, label_dtype=np.int64, ignore_index=None):
    """Scores of ``shape`` (N, C, d...), labels in [0, C) with some set to ``ignore_index``, optional weights."""
    classes = shape[1]
    labels = rng.integers(0, classes, (shape[0],) + shape[2:])
    if ignore_index is not None:
        labels[rng.random(labels.shape) < 0.3] = ignore_index
    return {"x": (rng.standard_normal(shape) * 2).astype(dtype), "y": labels.astype(label_dtype),
            "w": rng.uniform(0.1, 2.0, classes).astype(dtype) if weighted else None}


@pytest.mark.parametrize("op", LOSS_OPS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape,weighted,ignore_index", [((5, 4), False, None), ((3, 6, 4), True, 2),
                                                         ((2, 3, 4, 5), True, -100), ((2, 5, 3, 2), False, 0)])
def test_loss_matches_onnxruntime(rng, op, reduction, shape, weighted, ignore_index):
    inputs = _loss_inputs(rng, shape, weighted, ignore_index=ignore_index)
    attrs = {"reduction": reduction} if ignore_index is None else {"reduction": reduction, "ignore_index": ignore_index}
    outputs = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    check_against_ort(op, inputs, attrs, outputs=outputs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", LOSS_OPS)
@pytest.mark.parametrize("dtype,label_dtype,tol", [(np.float16, np.int32, 2e-3), (np.float64, np.int32, 1e-12),
                                                   (np.float64, np.int64, 1e-12)])
def test_loss_dtypes_match_onnxruntime(rng, op, dtype, label_dtype, tol):
    inputs = _loss_inputs(rng, (4, 5, 3), True, dtype, label_dtype, ignore_index=1)
    outputs = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    check_against_ort(op, inputs, {"ignore_index": 1}, outputs=outputs, rtol=tol, atol=tol)


@pytest.mark.parametrize("op", LOSS_OPS)
@pytest.mark.parametrize("weighted", [False, True])
def test_mean_over_only_ignored_samples_is_nan_as_in_onnxruntime(rng, op, weighted):
    inputs = _loss_inputs(rng, (3, 4), weighted)
    inputs["y"][:] = 2
    check_against_ort(op, inputs, {"ignore_index": 2})


def test_ignored_sample_is_zero_even_at_minus_infinity():
    """The stand-in class read for an ignored sample may hold -inf; its loss is still 0, not NaN."""
    x = np.array([[-np.inf, 0.0], [-1.0, -2.0]], np.float32)
    y = np.array([5, 1], np.int64)
    nll = tlc.ops.get("NegativeLogLikelihoodLoss")
    (loss,) = nll.run_reference([x, y], {"ignore_index": 5, "reduction": "none"})
    np.testing.assert_array_equal(loss, [0.0, 2.0])


@pytest.mark.parametrize("reduction,loss_shape", [("none", ("N", 3)), ("sum", ()), ("mean", ())])
def test_inferred_types_keep_symbolic_dims(rng, reduction, loss_shape):
    inputs = _loss_inputs(rng, (2, 4, 3), True)
    dims = {"x": ("N", 4, 3), "y": ("N", 3)}
    model = single_node_model("SoftmaxCrossEntropyLoss", inputs, {"reduction": reduction}, outputs=2, dims=dims)
    graph, _ = run_tlc(model, {k: v for k, v in inputs.items() if v is not None})
    assert [(t.dtype, t.shape) for t in output_types(graph)] == [("float32", loss_shape), ("float32", ("N", 4, 3))]
    g = tlc.Graph()
    x, y = g.input("x", "float16", (None, 7)), g.input("y", "int32", ("B",))
    out = g.add_node("NegativeLogLikelihoodLoss", [x, y], reduction="none")
    assert (g.type_of(out).dtype, g.type_of(out).shape) == ("float16", ("B",))


def test_label_out_of_range_is_an_error_naming_the_node(rng):
    inputs = _loss_inputs(rng, (3, 4), False)
    inputs["y"][1] = 4
    model = single_node_model("SoftmaxCrossEntropyLoss", inputs, {"ignore_index": -1})
    with pytest.raises(tlc.ExecutionError, match="'softmaxcrossentropyloss_node'.*label 4 is out of range: "
                                                 "expected a class in \\[0, 4\\) or the ignore_index -1"):
        run_tlc(model, {"x": inputs["x"], "y": inputs["y"]})


def test_loss_errors_name_node_and_types():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 5, 6))
    y = g.input("y", "int64", ("N", 6))
    with pytest.raises(tlc.ShapeInferenceError, match="'r'.*reduction 'max' is not one of none, sum, mean"):
        g.add_node("NegativeLogLikelihoodLoss", [x, y], reduction="max", name="r")
    with pytest.raises(tlc.ShapeInferenceError, match="'rank'.*labels \\[N,6,1\\] must have rank 2"):
        g.add_node("SoftmaxCrossEntropyLoss", [x, g.input("y3", "int64", ("N", 6, 1))], name="rank")
    with pytest.raises(tlc.ShapeInferenceError, match="'dims'.*labels \\[N,7\\] do not match scores \\[N,5,6\\]"):
        g.add_node("SoftmaxCrossEntropyLoss", [x, g.input("y7", "int64", ("N", 7))], name="dims")
    with pytest.raises(tlc.ShapeInferenceError, match="'w'.*weight \\[4\\] has 4 values for the 5 classes"):
        g.add_node("NegativeLogLikelihoodLoss", [x, y, g.constant(np.ones(4, np.float32))], name="w")
    with pytest.raises(tlc.ShapeInferenceError, match="'wt'.*weight \\(input 2\\) has dtype float64"):
        g.add_node("NegativeLogLikelihoodLoss", [x, y, g.constant(np.ones(5))], name="wt")
    with pytest.raises(tlc.ShapeInferenceError, match="'lt'.*labels \\(input 1\\) have dtype float32"):
        g.add_node("NegativeLogLikelihoodLoss", [x, g.input("yf", "float32", ("N", 6))], name="lt")
    with pytest.raises(tlc.ShapeInferenceError, match="'st'.*scores \\(input 0\\) have dtype int32"):
        g.add_node("NegativeLogLikelihoodLoss", [g.input("xi", "int32", ("N", 5)), g.input("yn", "int64", ("N",))],
                   name="st")
    with pytest.raises(tlc.ShapeInferenceError, match="'r1'.*scores \\[5\\] must have rank >= 2"):
        g.add_node("NegativeLogLikelihoodLoss", [g.input("x1", "float32", (5,)), y], name="r1")
    with pytest.raises(tlc.ShapeInferenceError, match="'o2'.*2 outputs; NegativeLogLikelihoodLoss has at most 1"):
        g.add_node("NegativeLogLikelihoodLoss", [x, y], num_outputs=2, name="o2")
    with pytest.raises(tlc.ShapeInferenceError, match="'o3'.*3 outputs; SoftmaxCrossEntropyLoss has at most 2"):
        g.add_node("SoftmaxCrossEntropyLoss", [x, y], num_outputs=3, name="o3")


@pytest.mark.parametrize("op", LOSS_OPS)
def test_schema_matches_onnx(op):
    schema = defs.get_schema(op)
    opdef = tlc.ops.get(op)
    assert {k: a.kind for k, a in opdef.attrs.items()} == {"ignore_index": "int", "reduction": "string"}
    assert set(opdef.attrs) == set(schema.attributes)
    assert opdef.attrs["reduction"].default == schema.attributes["reduction"].default_value.s.decode()
    assert opdef.attrs["ignore_index"].default is None and not schema.attributes["ignore_index"].default_value.type
    assert opdef.inputs == (schema.min_input, schema.max_input)
    assert opdef.num_outputs({}, 2) == schema.min_output and len(schema.outputs) == (2 if op.startswith("S") else 1)


def test_loss_traits():
    for op in LOSS_OPS:
        opdef = tlc.ops.get(op)
        assert opdef.is_pure and opdef.is_foldable and opdef.doc
        assert opdef.has(tlc.ops.Trait.REDUCTION) and opdef.has(tlc.ops.Trait.LAYOUT_SENSITIVE)
