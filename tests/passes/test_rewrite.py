"""The rewrite engine: pattern matching (commutative, DAG, captures, constraints), the driver, the tracer."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tlc
from tlc.passes.rewrite import (
    FLOAT,
    Const,
    OneOf,
    Op,
    Opt,
    Rule,
    Tracer,
    Var,
    apply_rules,
    find_match,
)

try:
    from .simplify_testlib import assert_same_numbers, ops, random_feeds
except ImportError:
    from simplify_testlib import assert_same_numbers, ops, random_feeds

MUL_ONE = Rule("mul-one", Op("Mul", Var("x"), Const(1.0)), lambda m, b: m["x"])


def _graph(dtype="float32", shape=("N", 4)):
    g = tlc.Graph("t")
    return g, g.input("x", dtype, shape)


@pytest.mark.parametrize("const_first", [False, True])
def test_commutative_operand_orders_match(const_first, rng):
    g, x = _graph()
    one = g.constant(np.float32(1.0))
    y = g.add_node("Mul", [one, x] if const_first else [x, one])
    g.output(g.add_node("Relu", [y]), "out")
    before = g.copy()
    result = apply_rules(g, [MUL_ONE])
    assert result.counts == {"mul-one": 1} and result.converged
    assert ops(g) == ["Relu"] and g.inputs_of(g.ops()[0]) == [x]
    assert g.op_counts() == {"Input": 1, "Relu": 1}, "the dead constant is erased too"
    assert_same_numbers(before, g, random_feeds(before, rng))


def test_non_commutative_op_keeps_operand_order():
    g, x = _graph()
    y = g.add_node("Div", [g.constant(np.float32(1.0)), x])
    g.output(y, "out")
    rule = Rule("div-one", Op("Div", Var("x"), Const(1.0)), lambda m, b: m["x"])
    assert apply_rules(g, [rule]).counts == {}
    assert ops(g) == ["Div"]


def test_repeated_capture_must_bind_the_same_value():
    g, x = _graph()
    z = g.input("z", "float32", ("N", 4))
    same = g.add_node("Add", [x, x], name="same")
    other = g.add_node("Add", [x, z], name="other")
    g.output(same, "s")
    g.output(other, "o")
    rule = Rule("double", Op("Add", Var("x"), Var("x")), lambda m, b: b.op("Mul", m["x"], b.constant(np.float32(2))))
    tracer = Tracer(min_progress=1)
    assert apply_rules(g, [rule], tracer=tracer).counts == {"double": 1}
    assert ops(g) == ["Add", "Mul"]
    assert any(m.node == "other" and "'x' is bound to 'x'" in m.reason for m in tracer.near_misses)


def test_dag_pattern_object_must_match_one_node():
    """One pattern object used twice (d in d*d) must be the same node, not two equal-looking ones."""
    g, x = _graph()
    d0 = g.add_node("Neg", [x], name="d0")
    d1 = g.add_node("Neg", [x], name="d1")
    d2 = g.add_node("Neg", [x], name="d2")
    g.output(g.add_node("Mul", [d0, d0], name="sq"), "sq")
    g.output(g.add_node("Mul", [d1, d2], name="mixed"), "mixed")
    d = Op("Neg", Var("x"))
    rule = Rule("square", Op("Mul", d, d), lambda m, b: b.op("Mul", m["x"], m["x"]))
    tracer = Tracer(min_progress=1)
    assert apply_rules(g, [rule], tracer=tracer).counts == {"square": 1}
    assert ops(g) == ["Neg", "Neg", "Mul", "Mul"]
    assert [m.reason for m in tracer.near_misses if m.node == "mixed"] == [
        "the same Neg should feed both uses, got Neg 'd1' and Neg 'd2'"]


def test_attribute_and_type_constraints():
    g, x = _graph("int64")
    f = g.input("f", "float32", (2, 3))
    g.output(g.add_node("LeakyRelu", [x], alpha=0.5), "a")
    g.output(g.add_node("LeakyRelu", [f], alpha=0.5), "b")
    g.output(g.add_node("LeakyRelu", [f]), "c")
    pat = Op("LeakyRelu", Var("x", dtype=FLOAT, rank=2, static=True), attrs={"alpha": lambda a: a == 0.5})
    rule = Rule("leaky", pat, lambda m, b: b.op("Relu", m["x"]))
    tracer = Tracer(min_progress=1)
    assert apply_rules(g, [rule], tracer=tracer).counts == {"leaky": 1}
    assert ops(g) == ["LeakyRelu", "LeakyRelu", "Relu"]
    reasons = sorted(m.reason for m in tracer.near_misses)
    assert "dtype int64, expected float16/float32/float64" in reasons[1]
    assert "attribute alpha=0.01" in reasons[0], "the registry default of alpha is what the predicate sees"


def test_intermediate_with_other_users_refuses_or_is_kept():
    g, x = _graph()
    inner = g.add_node("Neg", [x], name="inner")
    outer = g.add_node("Neg", [inner], name="outer")
    g.output(outer, "y")
    g.output(g.add_node("Relu", [inner], name="other"), "z")
    strict = Rule("neg-neg", Op("Neg", Op("Neg", Var("x"))), lambda m, b: m["x"])
    tracer = Tracer()
    assert apply_rules(g.copy(), [strict], tracer=tracer).counts == {}
    assert "is also used by 'other'; it cannot be removed" in tracer.near_misses[0].reason
    shared = Rule("neg-neg", Op("Neg", Op("Neg", Var("x"), shared=True)), lambda m, b: m["x"])
    assert apply_rules(g, [shared]).counts == {"neg-neg": 1}
    assert ops(g) == ["Neg", "Relu"], "the shared Neg stays for its other user"
    assert g.outputs[0] == (x, "y")


def test_check_reason_is_a_near_miss_and_logged(caplog):
    g, x = _graph()
    g.output(g.add_node("Mul", [x, g.constant(np.float32(1.0))]), "y")
    rule = Rule("mul-one", MUL_ONE.pattern, MUL_ONE.rewrite, check=lambda m: "refused for the test")
    with caplog.at_level(logging.DEBUG, logger="tlc.passes.rewrite"):
        assert apply_rules(g, [rule]).counts == {}
    assert "mul-one: Mul 'Mul': refused for the test" in caplog.text


def test_output_names_are_preserved():
    g, x = _graph()
    h = g.add_node("Relu", [x])
    y = g.add_node("Mul", [h, g.constant(np.float32(1.0))])
    g.output(y, "y")
    apply_rules(g, [MUL_ONE])
    assert g.outputs == [(h, "y")] and g.value_name(h) == "y"
    g.verify()


def test_replacement_of_another_type_is_a_pass_error():
    g, x = _graph()
    g.output(g.add_node("Relu", [x]), "y")
    rule = Rule("bad", Op("Relu", Var("x")), lambda m, b: b.op("Cast", m["x"], to=7))
    with pytest.raises(tlc.PassError, match="rule 'bad' at Relu 'Relu'.*int64.*float32"):
        apply_rules(g, [rule])


def test_driver_reaches_a_fixed_point_across_rules_and_is_deterministic():
    g, x = _graph()
    v = x
    for i in range(6):
        v = g.add_node("Neg", [v], name=f"n{i}")
    v = g.add_node("Mul", [v, g.constant(np.float32(1.0))])
    g.output(g.add_node("Relu", [v]), "y")
    neg = Rule("neg-neg", Op("Neg", Op("Neg", Var("x"))), lambda m, b: m["x"])
    a, b = g.copy(), g.copy()
    ra = apply_rules(a, [MUL_ONE, neg])
    apply_rules(b, [MUL_ONE, neg])
    assert ra.counts == {"mul-one": 1, "neg-neg": 3} and ra.converged and ra.sweeps == 2
    assert ops(a) == ["Relu"]
    assert [(n.name, n.op, a.inputs_of(n)) for n in a.nodes()] == [(n.name, n.op, b.inputs_of(n)) for n in b.nodes()]


def test_sweeps_are_bounded():
    g, x = _graph()
    g.output(g.add_node("Relu", [x]), "y")
    forever = Rule("forever", Op("Relu", Var("x")), lambda m, b: b.op("Relu", m["x"]))
    result = apply_rules(g, [forever], max_sweeps=3)
    assert not result.converged and result.counts == {"forever": 3} and ops(g) == ["Relu"]


def test_oneof_opt_and_find_match_captures():
    g, x = _graph()
    s = g.add_node("Sqrt", [x], name="s")
    p = g.add_node("Pow", [x, g.constant(np.float32(0.5))], name="p")
    pat = OneOf(Op("Sqrt", Var("x"), name="root"), Op("Pow", Var("x"), Const(0.5, "half"), name="root"))
    rule = Rule("root", pat, lambda m, b: m["x"])
    m1, m2 = find_match(g, rule, g.node("s")), find_match(g, rule, g.node("p"))
    assert m1["x"] == x and m1.node("root").name == "s" and "half" not in m1
    assert m2.x == x and float(m2.const("half")) == 0.5 and m2.root is g.node("p")
    clip = Rule("clip", Op("Clip", Var("x"), Opt(Const(name="lo")), Opt(Const(name="hi"))), lambda m, b: m["x"])
    c1 = g.add_node("Clip", [s], name="c1")
    c2 = g.add_node("Clip", [p, g.constant(np.float32(0)), None], name="c2")
    c3 = g.add_node("Clip", [p, x], name="c3")
    assert find_match(g, clip, g.producer(c1)).get("lo") is None
    assert find_match(g, clip, g.producer(c2)).const("lo") == 0
    assert find_match(g, clip, g.producer(c3)) is None, "a non-constant lower bound is not Opt(Const)"


def test_a_const_alternative_of_an_input_matches_without_tracing():
    """The producer pre-filter counts a Const alternative inside OneOf as a Constant (it once dropped it, so the
    rule matched only with a tracer attached)."""
    g, x = _graph()
    m = g.add_node("Mul", [x, g.constant(np.float32(2.0))], name="m")
    rule = Rule("r", Op("Mul", Var("x"), OneOf(Op("Neg", Var("y")), Const(name="k"))), lambda m_, b: m_["x"])
    found = find_match(g, rule, g.producer(m))
    assert found is not None and float(found.const("k")) == 2.0


def test_const_tolerance_and_scalar():
    g, x = _graph()
    a = g.add_node("Mul", [x, g.constant(np.float32(1.41421))], name="a")
    b = g.add_node("Mul", [x, g.constant(np.full(4, 1.41421356, np.float32))], name="b")
    near = Rule("r", Op("Mul", Var("x"), Const(np.sqrt(2), rtol=1e-5, scalar=True)), lambda m, b: m["x"])
    exact = Rule("r", Op("Mul", Var("x"), Const(np.sqrt(2))), lambda m, b: m["x"])
    assert find_match(g, near, g.producer(a)) is not None
    assert find_match(g, near, g.producer(b)) is None, "not one element"
    assert find_match(g, exact, g.producer(a)) is None


def test_dead_matched_nodes_are_erased_but_live_ones_kept(rng):
    g, x = _graph()
    n1 = g.add_node("Neg", [x], name="n1")
    n2 = g.add_node("Neg", [n1], name="n2")
    g.output(n2, "y")
    g.output(n1, "n1_out")
    rule = Rule("neg-neg", Op("Neg", Op("Neg", Var("x"), shared=True)), lambda m, b: m["x"])
    before = g.copy()
    apply_rules(g, [rule])
    assert ops(g) == ["Neg"] and g.outputs == [(x, "y"), (n1, "n1_out")]
    assert_same_numbers(before, g, random_feeds(before, rng))


def test_trait_root_and_tracing_do_not_change_results(rng):
    """A trait pattern roots at every op with the trait; the tracer (which turns off the matcher's quick
    pre-check to report full reasons) finds exactly the same rewrites."""
    from tlc.ops import Trait

    g, x = _graph()
    a = g.add_node("Exp", [g.add_node("Relu", [x])])
    b = g.add_node("MatMul", [a, g.constant(np.ones((4, 4), np.float32))])
    g.output(g.add_node("Tanh", [b]), "y")
    rule = Rule("ew-of-relu", Op(Trait.ELEMENTWISE, Op("Relu", Var("x"))), lambda m, b: b.op(m.root.op, m["x"]))
    plain, traced = g.copy(), g.copy()
    tracer = Tracer(min_progress=1)
    assert apply_rules(plain, [rule]).counts == apply_rules(traced, [rule], tracer=tracer).counts == {"ew-of-relu": 1}
    assert ops(plain) == ops(traced) == ["Exp", "MatMul", "Tanh"]
    assert ("ew-of-relu", "Tanh") in {(m.rule, m.op) for m in tracer.near_misses}, "Tanh of a MatMul: near miss"



def test_outputs_named_apart_from_their_values_are_left_alone():
    """Only the output whose value a rewrite replaced takes its name back; ``return %v as "probs"`` stays."""
    g, x = _graph()
    h = g.add_node("Relu", [x], name="h")
    g.output(h, "probs")
    g.rename_value(h, "h")           # the output name differs from the value's on purpose
    y = g.add_node("Mul", [h, g.constant(np.float32(1.0))])
    g.output(g.add_node("Neg", [y], name="y"), "y")
    apply_rules(g, [MUL_ONE])
    assert g.value_name(h) == "h" and g.outputs[0] == (h, "probs")
