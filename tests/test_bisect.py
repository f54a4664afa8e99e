"""Bisection (``tlc.passes.bisect``, ``tlc-opt --bisect / --check-each``): a planted wrong rule and a wrong pass are
named with their step, the reproducers hold the graph before and after, a clean pipeline is clean, and the
comparison is exact for integers and relative to the output's scale for floats."""

from __future__ import annotations

import numpy as np

import tlc
from tlc.cli import main
from tlc.passes import Pass, PassResult
from tlc.passes.bisect import EXIT_FOUND, bisect, compare_outputs
from tlc.passes.rewrite import Const, Op, Rule, RuleSet, Var
from tlc.passes.rules import extra_rule_set

#: deliberately wrong: x * 2 is not x + 2
WRONG = RuleSet("planted", (Rule("mul-two-is-add-two", Op("Mul", Var("x"), Const(2.0)),
                                 lambda m, b: b.op("Add", m["x"], b.constant(np.float32(2.0)))),))


def tiny() -> tlc.Graph:
    g = tlc.Graph("tiny")
    x = g.input("x", "float32", ("N", 4))
    m = g.add_node("Mul", [x, g.constant(np.float32(2.0), name="two")], name="m")
    h = g.add_node("Identity", [g.add_node("Add", [m, g.constant(np.float32(1.0), name="one")], name="a")])
    g.output(g.add_node("Relu", [h], name="r"), "y")
    return g


class _Negate(Pass):
    """A wrong pass (not registered): it negates the graph's output."""

    name = "negate"

    def run(self, graph):
        (value, _), = graph.outputs
        graph.replace_values([(value, graph.add_node("Neg", [value]))])
        return PassResult(changed=True)


class _Crash(Pass):
    name = "crash"

    def run(self, graph):
        self.current_node = "r"
        raise RuntimeError("boom")


def test_bisect_names_the_planted_rule_and_writes_reproducers(tmp_path):
    g, text = tiny(), str(tiny())
    clean = bisect(g, opt_level=2)
    assert clean.clean and clean.first is None and clean.graph is not None and clean.steps >= 6
    assert "no step changed the outputs" in clean.summary()
    with extra_rule_set(WRONG):
        found = bisect(g, opt_level=2, reproducer_dir=tmp_path)
        each = bisect(g, opt_level=2, check_each=True)
    assert str(g) == text                                           # the caller's graph is untouched
    step = found.first.step
    assert (step.pass_name, step.rule, step.node) == ("simplify", "mul-two-is-add-two", "m")
    assert step.index == found.steps and found.graph is None        # it stopped there
    assert "output 'y'" in found.first.why and f"first bad step {step.index}: pass simplify" in found.summary()
    before, after = (tlc.load(f) for f in found.first.files)
    assert [p.rsplit("/", 1)[1] for p in found.first.files] == [f"{step.label}.before.tlc", f"{step.label}.after.tlc"]
    assert [n.op for n in before.ops()].count("Mul") == 1 and "Mul" not in [n.op for n in after.ops()]
    feeds = found.feeds
    np.testing.assert_allclose(tlc.reference.run(before, feeds)["y"], found.expected["y"], rtol=1e-6)
    assert compare_outputs(found.expected, tlc.reference.run(after, feeds), 1e-4) is not None
    # --check-each: the same step, then the pipeline runs on (later steps did not change the outputs again)
    assert [f.step for f in each.findings] == [step] and each.steps > step.index and each.graph is not None
    # a wrong pass is a step of its own (no rule), and a pass that raises is named with its node
    wrong = bisect(g, passes=["fold", _Negate(), "dce"])
    assert [(f.step.index, f.step.pass_name, f.step.rule) for f in wrong.findings] == [(2, "negate", None)]
    crash = bisect(g, passes=["fold", _Crash()])
    (finding,) = crash.findings
    assert (finding.step.index, finding.step.pass_name, finding.step.node) == (2, "crash", "r")
    assert "boom" in finding.why and finding.after is None


def test_comparison_is_exact_for_integers_and_scaled_for_floats():
    f = np.array([1000.0, 1.0, np.nan, -np.inf], np.float32)
    near = f + np.array([0.05, 0.05, 0, 0], np.float32)              # 5e-5 of the scale 1000
    assert compare_outputs({"y": f}, {"y": near}, 1e-4) is None
    assert "1 of 4 elements" in compare_outputs({"y": f}, {"y": f + np.float32([0.2, 0, 0, 0])}, 1e-4)
    assert compare_outputs({"y": f}, {"y": np.float32([1000, 1, 0, -np.inf])}, 1e-4) is not None   # NaN lost
    assert compare_outputs({"y": f}, {"y": np.float32([1000, 1, np.nan, np.inf])}, 1e-4) is not None
    i = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert "first at [1, 2]" in compare_outputs({"i": i}, {"i": i + (i == 5)}, 0.5)                # no tolerance
    assert "int32" in compare_outputs({"i": i}, {"i": i.astype(np.int32)}, 0.5)
    assert "outputs are" in compare_outputs({"i": i}, {"j": i}, 0.5)
    assert compare_outputs({"z": np.zeros(3, np.float32)}, {"z": np.float32([0, 5e-5, 0])}, 1e-4) is None


def test_cli_check_each_reports_the_step_and_exit_status(tmp_path, capsys):
    model = tmp_path / "tiny.tlc"
    tlc.save(tiny(), model)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
    out = tmp_path / "out.tlc"
    with extra_rule_set(WRONG):
        code = main([str(model), "-O2", "--check-each", "--feeds", str(feeds), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_FOUND, err
    assert "rule mul-two-is-add-two (node 'm')" in err and "the feeds of" in err and "x[3, 4]" in err
    folder = tmp_path / "out.bisect"                          # beside the output
    assert sorted(p.name.rsplit(".", 2)[1] for p in folder.glob("step-*-simplify-mul-two-is-add-two.*.tlc")) == [
        "after", "before"]
    assert out.exists() and str(tlc.load(model)) == str(tiny())      # ran to the end; the input untouched
    assert main([str(model), "-O2", "--bisect"]) == 0 and "no step changed" in capsys.readouterr().err
    assert main([str(model), "--feeds", str(feeds)]) == 1 and "--feeds is used only with" in capsys.readouterr().err
