"""The fold pass: what folds (constant chains, casts, reshapes, shape-only ops), what must not, and the size bound."""

from __future__ import annotations

import numpy as np
import pytest
from pass_testing import apply, ops

import tlc
from tlc.ir.types import ONNX_TYPE_CODES, TensorType
from tlc.ops import OpDef, Trait, lookup, registry
from tlc.passes import PassManager
from tlc.passes.fold import FoldPass

TEST_DOMAIN = "test.fold"


def register_test_op(monkeypatch, name: str, reference, infer, traits, inputs=(1, 1)) -> None:
    """Register an op for one test only (the registry entry is removed again afterwards)."""
    opdef = OpDef(name=name, domain=TEST_DOMAIN, infer=infer, reference=reference, inputs=inputs,
                  traits=frozenset(traits))
    monkeypatch.setitem(registry._REGISTRY, (TEST_DOMAIN, name), opdef)


def test_constant_chain_folds_into_one_constant(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 4))
    a = g.constant(rng.standard_normal(4).astype(np.float32), name="a")
    b = g.constant(np.float32(2.0), name="b")
    scaled = g.add_node("Mul", [g.add_node("Add", [a, b]), g.constant(np.float32(0.5))], name="scaled")
    g.output(g.add_node("Add", [x, scaled]), "y")
    out, result = apply(FoldPass, g, rng)
    assert ops(out) == ["Add"]
    assert result.changed and result.stats == {"folded": 2}
    folded = out.const_value(out.value("scaled"))
    np.testing.assert_array_equal(folded, (g.const_value(a) + np.float32(2)) * np.float32(0.5))
    assert folded.dtype == np.float32


def test_cast_and_reshape_of_constants_fold(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 3))
    ints = g.constant(np.arange(6, dtype=np.int64), name="ints")
    as_float = g.add_node("Cast", [ints], to=ONNX_TYPE_CODES["float32"])
    shaped = g.add_node("Reshape", [as_float, g.constant(np.array([2, -1], np.int64))], name="shaped")
    g.output(g.add_node("Mul", [x, shaped]), "y")
    out, result = apply(FoldPass, g, rng)
    assert ops(out) == ["Mul"] and result.stats["folded"] == 2
    np.testing.assert_array_equal(out.const_value(out.value("shaped")), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_does_not_fire_on_nodes_with_a_graph_input(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 3))
    r = g.add_node("Reshape", [x, g.constant(np.array([3, 2], np.int64))])
    g.output(g.add_node("Relu", [r]), "y")
    out, result = apply(FoldPass, g, rng)
    assert not result.changed and result.stats == {}
    assert ops(out) == ["Reshape", "Relu"]
    assert out.structural_hash() == g.structural_hash()


def test_folded_graph_output_keeps_its_name(rng):
    g = tlc.Graph()
    g.input("x", "float32", (2,))
    g.output(g.add_node("Neg", [g.constant(np.array([1.0, -2.0], np.float32))]), "y")
    out, _ = apply(FoldPass, g, rng)
    (node,) = [n for n in out.nodes() if n.op == "Constant" and out.num_uses(n.output())]
    assert out.outputs == [(node.output(), "y")] and out.value_name(node.output()) == "y"


def test_size_limit_blocks_growth_but_not_same_size_folds(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (64, 64))
    col = g.constant(rng.standard_normal((64, 1)).astype(np.float32), name="col")
    row = g.constant(rng.standard_normal((1, 64)).astype(np.float32), name="row")
    outer = g.add_node("Add", [col, row], name="outer")           # 4096 elements from 128: grows the model
    negated = g.add_node("Neg", [col], name="negated")           # 64 elements from 64: no growth
    g.output(g.add_node("Add", [g.add_node("Mul", [x, outer]), negated]), "y")
    out, result = apply(FoldPass, g, rng, fold_size_limit=16)
    assert result.stats == {"folded": 1, "skipped_too_large": 1}
    assert out.producer(out.value("outer")).op == "Add"
    assert out.producer(out.value("negated")).op == "Constant"
    out_big, result_big = apply(FoldPass, g, rng, fold_size_limit=4096)
    assert result_big.stats == {"folded": 2}


def test_size_limit_checked_after_computing_when_the_shape_is_unknown(monkeypatch, rng):
    register_test_op(monkeypatch, "Tile4", lambda x: np.tile(x, 4),
                     lambda ctx: [TensorType(ctx.type(0).dtype, (None,))], {Trait.PURE, Trait.FOLDABLE})
    g = tlc.Graph()
    x = g.input("x", "float32", (8,))
    tiled = g.add_node("Tile4", [g.constant(np.ones(2, np.float32))], domain=TEST_DOMAIN)
    g.output(g.add_node("Add", [x, tiled]), "y")
    out, result = apply(FoldPass, g, rng, fold_size_limit=4)
    assert result.stats == {"skipped_too_large": 1} and not result.changed
    out, result = apply(FoldPass, g, rng, fold_size_limit=8)
    assert result.stats == {"folded": 1}


def test_impure_ops_never_fold(monkeypatch, rng):
    register_test_op(monkeypatch, "Noisy", lambda x: x + 1, lambda ctx: [ctx.type(0)], {Trait.FOLDABLE})
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    g.output(g.add_node("Add", [x, g.add_node("Noisy", [g.constant(np.zeros(3, np.float32))], domain=TEST_DOMAIN)]))
    out, result = apply(FoldPass, g, rng)
    assert not result.changed and "test.fold.Noisy" in ops(out)


def shape_of(x):
    return np.array(x.shape, np.int64)


def _shape_infer(ctx):
    return [TensorType("int64", (ctx.type(0).rank,))]


@pytest.fixture(params=["test-op", "Shape"])
def shape_op(request, monkeypatch) -> tuple[str, str]:
    """A shape-only op: a test op with Trait.SHAPE_ONLY, and ONNX Shape once the registry has it."""
    if request.param == "Shape":
        if lookup("Shape") is None:
            pytest.skip("Shape is not registered yet")
        assert lookup("Shape").has(Trait.SHAPE_ONLY)
        return "Shape", ""
    register_test_op(monkeypatch, "ShapeOf", shape_of, _shape_infer, {Trait.PURE, Trait.FOLDABLE, Trait.SHAPE_ONLY})
    return "ShapeOf", TEST_DOMAIN


def test_shape_only_op_folds_from_a_static_type(shape_op, rng):
    op, domain = shape_op
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 5))
    shape = g.add_node(op, [x], domain=domain, name="shape")
    # Max: an op the importer's shape chains (tlc.ops.dims.shape_value) do not follow, so only folding knows
    g.output(g.add_node("Reshape", [x, g.add_node("Max", [shape, g.constant(np.array([1, 1], np.int64))])]), "y")
    out, result = apply(FoldPass, g, rng)
    np.testing.assert_array_equal(out.const_value(out.value("shape")), [2, 5])
    assert ops(out) == ["Reshape"] and result.stats == {"folded": 2, "types_refined": 1}
    assert out.type_of(out.outputs[0][0]).shape == (2, 5)     # the Reshape's target is known now


def test_shape_only_op_does_not_fold_symbolic_shapes(shape_op, rng):
    op, domain = shape_op
    g = tlc.Graph()
    x = g.input("x", "float32", ("N", 5))
    g.output(g.add_node(op, [x], domain=domain), "y")
    out, result = apply(FoldPass, g, rng)
    assert not result.changed and ops(out) == [f"{domain}.{op}" if domain else op]


def test_value_dependent_ops_do_not_fold_from_types(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 2))
    g.output(g.add_node("Relu", [x]), "y")   # a static type is not a value: no SHAPE_ONLY trait, no folding
    _, result = apply(FoldPass, g, rng)
    assert not result.changed


@pytest.mark.skipif(lookup("ConstantOfShape") is None or lookup("Concat") is None or lookup("Gather") is None,
                    reason="ConstantOfShape, Concat and Gather are not registered yet")
def test_shape_chain_of_gather_concat_constant_of_shape(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (4, 3))
    dims = g.constant(np.array([4, 3, 7], np.int64), name="dims")
    first_two = g.add_node("Gather", [dims, g.constant(np.array([0, 1], np.int64))], axis=0)
    shape = g.add_node("Concat", [first_two, g.constant(np.array([], np.int64))], axis=0, name="shape")
    filled = g.add_node("ConstantOfShape", [shape], value=np.array([1.5], np.float32), name="filled")
    g.output(g.add_node("Add", [x, filled]), "y")
    out, result = apply(FoldPass, g, rng)
    assert ops(out) == ["Add"] and result.stats["folded"] == 3
    np.testing.assert_array_equal(out.const_value(out.value("filled")), np.full((4, 3), 1.5, np.float32))


def test_multi_output_node_folds_every_used_output(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (3,))
    data, mask = g.add_node("Dropout", [g.constant(np.arange(3, dtype=np.float32))], num_outputs=2, name="drop")
    g.output(g.add_node("Add", [x, data]), "y")
    g.output(mask, "mask")
    out, result = apply(FoldPass, g, rng)
    assert result.stats == {"folded": 1} and ops(out) == ["Add"]
    np.testing.assert_array_equal(out.const_value(out.value("mask")), [True, True, True])


def test_reference_failure_names_pass_and_node(monkeypatch):
    def broken(x):
        raise ValueError("cannot compute this")

    register_test_op(monkeypatch, "Broken", broken, lambda ctx: [ctx.type(0)], {Trait.PURE, Trait.FOLDABLE})
    g = tlc.Graph()
    g.output(g.add_node("Broken", [g.constant(np.ones(2, np.float32))], domain=TEST_DOMAIN, name="bad_node"), "y")
    with pytest.raises(tlc.PassError, match="pass 'fold' failed at node 'bad_node'.*cannot compute this") as info:
        PassManager("fold").run(g)
    assert info.value.pass_name == "fold" and info.value.node == "bad_node"


def test_reference_with_wrong_dtype_is_refused(monkeypatch):
    register_test_op(monkeypatch, "Widen", lambda x: x.astype(np.float64), lambda ctx: [ctx.type(0)],
                     {Trait.PURE, Trait.FOLDABLE})
    g = tlc.Graph()
    g.output(g.add_node("Widen", [g.constant(np.ones(2, np.float32))], domain=TEST_DOMAIN, name="widen"), "y")
    with pytest.raises(tlc.PassError, match=r"^pass 'fold': folding node 'widen' \(test.fold.Widen\): the reference "
                                            r"implementation gave float64\[2\] for output 0, typed float32\[2\]$"):
        PassManager("fold").run(g)


# ---------------------------------------------------------------------------- size policy: who reads a large result
def _fill(g: tlc.Graph, shape: tuple[int, ...], name: str, value: float = 0.5) -> tlc.Value:
    return g.add_node("ConstantOfShape", [g.constant(np.array(shape, np.int64))],
                      value=np.array([value], np.float32), name=name)


def test_large_parameter_folds_also_through_elementwise_folds(rng):
    """A fill above the limit that a MatMul reads as its weight folds, also when an elementwise op of constants
    (which folds too) stands between them; a fill that an Add reads stays."""
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 16))
    weight = g.add_node("Mul", [_fill(g, (16, 16), "w"), g.constant(np.float32(0.25))], name="scaled")
    g.output(g.add_node("Add", [g.add_node("MatMul", [x, weight]), _fill(g, (2, 16), "bias")]), "y")
    out, result = apply(FoldPass, g, rng, fold_size_limit=8)
    assert result.stats == {"folded": 2, "skipped_too_large": 1}
    np.testing.assert_array_equal(out.const_value(out.value("scaled")), np.full((16, 16), 0.125, np.float32))
    assert out.producer(out.value("bias")).op == "ConstantOfShape"


def test_large_value_with_any_elementwise_reader_or_as_graph_output_stays(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (8, 8))
    shared = _fill(g, (8, 8), "shared")                  # a MatMul weight, but an Add reads it too
    g.output(g.add_node("Add", [g.add_node("MatMul", [x, shared]), shared]), "y")
    g.output(_fill(g, (4, 4), "out_fill"), "filled")     # a graph output: storing it only grows the model
    out, result = apply(FoldPass, g, rng, fold_size_limit=4)
    assert not result.changed and result.stats == {"skipped_too_large": 2}
    _, result = apply(FoldPass, g, rng, fold_size_limit=64)
    assert result.stats == {"folded": 2}


def test_equal_folds_share_one_array_and_cse_merges_them(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 4))
    first = g.add_node("MatMul", [x, _fill(g, (4, 4), "w1")])
    g.output(g.add_node("MatMul", [first, _fill(g, (4, 4), "w2")]), "y")
    out, result = apply(FoldPass, g, rng)
    assert result.stats == {"folded": 2}
    assert out.const_value(out.value("w1")) is out.const_value(out.value("w2"))
    merged, report = tlc.optimize(out, passes="cse")
    assert report.counters()["constants_merged"] >= 1
    assert sum(1 for n in merged.nodes() if n.op == "Constant" and n.attrs["value"].shape == (4, 4)) == 1


def test_types_downstream_of_a_fold_are_inferred_again(rng):
    """``x.flatten(2)`` with its target through a Tile (an op the importer's shape chains do not follow):
    Reshape(x, Tile(Concat(Slice(Shape(x)), [-1]), [1])). The importer cannot know the Reshape's dims; once the
    shape folds, the Reshape and everything after it get them."""
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 4, 3, 5))
    head = g.add_node("Slice", [g.add_node("Shape", [x]), g.constant(np.array([0], np.int64)),
                                g.constant(np.array([2], np.int64)), g.constant(np.array([0], np.int64))])
    shape = g.add_node("Concat", [head, g.constant(np.array([-1], np.int64))], axis=0)
    flat = g.add_node("Reshape", [x, g.add_node("Tile", [shape, g.constant(np.array([1], np.int64))])], name="flat")
    tokens = g.add_node("Transpose", [flat], perm=[0, 2, 1], name="tokens")
    g.output(g.add_node("Relu", [tokens], name="out"), "y")
    assert g.type_of(tokens).shape == (None, None, None)
    out, result = apply(FoldPass, g, rng)
    assert ops(out) == ["Reshape", "Transpose", "Relu"]
    assert result.stats["types_refined"] == 3
    assert out.type_of(out.value("flat")) == TensorType("float32", (2, 4, 15))
    assert out.type_of(out.outputs[0][0]) == TensorType("float32", (2, 15, 4))


def test_no_refinement_is_reported_when_types_stay(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 3))
    c = g.add_node("Neg", [g.constant(np.ones(3, np.float32))])
    g.output(g.add_node("Add", [x, c]), "y")
    _, result = apply(FoldPass, g, rng)
    assert result.stats == {"folded": 1}
