"""Transformer ops (RMSNormalization, RotaryEmbedding, SwiGLU, LinearAttention, CausalConvWithState): ONNX backend
cases, onnxruntime on random inputs (SwiGLU: the formula in float64, onnxruntime lacks the Swish it expands to),
inferred types with symbolic dims, named errors."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from nn_helpers import check_backend_case, output_types, run_ort, run_tlc, single_node_model

import tlc
from tests import onnx_cases
from tlc.io.onnx import from_onnx
from tlc.ops import expr as E

OPS = ("RMSNormalization", "RotaryEmbedding", "SwiGLU", "LinearAttention", "CausalConvWithState")
CASE_MODULES = ("rmsnormalization", "rotaryembedding", "swiglu", "linear_attention", "causal_conv_with_state")
OPSET = {"RMSNormalization": 23, "RotaryEmbedding": 23, "SwiGLU": 28, "LinearAttention": 27,
         "CausalConvWithState": 27}


def transformer_cases() -> list:
    """The node cases whose node is one of OPS (57), without collecting all ~1,900 cases.

    ``onnx_cases.quick_cases_for`` finds onnx's case module by the lowercased op name, which misses
    ``linear_attention`` and ``causal_conv_with_state``. The ``_expanded`` cases test other ops (Scan, Swish, ...)
    and are left to those ops' tests.
    """
    from onnx.backend.test.case import node  # noqa: PLC0415 - building the cases is slow; only when collecting

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in CASE_MODULES:
            importlib.import_module(f"{node.__name__}.{module}")
    # NOTE: _NodeTestCases is where onnx's ``expect`` records every case it builds (as in quick_cases_for)
    return [c for c in node._NodeTestCases if c.model.graph.node and c.model.graph.node[0].op_type in OPS]


CASES = transformer_cases()


def test_every_case_is_collected():
    counts = {op: sum(c.model.graph.node[0].op_type == op for c in CASES) for op in OPS}
    assert counts == {"RMSNormalization": 19, "RotaryEmbedding": 8, "SwiGLU": 3, "LinearAttention": 14,
                      "CausalConvWithState": 13}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.parametrize("name", ["test_rms_normalization_default_axis", "test_swiglu_alpha",
                                  "test_linear_attention_gated_delta_gqa", "test_causal_conv_with_state_silu"])
def test_backend_case_compiled(name):
    """RMSNormalization over the last axis is a row kernel, SwiGLU an elementwise one; the others reference steps."""
    (case,) = [c for c in CASES if c.name == name]
    assert onnx_cases.run_case(case, onnx_cases.CompiledRunner(opt_level=2)) == (onnx_cases.PASS, "")


# ---------------------------------------------------------------------------- onnxruntime on random inputs
def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _against_ort(op, inputs, attrs=None, outputs=1, dims=None, rtol=1e-5, atol=1e-5) -> tlc.Graph:
    """``nn_helpers.check_against_ort`` at the op's own opset (23 or 27, not 21)."""
    model = single_node_model(op, inputs, attrs, outputs, dims, opset=OPSET[op])
    feeds = {k: v for k, v in inputs.items() if v is not None}
    want = run_ort(model, feeds)
    graph, got = run_tlc(model, feeds)
    assert len(got) == len(want) == outputs
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"output {i}: {g.dtype}{g.shape}, ort {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op} output {i} differs from onnxruntime")
    for (value, _), g in zip(graph.outputs, got):
        assert graph.type_of(value).matches(g), f"inferred {graph.type_of(value)} does not fit result {g.shape}"
    return graph


@pytest.mark.parametrize("axis, scale_shape", [(-1, (6,)), (1, (4, 6)), (0, (3, 4, 6)), (1, (1, 6))])
def test_rms_norm_matches_onnxruntime(rng, axis, scale_shape):
    inputs = {"x": _rand(rng, 3, 4, 6) * 3 + 1, "scale": _rand(rng, *scale_shape)}
    dims = {"x": ("N", 4, 6)} if axis != 0 else None
    g = _against_ort("RMSNormalization", inputs, dict(axis=axis, epsilon=1e-4), dims=dims)
    assert output_types(g)[0].shape == (dims or {"x": (3, 4, 6)})["x"]


def test_rms_norm_float16_computes_in_float32(rng):
    inputs = {"x": _rand(rng, 2, 16, dtype=np.float16) * 4, "scale": _rand(rng, 16, dtype=np.float16)}
    _against_ort("RMSNormalization", inputs, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("rank", [3, 4])
def test_rotary_embedding_with_positions_matches_onnxruntime(rng, interleaved, rotary_dim, rank):
    batch, heads, seq, head = 2, 3, 5, 8
    half = (rotary_dim or head) // 2
    x = _rand(rng, batch, heads, seq, head) if rank == 4 else _rand(rng, batch, seq, heads * head)
    angles = rng.random((12, half)) * 3
    inputs = {"x": x, "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
              "positions": rng.integers(0, 12, (batch, seq))}
    attrs = dict(interleaved=interleaved, rotary_embedding_dim=rotary_dim) | ({"num_heads": heads} if rank == 3 else {})
    dims = {"x": ("B",) + x.shape[1:], "positions": ("B", seq)}
    g = _against_ort("RotaryEmbedding", inputs, attrs, dims=dims)
    assert output_types(g)[0].shape == dims["x"]


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_without_positions_matches_onnxruntime(rng, interleaved):
    batch, heads, seq, head = 2, 2, 4, 6
    angles = rng.random((batch, seq, head // 2)) * 3
    inputs = {"x": _rand(rng, batch, heads, seq, head), "cos": np.cos(angles).astype(np.float32),
              "sin": np.sin(angles).astype(np.float32)}
    _against_ort("RotaryEmbedding", inputs, dict(interleaved=interleaved))


def test_rotary_embedding_float16_matches_onnxruntime(rng):
    angles = rng.random((8, 4)) * 3
    inputs = {"x": _rand(rng, 1, 2, 3, 8, dtype=np.float16), "cos": np.cos(angles).astype(np.float16),
              "sin": np.sin(angles).astype(np.float16), "positions": rng.integers(0, 8, (1, 3))}
    _against_ort("RotaryEmbedding", inputs, dict(interleaved=1), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 1.702])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_swiglu_follows_the_formula(rng, alpha, dtype):
    """onnxruntime expands SwiGLU to a Swish it does not implement; the oracle is the formula in float64."""
    a, b = _rand(rng, 3, 4, 16, dtype=dtype) * 4, _rand(rng, 3, 4, 16, dtype=dtype)
    symbolic = ("N", 4, 16)
    model = single_node_model("SwiGLU", {"a": a, "b": b}, dict(alpha=alpha), dims={"a": symbolic, "b": symbolic},
                              opset=OPSET["SwiGLU"])
    g, (got,) = run_tlc(model, {"a": a, "b": b})
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 / (1 + np.exp(-alpha * a64)) * b64
    assert got.dtype == dtype and output_types(g)[0].shape == symbolic
    tol = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    expr = tlc.ops.get("SwiGLU").expr(E.arg(0), E.arg(1), alpha=alpha)
    np.testing.assert_allclose(E.evaluate(expr, [a64, b64], "float64"), want, rtol=1e-12)


@pytest.mark.parametrize("with_bias, with_past", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_matches_onnxruntime(rng, with_bias, with_past, activation):
    batch, channels, length, kernel = 2, 5, 7, 4
    inputs = {"x": _rand(rng, batch, channels, length), "w": _rand(rng, channels, 1, kernel),
              "b": _rand(rng, channels) if with_bias else None,
              "past": _rand(rng, batch, channels, kernel - 1) if with_past else None}
    dims = {"x": ("B", channels, "L")} | ({"past": ("B", channels, kernel - 1)} if with_past else {})
    g = _against_ort("CausalConvWithState", inputs, dict(activation=activation), outputs=2, dims=dims)
    assert [t.shape for t in output_types(g)] == [("B", channels, "L"), ("B", channels, kernel - 1)]


@pytest.mark.parametrize("length, kernel", [(1, 4), (2, 6), (5, 1)])
def test_causal_conv_short_inputs_and_unit_kernel_match_onnxruntime(rng, length, kernel):
    inputs = {"x": _rand(rng, 1, 3, length), "w": _rand(rng, 3, 1, kernel), "b": None,
              "past": _rand(rng, 1, 3, kernel - 1)}
    _against_ort("CausalConvWithState", inputs, dict(activation="swish"), outputs=2)


def _linear_attention_inputs(rng, rule, q_heads, kv_heads, steps=5, d_k=4, d_v=3, per_head_decay=False,
                             scalar_beta=False, past=False):
    b = 2
    key = _rand(rng, b, steps, kv_heads, d_k)
    key /= np.linalg.norm(key, axis=-1, keepdims=True)  # delta rules expect L2-normalised keys
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    decay_width = kv_heads if per_head_decay else kv_heads * d_k
    return {"q": _rand(rng, b, steps, q_heads * d_k), "k": key.reshape(b, steps, kv_heads * d_k),
            "v": _rand(rng, b, steps, kv_heads * d_v),
            "past": _rand(rng, b, kv_heads, d_k, d_v) if past else None,
            "decay": (-0.2 * np.abs(_rand(rng, b, steps, decay_width))).astype(np.float32) if gated else None,
            "beta": rng.random((b, steps, 1 if scalar_beta else kv_heads), dtype=np.float32) if delta else None}


@pytest.mark.parametrize("rule, q_heads, kv_heads, options", [
    ("linear", 2, 2, {}),
    ("gated", 4, 2, {"per_head_decay": True}),
    ("delta", 3, 3, {"scalar_beta": True, "past": True}),
    ("gated_delta", 4, 2, {"past": True}),
    ("gated_delta", 4, 1, {"per_head_decay": True, "steps": 1, "past": True}),
])
def test_linear_attention_matches_onnxruntime(rng, rule, q_heads, kv_heads, options):
    inputs = _linear_attention_inputs(rng, rule, q_heads, kv_heads, **options)
    attrs = dict(update_rule=rule, q_num_heads=q_heads, kv_num_heads=kv_heads)
    dims = {name: ("B", "T", a.shape[2]) for name, a in inputs.items() if a is not None and a.ndim == 3}
    if inputs["past"] is not None:
        dims["past"] = ("B",) + inputs["past"].shape[1:]
    g = _against_ort("LinearAttention", inputs, attrs, outputs=2, dims=dims, rtol=1e-4, atol=1e-5)
    d_v = inputs["v"].shape[2] // kv_heads
    assert [t.shape for t in output_types(g)] == [("B", "T", q_heads * d_v), ("B", kv_heads, 4, d_v)]


def test_linear_attention_explicit_scale_matches_onnxruntime(rng):
    inputs = _linear_attention_inputs(rng, "gated_delta", 2, 2)
    attrs = dict(q_num_heads=2, kv_num_heads=2, scale=0.3, chunk_size=2)
    _against_ort("LinearAttention", inputs, attrs, outputs=2, rtol=1e-4, atol=1e-5)


def test_linear_attention_state_carries_across_calls(rng):
    """Prefill of 6 tokens equals prefill of 4, then 2 decode steps fed the present state."""
    run = tlc.ops.get("LinearAttention").run_reference
    inputs = _linear_attention_inputs(rng, "gated_delta", 4, 2, steps=6)
    attrs = dict(q_num_heads=4, kv_num_heads=2, scale=0.0, update_rule="gated_delta", chunk_size=64)
    names = ("q", "k", "v", "past", "decay", "beta")
    whole_out, whole_state = run([inputs[n] for n in names], attrs)
    parts = [None if inputs[n] is None else inputs[n][:, :4] for n in names]
    head_out, state = run(parts, attrs)
    outs = [head_out]
    for t in (4, 5):
        step = [state if n == "past" else inputs[n][:, t:t + 1] for n in names]
        out, state = run(step, attrs)
        outs.append(out)
    np.testing.assert_allclose(np.concatenate(outs, axis=1), whole_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, whole_state, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- errors and traits
def test_errors_name_the_node_and_what_was_expected():
    g = tlc.Graph()
    x3 = g.input("x3", "float32", ("B", "S", 32))
    cache = g.input("cache", "float32", (16, 4))
    ids = g.input("ids", "int64", ("B", "S"))
    with pytest.raises(tlc.ShapeInferenceError, match="'rope'.*3-D.*num_heads must be given"):
        g.add_node("RotaryEmbedding", [x3, cache, cache, ids], name="rope")
    with pytest.raises(tlc.ShapeInferenceError, match="'rope5'.*hidden size.*32 is not a multiple of 5"):
        g.add_node("RotaryEmbedding", [x3, cache, cache, ids], num_heads=5, name="rope5")
    with pytest.raises(tlc.ShapeInferenceError, match="'rope_cache'.*cos_cache.*last dim"):
        g.add_node("RotaryEmbedding", [x3, cache, cache, ids], num_heads=2, name="rope_cache")
    with pytest.raises(tlc.ShapeInferenceError, match="'rope_noids'.*cos_cache.*without position_ids"):
        g.add_node("RotaryEmbedding", [x3, cache, cache], num_heads=4, name="rope_noids")
    with pytest.raises(tlc.ShapeInferenceError, match="'rms'.*scale float32\\[16,4\\] does not broadcast"):
        g.add_node("RMSNormalization", [x3, cache], name="rms")
    with pytest.raises(tlc.ShapeInferenceError, match="'glu'.*same shape"):
        g.add_node("SwiGLU", [x3, g.input("y", "float32", ("B", "S", 16))], name="glu")

    q = g.input("q", "float32", ("B", "T", 32))
    with pytest.raises(tlc.ShapeInferenceError, match="'la'.*q_num_heads 6 must be a positive multiple of "
                                                      "kv_num_heads 4"):
        g.add_node("LinearAttention", [q, q, q], q_num_heads=6, kv_num_heads=4, name="la")
    with pytest.raises(tlc.ShapeInferenceError, match="'la_gated'.*'gated' needs the decay input"):
        g.add_node("LinearAttention", [q, q, q], q_num_heads=4, kv_num_heads=4, update_rule="gated",
                   name="la_gated")
    with pytest.raises(tlc.ShapeInferenceError, match="'la_rule'.*update_rule 'softmax' is not one of"):
        g.add_node("LinearAttention", [q, q, q], q_num_heads=4, kv_num_heads=4, update_rule="softmax",
                   name="la_rule")
    beta = g.input("beta", "float32", ("B", "T", 3))
    with pytest.raises(tlc.ShapeInferenceError, match="'la_beta'.*beta .* kv_num_heads \\(4\\) or 1"):
        g.add_node("LinearAttention", [q, q, q, None, None, beta], q_num_heads=4, kv_num_heads=4,
                   update_rule="delta", name="la_beta")

    x = g.input("x", "float32", ("B", 8, "L"))
    w = g.input("w", "float32", (8, 1, 4))
    with pytest.raises(tlc.ShapeInferenceError, match="'conv'.*activation 'gelu' is not one of none, silu, swish"):
        g.add_node("CausalConvWithState", [x, w], activation="gelu", name="conv")
    with pytest.raises(tlc.ShapeInferenceError, match="'conv_past'.*past_state.*length against kernel size - 1"):
        g.add_node("CausalConvWithState", [x, w, None, g.input("p", "float32", ("B", 8, 4))], name="conv_past")
    with pytest.raises(tlc.ShapeInferenceError, match="'conv_w'.*weight .* depthwise"):
        g.add_node("CausalConvWithState", [x, g.input("w2", "float32", (8, 2, 4))], name="conv_w")


def test_position_ids_out_of_range_fail_by_name(rng):
    inputs = {"x": _rand(rng, 1, 2, 3, 4), "cos": np.ones((5, 2), np.float32), "sin": np.zeros((5, 2), np.float32),
              "positions": np.array([[0, 1, 5]])}
    model = single_node_model("RotaryEmbedding", inputs, opset=OPSET["RotaryEmbedding"])
    graph, _ = from_onnx(model)
    with pytest.raises(tlc.ExecutionError, match="rotaryembedding_node.*position_ids hold values in \\[0, 5\\]; "
                                                 "the caches have 5 positions"):
        tlc.reference.run(graph, inputs)


def test_traits():
    T = tlc.ops.Trait
    for op in OPS:
        opdef = tlc.ops.get(op)
        assert opdef.is_pure and opdef.is_foldable and opdef.doc
    assert tlc.ops.get("SwiGLU").is_elementwise and not tlc.ops.get("SwiGLU").has(T.BROADCAST)
    assert tlc.ops.get("RMSNormalization").has(T.ROW_REDUCIBLE)
    assert tlc.ops.get("CausalConvWithState").has(T.LAYOUT_SENSITIVE)
