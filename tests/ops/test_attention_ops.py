"""Attention: ONNX backend cases, onnxruntime on random inputs (every configuration it runs), inferred types with
symbolic dims, what onnxruntime refuses (a short attn_mask) against the spec's padding, errors."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_backend_case, feeds_of, output_types, run_ort, run_tlc, single_node_model

import tlc
from tests.onnx_cases import CompiledRunner, quick_cases_for, run_case
from tlc.io.onnx import from_onnx
from tlc.ir.types import DTYPES

#: none: every Attention node case passes (the ``_expanded`` variants run the function body's ops, not this op)
KNOWN_FAILURES: dict[str, tuple[str, str]] = {}
CASES = quick_cases_for("Attention")
B, H, S, T, E = 2, 4, 5, 7, 8  # batch, heads, query length, key length, head size


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    if "bf16" in case.name and "bfloat16" not in DTYPES:
        pytest.skip("tlc holds no bfloat16 here")
    check_backend_case(case, KNOWN_FAILURES)


@pytest.mark.parametrize("name", ["test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal",
                                  "test_attention_local_window_gqa_rank4_mask"])
def test_backend_case_compiled(name):
    (case,) = [c for c in CASES if c.name == name]
    assert run_case(case, CompiledRunner(opt_level=2)) == ("pass", "")


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _qkv(rng, q_heads=H, kv_heads=H, v_head=E, dtype=np.float32):
    return {"Q": _rand(rng, B, q_heads, S, E, dtype=dtype), "K": _rand(rng, B, kv_heads, T, E, dtype=dtype),
            "V": _rand(rng, B, kv_heads, T, v_head, dtype=dtype)}


def _compare_with_ort(inputs, attrs=None, outputs=1, opset=23, dims=None, tol=1e-5) -> tlc.Graph:
    """One Attention node in onnxruntime and in tlc: every output's dtype, shape and values, and the inferred
    types fit the results. onnxruntime masks with the lowest finite float where the spec (and tlc) has -inf:
    that shows in qk_matmul_output mode 2, so its lowest float counts as -inf there."""
    model = single_node_model("Attention", inputs, attrs, outputs, dims, opset=opset)
    want = run_ort(model, feeds_of(inputs))
    graph, got = run_tlc(model, feeds_of(inputs))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"output {i}: {g.dtype}{g.shape}, ort {w.dtype}{w.shape}"
        if i == 3:
            w = np.where(w <= np.finfo(w.dtype).min, -np.inf, w)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=f"output {i} differs from onnxruntime")
    for t, g in zip(output_types(graph), got):
        assert t.matches(g), f"inferred {t} does not fit result {g.dtype}{list(g.shape)}"
    return graph


CONFIGS = {
    "mha": ({}, {}),
    "gqa-v-head": ({"q_heads": 8, "kv_heads": 2, "v_head": 6}, {}),
    "mqa-causal": ({"q_heads": 4, "kv_heads": 1}, {"is_causal": 1}),
    "scale-softcap": ({}, {"scale": 0.3, "softcap": 2.0}),
    "float64": ({"dtype": np.float64}, {"is_causal": 1}),
}


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_4d_matches_onnxruntime(rng, config):
    shapes, attrs = CONFIGS[config]
    _compare_with_ort(_qkv(rng, **shapes), attrs)


def test_3d_gqa_matches_onnxruntime(rng):
    inputs = {"Q": _rand(rng, B, S, 8 * E), "K": _rand(rng, B, T, 2 * E), "V": _rand(rng, B, T, 2 * 6)}
    g = _compare_with_ort(inputs, {"q_num_heads": 8, "kv_num_heads": 2, "is_causal": 1}, outputs=4,
                          dims={"Q": ("N", "S", 8 * E), "K": ("N", "T", 2 * E), "V": ("N", "T", 12)})
    assert [t.shape for t in output_types(g)] == [("N", "S", 48), ("N", 2, "T", E), ("N", 2, "T", 6),
                                                  ("N", 8, "S", "T")]


@pytest.mark.parametrize("mask", ["bool-2d", "float-4d-batch", "float-3d-heads"])
def test_attn_mask_matches_onnxruntime(rng, mask):
    shape = {"bool-2d": (S, T), "float-4d-batch": (B, 1, S, T), "float-3d-heads": (H, S, T)}[mask]
    value = rng.random(shape) > 0.3 if mask.startswith("bool") else _rand(rng, *shape)
    _compare_with_ort({**_qkv(rng), "attn_mask": value}, {"is_causal": int(mask == "float-4d-batch")})


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_past_and_present_with_qk_output_matches_onnxruntime(rng, mode):
    past = 3
    inputs = {**_qkv(rng, q_heads=4, kv_heads=2), "attn_mask": _rand(rng, S, past + T),
              "past_key": _rand(rng, B, 2, past, E), "past_value": _rand(rng, B, 2, past, E)}
    g = _compare_with_ort(inputs, {"qk_matmul_output_mode": mode, "softcap": 3.0, "is_causal": 1}, outputs=4,
                          dims={"K": ("N", 2, "T", E), "V": ("N", 2, "T", E), "past_key": ("N", 2, "P", E),
                                "past_value": ("N", 2, "P", E), "Q": ("N", 4, S, E)})
    # past + new keys: no symbolic sum, so the total length is unknown
    assert [t.shape for t in output_types(g)] == [("N", 4, S, E), ("N", 2, None, E), ("N", 2, None, E),
                                                  ("N", 4, S, None)]


@pytest.mark.parametrize("causal", [0, 1])
def test_nonpad_kv_seqlen_matches_onnxruntime(rng, causal):
    inputs = {**_qkv(rng), "attn_mask": None, "past_key": None, "past_value": None,
              "nonpad_kv_seqlen": np.array([4, T], np.int64)}
    _compare_with_ort(inputs, {"is_causal": causal}, opset=24)


def test_sliding_window_matches_onnxruntime(rng):
    _compare_with_ort(_qkv(rng), {"left_window_size": 2, "right_window_size": 1}, opset=25)


def test_float16_with_float32_softmax_matches_onnxruntime(rng):
    g = _compare_with_ort(_qkv(rng, dtype=np.float16), {"softmax_precision": 1, "qk_matmul_output_mode": 3},
                          outputs=4, tol=4e-3)
    assert output_types(g)[3].dtype == "float16"  # mode 3 is emitted in T1, not in the softmax's precision


def test_fully_masked_rows_are_zero_in_y_and_probabilities(rng):
    mask = rng.random((S, T)) > 0.5
    mask[1] = False
    inputs = {**_qkv(rng), "attn_mask": mask}
    model = single_node_model("Attention", inputs, {"qk_matmul_output_mode": 3}, 4, opset=23)
    want = run_ort(model, feeds_of(inputs))[::3]
    _, got = run_tlc(model, feeds_of(inputs))
    got = got[::3]
    for g, w in zip(got, want):
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert not got[0][:, :, 1].any() and not got[1][:, :, 1].any()


def test_short_mask_is_padded_with_minus_infinity(rng):
    """onnxruntime refuses a mask narrower than the keys; the spec pads it with -inf: the same as a full mask."""
    short = _rand(rng, S, 4)
    inputs = _qkv(rng)
    full = np.concatenate([short, np.full((S, T - 4), -np.inf, np.float32)], axis=1)
    want = run_ort(single_node_model("Attention", {**inputs, "attn_mask": full}, opset=23),
                   inputs | {"attn_mask": full})
    _, got = run_tlc(single_node_model("Attention", {**inputs, "attn_mask": short}, opset=23),
                     inputs | {"attn_mask": short})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif("bfloat16" not in DTYPES, reason="tlc holds no bfloat16 here")
def test_bfloat16_softmax_precision_rounds_the_probabilities(rng):
    inputs = [_rand(rng, 1, 2, 3, 8), _rand(rng, 1, 2, 4, 8), _rand(rng, 1, 2, 4, 8)]
    attention = tlc.ops.get("Attention")
    exact = attention.run_reference(inputs, {"qk_matmul_output_mode": 3})[3]
    coarse = attention.run_reference(inputs, {"qk_matmul_output_mode": 3, "softmax_precision": 16})[3]
    assert coarse.dtype == np.float32
    np.testing.assert_allclose(coarse, exact, rtol=3e-2, atol=2e-3)
    np.testing.assert_array_equal(coarse.view(np.uint32) & 0xFFFF, 0)  # bfloat16 values, cast back to float32


def _graph_with(q, k, v, **shapes):
    g = tlc.Graph()
    values = [g.input(name, "float32", shape) for name, shape in (("q", q), ("k", k), ("v", v))]
    for name, shape in shapes.items():
        dtype = "bool" if name == "mask" else "int64" if name == "nonpad" else "float32"
        values.append(None if shape is None else g.input(name, dtype, shape))
    return g, values


def test_inferred_types_keep_symbolic_dims():
    g, ins = _graph_with(("N", 8, "S", 16), ("N", 2, "T", 16), ("N", 2, "T", 32))
    outs = g.add_node("Attention", ins, num_outputs=4, name="att")
    assert [g.type_of(v).shape for v in outs] == [("N", 8, "S", 32), ("N", 2, "T", 16), ("N", 2, "T", 32),
                                                  ("N", 8, "S", "T")]
    g, ins = _graph_with(("N", 4, 64), ("N", 6, 32), ("N", 6, 32), mask=(4, 6), past_key=("N", 2, 3, 16),
                         past_value=("N", 2, 3, 16))
    outs = g.add_node("Attention", ins, num_outputs=3, q_num_heads=4, kv_num_heads=2, name="att3")
    assert [g.type_of(v).shape for v in outs] == [("N", 4, 64), ("N", 2, 9, 16), ("N", 2, 9, 16)]


@pytest.mark.parametrize("shapes, attrs, message", [
    ((("N", 4, 64), ("N", 6, 32), ("N", 6, 32)), {}, "3-D Q, K and V need a positive q_num_heads"),
    (((2, 3, 4, 8), (2, 2, 6, 8), (2, 2, 6, 8)), {}, "q_num_heads 3 is not a multiple of kv_num_heads 2"),
    (((2, 4, 4, 8), (2, 2, 6, 8), (2, 2, 5, 8)), {}, "sequence lengths of K and V differ: 6, 5"),
    (((2, 4, 4, 8), (2, 2, 6, 4), (2, 2, 6, 8)), {}, "head sizes of Q and K .* differ: 8, 4"),
    (((2, 4, 8), (2, 6, 8, 8), (2, 6, 8, 8)), {"q_num_heads": 1, "kv_num_heads": 1},
     "K float32\\[2,6,8,8\\] has rank 4; Q, K and V must all be"),
    (((2, 4, 4, 8), (2, 4, 6, 8), (2, 4, 6, 8)), {"qk_matmul_output_mode": 4}, "qk_matmul_output_mode must be"),
    (((2, 4, 4, 8), (2, 4, 6, 8), (2, 4, 6, 8)), {"softmax_precision": 7}, "softmax_precision 7 is not one of"),
    (((2, 4, 4, 8), (2, 4, 6, 8), (2, 4, 6, 8)), {"left_window_size": -2}, "left_window_size must be -1"),
])
def test_errors_name_node_and_what_was_expected(shapes, attrs, message):
    g, ins = _graph_with(*shapes)
    with pytest.raises(tlc.ShapeInferenceError, match=f"'att'.*{message}"):
        g.add_node("Attention", ins, name="att", attrs=attrs)


@pytest.mark.parametrize("extra, message", [
    ({"mask": (4, 7)}, "attn_mask bool\\[4,7\\] does not broadcast to .* = \\[2, 4, 4, 6\\].*shorter than the keys"),
    ({"mask": (3, 4, 6)}, "attn_mask bool\\[3,4,6\\] does not broadcast"),
    ({"mask": None, "past_key": (2, 4, 3, 8)}, "past_key and past_value go together"),
    ({"mask": None, "past_key": (2, 4, 3, 8), "past_value": (2, 4, 3, 8), "nonpad": (2,)},
     "nonpad_kv_seqlen .* cannot be used with past_key"),
    ({"mask": None, "past_key": None, "past_value": None, "nonpad": (3,)},
     "batch sizes of Q and nonpad_kv_seqlen differ: 2, 3"),
])
def test_optional_input_errors(extra, message):
    g, ins = _graph_with((2, 4, 4, 8), (2, 4, 6, 8), (2, 4, 6, 8), **extra)
    with pytest.raises(tlc.ShapeInferenceError, match=f"'att'.*{message}"):
        g.add_node("Attention", ins, name="att")


def test_integer_inputs_are_refused_by_name():
    model = single_node_model("Attention", {n: np.zeros((1, 1, 2, 4), np.int32) for n in "QKV"}, opset=23)
    with pytest.raises(tlc.ShapeInferenceError, match="Q has dtype int32; Attention takes"):
        from_onnx(model)


def test_attention_traits():
    opdef = tlc.ops.get("Attention")
    assert opdef.is_pure and opdef.is_foldable and opdef.doc and not opdef.is_elementwise
