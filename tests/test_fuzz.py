"""Differential fuzzing (``tlc.testing``): the generator reaches the registry, the oracles agree on random graphs and
catch planted bugs, shrinking finds the culprit, and every saved reproducer in ``tests/fuzz_regressions/`` replays.

CI's bounded sample: one hypothesis test on the reference, -O1 and the text round trip; one seeded batch through
every oracle (the plan variants rotated, so the batch covers each jit mode and thread count); the reproducers.
Long campaigns: ``python tools/fuzz.py --minutes N``.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tlc
from tlc.ir.types import ONNX_TYPE_CODES
from tlc.ops.infer import same_as_input
from tlc.ops.registry import _REGISTRY, OpDef, lookup, register
from tlc.testing import generate
from tlc.testing.compare import compare
from tlc.testing.generate import collect_ops, fuzzable_ops
from tlc.testing.oracles import EXACT, ORACLES, OTHER_ORACLES, PLAN_ORACLES, Checker, check_case, plan_oracles
from tlc.testing.shrink import disagrees, load_reproducer, replay, save_reproducer, shrink
from tlc.testing.strategies import cases

REGRESSIONS = Path(__file__).parent / "fuzz_regressions"
COMMON = dict(deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


# ---------------------------------------------------------------------------- the generator
def test_generator_covers_the_registry_and_its_ops_agree_with_their_inference():
    """Driven by the registry: >= 100 ops reached in 200 seeded graphs, none random or control flow; each op's
    inference matched its reference on every candidate (findings would name the op); seeds replay."""
    names = {s.name for s in fuzzable_ops()}
    assert not names & {"RandomNormal", "Bernoulli", "Multinomial", "If", "Loop", "Scan", "SequenceAt",
                        "StringConcat", "tlc.Fused", "ai.onnx.preview.training.Adam"}
    reached, findings, sizes = Counter(), [], Counter()
    for seed in range(200):
        case = generate(seed)
        reached.update(case.ops)
        findings += case.findings
        sizes[len(case.graph.inputs)] += 1
        assert 1 <= len(case.graph.outputs) and set(case.feeds) == {n.name for n in case.graph.inputs}
    assert len(reached) >= 100, sorted(names - set(reached))
    assert not findings, findings
    assert set(sizes) == {1, 2, 3}
    again = generate(7)
    assert again.ops == generate(7).ops and str(again.graph) == str(generate(7).graph)


def test_a_newly_registered_op_is_fuzzed_without_new_code():
    """An op ONNX does not know, registered here: the generator builds it from its registry entry alone."""
    opdef = OpDef(name="FuzzTwice", domain="tlc.test", infer=same_as_input(), reference=lambda x: x * 2,
                  inputs=(1, 1))
    register(opdef)
    try:
        spec, = [s for s in collect_ops() if s.name == "tlc.test.FuzzTwice"]
        case = generate(3, ops=[spec], min_nodes=2, max_nodes=2)
        assert case.ops.count("tlc.test.FuzzTwice") == 2
        report = check_case(case, ("O1-eager-t1", "text"))
        assert [o.status for o in report.outcomes] == ["ok", "ok"], report.outcomes
    finally:
        del _REGISTRY[("tlc.test", "FuzzTwice")]


def test_values_onnx_leaves_undefined_are_not_generated():
    """``OpDef.undefined_at``: Cast of NaN or an out-of-range float to an integer, BitCast of a NaN, a zero-range
    DynamicQuantizeLinear (onnxruntime, ONNX's evaluator and tlc each pick another scale) have no right answer,
    so the generator refuses such candidates instead of reporting disagreements no one can settle."""
    int64, uint8 = ONNX_TYPE_CODES["int64"], ONNX_TYPE_CODES["uint8"]
    cast = lookup("Cast").undefined_at
    assert cast([np.array([1.5, np.nan], np.float32)], {"to": int64})
    assert cast([np.array([2.0 ** 63], np.float64)], {"to": int64})
    assert cast([np.array([255.9, -0.9], np.float32)], {"to": uint8}) is None
    assert cast([np.array([np.nan], np.float32)], {"to": ONNX_TYPE_CODES["float16"]}) is None
    assert lookup("BitCast").undefined_at([np.array([1.0, np.nan], np.float32)], {"to": ONNX_TYPE_CODES["int32"]})
    assert lookup("DynamicQuantizeLinear").undefined_at([np.zeros(3, np.float32)], {})
    assert lookup("DynamicQuantizeLinear").undefined_at([np.ones(3, np.float32)], {}) is None
    assert lookup("MaxPool").undefined_at([np.array([[[1.0, np.nan]]], np.float32)], {})
    quantize = lookup("QuantizeLinear").undefined_at
    attrs = {"axis": 1, "block_size": 0, "output_dtype": 0, "saturate": 1, "precision": 0}
    assert quantize([np.zeros(2, np.float32), np.zeros((), np.float32)], attrs)              # 0 / 0
    assert quantize([np.ones(2, np.float32), np.ones((), np.float32)], attrs) is None
    opdef = OpDef(name="FuzzUndefined", domain="tlc.test", infer=same_as_input(), reference=lambda x: x,
                  inputs=(1, 1), undefined_at=lambda inputs, attrs: "never defined")
    register(opdef)
    try:
        spec, = [s for s in collect_ops() if s.name == "tlc.test.FuzzUndefined"]
        assert "tlc.test.FuzzUndefined" not in generate(3, ops=[spec], min_nodes=2, max_nodes=2).ops
    finally:
        del _REGISTRY[("tlc.test", "FuzzUndefined")]
    # random at a node (OpDef.impure_at), even where its reference happens to give the same output twice
    register(OpDef(name="FuzzRandom", domain="tlc.test", infer=same_as_input(), reference=lambda x: x,
                   inputs=(1, 1), impure_at=lambda graph, node: True))
    try:
        spec, = [s for s in collect_ops() if s.name == "tlc.test.FuzzRandom"]
        case = generate(3, ops=[spec], min_nodes=2, max_nodes=2)
        assert "tlc.test.FuzzRandom" not in case.ops and any("FuzzRandom" in n for n in case.nondeterministic)
    finally:
        del _REGISTRY[("tlc.test", "FuzzRandom")]


# ---------------------------------------------------------------------------- comparing
def test_compare_is_exact_on_integers_nan_aware_and_scaled_on_floats():
    want = {"f": np.array([1.0, np.nan, -np.inf, 100.0], np.float32), "i": np.array([1, 2], np.int64)}
    same = {"f": want["f"].copy(), "i": want["i"].copy()}
    assert not compare(same, want)
    near = {"f": np.array([1.0, np.nan, -np.inf, 100.0005], np.float32), "i": want["i"]}
    assert not compare(near, want)                           # 5e-6 of the output's scale: rounding
    assert compare(near, want, exact=True)                   # but not bit for bit
    far = {"f": np.array([1.01, np.nan, -np.inf, 100.0], np.float32), "i": want["i"]}
    assert [m.output for m in compare(far, want)] == ["f"]
    assert compare({"f": np.array([1.0, 0.0, -np.inf, 100.0], np.float32), "i": want["i"]}, want)  # NaN lost
    assert compare({"f": want["f"], "i": np.array([1, 3], np.int64)}, want)                       # off by one
    assert not compare({"f": want["f"], "i": np.array([1, 3], np.int64)}, want, spread={"i": 1.0})  # unstable
    assert compare({"f": want["f"][:2], "i": want["i"]}, want)                                    # shape
    # an output that rounding noise moves as far as its own size is noise, NaN or not; a bit less, it is judged
    noisy = {"m": np.array([-0.98, 0.0, 0.98], np.float32)}
    assert not compare({"m": np.array([-1.0, np.nan, 1.0], np.float32)}, noisy, spread={"m": 2.5})
    assert compare({"m": np.array([-1.0, np.nan, 1.0], np.float32)}, noisy, spread={"m": 0.5})


# ---------------------------------------------------------------------------- oracles on random graphs
@settings(max_examples=30, **COMMON)
@given(cases(max_nodes=8))
def test_random_graphs_agree_at_O1_and_through_the_text_ir(case):
    checker = Checker(case.graph, case.feeds)
    for oracle in ("O1-eager-t1", "text"):
        outcome = checker.check(oracle)
        assert outcome.status == "ok", f"{outcome}\n{case}"


def test_seeded_batch_through_every_oracle():
    """Twelve graphs, every non-plan oracle on each and the plan variants rotated: each of the 12 plan variants
    (-O1/-O2/-O3, eager/lazy, 1/2 threads) runs on three graphs. onnxruntime may be n/a, refuse or be outvoted
    by ONNX's reference evaluator (counted in campaigns), never disagree."""
    statuses, ran = Counter(), Counter()
    for i in range(12):
        case = generate(5000 + i, max_nodes=8)
        oracles = plan_oracles(rotate=i) + OTHER_ORACLES
        ran.update(oracles)
        for outcome in check_case(case, oracles).outcomes:
            statuses[outcome.status] += 1
            assert outcome.status != "disagree", f"{outcome}\n{case}"
            if outcome.oracle not in ("ort", "ort-O2"):
                assert outcome.status == "ok", f"{outcome}\n{case}"
    assert set(ran) == set(ORACLES) and statuses["ok"] >= 12 * 7


@pytest.mark.sweep
def test_sweep_graphs_through_every_plan_variant():
    """The seeded batch at campaign strength: 100 graphs, all 17 oracles each (TLC_TESTS_FULL=1)."""
    for seed in range(6000, 6100):
        case = generate(seed)
        bad = check_case(case).disagreements
        assert not bad, "\n".join(map(str, bad)) + f"\n{case}"


def test_a_planted_bug_is_caught_shrunk_saved_and_replayed(monkeypatch, tmp_path):
    """A text printer that drops a bit of every float constant: the text oracle catches it (bit for bit), the
    shrinker cuts the graph down to the op that reads such a constant, and the reproducer replays."""
    import tlc.ir.text as text

    printed = text.print_graph

    def lossy(graph, **kwargs):
        out = graph.copy()
        for node in out.nodes():
            value = node.attrs.get("value") if node.op == "Constant" else None
            if value is not None and value.dtype == np.float32 and value.size:
                node.attrs["value"] = (value.view(np.int32) ^ 1).view(np.float32)
        return printed(out, **kwargs)

    case = next(c for c in map(generate, range(100, 200))
                if any(n.op == "Constant" and n.attrs["value"].dtype == np.float32 for n in c.graph.nodes())
                and len(c.ops) >= 4 and Checker(c.graph, c.feeds).check("text").status == "ok")
    monkeypatch.setattr(text, "print_graph", lossy)
    outcome = Checker(case.graph, case.feeds).check("text")
    assert outcome.status == "disagree" and "text" in EXACT, outcome
    small, feeds = shrink(case.graph, case.feeds, disagrees("text"))
    assert len(small.ops()) < len(case.graph.ops()) and disagrees("text")(small, feeds)
    assert len(small.ops()) <= 2, small  # the lossy constant, and at most the op reading it
    save_reproducer(tmp_path, "planted", small, feeds, outcome, seed=case.seed)
    graph, fed, record = load_reproducer(tmp_path / "planted.tlc")
    assert record["oracle"] == "text" and record["seed"] == case.seed and set(fed) == set(feeds)
    assert replay(tmp_path / "planted.tlc").status == "disagree"
    monkeypatch.setattr(text, "print_graph", printed)
    assert replay(tmp_path / "planted.tlc").status == "ok"


def test_plan_oracle_catches_a_wrong_kernel(monkeypatch):
    """A plan whose outputs are off by a little more than rounding: every plan variant reports it."""
    g = tlc.Graph("g")
    x = g.input("x", "float32", (2, 3))
    g.output(g.add_node("Tanh", [x]), "y")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    run = tlc.Plan.run

    def off(self, feeds, **kwargs):
        return {k: v * np.float32(1.001) for k, v in run(self, feeds, **kwargs).items()}

    monkeypatch.setattr(tlc.Plan, "run", off)
    checker = Checker(g, feeds)
    assert {checker.check(o).status for o in (PLAN_ORACLES[0], PLAN_ORACLES[-1])} == {"disagree"}


# ---------------------------------------------------------------------------- op bugs the generator found (fixed)
F, I64 = np.float32, np.int64
#: (label, op, inputs, attributes, expected): "refused" = inference raises ShapeInferenceError on these inputs,
#: "raises" = the reference refuses them (where inference cannot see them: an unknown rank), "agree" = the
#: reference's output has the inferred type. Each was a finding: inference and reference disagreed.
OP_FINDINGS = [
    ("eyelike-3d", "EyeLike", [np.ones((2, 3, 6), F)], {}, "raises"),
    ("mvn-axis-past-rank", "MeanVarianceNormalization", [np.ones((3, 2, 2), F)], {"axes": [0, 2, 3]}, "raises"),
    ("nll-weight-too-long", "NegativeLogLikelihoodLoss", [np.zeros((1, 3), F), np.zeros(1, I64), np.ones(4, F)],
     {}, "raises"),
    ("attention-batch-1-and-2", "Attention", [np.ones((1, 5, 1, 1), F), np.ones((2, 5, 1, 1), F),
                                             np.ones((2, 5, 1, 1), F)], {}, "raises"),
    ("batchnorm-short-scale", "BatchNormalization", [np.ones((5, 3), F), np.ones(1, F)] + [np.ones(3, F)] * 3,
     {"training_mode": 1}, "raises"),
    ("trilu-rank-1", "Trilu", [np.ones(3, F)], {}, "raises"),
    ("prelu-slope-wider", "PRelu", [np.ones((1, 3), F), np.ones((3, 3), F)], {}, "raises"),
    ("pad-crop-into-padding", "Pad", [np.ones((5, 1, 6), np.int32), np.array([0, -2, 0, 0, 5, 0], I64)], {},
     "agree"),
    ("pad-pads-not-1d", "Pad", [np.ones((3, 1, 2), F), np.zeros((6, 1, 1), I64)], {}, "refused"),
    ("gather-scalar-data", "Gather", [np.array(3.0, F), np.array([0], I64)], {"axis": 0}, "raises"),
    ("reverse-sequence-rank-1", "ReverseSequence", [np.ones(2, F), np.array([1], I64)],
     {"batch_axis": 0, "time_axis": 0}, "raises"),
    ("reverse-sequence-long", "ReverseSequence", [np.ones((2, 3), F), np.array([4, 1, 1], I64)], {}, "raises"),
    ("col2im-zero-block", "Col2Im", [np.ones((1, 4, 4), F), np.array([3, 3], I64), np.array([0, 2], I64)], {},
     "refused"),
    ("gather-elements-shorter", "GatherElements", [np.ones((3, 3), F), np.zeros((1, 1), I64)], {"axis": -2},
     "agree"),
    ("gather-elements-longer", "GatherElements", [np.ones((1, 5), F), np.zeros((2, 1), I64)], {"axis": -1},
     "refused"),
    ("layer-norm-wider-scale", "LayerNormalization", [np.ones((2, 3), F), np.ones((3, 1), F)], {}, "refused"),
    ("qlinear-matmul-y-scale", "QLinearMatMul",
     [np.ones((1, 1, 1), np.int8), np.ones(1, F), np.zeros(1, np.int8), np.ones((1, 3), np.uint8), np.ones(3, F),
      np.zeros((1, 3), np.uint8), np.ones((4, 1, 1), F), np.zeros(1, np.uint8)], {}, "refused"),
    ("qlinear-matmul-vectors", "QLinearMatMul",
     [np.ones(2, np.uint8), np.ones(1, F), np.zeros(1, np.uint8), np.ones(2, np.int8), np.ones(1, F),
      np.zeros(1, np.int8), np.ones(1, F), np.zeros(1, np.uint8)], {}, "agree"),
    ("matmul-integer-zero-point", "MatMulInteger",
     [np.ones((1, 1, 1, 1), np.uint8), np.ones(1, np.uint8), None, np.ones((1, 1, 1, 4), np.uint8)], {}, "refused"),
    ("matmul-integer-row-zero-point", "MatMulInteger",
     [np.ones((1, 2), np.int8), np.ones((2, 2), np.int8), np.ones(2, np.int8)], {}, "refused"),
    ("range-matrix", "Range", [np.ones((1, 1), F), np.full(1, 3, F), np.ones(1, F)], {}, "refused"),
    ("conv-transpose-kernel", "ConvTranspose", [np.ones((1, 2, 2, 6), F), np.ones((2, 2, 1, 1), F)],
     {"kernel_shape": [3, 1]}, "refused"),
    ("reshape-matrix-shape", "Reshape", [np.ones((2, 2), F), np.array([[[1, 2, 2]]], I64)], {}, "refused"),
    ("one-hot-depth-matrix", "OneHot", [np.zeros((2, 4), F), np.ones((6, 4), F), np.ones(2, F)], {},
     "refused"),
    ("nll-labels-broadcast", "NegativeLogLikelihoodLoss", [np.ones((3, 3), F), np.zeros(1, np.int32)], {},
     "raises"),
    ("global-pool-rank-2", "GlobalAveragePool", [np.ones((3, 6), F)], {}, "raises"),
    ("group-norm-rank-2", "GroupNormalization", [np.ones((3, 5), F), np.ones(5, F), np.ones(5, F)],
     {"num_groups": 1}, "raises"),
    ("gemm-wider-c", "Gemm", [np.ones((1, 4), F), np.ones((4, 2), F), np.ones((4, 2), F)], {}, "raises"),
    ("rms-norm-wider-scale", "RMSNormalization", [np.ones(2, F), np.ones((2, 1), F)], {"axis": 0}, "raises"),
    ("scatter-rank-1-indices", "Scatter", [np.ones((3, 2, 2), F), np.zeros(1, np.int32), np.ones(1, F)], {},
     "raises"),
    ("center-crop-pad-axes", "CenterCropPad", [np.ones((3, 4), F), np.array([72], I64)], {"axes": [1, 3]},
     "raises"),
]


@pytest.mark.parametrize("label, op, inputs, attrs, expected", OP_FINDINGS, ids=[c[0] for c in OP_FINDINGS])
def test_op_findings_stay_fixed(label, op, inputs, attrs, expected):
    if expected == "raises":
        with pytest.raises((ValueError, IndexError, tlc.TlcError)):
            tlc.ops.get(op).run_reference(inputs, attrs)
        return
    g = tlc.Graph(label)
    values = [None if a is None else g.constant(a) for a in inputs]
    if expected == "refused":
        with pytest.raises(tlc.ShapeInferenceError):
            g.add_node(op, values, attrs=attrs)
        return
    g.output(g.add_node(op, values, attrs=attrs), "y")
    out = tlc.reference.run(g, {})["y"]
    assert g.type_of(g.outputs[0][0]) == tlc.TensorType.of(out), (g.type_of(g.outputs[0][0]), out.shape)


# ---------------------------------------------------------------------------- reproducers kept as regressions
def _regressions() -> list[Path]:
    return sorted(REGRESSIONS.glob("*.tlc"))


@pytest.mark.parametrize("path", _regressions(), ids=lambda p: p.stem)
def test_fuzz_regression(path):
    """A reproducer the fuzzer saved: "fixed" ones must agree now; "open" ones (bugs in code the fuzzing did not
    own; see the .json) are expected to fail until fixed, strictly, so a fix shows up as XPASS."""
    record = json.loads(path.with_suffix(".json").read_text())
    if record["status"] == "refused":   # no longer a valid graph: loading it must say why
        with pytest.raises(tlc.TlcError, match=record["error"]):
            replay(path)
        return
    outcome = replay(path)
    if record["status"] == "open":
        assert outcome.status == "disagree", f"{path.stem} agrees now: set its status to fixed ({outcome})"
        pytest.xfail(f"open: {record['description']}")
    assert outcome.status in record.get("accept", ["ok"]), outcome
