"""The native Attention step (``tlc.runtime.attention``) against the reference step and onnxruntime's Attention
(opset 23) on random inputs: 3-D and 4-D, GQA, causal, bool and additive masks, past/present KV, scale,
softcap, windows, nonpad_kv_seqlen, and the forms that stay on the reference with their reason.

The step is registered from here (``CPU_OPS`` is read when a graph is lowered); plans use one thread, so one
kernel specialization per dtype is compiled.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tlc
from tlc.io.onnx import from_onnx
from tlc.runtime import ops as runtime_ops
from tlc.runtime.attention import AttentionImpl

ort = pytest.importorskip("onnxruntime")

CODES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.bool_: TensorProto.BOOL,
         np.int64: TensorProto.INT64}
NAMES = ("q", "k", "v", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
OUTPUTS = ("y", "present_key", "present_value", "qk")


@pytest.fixture(autouse=True)
def _native_attention(monkeypatch):
    monkeypatch.setitem(runtime_ops.CPU_OPS, "Attention", AttentionImpl)


def model(feeds: dict[str, np.ndarray], outputs: int = 1, opset: int = 23, **attrs):
    inputs = [n if n in feeds else "" for n in NAMES]
    while inputs and not inputs[-1]:
        inputs.pop()
    node = helper.make_node("Attention", inputs, list(OUTPUTS[:outputs]), **attrs)
    graph = helper.make_graph(
        [node], "attention",
        [helper.make_tensor_value_info(n, CODES[a.dtype.type], a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, CODES[feeds["q"].dtype.type], None) for n in OUTPUTS[:outputs]])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def inputs(rng, b=2, hq=4, hkv=4, sq=5, skv=5, d=8, dv=8, three_d=False, past=0, dtype=np.float32):
    def make(h, s, size):
        shape = (b, s, h * size) if three_d else (b, h, s, size)
        return rng.standard_normal(shape).astype(dtype)
    feeds = {"q": make(hq, sq, d), "k": make(hkv, skv, d), "v": make(hkv, skv, dv)}
    if past:
        feeds["past_key"] = rng.standard_normal((b, hkv, past, d)).astype(dtype)
        feeds["past_value"] = rng.standard_normal((b, hkv, past, dv)).astype(dtype)
    return feeds


def run_tlc(onnx_model, feeds, mode="native"):
    graph = from_onnx(onnx_model)[0]
    plan = tlc.compile(graph, opt_level=2, jit="eager", num_threads=1)
    (step,) = plan.stats().steps
    assert step.mode == mode, (step.mode, step.reason, step.notes)
    first = plan.run(feeds)
    again = plan.run(feeds)   # the arena's scratch is dirty now
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    return [first[n] for n in OUTPUTS if n in first], step, graph


def check(feeds, *, outputs=1, with_ort=True, opset=23, rtol=1e-5, atol=2e-6, **attrs):
    m = model(feeds, outputs, opset, **attrs)
    got, step, graph = run_tlc(m, feeds)
    want = tlc.reference.run(graph, feeds)
    for g, name in zip(got, OUTPUTS):
        np.testing.assert_allclose(g, want[name], rtol=rtol, atol=atol, err_msg=f"{name} against the reference")
    if with_ort:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for g, w, name in zip(got, sess.run(None, feeds), OUTPUTS):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{name} against onnxruntime")
    return got, step


CASES = {
    "mha-4d": ({}, {}),
    "gqa-causal": ({"hq": 6, "hkv": 2, "sq": 7, "skv": 7}, {"is_causal": 1}),
    "mqa-3d-scale": ({"hq": 4, "hkv": 1, "three_d": True, "dv": 6}, {"q_num_heads": 4, "kv_num_heads": 1,
                                                                     "scale": 0.3}),
    "softcap": ({"sq": 3, "skv": 9}, {"softcap": 2.0}),
    "decode-past-causal": ({"sq": 1, "skv": 1, "past": 6, "hq": 4, "hkv": 2}, {"is_causal": 1}),
    "long-causal-blocks": ({"b": 1, "hq": 2, "hkv": 2, "sq": 70, "skv": 70, "d": 16, "dv": 16}, {"is_causal": 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_configurations_match_reference_and_onnxruntime(case, rng):
    shape, attrs = CASES[case]
    feeds = inputs(rng, **shape)
    outputs = 3 if "past" in shape else 1
    check(feeds, outputs=outputs, **attrs)


def test_prefill_with_past_in_3d_writes_present(rng):
    feeds = inputs(rng, sq=3, skv=3, past=4, three_d=True, hq=4, hkv=2)
    (y, pk, pv), step = check(feeds, outputs=3, is_causal=1, q_num_heads=4, kv_num_heads=2)
    assert pk.shape == (2, 2, 7, 8) and "KV cache" in step.notes[0]


def test_past_without_present_outputs_uses_scratch(rng):
    check(inputs(rng, sq=2, skv=2, past=3), outputs=1, with_ort=False, is_causal=1)


@pytest.mark.parametrize("mask_shape, with_ort", [((2, 1, 5, 5), True), ((5, 5), True),
                                                  ((1, 4, 1, 5), False)])   # onnxruntime: no broadcast q axis
def test_bool_and_additive_masks(mask_shape, with_ort, rng):
    feeds = inputs(rng)
    feeds["attn_mask"] = rng.random(mask_shape) > 0.3
    check(feeds, with_ort=with_ort)
    feeds["attn_mask"] = rng.standard_normal(mask_shape).astype(np.float32)
    check(feeds, with_ort=with_ort)


def test_short_mask_and_fully_masked_rows_give_zeros(rng):
    """A mask shorter than the keys masks the rest; a row that sees nothing is zeros (the spec's errata)."""
    feeds = inputs(rng, skv=7)
    mask = rng.random((5, 4)) > 0.3
    mask[2] = False
    feeds["attn_mask"] = mask
    (y,), _ = check(feeds, with_ort=False)
    assert not np.any(y[:, :, 2])


def test_windows_and_nonpad_lengths(rng):
    check(inputs(rng, sq=6, skv=6), with_ort=False, opset=24, is_causal=1, left_window_size=2)
    check(inputs(rng, sq=6, skv=6), with_ort=False, opset=24, left_window_size=1, right_window_size=1)
    feeds = inputs(rng, sq=2, skv=8)
    feeds["nonpad_kv_seqlen"] = np.array([5, 8], np.int64)
    check(feeds, with_ort=False, opset=24, is_causal=1)
    feeds["nonpad_kv_seqlen"] = np.array([0, 3], np.int64)   # batch 0 sees no key: zeros
    (y,), _ = check(feeds, with_ort=False, opset=24)
    assert not np.any(y[0])


@pytest.mark.sweep   # a second kernel compile (~3 s cold): CI checks float32
def test_float64(rng):
    check(inputs(rng, dtype=np.float64, hq=4, hkv=2), with_ort=False, rtol=1e-12, atol=1e-13, is_causal=1)


def test_unsupported_forms_stay_on_the_reference(rng):
    feeds = inputs(rng)
    _, step, _ = run_tlc(model(feeds, outputs=4), feeds, mode="reference")
    assert "qk_matmul_output" in step.reason
    _, step, _ = run_tlc(model(feeds, softmax_precision=TensorProto.DOUBLE), feeds, mode="reference")
    assert "softmax_precision" in step.reason
