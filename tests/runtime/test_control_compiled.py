"""If, Loop and Scan with compiled bodies (``tlc.runtime.control``): the ONNX node cases, hand-built models
against the reference and onnxruntime (an RNN written as a Loop, a Loop that exits early with scan outputs, an If
nested in a Loop reading values from two levels up, a reversed Scan), a carried value that grows, bodies of
sequence values left on the reference with the reason, and the JIT modes. Small bodies, few kernels."""

from __future__ import annotations

import importlib
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_cases import PASS, CompiledRunner, run_case
from test_control_flow import _feeds, _ort  # the reference tests' feeds and onnxruntime run

import tlc
from tlc.io.onnx import from_onnx
from tlc.runtime.control import LoopImpl

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _node_cases() -> dict[str, object]:
    """The node cases of If, Loop and Scan only (building all ~1,900 takes seconds)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in ("if_", "loop", "scan"):
            importlib.import_module(f"{node.__name__}.{module}")
    return {c.name: c for c in node._NodeTestCases if c.model.graph.node[0].op_type in ("If", "Loop", "Scan")}


CASES = _node_cases()
#: the cases whose values are sequences or optionals: their steps run the reference, and say so
NON_TENSOR = {"test_if_seq", "test_if_opt", "test_loop13_seq", "test_loop16_seq_none"}
#: the If cases whose branches are constants: ifconvert makes them a Where (tests/passes/test_ifconvert.py)
IF_CONVERTED = {"test_if"}


def _step(plan: tlc.Plan, op: str):
    (row,) = [s for s in plan.stats().steps if s.op == op]
    return row


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "test_scan_sum"))
def test_node_cases_compiled(name):
    plans = []
    assert run_case(CASES[name], CompiledRunner(opt_level=2, on_plan=plans.append)) == (PASS, "")
    op = CASES[name].model.graph.node[0].op_type
    if op == "If" and all(s.op != "If" for s in plans[0].stats().steps):   # converted to a Where (ifconvert)
        assert name not in NON_TENSOR and name in IF_CONVERTED, name
        return
    row = _step(plans[0], op)
    if name in NON_TENSOR:
        assert row.mode == "reference" and "sequence and optional" in row.reason
    else:
        assert row.mode == "native", row.reason
        assert "compiled" in row.reason


# ---------------------------------------------------------------------------- hand-built models
def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "main", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def rnn_loop(seq=6, batch=2, hidden=16) -> onnx.ModelProto:
    """h = Tanh(X[i] @ W + h @ R + b) as a Loop over X (captured), h carried and stacked."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.uniform(-0.3, 0.3, s).astype(np.float32), n)
               for n, s in (("w", (hidden, hidden)), ("r", (hidden, hidden)), ("bias", (hidden,)))]
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["x_t"], axis=0),
         helper.make_node("MatMul", ["x_t", "w"], ["xw"]), helper.make_node("MatMul", ["h", "r"], ["hr"]),
         helper.make_node("Add", ["xw", "hr"], ["s"]), helper.make_node("Add", ["s", "bias"], ["sb"]),
         helper.make_node("Tanh", ["sb"], ["h_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "rnn_body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("h", F, [batch, hidden])],
        [_vi("cond_out", B, []), _vi("h_out", F, [batch, hidden]), _vi("h_scan", F, [batch, hidden])])
    return _model([helper.make_node("Loop", ["m", "", "h0"], ["h_last", "hs"], body=body)],
                  [_vi("x", F, [seq, batch, hidden]), _vi("h0", F, [batch, hidden])],
                  [_vi("h_last", F, [batch, hidden]), _vi("hs", F, [seq, batch, hidden])],
                  weights + [numpy_helper.from_array(np.array(seq, np.int64), "m")])


def early_exit_loop() -> onnx.ModelProto:
    """cond_out = sum(acc) < limit, M a bound: the trip count (and the scan output's length) come from the data."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "step"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"])],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc", F, [2])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [2]), _vi("sq", F, [2])])
    return _model([helper.make_node("Loop", ["m", "go", "x"], ["y", "ys"], body=body)],
                  [_vi("x", F, [2]), _vi("step", F, [2])], [_vi("y", F, [2]), _vi("ys", F, [None, 2])],
                  [numpy_helper.from_array(np.array(10, np.int64), "m"), numpy_helper.from_array(np.array(True), "go"),
                   numpy_helper.from_array(np.array(20.0, np.float32), "limit")])


def nested_if_loop() -> onnx.ModelProto:
    """A Loop whose body holds an If; the branches read ``r`` (outer graph) and ``v`` (the body's carried value).
    The then branch reduces (ReduceMax), so the If stays one (``ifconvert`` converts elementwise branches)."""
    then_b = helper.make_graph([helper.make_node("ReduceMax", ["r"], ["rm"], keepdims=1),
                                helper.make_node("Add", ["v", "rm"], ["tv"])], "then", [], [_vi("tv", F, [3])])
    else_b = helper.make_graph([helper.make_node("Mul", ["v", "r"], ["ev"])], "else", [], [_vi("ev", F, [3])])
    body = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["m"]), helper.make_node("Equal", ["m", "zero_i"], ["even"]),
         helper.make_node("If", ["even"], ["v_out"], then_branch=then_b, else_branch=else_b),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("v", F, [3])],
        [_vi("cond_out", B, []), _vi("v_out", F, [3])])
    nodes = [helper.make_node("Sigmoid", ["x"], ["r"]), helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)]
    return _model(nodes, [_vi("x", F, [3]), _vi("n", I64, [])], [_vi("y", F, [3])],
                  [numpy_helper.from_array(np.array(2, np.int64), "two"),
                   numpy_helper.from_array(np.array(0, np.int64), "zero_i")])


def reverse_scan() -> onnx.ModelProto:
    """A Scan along axis 1 of x in reverse, a captured scale, outputs stacked on the last axis in reverse."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s_out"]), helper.make_node("Mul", ["s_out", "scale"], ["y_t"])],
        "body", [_vi("s", F, [2]), _vi("xt", F, [2])], [_vi("s_out", F, [2]), _vi("y_t", F, [2])])
    node = helper.make_node("Scan", ["s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[-1],
                            scan_output_directions=[1])
    return _model([node], [_vi("s0", F, [2]), _vi("x", F, [2, 5]), _vi("scale", F, [2])],
                  [_vi("s_final", F, [2]), _vi("ys", F, [2, 5])])


def _close(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


HAND_BUILT = {
    "rnn": (rnn_loop, [{}]),
    "early_exit": (early_exit_loop, [
        {"x": np.array([1.0, 2.0], np.float32), "step": np.array([1.0, 1.5], np.float32)},
        {"x": np.array([0.0, 0.0], np.float32), "step": np.array([0.1, 0.1], np.float32)},   # runs all 10
        {"x": np.array([30.0, 0.0], np.float32), "step": np.array([1.0, 1.0], np.float32)}]),  # exits at once
    "nested_if": (nested_if_loop, [{"n": np.array(0, np.int64)}, {"n": np.array(5, np.int64)}]),
    "reverse_scan": (reverse_scan, [{}]),
}


@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_hand_built_against_reference_and_onnxruntime(name):
    build, feed_sets = HAND_BUILT[name]
    model = build()
    g, _ = from_onnx(model)
    plan = tlc.compile(g, opt_level=2, jit="eager")
    assert not [j for j in plan.jobs if j.status == "failed"]
    rng = np.random.default_rng(0)
    for fixed in feed_sets:
        feeds = _feeds(model, rng, **fixed)
        want = _ort(model, feeds)
        _close(tlc.reference.run(g, feeds), want)
        _close(plan.run(feeds), want)
        _close(plan.run(feeds), want)   # again: the held runners and arenas are reused
    op = model.graph.node[-1].op_type
    row = _step(plan, op)
    assert row.mode == "native" and f"{op}: compiled body" in row.reason, row.reason


def test_rnn_body_reads_its_captured_weights_as_constants():
    g, _ = from_onnx(rnn_loop())
    plan = tlc.compile(g, opt_level=2, jit="off")
    (loop,) = [st for st in plan.program.steps if st.node.op == "Loop"]
    assert isinstance(loop.impl, LoopImpl)
    (body,) = [entry[0] for entry in loop.impl.body._plans.values()]
    # r and bias are initializers of the outer graph: constants of the body plan, not its inputs; X @ W is one
    # product before the loop (loopbatch), captured in x's place and sliced by the body's Gather
    assert sorted(body.names) == ["MatMul_captured", "cond_in", "h", "i"]
    assert "Loop: compiled body (2 steps)" in _step(plan, "Loop").reason   # Gather, MatMul + epilogue
    assert [st.node.op for st in plan.program.steps] == ["MatMul", "Loop"]


def test_nested_if_is_compiled_inside_the_loop_body():
    g, _ = from_onnx(nested_if_loop())
    plan = tlc.compile(g, opt_level=2, jit="off")
    (loop,) = [st for st in plan.program.steps if st.node.op == "Loop"]
    (body,) = [entry[0] for entry in loop.impl.body._plans.values()]
    feeds = {"x": np.array([0.5, -1.0, 2.0], np.float32), "n": np.array(4, np.int64)}
    _close(plan.run(feeds), tlc.reference.run(g, feeds))
    assert "If: 2 compiled branches" in _step(body.plan, "If").reason


def test_an_if_in_a_loop_counts_every_call_and_takes_the_kernels_that_arrive():
    """Each calling thread keeps a run of each branch from call to call (``BodyRun.held``): every call still
    counts towards the lazy JIT, and the branch runs its kernels once they arrive."""
    g, _ = from_onnx(nested_if_loop())
    plan = tlc.compile(g, opt_level=2, jit="lazy", hot_threshold=3)
    feeds = {"x": np.array([0.5, -1.0, 2.0], np.float32), "n": np.array(4, np.int64)}
    want = tlc.reference.run(g, feeds)
    (loop,) = [st for st in plan.program.steps if st.node.op == "Loop"]
    (body,) = [entry[0] for entry in loop.impl.body._plans.values()]
    (if_step,) = [st for st in body.plan.program.steps if st.node.op == "If"]
    branches = [entry[0].plan for branch in if_step.impl.branches for entry in branch._plans.values()]
    for _ in range(2):   # each branch is called twice a run: hot on its third call
        _close(plan.run(feeds), want)
    assert plan.wait_for_jit(timeout=60)
    assert all(b.jobs and all(j.status == "ready" for j in b.jobs) for b in branches)
    _close(plan.run(feeds), want)
    (body_state,) = body.plan._specs.values()
    (run_if,) = [a.bound.calls[0].fn for a in body_state.spec.active if a.step.node.op == "If"]
    for run in run_if.held.runs:   # the runs this thread kept took the runner made with the kernels
        assert run.state.spec.generation > 0 and run.slot[1] is run.state.runner(False)


def test_growing_carried_value_keeps_the_body_signatures_bounded():
    """A carried value that grows by a row an iteration: a new body signature each time, at most
    ``max_specializations`` of them kept."""
    body = tlc.Graph("grow")
    body.input("i", "int64", [])
    cond = body.input("cond", "bool", [])
    acc = body.input("acc", "float32", [None, 2])
    row = body.input("row", "float32", [1, 2])
    grown = body.add_node("Concat", [acc, body.add_node("Mul", [row, row])], axis=0)
    body.output(cond, "cond_out")
    body.output(grown, "acc_out")
    g = tlc.Graph("main")
    x, r = g.input("x", "float32", [1, 2]), g.input("r", "float32", [1, 2])
    y = g.add_node("Loop", [g.constant(np.array(12, np.int64)), None, x, r],
                   attrs={"body": body, "num_captures": 1})
    g.output(y, "y")
    plan = tlc.compile(g, opt_level=2, jit="off", max_specializations=3)
    feeds = {"x": np.ones((1, 2), np.float32), "r": np.array([[2.0, 3.0]], np.float32)}
    got = plan.run(feeds)["y"]
    assert got.shape == (13, 2)
    np.testing.assert_allclose(got, tlc.reference.run(g, feeds)["y"])
    (loop,) = [st for st in plan.program.steps if st.node.op == "Loop"]
    (body_plan,) = [entry[0] for entry in loop.impl.body._plans.values()]
    assert len(body_plan.plan.specializations()) <= 3
    assert len(body_plan._seen) <= 64


def test_a_body_of_sequence_values_stays_on_the_reference_and_says_why():
    body = tlc.Graph("seq_body")
    body.input("i", "int64", [])
    cond = body.input("cond", "bool", [])
    v = body.input("v", "float32", [2])
    seq = body.add_node("SequenceConstruct", [v, v])
    joined = body.add_node("ConcatFromSequence", [seq], axis=0)
    start, end = body.constant(np.array([0], np.int64)), body.constant(np.array([2], np.int64))
    half = body.add_node("Slice", [joined, start, end])
    body.output(cond, "cond_out")
    body.output(body.add_node("Add", [half, v]), "v_out")
    g = tlc.Graph("main")
    x = g.input("x", "float32", [2])
    y = g.add_node("Loop", [g.constant(np.array(3, np.int64)), None, x], attrs={"body": body})
    g.output(y, "y")
    plan = tlc.compile(g, opt_level=2, jit="off")
    row = _step(plan, "Loop")
    assert row.mode == "reference" and "sequence or optional values" in row.reason
    feeds = {"x": np.array([1.0, -2.0], np.float32)}
    _close(plan.run(feeds), {"y": feeds["x"] * 8})


@pytest.mark.parametrize("jit", ["auto", "lazy", "off"])
def test_jit_modes_account_for_the_body_kernels(jit):
    model = reverse_scan()
    g, _ = from_onnx(model)
    plan = tlc.compile(g, opt_level=2, jit=jit, hot_threshold=2)
    feeds = _feeds(model, np.random.default_rng(3))
    want = tlc.reference.run(g, feeds)
    for _ in range(3):
        _close(plan.run(feeds), want)
    assert plan.wait_for_jit(timeout=60)
    jobs = plan.jobs
    if jit == "off":
        assert not jobs
    else:   # the Scan's job is done once the body plan's kernels are
        assert [j.status for j in jobs] == ["ready"] * len(jobs) and len(jobs) == 1
        (scan,) = [st for st in plan.program.steps if st.node.op == "Scan"]
        (body_plan,) = [entry[0] for entry in scan.impl.body._plans.values()]
        assert body_plan.plan.jobs and all(j.status == "ready" for j in body_plan.plan.jobs)
    _close(plan.run(feeds), want)


def test_a_failure_in_a_body_names_the_step_and_the_body_node():
    body = tlc.Graph("bad")
    s = body.input("s", "float32", [2])
    xt = body.input("xt", "float32", [2])
    idx = body.add_node("Cast", [xt], to=int(TensorProto.INT64))
    picked = body.add_node("Gather", [s, idx], axis=0)
    body.output(s, "s_out")
    body.output(picked, "y")
    g = tlc.Graph("main")
    s0, x = g.input("s0", "float32", [2]), g.input("x", "float32", [3, 2])
    outs = g.add_node("Scan", [s0, x], attrs={"body": body, "num_scan_inputs": 1}, name="the_scan")
    g.output(outs[0], "s")
    g.output(outs[1], "ys")
    plan = tlc.compile(g, opt_level=2, jit="off")
    with pytest.raises(tlc.TlcError, match="the_scan"):
        plan.run({"s0": np.zeros(2, np.float32), "x": np.full((3, 2), 7.0, np.float32)})


def test_a_loop_of_m_alone_stacks_its_scan_output():
    """Loop(M) with no condition, no carried value and no capture: the node has one input."""
    body = tlc.Graph("squares")
    i = body.input("i", "int64", [])
    cond = body.input("cond", "bool", [])
    body.output(cond, "cond_out")
    body.output(body.add_node("Mul", [i, i]), "sq")
    g = tlc.Graph("main")
    g.output(g.add_node("Loop", [g.constant(np.array(5, np.int64))], attrs={"body": body}), "y")
    plan = tlc.compile(g, opt_level=2, jit="off")
    np.testing.assert_array_equal(plan.run({})["y"], [0, 1, 4, 9, 16])
    assert _step(plan, "Loop").mode == "native"


def test_a_plan_with_a_loop_times_one_thread_against_all_then_settles():
    """A specialization with a Loop at several threads times PROBE_RUNS runs at all cores, then as many at one
    thread, and keeps what was faster (``plan.SpecState``); a plan at one thread does not."""
    from tlc.runtime.plan import PROBE_RUNS

    g, _ = from_onnx(rnn_loop())
    feeds = {"x": np.ones((6, 2, 16), np.float32), "h0": np.zeros((2, 16), np.float32)}
    plan = tlc.compile(g, opt_level=2, jit="eager", num_threads=2)
    (state,) = plan._specs.values()
    assert state.probe == ([], [])
    want = plan.run(feeds)
    for _ in range(2 * PROBE_RUNS):
        np.testing.assert_array_equal(plan.run(feeds)["hs"], want["hs"])
    deadline = time.monotonic() + 60   # a small plan's one-thread arm is bound on the JIT thread meanwhile
    while state.probe is not None and time.monotonic() < deadline:
        np.testing.assert_array_equal(plan.run(feeds)["hs"], want["hs"])
    assert state.probe is None and isinstance(state.one_thread, bool)
    assert next(iter(tlc.compile(g, jit="eager", num_threads=1)._specs.values())).probe is None
