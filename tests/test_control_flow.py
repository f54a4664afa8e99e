"""Control flow (If, Loop, Scan): ONNX node cases, hand-built models against onnxruntime, captures made explicit,
import -> export -> check_model -> import round trips, the text form, and passes before/after on the numbers."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from graph_equal import assert_graphs_equal
from onnx import TensorProto, helper, numpy_helper
from onnx_cases import PASS, CompiledRunner, run_case

import tlc
from tlc.io.onnx import from_onnx, to_onnx
from tlc.ir.text import parse_graph, print_graph
from tlc.ops.control import num_captures
from tlc.passes.manager import optimize

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


# ---------------------------------------------------------------------------- ONNX node cases
def _node_cases() -> dict[str, object]:
    """The node cases of the modules that hold If, Loop, Scan and the expanded ops that use them (not all ~1,900
    cases: building those takes seconds)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in ("if_", "loop", "scan", "rangeop", "affinegrid", "linear_attention"):
            importlib.import_module(f"{node.__name__}.{module}")
    return {c.name: c for c in node._NodeTestCases}


CASES = _node_cases()
REFERENCE_CASES = [
    "test_if", "test_loop11", "test_scan9_sum", "test_scan9_multi_state", "test_scan9_scalar",
    "test_range_float_type_positive_delta_expanded", "test_range_int32_type_negative_delta_expanded",
    "test_affine_grid_2d_expanded", "test_affine_grid_3d_align_corners_expanded",
    "test_linear_attention_gated_delta_expanded", "test_linear_attention_prefill_with_past_expanded",
]
#: cases that stay refused by name: Scan's batched opset-8 form
# NOTE: test_if_seq, test_if_opt, test_loop13_seq and test_loop16_seq_none (sequence and optional values) pass now;
# tests/test_sequences.py runs them
REFUSED_CASES = ["test_scan_sum"]


@pytest.mark.parametrize("name", REFERENCE_CASES)
def test_node_case_reference(name):
    assert run_case(CASES[name]) == (PASS, "")


@pytest.mark.parametrize("name", ["test_if", "test_loop11", "test_scan9_multi_state"])
def test_node_case_compiled(name):
    plans = []
    assert run_case(CASES[name], CompiledRunner(opt_level=2, on_plan=plans.append)) == (PASS, "")
    assert "reference" in str(plans[0].stats())


@pytest.mark.parametrize("name", REFUSED_CASES)
def test_node_case_refused_by_name(name):
    status, reason = run_case(CASES[name])
    assert status == "unsupported", reason


# ---------------------------------------------------------------------------- hand-built models
def _model(nodes, inputs, outputs, initializers=(), opset=21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "main", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def if_model() -> onnx.ModelProto:
    """If on a runtime condition; both branches read outer values (an input, a computed value, an initializer)."""
    then_b = helper.make_graph([helper.make_node("Add", ["a", "x"], ["t"]),
                                helper.make_node("Mul", ["t", "w"], ["t2"])], "then", [], [_vi("t2", F, [3])])
    else_b = helper.make_graph([helper.make_node("Sub", ["a", "w"], ["e"])], "else", [], [_vi("e", F, [3])])
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)]
    inits = [numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    return _model(nodes, [_vi("x", F, [3])], [_vi("y", F, [3])], inits)


def nested_model() -> onnx.ModelProto:
    """A Loop whose body holds an If; the If's branches read ``r`` two levels up and ``v`` one level up."""
    then_b = helper.make_graph([helper.make_node("Add", ["v", "r"], ["tv"])], "then", [], [_vi("tv", F, [2])])
    else_b = helper.make_graph([helper.make_node("Mul", ["v", "r"], ["ev"])], "else", [], [_vi("ev", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["m"]),
         helper.make_node("Equal", ["m", "zero_i"], ["even"]),
         helper.make_node("If", ["even"], ["v_out"], then_branch=then_b, else_branch=else_b),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("v", F, [2])],
        [_vi("cond_out", B, []), _vi("v_out", F, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)]
    inits = [numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array(0, np.int64), "zero_i")]
    return _model(nodes, [_vi("x", F, [2]), _vi("n", I64, [])], [_vi("y", F, [2])], inits)


def early_exit_model() -> onnx.ModelProto:
    """A Loop with a scan output that stops early: cond_out = running sum < limit (M is a bound)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "step"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"])],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc", F, [2])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [2]), _vi("sq", F, [2])])
    nodes = [helper.make_node("Loop", ["m", "go", "x"], ["y", "ys"], body=body)]
    inits = [numpy_helper.from_array(np.array(10, np.int64), "m"),
             numpy_helper.from_array(np.array(True), "go"),
             numpy_helper.from_array(np.array(20.0, np.float32), "limit")]
    return _model(nodes, [_vi("x", F, [2]), _vi("step", F, [2])], [_vi("y", F, [2]), _vi("ys", F, [None, 2])],
                  inits)


def scan_model() -> onnx.ModelProto:
    """Scan along axis 1 of x in reverse, a state, a captured scale, and the outputs stacked on axis 1 reversed."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "scale"], ["y_t"])],
        "body", [_vi("s", F, [2]), _vi("xt", F, [2])], [_vi("s_out", F, [2]), _vi("y_t", F, [2])])
    nodes = [helper.make_node("Scan", ["s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[-1],
                              scan_output_directions=[1])]
    return _model(nodes, [_vi("s0", F, [2]), _vi("x", F, [2, 4]), _vi("scale", F, [2])],
                  [_vi("s_final", F, [2]), _vi("ys", F, [2, 4])])


def _feeds(model: onnx.ModelProto, rng: np.random.Generator, **fixed) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        if vi.name in fixed:
            feeds[vi.name] = fixed[vi.name]
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _ort(model: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _close(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


HAND_BUILT = {
    "if": (if_model, [{"x": np.array([1.0, -2.0, 0.5], np.float32)}, {"x": np.array([-1.0, -2.0, 0.5], np.float32)}]),
    "nested": (nested_model, [{"n": np.array(0, np.int64)}, {"n": np.array(5, np.int64)}]),
    "early_exit": (early_exit_model, [
        {"x": np.array([1.0, 2.0], np.float32), "step": np.array([1.0, 1.5], np.float32)},
        {"x": np.array([0.0, 0.0], np.float32), "step": np.array([0.1, 0.1], np.float32)}]),
    "scan": (scan_model, [{}]),
}


@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_hand_built_against_onnxruntime_and_round_trip(name):
    build, feed_sets = HAND_BUILT[name]
    model = build()
    g, _ = from_onnx(model)
    exported = to_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    again, _ = from_onnx(exported)  # export -> import is a fixed point from here (producer, order of constants)
    assert_graphs_equal(again, from_onnx(to_onnx(again))[0])
    text = print_graph(g)
    assert_graphs_equal(g, parse_graph(text))
    rng = np.random.default_rng(0)
    for fixed in feed_sets:
        feeds = _feeds(model, rng, **fixed)
        want = _ort(model, feeds)
        _close(tlc.reference.run(g, feeds), want)
        _close(_ort(exported, feeds), want)
        for level in (1, 2, 3):
            optimized, _ = optimize(g, opt_level=level)
            optimized.verify()
            _close(tlc.reference.run(optimized, feeds), want)


def test_captures_are_explicit_inputs():
    g, _ = from_onnx(nested_model())
    (loop,) = [n for n in g.nodes() if n.op == "Loop"]
    assert num_captures(loop) == 3  # r (read two levels down), and the initializers two and zero_i
    captured = [g.value_name(v) for v in g.inputs_of(loop)[3:]]
    assert sorted(captured) == ["r", "two", "zero_i"]
    body = loop.attrs["body"]
    (inner_if,) = [n for n in body.nodes() if n.op == "If"]
    assert sorted(body.value_name(v) for v in body.inputs_of(inner_if)[1:]) == ["r", "v"]
    then_b, else_b = inner_if.attrs["then_branch"], inner_if.attrs["else_branch"]
    assert [n.name for n in then_b.inputs] == [n.name for n in else_b.inputs]


# ---------------------------------------------------------------------------- passes
def test_dce_keeps_captured_values_and_cleans_bodies():
    g, _ = from_onnx(if_model())
    (node,) = [n for n in g.nodes() if n.op == "If"]
    then_b = node.attrs["then_branch"]
    dead = then_b.add_node("Neg", [then_b.inputs[0].output(0)])
    assert dead in then_b
    optimized, _ = optimize(g, passes="dce")
    (node,) = [n for n in optimized.nodes() if n.op == "If"]
    assert "Neg" not in node.attrs["then_branch"].op_counts()
    assert optimized.has_value("a")  # read only inside the branches


def test_dce_drops_captures_no_body_reads():
    g, _ = from_onnx(if_model())
    (node,) = [n for n in g.nodes() if n.op == "If"]
    else_b = node.attrs["else_branch"]
    # the else branch now returns a constant: `w` stays read by then_branch, nothing else changes
    const = else_b.constant(np.zeros(3, np.float32), name="zeros")
    else_b.outputs[0] = (const, else_b.outputs[0][1])
    else_b.remove_unused()
    before = num_captures(node)
    optimized, _ = optimize(g, passes="dce")
    (node,) = [n for n in optimized.nodes() if n.op == "If"]
    assert num_captures(node) == before  # then_branch still reads a, x and w
    node.attrs["then_branch"], node.attrs["else_branch"] = else_b.copy(), else_b.copy()
    optimized.infer_types()
    again, _ = optimize(optimized, passes="dce")
    (node,) = [n for n in again.nodes() if n.op == "If"]
    assert num_captures(node) == 0 and not again.has_value("a")
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(tlc.reference.run(again, {"x": x})["y"], np.zeros(3, np.float32))


def test_cse_inside_a_body():
    g, _ = from_onnx(early_exit_model())
    (loop,) = [n for n in g.nodes() if n.op == "Loop"]
    body = loop.attrs["body"]
    acc_out = body.value("acc_out")
    twin = body.add_node("Mul", [acc_out, acc_out], name="sq_twin")
    body.outputs[2] = (twin, body.outputs[2][1])
    optimized, _ = optimize(g, passes="cse,dce")
    (loop,) = [n for n in optimized.nodes() if n.op == "Loop"]
    assert loop.attrs["body"].op_counts()["Mul"] == 1
    feeds = {"x": np.array([1.0, 2.0], np.float32), "step": np.array([1.0, 1.5], np.float32)}
    _close(tlc.reference.run(optimized, feeds), tlc.reference.run(g, feeds))


def test_fold_inlines_an_if_with_a_constant_condition():
    g, _ = from_onnx(if_model())
    (node,) = [n for n in g.nodes() if n.op == "If"]
    g.set_input(node, 0, g.constant(np.array(False), name="always_false"))
    optimized, report = optimize(g, passes="fold,dce")
    assert "If" not in optimized.op_counts() and optimized.op_counts()["Sub"] == 1
    x = np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_allclose(tlc.reference.run(optimized, {"x": x})["y"], x * x - [1.0, 2.0, 3.0])
    assert [name for _, name in optimized.outputs] == ["y"]


def test_fuse_leaves_control_flow_opaque():
    g, _ = from_onnx(nested_model())
    optimized, _ = optimize(g, opt_level=2)
    (loop,) = [n for n in optimized.nodes() if n.op == "Loop"]
    inner = [n.qualified_op for n in loop.attrs["body"].nodes()]
    assert "tlc.Fused" not in inner
    (inner_if,) = [n for n in loop.attrs["body"].nodes() if n.op == "If"]
    assert inner_if.attrs["then_branch"].op_counts()["Add"] == 1


# ---------------------------------------------------------------------------- errors
def test_a_body_reading_an_undefined_name_is_an_invalid_model():
    then_b = helper.make_graph([helper.make_node("Neg", ["nowhere"], ["t"])], "then", [], [_vi("t", F, [1])])
    else_b = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e", F, [1])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                              "main", [_vi("c", B, []), _vi("x", F, [1])], [_vi("y", F, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(tlc.InvalidModelError, match="nowhere"):
        from_onnx(model)


def test_branches_of_different_element_types_fail_inference():
    then_b = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t", F, [1])])
    else_b = helper.make_graph([helper.make_node("Shape", ["x"], ["e"])], "else", [], [_vi("e", I64, [1])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                              "main", [_vi("c", B, []), _vi("x", F, [1])], [_vi("y", F, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(tlc.ShapeInferenceError, match="branches disagree"):
        from_onnx(model)


def test_bodies_nested_too_deep_are_refused():
    leaf = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "b", [], [_vi("t", F, [1])])
    inner = leaf
    for level in range(30):  # NOTE: one branch nests, the other stays a leaf (two would double the proto per level)
        node = helper.make_node("If", ["c"], [f"o{level}"], then_branch=inner, else_branch=leaf)
        inner = helper.make_graph([node], f"b{level}", [], [_vi(f"o{level}", F, [1])])
    graph = helper.make_graph(list(inner.node), "main", [_vi("c", B, []), _vi("x", F, [1])], [_vi("o29", F, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(tlc.InvalidModelError, match="nested more than"):
        from_onnx(model)
