"""The dce pass: dead nodes and constants go, graph inputs stay, Identity and inference Dropout are bypassed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from pass_testing import apply, ops, random_feeds

import tlc
from tlc.io.onnx import to_onnx
from tlc.passes.dce import DcePass


def test_removes_dead_chain_and_unused_constants_but_keeps_inputs(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 4))
    g.input("unused", "float32", (2,))
    w = g.constant(rng.standard_normal(4).astype(np.float32), name="w")
    dead = g.add_node("Exp", [g.add_node("Mul", [x, g.constant(np.float32(3), name="three")])])
    g.add_node("Neg", [dead])
    g.output(g.add_node("Add", [x, w]), "y")
    out, result = apply(DcePass, g, rng)
    assert result.stats == {"nodes_removed": 3, "constants_removed": 1}
    assert ops(out) == ["Add"]
    assert [n.name for n in out.inputs] == ["x", "unused"]
    assert not out.has_value("three") and out.has_value("w")


def test_does_not_fire_when_everything_is_live(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    h = g.add_node("Relu", [x])
    g.output(h, "h")
    g.output(g.add_node("Add", [h, g.constant(np.ones(3, np.float32))]), "y")
    out, result = apply(DcePass, g, rng)
    assert not result.changed and result.stats == {}
    assert out.structural_hash() == g.structural_hash()


def test_identity_chain_is_bypassed_and_output_name_moves_to_the_producer(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    h = g.add_node("Sigmoid", [x], name="h")
    i1 = g.add_node("Identity", [h])
    mid = g.add_node("Mul", [i1, h])
    g.output(g.add_node("Identity", [g.add_node("Identity", [mid])]), "y")
    out, result = apply(DcePass, g, rng)
    assert result.stats == {"bypassed": 3}
    assert ops(out) == ["Sigmoid", "Mul"]
    mul = out.producer(out.outputs[0][0])
    assert mul.op == "Mul" and out.outputs[0][1] == "y" and out.value_name(mul.output()) == "y"
    assert out.inputs_of(mul) == [out.value("h"), out.value("h")]


def test_identity_of_a_graph_input_keeps_both_names_and_still_exports(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 2))
    g.output(g.add_node("Identity", [x]), "y")
    g.output(g.add_node("Relu", [x]), "r")
    out, result = apply(DcePass, g, rng)
    assert result.stats == {"bypassed": 1}
    assert [name for _, name in out.outputs] == ["y", "r"] and out.outputs[0][0] == x
    # the graph still exports: onnxruntime gives y == x under the name "y"
    sess = ort.InferenceSession(to_onnx(out).SerializeToString(), providers=["CPUExecutionProvider"])
    feed = random_feeds(g, rng)
    y, r = sess.run(["y", "r"], feed)
    np.testing.assert_array_equal(y, feed["x"])
    np.testing.assert_array_equal(r, np.maximum(feed["x"], 0))


def test_inference_dropout_is_bypassed(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (4,))
    d1 = g.add_node("Dropout", [x, g.constant(np.float32(0.3))])
    d2 = g.add_node("Dropout", [d1, g.constant(np.float32(0.1)), g.constant(np.array(False))])
    g.output(g.add_node("Tanh", [d2]), "y")
    out, result = apply(DcePass, g, rng)
    assert result.stats == {"bypassed": 2, "constants_removed": 3}
    assert ops(out) == ["Tanh"]


def test_dropout_is_kept_when_its_mask_is_used_or_training_mode_is_unknown(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (4,))
    training = g.input("training", "bool", ())
    data, mask = g.add_node("Dropout", [x], num_outputs=2, name="masked")
    g.output(data, "y")
    g.output(mask, "mask")
    g.output(g.add_node("Dropout", [x, None, training], name="maybe_training"), "z")
    out = g.copy()
    result = DcePass().run(out)
    assert not result.changed
    assert ops(out) == ["Dropout", "Dropout"]
