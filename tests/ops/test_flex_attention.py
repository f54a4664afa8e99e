"""ai.onnx.preview.FlexAttention: the ONNX node cases (reference and compiled), ONNX's reference evaluator on random
inputs (onnxruntime 1.32 lacks the op), modifier bodies with captured outer values through import -> export ->
check_model -> import, the text form, DCE / CSE / fold on the bodies, -O1..-O3 on the numbers, inference errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tlc
from tests.graph_equal import assert_graphs_equal
from tests.onnx_cases import CompiledRunner, quick_cases_for, run_case
from tlc.io.onnx import from_onnx, to_onnx
from tlc.ir.text import parse_graph, print_graph
from tlc.ops.control import is_control, num_captures
from tlc.passes.manager import optimize

F, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
PREVIEW = "ai.onnx.preview"
CASES = {c.name: c for c in quick_cases_for("FlexAttention")}
B, HQ, HKV, L, S, E = 2, 4, 2, 3, 5, 8  # batch, query heads, key/value heads, query and key lengths, head size


@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_case(name):
    assert run_case(CASES[name]) == ("pass", "")


@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_case_compiled(name):
    plans = []
    assert run_case(CASES[name], CompiledRunner(opt_level=2, on_plan=plans.append)) == ("pass", "")
    (step,) = plans[0].stats().reference_steps()
    assert step.op == f"{PREVIEW}.FlexAttention" and "no native kernel" in step.reason


# ---------------------------------------------------------------------------- models
def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _body(name: str, nodes: list, inp: str, out: str, elem: int = F, inits=()) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [_vi(inp, elem, ["B", "H", "L", "S"])],
                             [_vi(out, elem, ["B", "H", "L", "S"])], list(inits))


def _model(elem: int = F, kv_heads: int = HKV, extra_inputs=(), nodes=(), **attrs) -> onnx.ModelProto:
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW, name="flex", **attrs)
    inputs = [_vi("Q", elem, [B, HQ, L, E]), _vi("K", elem, [B, kv_heads, S, E]), _vi("V", elem, [B, kv_heads, S, E])]
    graph = helper.make_graph([*nodes, node], "flex", inputs + list(extra_inputs), [_vi("Y", elem, [B, HQ, L, E])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid(PREVIEW, 1)])


def captured_model() -> onnx.ModelProto:
    """score_mod adds ``bias`` (an outer value: the input ``rel`` doubled) and scales by ``temp`` (an outer
    initializer); prob_mod multiplies by ``gate`` (an outer input) and reads ``temp`` too."""
    score_mod = _body("score_mod", [helper.make_node("Add", ["s", "bias"], ["t"]),
                                    helper.make_node("Mul", ["t", "temp"], ["s_out"])], "s", "s_out")
    prob_mod = _body("prob_mod", [helper.make_node("Mul", ["p", "gate"], ["g"]),
                                  helper.make_node("Div", ["g", "temp"], ["p_out"])], "p", "p_out")
    model = _model(extra_inputs=[_vi("rel", F, [L, S]), _vi("gate", F, [1, HQ, 1, 1])],
                   nodes=[helper.make_node("Add", ["rel", "rel"], ["bias"])], score_mod=score_mod, prob_mod=prob_mod)
    model.graph.initializer.append(helper.make_tensor("temp", F, [], [0.5]))
    return model


def _feeds(rng, elem=F, kv_heads=HKV, **extra) -> dict[str, np.ndarray]:
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    shapes = {"Q": (B, HQ, L, E), "K": (B, kv_heads, S, E), "V": (B, kv_heads, S, E), **extra}
    return {k: rng.standard_normal(shape).astype(np.float32 if k in extra else dtype) for k, shape in shapes.items()}


def _expected(feeds) -> np.ndarray:
    """``captured_model`` in numpy, in float64."""
    q, k, v = (feeds[n].astype(np.float64) for n in "QKV")
    k, v = np.repeat(k, HQ // HKV, axis=1), np.repeat(v, HQ // HKV, axis=1)
    scores = (q @ np.swapaxes(k, -1, -2) / np.sqrt(E) + 2 * feeds["rel"]) * 0.5
    e = np.exp(scores - scores.max(-1, keepdims=True))
    probs = e / e.sum(-1, keepdims=True) * feeds["gate"] / 0.5
    return probs @ v


# ---------------------------------------------------------------------------- against ONNX's reference evaluator
@pytest.mark.parametrize("elem, kv_heads, attrs", [
    (F, HKV, {}), (F, HQ, {"scale": 0.3}), (F16, 1, {}), (F16, HKV, {"softmax_precision": F16}),
    (F, HKV, {"softmax_precision": F64}), (F64, HKV, {"scale": 0.125}),
    (F, HKV, {"score_mod": _body("sm", [helper.make_node("Tanh", ["s"], ["s_out"])], "s", "s_out")}),
    (F16, HKV, {"prob_mod": _body("pm", [helper.make_node("Sqrt", ["p"], ["p_out"])], "p", "p_out")}),
], ids=["gqa", "mha-scale", "mqa-fp16", "fp16-softmax-fp16", "softmax-double", "double", "tanh-score",
        "fp16-sqrt-prob"])
def test_against_onnx_reference(elem, kv_heads, attrs):
    model = _model(elem, kv_heads, **attrs)
    onnx.checker.check_model(model, full_check=True)
    feeds = _feeds(np.random.default_rng(1), elem, kv_heads)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    g, _ = from_onnx(model)
    got = tlc.reference.run(g, feeds)["Y"]
    assert got.dtype == want.dtype and got.shape == want.shape == (B, HQ, L, E)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------- bodies and captures
def test_captures_round_trip_and_optimize():
    model = captured_model()
    onnx.checker.check_model(model, full_check=True)
    g, _ = from_onnx(model)
    (node,) = [n for n in g.nodes() if n.op == "FlexAttention"]
    assert node.domain == PREVIEW and is_control(node) and num_captures(node) == 3
    captured = [g.value_name(v) for v in g.inputs_of(node)[3:]]
    assert sorted(captured) == ["bias", "gate", "temp"]
    for key in ("score_mod", "prob_mod"):  # every body takes every capture, in the node's order
        assert [n.name for n in node.attrs[key].inputs][1:] == captured

    exported = to_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    (proto,) = [n for n in exported.graph.node if n.op_type == "FlexAttention"]
    assert proto.domain == PREVIEW and list(proto.input) == ["Q", "K", "V"]
    assert "num_captures" not in {a.name for a in proto.attribute}
    again, _ = from_onnx(exported)
    assert_graphs_equal(again, from_onnx(to_onnx(again))[0])
    assert_graphs_equal(g, parse_graph(print_graph(g)))

    feeds = _feeds(np.random.default_rng(2), rel=(L, S), gate=(1, HQ, 1, 1))
    want = _expected(feeds)
    for graph in (g, again):
        np.testing.assert_allclose(tlc.reference.run(graph, feeds)["Y"], want, rtol=1e-4, atol=1e-5)
    for level in (1, 2, 3):
        optimized, _ = optimize(g, opt_level=level)
        optimized.verify()
        np.testing.assert_allclose(tlc.reference.run(optimized, feeds)["Y"], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(tlc.compile(g, opt_level=level).run(feeds)["Y"], want, rtol=1e-4, atol=1e-5)


def test_dce_drops_a_capture_no_body_reads():
    g, _ = from_onnx(captured_model())
    (node,) = [n for n in g.nodes() if n.op == "FlexAttention"]
    feeds = _feeds(np.random.default_rng(3), rel=(L, S), gate=(1, HQ, 1, 1))
    # prob_mod now returns its input: `gate` is read by no body, `temp` still by score_mod
    prob_mod = node.attrs["prob_mod"]
    prob_mod.outputs[0] = (prob_mod.inputs[0].output(0), prob_mod.outputs[0][1])
    prob_mod.remove_unused()
    g.infer_types()
    want = tlc.reference.run(g, feeds)["Y"]
    optimized, _ = optimize(g, passes="dce")
    (node,) = [n for n in optimized.nodes() if n.op == "FlexAttention"]
    assert num_captures(node) == node.attrs["num_captures"] == 2
    assert sorted(optimized.value_name(v) for v in optimized.inputs_of(node)[3:]) == ["bias", "temp"]
    assert [len(node.attrs[k].inputs) for k in ("score_mod", "prob_mod")] == [3, 3]
    np.testing.assert_array_equal(tlc.reference.run(optimized, feeds)["Y"], want)


def test_cse_merges_equal_nodes_and_fold_folds_inside_bodies():
    two = helper.make_tensor("two", F, [], [2.0])
    score_mod = _body("score_mod", [helper.make_node("Mul", ["two", "two"], ["four"]),
                                    helper.make_node("Div", ["s", "four"], ["s_out"])], "s", "s_out", inits=[two])
    model = _model(score_mod=score_mod)
    second = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y2"], domain=PREVIEW, name="flex2",
                              score_mod=score_mod)
    model.graph.node.extend([second, helper.make_node("Add", ["Y", "Y2"], ["Z"])])
    model.graph.output[0].CopyFrom(_vi("Z", F, [B, HQ, L, E]))
    g, _ = from_onnx(model)
    feeds = _feeds(np.random.default_rng(4))
    want = tlc.reference.run(g, feeds)["Z"]
    optimized, _ = optimize(g, passes="fold,cse,dce")
    (node,) = [n for n in optimized.nodes() if n.op == "FlexAttention"]
    assert "Mul" not in node.attrs["score_mod"].op_counts()
    np.testing.assert_allclose(tlc.reference.run(optimized, feeds)["Z"], want, rtol=1e-6)


def test_export_without_bodies():
    g, _ = from_onnx(_model(F16, 1, scale=0.25, softmax_precision=F64))
    exported = to_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    (proto,) = exported.graph.node
    assert (proto.domain, sorted(a.name for a in proto.attribute)) == (PREVIEW, ["scale", "softmax_precision"])
    again, _ = from_onnx(exported)
    assert_graphs_equal(again, from_onnx(to_onnx(again))[0])
    feeds = _feeds(np.random.default_rng(5), F16, 1)
    np.testing.assert_array_equal(tlc.reference.run(again, feeds)["Y"], tlc.reference.run(g, feeds)["Y"])


# ---------------------------------------------------------------------------- schema and inference
def test_schema_matches_onnx():
    schema = onnx.defs.get_schema("FlexAttention", 1, PREVIEW)
    opdef = tlc.ops.get("FlexAttention", PREVIEW)
    assert set(opdef.attrs) == set(schema.attributes) | {"num_captures"}  # tlc's own: the capture count
    kinds = {onnx.AttributeProto.INT: "int", onnx.AttributeProto.FLOAT: "float", onnx.AttributeProto.GRAPH: "graph"}
    assert all(opdef.attrs[k].kind == kinds[a.type] and opdef.attrs[k].default is None and not a.required
               for k, a in schema.attributes.items())
    assert opdef.inputs[0] == schema.min_input == 3


def test_inferred_types():
    g, _ = from_onnx(_model(F16, 1, softmax_precision=F64))
    assert str(g.type_of(g.outputs[0][0])) == f"float16[{B},{HQ},{L},{E}]"
    g, _ = from_onnx(_model(F16, prob_mod=_body("pm", [helper.make_node("Neg", ["p"], ["p_out"])], "p", "p_out")))
    (node,) = [n for n in g.nodes() if n.op == "FlexAttention"]
    assert str(node.attrs["prob_mod"].inputs[0].output_types[0]) == "float32[B,H,L,S]"  # float32: the default


@pytest.mark.parametrize("model, message", [
    (lambda: _model(kv_heads=3), "not a multiple"),
    (lambda: _model(softmax_precision=TensorProto.INT32), "softmax_precision"),
    (lambda: _model(F16, score_mod=_body("sm", [helper.make_node("Neg", ["s"], ["s_out"])], "s", "s_out", F16)),
     "score_mod's input is float16"),
    (lambda: _model(score_mod=helper.make_graph(
        [helper.make_node("ReduceSum", ["s"], ["s_out"], keepdims=0)], "sm", [_vi("s", F, ["B", "H", "L", "S"])],
        [_vi("s_out", F, None)])), "score_mod's output"),
], ids=["heads", "precision", "body-dtype", "body-rank"])
def test_errors(model, message):
    with pytest.raises(tlc.TlcError, match=message):
        from_onnx(model())
