"""tools/conformance.py: its core on a small hand-picked subset (fast), and the full pass-rate target (slow)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import onnx_cases
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent


def _load_tool():
    spec = importlib.util.spec_from_file_location("conformance", ROOT / "tools" / "conformance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


conformance = _load_tool()


def _case(name: str):
    (case,) = [c for c in onnx_cases.all_cases() if c.name == name]
    return case


def subset() -> list:
    """Real passing cases, an expanded case, a case with wrong expected outputs and one with an unknown op."""
    wrong = copy.copy(_case("test_relu"))
    wrong.name = "test_relu_wrong"
    inputs, outputs = wrong.data_sets[0]
    wrong.data_sets = [(inputs, [outputs[0] + 1])]
    unknown = copy.copy(_case("test_relu"))
    unknown.name = "test_nosuchop"
    vi = helper.make_tensor_value_info
    unknown.model = helper.make_model(
        helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g", [vi("x", TensorProto.FLOAT, [2])],
                          [vi("y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 21)])
    return [_case("test_relu"), wrong, _case("test_add_bcast"), _case("test_celu"), _case("test_celu_expanded"),
            unknown]


def test_rows_and_summary_on_a_subset():
    results = conformance.run_cases(subset())
    assert [r.status for r in results] == ["pass", "fail", "pass", "pass", "pass", "unsupported"]
    rows = {row["op"]: row for row in conformance.op_rows(results)}
    assert set(rows) == {"Relu", "Add", "Celu", "NoSuchOp"}
    relu = rows["Relu"]
    assert (relu["registered"], relu["cases"], relu["pass"], relu["fail"], relu["unsupported"]) == (True, 2, 1, 1, 0)
    assert relu["reason"].startswith("test_relu_wrong: output 'y': Mismatched elements")
    assert (rows["Celu"]["cases"], rows["Celu"]["pass"]) == (2, 2)  # the expanded case counts under Celu
    nosuch = rows["NoSuchOp"]
    assert (nosuch["registered"], nosuch["unsupported"], nosuch["reason"]) == (False, 1, "needs NoSuchOp")
    s = conformance.summarize(results)
    assert (s["cases"], s["registered_op_cases"], s["pass"], s["fail"], s["unsupported"]) == (6, 5, 4, 1, 1)
    assert s["pass_rate"] == pytest.approx(0.8)
    assert conformance.missing_ops(results) == [("NoSuchOp", 1)]


def test_main_writes_markdown_and_json(tmp_path, monkeypatch):
    monkeypatch.setattr(conformance, "node_cases", subset)
    out, js = tmp_path / "conformance.md", tmp_path / "conformance.json"
    assert conformance.main(["--out", str(out), "--json", str(js), "--no-models"]) == 0
    text = out.read_text()
    assert "| Relu | yes | 2 | 1 | 1 | 0 | test_relu_wrong: output 'y': Mismatched elements" in text
    assert "| NoSuchOp | no | 1 | 0 | 0 | 1 | needs NoSuchOp |" in text
    assert "**Pass rate over registered-op cases tlc accepts: 80.0%**" in text
    data = json.loads(js.read_text())
    assert data["summary"]["pass"] == 4 and len(data["cases"]) == 6
    assert {c["name"]: c["status"] for c in data["cases"]}["test_relu_wrong"] == "fail"


@pytest.mark.slow
def test_pass_rate_over_registered_op_cases_meets_the_target():
    with np.errstate(all="ignore"):
        results = conformance.run_cases(conformance.node_cases() + conformance.light_cases())
    s = conformance.summarize(results)
    assert s["cases"] == 1884 + 9
    assert s["registered_op_cases"] >= 400  # the rate is over a real population, not a handful of cases
    failing = [f"{r.name}: {conformance.short_reason(r.reason)}" for r in results if r.status == "fail"]
    assert s["pass_rate"] >= conformance.TARGET_RATE, (f"pass rate {s['pass_rate']:.3f} < "
                                                        f"{conformance.TARGET_RATE}:\n" + "\n".join(failing))
