"""Kernels and when they arrive: eager, auto (background), lazy and off; runs on fallbacks meanwhile, swaps under
load, failures that warn once and say why, and the generated runner that calls the kernels."""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from runtime_graphs import Compiles, epilogue_graph, fused_graph, run_in_threads

import tlc
from tlc.runtime import compile


def reference(graph, x):
    return tlc.reference.run(graph, {"x": x})


def assert_close(got, want):
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def fused_row(plan):
    (row,) = [s for s in plan.stats().steps if s.op.startswith("tlc.Fused")]
    return row


def compiled_signatures(plan) -> int:
    """How many (function, signature) pairs Numba holds for the kernels the plan's jobs built."""
    count = 0
    for job in plan.jobs:
        kernel = job.result
        for module in getattr(kernel, "_variants", {}).values():
            count += sum(len(getattr(module, f).signatures) for f in dir(module)
                         if isinstance(getattr(module, f), numba.core.registry.CPUDispatcher))
    return count


@pytest.mark.parametrize("n_outputs", [1, 2])
def test_eager_compiles_everything_in_compile_and_runs_in_place(n_outputs, rng):
    g = fused_graph(n_outputs=n_outputs, batch=6)
    plan = compile(g, opt_level=0, jit="eager")
    assert plan.jobs and all(job.status == "ready" for job in plan.jobs)
    before = compiled_signatures(plan)
    x = rng.standard_normal((6, 4), dtype=np.float32)
    assert_close(plan.run({"x": x}), reference(g, x))
    assert compiled_signatures(plan) == before          # the first run compiled nothing more
    row = fused_row(plan)
    assert row.mode == "native" and row.compile_ms is not None and row.cache_hit is not None
    # both group inputs die at the group: its output takes one of their buffers, and the kernel knows it
    (spec,) = plan.specializations()
    assert any(plan.program.steps[spec.active[t].step.index].label.startswith("tlc.Fused")
               for t, _, _ in spec.memory.inplace)
    assert "plan 'fused'" in str(plan.stats()) and "in-place" in str(plan.stats())


def test_auto_runs_fallbacks_until_the_kernel_arrives(monkeypatch, rng):
    compiles = Compiles(monkeypatch, gate=True)
    g = fused_graph()
    plan = compile(g, opt_level=0, jit="auto")             # returns at once: the build waits on the gate
    x = rng.standard_normal((3, 4), dtype=np.float32)
    want = reference(g, x)
    assert_close(plan.run({"x": x}), want)
    row = fused_row(plan)
    assert row.mode == "pending" and "compiling in the background" in row.reason
    assert "k" in plan.runner_source() and compiles.built == []
    compiles.release()
    assert plan.wait_for_jit(timeout=60)
    assert compiles.threads and all(t.startswith("tlc-jit") for t in compiles.threads)
    assert_close(plan.run({"x": x}), want)
    assert fused_row(plan).mode == "native" and plan.stats().totals["pending_steps"] == 0


def test_lazy_compiles_after_hot_threshold_on_the_jit_thread(monkeypatch, rng):
    compiles = Compiles(monkeypatch)
    g = fused_graph()
    plan = compile(g, opt_level=0, jit="lazy", hot_threshold=3)
    x = rng.standard_normal((3, 4), dtype=np.float32)
    want = reference(g, x)
    for _ in range(2):
        assert_close(plan.run({"x": x}), want)
    row = fused_row(plan)
    assert compiles.built == [] and row.mode == "pending" and "lazy JIT" in row.reason
    assert_close(plan.run({"x": x}), want)                  # the third run submits the compile
    assert plan.wait_for_jit(timeout=60)
    assert sorted(compiles.built) == ["Exp", "Neg", "Tanh", "elementwise"]
    assert all(t.startswith("tlc-jit") for t in compiles.threads)
    assert_close(plan.run({"x": x}), want)
    assert fused_row(plan).mode == "native" and fused_row(plan).calls == 4


def test_concurrent_runs_during_the_swap(monkeypatch, rng):
    compiles = Compiles(monkeypatch, gate=True)
    g = fused_graph()
    plan = compile(g, opt_level=0, jit="auto")
    inputs = [rng.standard_normal((1 + i, 4), dtype=np.float32) for i in range(8)]
    wants = [reference(g, x) for x in inputs]
    for x in inputs:                                         # every specialization made before the swap
        plan.run({"x": x})

    def worker(i):
        for k in range(40):
            if i == 0 and k == 5:
                compiles.release()                           # kernels arrive while the others run
            assert_close(plan.run({"x": inputs[i]}), wants[i])

    run_in_threads(worker)
    assert plan.wait_for_jit(timeout=60)
    assert compiles.built.count("elementwise") == 8          # one build per specialization's job
    assert len(compiles.built) == 8 * 4                      # and Exp, Tanh, Neg as one-op kernels
    assert plan.runs == 8 + 8 * 40 and fused_row(plan).mode == "native"


def test_failed_compile_warns_once_and_says_why(monkeypatch, rng):
    Compiles(monkeypatch, fail="unsupported primitive 'erf' on cuda")
    g = fused_graph(n_outputs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = compile(g, opt_level=0, jit="eager")
        plan.run({"x": np.ones((2, 4), np.float32)})
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "unsupported primitive 'erf'" in msgs[0]
    row = fused_row(plan)
    assert row.mode == "reference" and "unsupported primitive" in row.reason
    assert plan.stats().totals["kernels_failed"] == 4      # the group, and Exp, Tanh, Neg
    x = rng.standard_normal((2, 4), dtype=np.float32)
    assert_close(plan.run({"x": x}), reference(g, x))


def test_jit_off_never_compiles(monkeypatch, rng):
    compiles = Compiles(monkeypatch)
    g = fused_graph()
    plan = compile(g, opt_level=0, jit="off", hot_threshold=1)
    x = rng.standard_normal((2, 4), dtype=np.float32)
    for _ in range(3):
        assert_close(plan.run({"x": x}), reference(g, x))
    assert compiles.built == [] and plan.jobs == [] and fused_row(plan).reason == "jit='off'"


def test_epilogue_is_one_native_step(monkeypatch, rng):
    compiles = Compiles(monkeypatch)
    g = epilogue_graph()
    plan = compile(g, opt_level=0, jit="eager")
    x = rng.standard_normal((5, 8), dtype=np.float32)
    assert_close(plan.run({"x": x}), reference(g, x))
    assert compiles.built == ["epilogue", "Neg"]             # the epilogue function; Neg as a one-op kernel
    row = plan.stats().steps[0]
    assert row.mode == "native" and row.reason.startswith("MatMul: BLAS") and "epilogue" in row.reason


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
def test_opt_level_2_groups_run_like_the_original(jit, rng):
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


def test_a_failing_step_is_named(rng):
    g = tlc.Graph("gather")
    x = g.input("x", "float32", (4, 3))
    idx = g.input("idx", "int64", (2,))
    g.output(g.add_node("Gather", [g.add_node("Relu", [x]), idx], axis=0), "y")
    plan = compile(g, jit="eager")
    x0 = rng.standard_normal((4, 3), dtype=np.float32)
    np.testing.assert_array_equal(plan.run({"x": x0, "idx": np.array([3, 0])})["y"], np.maximum(x0, 0)[[3, 0]])
    with pytest.raises(tlc.ExecutionError, match=r"node 'Gather' \(Gather\) failed on inputs .*IndexError"):
        plan.run({"x": x0, "idx": np.array([7, 0])})


def test_the_jit_thread_runs_parallel_functions_on_itself_alone():
    """A build that calls its kernel must not start an OpenMP team on the JIT thread: libgomp, counting more
    threads than CPUs, would cut every idle worker's spin and each region of later runs would wake one."""
    from tlc.runtime import jit

    counts = jit._pool().submit(numba.get_num_threads).result(timeout=60)
    assert counts == 1
