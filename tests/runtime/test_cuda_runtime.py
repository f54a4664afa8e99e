"""Plans for the cuda target under Numba's simulator (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1): device
memory is host memory there, so these test the device plan's structure (feeds copied in once, outputs out once,
every step on the device or listed as a host step), the device op table against the ONNX node cases, and the
generated CUDA kernels inside plans; speed is measured on a GPU by tools/bench_cuda.py."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import onnx_cases
import pytest
from onnx_cases import PASS, CompiledRunner

import tlc
import tlc.backend
from tlc.errors import CompileError
from tlc.runtime.cuda_ops import CUDA_OPS
from tlc.runtime.device import CUDA_MEMORY
from tlc.targets import CUDA

cuda = pytest.importorskip("numba.cuda")
pytestmark = pytest.mark.skipif(not cuda.is_available(), reason="no CUDA device and no simulator")


def test_device_op_table_passes_the_onnx_node_cases():
    """Every ONNX node case of every op the device table lists (~380 cases, ~5 s: jit="off", so the steps are
    the table's array-module implementations and fused groups run their host fallback)."""
    ops = [op for op in CUDA_OPS if "." not in op and not op.startswith("<")]
    host: dict[str, set[str]] = {}

    def seen(plan):
        for s in plan.stats().steps:
            if s.mode == "reference" and "jit='off'" not in s.reason:
                host.setdefault(s.op, set()).add(s.reason)

    runner = CompiledRunner(opt_level=2, jit="off", target="cuda", on_plan=seen)
    failures, ran = [], 0
    for case in onnx_cases.quick_cases_for(*ops):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if onnx_cases.run_case(case, onnx_cases.reference_runner)[0] != PASS:
                continue
            status, reason = onnx_cases.run_case(case, runner)
        ran += 1
        if status != PASS:
            failures.append(f"{case.name}: {reason}")
    assert ran > 300 and not failures, "\n".join(failures)
    # the host steps are the forms the table declines, each with its reason
    assert "MatMul" not in host and "Conv" not in host and "Gemm" not in host, host
    assert all("on the host" in r for reasons in host.values() for r in reasons), host


def _convnet() -> tlc.Graph:
    g = tlc.Graph("devnet")
    x = g.input("x", "float32", (2, 3, 9, 9))
    rng = np.random.default_rng(0)
    w1 = g.constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    h = g.add_node("Conv", [x, w1, g.constant(np.linspace(-1, 1, 8, dtype=np.float32))], pads=[1, 1, 1, 1])
    h = g.add_node("Relu", [h])
    dw = g.constant(rng.standard_normal((8, 1, 3, 3)).astype(np.float32))
    h = g.add_node("Conv", [h, dw], group=8, strides=[2, 2], dilations=[1, 1], pads=[0, 0, 1, 1])
    h = g.add_node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    up = g.add_node("ConvTranspose", [h, g.constant(rng.standard_normal((8, 4, 3, 3)).astype(np.float32))],
                    strides=[2, 2], pads=[1, 1, 0, 0], output_padding=[1, 1])
    pooled = g.add_node("GlobalAveragePool", [up])
    flat = g.add_node("Flatten", [pooled])
    logits = g.add_node("Gemm", [flat, g.constant(rng.standard_normal((5, 4)).astype(np.float32)),
                                 g.constant(np.ones(5, np.float32))], transB=1, alpha=0.5)
    g.output(g.add_node("Softmax", [logits], axis=-1), "probs")
    g.output(g.add_node("Tanh", [up]), "up")
    return g


def test_a_plan_is_device_resident_and_matches_the_cpu_plan():
    g = _convnet()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)}
    want = tlc.compile(g, jit="off").run(feeds)
    plan = tlc.compile(g, target="cuda", jit="off")
    got = plan.run(feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
        assert type(got[name]) is np.ndarray and got[name].flags.owndata
    source = plan.runner_source()
    assert source.count("to_dev(") == 1, source         # the feed, once; the outputs go back in plan.run
    first = plan.run(feeds, device_outputs=True)        # the device's arrays (numpy under the simulator) ...
    again = plan.run({"x": feeds["x"] * 2}, device_outputs=True)
    memory = CUDA_MEMORY
    for name in want:                                   # ... owned by the caller: a later run changes none
        assert memory.is_device_array(first[name])
        np.testing.assert_allclose(memory.host(first[name]), want[name], rtol=1e-5, atol=1e-5)
        assert _address(first[name]) != _address(again[name])
    steps = plan.stats().steps
    assert {s.mode for s in steps} <= {"library", "view", "reference"}
    assert all("jit='off'" in s.reason for s in steps if s.mode == "reference"), steps
    assert plan.options.target is CUDA and tlc.backend.supports_device("CUDA")


def _address(a) -> int:
    """Where an array's data lies, on the host or a device (CuPy arrays have no numpy view)."""
    face = getattr(a, "__cuda_array_interface__", None) or a.__array_interface__
    return face["data"][0]


def test_host_steps_say_so_and_bad_feeds_are_named():
    g = tlc.Graph("host")
    x = g.input("x", "float32", (4, 6))
    g.output(g.add_node("CumSum", [x, g.constant(np.array(1, np.int64))]), "y")
    plan = tlc.compile(g, target="cuda", jit="off")
    (step,) = plan.stats().steps
    assert step.mode == "reference" and "on the host (inputs copied from the device, results back)" in step.reason
    x_val = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(plan.run({"x": x_val})["y"], np.cumsum(x_val, axis=1))
    with pytest.raises(tlc.DTypeMismatchError):
        plan.run({"x": x_val.astype(np.int32)})


def test_cuda_without_a_device_is_a_named_error(monkeypatch):
    def missing():
        raise CompileError("the cuda target needs a CUDA device (or NUMBA_ENABLE_CUDASIM=1)")

    absent = dataclasses.replace(CUDA, name="cuda-absent", check=missing)
    g = tlc.Graph("g")
    g.output(g.add_node("Relu", [g.input("x", "float32", (3,))]), "y")
    with pytest.raises(CompileError, match="needs a CUDA device"):
        tlc.compile(g, target=absent)


def _suite():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import models

    return models


def test_the_model_suites_run_on_the_device_and_match_the_cpu_plan():
    """Every real-suite and tiny model at reduced size: each step on the device (fused groups on their host
    fallback: jit="off" keeps the simulator out of it), results as the CPU plan's."""
    from tlc.io.onnx import from_onnx

    models = _suite()
    for name in models.REAL_MODELS + models.TINY_MODELS:
        proto = models.build(name, batch=2, small=True)
        graph, feeds = from_onnx(proto)[0], models.random_feeds(proto, 2)
        want = tlc.compile(graph, jit="off").run(feeds)
        plan = tlc.compile(graph, target="cuda", jit="off")
        got = plan.run(feeds)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=2e-5, atol=2e-5, err_msg=f"{name} {key}")
        host = [s for s in plan.stats().steps if s.mode == "reference" and "jit='off'" not in s.reason]
        assert not host, (name, host)


def test_generated_kernels_run_inside_a_device_plan():
    from tlc.io.onnx import from_onnx

    models = _suite()
    proto = models.build("small_convnet", batch=1, small=True)
    graph, feeds = from_onnx(proto)[0], models.random_feeds(proto, 1)
    want = tlc.compile(graph, jit="off").run(feeds)
    plan = tlc.compile(graph, target="cuda", jit="eager")
    got = plan.run(feeds)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5)
    steps = plan.stats().steps
    assert "reference" not in plan.stats().by_mode(), steps
    kinds = {s.op for s in steps if s.mode == "native"}
    assert "tlc.Fused[epilogue]" in kinds and len([s for s in steps if s.mode == "native"]) >= 3, kinds
