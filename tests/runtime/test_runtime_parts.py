"""Steps cut into parts on Numba's pool (product row and column slabs, conv products, epilogues applied to each
part), against onnxruntime and against the same plan run whole on one thread."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from runtime_graphs import run_in_threads

import tlc
from tlc.io.onnx import from_onnx
from tlc.kernels import conv as kconv
from tlc.kernels import gemm, panel

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    """Cut even the small products of these tests (the real threshold is ~1M multiply-adds)."""
    monkeypatch.setattr(gemm, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(kconv, "PARALLEL_MIN_S", 0.0)


@pytest.fixture
def column_parts(monkeypatch):
    """Column slabs for products as narrow as these tests' (the real minimum is 128 columns a part)."""
    monkeypatch.setattr(gemm, "COLUMN_SPLIT_MIN", 2)


def run_both(nodes, inputs: dict[str, tuple], inits: dict[str, np.ndarray], rng, threads=2, rtol=1e-4):
    graph_proto = helper.make_graph(
        nodes, "parts", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    graph, _ = from_onnx(model)
    parts = tlc.compile(graph, opt_level=2, num_threads=threads, jit="eager")
    whole = tlc.compile(graph, opt_level=2, num_threads=1, jit="eager")
    for _ in range(2):
        got = parts.run(feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(got, whole.run(feeds)["y"], rtol=1e-5, atol=1e-5)
    assert parts.stats().totals["reference_steps"] == 0
    return parts


def notes(plan) -> str:
    return " ".join(n for s in plan.stats().steps for n in s.notes)


@pytest.mark.parametrize("a, b", [((9, 8), (8, 6)),            # rows of A
                                  ((3, 5, 8), (3, 8, 4)),      # a batch axis of both
                                  ((3, 5, 8), (8, 4)),         # a batch axis, B broadcast
                                  ((2, 1, 5, 8), (3, 8, 4)),   # batch axes broadcast both ways
                                  ((1, 8), (8, 7))], ids=str)  # one row
def test_matmul_in_parts(rng, a, b):
    plan = run_both([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, {}, rng)
    assert "BLAS in 2 row parts" in notes(plan)


@pytest.mark.parametrize("c_shape", [(6,), (5, 1), (), (5, 6)], ids=str)
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)], ids=str)
def test_gemm_in_parts_with_c_alpha_beta(rng, c_shape, trans):
    ta, tb = trans
    a = rng.standard_normal((4, 5) if ta else (5, 4)).astype(np.float32)
    b = rng.standard_normal((6, 4) if tb else (4, 6)).astype(np.float32)
    c = np.asarray(rng.standard_normal(c_shape)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "b", "c"], ["y"], alpha=0.5, beta=-2.0, transA=ta, transB=tb)
    plan = run_both([node], {"x": a.shape}, {"b": b, "c": c}, rng)
    assert "2 row parts" in notes(plan)


def epilogue_nodes():
    return [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["s"]),
            helper.make_node("Add", ["s", "r"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]


@pytest.mark.parametrize("threads", [2, 3])
def test_matmul_epilogue_in_parts_in_place(rng, threads):
    """(x @ w + bias + residual) relu: each part's rows finished by the epilogue on its thread."""
    inits = {"w": rng.standard_normal((16, 12)).astype(np.float32),
             "bias": rng.standard_normal(12).astype(np.float32)}
    plan = run_both(epilogue_nodes(), {"x": (2, 7, 16), "r": (2, 7, 12)}, inits, rng, threads=threads)
    assert f"MatMul: BLAS in {threads} row parts + epilogue" in notes(plan)


def test_products_with_more_columns_than_rows_split_columns(column_parts):
    assert gemm.column_split(4, 12, 1, 2) and gemm.column_split(1, 12, 1, 2)
    assert not gemm.column_split(12, 4, 1, 2)        # rows outweigh
    assert not gemm.column_split(4, 12, 2, 2)        # a batch: rows of the batch
    assert not gemm.column_split(4, 12, 1, 1)        # one part


def test_a_product_on_large_weights_is_cut_however_few_its_multiply_adds(rng, monkeypatch):
    """A matrix-vector product reads its weights at one core's bandwidth: from PARALLEL_MIN_BYTES of constant
    weights it runs in parts even under PARALLEL_MIN_MACS (ResNet-18's classifier at batch 1)."""
    monkeypatch.setattr(gemm, "PARALLEL_MIN_MACS", 1 << 20)   # the real threshold, not this module's
    assert gemm.parts_for(512 * 1000, 2, 512 * 1000 * 4) == 2
    assert gemm.parts_for(512 * 1000, 2) == 1                  # the same work on activations
    assert gemm.parts_for(64 * 64, 2, 64 * 64 * 4) == 1
    assert gemm.parts_for(512 * 1000, 1, 512 * 1000 * 4) == 1
    w, c = rng.standard_normal((1000, 512)).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    plan = run_both([helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)], {"x": (1, 512)}, {"w": w, "c": c},
                    rng, rtol=1e-3)
    assert "2 column parts" in notes(plan)


@pytest.mark.parametrize("c_shape", [(12,), (4, 1), (), (4, 12)], ids=str)
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)], ids=str)
def test_gemm_in_column_parts_with_c_alpha_beta(rng, column_parts, c_shape, trans):
    ta, tb = trans
    a = rng.standard_normal((8, 4) if ta else (4, 8)).astype(np.float32)
    b = rng.standard_normal((12, 8) if tb else (8, 12)).astype(np.float32)
    c = np.asarray(rng.standard_normal(c_shape)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "b", "c"], ["y"], alpha=0.5, beta=-2.0, transA=ta, transB=tb)
    plan = run_both([node], {"x": a.shape}, {"b": b, "c": c}, rng)
    assert "2 column parts" in notes(plan)


@pytest.mark.parametrize("x_shape", [(1, 5, 16), (5, 16), (1, 16)], ids=str)
def test_matmul_epilogue_in_column_parts(rng, column_parts, x_shape):
    """Strided column slabs of the product first, then the epilogue over ranges of its own."""
    inits = {"w": rng.standard_normal((16, 40)).astype(np.float32),
             "bias": rng.standard_normal(40).astype(np.float32)}
    plan = run_both(epilogue_nodes(), {"x": x_shape, "r": x_shape[:-1] + (40,)}, inits, rng)
    kind = "panels" if panel.fast() else "BLAS"   # a constant float32 weight: in panels on AVX-512 hosts
    assert f"{kind} in 2 column parts + epilogue" in notes(plan)   # MatMul+Add is a Gemm in 2-D


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_products_on_weights_packed_in_panels(rng, threads):
    """A constant float32 B goes into panels of 32 columns (``tlc.kernels.panel``): a MatMul with an epilogue
    (70 columns: two panels and a masked one; 2 x 7 rows: a tile of six and one of one per image), a Gemm whose
    B is transposed at bind time, and one with alpha (BLAS: the kernel does not scale)."""
    inits = {"w": rng.standard_normal((16, 70)).astype(np.float32),
             "bias": rng.standard_normal(70).astype(np.float32)}
    plan = run_both(epilogue_nodes(), {"x": (2, 7, 16), "r": (2, 7, 70)}, inits, rng, threads=threads)
    kind = "panels" if panel.fast() else "BLAS"
    assert f"MatMul: {kind}" in notes(plan)
    b, c = rng.standard_normal((45, 24)).astype(np.float32), rng.standard_normal(45).astype(np.float32)
    plan = run_both([helper.make_node("Gemm", ["x", "b", "c"], ["y"], transB=1)], {"x": (13, 24)}, {"b": b, "c": c},
                    rng, threads=threads)
    assert kind in notes(plan)
    plan = run_both([helper.make_node("Gemm", ["x", "b", "c"], ["y"], transB=1, alpha=0.5)], {"x": (13, 24)},
                    {"b": b, "c": c}, rng, threads=threads)
    assert "BLAS" in notes(plan)
    # a transposed A: the kernel broadcasts six elements of one row of A a k-step
    plan = run_both([helper.make_node("Gemm", ["x", "b", "c"], ["y"], transA=1, transB=1)], {"x": (24, 13)},
                    {"b": b, "c": c}, rng, threads=threads)
    assert kind in notes(plan)


def test_panel_tiles_for_every_rest_of_rows(rng):
    """The panel kernel's rows as whole tiles of ``TILE`` and a rest, where a rest of fewer than ``REST_SPLIT``
    rows after a whole tile runs with it as two tiles of about equal height: every row count from 1 to three tiles
    and a rest, on one masked vector, a masked panel and a whole one, with a bias per row or per column, against
    float64 products (fails if a split tile's rows are dropped, doubled or given another row's bias)."""
    if not panel.fast():
        pytest.skip("the panel kernel runs on AVX-512 hosts only")
    from numba import njit

    @njit(cache=False, nogil=True)
    def product(packed, a, c, bias, rows, k, n, mode):
        panel.panel_strided(packed.ctypes.data, panel.PANEL, k * panel.PANEL, a.ctypes.data, k, 1, c.ctypes.data,
                            n, 1, rows, k, n, bias.ctypes.data, mode)

    k = 37
    for n in (16, 40, 64):
        w = rng.standard_normal((k, n)).astype(np.float32)
        packed = panel.pack(w)
        for rows in range(1, 3 * panel.TILE + panel.REST_SPLIT + 1):
            a = rng.standard_normal((rows, k)).astype(np.float32)
            for mode, bias in ((panel.BIAS_ROWS, rng.standard_normal(rows)), (panel.BIAS_COLUMNS,
                                                                             rng.standard_normal(n))):
                bias = bias.astype(np.float32)
                c = np.full((rows, n), np.nan, np.float32)
                product(packed, a, c, bias, rows, k, n, mode)
                want = a.astype(np.float64) @ w + (bias[:, None] if mode == panel.BIAS_ROWS else bias[None, :])
                np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4, err_msg=f"rows {rows}, n {n}, mode {mode}")


def test_products_of_activations_in_panels_in_place(rng):
    """A B that is no constant, with contiguous columns (attention's probabilities times V), runs the panel
    kernel on B where it is (masked past N, 40 columns; a batch of 2 x 3 heads, broadcast over one of them); a B
    that is a transpose moving the last axis (Q times K^T) is copied first (``lower.transposes_as_views``) so
    that it can, where BLAS would read the transposed view."""
    kind = "panels in place" if panel.fast() else "BLAS"
    plan = run_both([helper.make_node("MatMul", ["p", "v"], ["y"])], {"p": (2, 3, 9, 11), "v": (2, 1, 11, 40)},
                    {}, rng)   # 2 threads, and 1 (``run_both``)
    assert kind in notes(plan)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["y"])]
    plan = run_both(nodes, {"q": (3, 9, 16), "k": (3, 20, 16)}, {}, rng)
    assert kind in notes(plan)
    assert [s.mode for s in plan.stats().steps if s.op == "Transpose"] == ["library" if panel.fast() else "view"]


def test_equal_columns_stay_equal_in_panels(rng):
    """Every column of C comes from the same kernel in the same order, the last panel's too: equal columns of B
    give equal columns of C (a light model's 1000 equal logits of 1e21 went through a softmax)."""
    b = np.full((64, 1000), 0.02, np.float32)
    x = (rng.standard_normal((1, 64)) * 1e20).astype(np.float32)
    c = np.zeros((1, 1000), np.float32)
    packed = panel.pack(b) if panel.fast() else gemm.UNPACKED
    gemm.matmul(x, b, c, gemm.batch_offsets(x.shape, x.strides, b.shape, b.strides, c.shape, 4), 1.0, False, 1,
                packed)
    assert np.unique(c).size == 1


def test_products_keep_blas_where_the_panel_kernel_cannot_be_built(tmp_path):
    """A host where the IR kernel fails to build: a stub takes its symbol, ``fast()`` says no, every product
    runs on BLAS, and ``panel.REASON`` says why (in a fresh process: the stub replaces the symbol for every
    kernel linked after it)."""
    script = (
        "import numpy as np\n"
        "import tlc\n"
        "import tlc.kernels.panel as P\n"
        "def broken():\n"
        "    raise RuntimeError('no MCJIT here')\n"
        "P._build = broken\n"
        "P._STATE.clear()\n"
        "P.ensure()\n"
        "g = tlc.Graph('p')\n"
        "x = g.input('x', 'float32', (5, 8))\n"
        "g.output(g.add_node('MatMul', [x, g.constant(np.ones((8, 40), np.float32))]), 'y')\n"
        "plan = tlc.compile(g, jit='eager')\n"
        "y = plan.run({'x': np.ones((5, 8), np.float32)})['y']\n"
        "assert np.all(y == 8), y\n"
        "assert not P.fast() and 'no MCJIT here' in P.REASON, P.REASON\n"
        "assert all('panel' not in s.reason for s in plan.stats().steps)\n"
        "assert 'no MCJIT here' in str(plan.stats())\n"
        "print('ok')\n")
    env = dict(os.environ, TLC_CACHE_DIR=os.environ.get("TLC_CACHE_DIR", str(tmp_path)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("kernel, attrs", [((3, 3), {"pads": [1, 1, 1, 1]}),
                                           ((3, 3), {"strides": [2, 2]}),
                                           ((1, 1), {}),
                                           ((1, 1), {"strides": [2, 2]})], ids=str)
@pytest.mark.parametrize("epilogue", [False, True])
def test_conv_products_in_parts(rng, kernel, attrs, epilogue):
    w = rng.standard_normal((6, 5) + kernel).astype(np.float32)
    b = (rng.standard_normal(6) * 3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if epilogue else "y"], **attrs)]
    if epilogue:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    plan = run_both(nodes, {"x": (2, 5, 9, 8)}, {"w": w, "b": b}, rng, threads=3)
    assert "3 part(s)" in notes(plan)


@pytest.mark.skipif(not panel.fast(), reason=f"the panel kernels: {panel.REASON or 'no AVX-512 here'}")
@pytest.mark.parametrize("conv, act", [({"channels": 16, "group": 1, "kernel": 1}, ("Clip", 0.0, 6.0)),
                                       ({"channels": 16, "group": 16, "kernel": 3}, ("Relu",))], ids=str)
def test_conv_bias_and_clamp_applied_as_the_kernel_stores(rng, conv, act):
    """A Conv whose epilogue is its bias and a Relu or Clip runs as one conv (PANEL, the vector depthwise kernel)
    that adds the bias and clamps as it stores; NaN stays NaN, as in the epilogue kernel it replaces."""
    c, k, group = conv["channels"], conv["kernel"], conv["group"]
    m = 32 if group == 1 else c
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    b = (rng.standard_normal(m) * 3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, pads=[k // 2] * 4)]
    inits = {"w": w, "b": b}
    if act[0] == "Clip":
        inits.update(lo=np.float32(act[1]), hi=np.float32(act[2]))
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node(act[0], ["c"], ["y"]))
    graph_proto = helper.make_graph(
        nodes, "clamped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, c, 28, 28))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    graph, _ = from_onnx(helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))
    x = rng.standard_normal((2, c, 28, 28)).astype(np.float32) * 4
    x[0, :, 5, 7] = np.nan                       # NaN through every output channel at (5, 7) and around it
    plan = tlc.compile(graph, opt_level=2, num_threads=1, jit="eager")
    assert "applied as the kernel stores" in notes(plan), notes(plan)
    want = tlc.compile(graph, jit="off").run({"x": x})["y"]
    got = plan.run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(got[0, :, 5, 7]).all() and not np.isnan(got[1]).any()
    bound = act[2] if act[0] == "Clip" else np.inf
    assert got[~np.isnan(got)].min() >= 0 and got[~np.isnan(got)].max() <= bound


def test_concurrent_runs_share_the_pool(rng):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])]
    w = rng.standard_normal((32, 24)).astype(np.float32)
    plan = run_both(nodes, {"x": (40, 32)}, {"w": w}, rng)
    xs = [rng.standard_normal((40, 32)).astype(np.float32) for _ in range(8)]

    def worker(i):
        for _ in range(20):
            np.testing.assert_allclose(plan.run({"x": xs[i]})["y"], np.tanh(xs[i] @ w), rtol=1e-5, atol=1e-5)

    run_in_threads(worker)
