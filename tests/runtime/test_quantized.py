"""Quantized products: the integer kernels (``tlc.kernels.qgemm`` through ``tlc.runtime.quantized``) against the
op references bit for bit, the ``qdq`` rewrite (fires, refuses, numbers before and after), and the QDQ conv net
against onnxruntime. Few kernels compile (output int32 or bytes, one part or two); many cases share them. The VNNI
kernel (``tlc.kernels.qpanel``) on its own against numpy, and the products on it with its edges: a depth no
multiple of 4, columns no multiple of 16, rows no multiple of the tile, int8 and uint8 activations, weight zero
points per channel that the signed bytes absorb or leave as a row term."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tlc
from tlc.io.onnx import from_onnx
from tlc.kernels import qgemm, qpanel
from tlc.passes.rewrite import Tracer
from tlc.passes.rules import qdq
from tlc.passes.simplify import SimplifyPass
from tlc.runtime import ops as runtime_ops
from tlc.runtime import quantized

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import models  # noqa: E402  (tools/ is not a package)

ONNX_TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float32): TensorProto.FLOAT}


@pytest.fixture(autouse=True)
def quantized_ops():
    """The quantized entries in the runtime's op table (``tlc.runtime.ops`` reads it when a graph is lowered)."""
    with pytest.MonkeyPatch.context() as mp:
        for op, factory in quantized.CPU_OPS.items():
            mp.setitem(runtime_ops.CPU_OPS, op, factory)
        yield


def byte(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape, dtype=dtype)


def f32(value) -> np.ndarray:
    return np.asarray(value, np.float32)


def product_model(cases: list[tuple], feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """One node per case ``(op, name, [input: str graph input or array initializer or None], attrs)``."""
    nodes, inits = [], []
    for op, name, inputs, attrs in cases:
        names = []
        for k, value in enumerate(inputs):
            if value is None or isinstance(value, str):
                names.append(value or "")
            else:
                inits.append(numpy_helper.from_array(np.asarray(value), f"{name}_{k}"))
                names.append(f"{name}_{k}")
        nodes.append(helper.make_node(op, names, [name], name=name, **attrs))
    graph = helper.make_graph(
        nodes, "products", [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(c[1], TensorProto.UNDEFINED, None) for c in cases], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def kernel_cases(rng):
    feeds = {"xu": byte(rng, (2, 8, 9, 11), np.uint8), "xs": byte(rng, (1, 6, 7, 7), np.int8),
             "big": byte(rng, (1, 32, 28, 28), np.uint8), "au": byte(rng, (2, 3, 5, 40), np.uint8),
             "as": byte(rng, (7, 33), np.int8), "bt": byte(rng, (33, 5), np.int8)}
    wu8 = byte(rng, (12, 4, 3, 3), np.uint8)
    wi8 = byte(rng, (12, 4, 3, 3), np.int8)
    per_ch = (rng.random(12) * 2e-3 + 1e-4).astype(np.float32)
    bias = rng.integers(-20000, 20000, 12).astype(np.int32)
    cases = [
        ("QLinearConv", "qc_grouped", ["xu", f32(0.02), np.uint8(121), wi8, per_ch, np.zeros(12, np.int8), f32(0.05),
                                        np.uint8(7), bias], dict(group=2, pads=[1, 0, 2, 1], strides=[2, 1])),
        ("QLinearConv", "qc_dilated", ["xu", f32(0.01), np.uint8(0), wu8, f32(1e-3), byte(rng, 12, np.uint8),
                                        f32(0.3), np.int8(-3)], dict(group=2, dilations=[2, 3], pads=[2, 2, 2, 2])),
        ("QLinearConv", "qc_saturating", ["xs", f32(0.5), np.int8(-4), byte(rng, (5, 6, 3, 3), np.int8), f32(0.1),
                                           np.int8(0), f32(0.01), np.int8(0)], dict(auto_pad="SAME_UPPER")),
        ("QLinearConv", "qc_depthwise", ["xs", f32(0.02), np.int8(3), byte(rng, (6, 1, 3, 3), np.int8),
                                          (rng.random(6) * 0.01).astype(np.float32), np.zeros(6, np.int8),
                                          f32(0.04), np.uint8(128), bias[:6]], dict(group=6, pads=[1, 1, 1, 1])),
        ("QLinearConv", "qc_parallel", ["big", f32(0.02), np.uint8(128), byte(rng, (64, 32, 3, 3), np.int8),
                                         (rng.random(64) * 1e-3).astype(np.float32), np.zeros(64, np.int8),
                                         f32(0.2), np.uint8(100), bias.repeat(6)[:64]], dict(pads=[1, 1, 1, 1])),
        ("ConvInteger", "ci_zero", ["xu", wi8, np.uint8(200), np.int8(-5)], dict(group=2, strides=[1, 2])),
        ("ConvInteger", "ci_plain", ["xs", byte(rng, (3, 6, 1, 1), np.int8)], {}),
        ("ConvInteger", "ci_channel_zero", ["xu", wu8, None, byte(rng, 12, np.uint8)],
         dict(group=2, pads=[0, 1, 0, 1])),
        ("MatMulInteger", "mi_batched", ["au", byte(rng, (40, 9), np.uint8), np.uint8(17), byte(rng, 9, np.uint8)], {}),
        ("MatMulInteger", "mi_signed", ["as", byte(rng, (33, 4), np.int8), np.int8(-128)], {}),
        ("MatMulInteger", "mi_runtime_b", ["as", "bt"], {}),   # B is no constant: the reference runs it
        ("QLinearMatMul", "qm_columns", ["au", f32(0.03), np.uint8(130), byte(rng, (40, 16), np.int8),
                                         (rng.random(16) * 0.01).astype(np.float32), np.zeros(16, np.int8),
                                         f32(0.02), np.int8(0)], {}),
        ("QLinearMatMul", "qm_signed", ["as", f32(0.1), np.int8(1), byte(rng, (33, 3), np.uint8), f32(0.02),
                                        np.uint8(128), f32(0.5), np.uint8(128)], {}),
    ]
    return cases, feeds


def test_kernels_equal_the_references_exactly(rng):
    cases, feeds = kernel_cases(rng)
    graph = from_onnx(product_model(cases, feeds))[0]
    expected = tlc.reference.run(graph, feeds)
    plan = tlc.compile(graph, opt_level=0, jit="eager", num_threads=2)
    for _ in range(2):   # the second run reuses the arena
        got = plan.run(feeds)
        for name, want in expected.items():
            assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
            np.testing.assert_array_equal(got[name], want, err_msg=name)
    stats = plan.stats()
    text = str(stats)
    assert " 0 failed" in text, text   # every kernel compiled: no fallback gave the equal results
    assert text.count("integer product") == len(cases) - 1, text
    assert "2 part(s)" in text, text               # qc_parallel ran in parts
    assert "not a constant" in text, text          # mi_runtime_b on the reference, with the reason


def test_vnni_kernel_equals_numpy(rng):
    if not qpanel.available():
        pytest.skip(qpanel.REASON)
    from numba import njit

    @njit(nogil=True)
    def product(packed, a, lda, c, ldc, rows, k, n, a_xor, init):
        qpanel.qpanel(packed.ctypes.data, a.ctypes.data, lda, c.ctypes.data, ldc, rows, k, n, a_xor, init.ctypes.data)

    for rows, k, n, a_xor in [(7, 33, 5, 0), (13, 70, 130, 0x80808080), (6, 4, 64, 0), (1, 3, 17, 0x80808080),
                              (20, 9, 65, 0)]:
        a = byte(rng, (rows, k + 3), np.uint8)   # rows 3 bytes longer than the depth: lda != k
        b = byte(rng, (k, n), np.int8)
        init = np.zeros(qpanel.padded(n), np.int32)
        init[:n] = rng.integers(-2**31, 2**31 - 1, n)
        c = np.full((rows, n + 1), 7, np.int32)   # a column past N: never written
        product(qpanel.pack(b), a, k + 3, c, n + 1, rows, k, n, a_xor, init)
        want = ((a[:, :k] ^ (a_xor & 255)).astype(np.int64) @ b.astype(np.int64) + init[:n]).astype(np.int32)
        np.testing.assert_array_equal(c[:, :n], want, err_msg=f"{rows} x {k} x {n}")
        assert (c[:, n] == 7).all()


def test_transposed_vnni_kernel_equals_numpy(rng):
    """C = W A^T + init on ``qpanel_t``: A^T's groups of four rows at offsets from a table (here reversed, apart
    by more than a panel), a last panel of fewer columns stored under masks."""
    if not qpanel.available():
        pytest.skip(qpanel.REASON)
    from numba import njit

    @njit(nogil=True)
    def product(w, ldw, p, offsets, c, ldc, rows, k, n, init):
        qpanel.qpanel_t(w.ctypes.data, ldw, p.ctypes.data, offsets.ctypes.data, c.ctypes.data, ldc, rows, k, n,
                        init.ctypes.data)

    for rows, k, n in [(7, 36, 5), (13, 8, 130), (6, 4, 64), (1, 12, 17), (20, 16, 65)]:
        w = byte(rng, (rows, k + 4), np.int8)   # rows 4 bytes longer than the depth
        a = byte(rng, (k, n), np.uint8)
        stride = 4 * (-(-n // 64) * 64) + 256   # bytes between A^T's groups
        groups = k // 4
        p = np.zeros(groups * stride, np.uint8)
        offsets = np.array([(groups - 1 - g) * stride for g in range(groups)], np.int64)
        for g in range(groups):
            at = offsets[g]
            p[at:at + 4 * n] = a[4 * g:4 * g + 4].T.reshape(-1)
        init = rng.integers(-2**31, 2**31 - 1, rows).astype(np.int32)
        c = np.full((rows, n + 1), 7, np.int32)
        product(w, k + 4, p, offsets, c, n + 1, rows, k, n, init)
        want = (w[:, :k].astype(np.int64) @ a.astype(np.int64) + init[:, None]).astype(np.int32)
        np.testing.assert_array_equal(c[:, :n], want, err_msg=f"{rows} x {k} x {n}")
        assert (c[:, n] == 7).all()


def vnni_cases(rng):
    """Products on the VNNI kernel's edges (see the module docstring)."""
    feeds = {"a8": byte(rng, (13, 37), np.int8), "au": byte(rng, (2, 7, 38), np.uint8),
             "x8": byte(rng, (2, 12, 9, 10), np.int8), "xu": byte(rng, (1, 19, 7, 6), np.uint8),
             "x5": byte(rng, (1, 5, 6, 7), np.uint8)}
    per_col = (rng.random(70) * 1e-2 + 1e-3).astype(np.float32)
    cases = [
        ("QLinearMatMul", "v_mm_rowterm", ["a8", f32(0.05), np.int8(-9), byte(rng, (37, 70), np.uint8), per_col,
                                           byte(rng, 70, np.uint8), f32(0.4), np.uint8(100)], {}),
        ("QLinearMatMul", "v_mm_absorbed", ["au", f32(0.03), np.uint8(131), rng.integers(60, 190, (38, 21))
                                            .astype(np.uint8), f32(0.01), np.uint8(125), f32(0.2), np.int8(3)], {}),
        ("MatMulInteger", "v_mi_signed", ["a8", byte(rng, (37, 17), np.int8), np.int8(5), byte(rng, 17, np.int8)], {}),
        ("ConvInteger", "v_ci_1x1", ["x8", byte(rng, (20, 12, 1, 1), np.int8), np.int8(-3)], {}),
        ("ConvInteger", "v_ci_1x1_rowterm", ["x8", byte(rng, (20, 12, 1, 1), np.uint8), np.int8(-3), np.uint8(200)],
         {}),
        ("QLinearConv", "v_qc_group_s2", ["x8", f32(0.02), np.int8(-4), byte(rng, (10, 6, 3, 3), np.int8),
                                          (rng.random(10) * 1e-3).astype(np.float32), np.zeros(10, np.int8),
                                          f32(0.1), np.int8(5), rng.integers(-999, 999, 10).astype(np.int32)],
         dict(group=2, pads=[0, 1, 2, 1], strides=[2, 2])),
        ("QLinearConv", "v_qc_uint8_w", ["x8", f32(0.02), np.int8(4), byte(rng, (18, 6, 3, 3), np.uint8),
                                         (rng.random(18) * 1e-3).astype(np.float32), byte(rng, 18, np.uint8),
                                         f32(0.1), np.uint8(128), rng.integers(-999, 999, 18).astype(np.int32)],
         dict(group=2, pads=[1, 2, 0, 1], strides=[2, 1])),
        ("ConvInteger", "v_ci_5", ["x5", byte(rng, (3, 5, 3, 3), np.int8), np.uint8(9)], dict(pads=[1, 1, 1, 1])),
        ("QLinearConv", "v_qc_odd", ["xu", f32(0.02), np.uint8(77), byte(rng, (20, 19, 3, 2), np.int8),
                                     (rng.random(20) * 1e-3).astype(np.float32), np.zeros(20, np.int8), f32(0.3),
                                     np.int8(-2)], dict(pads=[1, 0, 1, 1], dilations=[2, 1])),
    ]
    return cases, feeds


def test_vnni_products_equal_the_references_exactly(rng):
    cases, feeds = vnni_cases(rng)
    graph = from_onnx(product_model(cases, feeds))[0]
    expected = tlc.reference.run(graph, feeds)
    for threads in (1, 2):
        plan = tlc.compile(graph, opt_level=0, jit="eager", num_threads=threads)
        got = plan.run(feeds)
        for name, want in expected.items():
            assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
            np.testing.assert_array_equal(got[name], want, err_msg=name)
    text = str(plan.stats())
    assert " 0 failed" in text, text
    if qpanel.available():
        assert text.count("VNNI int8 kernel") == len(cases), text
        # v_mm_rowterm, v_mi_signed, v_ci_1x1_rowterm, v_qc_uint8_w: W - zb does not fit a signed byte
        assert text.count("row term") == 4 and "channels-last rows" in text, text
        assert "an im2row of the planes" in text, text   # v_qc_uint8_w: 6 channels a group
        # the other convs: transposed (v_ci_1x1: the interleaved input is its one phase plane; the channels of
        # v_qc_group_s2, v_ci_5, v_qc_odd leave 2, 1, 3 in their last word)
        assert text.count("transposed on phase planes") == 4, text
    else:
        assert text.count(qpanel.REASON) == len(cases), text


def test_vnni_exactness_bound():
    assert qgemm.vnni_exact(10**6, 255, 255, requant=False)          # int32 outputs wrap as the reference does
    assert qgemm.vnni_exact(33025, 255, 255, requant=True)
    assert not qgemm.vnni_exact(33026, 255, 255, requant=True)       # sums could pass 2^31: the float path


# ---------------------------------------------------------------------- depthwise, QuantizeLinear, DequantizeLinear
def depthwise_cases(rng):
    """Convolutions with one input channel a group (``tlc.kernels.qdw``): strides, pads, dilations, a channel
    multiplier, int8 and uint8 on both sides, weight parameters per channel, int32 outputs, one run in parts."""
    feeds = {"xs": byte(rng, (1, 6, 9, 11), np.int8), "xu": byte(rng, (2, 8, 9, 11), np.uint8),
             "wide": byte(rng, (1, 64, 48, 48), np.uint8)}
    scales = (rng.random(64) * 4e-3 + 1e-4).astype(np.float32)
    bias = rng.integers(-3000, 3000, 64).astype(np.int32)
    cases = [
        ("QLinearConv", "dw_strided", ["xs", f32(0.02), np.int8(-7), byte(rng, (6, 1, 3, 3), np.int8), scales[:6],
                                       np.zeros(6, np.int8), f32(0.03), np.uint8(120), bias[:6]],
         dict(group=6, strides=[2, 1], pads=[1, 0, 2, 1])),
        ("QLinearConv", "dw_dilated", ["xu", f32(0.01), np.uint8(131), byte(rng, (8, 1, 3, 3), np.uint8), scales[:8],
                                       byte(rng, 8, np.uint8), f32(0.2), np.int8(5)],
         dict(group=8, dilations=[2, 3], pads=[2, 2, 2, 2])),
        ("QLinearConv", "dw_multiplier", ["xu", f32(0.05), np.uint8(0), byte(rng, (16, 1, 5, 5), np.int8), f32(2e-3),
                                          np.int8(3), f32(0.1), np.uint8(128), bias[:16]],
         dict(group=8, strides=[2, 2], auto_pad="SAME_UPPER")),
        ("QLinearConv", "dw_s2", ["xu", f32(0.02), np.uint8(120), byte(rng, (8, 1, 3, 3), np.int8), scales[:8],
                                  np.zeros(8, np.int8), f32(0.05), np.uint8(128), bias[:8]],
         dict(group=8, strides=[2, 2], pads=[1, 0, 1, 1])),
        ("ConvInteger", "dw_s2_int32", ["xs", byte(rng, (6, 1, 3, 3), np.int8), np.int8(3)],
         dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 2])),
        ("QLinearConv", "dw_saturating", ["xs", f32(0.5), np.int8(0), byte(rng, (6, 1, 1, 2), np.int8), f32(0.1),
                                          np.int8(0), f32(0.01), np.int8(0)], dict(group=6, strides=[1, 3])),
        ("ConvInteger", "dw_int32", ["xu", byte(rng, (8, 1, 3, 3), np.uint8), np.uint8(100), byte(rng, 8, np.uint8)],
         dict(group=8, pads=[0, 1, 1, 0], strides=[1, 2])),
        ("QLinearConv", "dw_parallel", ["wide", f32(0.02), np.uint8(128), byte(rng, (64, 1, 3, 3), np.int8), scales,
                                        np.zeros(64, np.int8), f32(0.05), np.uint8(128), bias],
         dict(group=64, pads=[1, 1, 1, 1])),
    ]
    return cases, feeds


def test_depthwise_equals_the_references_exactly(rng):
    cases, feeds = depthwise_cases(rng)
    graph = from_onnx(product_model(cases, feeds))[0]
    expected = tlc.reference.run(graph, feeds)
    for threads in (1, 2):
        plan = tlc.compile(graph, opt_level=0, jit="eager", num_threads=threads)
        for _ in range(2):   # the second run reuses the arena and the scratch
            got = plan.run(feeds)
            for name, want in expected.items():
                assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
                np.testing.assert_array_equal(got[name], want, err_msg=name)
        text = str(plan.stats())
        assert " 0 failed" in text, text
        assert text.count("depthwise int32 kernel") == len(cases), text
    assert "depthwise int32 kernel, 2 part(s)" in text, text   # dw_parallel: 1.3M multiply-adds


def linear_model(cases: list[tuple], feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    model = product_model(cases, feeds)
    model.opset_import[0].version = 21   # blocked quantization, int4
    return model


def test_quantize_dequantize_equal_the_references_exactly(rng):
    x = (rng.standard_normal((2, 5, 6, 7)) * 4).astype(np.float32)
    x.flat[:10] = [0.5, 1.5, 2.5, -0.5, -2.5, 1e9, -1e9, np.inf, -np.inf, 127.5]   # ties, saturation
    per_axis = (rng.random(5) * 0.1 + 0.02).astype(np.float32)
    per_last = (rng.random(7) * 0.1 + 0.02).astype(np.float32)
    feeds = {"x": x, "qu": byte(rng, (2, 5, 6, 7), np.uint8), "qs": byte(rng, (2, 5, 6, 7), np.int8),
             "q32": rng.integers(-1000, 1000, (2, 5, 6, 7)).astype(np.int32)}
    native = [
        ("QuantizeLinear", "q_tensor_u8", ["x", f32(0.5), np.uint8(128)], {}),
        ("QuantizeLinear", "q_tensor_default", ["x", f32(1.0)], {}),                       # uint8, zero 0
        ("QuantizeLinear", "q_dtype_attr", ["x", f32(0.25)], dict(output_dtype=TensorProto.INT8)),
        ("QuantizeLinear", "q_axis_s8", ["x", per_axis, rng.integers(-9, 9, 5).astype(np.int8)], dict(axis=1)),
        ("QuantizeLinear", "q_last_u8", ["x", per_last, byte(rng, 7, np.uint8)], dict(axis=-1)),
        ("DequantizeLinear", "dq_tensor_u8", ["qu", f32(0.03), np.uint8(131)], {}),
        ("DequantizeLinear", "dq_tensor_s8", ["qs", f32(0.7)], {}),
        ("DequantizeLinear", "dq_axis_s8", ["qs", per_axis, rng.integers(-9, 9, 5).astype(np.int8)], dict(axis=1)),
        ("DequantizeLinear", "dq_last_u8", ["qu", per_last, byte(rng, 7, np.uint8)], dict(axis=-1)),
    ]
    reference = [   # the reference runs them, with the reason in stats()
        ("QuantizeLinear", "q_int16", ["x", f32(0.01), np.int16(3)], {}),
        ("QuantizeLinear", "q_blocked", ["x", np.full((2, 5, 6, 4), 0.1, np.float32)], dict(axis=3, block_size=2)),
        ("DequantizeLinear", "dq_int32", ["q32", f32(0.01)], {}),
    ]
    graph = from_onnx(linear_model(native + reference, feeds))[0]
    expected = tlc.reference.run(graph, feeds)
    plan = tlc.compile(graph, opt_level=0, jit="eager", num_threads=1)
    got = plan.run(feeds)
    for name, want in expected.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    text = str(plan.stats())
    assert text.count("quantize kernel") == len(native), text
    assert "float32 to int16 is not native" in text and "blocked quantization" in text, text
    assert "int32 to float32 is not native" in text, text


# ---------------------------------------------------------------------------- the rewrite
def qdq_model(op: str = "Conv", relu: bool = False, y_zero: int = 0, w_axis: int = 0, bias: bool = True,
              extra_add: bool = False) -> onnx.ModelProto:
    """x -> Q -> DQ -> op(DQ(w_q), DQ(b_q)) [-> Relu] [-> Add] -> Q -> DQ -> y, as quantizers write it."""
    rng = np.random.default_rng(3)
    b = models._Builder(seed=3)
    h = models._qdq(b, "x", 8 / 255, 128)
    if op == "Conv":
        w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.2
        wq, w_scale = models._qdq_weight(b, w, axis=w_axis)
        inputs = [h, wq]
        if bias:
            b_scale = (np.float32(8 / 255) * w_scale).astype(np.float32)
            bq = np.rint(0.1 * rng.standard_normal(8) / b_scale).astype(np.int32)
            inputs.append(b.op("DequantizeLinear", b.const(bq), b.const(b_scale), b.const(np.zeros(8, np.int32)),
                               axis=0))
        y = b.op("Conv", *inputs, pads=[1, 1, 1, 1])
        shape, out = [1, 4, 6, 6], [1, 8, 6, 6]
    else:
        w = rng.standard_normal((12, 5)).astype(np.float32) * 0.3
        y = b.op("MatMul", h, models._qdq_weight(b, w, axis=w_axis)[0])
        shape, out = [2, 3, 12], [2, 3, 5]
    if extra_add:
        y = b.op("Add", y, b.const(np.float32(0.25)))
    if relu:
        y = b.op("Relu", y)
    s, z = b.const(f32(0.05)), b.const(np.array(y_zero, np.uint8))
    b.rename(b.op("DequantizeLinear", b.op("QuantizeLinear", y, s, z), s, z), "y")
    return b.model("qdq", [models._vi("x", shape)], [models._vi("y", out)])


def rewritten(model: onnx.ModelProto, passes: str | None) -> tuple[Counter, Tracer, np.ndarray, np.ndarray]:
    """(ops after, tracer, output before, output after) of ``passes`` (None: -O2) on the reference executor."""
    graph = from_onnx(model)[0]
    tracer = Tracer()
    if passes is None:
        after, _ = tlc.optimize(graph, opt_level=2)
    else:
        after, _ = tlc.optimize(graph, passes=passes)
    probe = tlc.optimize(graph, passes="fold,dce")[0] if passes is None else graph.copy()
    SimplifyPass(tlc.PassOptions(opt_level=2), tracer=tracer).run(probe)
    feeds = models.random_feeds(model)
    before = tlc.reference.run(graph, feeds)["y"]
    return Counter(n.op for n in after.nodes()), tracer, before, tlc.reference.run(after, feeds)["y"]


@pytest.mark.parametrize("passes", ["simplify", None], ids=["dq-weights", "folded-weights"])
@pytest.mark.parametrize("op,relu,bias,fused", [("Conv", True, True, "QLinearConv"),
                                                ("Conv", False, False, "QLinearConv"),
                                                ("MatMul", False, False, "QLinearMatMul"),
                                                ("MatMul", True, False, "QLinearMatMul")])
def test_qdq_rewrite_fires(passes, op, relu, bias, fused):
    model = qdq_model(op, relu=relu, bias=bias, w_axis=0 if op == "Conv" else 1)
    ops, tracer, before, after = rewritten(model, passes)
    assert ops[fused] == 1 and ops[op] == 0 and ops["Relu"] == 0, ops
    assert ops["QuantizeLinear"] == 1 and ops["DequantizeLinear"] == 1, ops   # the input's Q, the output's DQ
    assert any(rule.startswith("qdq-") for rule, _ in tracer.applied), tracer.report()
    assert np.abs(after - before).max() <= 0.05 + 1e-6   # within one output quantization step


@pytest.mark.parametrize("kwargs,reason", [
    (dict(op="Conv", relu=True, y_zero=128), "saturation is not the Relu"),
    (dict(op="Conv", w_axis=1, bias=False), "quantized along axis 1"),
    (dict(op="MatMul", w_axis=0), "quantized along axis 0"),
    (dict(op="MatMul", w_axis=1, extra_add=True), None),   # MatMul + Add: QLinearMatMul has no bias
])
def test_qdq_rewrite_refuses(kwargs, reason):
    model = qdq_model(**kwargs)
    ops, tracer, before, after = rewritten(model, "simplify")
    assert ops["QLinearConv"] == 0 and ops["QLinearMatMul"] == 0, ops
    if reason is not None:
        assert reason in tracer.report(), tracer.report()
    np.testing.assert_array_equal(before, after)


def test_recover_int8_only_when_exact(rng):
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    scale = (np.abs(w).reshape(6, -1).max(axis=1) / 127).astype(np.float32)
    q = np.rint(w / scale[:, None, None, None]).astype(np.int8)
    folded = q.astype(np.float32) * scale[:, None, None, None]
    found = qdq.recover_int8(folded, 0)
    assert found is not None
    q2, s2, z2 = found
    np.testing.assert_array_equal(q2.astype(np.float32) * s2[:, None, None, None], folded)
    assert not z2.any()
    assert qdq.recover_int8(w, 0) is None            # float weights that no int8 grid reproduces
    folded[0, 0, 0, 0] = np.nextafter(folded[0, 0, 0, 0], np.float32(9))
    assert qdq.recover_int8(folded, 0) is None       # one weight off by an ulp


# ---------------------------------------------------------------------------- the QDQ model
def test_qdq_convnet_s_convs_run_in_parts_at_batch_8_and_whole_at_batch_1():
    """At 2 threads the QDQ net's VNNI convs take parts from ``VNNI_PARALLEL_MIN_MACS`` (its 3 -> 16 3x3 at batch
    8: 3.5M multiply-adds, ~100 us) and its depthwise conv from ``QDW_PARALLEL_MIN_MACS`` (0.6M at batch 8), with
    the one-thread plan's very integers; at batch 1 (0.4M and 74K) they stay whole."""
    for batch, parts in ((8, 2), (1, 1)):
        model = models.qdq_convnet(batch=batch)
        feeds = models.random_feeds(model, batch)
        graph = from_onnx(model)[0]
        plans = [tlc.compile(graph, opt_level=2, jit="eager", num_threads=t) for t in (1, 2)]
        one, two = (p.run(feeds)["y"] for p in plans)
        np.testing.assert_array_equal(two, one)
        notes = [s.notes[0] for s in plans[1].stats().steps if s.op == "QLinearConv"]
        assert len(notes) == 4 and sum(f"{parts} part(s)" in n for n in notes) >= 3, notes
        assert any(f"depthwise int32 kernel, {parts} part(s)" in n for n in notes), notes


def test_qdq_convnet_runs_as_integers_and_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = models.qdq_convnet(small=True)
    feeds = models.random_feeds(model)
    graph = from_onnx(model)[0]
    plan = tlc.compile(graph, opt_level=2, jit="eager", num_threads=1)
    got = plan.run(feeds)["y"]
    text = str(plan.stats())
    assert text.count("QLinearConv") == 4 and text.count("QLinearMatMul") == 1, text
    assert "Conv " not in text.replace("QLinearConv ", ""), text
    reference = tlc.reference.run(graph, feeds)["y"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)[0]
    step = 16 / 255   # the logits' quantization step
    assert np.abs(got - reference).max() <= step + 1e-6
    assert np.abs(got - theirs).max() <= step + 1e-6
