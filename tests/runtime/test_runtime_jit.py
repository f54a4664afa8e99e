"""Fused steps: eager and lazy JIT through a stand-in code generator, swaps under load, failures, epilogues."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from runtime_graphs import FakeCodegen, epilogue_graph, fused_graph, run_in_threads

import tlc
from tlc.runtime import compile, fused


@pytest.fixture
def codegen(monkeypatch):
    fake = FakeCodegen()
    monkeypatch.setattr(fused, "codegen", fake)
    return fake


def reference(graph, x):
    return tlc.reference.run(graph, {"x": x})


def assert_close(got, want):
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("n_outputs", [1, 2])
def test_eager_compiles_in_compile_and_runs_in_place(codegen, n_outputs, rng):
    g = fused_graph(n_outputs=n_outputs)
    plan = compile(g, opt_level=0, jit="eager")
    (kernel,) = codegen.kernels
    assert kernel.kind == "elementwise"
    x = rng.standard_normal((6, 4), dtype=np.float32)
    assert_close(plan.run({"x": x}), reference(g, x))
    assert kernel.calls == 1
    (row,) = [s for s in plan.stats().steps if s.op == "tlc.Fused[elementwise]"]
    assert row.mode == "native" and row.reason == "compiled fake_elementwise" and row.cache_hit is False
    assert row.compile_ms is not None and row.reference_calls == 0
    # both group inputs die at the group: its output takes one of their buffers
    (spec,) = plan._specs.values()
    assert any(plan.program.steps[t].label.startswith("tlc.Fused") for t, _, _ in spec.memory.inplace)


def test_lazy_swaps_in_after_hot_threshold(codegen, rng):
    g = fused_graph()
    plan = compile(g, opt_level=0, jit="lazy", hot_threshold=3)
    assert codegen.kernels == []
    x = rng.standard_normal((3, 4), dtype=np.float32)
    want = reference(g, x)
    for _ in range(2):
        assert_close(plan.run({"x": x}), want)
    assert plan.groups[0].future is None and plan.stats().steps[2].mode == "reference"
    assert_close(plan.run({"x": x}), want)                  # the third call schedules the compile
    assert plan.wait_for_jit(timeout=30)
    (kernel,) = codegen.kernels
    assert codegen.threads == ["tlc-jit_0"]                 # compiled on the background JIT thread
    assert_close(plan.run({"x": x}), want)
    assert kernel.calls == 1
    row = plan.stats().steps[2]
    assert row.mode == "native" and row.reference_calls == 3 and row.calls == 4


def test_concurrent_runs_during_the_swap(monkeypatch, rng):
    fake = FakeCodegen(delay=0.2)
    monkeypatch.setattr(fused, "codegen", fake)
    g = fused_graph()
    plan = compile(g, opt_level=0, jit="lazy", hot_threshold=2)
    inputs = [rng.standard_normal((1 + i, 4), dtype=np.float32) for i in range(8)]
    wants = [reference(g, x) for x in inputs]
    runs = [0] * 8
    state = plan.groups[0]

    def worker(i):
        # run until the kernel is swapped in (while the JIT thread compiles), then 10 runs more
        after = 0
        while after < 10 and runs[i] < 100_000:
            native = state.kernel is not None
            assert_close(plan.run({"x": inputs[i]}), wants[i])
            runs[i] += 1
            after += native

    run_in_threads(worker)
    assert plan.wait_for_jit(timeout=30)
    (kernel,) = fake.kernels                               # compiled exactly once
    row = plan.stats().steps[2]
    assert row.calls == sum(runs) and row.reference_calls + kernel.calls == sum(runs)
    assert kernel.calls >= 80 and row.reference_calls >= 2


def test_failed_compile_warns_once_and_says_why(monkeypatch, rng):
    monkeypatch.setattr(fused, "codegen", FakeCodegen(fail="unsupported primitive 'erf' on cuda"))
    g = fused_graph(n_outputs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = compile(g, opt_level=0, jit="eager")
        plan.run({"x": np.ones((2, 4), np.float32)})
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "unsupported primitive 'erf'" in msgs[0]
    row = plan.stats().steps[2]
    assert row.mode == "reference" and "unsupported primitive" in row.reason
    assert plan.stats().totals["groups_failed"] == 1
    x = rng.standard_normal((2, 4), dtype=np.float32)
    assert_close(plan.run({"x": x}), reference(g, x))


def test_jit_off_never_compiles(codegen, rng):
    g = fused_graph()
    plan = compile(g, opt_level=0, jit="off", hot_threshold=1)
    x = rng.standard_normal((2, 4), dtype=np.float32)
    for _ in range(3):
        assert_close(plan.run({"x": x}), reference(g, x))
    assert codegen.kernels == [] and plan.stats().steps[2].reason == "jit='off'"


@pytest.mark.parametrize("jit", ["eager", "lazy"])
def test_epilogue_runs_contraction_then_elementwise_in_place(codegen, jit, rng):
    g = epilogue_graph()
    plan = compile(g, opt_level=0, jit=jit, hot_threshold=1)
    x = rng.standard_normal((5, 8), dtype=np.float32)
    want = reference(g, x)
    assert_close(plan.run({"x": x}), want)
    plan.wait_for_jit(timeout=30)
    assert_close(plan.run({"x": x}), want)
    (kernel,) = codegen.kernels
    assert kernel.kind == "elementwise" and kernel.calls == (2 if jit == "eager" else 1)
    assert [n.op for n in kernel.body.ops()] == ["Add", "Relu"]   # the MatMul ran as a library kernel
    assert plan.stats().steps[0].mode == "native"


def transformer_like() -> tlc.Graph:
    """MatMul + bias + SiLU epilogue, then a row softmax with elementwise work around it."""
    rng = np.random.default_rng(5)
    g = tlc.Graph("blocks")
    x = g.input("x", "float32", ("N", 16))
    w = g.constant(rng.standard_normal((16, 16)).astype(np.float32) / 4, name="w")
    b = g.constant(rng.standard_normal(16).astype(np.float32), name="b")
    h = g.add_node("Add", [g.add_node("MatMul", [x, w]), b])
    h = g.add_node("Mul", [h, g.add_node("Sigmoid", [h])])
    s = g.add_node("Softmax", [g.add_node("Mul", [h, g.constant(np.float32(0.5), name="scale")])], axis=-1)
    g.output(g.add_node("Add", [g.add_node("Tanh", [s]), x]), "y")
    return g


@pytest.mark.parametrize("jit", ["eager", "off"])
def test_opt_level_2_groups_run_like_the_original(codegen, jit, rng):
    """The pass pipeline's fused groups (epilogue, reduction, ...) through the runtime, native and reference."""
    g = transformer_like()
    plan = compile(g, opt_level=2, jit=jit)
    kinds = {s.op for s in plan.stats().steps}
    assert {"tlc.Fused[epilogue]", "tlc.Fused[reduction]"} <= kinds
    for batch in (3, 8):
        x = rng.standard_normal((batch, 16), dtype=np.float32)
        assert_close(plan.run({"x": x}), reference(g, x))
    modes = {s.mode for s in plan.stats().steps if s.op.startswith("tlc.Fused")}
    assert modes == ({"native"} if jit == "eager" else {"reference"})
    assert len(codegen.kernels) == (len(plan.groups) if jit == "eager" else 0)


def test_a_failing_kernel_is_named(codegen, rng):
    plan = compile(fused_graph(), opt_level=0, jit="eager")

    class Broken:
        def launcher(self, input_shapes, output_shapes, serial=False):
            def launch(inputs, outputs, alias=None):
                raise ValueError("boom")

            return launch

    plan.groups[0].kernel = Broken()
    with pytest.raises(tlc.ExecutionError, match=r"node 'Fused' \(tlc.Fused, native kernel\).*ValueError: boom"):
        plan.run({"x": rng.standard_normal((2, 4), dtype=np.float32)})


def test_a_split_that_crashes_leaves_the_epilogue_on_the_reference_path(monkeypatch, rng):
    fake = FakeCodegen()

    def broken_split(body):
        raise ValueError("bad body")

    monkeypatch.setattr(fused, "codegen", lambda: (fake.compile_group, broken_split))
    g = epilogue_graph()
    with pytest.warns(RuntimeWarning, match="could not be split: ValueError: bad body"):
        plan = compile(g, opt_level=0, jit="eager")
    x = rng.standard_normal((3, 8), dtype=np.float32)
    assert_close(plan.run({"x": x}), reference(g, x))
    assert plan.stats().steps[0].mode == "reference" and fake.kernels == []
