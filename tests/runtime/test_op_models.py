"""The ops suite of tools/models.py (a PyTorch-style LSTM -> GRU tagger, an RNN written as a Loop with an If in
its body, a QDQ-quantized conv net), at test size: at every opt level, and through ``tlc-opt`` (the optimized
file checked by onnx and run by onnxruntime), against onnxruntime on random input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnx_cases
import pytest

import tlc
from tlc.io.onnx import from_onnx

ort = pytest.importorskip("onnxruntime")
models = onnx_cases.tools_models()
#: QDQ arithmetic rounds to the quantization step: results may differ by one step (the qdq rules' contract)
TOLERANCE = {"qdq_convnet": 16 / 255}


def _reference_outputs(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))


def _assert_close(name: str, got: dict, want: dict) -> None:
    assert set(got) == set(want)
    atol = TOLERANCE.get(name, 1e-4)
    for key, array in want.items():
        np.testing.assert_allclose(got[key], array, rtol=1e-4, atol=atol, err_msg=f"{name}: {key}")


@pytest.mark.parametrize("name", models.OPS_MODELS)
def test_every_opt_level_matches_onnxruntime(name):
    model = models.build(name, batch=2, small=True)
    feeds = models.random_feeds(model, batch=2)
    want = _reference_outputs(model, feeds)
    graph, _ = from_onnx(model)
    for level, jit in ((0, "off"), (1, "off"), (3, "off"), (2, "eager")):   # the native kernels once, at -O2
        plan = tlc.compile(graph, opt_level=level, jit=jit)
        _assert_close(f"{name} -O{level}", plan.run(feeds), want)
    natives = {s.op for s in plan.stats().steps if s.mode == "native"}
    assert natives & {"LSTM", "GRU", "Loop", "QLinearConv", "QLinearMatMul"}, plan.stats().steps


@pytest.mark.parametrize("name", models.OPS_MODELS)
def test_tlc_opt_writes_a_model_onnxruntime_runs(name, tmp_path):
    model = models.build(name, batch=2, small=True)
    source, target = tmp_path / f"{name}.onnx", tmp_path / f"{name}.opt.onnx"
    onnx.save(model, source)
    subprocess.run([sys.executable, "-m", "tlc.cli", str(source), "-O2", "-o", str(target)], check=True,
                   capture_output=True, text=True)
    optimized = onnx.load(target)
    onnx.checker.check_model(optimized, full_check=True)
    feeds = models.random_feeds(model, batch=2)
    _assert_close(name, _reference_outputs(optimized, feeds), _reference_outputs(model, feeds))
