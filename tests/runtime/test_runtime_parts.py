"""Steps split into parts on the runtime's worker threads (GEMM slabs, conv channel slabs, their epilogues),
against onnxruntime and against the same plan run whole; the pool's own rules (errors, busy, sizes)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tlc
from tlc.io.onnx import from_onnx
from tlc.runtime import parts as parts_module
from tlc.runtime import workers as workers_module
from tlc.runtime.workers import Workers, split_rows

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    """Split even the small products of these tests (the real threshold is ~4M multiply-adds)."""
    monkeypatch.setattr(parts_module, "PARTS_MIN_MACS", 1)
    import tlc.runtime.library as library

    monkeypatch.setattr(library, "PARTS_MIN_MACS", 1)


def run_both(nodes, inputs: dict[str, tuple], inits: dict[str, np.ndarray], rng, threads=2, rtol=1e-4):
    graph_proto = helper.make_graph(
        nodes, "parts", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    graph, _ = from_onnx(model)
    split = tlc.compile(graph, opt_level=2, num_threads=threads)
    whole = tlc.compile(graph, opt_level=2, num_threads=threads, own_threads=False)
    for _ in range(2):
        got = split.run(feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(got, whole.run(feeds)["y"], rtol=1e-5, atol=1e-5)
    return split


def notes(plan) -> list[str]:
    return [n for s in plan.stats().steps for n in s.notes]


@pytest.mark.parametrize("a, b", [((9, 8), (8, 6)),            # rows of A
                                  ((3, 5, 8), (3, 8, 4)),      # a batch axis of both
                                  ((3, 5, 8), (8, 4)),         # a batch axis, B broadcast
                                  ((1, 8), (8, 7))], ids=str)  # one row: columns of B
def test_matmul_in_parts(rng, a, b):
    plan = run_both([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, {}, rng)
    assert any(n.endswith("2 parts") for n in notes(plan))


@pytest.mark.parametrize("c_shape", [(6,), (5, 1), (), (5, 6)], ids=str)
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)], ids=str)
def test_gemm_in_parts_with_c_alpha_beta(rng, c_shape, trans):
    ta, tb = trans
    a = rng.standard_normal((4, 5) if ta else (5, 4)).astype(np.float32)
    b = rng.standard_normal((6, 4) if tb else (4, 6)).astype(np.float32)
    c = np.asarray(rng.standard_normal(c_shape)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "b", "c"], ["y"], alpha=0.5, beta=-2.0, transA=ta, transB=tb)
    run_both([node], {"x": a.shape}, {"b": b, "c": c}, rng)


def test_matmul_epilogue_in_parts_in_place(rng):
    """(x @ w + bias + residual) relu, its slabs computed and finished by the kernel on each thread."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["s"]),
             helper.make_node("Add", ["s", "r"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    inits = {"w": rng.standard_normal((16, 12)).astype(np.float32),
             "bias": rng.standard_normal(12).astype(np.float32)}
    plan = run_both(nodes, {"x": (2, 7, 16), "r": (2, 7, 12)}, inits, rng)
    (group,) = [g for g in plan.groups if g.kind == "epilogue"]
    assert group.status == "native"
    plan.run({"x": rng.standard_normal((2, 7, 16)).astype(np.float32),
              "r": rng.standard_normal((2, 7, 12)).astype(np.float32)}, profile=True)
    assert [r["part"] for r in plan.profile().part_summary()] == ["2 parts: contraction + kernel"]


@pytest.fixture
def column_parts(monkeypatch):
    """Column slabs for products as narrow as these tests' (the real minimum is 128 columns a part)."""
    monkeypatch.setattr(parts_module, "COLUMN_SPLIT_MIN", 2)


def test_products_with_more_columns_than_rows_split_columns(column_parts):
    assert parts_module.matmul_parts((4, 8), (8, 12), (4, 12), 2).split.axis == 1
    assert parts_module.matmul_parts((1, 4, 8), (8, 12), (1, 4, 12), 2).split.axis == 2
    assert parts_module.matmul_parts((12, 8), (8, 4), (12, 4), 2).split.axis == 0     # rows outweigh
    assert parts_module.matmul_parts((2, 4, 8), (8, 12), (2, 4, 12), 2).split.axis == 0  # a batch: its axis
    assert parts_module.matmul_parts((2, 4, 8), (2, 8, 12), (2, 4, 12), 2).split.axis == 0  # B batched


@pytest.mark.parametrize("c_shape", [(12,), (4, 1), (), (4, 12)], ids=str)
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)], ids=str)
def test_gemm_in_column_parts_with_c_alpha_beta(rng, column_parts, c_shape, trans):
    ta, tb = trans
    a = rng.standard_normal((8, 4) if ta else (4, 8)).astype(np.float32)
    b = rng.standard_normal((12, 8) if tb else (8, 12)).astype(np.float32)
    c = np.asarray(rng.standard_normal(c_shape)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "b", "c"], ["y"], alpha=0.5, beta=-2.0, transA=ta, transB=tb)
    plan = run_both([node], {"x": a.shape}, {"b": b, "c": c}, rng)
    assert any(n.endswith("2 parts") for n in notes(plan))


@pytest.mark.parametrize("x_shape", [(1, 5, 16), (5, 16), (1, 16)], ids=str)
def test_matmul_epilogue_in_column_parts(rng, column_parts, x_shape):
    """Strided column slabs of the product first, then the kernel in row slabs (or whole: one row)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["s"]),
             helper.make_node("Add", ["s", "r"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    inits = {"w": rng.standard_normal((16, 40)).astype(np.float32),
             "bias": rng.standard_normal(40).astype(np.float32)}
    r_shape = x_shape[:-1] + (40,)
    plan = run_both(nodes, {"x": x_shape, "r": r_shape}, inits, rng)
    (group,) = [g for g in plan.groups if g.kind == "epilogue"]
    assert group.status == "native"
    plan.run({"x": rng.standard_normal(x_shape).astype(np.float32),
              "r": rng.standard_normal(r_shape).astype(np.float32)}, profile=True)
    kernel_parts = 1 if x_shape[-2] == 1 else 2
    assert [r["part"] for r in plan.profile().part_summary()] == [
        f"2 column parts, then {kernel_parts} kernel parts"]


@pytest.mark.parametrize("kernel, attrs", [((3, 3), {"pads": [1, 1, 1, 1]}),
                                           ((3, 3), {"strides": [2, 2]}),
                                           ((1, 1), {}),
                                           ((1, 1), {"strides": [2, 2]})], ids=str)
@pytest.mark.parametrize("epilogue", [False, True])
def test_conv_in_channel_slabs(rng, kernel, attrs, epilogue):
    w = rng.standard_normal((6, 5) + kernel).astype(np.float32)
    b = (rng.standard_normal(6) * 3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if epilogue else "y"], **attrs)]
    if epilogue:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    plan = run_both(nodes, {"x": (1, 5, 9, 8)}, {"w": w, "b": b}, rng, threads=3)
    assert "3 parts" in " ".join(notes(plan))


def test_concurrent_runs_share_the_pool(rng):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])]
    w = rng.standard_normal((32, 24)).astype(np.float32)
    plan = run_both(nodes, {"x": (40, 32)}, {"w": w}, rng)
    xs = [rng.standard_normal((40, 32)).astype(np.float32) for _ in range(6)]
    results: dict[int, np.ndarray] = {}

    def worker(i):
        for _ in range(20):
            results[i] = plan.run({"x": xs[i]})["y"]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        np.testing.assert_allclose(results[i], np.tanh(x @ w), rtol=1e-5, atol=1e-5)


def test_workers_run_every_part_and_raise_the_first_error():
    pool = Workers(3)
    seen = []
    pool.run([lambda k=k: seen.append(k) for k in range(3)])
    assert sorted(seen) == [0, 1, 2]

    def boom():
        raise ValueError("part failed")

    with pytest.raises(ValueError, match="part failed"):
        pool.run([lambda: None, boom, lambda: None])
    seen.clear()
    pool.run([lambda k=k: seen.append(k) for k in range(3)])   # still usable after a failure
    assert sorted(seen) == [0, 1, 2]


def test_split_rows_covers_the_range_evenly():
    assert split_rows(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_rows(2, 5) == [(0, 1), (1, 2)]
    assert workers_module.workers(2).threads >= 2
