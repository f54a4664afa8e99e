"""The pass pipeline on real models: the nine ONNX light models and the benchmark models of ``tools/models.py``.

Every pass that changes a graph, at every opt level (and every pass alone), is checked by running the reference
executor after it: bit for bit against the graph before it for the exact passes (fold, dce, cse, fuse compute
what the reference computed), within float32 rounding for the rewrites (Conv+BatchNorm folding, LayerNorm and
GELU recognition compute the same function in another order). Two variants of each light model:

- ``shipped``: as the ONNX runner tests it, its ConstantOfShape weights and its ``arange(n) / n`` input;
- ``random``: the fills replaced by random weights (they are uniform, so most bugs would cancel out) and a random
  input; the output compared is the logits, because a saturated softmax would hide differences.

Structure: -O2 leaves no ConstantOfShape, BatchNormalization or Dropout in any light model, recognises LayerNorm
and GELU in the transformer block, and its export runs in onnxruntime with the same outputs.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

import tlc
from tlc.io.onnx import from_onnx, load_onnx, to_onnx
from tlc.passes import PassInstrument, PassManager, PassOptions, all_passes, level_pipeline

ROOT = Path(__file__).resolve().parents[2]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(Path(p).stem[len("light_"):] for p in glob.glob(str(LIGHT / "light_*.onnx")))
#: passes whose output the reference executor reproduces bit for bit (they move or share computations, never
#: change them); the others may round differently.
EXACT_PASSES = frozenset({"fold", "dce", "cse", "fuse"})
#: float32 tolerance for the rewrites, relative to the output's scale: sums in another order, weights folded in
#: float64 and rounded once (Conv+BN) over ~50 layers.
RTOL = 1e-5
#: fills up to this many elements get random values; the larger ones (the fully connected layers of AlexNet,
#: VGG-19 and ZFNet) stay uniform fills: generating 100M normals per run is slow and they still test folding.
MAX_RANDOM = 1 << 22


def tool(name: str):
    """A module of tools/ (not a package), loaded from its file."""
    spec = importlib.util.spec_from_file_location(f"tlc_tools_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------- models and feeds
@functools.cache
def light_graph(model: str, variant: str) -> tlc.Graph:
    """A light model as tlc imports it (``shipped``) or with random weights and logits out (``random``).

    NOTE: cached and shared between tests; nothing here mutates a graph (the PassManager works on a copy)."""
    g = load_onnx(str(LIGHT / f"light_{model}.onnx"))
    return randomized(g, np.random.default_rng(sum(map(ord, model)))) if variant == "random" else g


def randomized(g: tlc.Graph, rng: np.random.Generator) -> tlc.Graph:
    """Each ConstantOfShape fill of a constant shape (up to ``MAX_RANDOM`` elements) becomes a random constant:
    He-scaled normal for filters and matrices, [0.5, 1.5) for vectors (BatchNorm variances must be positive).
    A final Softmax is dropped: its input, the logits, becomes the output."""
    g = g.copy()
    for node in g.nodes():
        shape = g.const_value(g.inputs_of(node)[0]) if node.op == "ConstantOfShape" else None
        if shape is None or np.prod(shape) > MAX_RANDOM:
            continue
        shape = tuple(int(d) for d in shape)
        if len(shape) >= 2:
            value = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / np.prod(shape[1:])))
        else:
            value = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        g.replace_all_uses(node.output(), g.constant(value, name=g.fresh_name("random_weight")))
        g.erase(node)
    (value, name), = g.outputs
    last = g.producer(value)
    if last.op == "Softmax":
        g.outputs[0] = (g.inputs_of(last)[0], "logits")
        g.remove_unused()
    return g


def model_feeds(g: tlc.Graph, variant: str) -> dict[str, np.ndarray]:
    """The ONNX runner's dummy input (``arange(n).reshape(shape) / n``) or a random one."""
    feeds = {}
    for node in g.inputs:
        shape = tuple(d if isinstance(d, int) else 1 for d in node.output_types[0].shape)
        n = int(np.prod(shape))
        if variant == "random":
            feeds[node.name] = np.random.default_rng(n).standard_normal(shape).astype(np.float32)
        else:
            feeds[node.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


@functools.cache
def shipped_tolerances() -> dict[str, tuple[float, float]]:
    from onnx.backend.test.case.model import collect_testcases

    return {case.model_name: (case.rtol, case.atol) for case in collect_testcases()}


@functools.cache
def bench_graph(name: str) -> tlc.Graph:
    return from_onnx(tool("models").BUILDERS[name]())[0]


# ---------------------------------------------------------------------------- checking
def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray], exact: bool, where: str,
                 atol: float = 0.0) -> None:
    """Same names, dtypes and shapes; values equal (``exact``) or within ``RTOL`` of the output's scale (at least
    ``atol``: where intermediates are larger than the outputs, their rounding is what shows)."""
    assert list(got) == list(want), where
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, f"{where}: {name}"
        if exact:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{where}: {name}")
        else:
            scale = float(np.abs(want[name]).max()) if want[name].size else 0.0
            np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=max(RTOL * scale, atol),
                                       err_msg=f"{where}: {name}")


class OutputCheck(PassInstrument):
    """After every pass that changed the graph, run it and compare with the graph before that pass."""

    def __init__(self, feeds: dict[str, np.ndarray], before: dict[str, np.ndarray], label: str, atol: float = 0.0):
        self.feeds = feeds
        self.atol = atol
        self.last = before
        self.label = label
        self.checked: list[str] = []

    def run_after_pass(self, pass_, graph, result) -> None:
        if not result.changed:
            return
        got = tlc.reference.run(graph, self.feeds)
        assert_close(got, self.last, pass_.name in EXACT_PASSES,
                     f"{self.label}: after pass {pass_.name!r} (run {len(self.checked) + 1})", self.atol)
        self.last = got
        self.checked.append(pass_.name)


def check_pipeline(g: tlc.Graph, feeds: dict[str, np.ndarray], want: dict[str, np.ndarray], label: str, *,
                   atol: float = 0.0, **manager) -> tuple[tlc.Graph, OutputCheck]:
    """Run a PassManager (verifying after each pass, comparing outputs after each change), then compare the end
    result with ``want``: exactly when only exact passes changed the graph."""
    check = OutputCheck(feeds, want, label, atol)
    out, _ = PassManager(verify_each=True, instruments=[check], **manager).run(g)
    # NOTE: check.last holds the outputs after the last change, i.e. those of ``out``: no extra run needed.
    assert_close(check.last, want, not (set(check.checked) - EXACT_PASSES), label, atol)
    return out, check


def check_model(g: tlc.Graph, feeds: dict[str, np.ndarray], label: str, *,
                alone: bool = True, expect_change: bool = True, atol: float = 0.0) -> dict[int, tlc.Graph]:
    """Every opt level (a level whose pipeline is the one before's is run once), then (``alone``) every registered
    pass alone with -O3 options: outputs are preserved after each pass. Returns the optimized graph per level;
    ``expect_change``: -O2 and up must change the graph (every real model has something to fuse)."""
    want = tlc.reference.run(g, feeds)
    optimized: dict[int, tlc.Graph] = {}
    seen: dict[str, int] = {}
    for level in (1, 2, 3):
        pipeline = str(PassManager(opt_level=level))
        if pipeline in seen:
            optimized[level] = optimized[seen[pipeline]]
            continue
        seen[pipeline] = level
        optimized[level], check = check_pipeline(g, feeds, want, f"{label} -O{level}", opt_level=level,
                                                 atol=atol)
        assert level < 2 or check.checked or not expect_change, f"{label} -O{level}: no pass changed the model"
    for cls in all_passes() if alone else ():
        check_pipeline(g, feeds, want, f"{label} {cls.name} alone", passes=cls.name, opt_level=3, atol=atol)
    return optimized


def op_counts(g: tlc.Graph) -> Counter:
    """Ops of ``g`` and of every fused body in it (qualified names)."""
    counts = Counter()
    for node in g.ops():
        counts[node.qualified_op] += 1
        body = node.attrs.get("body")
        if isinstance(body, tlc.Graph):
            counts.update(op_counts(body))
    return counts


# ---------------------------------------------------------------------------- quick: one light model, one block
def test_squeezenet_every_pass_every_level():
    """The quick representative: random weights, every level and every pass alone (the rest is slow)."""
    g = light_graph("squeezenet", "random")
    check_model(g, model_feeds(g, "random"), "squeezenet/random")


def test_transformer_block_every_pass_every_level_and_recognitions(rng):
    g = bench_graph("transformer_block")
    optimized = check_model(g, {"x": rng.standard_normal((1, 128, 768)).astype(np.float32)}, "transformer_block")
    counts = op_counts(optimized[2])
    assert counts["LayerNormalization"] == 2 and counts["Gelu"] == 1, counts
    assert not {"ReduceMean", "Erf", "Sqrt", "Pow"} & set(counts), counts


def test_resnet50_constant_of_shape_folds_then_conv_bn_folds():
    """Fills fold although VGG- and ResNet-sized (above ``fold_size_limit``): they are Conv and Gemm weights, so
    Conv+BatchNorm folding sees constants in the same fixed-point stage."""
    g = light_graph("resnet50", "shipped")
    out, report = tlc.optimize(g, opt_level=2)
    counts = op_counts(out)
    assert not {"ConstantOfShape", "BatchNormalization", "Dropout"} & set(counts), counts
    assert report.counters()["conv-bn"] == 53 and "skipped_too_large" not in report.counters()
    assert counts["Conv"] == 53


def test_big_fills_feeding_elementwise_ops_stay(rng):
    """The other side of the policy: a large fill that an Add reads stays a ConstantOfShape (broadcasting reads
    it), and one that a MatMul reads folds, through the Reshape between them."""
    g = tlc.Graph()
    x = g.input("x", "float32", (64, 256))
    shape = g.constant(np.array([256, 256], np.int64), name="shape")
    fill = np.array([0.5], np.float32)
    bias = g.add_node("ConstantOfShape", [g.constant(np.array([64, 256], np.int64))], value=fill, name="bias")
    weight = g.add_node("ConstantOfShape", [g.constant(np.array([256 * 256], np.int64))], value=fill, name="flat")
    weight = g.add_node("Reshape", [weight, shape], name="weight")
    g.output(g.add_node("Add", [g.add_node("MatMul", [x, weight]), bias]), "y")
    feeds = {"x": rng.standard_normal((64, 256)).astype(np.float32)}
    out, report = tlc.optimize(g, opt_level=1, fold_size_limit=1000)
    assert report.counters()["folded"] == 2 and report.counters()["skipped_too_large"] >= 1
    assert out.producer(out.value("bias")).op == "ConstantOfShape"
    assert out.const_value(out.value("weight")).shape == (256, 256)
    assert_close(tlc.reference.run(out, feeds), tlc.reference.run(g, feeds), True, "fills")


# ---------------------------------------------------------------------------- slow: all light models
#: the two biggest models' random-weight runs repeat their shipped runs' passes on other numbers: sweeps (CI's time)
_SWEEP_VARIANTS = {("vgg19", "random"), ("densenet121", "random")}


@pytest.mark.slow
@pytest.mark.parametrize("model, variant", [
    pytest.param(m, v, marks=[pytest.mark.sweep] if (m, v) in _SWEEP_VARIANTS else [])
    for m in LIGHT_MODELS for v in ("shipped", "random") if (m, v) != ("squeezenet", "random")])
def test_light_model_every_pass_every_level(model, variant):
    """Random weights: every level and every pass alone. Shipped: every level (passes alone add little on
    uniform weights), and -O2 still gives the output the ONNX package ships, within its tolerances."""
    g = light_graph(model, variant)
    feeds = model_feeds(g, variant)
    optimized = check_model(g, feeds, f"{model}/{variant}", alone=variant == "random")
    counts = op_counts(optimized[2])
    assert not {"ConstantOfShape", "BatchNormalization", "Dropout"} & set(counts), counts
    if variant == "shipped":
        rtol, atol = shipped_tolerances()[model]
        (got,) = tlc.reference.run(optimized[2], feeds).values()
        want = onnx.numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{model}_output_0.pb")))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.slow
@pytest.mark.parametrize("model", [pytest.param(m, marks=[pytest.mark.sweep] if m == "vgg19" else [])
                                   for m in LIGHT_MODELS])
def test_light_model_o2_export_runs_in_onnxruntime(model):
    """(VGG-19, 7 s: a sweep; its fused groups are the plain conv chains AlexNet and ZFNet export in CI.)"""
    import onnxruntime as ort

    g = light_graph(model, "random")
    feeds = model_feeds(g, "random")
    out, _ = tlc.optimize(g, opt_level=2)
    assert any(n.op == "Fused" for n in out.ops())
    proto = to_onnx(out)
    assert {f.name for f in proto.functions}, "fused groups should export as local functions"
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert_close(got, tlc.reference.run(g, feeds), False, f"{model} -O2 in onnxruntime")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "elementwise_chain", "layernorm_softmax"])
def test_bench_model_every_pass_every_level(name, rng):
    g = bench_graph(name)
    feeds = {n.name: rng.standard_normal(n.output_types[0].shape).astype(np.float32) for n in g.inputs}
    check_model(g, feeds, name)


def test_node_counts_tool_table(capsys):
    """tools/node_counts.py: one markdown row per model, counting a fused group as one op."""
    node_counts = tool("node_counts")
    assert node_counts.main(["--models", "mlp", "--repeat", "1"]) == 0
    header, rule, row = capsys.readouterr().out.splitlines()
    assert header.split("|")[2:-1] == [f" {c} " for c in node_counts.COLUMNS]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    # mlp: Gemm, Relu, Gemm, Relu, Gemm, Softmax; -O2: two Gemm+Relu epilogues, a Gemm, a Softmax row kernel
    assert cells[:4] == ["mlp", "6", "6", "4"] and int(cells[5]) > 0


def test_level_pipelines_iterate_the_cleanup():
    """Folding must be able to expose Conv+BN folding in the same run: fold and simplify share a fixed point."""
    for level in (1, 2, 3):
        first = level_pipeline(level)[0]
        assert first.fixed_point and {"fold", "simplify", "dce"} <= set(first.names)
    assert PassOptions().fold_size_limit < 102_760_448  # VGG-19's fc6 weight: folds by policy, not by limit
