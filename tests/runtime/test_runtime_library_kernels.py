"""The runtime's library and native steps (GEMM, conv, pooling, LRN, BatchNorm, ...) against onnxruntime, one
ONNX node at a time: the node as a one-step plan (-O0, so the pipeline changes nothing), run twice (the second
run reuses an arena whose scratch the first left dirty)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import tlc
from tlc.io.onnx import from_onnx
from tlc.kernels import lib_conv

ort = pytest.importorskip("onnxruntime")


def run_ort(op: str, inputs: list[np.ndarray | None], attrs: dict, opset: int = 17,
            out_dtype: type | None = None) -> list[np.ndarray]:
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "case",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, inputs) if a is not None],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype or inputs[0].dtype)),
                                       None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in zip(names, inputs) if a is not None})


def run_library(op: str, inputs: list[np.ndarray | None], attrs: dict, jit: str = "eager",
                out_dtype: type | None = None, **_: object) -> tuple[np.ndarray, str]:
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "case",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, inputs) if a is not None],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype or inputs[0].dtype)),
                                       None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    plan = tlc.compile(from_onnx(model)[0], opt_level=0, jit=jit)
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    first, out = plan.run(feeds)["y"], plan.run(feeds)["y"]
    np.testing.assert_array_equal(first, out)
    (step,) = plan.stats().steps
    assert step.mode != "reference", step.reason
    return out, step.notes[0] if step.notes else step.reason


def check(op: str, inputs: list, attrs: dict, *, rtol=1e-5, atol=1e-5, **kw) -> str:
    (want,) = run_ort(op, inputs, attrs, out_dtype=kw.get("out_dtype"))
    have, note = run_library(op, inputs, attrs, **kw)
    np.testing.assert_allclose(have, want, rtol=rtol, atol=atol)
    return note


CONV_CASES = {
    # name: (x shape, w shape, attrs, expected algorithm)
    "1x1": ((2, 16, 9, 9), (24, 16, 1, 1), {}, "gemm"),
    "1x1-stride2": ((1, 16, 9, 9), (8, 16, 1, 1), {"strides": [2, 2]}, "gemm"),
    "3x3-pad1": ((2, 8, 10, 10), (12, 8, 3, 3), {"pads": [1, 1, 1, 1]}, "gemm"),
    "7x7-stride2-pad3": ((1, 3, 23, 23), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, "gemm"),
    "3x3-stride2-asym": ((1, 4, 11, 12), (6, 4, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 1]}, "gemm"),
    "dilated": ((1, 4, 13, 13), (5, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, "gemm"),
    "grouped": ((1, 8, 7, 7), (6, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, "gemm"),
    "same-upper": ((1, 4, 9, 9), (4, 4, 4, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, "gemm"),
    "depthwise": ((2, 8, 12, 12), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, "depthwise"),
    "depthwise-stride2": ((1, 6, 13, 13), (6, 1, 5, 5), {"group": 6, "strides": [2, 2], "pads": [2, 2, 2, 2]},
                          "depthwise"),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_matches_onnxruntime(name, bias, rng):
    xs, ws, attrs, algo = CONV_CASES[name]
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[0], dtype=np.float32) if bias else None
    inputs = [x, w] + ([b] if bias else [])
    assert check("Conv", inputs, attrs, rtol=1e-4, atol=1e-4).startswith(algo)
    if algo == "depthwise":   # the no-JIT path for depthwise convs
        assert check("Conv", inputs, attrs, rtol=1e-4, atol=1e-4, jit="off").startswith("depthwise_taps")


@pytest.mark.parametrize("algo", [a for a in lib_conv.ALGORITHMS if a != "gemm1x1"])
def test_every_conv_algorithm_on_a_depthwise_shape(algo, rng):
    """All kernels agree where they all apply (a depthwise 3x3), so the choice is only about speed."""
    x = rng.standard_normal((1, 4, 8, 8), dtype=np.float32)
    w = rng.standard_normal((4, 1, 3, 3), dtype=np.float32)
    b = rng.standard_normal(4, dtype=np.float32)
    (want,) = run_ort("Conv", [x, w, b], {"group": 4, "pads": [1, 1, 1, 1]})
    geo = lib_conv.geometry(x.shape, w.shape, want.shape, (1, 1), (1, 1), (1, 1), 4)
    out = np.empty_like(want)
    work = [np.empty(s, np.float32) for s in lib_conv.workspace(geo, algo)]
    lib_conv.run(algo, x, w, b, out, geo, work)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


POOL_CASES = {
    "max-3x3-s2-p1": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "max-2x2": ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "max-ceil": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "max-dilated": ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 0]}),
    "avg-exclude-pad": ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
    "avg-include-pad": ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                        "count_include_pad": 1}),
    "avg-ceil": ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "avg-same-upper": ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
}


@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pool_matches_onnxruntime(name, rng):
    op, attrs = POOL_CASES[name]
    x = rng.standard_normal((2, 3, 11, 10), dtype=np.float32)
    check(op, [x], attrs)


@pytest.mark.parametrize("attrs", [{"strides": [2, 2], "pads": [1, 1, 1, 1]}, {"strides": [1, 1], "pads": [1, 1, 1, 1]},
                                   {"strides": [2, 2], "pads": [1, 1, 0, 0]},
                                   {"strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}])
def test_max_pool_3x3_on_the_vector_kernel(attrs, rng):
    """3x3 max pools with padding 1 at the start (ResNet's stem pool) on the depthwise kernel's loops, where the
    host runs them: planes of 37 x 40 (three vectors a row, the last ragged) against onnxruntime, and NaN and
    infinities where the reference puts them (a NaN counts as a window's first tap only)."""
    from tlc.kernels import panel

    x = rng.standard_normal((2, 3, 37, 40), dtype=np.float32)
    note = check("MaxPool", [x], {"kernel_shape": [3, 3], **attrs})
    assert note.startswith("vector pool kernel") == panel.fast(), note
    x[0, 0, 0, 0] = np.nan      # the first tap of the first window (its other taps are padding or later)
    x[0, 1, 5, 7] = np.nan      # a later tap of several windows
    x[1, 2, 36, 39] = np.inf
    x[1, 0, 10, 20] = -np.inf
    have, _ = run_library("MaxPool", [x], {"kernel_shape": [3, 3], **attrs})
    g = tlc.Graph("pool")
    g.output(g.add_node("MaxPool", [g.input("x", "float32", x.shape)], kernel_shape=[3, 3], **attrs), "y")
    np.testing.assert_array_equal(have, tlc.reference.run(g, {"x": x})["y"])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op, rng):
    check(op, [rng.standard_normal((2, 5, 7, 6), dtype=np.float32)], {})


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_pool_whose_window_is_the_plane_runs_the_global_reduction(op, rng):
    """ResNet's 7x7 AveragePool on 7x7 planes: the global pool's reduction over the planes, not the window kernel."""
    note = check(op, [rng.standard_normal((2, 5, 7, 6), dtype=np.float32)], {"kernel_shape": [7, 6]})
    assert "axes kernel" in note


def test_lrn(rng):
    x = rng.standard_normal((2, 7, 5, 4), dtype=np.float32)
    check("LRN", [x], {"size": 5, "alpha": 1e-2, "beta": 0.75, "bias": 2.0})
    # onnxruntime takes odd sizes only: check an even one against the ONNX spec's formula written out
    have, _ = run_library("LRN", [x], {"size": 4})
    sq = np.zeros_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - 1), min(x.shape[1] - 1, c + 2)   # floor((4-1)/2) before, ceil((4-1)/2) after
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    np.testing.assert_allclose(have, x / (1.0 + 1e-4 / 4 * sq) ** 0.75, rtol=1e-5)


def test_batchnorm(rng):
    x = rng.standard_normal((2, 4, 5, 5), dtype=np.float32)
    scale, bias, mean = (rng.standard_normal(4, dtype=np.float32) for _ in range(3))
    var = rng.random(4, dtype=np.float32) + 0.5
    check("BatchNormalization", [x, scale, bias, mean, var], {"epsilon": 1e-3})


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1, "alpha": 0.5, "beta": 2.0},
                                   {"transA": 1, "transB": 1, "beta": 0.0}])
def test_gemm(attrs, rng):
    a = rng.standard_normal((6, 5) if attrs.get("transA") else (5, 6), dtype=np.float32)
    b = rng.standard_normal((7, 6) if attrs.get("transB") else (6, 7), dtype=np.float32)
    c = rng.standard_normal((7,), dtype=np.float32)
    check("Gemm", [a, b, c], attrs)
    check("Gemm", [a, b], attrs)


def test_matmul_batched_and_broadcast(rng):
    check("MatMul", [rng.standard_normal((2, 3, 4, 5), dtype=np.float32),
                     rng.standard_normal((5, 6), dtype=np.float32)], {})
    check("MatMul", [rng.standard_normal((4,), dtype=np.float32), rng.standard_normal((2, 4, 3), dtype=np.float32)], {})


def test_softmax_concat_transpose(rng):
    x = rng.standard_normal((3, 4, 5), dtype=np.float32)
    check("Softmax", [x], {"axis": 1})
    check("Softmax", [x], {"axis": -1})
    check("Concat", [x, x[:, :2] * 2, x[:, :1]], {"axis": 1})
    check("Transpose", [x], {"perm": [2, 0, 1]})
    check("Transpose", [x], {})


def test_argmax_argmin(rng):
    """ArgMax/ArgMin as numpy steps, ties on both ends (select_last_index), every axis form and integer input."""
    x = rng.integers(0, 3, (3, 4, 5)).astype(np.float32)       # many ties
    for op in ("ArgMax", "ArgMin"):
        for attrs in ({}, {"axis": -1, "keepdims": 0}, {"axis": 1, "select_last_index": 1},
                      {"axis": 2, "keepdims": 0, "select_last_index": 1}):
            check(op, [x], attrs, out_dtype=np.int64)
    check("ArgMax", [x.astype(np.int32)], {"axis": 1, "keepdims": 0}, out_dtype=np.int64)


def test_concat_inputs_written_in_place(rng):
    """A channel Concat at batch 1 copies nothing: the producers write its inputs where they lie in its output
    (the memory planner's joins), while a later elementwise step reading an input cannot take its range in place;
    at batch 2, or where an input is also a graph output, it copies as before. Each against onnxruntime."""
    init = [helper.make_tensor(n, onnx.TensorProto.FLOAT, a.shape, a.ravel()) for n, a in (
        ("w1", rng.standard_normal((4, 3, 3, 3), dtype=np.float32)),
        ("w2", rng.standard_normal((2, 3, 1, 1), dtype=np.float32)),
        ("w3", rng.standard_normal((2, 6, 3, 3), dtype=np.float32)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["a"]),
             helper.make_node("Conv", ["x", "w2"], ["c2"]),
             helper.make_node("Sigmoid", ["c2"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Mul", ["a", "a"], ["d"]),
             helper.make_node("Conv", ["cat", "w3"], ["y"], pads=[1, 1, 1, 1])]

    def run(batch, outputs, jits=("off", "eager")):
        graph = helper.make_graph(nodes, "join", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                                [batch, 3, 8, 8])],
                                  [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in outputs],
                                  init)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
        feeds = {"x": rng.standard_normal((batch, 3, 8, 8), dtype=np.float32)}
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        for jit in jits:
            plan = tlc.compile(from_onnx(model)[0], jit=jit)
            for _ in range(2):
                got = plan.run(feeds)
                for name, w in zip(outputs, want):
                    np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4)
            (cat,) = [s for s in plan.stats().steps if s.op == "Concat"]
            assert cat.mode != "reference"
            yield "written in place" in " ".join([cat.reason] + cat.notes)

    assert all(run(1, ["y", "d"]))
    assert not any(run(2, ["y", "d"], ("off",)))
    assert not any(run(1, ["y", "d", "a"], ("off",)))


def test_not_native_reasons(rng):
    """Forms the runtime has no native step for run their reference, and stats() says why."""
    def reason(op, inputs, attrs, outputs=1):
        names = [f"i{k}" for k in range(len(inputs))]
        graph = helper.make_graph(
            [helper.make_node(op, names, [f"y{k}" for k in range(outputs)], **attrs)], "case",
            [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape) for n, a in zip(names, inputs)],
            [helper.make_tensor_value_info(f"y{k}", onnx.TensorProto.FLOAT if k == 0 else onnx.TensorProto.INT64,
                                           None) for k in range(outputs)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
        plan = tlc.compile(from_onnx(model)[0], opt_level=0, jit="off")
        plan.run({n: a for n, a in zip(names, inputs)})
        (step,) = plan.stats().steps
        assert step.mode == "reference"
        return step.reason

    x = rng.standard_normal((1, 2, 8, 8), dtype=np.float32)
    assert "single-output" in reason("MaxPool", [x], {"kernel_shape": [2, 2]}, outputs=2)
    w1 = rng.standard_normal((3, 2, 3), dtype=np.float32)
    assert "2-D" in reason("Conv", [x[:, :, 0], w1], {})


@pytest.mark.parametrize("shape,perm,dtype,note", [
    ((3, 197, 3, 3, 64), (2, 0, 3, 1, 4), np.float32, "rows in 2 parts"),   # ViT's head split, 1.4 MB
    ((300, 7, 130), (1, 0, 2), np.float64, "rows in 2 parts"),
    ((1, 196, 16, 8), (0, 2, 1, 3), np.float32, "rows"),                    # short rows, one thread's
    ((2, 3, 5, 7, 11, 3, 4), (5, 4, 3, 2, 1, 0, 6), np.int8, "rows"),       # seven axes, the most it walks
    ((5, 1, 4), (1, 0, 2), bool, "rows"),
    ((2, 3, 5, 7, 11, 13, 8), (6, 5, 4, 3, 2, 1, 0), np.int64, None)])      # moves the last axis: numpy's
def test_a_transpose_of_whole_rows_copies_rows(shape, perm, dtype, note, rng):
    """A Transpose that keeps the last axis last runs as whole rows (``tlc.kernels.transpose.copy_rows``), from a
    MiB in one run a thread; against numpy and onnxruntime, twice on one arena."""
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    plan = tlc.compile(from_onnx(model)[0], opt_level=0, jit="eager", num_threads=2)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        got = plan.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, x.transpose(perm))
    if note == "rows in 2 parts" and plan.options.threads < 2:
        note = "rows"
    assert plan.stats().steps[0].notes == ([note] if note else [])


def test_reductions_over_adjacent_axes_run_the_axes_kernel(rng):
    """ReduceSum/Mean/Max/Min/Prod over one run of adjacent axes: ``tlc.kernels.reduce`` (rows where the last axes
    go, rows accumulated into the output row otherwise), in parts over the outputs at 2 threads; other axes stay
    numpy's. One plan, several reductions, against onnxruntime, twice on one arena; NaN as numpy's max/min."""
    from tlc.kernels import reduce as kreduce

    x = rng.standard_normal((4, 32, 8, 64), dtype=np.float32)
    near_one = (1 + 0.01 * rng.standard_normal((6, 5, 9))).astype(np.float32)
    two, one = "axes kernel, 2 part(s)", "axes kernel, 1 part(s)"
    cases = [("ReduceMean", "x", [1], 1, two), ("ReduceSum", "x", [1, 2], 0, two), ("ReduceMax", "x", [2, 3], 1, two),
             ("ReduceMin", "x", [0], 0, two), ("ReduceMean", "x", [0, 1, 2, 3], 0, one),
             ("ReduceProd", "p", [2], 1, one), ("ReduceSum", "d", [1], 1, one), ("ReduceMean", "x", [1, 3], 1, None)]
    nodes = [helper.make_node("Cast", ["p"], ["d"], to=onnx.TensorProto.DOUBLE)]
    inits, outs = [], []
    for k, (op, src, axes, keep, _) in enumerate(cases):
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), f"axes{k}"))
        nodes.append(helper.make_node(op, [src, f"axes{k}"], [f"y{k}"], name=f"r{k}", keepdims=keep))
        elem = onnx.TensorProto.DOUBLE if src == "d" else onnx.TensorProto.FLOAT
        outs.append(helper.make_tensor_value_info(f"y{k}", elem, None))
    ins = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape) for n, a in (("x", x), ("p", near_one))]
    graph = helper.make_graph(nodes, "reductions", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    feeds = {"x": x, "p": near_one}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    plan = tlc.compile(from_onnx(model)[0], opt_level=0, jit="eager", num_threads=2)
    for _ in range(2):
        got = plan.run(feeds)
        for k, w in enumerate(want):
            np.testing.assert_allclose(got[f"y{k}"], w, rtol=1e-5, atol=1e-5)
    notes = {s.name: s.notes for s in plan.stats().steps}
    for k, (*_, note) in enumerate(cases):
        if note and plan.options.threads < 2:
            note = note.replace("2 part(s)", "1 part(s)")
        assert notes[f"r{k}"] == ([note] if note else []), (k, notes[f"r{k}"])
    # NaN goes through max and min as through numpy's, in rows and in accumulated rows
    x[1, 3, 2, 5] = np.nan
    for op, ref in ((kreduce.MAX, np.maximum.reduce), (kreduce.MIN, np.minimum.reduce)):
        for axes in ((2, 3), (1,)):
            a, r, b = kreduce.axes_view(x.shape, list(axes))
            out = np.empty(a * b, np.float32)
            kreduce.reduce_serial(x, out, r, b, op)
            np.testing.assert_array_equal(out, ref(x, axis=axes).reshape(-1))


def test_concat_and_split_copy_blocks_of_rows(rng):
    """A Concat that the memory plan cannot join (a batch of 2: the inputs are no ranges of the output) and a Split
    along a later axis copy blocks of rows (``tlc.kernels.transpose.copy_block``), in two parts from 256 KiB at 2
    threads; float32 and int64, a constant input, an empty part, -1 axes; against onnxruntime, twice on one arena."""
    big = rng.standard_normal((2, 40, 64, 64), dtype=np.float32)          # 1.3 MB: two parts; small 0.8
    small = rng.standard_normal((2, 24, 64, 64), dtype=np.float32)
    ints = rng.integers(-5, 5, (3, 7, 5), dtype=np.int64)
    const = onnx.numpy_helper.from_array(np.arange(3 * 2 * 5, dtype=np.int64).reshape(3, 2, 5), "k")
    sizes = onnx.numpy_helper.from_array(np.array([10, 0, 54], np.int64), "sizes")
    nodes = [helper.make_node("Concat", ["big", "small"], ["cat"], name="cat", axis=1),
             helper.make_node("Split", ["cat", "sizes"], ["s0", "s1", "s2"], name="split", axis=1),
             helper.make_node("Concat", ["ints", "k", "ints"], ["icat"], name="icat", axis=-2),
             helper.make_node("Split", ["icat"], ["i0", "i1"], name="isplit", axis=-1, num_outputs=2)]
    elem = {np.float32: onnx.TensorProto.FLOAT, np.int64: onnx.TensorProto.INT64}
    graph = helper.make_graph(
        nodes, "blocks", [helper.make_tensor_value_info(n, elem[a.dtype.type], a.shape)
                          for n, a in (("big", big), ("small", small), ("ints", ints))],
        [helper.make_tensor_value_info(n, elem[t], None) for n, t in
         (("cat", np.float32), ("s0", np.float32), ("s1", np.float32), ("s2", np.float32), ("icat", np.int64),
          ("i0", np.int64), ("i1", np.int64))], [const, sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    feeds = {"big": big, "small": small, "ints": ints}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    plan = tlc.compile(from_onnx(model)[0], opt_level=0, jit="eager", num_threads=2)
    for _ in range(2):
        got = plan.run(feeds)
        for name, w in want.items():
            np.testing.assert_array_equal(got[name], w, err_msg=name)
    notes = {s.name: s.notes for s in plan.stats().steps}
    two = "blocks of rows, in 2 parts" if plan.options.threads >= 2 else "blocks of rows"
    assert notes == {"cat": [two], "split": [two], "icat": ["blocks of rows"], "isplit": ["blocks of rows"]}
