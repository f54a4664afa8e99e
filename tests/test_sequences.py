"""Sequence and optional values: their types and text form, the Sequence*/Optional* ops on the numbers, ONNX node
cases (reference and compiled), hand-built models against onnxruntime, import -> export round trips, compiled plans
(feeds, results, steps stated as reference) and the passes that must leave such values alone."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import onnx
import pytest
from graph_equal import assert_graphs_equal
from onnx import TensorProto, helper
from onnx_cases import PASS, CompiledRunner, compare_values, run_case

import tlc
from tlc.errors import DTypeMismatchError, ExecutionError, InputError, ShapeInferenceError, UnsupportedOperatorError
from tlc.io.dumps import to_dot, to_graphml
from tlc.io.onnx import from_onnx, to_onnx
from tlc.io.onnx_export import check_exported
from tlc.ir.text import parse_graph, parse_type, print_graph
from tlc.ir.types import OptionalType, SequenceType, TensorType, merge_types
from tlc.passes.manager import optimize
from tlc.reference import run
from tlc.runtime.lower import NON_TENSOR_REASON

F, I64 = TensorProto.FLOAT, TensorProto.INT64
f32 = np.float32


# ---------------------------------------------------------------------------- types and text
def test_types_print_parse_and_merge():
    seq = SequenceType(TensorType("float32", (2, None)))
    opt = OptionalType(seq)
    assert str(seq) == "seq<float32[2,?]>" and str(opt) == "opt<seq<float32[2,?]>>"
    assert parse_type(str(opt)) == opt and parse_type("opt<int64[*]>") == OptionalType(TensorType("int64", None))
    assert merge_types(SequenceType(TensorType("float32", (2, 3))), seq) == seq
    assert merge_types(opt, seq) == opt                       # a value merged with its optional is the optional
    with pytest.raises(ValueError, match="kinds differ"):
        merge_types(seq, TensorType("float32", (2, 3)))
    assert seq.matches([np.zeros((2, 5), f32), np.zeros((2, 1), f32)]) and not seq.matches([np.zeros(2, f32)])
    assert opt.matches(None) and not OptionalType(TensorType("float32", None)).matches([np.zeros(1, f32)])
    with pytest.raises(tlc.InvalidModelError, match="a sequence holds tensors"):
        parse_type("seq<seq<float32[2]>>")


def _sample() -> tlc.Graph:
    g = tlc.Graph("seq")
    a, b = g.input("a", "float32", ["N"]), g.input("b", "float32", [3])
    pos = g.constant(np.array(0, np.int64), name="pos")
    s = g.add_node("SequenceConstruct", [a, b])
    s = g.add_node("SequenceInsert", [s, b, pos])
    n = g.add_node("SequenceLength", [s])
    c = g.add_node("ConcatFromSequence", [s], axis=0)
    opt = g.add_node("Optional", [s])
    has = g.add_node("OptionalHasElement", [opt])
    first = g.add_node("SequenceAt", [g.add_node("OptionalGetElement", [opt]), pos])
    for v, name in ((n, "n"), (c, "c"), (has, "has"), (first, "first"), (s, "s")):
        g.output(v, name)
    g.verify()
    return g


def test_text_round_trip_and_dumps():
    g = _sample()
    text = print_graph(g)
    assert "seq<float32[?]>" in text and "opt<seq<float32[?]>>" in text
    assert_graphs_equal(parse_graph(text), g)
    assert "seq&lt;float32[?]&gt;" in to_dot(g).to_string() and "opt&lt;seq" in to_graphml(g)


def test_verifier_checks_kinds():
    g = _sample()
    node = g.node("SequenceLength")
    g.node(g.inputs_of(node)[0]).output_types[0] = TensorType("float32", None)
    with pytest.raises(tlc.ValidationError, match="typed float32"):
        g.verify()


# ---------------------------------------------------------------------------- ops on the numbers
def test_reference_numbers_and_errors():
    g = _sample()
    a, b = np.arange(2, dtype=f32), np.ones(3, f32)
    out = run(g, {"a": a, "b": b})
    assert out["n"] == 3 and out["has"] and np.array_equal(out["first"], b)
    assert np.array_equal(out["c"], np.concatenate([b, a, b]))
    assert [x.shape for x in out["s"]] == [(3,), (2,), (3,)]
    with pytest.raises(InputError, match="expected a sequence"):
        _sequence_feed_graph_run({"xs": np.zeros(2, f32)})
    with pytest.raises(DTypeMismatchError, match=r"xs\[1\]"):
        _sequence_feed_graph_run({"xs": [np.zeros(2, f32), np.zeros(2, np.int64)]})


def _sequence_feed_graph() -> tlc.Graph:
    g = tlc.Graph("feed")
    xs = g.input("xs", SequenceType(TensorType("float32", (None,))))
    g.output(g.add_node("ConcatFromSequence", [xs], axis=0, new_axis=0), "y")
    return g


def _sequence_feed_graph_run(feeds):
    return run(_sequence_feed_graph(), feeds)


@pytest.mark.parametrize("split, keepdims, want", [
    (None, 1, [(1, 4)] * 3), (None, 0, [(4,)] * 3), (np.array(2, np.int64), 1, [(2, 4), (1, 4)]),
    (np.array([1, 2], np.int64), 1, [(1, 4), (2, 4)])])
def test_split_to_sequence_then_concat(split, keepdims, want):
    g = tlc.Graph("split")
    x = g.input("x", "float32", [3, 4])
    ins = [x] if split is None else [x, g.constant(split)]
    s = g.add_node("SplitToSequence", ins, axis=0, keepdims=keepdims)
    g.output(s, "s")
    g.output(g.add_node("ConcatFromSequence", [s], axis=0, new_axis=int(not keepdims and split is None)), "y")
    x_ = np.arange(12, dtype=f32).reshape(3, 4)
    out = run(g, {"x": x_})
    assert [p.shape for p in out["s"]] == want and np.array_equal(out["y"], x_)


def test_erase_at_and_optional_errors():
    g = tlc.Graph("erase")
    xs = g.input("xs", SequenceType(TensorType("int64", ())))
    p = g.input("p", "int64", [])
    g.output(g.add_node("SequenceErase", [xs, p]), "erased")
    g.output(g.add_node("SequenceAt", [xs, p]), "at")
    items = [np.array(i, np.int64) for i in range(4)]
    out = run(g, {"xs": items, "p": np.array(-1, np.int64)})
    assert [int(v) for v in out["erased"]] == [0, 1, 2] and int(out["at"]) == 3 and len(items) == 4  # not changed
    with pytest.raises(ExecutionError, match="position 4 is out of range"):
        run(g, {"xs": items, "p": np.array(4, np.int64)})
    h = tlc.Graph("empty")
    o = h.add_node("Optional", attrs={"type": "float32[2]"})
    h.output(h.add_node("OptionalHasElement", [o]), "has")
    h.output(h.add_node("OptionalGetElement", [o]), "x")
    assert h.type_of(h.outputs[1][0]) == TensorType("float32", (2,))
    with pytest.raises(ExecutionError, match="the optional is empty"):
        run(h, {})
    with pytest.raises(ShapeInferenceError, match="must be a sequence"):
        h.add_node("SequenceLength", [h.outputs[1][0]])
    with pytest.raises(ShapeInferenceError, match="optional values are not supported by code that reads a tensor"):
        h.add_node("Relu", [o])                                  # a tensor op on an optional: refused by name


# ---------------------------------------------------------------------------- ONNX node cases
_CASE_MODULES = ("identity", "if_", "loop", "optionalgetelement", "optionalhaselement", "sequenceinsert",
                 "sequence_map", "splittosequence")
_SEQ_CASES = [
    "test_identity_sequence", "test_identity_opt", "test_if_seq", "test_if_opt", "test_loop13_seq",
    "test_loop16_seq_none", "test_sequence_insert_at_back", "test_sequence_insert_at_front",
    "test_split_to_sequence_1", "test_split_to_sequence_2", "test_split_to_sequence_nokeepdims",
    *[f"test_optional_get_element_{k}" for k in ("tensor", "sequence", "optional_tensor", "optional_sequence")],
    *[f"test_optional_has_element_{k}" for k in (
        "tensor_input", "optional_input", "empty_optional_input", "empty_no_input_tensor_input",
        "empty_no_input_optional_input", "empty_no_input_name_tensor_input", "empty_no_input_name_optional_input")],
    *[f"test_sequence_map_{k}{e}" for k in ("identity_1_sequence", "identity_2_sequences",
                                            "identity_1_sequence_1_tensor", "add_2_sequences",
                                            "add_1_sequence_1_tensor", "extract_shapes") for e in ("", "_expanded")],
]


def _cases() -> dict[str, object]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in _CASE_MODULES:
            importlib.import_module(f"{node.__name__}.{module}")
    return {c.name: c for c in node._NodeTestCases}


CASES = _cases()


@pytest.mark.parametrize("name", _SEQ_CASES)
def test_node_case(name):
    case = CASES[name]
    assert run_case(case) == (PASS, "")
    assert run_case(case, CompiledRunner(opt_level=3, jit="off")) == (PASS, "")


# ---------------------------------------------------------------------------- hand-built models vs onnxruntime
def _model(nodes, inputs, outputs, opset=21):
    m = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs), producer_name="tlc",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _seq_info(name, elem=F, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def _models():
    """(model, feeds) pairs that exercise each op, their type attributes and a SequenceMap capture."""
    split = _model([
        helper.make_node("SplitToSequence", ["x", "k"], ["s"], axis=1),
        helper.make_node("SequenceErase", ["s", "p"], ["e"]),
        helper.make_node("SequenceAt", ["e", "p"], ["at"]),
        helper.make_node("ConcatFromSequence", ["e"], ["y"], axis=1),
        helper.make_node("ConcatFromSequence", ["e"], ["z"], axis=0, new_axis=1),
        helper.make_node("SequenceLength", ["e"], ["n"])],
        [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("k", I64, []),
         helper.make_tensor_value_info("p", I64, [])],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("at", F), ("y", F), ("z", F), ("n", I64))])
    opt_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    optional = _model([
        helper.make_node("Optional", [], ["none"], type=opt_type),
        helper.make_node("OptionalHasElement", ["none"], ["has"]),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("SequenceInsert", ["empty", "x"], ["one"]),
        helper.make_node("Optional", ["one"], ["some"]),
        helper.make_node("OptionalGetElement", ["some"], ["got"])],
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, []), _seq_info("got")])
    body = helper.make_graph([helper.make_node("Mul", ["e", "w"], ["o"])], "body",
                             [helper.make_tensor_value_info("e", F, None)],
                             [helper.make_tensor_value_info("o", F, None)])
    mapped = _model([helper.make_node("SequenceMap", ["xs"], ["ys"], body=body)],
                    [_seq_info("xs"), helper.make_tensor_value_info("w", F, [])], [_seq_info("ys")])
    x = np.arange(12, dtype=f32).reshape(2, 6)
    return [
        (split, {"x": x, "k": np.array(4, np.int64), "p": np.array(0, np.int64)}),
        (optional, {"x": np.ones(3, f32)}),
        (mapped, {"xs": [np.ones(2, f32), np.arange(3, dtype=f32)], "w": np.array(3, f32)}),
    ]


@pytest.mark.parametrize("index", range(3))
def test_models_against_onnxruntime_and_round_trip(index):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _models()[index]
    g, _ = from_onnx(model)
    exported = to_onnx(g)
    check_exported(exported)
    assert_graphs_equal(from_onnx(exported)[0], g)
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    plan = tlc.compile(g, jit="off")
    for have in (run(g, feeds), plan.run(feeds)):
        for name, value in want.items():
            assert compare_values(name, have[name], value, 1e-6, 1e-6) == ""


# ---------------------------------------------------------------------------- compiled plans and passes
def test_compiled_plan_states_reference_steps_and_checks_feeds():
    g = _sample()
    plan = tlc.compile(g, opt_level=3, jit="off")
    feeds = {"a": np.arange(2, dtype=f32), "b": np.ones(3, f32)}
    out, want = plan.run(feeds), run(g, feeds)
    assert all(compare_values(k, out[k], want[k], 0, 0) == "" for k in want)
    stats = plan.stats()
    seq_steps = [s for s in stats.steps if s.op.startswith(("Sequence", "Optional", "ConcatFrom"))]
    assert seq_steps and all(s.mode == "reference" and s.reason == NON_TENSOR_REASON for s in seq_steps)
    assert out["s"][1] is not plan.run(feeds)["s"][1]             # results are the caller's own
    p2 = tlc.compile(_sequence_feed_graph(), jit="off")
    assert p2.run({"xs": [np.ones(2, f32), np.zeros(1, f32)]})["y"].tolist() == [1, 1, 0]
    with pytest.raises(InputError, match="expected a sequence"):
        p2.run({"xs": np.ones(2, f32)})


def test_passes_leave_sequences_and_fuse_around_them():
    g = tlc.Graph("mixed")
    xs = g.input("xs", SequenceType(TensorType("float32", (4,))))
    i = g.constant(np.array(1, np.int64), name="i")
    x = g.add_node("SequenceAt", [xs, i])
    y = g.add_node("Relu", [g.add_node("Add", [g.add_node("Mul", [x, x]), g.constant(np.ones(4, f32))])])
    s2 = g.add_node("SequenceInsert", [g.add_node("Identity", [xs]), y])
    s3 = g.add_node("SequenceInsert", [g.add_node("Identity", [xs]), y])   # a duplicate for CSE
    g.output(g.add_node("ConcatFromSequence", [s2], axis=0), "c")
    g.output(s3, "s")
    feeds = {"xs": [np.full(4, -1, f32), np.arange(4, dtype=f32) - 1]}
    want = run(g, feeds)
    for level in (1, 2, 3):
        opt, _ = optimize(g, opt_level=level)
        opt.verify()
        got = run(opt, feeds)
        assert all(compare_values(k, got[k], want[k], 1e-6, 0) == "" for k in want)
    assert "tlc.Fused" in optimize(g, opt_level=2)[0].op_counts()


def test_sequence_map_capture_dropped_when_unused():
    model, feeds = _models()[2]
    g, _ = from_onnx(model)
    node = g.node(g.outputs[0][0])
    assert node.attrs["num_captures"] == 1 and g.value_name(g.inputs_of(node)[1]) == "w"
    body = node.attrs["body"]
    body.replace_all_uses(body.outputs[0][0], body.inputs[0].output(0))   # the body no longer reads w
    body.erase(next(n for n in body.nodes() if n.op == "Mul"))
    opt, _ = optimize(g, passes="dce")
    mapped = opt.node(opt.outputs[0][0])
    assert mapped.num_inputs == 1 and "num_captures" not in mapped.attrs
    assert [a.tolist() for a in run(opt, {"xs": feeds["xs"], "w": feeds["w"]})["ys"]] == [[1, 1], [0, 1, 2]]


def test_unsupported_kinds_are_refused_by_name():
    seq_seq = helper.make_value_info("x", helper.make_sequence_type_proto(
        helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))))
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [seq_seq], [helper.make_value_info(
        "y", seq_seq.type)])
    with pytest.raises(UnsupportedOperatorError, match="sequence of sequence"):
        from_onnx(model)
    assert onnx.checker.check_model(model) is None


def test_inference_session_describes_and_takes_a_sequence_input():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [None, 3])
    graph = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "g", [seq],
                              [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    session = tlc.InferenceSession(model.SerializeToString())
    (arg,) = session.get_inputs()
    assert (arg.name, arg.type, arg.shape) == ("s", "seq(tensor(float))", None)
    (n,) = session.run(None, {"s": [np.zeros((2, 3), np.float32), np.ones((1, 3), np.float32)]})
    assert int(n) == 2
