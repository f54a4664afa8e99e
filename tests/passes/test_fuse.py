"""The fuse pass: which groups it forms, which it refuses, and that outputs never change."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import tlc
from tlc.io.onnx import to_onnx
from tlc.passes.fuse import FusePass


def fused_nodes(g: tlc.Graph) -> list[tlc.Node]:
    return [n for n in g.nodes() if n.op == "Fused"]


def fuse_and_compare(g: tlc.Graph, feeds: dict) -> tlc.Graph:
    """Run the pass on a copy; the reference executor must give bit-identical outputs before and after."""
    before = tlc.reference.run(g, feeds)
    out = g.copy()
    FusePass().run(out)
    out.verify()
    after = tlc.reference.run(out, feeds)
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])
    return out


def test_elementwise_chain_becomes_one_group(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 32))
    a = g.constant(rng.random(32, dtype=np.float32), name="a")
    y = g.add_node("Add", [g.add_node("Mul", [x, a]), g.constant(np.float32(0.5))])
    z = g.add_node("Mul", [y, g.add_node("Sigmoid", [y])])
    g.output(g.add_node("Add", [z, x]), "y")
    out = fuse_and_compare(g, {"x": rng.random((5, 32), dtype=np.float32)})
    (f,) = fused_nodes(out)
    assert f.attrs["kind"] == "elementwise"
    body = f.attrs["body"]
    assert [n.op for n in body.ops()] == ["Mul", "Add", "Sigmoid", "Mul", "Add"]
    # the vector constant is an input of the kernel, the scalar is inlined
    assert [n.name for n in body.inputs] == ["x", "a"]
    assert out.outputs[0][1] == "y" and out.value_name(out.outputs[0][0]) == "y"
    # the scalar's outer Constant went with the group (exported, it was an initializer no node used)
    assert sorted(n.name for n in out.nodes() if n.op == "Constant") == ["a"]


def test_a_region_larger_than_the_cap_splits_into_groups_of_at_most_the_cap(rng):
    """``MAX_GROUP_NODES``: a wide group's kernel compiles in time that grows faster than its size, so a region
    of more nodes becomes several groups, none larger than the cap, computing what the graph did."""
    from tlc.passes import fuse

    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 16))
    branches = []
    for k in range(12):   # twelve branches of seven ops, summed: 95 elementwise nodes in one connected region
        v = x
        for op in ("Sigmoid", "Neg", "Tanh", "Abs", "Sqrt", "Exp"):
            v = g.add_node(op, [v])
        branches.append(g.add_node("Mul", [v, g.constant(np.float32(k + 1))]))
    total = branches[0]
    for b in branches[1:]:
        total = g.add_node("Add", [total, b])
    g.output(total, "y")
    out = fuse_and_compare(g, {"x": rng.random((3, 16), dtype=np.float32)})
    sizes = sorted(sum(n.op != "Constant" for n in f.attrs["body"].ops()) for f in fused_nodes(out))
    assert sum(sizes) == 95 and max(sizes) == fuse.MAX_GROUP_NODES == 64 and len(sizes) > 1, sizes


def test_epilogue_and_reduction_groups(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 16))
    w = g.constant(rng.standard_normal((16, 16)).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(16).astype(np.float32), name="b")
    h = g.add_node("Relu", [g.add_node("Add", [g.add_node("MatMul", [x, w]), b])])
    mean = g.add_node("ReduceMean", [h, g.constant(np.array([-1]))]) if tlc.ops.is_registered("ReduceMean") else \
        g.add_node("Div", [g.add_node("ReduceSum", [h, g.constant(np.array([-1]))]), g.constant(np.float32(16))])
    centered = g.add_node("Sub", [h, mean])
    g.output(g.add_node("Softmax", [centered], axis=-1), "y")
    g.output(centered, "centered")
    out = fuse_and_compare(g, {"x": rng.standard_normal((3, 16)).astype(np.float32)})
    kinds = sorted(f.attrs["kind"] for f in fused_nodes(out))
    assert kinds == ["epilogue", "reduction"]
    red = next(f for f in fused_nodes(out) if f.attrs["kind"] == "reduction")
    assert red.output_names == ["centered", "y"]
    assert out.op_counts().get("MatMul", 0) == 0


def test_fused_graph_exports_to_onnxruntime(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (4, 8))
    g.output(g.add_node("Tanh", [g.add_node("Mul", [x, x])]), "y")
    out = fuse_and_compare(g, {"x": rng.random((4, 8), dtype=np.float32)})
    feeds = {"x": rng.random((4, 8), dtype=np.float32)}
    got = ort.InferenceSession(to_onnx(out).SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(got, tlc.reference.run(g, feeds)["y"], rtol=1e-6)


def test_does_not_fire_on_non_float_or_non_last_axis(rng):
    g = tlc.Graph()
    i = g.input("i", "int64", (4, 8))
    g.output(g.add_node("Add", [i, i]), "ints")
    x = g.input("x", "float32", (4, 8))
    g.output(g.add_node("ReduceSum", [x, g.constant(np.array([0]))]), "colsum")
    out = g.copy()
    result = FusePass().run(out)
    assert not result.changed and fused_nodes(out) == []


def test_refuses_a_group_that_would_create_a_cycle(rng):
    # a = Exp(x); b = MatMul(a, w) (not fusible); c = Add(a, b): {Exp, Add} would be non-convex.
    g = tlc.Graph()
    x = g.input("x", "float32", (4, 4))
    a = g.add_node("Exp", [x])
    b = g.add_node("MatMul", [a, g.constant(rng.random((4, 4), dtype=np.float32))])
    g.output(g.add_node("Add", [a, b]), "y")
    out = fuse_and_compare(g, {"x": rng.random((4, 4), dtype=np.float32)})
    for f in fused_nodes(out):
        ops = {n.op for n in f.attrs["body"].ops()}
        assert not {"Exp", "Add"} <= ops


def test_epilogue_takes_a_dag_and_keeps_escaping_values(rng):
    # SiLU reads the contraction result twice; an intermediate that escapes becomes a second output
    g = tlc.Graph()
    x = g.input("x", "float32", (4, 4))
    m = g.add_node("MatMul", [x, g.constant(rng.random((4, 4), dtype=np.float32))])
    silu = g.add_node("Mul", [m, g.add_node("Sigmoid", [m])])
    g.output(g.add_node("Exp", [silu]), "y")
    g.output(silu, "silu")
    out = fuse_and_compare(g, {"x": rng.random((4, 4), dtype=np.float32)})
    (epi,) = fused_nodes(out)
    assert epi.attrs["kind"] == "epilogue"
    assert [n.op for n in epi.attrs["body"].ops()] == ["MatMul", "Sigmoid", "Mul", "Exp"]
    assert sorted(epi.output_names) == ["silu", "y"]


def test_no_epilogue_when_the_raw_contraction_result_escapes(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (4, 4))
    m = g.add_node("MatMul", [x, g.constant(rng.random((4, 4), dtype=np.float32))])
    g.output(g.add_node("Relu", [m]), "y")
    g.output(m, "raw")  # the kernel would overwrite it in place, so the MatMul stays on its own
    out = fuse_and_compare(g, {"x": rng.random((4, 4), dtype=np.float32)})
    assert out.op_counts().get("MatMul") == 1
    assert [f.attrs["kind"] for f in fused_nodes(out)] == ["elementwise"]


@pytest.mark.parametrize("seed", range(5))
def test_random_elementwise_dags_keep_their_outputs(seed):
    rng = np.random.default_rng(seed)
    g = tlc.Graph()
    values = [g.input("x", "float32", (3, 5)), g.input("y", "float32", (1, 5))]
    ops = ["Add", "Mul", "Sub", "Tanh", "Relu", "Neg", "Abs", "MatMul"]
    for _ in range(12):
        op = ops[rng.integers(len(ops))]
        if op == "MatMul":
            src = values[rng.integers(len(values))]
            if g.shape_of(src) != (3, 5):
                continue
            values.append(g.add_node("MatMul", [src, g.constant(rng.random((5, 5), dtype=np.float32))]))
        elif op in ("Tanh", "Relu", "Neg", "Abs"):
            values.append(g.add_node(op, [values[rng.integers(len(values))]]))
        else:
            values.append(g.add_node(op, [values[rng.integers(len(values))], values[rng.integers(len(values))]]))
    for i, v in enumerate(values[2:]):
        if rng.random() < 0.4 or v == values[-1]:
            g.output(v, f"out{i}")
    fuse_and_compare(g, {"x": rng.random((3, 5), dtype=np.float32), "y": rng.random((1, 5), dtype=np.float32)})
