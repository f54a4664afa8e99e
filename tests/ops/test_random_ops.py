"""The random generators: types, seeds (the same draws every run) and fresh draws without one, their
distributions against their definitions on large samples, and passes that must not merge or fold them."""

from __future__ import annotations

import numpy as np
import pytest

import tlc


def _run(g: tlc.Graph, feeds: dict | None = None) -> dict[str, np.ndarray]:
    return tlc.reference.run(g, feeds or {})


def _graph(op: str, *inputs, **attrs) -> tlc.Graph:
    g = tlc.Graph(op)
    values = [g.input(f"x{i}", a.dtype, a.shape) for i, a in enumerate(inputs)]
    g.output(g.add_node(op, values, attrs=attrs), "y")
    return g


def test_types_and_seeds():
    g = _graph("RandomNormal", shape=[3, 4], dtype=11, seed=2.0)
    assert g.type_of(g.outputs[0][0]) == tlc.TensorType("float64", (3, 4))
    a, b = _run(g)["y"], _run(g)["y"]
    np.testing.assert_array_equal(a, b)                       # seeded: the same every run
    g2 = _graph("RandomNormal", shape=[3, 4], dtype=11, seed=3.0)
    assert not np.array_equal(_run(g2)["y"], a)
    fresh = _graph("RandomUniform", shape=[64])
    assert not np.array_equal(_run(fresh)["y"], _run(fresh)["y"])
    like = _graph("RandomUniformLike", np.zeros((2, 5), np.float16))
    assert like.type_of(like.outputs[0][0]) == tlc.TensorType("float16", (2, 5))
    multi = _graph("Multinomial", np.zeros((4, 3), np.float32), sample_size=7, dtype=7)
    assert multi.type_of(multi.outputs[0][0]) == tlc.TensorType("int64", (4, 7))
    with pytest.raises(tlc.ShapeInferenceError, match="draws float16, float32 or float64"):
        _graph("RandomUniform", shape=[2], dtype=6)


def test_distributions_match_their_definitions():
    n = 200_000
    u = _run(_graph("RandomUniform", shape=[n], low=-2.0, high=6.0, seed=1.0))["y"]
    assert u.min() >= -2.0 and u.max() < 6.0 and abs(u.mean() - 2.0) < 0.05
    zeros = np.zeros(n, np.float32)
    z = _run(_graph("RandomNormalLike", zeros, mean=1.0, scale=3.0, seed=1.0), {"x0": zeros})["y"]
    assert abs(z.mean() - 1.0) < 0.05 and abs(z.std() - 3.0) < 0.05
    p = np.array([0.0, 0.25, 1.0], np.float32)
    draws = _run(_graph("Bernoulli", np.tile(p, (n // 3, 1)), seed=4.0), {"x0": np.tile(p, (n // 3, 1))})["y"]
    np.testing.assert_allclose(draws.mean(axis=0), p, atol=0.01)
    logits = np.log(np.array([[0.1, 0.6, 0.3], [0.5, 0.5, 0.0]], np.float32) + 1e-30)
    g = _graph("Multinomial", logits, sample_size=50_000, seed=5.0)
    picks = _run(g, {"x0": logits})["y"]
    freq = np.stack([np.bincount(row, minlength=3) / row.size for row in picks])
    np.testing.assert_allclose(freq, np.exp(logits) / np.exp(logits).sum(1, keepdims=True), atol=0.01)


def test_not_merged_or_folded_and_compiled_as_reference_steps():
    g = tlc.Graph("two draws")
    a = g.add_node("RandomUniform", [], attrs={"shape": [8]})
    b = g.add_node("RandomUniform", [], attrs={"shape": [8]})
    g.output(g.add_node("Sub", [a, b]), "y")
    optimized, _ = tlc.optimize(g, opt_level=2)
    assert sum(n.op == "RandomUniform" for n in optimized.nodes()) == 2   # CSE keeps both, fold runs neither
    plan = tlc.compile(g, opt_level=2, jit="off")
    assert plan.run({})["y"].any() and not np.array_equal(plan.run({})["y"], plan.run({})["y"])
    assert [s.mode for s in plan.stats().steps if s.op == "RandomUniform"] == ["reference", "reference"]
