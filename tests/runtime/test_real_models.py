"""The real-model suite and the tiny overhead graphs of tools/models.py, at test size, compiled at -O2 with the
eager JIT and checked against onnxruntime on random input; and every step of the plan runs natively.

One module-scope fixture per model compiles the plan once for both tests; ``BENCH_ONLY`` models are left to
tools/bench.py to keep this file's time small. A model that still has reference
steps is listed in ``KNOWN_REFERENCE`` with the reason ``plan.stats()`` gives: its reference test is an expected
failure (not strict, so it passes once the kernels land), its numbers stay a hard check.
"""

from __future__ import annotations

import numpy as np
import onnx_cases
import pytest

import tlc
from tlc.io.onnx import from_onnx

models = onnx_cases.tools_models()
#: left to tools/bench.py (which checks their outputs against onnxruntime too), for CI's 10 minutes: chain100's
#: one 100-op kernel takes ~4 s of Numba compile cold; vit (8 s) and mlp_mixer repeat what gpt2_block and the
#: classic transformer tests cover (attention, LayerNormalization, GELU) but for their patch conv
BENCH_ONLY = {"chain100", "vit", "mlp_mixer"}
ALL = [name for name in models.REAL_MODELS + models.TINY_MODELS if name not in BENCH_ONLY]
#: the batch sizes fed through one plan of a model with a symbolic batch
DYNAMIC_BATCHES = (1, 3)


def _feeds(model, batch: int) -> dict[str, np.ndarray]:
    return models.random_feeds(model, batch)


def _ort_session(model):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module", params=ALL)
def compiled(request):
    """(name, ONNX model, onnxruntime session, tlc -O2 plan), once per model."""
    name = request.param
    model = models.build(name, batch=1, small=True)
    graph, _ = from_onnx(model)
    plan = tlc.compile(graph, opt_level=2, jit="eager")
    return name, model, _ort_session(model), plan


def _assert_matches(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, array in want.items():
        assert got[name].shape == array.shape, name
        # float32 sums in another order: the tolerance scales with the outputs' magnitude
        scale = max(1.0, float(np.abs(array).max()))
        np.testing.assert_allclose(got[name], array, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def test_matches_onnxruntime(compiled):
    name, model, session, plan = compiled
    batches = DYNAMIC_BATCHES if name in models.DYNAMIC_MODELS else (1,)
    for batch in batches:  # one plan for every batch size: a specialization each
        feeds = _feeds(model, batch)
        want = dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))
        _assert_matches(plan.run(feeds), want)
    assert len(plan.stats().specializations) == len(batches)


def test_no_reference_steps(compiled):
    name, model, _, plan = compiled
    plan.run(_feeds(model, 1))  # the modes are the latest specialization's
    reference = [f"{s.op}: {s.reason}" for s in plan.stats().reference_steps()]
    assert not reference, f"{name} runs steps on the reference: {reference}"
