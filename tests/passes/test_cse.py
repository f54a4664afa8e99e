"""The cse pass: equal pure nodes and equal constants merge, earlier one kept; what must stay apart stays apart."""

from __future__ import annotations

import numpy as np
import pytest
from pass_testing import apply, ops

import tlc
from tlc.ops import OpDef, Trait, registry
from tlc.passes.cse import CsePass


def test_duplicates_and_their_consumers_merge_in_one_run(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 4))
    y = g.input("y", "float32", ("N", 4))
    a1 = g.add_node("Add", [x, y], name="a1")
    a2 = g.add_node("Add", [y, x], name="a2")           # commutative: same value as a1
    r1 = g.add_node("Relu", [a1], name="r1")
    r2 = g.add_node("Relu", [a2], name="r2")            # equal once a2 is a1
    g.output(g.add_node("Mul", [r1, r2]), "out")
    out, result = apply(CsePass, g, rng)
    assert result.stats == {"nodes_merged": 2}
    assert ops(out) == ["Add", "Relu", "Mul"]
    # the first node (in topological order) is the one kept
    assert out.has_value("a1") and out.has_value("r1") and not out.has_value("a2") and not out.has_value("r2")
    mul = out.producer(out.outputs[0][0])
    assert out.inputs_of(mul) == [out.value("r1"), out.value("r1")]


def test_non_commutative_operands_and_different_attributes_stay_apart(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    y = g.input("y", "float32", (3,))
    s1 = g.add_node("Sub", [x, y])
    s2 = g.add_node("Sub", [y, x])
    l1 = g.add_node("LeakyRelu", [s1], alpha=0.1)
    l2 = g.add_node("LeakyRelu", [s1], alpha=0.2)
    g.output(g.add_node("Sum", [s1, s2, l1, l2]), "out")
    out, result = apply(CsePass, g, rng)
    assert not result.changed and result.stats == {}
    assert ops(out) == ops(g)


def test_explicit_default_attribute_equals_omitted_one(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    l1 = g.add_node("LeakyRelu", [x])
    l2 = g.add_node("LeakyRelu", [x], alpha=0.01)
    g.output(g.add_node("Sub", [l1, l2]), "out")
    out, result = apply(CsePass, g, rng)
    assert result.stats == {"nodes_merged": 1} and ops(out) == ["LeakyRelu", "Sub"]


def test_equal_constants_share_by_dtype_shape_and_bytes(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2,))
    c1 = g.constant(np.array([1.0, 2.0], np.float32), name="c1")
    c2 = g.constant(np.array([1.0, 2.0], np.float32), name="c2")          # equal: merges into c1
    c3 = g.constant(np.array([1.0, 2.0], np.float64), name="c3")          # other dtype
    c4 = g.constant(np.array([[1.0, 2.0]], np.float32), name="c4")        # other shape
    z1 = g.constant(np.array([0.0, 0.0], np.float32), name="z1")
    z2 = g.constant(np.array([-0.0, 0.0], np.float32), name="z2")         # -0.0 has other bytes
    n1 = g.constant(np.array([np.nan, 1], np.float32), name="n1")
    n2 = g.constant(np.array([np.nan, 1], np.float32), name="n2")         # same bytes: merges
    terms = [g.add_node("Add", [x, c]) for c in (c1, c2, z1, z2, n1, n2)]
    terms.append(g.add_node("Add", [x, g.add_node("Cast", [c3], to=1)]))
    terms.append(g.add_node("Add", [x, g.add_node("Reshape", [c4, g.constant(np.array([2], np.int64))])]))
    g.output(g.add_node("Sum", terms), "out")
    out, result = apply(CsePass, g, rng)
    assert result.stats == {"constants_merged": 2, "nodes_merged": 2}
    assert not out.has_value("c2") and not out.has_value("n2")
    for name in ("c1", "c3", "c4", "z1", "z2", "n1"):
        assert out.has_value(name), name


def test_impure_ops_are_never_merged(monkeypatch, rng):
    opdef = OpDef(name="Sample", domain="test.cse", infer=lambda ctx: [ctx.type(0)], reference=lambda x: x + 0,
                  traits=frozenset({Trait.FOLDABLE}))
    monkeypatch.setitem(registry._REGISTRY, ("test.cse", "Sample"), opdef)
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    s1 = g.add_node("Sample", [x], domain="test.cse")
    s2 = g.add_node("Sample", [x], domain="test.cse")
    g.output(g.add_node("Add", [s1, s2]), "out")
    out, result = apply(CsePass, g, rng)
    assert not result.changed and ops(out).count("test.cse.Sample") == 2


def test_graph_output_names_survive_a_merge(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    inner = g.add_node("Exp", [x], name="inner")
    g.output(g.add_node("Exp", [x]), "first")
    g.output(g.add_node("Exp", [x]), "second")
    g.output(g.add_node("Neg", [inner]), "neg")
    out, result = apply(CsePass, g, rng)
    assert result.stats == {"nodes_merged": 2} and ops(out) == ["Exp", "Neg"]
    assert [name for _, name in out.outputs] == ["first", "second", "neg"]
    (exp,) = [n for n in out.nodes() if n.op == "Exp"]
    assert out.outputs[0][0] == out.outputs[1][0] == exp.output()
    # the kept node was no output; it takes the first output's name
    assert out.value_name(exp.output()) == "first"


def test_kept_node_is_always_the_earlier_one(rng):
    # the later duplicate is the graph output; the earlier one survives and takes the output's name
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    early = g.add_node("Sqrt", [g.add_node("Abs", [x])], name="early")
    late_in = g.add_node("Abs", [x])
    user = g.add_node("Mul", [early, x], name="user")
    late = g.add_node("Sqrt", [late_in], name="late")
    g.output(g.add_node("Add", [user, late]), "out")
    g.output(late, "late_out")
    out, _ = apply(CsePass, g, rng)
    order = [n.name for n in out.nodes()]
    sqrt = out.producer(out.value("late_out"))
    assert sqrt.name == "early" and order.index("early") < order.index("user")


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_does_not_fire_without_duplicates(dtype, rng):
    g = tlc.Graph()
    x = g.input("x", dtype, (4,))
    y = g.add_node("Equal", [x, g.constant(np.zeros(4, dtype))])
    g.output(g.add_node("Not", [y]), "out")
    out, result = apply(CsePass, g, rng)
    assert not result.changed and out.structural_hash() == g.structural_hash()


def test_training_dropout_without_a_seed_is_never_merged_or_folded():
    """Dropout in training mode without a seed draws a new mask each run: two of them on one input stay two, and
    one on a constant is not folded; with a seed (the same mask every run) or in inference mode they merge."""
    import tlc

    def graph(seed, training):
        g = tlc.Graph("d")
        x = g.input("x", "float32", (64,))
        r, t = g.constant(np.float32(0.5)), g.constant(np.bool_(training))
        attrs = {} if seed is None else {"seed": seed}
        a, b = (g.add_node("Dropout", [x, r, t], **attrs) for _ in range(2))
        g.output(g.add_node("Sub", [a, b]), "diff")
        g.output(g.add_node("Dropout", [g.constant(np.ones(64, np.float32)), r, t], **attrs), "c")
        return g

    def dropouts(g):
        out = tlc.optimize(g, opt_level=2)
        out = out[0] if isinstance(out, tuple) else out
        return sum(n.op == "Dropout" for n in out.nodes())

    assert dropouts(graph(None, True)) == 3
    assert dropouts(graph(7, True)) == 1        # the two merged; the one on a constant folded
    assert dropouts(graph(None, False)) == 0    # inference mode: the identity
