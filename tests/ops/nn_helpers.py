"""Helpers for op tests: single-node ONNX models run by onnxruntime (the oracle) and by tlc's reference.

A model goes through tlc's importer (``tlc.io.onnx.from_onnx``), so the op's attribute schema, inference and
reference are all exercised; onnxruntime runs the very same ModelProto.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

import tlc
from tlc.io.onnx import from_onnx
from tlc.ir.types import ONNX_TYPE_CODES, dtype_name

OPSET = 21
IR_VERSION = 10  # onnxruntime 1.31 reads at most IR 13 (FACTS.md)


def single_node_model(op: str, inputs: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any] | None = None,
                      outputs: int | Sequence[str] = 1, dims: Mapping[str, Sequence[Any]] | None = None,
                      opset: int = OPSET) -> onnx.ModelProto:
    """A model with one ``op`` node. ``inputs`` maps names to sample arrays (None = an absent optional input);
    ``dims`` overrides the declared shape of an input (symbols such as "N" allowed)."""
    dims = dict(dims or {})
    names = [name if array is not None else "" for name, array in inputs.items()]
    while names and not names[-1]:  # trailing absent inputs are left out (onnxruntime crashes on some)
        names.pop()
    out_names = [f"y{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
    node = helper.make_node(op, names, out_names, name=f"{op.lower()}_node", **dict(attrs or {}))
    declared = [helper.make_tensor_value_info(name, ONNX_TYPE_CODES[dtype_name(a.dtype)],
                                              list(dims.get(name, a.shape)))
                for name, a in inputs.items() if a is not None]
    results = [helper.make_empty_tensor_value_info(o) for o in out_names]
    graph = helper.make_graph([node], f"single_{op}", declared, results)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def feeds_of(inputs: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    return {k: v for k, v in inputs.items() if v is not None}


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: the light models make it warn about every unused initializer
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def run_tlc(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> tuple[tlc.Graph, list[np.ndarray]]:
    graph, _ = from_onnx(model)
    result = tlc.reference.run(graph, feeds)
    return graph, [result[name] for _, name in graph.outputs]


def check_against_ort(op: str, inputs: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any] | None = None,
                      outputs: int = 1, dims: Mapping[str, Sequence[Any]] | None = None, rtol: float = 1e-5,
                      atol: float = 1e-5) -> tlc.Graph:
    """Run one node in onnxruntime and in tlc and compare every output (dtype, shape, values); returns tlc's
    graph so a test can also look at the inferred types."""
    model = single_node_model(op, inputs, attrs, outputs, dims)
    feeds = feeds_of(inputs)
    want = run_ort(model, feeds)
    graph, got = run_tlc(model, feeds)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype}, onnxruntime gives {w.dtype}"
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, onnxruntime gives {w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op} output {i} differs from onnxruntime")
    for (value, _), g in zip(graph.outputs, got):
        assert graph.type_of(value).matches(g), f"inferred {graph.type_of(value)} does not fit result {g.shape}"
    return graph


def output_types(graph: tlc.Graph) -> list[Any]:
    return [graph.type_of(v) for v, _ in graph.outputs]


def check_backend_case(case: Any, known_failures: Mapping[str, tuple[str, str]]) -> None:
    """An ONNX backend node case must pass, unless listed in ``known_failures`` as name -> (text the failure
    must contain, why); a listed case must still fail for that reason, so the list cannot go stale."""
    from tests.onnx_cases import PASS, run_case  # noqa: PLC0415 - collecting the cases is slow; import late

    status, detail = run_case(case)
    if case.name in known_failures:
        expected, why = known_failures[case.name]
        assert status != PASS, f"{case.name} passes now; remove it from the known failures ({why})"
        assert expected in detail, f"{case.name} fails for another reason than {why!r}: {status}: {detail}"
        return
    assert status == PASS, f"{case.name}: {status}: {detail}"
