"""The horizontal pass: products of one activation by constant weights combine into one product and a Split;
a Split whose parts meet the same unary op, or a Concat of all its parts, folds away. Every case runs the
graph before and after with the reference executor (``pass_testing.apply``)."""

from __future__ import annotations

import numpy as np
from pass_testing import apply, ops

import tlc
from tlc.passes import horizontal
from tlc.passes.horizontal import HorizontalPass


def _apply(graph, rng):
    # numpy's product of a wider B may sum a column in another order: equal to a few ulps, not bit for bit
    return apply(HorizontalPass, graph, rng, rtol=1e-6)


def _branches(rng, n: int, op: str = "Relu", widths=(3, 1, 2), order=None) -> tlc.Graph:
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", n))
    ends = []
    for i, width in enumerate(widths):
        w = g.constant(rng.standard_normal((n, width)).astype(np.float32), f"w{i}")
        c = g.constant(rng.standard_normal((1, width)).astype(np.float32), f"c{i}")
        ends.append(g.add_node(op, [g.add_node("Gemm", [x, w, c], name=f"g{i}")], name=f"r{i}"))
    order = range(len(ends)) if order is None else order
    g.output(g.add_node("Concat", [ends[i] for i in order], axis=1), "y")
    return g


def test_branches_concatenated_again_become_one_gemm_and_one_relu(rng):
    out, result = _apply(_branches(rng, 4), rng)
    assert result.stats == {"products_combined": 3, "ops_hoisted": 1, "splits_joined": 1}
    assert ops(out) == ["Gemm", "Relu"]
    assert out.outputs[0][1] == "y" and out.value_name(out.outputs[0][0]) == "y"


def test_concat_in_another_order_keeps_the_split(rng):
    out, result = _apply(_branches(rng, 4, order=[1, 0, 2]), rng)
    assert result.stats == {"products_combined": 3, "ops_hoisted": 1}
    assert ops(out) == ["Gemm", "Relu", "Split", "Concat"]


def test_clip_with_shared_scalar_bounds_is_hoisted(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 3, 4))
    lo, hi = g.constant(np.float32(0.0), "lo"), g.constant(np.float32(6.0), "hi")
    outs = []
    for i in range(2):
        mm = g.add_node("MatMul", [x, g.constant(rng.standard_normal((4, 5)).astype(np.float32))])
        biased = g.add_node("Add", [mm, g.constant(rng.standard_normal(5).astype(np.float32))])
        outs.append(g.add_node("Clip", [biased, lo, hi], name=f"clip{i}"))
    g.output(outs[0], "a")
    g.output(g.add_node("Neg", [outs[1]]), "b")
    out, result = _apply(g, rng)
    # a graph output part is still a Split output under its own name; Clip moved above the Split
    assert result.stats == {"products_combined": 2, "ops_hoisted": 1}
    assert ops(out) == ["MatMul", "Add", "Clip", "Split", "Neg"]
    assert [name for _, name in out.outputs] == ["a", "b"] and out.has_value("a")


def test_parts_used_twice_or_by_different_ops_stay_split(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 3))
    ws = [g.constant(rng.standard_normal((3, 2)).astype(np.float32)) for _ in range(3)]
    p0, p1, p2 = (g.add_node("MatMul", [x, w]) for w in ws)
    r0, r1 = g.add_node("Relu", [p0]), g.add_node("Relu", [p1])
    g.output(g.add_node("Sum", [r0, r1, g.add_node("Sigmoid", [p2]), p1]), "y")
    out, result = _apply(g, rng)
    assert result.stats == {"products_combined": 3}
    assert ops(out) == ["MatMul", "Split", "Relu", "Relu", "Sigmoid", "Sum"]


def test_large_products_are_left_alone(rng, monkeypatch):
    monkeypatch.setattr(horizontal, "MAX_FUSED_MACS", 4 * 5)   # two [4, 3] weights: 4 * 6 > 20
    g = _branches(rng, 4, widths=(3, 3))
    out, result = _apply(g, rng)
    assert not result.changed and ops(out) == ops(g)


def test_transposed_gemm_weights_combine_along_their_rows(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (5, 3))
    ends = [g.add_node("Gemm", [x, g.constant(rng.standard_normal((k, 3)).astype(np.float32))], transB=1,
                       alpha=0.5) for k in (2, 4)]
    g.output(g.add_node("Concat", ends, axis=-1), "y")
    out, result = _apply(g, rng)
    assert result.stats == {"products_combined": 2, "splits_joined": 1} and ops(out) == ["Gemm"]
