"""The PassManager: pipelines by level and by name, fixed points, skip, instruments, report, failures."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest
from pass_testing import assert_same_outputs, ops, random_feeds

import tlc
from tlc.io.onnx import to_onnx
from tlc.ir.graph import Graph
from tlc.ir.text import load_text
from tlc.passes import (
    LEVEL_ORDER,
    Pass,
    PassInstrument,
    PassManager,
    PassOptions,
    PassResult,
    PrintIRInstrument,
    ProgressInstrument,
    TimingInstrument,
    all_passes,
    base,
    level_pipeline,
    optimize,
    parse_pipeline,
)


def messy_graph(rng: np.random.Generator) -> Graph:
    """Constant chains, duplicates, identities and dead code around a small computation."""
    g = Graph("messy")
    x = g.input("x", "float32", ("N", 4))
    w = g.constant(rng.standard_normal((4, 4)).astype(np.float32), name="w")
    scale = g.add_node("Mul", [g.constant(np.float32(2)), g.constant(np.float32(0.25))], name="scale")
    h1 = g.add_node("MatMul", [x, w], name="h1")
    h2 = g.add_node("MatMul", [x, w], name="h2")
    s = g.add_node("Add", [g.add_node("Mul", [h1, scale]), g.add_node("Mul", [scale, h2])], name="s")
    g.add_node("Exp", [g.add_node("Neg", [h1])], name="dead")
    g.output(g.add_node("Identity", [g.add_node("Tanh", [s])]), "y")
    return g


def register_test_pass(monkeypatch, cls: type[Pass]) -> type[Pass]:
    monkeypatch.setitem(base._PASSES, cls.name, cls)
    return cls


# ---------------------------------------------------------------------------- pipelines
def test_caller_graph_is_never_modified(rng):
    g = messy_graph(rng)
    before_hash, before_len, before_ops = g.structural_hash(), len(g), g.op_counts()
    out, report = PassManager(opt_level=2).run(g)
    assert out is not g and report.changed
    assert g.structural_hash() == before_hash and len(g) == before_len and g.op_counts() == before_ops
    g.verify()


def test_opt_levels_take_passes_by_min_level():
    for level in range(4):
        names = {n for stage in level_pipeline(level) for n in stage.names}
        assert names == {cls.name for cls in all_passes() if cls.min_level <= level}
    assert level_pipeline(0) == ()
    assert str(PassManager(opt_level=1)).startswith("(fold,")


def test_every_registered_pass_is_placed_in_the_level_order():
    placed = {n for stage in LEVEL_ORDER for n in stage.names}
    assert {cls.name for cls in all_passes()} <= placed


def test_a_new_registered_pass_joins_its_level(monkeypatch):
    class Late(Pass):
        name, min_level, description = "late-test", 3, "a pass no list knows"

        def run(self, graph):
            return PassResult()

    register_test_pass(monkeypatch, Late)
    assert "late-test" in PassManager(opt_level=3).pass_names
    assert "late-test" not in PassManager(opt_level=2).pass_names


def test_o2_pipeline_optimizes_and_keeps_numbers(rng):
    g = messy_graph(rng)
    out, report = PassManager(opt_level=2, passes="fold,dce,cse,(fold,dce,cse)").run(g)
    assert ops(out) == ["MatMul", "Mul", "Add", "Tanh"]
    assert [name for _, name in out.outputs] == ["y"]
    feeds = random_feeds(g, rng)
    assert_same_outputs(g, out, feeds)
    # outside oracle: the optimized graph, exported, runs in onnxruntime to the reference's numbers
    sess = ort.InferenceSession(to_onnx(out).SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(["y"], feeds)[0], tlc.reference.run(g, feeds)["y"], rtol=1e-5, atol=1e-6)
    assert report.counters()["folded"] == 1 and report.counters()["nodes_merged"] == 2


def test_named_pipeline_syntax_and_errors():
    stages = parse_pipeline("fold, dce,(cse,fold),dce")
    assert [(s.names, s.fixed_point) for s in stages] == [
        (("fold", "dce"), False), (("cse", "fold"), True), (("dce",), False)]
    assert parse_pipeline("") == ()
    for bad, why in [("fold,,dce", "empty pass name"), ("(fold", "unbalanced"), ("fold)", "unbalanced"),
                     ("((fold))", "do not nest"), ("(fold)dce", "must follow")]:
        with pytest.raises(tlc.PassError, match=why):
            parse_pipeline(bad)


def test_unknown_pass_names_list_the_known_ones():
    with pytest.raises(tlc.PassError, match=r"unknown pass 'flod'; known passes: cse, dce, fold") as info:
        PassManager("fold,flod")
    assert info.value.pass_name == "flod"
    with pytest.raises(tlc.PassError, match=r"unknown pass to skip 'nope'; known passes: cse"):
        PassManager(opt_level=2, skip=["nope"])
    with pytest.raises(tlc.PassError, match="opt level must be an int from 0 to 3"):
        PassManager(opt_level=4)


def test_skip_leaves_passes_out(rng):
    g = messy_graph(rng)
    pm = PassManager(opt_level=2, skip="cse,fuse,simplify,horizontal,ifconvert,loopbatch")
    assert "cse" not in pm.pass_names and "fold" in pm.pass_names
    out, report = pm.run(g)
    assert {r.name for r in report.records} == {"fold", "dce"}
    assert ops(out).count("MatMul") == 2


# ---------------------------------------------------------------------------- fixed point
class Countdown(Pass):
    """Changes the graph (adds a dead node) on its first ``remaining`` runs."""

    name, min_level, description = "countdown-test", 9, "test pass"
    remaining = 0

    def run(self, graph):
        result = PassResult()
        if type(self).remaining > 0:
            type(self).remaining -= 1
            graph.constant(np.zeros(1, np.float32), name="noise")
            result.count("added")
        return result


def test_fixed_point_stage_iterates_until_nothing_changes(monkeypatch, rng):
    register_test_pass(monkeypatch, Countdown)
    monkeypatch.setattr(Countdown, "remaining", 3)
    out, report = PassManager("(countdown-test,dce)").run(messy_graph(rng))
    assert report.stages[0].iterations == 4 and report.converged
    assert [r.iteration for r in report.records if r.name == "countdown-test"] == [1, 2, 3, 4]
    assert not out.has_value("noise")


def test_fixed_point_is_bounded(monkeypatch, rng):
    register_test_pass(monkeypatch, Countdown)
    monkeypatch.setattr(Countdown, "remaining", 100)
    _, report = PassManager("(countdown-test,dce)", max_iterations=5).run(messy_graph(rng))
    assert report.stages[0].iterations == 5 and not report.converged
    assert "hit the iteration bound" in report.table()


def test_a_plain_pipeline_runs_each_pass_once(monkeypatch, rng):
    register_test_pass(monkeypatch, Countdown)
    monkeypatch.setattr(Countdown, "remaining", 3)
    _, report = PassManager("countdown-test,dce").run(messy_graph(rng))
    assert [r.name for r in report.records] == ["countdown-test", "dce"]


# ---------------------------------------------------------------------------- instruments
class Recorder(PassInstrument):
    def __init__(self):
        self.events = []

    def enter_pipeline(self, graph):
        self.events.append(("enter", len(graph)))

    def run_before_pass(self, pass_, graph):
        self.events.append(("before", pass_.name))

    def run_after_pass(self, pass_, graph, result):
        self.events.append(("after", pass_.name, result.changed))

    def exit_pipeline(self, graph, report):
        self.events.append(("exit", report.nodes_after))


def test_instruments_see_every_pass_in_order(rng):
    rec = Recorder()
    g = messy_graph(rng)
    out, _ = PassManager("fold,dce,cse", instruments=[rec]).run(g)
    assert rec.events == [("enter", len(g)), ("before", "fold"), ("after", "fold", True), ("before", "dce"),
                          ("after", "dce", True), ("before", "cse"), ("after", "cse", True), ("exit", len(out))]


def test_print_ir_after_change_prints_only_changing_passes(rng):
    g = Graph()
    x = g.input("x", "float32", (2,))
    g.output(g.add_node("Relu", [x]), "y")
    all_stream, change_stream = io.StringIO(), io.StringIO()
    PassManager("fold,dce", instruments=[PrintIRInstrument(all_stream)]).run(g)
    PassManager("fold,dce", instruments=[PrintIRInstrument(change_stream, only_changed=True)]).run(messy_graph(rng))
    text = all_stream.getvalue()
    assert "# -----// IR after fold (unchanged) //----- #" in text and "IR after dce (unchanged)" in text
    assert "Relu" in text
    changed = change_stream.getvalue()
    assert "IR after fold //" in changed and "IR after dce //" in changed and "unchanged" not in changed


def test_timing_instrument_sums_runs(rng):
    timing = TimingInstrument()
    PassManager("(fold,dce,cse)", instruments=[timing]).run(messy_graph(rng))
    assert timing.runs == {"fold": 2, "dce": 2, "cse": 2}
    assert all(s >= 0 for s in timing.seconds.values())
    assert timing.table().splitlines()[0].split() == ["pass", "runs", "time", "ms", "%"]


def test_progress_is_silent_for_quick_pipelines_and_lines_when_asked(rng):
    quiet, loud = io.StringIO(), io.StringIO()
    PassManager("fold,dce", instruments=[ProgressInstrument(quiet, delay=60)]).run(messy_graph(rng))
    PassManager("fold,dce", instruments=[ProgressInstrument(loud, delay=0)]).run(messy_graph(rng))
    assert quiet.getvalue() == ""
    lines = loud.getvalue().splitlines()
    assert lines[0].startswith("tlc: pass 1: fold on ") and lines[1].startswith("tlc: pass 2: dce on ")


# ---------------------------------------------------------------------------- failures
class Breaks(Pass):
    """Leaves a wrong type on a node: only the verifier notices."""

    name, min_level, description = "breaks-test", 9, "test pass"

    def run(self, graph):
        node = graph.ops()[0]
        node.output_types[0] = node.output_types[0].with_dtype("int8")
        result = PassResult()
        result.count("broken")
        return result


class Raises(Pass):
    name, min_level, description = "raises-test", 9, "test pass"

    def run(self, graph):
        self.current_node = graph.ops()[0].name
        raise ZeroDivisionError("boom")


def test_verify_each_names_the_pass_that_broke_the_graph(monkeypatch, rng):
    register_test_pass(monkeypatch, Breaks)
    g = messy_graph(rng)
    PassManager("fold,breaks-test").run(g)   # without verification nothing notices
    with pytest.raises(tlc.PassError, match=r"pass 'breaks-test' left an invalid graph: .*int8") as info:
        PassManager("fold,breaks-test", verify_each=True).run(g)
    assert info.value.pass_name == "breaks-test"


def test_verify_each_checks_the_input_first(rng):
    g = messy_graph(rng)
    g.producer(g.value("h1")).output_types[0] = tlc.TensorType("int8", ("N", 4))
    with pytest.raises(tlc.ValidationError, match="input graph is invalid"):
        PassManager("dce", verify_each=True).run(g)


def test_failing_pass_raises_pass_error_with_node(monkeypatch, rng):
    register_test_pass(monkeypatch, Raises)
    g = messy_graph(rng)
    with pytest.raises(tlc.PassError, match=r"pass 'raises-test' failed at node 'h1': ZeroDivisionError: boom"):
        PassManager("fold,raises-test").run(g)


def test_reproducer_is_the_graph_before_the_failing_pass(monkeypatch, rng, tmp_path):
    register_test_pass(monkeypatch, Raises)
    g = messy_graph(rng)
    with pytest.raises(tlc.PassError) as info:
        PassManager("fold,dce,raises-test", reproducer_dir=tmp_path / "repro").run(g)
    err = info.value
    assert err.reproducer is not None and f"rerun: tlc-opt {err.reproducer} --passes=raises-test" in str(err)
    saved = load_text(err.reproducer)
    expected, _ = PassManager("fold,dce").run(g)
    assert saved.structural_hash() == expected.structural_hash()


# ---------------------------------------------------------------------------- report and optimize()
def test_report_is_data_and_a_table(rng):
    g = messy_graph(rng)
    out, report = optimize(g, passes="(fold,dce,cse)")
    assert report.nodes_before == len(g) and report.nodes_after == len(out)
    assert report.ops_before["MatMul"] == 2 and report.ops_after["MatMul"] == 1
    assert report.params_before == 16 + 2 and report.params_after == 16 + 1
    assert [r.name for r in report.records] == ["fold", "dce", "cse"] * 2
    assert [r.changed for r in report.records] == [True, True, True, False, False, False]
    first = report.records[0]
    assert first.nodes_before == len(g) and first.stats == {"folded": 1} and first.seconds >= 0
    data = report.to_dict()
    assert data["nodes_before"] == len(g) and data["counters"]["folded"] == 1 and data["iterations"] == 2
    table = report.table()
    assert table.splitlines()[0].split()[:3] == ["pass", "runs", "changed"]
    assert any(line.split()[:3] == ["fold", "2", "1"] and "folded=1" in line for line in table.splitlines())
    assert f"total: {len(g)} -> {len(out)} nodes, 6 pass runs, 2 iteration(s)" in table


def test_optimize_options_reach_passes_and_unknown_ones_are_refused(rng):
    g = Graph()
    x = g.input("x", "float32", (8, 8))
    big = g.add_node("Add", [g.constant(np.ones((8, 1), np.float32)), g.constant(np.ones((1, 8), np.float32))])
    g.output(g.add_node("Mul", [x, big]), "y")
    _, report = optimize(g, passes="fold", fold_size_limit=4)
    assert report.counters() == {"skipped_too_large": 1}
    _, report = optimize(g, passes="fold", fold_size_limit=64)
    assert report.counters() == {"folded": 1}
    with pytest.raises(TypeError, match="unknown option.*fold_limit"):
        optimize(g, fold_limit=3)


def test_opt_level_reaches_pass_options():
    pm = PassManager("fold", opt_level=3, options=PassOptions(fast_math=True))
    assert pm.options.opt_level == 3 and pm.options.fast_math
    assert PassManager(options=PassOptions(opt_level=1)).options.opt_level == 1


def test_pipeline_as_a_list_of_names_passes_and_groups(rng):
    from tlc.passes.fold import FoldPass

    fold = FoldPass(PassOptions(fold_size_limit=0))
    pm = PassManager([fold, ["dce", "cse"], "dce"])
    assert str(pm) == "fold (dce,cse) dce"
    assert [(s.fixed_point, s.passes[0] is fold) for s in pm.stages] == [(False, True), (True, False), (False, False)]
    out, report = pm.run(messy_graph(rng))
    assert report.records[0].stats == {"folded": 1}     # scalars never exceed a limit of 0: nothing grows
    assert ops(out) == ["MatMul", "Mul", "Add", "Tanh"]
    with pytest.raises(tlc.PassError, match="must be a pass name or a Pass, got int"):
        PassManager(["fold", 3])
