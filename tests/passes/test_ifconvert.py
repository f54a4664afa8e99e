"""ifconvert against the reference executor: both conditions, a branch not taken that makes inf and NaN, and an
If inside a Loop's body (tools/models.rnn_loop at its small size)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import tlc
from tlc.io.onnx import from_onnx
from tlc.ir import Graph
from tlc.reference import Interpreter


def _clip_graph() -> Graph:
    def branch(name, fn):
        b = Graph(name)
        h, n = b.input("h", "float32", (2, 3)), b.input("n", "float32", (2, 1))
        b.output(fn(b, h, n), "out")
        return b

    g = Graph("clip")
    h, n, c = g.input("h", "float32", (2, 3)), g.input("n", "float32", (2, 1)), g.input("c", "bool", (1,))
    then_b = branch("then", lambda b, h, n: b.add_node(
        "Mul", [h, b.add_node("Div", [b.constant(np.array(2.0, np.float32)), n])]))
    else_b = branch("else", lambda b, h, n: b.add_node("Identity", [h]))
    g.output(g.add_node("If", [c, h, n], then_branch=then_b, else_branch=else_b), "y")
    return g


def test_both_conditions_give_the_branch_taken_bit_for_bit():
    g = _clip_graph()
    plan = tlc.compile(g, jit="off")
    assert "If" not in {s.op for s in plan.stats().steps}
    reference = Interpreter(g)
    h = np.array([[1.0, -2.0, np.inf], [0.5, np.nan, 3.0]], np.float32)
    for n in (np.array([[4.0], [0.0]], np.float32), np.array([[0.0], [-0.0]], np.float32)):
        for cond in (True, False):
            feeds = {"h": h, "n": n, "c": np.array([cond])}
            want = reference.run(feeds)["y"]
            got = plan.run(feeds)["y"]
            np.testing.assert_array_equal(got, want)


def test_an_if_in_a_loop_body_converts_and_matches_the_reference():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import models

    proto = models.rnn_loop(batch=2, small=True)
    graph, feeds = from_onnx(proto)[0], models.random_feeds(proto, 2)
    feeds["x"] = feeds["x"] * 3   # some steps clip, some do not
    want = Interpreter(graph).run(feeds)
    plan = tlc.compile(graph, jit="eager")
    got = plan.run(feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    body = graph.node("Loop_0").attrs["body"]
    assert "If" in body.op_counts() and "If" not in tlc.optimize(body)[0].op_counts()   # what the body plan runs
