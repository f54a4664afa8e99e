"""simplify, rule set ``transformer``: decomposed RMSNorm (plain, HF's cast-around form, the rsqrt spellings)
-> RMSNormalization and the rotate-half rotary embedding with gathered constant caches -> RotaryEmbedding; and
the near misses that must stay decomposed. Numbers before and after on the reference executor."""

from __future__ import annotations

import numpy as np
import pytest

import tlc
from tlc.passes.rewrite import Tracer

try:
    from .simplify_testlib import check_rewrite, random_feeds, simplify
except ImportError:
    from simplify_testlib import check_rewrite, random_feeds, simplify

TOL = {"exact": False, "rtol": 1e-4, "atol": 1e-5, "specials": False}
D = 16
HEAD = 8


def f32(g, v):
    return g.constant(np.float32(v))


def i64(g, v):
    return g.constant(np.asarray(v, np.int64))


# ---------------------------------------------------------------------------- RMSNorm
def decomposed_rmsnorm(g, x, rng, *, square="pow", inverse="reciprocal", weight="const", cast=False, axes=(-1,),
                       eps=1e-6, cast_back=True):
    """The ops torch.onnx writes for HF's LlamaRMSNorm (``cast``) and T5/hand-written RMSNorms (no cast)."""
    xs = g.add_node("Cast", [x], attrs={"to": 1}, name="cast_in") if cast else x
    sq = g.add_node("Pow", [xs, f32(g, 2.0)]) if square == "pow" else g.add_node("Mul", [xs, xs])
    ms = g.add_node("ReduceMean", [sq, i64(g, list(axes))], name="mean_square")
    eps_v = g.input("eps", "float32", ()) if eps == "input" else f32(g, eps)
    ve = g.add_node("Add", [ms, eps_v])
    if inverse == "pow":
        y = g.add_node("Mul", [xs, g.add_node("Pow", [ve, f32(g, -0.5)])])
    else:
        std = g.add_node("Sqrt", [ve]) if inverse != "sqrt-pow" else g.add_node("Pow", [ve, f32(g, 0.5)])
        if inverse == "div":
            y = g.add_node("Div", [xs, std])
        elif inverse == "one-over":
            y = g.add_node("Mul", [g.add_node("Div", [f32(g, 1.0), std]), xs])
        else:
            y = g.add_node("Mul", [xs, g.add_node("Reciprocal", [std])])
    if cast and cast_back:
        y = g.add_node("Cast", [y], attrs={"to": 10}, name="cast_out")
    if weight:
        dtype = np.float16 if cast and cast_back else np.float32
        w = (g.constant(rng.uniform(0.5, 1.5, D).astype(dtype), name="weight") if weight == "const"
             else g.input("weight", np.dtype(dtype).name, weight))
        y = g.add_node("Mul", [w, y])
    return y


def rms_graph(rng, shape=("N", 5, D), dtype="float32", **kwargs):
    g = tlc.Graph("rms")
    x = g.input("x", dtype, shape)
    g.output(decomposed_rmsnorm(g, x, rng, **kwargs), "y")
    return g


@pytest.mark.parametrize("kwargs, rule", [
    ({}, "rmsnorm-scale"),
    ({"square": "mul", "inverse": "div"}, "rmsnorm-scale"),
    ({"inverse": "one-over"}, "rmsnorm-scale"),
    ({"inverse": "pow"}, "rmsnorm-scale"),
    ({"inverse": "sqrt-pow"}, "rmsnorm-scale"),
    ({"weight": (D,)}, "rmsnorm-scale"),
    ({"weight": None}, "rmsnorm"),
])
def test_decomposed_rmsnorm_is_recognized(kwargs, rule, rng):
    after = check_rewrite(rms_graph(rng, **kwargs), rule, ["RMSNormalization"], rng, **TOL)
    rms = after.ops()[0]
    assert rms.attrs["axis"] == -1 and rms.attrs["stash_type"] == 1
    assert rms.attrs["epsilon"] == pytest.approx(1e-6)
    assert after.value_name(after.outputs[0][0]) == "y"


def test_hf_cast_around_form_in_float16(rng):
    """Llama: x.to(float32) ... .to(float16) * weight -> one RMSNormalization on the float16 x, stash float32."""
    g = rms_graph(rng, dtype="float16", cast=True)
    after = check_rewrite(g, "rmsnorm-cast-scale", ["RMSNormalization"], rng, exact=False, rtol=2e-3, atol=2e-3,
                          specials=False)
    rms = after.ops()[0]
    assert rms.attrs["stash_type"] == 1 and after.type_of(after.inputs_of(rms)[0]).dtype == "float16"
    check_rewrite(rms_graph(rng, dtype="float16", cast=True, weight=None), "rmsnorm-cast", ["RMSNormalization"],
                  rng, exact=False, rtol=2e-3, atol=2e-3, specials=False)


def test_cast_in_without_cast_back_normalizes_the_cast_value(rng):
    g = rms_graph(rng, dtype="float16", cast=True, cast_back=False)
    after = check_rewrite(g, "rmsnorm-scale", ["Cast", "RMSNormalization"], rng, **TOL)
    assert after.ops()[1].attrs["stash_type"] == 1


def test_two_trailing_axes(rng):
    after = check_rewrite(rms_graph(rng, shape=("N", 4, D), axes=(1, 2), weight=None), "rmsnorm",
                          ["RMSNormalization"], rng, **TOL)
    assert after.ops()[0].attrs["axis"] == -2


@pytest.mark.parametrize("kwargs, reason", [
    ({"axes": (1,)}, "are not the trailing axes"),
    ({"eps": "input"}, "expected a constant"),
    ({"weight": (2, 1, D)}, "the weight broadcasts x"),
])
def test_rmsnorm_near_misses_stay(kwargs, reason, rng):
    g = rms_graph(rng, **kwargs)
    tracer = Tracer()
    after, stats = simplify(g, tracer=tracer)
    assert not any(k.startswith("rmsnorm-scale") for k in stats), stats
    assert any(m.rule == "rmsnorm-scale" and reason in m.reason for m in tracer.near_misses), tracer.report()
    feeds = random_feeds(g, rng, sizes={"N": 2})
    np.testing.assert_allclose(tlc.reference.run(after, feeds)["y"], tlc.reference.run(g, feeds)["y"],
                               rtol=1e-4, atol=1e-5)


def test_rmsnorm_shared_mean_stays(rng):
    g = rms_graph(rng)
    g.output(g.value("mean_square"), "ms")
    after, _ = simplify(g)
    assert "RMSNormalization" not in after.op_counts()


def test_rmsnorm_not_at_O1(rng):
    check_rewrite(rms_graph(rng), "rmsnorm-scale", ["Mul", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Mul", "Mul"],
                  rng, fires=False, opt_level=1, **TOL)


# ---------------------------------------------------------------------------- rotary
def rope_cache(positions: int, head: int, halves_equal: bool = True) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / 10000 ** (np.arange(0, head, 2) / head)
    freqs = np.outer(np.arange(positions), inv_freq)
    emb = np.concatenate([freqs, freqs if halves_equal else freqs * 1.5], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def rotate_half(g, x, half=HEAD // 2, end=2**63 - 1, axis=-1, neg_first=True):
    first = g.add_node("Slice", [x, i64(g, [0]), i64(g, [half]), i64(g, [axis]), i64(g, [1])])
    second = g.add_node("Slice", [x, i64(g, [half]), i64(g, [end]), i64(g, [axis])])
    parts = [g.add_node("Neg", [second]), first] if neg_first else [second, g.add_node("Neg", [first])]
    return g.add_node("Concat", parts, attrs={"axis": axis})


def rope_graph(batch=2, ids_batch=None, halves_equal=True, unsqueeze=1, cache_input=False, **rot):
    """HF apply_rotary_pos_emb on q and k sharing cos/sin = cache[position_ids].unsqueeze(1)."""
    g = tlc.Graph("rope")
    shape = (batch, 3, 6, HEAD) if unsqueeze == 1 else (batch, 6, 3, HEAD)
    q, k = g.input("q", "float32", shape), g.input("k", "float32", shape)
    ids = g.input("position_ids", "int64", (ids_batch or batch, 6))
    cos_c, sin_c = rope_cache(32, HEAD, halves_equal)
    cos_src = g.input("cos_cache", "float32", (32, HEAD)) if cache_input else g.constant(cos_c, name="cos_cache")
    cos = g.add_node("Unsqueeze", [g.add_node("Gather", [cos_src, ids]), i64(g, [unsqueeze])])
    sin = g.add_node("Unsqueeze", [g.add_node("Gather", [g.constant(sin_c, name="sin_cache"), ids]),
                                   i64(g, [unsqueeze])])
    for name, x in (("q_embed", q), ("k_embed", k)):
        g.output(g.add_node("Add", [g.add_node("Mul", [x, cos]), g.add_node("Mul", [rotate_half(g, x, **rot), sin])]),
                 name)
    return g


def rope_feeds(g, rng):
    feeds = random_feeds(g, rng)
    feeds["position_ids"] = rng.integers(0, 32, feeds["position_ids"].shape).astype(np.int64)
    return feeds


def check_rope(g, rng, fires: bool, ops: list[str] | None = None) -> tlc.Graph:
    after, stats = simplify(g)
    assert (stats.get("rotary-rotate-half", 0) == 2) == fires, stats
    if ops is not None:
        assert [n.op for n in after.ops()] == ops, [n.op for n in after.ops()]
    feeds = rope_feeds(g, rng)
    want, got = tlc.reference.run(g, feeds), tlc.reference.run(after, feeds)
    for name in want:
        assert want[name].tobytes() == got[name].tobytes(), f"{name}: not bit-identical"
    return after


def test_rotate_half_with_gathered_caches_is_recognized(rng):
    after = check_rope(rope_graph(), rng, True, ["RotaryEmbedding", "RotaryEmbedding"])
    rot = after.ops()[0]
    assert after.const_value(after.inputs_of(rot)[1]).shape == (32, HEAD // 2)
    assert rot.attrs.get("interleaved", 0) == 0


def test_position_ids_of_batch_one_are_expanded(rng):
    check_rope(rope_graph(batch=3, ids_batch=1), rng, True, ["Expand", "RotaryEmbedding", "Expand", "RotaryEmbedding"])


def test_slice_to_the_head_size_is_the_second_half(rng):
    check_rope(rope_graph(end=HEAD), rng, True)


@pytest.mark.parametrize("kwargs, reason", [
    ({"halves_equal": False}, "the two halves of the cos cache differ"),
    ({"unsqueeze": 2}, "not 1: x is not (batch, heads, seq, head)"),
    ({"half": 3}, "takes [0, 3) of the head, expected [0, 4)"),
    ({"cache_input": True}, ""),   # the tracer reports the furthest failure among the operand orders
])
def test_rotary_near_misses_stay(kwargs, reason, rng):
    g = rope_graph(**kwargs)
    tracer = Tracer()
    simplify(g, tracer=tracer)
    check_rope(g, rng, False)
    assert any(m.rule == "rotary-rotate-half" and reason in m.reason for m in tracer.near_misses), tracer.report()


def test_negated_first_half_is_not_rotate_half(rng):
    """cat(x2, -x1) rotates the other way: the pattern does not match (no RotaryEmbedding form computes it)."""
    check_rope(rope_graph(neg_first=False), rng, False)


def test_swiglu_chain_is_one_fused_kernel(rng):
    """No SwiGLU rule: gate * sigmoid(gate) * up is fused into one elementwise kernel already."""
    g = tlc.Graph("swiglu")
    gate, up = g.input("gate", "float32", ("N", 32)), g.input("up", "float32", ("N", 32))
    g.output(g.add_node("Mul", [g.add_node("Mul", [gate, g.add_node("Sigmoid", [gate])]), up]), "y")
    opt, _ = tlc.optimize(g, opt_level=2)
    assert [n.qualified_op for n in opt.ops()] == ["tlc.Fused"], [n.qualified_op for n in opt.ops()]
