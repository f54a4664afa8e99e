"""Targets: one object per target, which passes, kernels, lowering and the session ask.

The third target here is declared in this file alone (``half_cpu``: the CPU's kernels and runtime, float64 only,
elementwise groups only, layout costs without a margin), and fusion, layout, compile_group, lowering, the
session and the ONNX backend all follow it: a new target is a new file, not edits across the tree.
"""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

import tlc
import tlc.backend
from tlc.errors import BackendError, CompileError
from tlc.ir import TensorType
from tlc.kernels import compile_group
from tlc.passes import PassOptions
from tlc.passes.layout import LayoutPass
from tlc.runtime import CompileOptions
from tlc.targets import CPU, CUDA, Target, get, names, register, unregister


@pytest.fixture
def half_cpu():
    target = register(Target(
        name="cpu-f64", description="the CPU's kernels, float64 only, elementwise groups only",
        dtypes=frozenset({"float64"}), group_kinds=("elementwise",), rendered_kinds=("elementwise",),
        provider="TestExecutionProvider", device="CPU",
        costs=dataclasses.replace(CPU.costs, min_gain_us=0.0, rel_margin=0.0),
        kernel=CPU.kernel, renderer=CPU.renderer, library=CPU.library, ops=CPU.ops))
    yield target
    unregister(target.name)


def chains() -> tlc.Graph:
    """Two elementwise chains (float32, float64) and a float64 softmax."""
    g = tlc.Graph("chains")
    for dtype in ("float32", "float64"):
        x = g.input(f"x_{dtype}", dtype, ("N", 8))
        g.output(g.add_node("Mul", [g.add_node("Relu", [g.add_node("Add", [x, x])]), x]), f"y_{dtype}")
    g.output(g.add_node("Softmax", [g.add_node("Exp", [g.inputs[1].outputs[0]])]), "s")
    return g


def fused_kinds(g: tlc.Graph) -> list[tuple[str, str]]:
    """(kind, dtype of its first output) of every tlc.Fused node."""
    return sorted((n.attrs["kind"], n.output_types[0].dtype) for n in g.nodes() if n.op == "Fused")


def conv_pair(rng: np.random.Generator) -> tlc.Graph:
    """Two 3x3 convs on 16 x 7x7: NHWC is predicted ~10 us faster, below the CPU's 500 us margin."""
    g = tlc.Graph("convs")
    h = g.input("x", "float32", (1, 16, 7, 7))
    for _ in range(2):
        w = g.constant((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32))
        h = g.add_node("Relu", [g.add_node("Conv", [h, w], pads=[1, 1, 1, 1])])
    g.output(h, "y")
    return g


def test_targets_are_objects_resolved_once_from_names():
    assert names()[:2] == ("cpu", "cuda") and get("cpu") is CPU and get(CUDA) is CUDA
    assert CompileOptions(target="cpu").target is CPU and PassOptions(target="cuda").target is CUDA
    assert pickle.loads(pickle.dumps(CompileOptions(target="cpu"))).target is CPU
    with pytest.raises(BackendError, match="unknown target 'tpu'; expected one of cpu, cuda"):
        CompileOptions(target="tpu")
    assert CPU.internal_dtypes == {"float32", "float64", "bool"} and CPU.fuses("epilogue")
    assert not CPU.renders("epilogue") and CUDA.fuses("reduction") and CUDA.fuses("epilogue")
    assert CUDA.memory == "device" and CUDA.runs_plans
    assert CPU.resolve("library").imports[-1] == "tlc.kernels.mathlib as ml"
    assert CUDA.resolve("library").imports[-1] == "tlc.kernels.cudalib as cl"


def test_the_targets_layer_imports_nothing_above_ops():
    """Hooks are dotted names resolved when asked, so passes can ask a target without importing kernels."""
    folder = Path(tlc.__file__).parent / "targets"
    allowed = {"errors", "base", "cpu", "cuda", "ir", "ops"}
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                first = (node.module or "").split(".")[0] or node.names[0].name
                assert first in allowed, f"{path.name} imports {'.' * node.level}{node.module}"
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                assert not any(m == "tlc" or m.startswith("tlc.") for m in modules), f"{path.name}: {modules}"


def test_fusion_asks_the_target_for_dtypes_and_group_kinds(half_cpu):
    g = chains()
    cpu, _ = tlc.optimize(g, opt_level=2)
    half, _ = tlc.optimize(g, opt_level=2, target="cpu-f64")
    assert fused_kinds(cpu) == [("elementwise", "float32"), ("elementwise", "float64"), ("reduction", "float64")]
    assert fused_kinds(half) == [("elementwise", "float64")] * 2      # no float32 group, no reduction group
    assert {"Add", "Relu", "Mul", "Softmax"} <= {n.op for n in half.nodes()}
    feeds = {"x_float32": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8),
             "x_float64": np.linspace(-1, 1, 16).reshape(2, 8)}
    want = tlc.reference.run(g, feeds)
    for out in (cpu, half):
        for name, value in tlc.reference.run(out, feeds).items():
            np.testing.assert_allclose(value, want[name], rtol=1e-6, err_msg=name)


def test_layout_uses_the_targets_costs(half_cpu, rng):
    g = conv_pair(rng)
    stats = {}
    for target in ("cpu", "cuda", half_cpu):
        out = g.copy()
        stats[getattr(target, "name", target)] = LayoutPass(PassOptions(opt_level=3, target=target)).run(out).stats
    assert "regions_nhwc" not in stats["cpu"] and stats["cpu"]["regions_kept_nchw"] == 1   # below the margin
    assert stats["cuda"] == {}                                                              # no cost model
    assert stats["cpu-f64"]["regions_nhwc"] == 1 and stats["cpu-f64"]["nodes_nhwc"] == 4


def test_compile_group_asks_the_target(half_cpu):
    g = tlc.Graph("softmax")
    g.output(g.add_node("Softmax", [g.input("x", "float64", (4, 8))]), "y")
    types = [TensorType("float64", (4, 8))]
    with pytest.raises(CompileError, match="the cpu-f64 target compiles elementwise groups only, not groups of kind "
                                           "'reduction'"):
        compile_group(g, "reduction", types, target=half_cpu)
    with pytest.raises(CompileError, match="'tpu' is not supported by compile_group.*'cpu', 'cuda', 'cpu-f64'"):
        compile_group(g, "reduction", types, target="tpu")

    def renderer(plan, variant):
        raise CompileError(f"rendered by the test's renderer: {plan.kind}")

    e = tlc.Graph("relu")
    e.output(e.add_node("Relu", [e.input("x", "float64", (4, 8))]), "y")
    with pytest.raises(CompileError, match="rendered by the test's renderer: elementwise"):
        compile_group(e, "elementwise", types, target=dataclasses.replace(half_cpu, renderer=renderer))


def test_lowering_and_the_session_ask_the_target(half_cpu):
    g = chains()
    plan = tlc.compile(g, target="cpu-f64", jit="off")
    assert plan.options.target is half_cpu
    assert [s.op for s in plan.stats().steps if s.op.startswith("tlc.Fused")] == ["tlc.Fused[elementwise]"] * 2
    m = tlc.Graph("mm")
    x = m.input("x", "float64", (2, 8))
    m.output(m.add_node("MatMul", [x, m.constant(np.eye(8))]), "y")
    bare = dataclasses.replace(half_cpu, ops={})                   # a runtime table without MatMul
    (step,) = tlc.compile(m, target=bare, opt_level=0, jit="off").stats().steps
    assert step.mode == "reference" and step.reason == "no native kernel for MatMul"
    with pytest.raises(BackendError, match="target 'cpu-f64' is not supported by the runtime yet"):
        tlc.compile(m, target=dataclasses.replace(half_cpu, ops=None))
    sess = tlc.InferenceSession(m, providers=["TestExecutionProvider"], jit="off")
    assert sess.plan.options.target is half_cpu and sess.get_providers() == ["TestExecutionProvider"]
    assert tlc.InferenceSession(m, jit="off").get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(BackendError, match="tlc offers.*'TestExecutionProvider'"):
        tlc.InferenceSession(m, providers=["TPUExecutionProvider"])
    assert tlc.backend.supports_device("CPU") and tlc.backend.supports_device("CUDA")   # the simulator's
