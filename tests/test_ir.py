"""The graph IR: builder, queries, mutation, copy, hashing and the verifier's named errors."""

from __future__ import annotations

import numpy as np
import pytest

import tlc
from tlc.ir.graph import Value


def mlp() -> tuple[tlc.Graph, Value, Value]:
    g = tlc.Graph("mlp")
    x = g.input("x", "float32", ("N", 8))
    w = g.constant(np.arange(24, dtype=np.float32).reshape(8, 3) / 24, name="w")
    h = g.add_node("MatMul", [x, w])
    y = g.add_node("Softmax", [h], axis=-1)
    g.output(y, "y")
    return g, h, y


def test_builder_types_and_run():
    g, h, y = mlp()
    g.verify()
    assert str(g.type_of(h)) == "float32[N,3]"
    out = tlc.reference.run(g, {"x": np.ones((2, 8), np.float32)})["y"]
    logits = np.ones((2, 8), np.float32) @ (np.arange(24, dtype=np.float32).reshape(8, 3) / 24)
    want = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(out, want / want.sum(1, keepdims=True), rtol=1e-6)


def test_queries_and_replace_all_uses():
    g, h, y = mlp()
    assert [n.name for n, _ in g.users(h)] == ["Softmax"]
    assert g.producer(h).op == "MatMul"
    r = g.add_node("Relu", [h])
    g.replace_all_uses(h, r)
    # the Relu itself now reads h only if we reconnect it; replace_all_uses also rewired it to itself
    g.set_input(g.producer(r), 0, h)
    assert g.inputs_of(g.producer(y)) == [r]
    g.verify()


def test_erase_refuses_live_node_and_remove_unused():
    g, h, y = mlp()
    dead = g.add_node("Neg", [h])
    with pytest.raises(tlc.ValidationError, match="still used"):
        g.erase(g.producer(h))
    assert g.remove_unused() == 1
    assert dead.node not in g


def test_copy_is_deep_and_hash_is_name_independent():
    g, _, _ = mlp()
    c = g.copy()
    c.add_node("Neg", [c.value("y")])
    assert len(c) == len(g) + 1
    g2 = tlc.Graph("other")
    x = g2.input("x", "float32", ("N", 8))
    w = g2.constant(np.arange(24, dtype=np.float32).reshape(8, 3) / 24, name="weights")
    g2.output(g2.add_node("Softmax", [g2.add_node("MatMul", [x, w], name="mm")], axis=-1), "y")
    assert g2.structural_hash() == g.structural_hash()
    g3 = g.copy()
    g3.node("Softmax").attrs["axis"] = 0
    assert g3.structural_hash() != g.structural_hash()


def test_multi_output_and_optional_inputs():
    g = tlc.Graph()
    x = g.input("x", "float32", (4,))
    y, mask = g.add_node("Dropout", [x], num_outputs=2)
    assert str(g.type_of(mask)) == "bool[4]"
    c = g.add_node("Clip", [x, None, g.constant(np.float32(1.0))])
    assert g.inputs_of(g.producer(c))[1] is None
    g.output(c, "c")
    g.output(y, "y")
    g.verify()
    out = tlc.reference.run(g, {"x": np.array([-1, 0, 2, 3], np.float32)})
    np.testing.assert_array_equal(out["c"], [-1, 0, 1, 1])


def test_symbolic_reshape_inference():
    g = tlc.Graph()
    x = g.input("x", "float32", ("B", "S", 768))
    r = g.add_node("Reshape", [x, g.constant(np.array([0, 0, 12, 64]))])
    assert g.shape_of(r) == ("B", "S", 12, 64)
    r2 = g.add_node("Reshape", [x, g.constant(np.array([-1, 768]))])
    assert g.shape_of(r2) == (None, 768)
    r3 = g.add_node("Reshape", [x, g.constant(np.array([0, -1, 768]))])
    assert g.shape_of(r3) == ("B", "S", 768)


def test_verifier_names_the_defect():
    g, h, y = mlp()
    # a cycle
    c = g.copy()
    c.set_input(c.producer(h), 0, y)
    with pytest.raises(tlc.ValidationError, match="cycle"):
        c.verify()
    # a dangling required input
    c = g.copy()
    c.set_input(c.producer(h), 1, None)
    with pytest.raises(tlc.ValidationError, match=r"'MatMul' \(MatMul\): expected 2 inputs, got 1"):
        c.verify()
    # an unknown attribute
    c = g.copy()
    c.node("Softmax").attrs["axes"] = [1]
    with pytest.raises(tlc.ValidationError, match="unknown attribute 'axes'"):
        c.verify()
    # a type that disagrees with inference
    c = g.copy()
    c.set_type(c.value("y"), tlc.TensorType("float64", ("N", 3)))
    with pytest.raises(tlc.ValidationError, match="inference gives float32"):
        c.verify()


def test_unknown_op_and_bad_inputs_are_named():
    g = tlc.Graph()
    x = g.input("x", "float32", (2,))
    with pytest.raises(tlc.UnsupportedOperatorError, match="NoSuchOp"):
        g.add_node("NoSuchOp", [x])
    with pytest.raises(tlc.ShapeInferenceError, match="inner dims differ"):
        g.add_node("MatMul", [g.input("a", "float32", (2, 3)), g.input("b", "float32", (4, 5))])


def test_feed_errors():
    g, _, _ = mlp()
    with pytest.raises(tlc.DTypeMismatchError, match="expected dtype float32, got float64"):
        tlc.reference.run(g, {"x": np.ones((2, 8))})
    with pytest.raises(tlc.ShapeMismatchError, match="expected rank 2"):
        tlc.reference.run(g, {"x": np.ones((8,), np.float32)})
    with pytest.raises(tlc.InputError, match="missing input"):
        tlc.reference.run(g, {})
