"""Reductions and ArgMax/ArgMin: backend cases, onnxruntime on random inputs, symbolic inference."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_against_ort, check_backend_case, output_types

import tlc
from tests.onnx_cases import cases_for

REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@pytest.mark.parametrize("case", cases_for(*REDUCTIONS, "ArgMax", "ArgMin"), ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 0), (None, 1)])
def test_reduction_matches_onnxruntime(rng, op, axes, keepdims):
    x = rng.random((3, 4, 5), dtype=np.float32) + 0.5
    if op == "ReduceLogSumExp":
        x = x * 100  # exp would overflow float32 without the max shift
    inputs = {"x": x, "axes": None if axes is None else np.array(axes, np.int64)}
    check_against_ort(op, inputs, dict(keepdims=keepdims), rtol=1e-5, atol=1e-5)


def test_reduction_symbolic_inference():
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", "S", 8))
    axes = g.constant(np.array([-1], np.int64))
    assert g.type_of(g.add_node("ReduceMean", [x, axes])).shape == ("N", "S", 1)
    assert g.type_of(g.add_node("ReduceMax", [x, axes], keepdims=0)).shape == ("N", "S")
    assert g.type_of(g.add_node("ReduceL2", [x])).shape == (1, 1, 1)
    assert g.type_of(g.add_node("ReduceSum", [x, g.constant(np.zeros(0, np.int64))], noop_with_empty_axes=1)
                     ).shape == ("N", "S", 8)
    dynamic = g.input("axes", "int64", (1,))
    assert g.type_of(g.add_node("ReduceMin", [x, dynamic])).shape == (None, None, None)
    with pytest.raises(tlc.ShapeInferenceError, match="axis 3 is out of range for rank 3"):
        g.add_node("ReduceProd", [x, g.constant(np.array([3], np.int64))])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 1), (-1, 1, 1)])
def test_arg_reduce_matches_onnxruntime(rng, op, axis, keepdims, last):
    x = rng.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties: first vs last index matters
    g = check_against_ort(op, {"x": x}, dict(axis=axis, keepdims=keepdims, select_last_index=last),
                          dims={"x": ("N", 4, 5)}, rtol=0, atol=0)
    t = output_types(g)[0]
    assert t.dtype == "int64" and t.shape[0] == ("N" if axis != 0 else 1 if keepdims else 4)
