"""simplify, rule set ``algebraic``: each identity fires where exact (bit-identical numbers, nan/inf/±0 included)
and stays put where it would change a value, a shape or the sign of zero."""

from __future__ import annotations

import numpy as np
import pytest

import tlc

try:
    from .simplify_testlib import check_rewrite, ops, simplify, temporary_ops
except ImportError:
    from simplify_testlib import check_rewrite, ops, simplify, temporary_ops

I64_MAX = np.iinfo(np.int64).max


@pytest.fixture(autouse=True, scope="module")
def _ops():
    with temporary_ops():
        yield


def graph(build, dtype="float32", shape=("N", 4), name="x") -> tlc.Graph:
    """A graph computing Relu(build(g, x)): the Relu keeps the rewritten value internal."""
    g = tlc.Graph("t")
    x = g.input(name, dtype, shape)
    g.output(g.add_node("Relu", [build(g, x)]), "y")
    return g


def c(g, value, dtype="float32"):
    return g.constant(np.asarray(value, dtype))


def i64(g, value):
    return g.constant(np.asarray(value, np.int64))


# (rule, build, dtype, shape, fires, ops after, options)
CASES = [
    ("identity", lambda g, x: g.add_node("Identity", [x]), "float32", ("N", 4), True, [], {}),
    ("dropout-inference", lambda g, x: g.add_node("Dropout", [x]), "float32", ("N", 4), True, [], {}),
    ("dropout-inference", lambda g, x: g.add_node("Dropout", [x, c(g, 0.5), g.constant(np.bool_(False))]),
     "float32", ("N", 4), True, [], {}),
    ("dropout-inference", lambda g, x: g.add_node("Dropout", [x], output_names=["d", "mask"])[0], "float32",
     ("N", 4), True, [], {}),  # the mask output exists, but nothing reads it (test_dce: one that is read stays)
    ("dropout-inference", lambda g, x: g.add_node("Dropout", [x, None, g.input("train", "bool", ())]), "float32",
     ("N", 4), False, ["Dropout"], {}),  # training_mode is not a constant
    ("neg-neg", lambda g, x: g.add_node("Neg", [g.add_node("Neg", [x])]), "float32", ("N", 4), True, [], {}),
    ("mul-one", lambda g, x: g.add_node("Mul", [x, c(g, 1.0)]), "float32", ("N", 4), True, [], {}),
    ("mul-one", lambda g, x: g.add_node("Mul", [c(g, [1.0] * 4), x]), "float32", ("N", 4), True, [], {}),
    ("mul-one", lambda g, x: g.add_node("Mul", [x, c(g, 1, "int32")]), "int32", ("N", 4), True, [], {}),
    ("mul-one", lambda g, x: g.add_node("Mul", [x, c(g, np.ones((2, 1, 4)))]), "float32", ("N", 4), False,
     ["Mul"], {}),  # broadcasts x to [2, N, 4]
    ("mul-one", lambda g, x: g.add_node("Mul", [x, c(g, [1.0, 1.0, 2.0, 1.0])]), "float32", ("N", 4), False,
     ["Mul"], {}),
    ("div-one", lambda g, x: g.add_node("Div", [x, c(g, 1.0)]), "float32", ("N", 4), True, [], {}),
    ("div-one", lambda g, x: g.add_node("Div", [c(g, 1.0), x]), "float32", ("N", 4), False, ["Div"], {}),
    ("add-zero", lambda g, x: g.add_node("Add", [c(g, -0.0), x]), "float32", ("N", 4), True, [], {}),
    ("add-zero", lambda g, x: g.add_node("Add", [x, c(g, 0, "int64")]), "int64", ("N", 4), True, [], {}),
    ("add-zero", lambda g, x: g.add_node("Add", [x, c(g, 0.0)]), "float32", ("N", 4), False, ["Add"], {}),
    ("sub-zero", lambda g, x: g.add_node("Sub", [x, c(g, 0.0)]), "float32", ("N", 4), True, [], {}),
    ("sub-zero", lambda g, x: g.add_node("Sub", [x, c(g, -0.0)]), "float32", ("N", 4), False, ["Sub"], {}),
    ("sub-zero", lambda g, x: g.add_node("Sub", [c(g, 0.0), x]), "float32", ("N", 4), False, ["Sub"], {}),
    ("cast-same-type", lambda g, x: g.add_node("Cast", [x], to=1), "float32", ("N", 4), True, [], {}),
    ("cast-same-type", lambda g, x: g.add_node("Cast", [x], to=11), "float32", ("N", 4), False, ["Cast"], {}),
    ("transpose-identity", lambda g, x: g.add_node("Transpose", [x], perm=[0, 1, 2]), "float32", (2, 3, 4), True,
     [], {}),
    ("transpose-identity", lambda g, x: g.add_node("Transpose", [x], perm=[0, 2, 1]), "float32", (2, 3, 4), False,
     ["Transpose"], {}),
    ("transpose-cancel", lambda g, x: g.add_node("Transpose", [g.add_node("Transpose", [x])]), "float32",
     (2, 3), True, [], {}),
    ("transpose-transpose", lambda g, x: g.add_node("Transpose", [g.add_node("Transpose", [x], perm=[0, 2, 1])],
                                                    perm=[1, 0, 2]), "float32", (2, 3, 4), True, ["Transpose"], {}),
    ("reshape-same-shape", lambda g, x: g.add_node("Reshape", [x, i64(g, [-1, 4])]), "float32", ("N", 4), True,
     [], {}),
    ("reshape-same-shape", lambda g, x: g.add_node("Reshape", [x, i64(g, [0, 4])]), "float32", ("N", 4), True,
     [], {}),
    ("reshape-same-shape", lambda g, x: g.add_node("Reshape", [x, i64(g, [4, 2])]), "float32", (2, 4), False,
     ["Reshape"], {}),
    ("reshape-reshape", lambda g, x: g.add_node("Reshape", [g.add_node("Reshape", [x, i64(g, [6, 4])]),
                                                            i64(g, [4, -1])]), "float32", (2, 3, 4), True,
     ["Reshape"], {}),
    ("reshape-reshape", lambda g, x: g.add_node("Reshape", [g.add_node("Reshape", [x, i64(g, [2, 12])]),
                                                            i64(g, [0, 3, 4])]), "float32", (3, 8), False,
     ["Reshape", "Reshape"], {}),  # the 0 copies a dim of the inner Reshape's output, not of x
    ("expand-same-shape", lambda g, x: g.add_node("Expand", [x, i64(g, [1, 4])]), "float32", (3, 4), True, [], {}),
    ("expand-same-shape", lambda g, x: g.add_node("Expand", [x, i64(g, [2, 3, 4])]), "float32", (3, 4), False,
     ["Expand"], {}),
    ("squeeze-unsqueeze", lambda g, x: g.add_node("Squeeze", [g.add_node("Unsqueeze", [x, i64(g, [1])]),
                                                              i64(g, [-2])]), "float32", ("N", 4), True, [], {}),
    ("squeeze-unsqueeze", lambda g, x: g.add_node("Squeeze", [g.add_node("Unsqueeze", [x, i64(g, [0, 1])]),
                                                              i64(g, [0])]), "float32", ("N", 4), False,
     ["Unsqueeze", "Squeeze"], {}),
    ("unsqueeze-squeeze", lambda g, x: g.add_node("Unsqueeze", [g.add_node("Squeeze", [x, i64(g, [1])]),
                                                                i64(g, [1])]), "float32", (3, 1, 4), True, [], {}),
    ("unsqueeze-squeeze", lambda g, x: g.add_node("Unsqueeze", [g.add_node("Squeeze", [x, i64(g, [1])]),
                                                                i64(g, [0])]), "float32", (3, 1, 4), False,
     ["Squeeze", "Unsqueeze"], {}),
    ("concat-single", lambda g, x: g.add_node("Concat", [x], axis=0), "float32", ("N", 4), True, [], {}),
    ("concat-single", lambda g, x: g.add_node("Concat", [x, x], axis=0), "float32", (3, 4), False, ["Concat"], {}),
    ("sum-single", lambda g, x: g.add_node("Sum", [x]), "float32", ("N", 4), True, [], {}),
    ("sum-pair", lambda g, x: g.add_node("Sum", [x, c(g, [1.5, -2.0, 0.0, 3.0])]), "float32", ("N", 4), True,
     ["Add"], {}),
    ("sum-pair", lambda g, x: g.add_node("Sum", [x, c(g, 2.0), x]), "float32", (3, 4), False, ["Sum"], {}),
    ("slice-everything", lambda g, x: g.add_node("Slice", [x, i64(g, [0]), i64(g, [I64_MAX]), i64(g, [1])]),
     "float32", ("N", 4), True, [], {}),
    ("slice-everything", lambda g, x: g.add_node("Slice", [x, i64(g, [-3, 0]), i64(g, [3, 4])]), "float32", (3, 4),
     True, [], {}),
    ("slice-everything", lambda g, x: g.add_node("Slice", [x, i64(g, [0]), i64(g, [3]), i64(g, [1])]), "float32",
     (3, 4), False, ["Slice"], {}),
    ("slice-everything", lambda g, x: g.add_node("Slice", [x, i64(g, [-1]), i64(g, [-5]), i64(g, [0]),
                                                           i64(g, [-1])]), "float32", (3, 4), False, ["Slice"], {}),
    ("add-zero-nsz", lambda g, x: g.add_node("Add", [x, c(g, 0.0)]), "float32", ("N", 4), True, [],
     {"fast_math": True}),
    ("sub-zero-nsz", lambda g, x: g.add_node("Sub", [x, c(g, -0.0)]), "float32", ("N", 4), True, [],
     {"fast_math": True}),
]


@pytest.mark.parametrize("rule, build, dtype, shape, fires, after, options", CASES,
                         ids=[f"{c[0]}-{'fires' if c[4] else 'stays'}-{i}" for i, c in enumerate(CASES)])
def test_algebraic_rule(rule, build, dtype, shape, fires, after, options, rng):
    g = graph(build, dtype, shape)
    check_rewrite(g, rule, after + ["Relu"], rng, fires=fires, opt_level=1, **options)


def test_add_zero_is_exact_only_for_negative_zero():
    """x + (+0.0) turns -0.0 into +0.0: at default it stays; with fast_math it goes and the sign of zero changes."""
    g = tlc.Graph("t")
    x = g.input("x", "float32", (4,))
    g.output(g.add_node("Add", [x, c(g, 0.0)]), "y")
    feed = {"x": np.array([-0.0, 1.0, np.nan, -np.inf], np.float32)}
    before = tlc.reference.run(g, feed)["y"]
    assert not np.signbit(before[0])
    kept, _ = simplify(g)
    assert ops(kept) == ["Add"]
    after, stats = simplify(g, fast_math=True)
    assert ops(after) == [] and stats["add-zero-nsz"] == 1
    got = tlc.reference.run(after, feed)["y"]
    assert np.signbit(got[0])
    np.testing.assert_array_equal(got, before)  # equal as numbers (-0 == +0, nan == nan, inf == inf)


def test_intermediate_used_elsewhere_is_kept(rng):
    g = tlc.Graph("t")
    x = g.input("x", "float32", ("N", 4))
    inner = g.add_node("Neg", [x])
    g.output(g.add_node("Neg", [inner]), "y")
    g.output(g.add_node("Relu", [inner]), "z")
    check_rewrite(g, "neg-neg", ["Neg", "Neg", "Relu"], rng, fires=False)
    t = tlc.Graph("t")
    x = t.input("x", "float32", (2, 3, 4))
    inner = t.add_node("Transpose", [x], perm=[0, 2, 1])
    t.output(t.add_node("Transpose", [inner], perm=[0, 2, 1]), "y")
    t.output(inner, "z")
    after = check_rewrite(t, "transpose-cancel", ["Transpose"], rng)
    assert after.outputs[0][0] == after.input_value("x"), "the pair is gone, the shared Transpose stays for z"
