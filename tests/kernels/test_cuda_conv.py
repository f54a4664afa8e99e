"""The direct depthwise convolution kernel (``tlc.kernels.cuda_conv``) under Numba's simulator (tests/conftest.py
sets NUMBA_ENABLE_CUDASIM=1): depthwise convolutions of the cuda target's plans against the CPU plan (a library
kernel, so it runs with jit="off" too), other convolutions left to columns, and the launch itself against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import tlc
from tlc.kernels.cuda_conv import depthwise_conv2d

cuda = pytest.importorskip("numba.cuda")
pytestmark = pytest.mark.skipif(not cuda.is_available(), reason="no CUDA device and no simulator")

DIRECT = "direct depthwise kernel"


def conv_graph(dtype: str, x_shape, w_shape, group: int, bias: bool, **attrs) -> tlc.Graph:
    g = tlc.Graph("conv")
    rng = np.random.default_rng(0)
    inputs = [g.input("x", dtype, x_shape), g.constant(rng.standard_normal(w_shape).astype(dtype))]
    if bias:
        inputs.append(g.constant(rng.standard_normal(w_shape[0]).astype(dtype)))
    g.output(g.add_node("Conv", inputs, group=group, **attrs), "y")
    return g


def device_against_cpu(g: tlc.Graph, x_shape, dtype: str) -> str:
    """Runs ``g`` as a cuda plan and a CPU plan; returns the conv step's note."""
    feeds = {"x": np.random.default_rng(1).standard_normal(x_shape).astype(dtype)}
    want = tlc.compile(g, jit="off").run(feeds)["y"]
    plan = tlc.compile(g, target="cuda", jit="off")
    got = plan.run(feeds)["y"]
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    (step,) = plan.stats().steps
    return step.reason


GEOMETRIES = {
    "3x3 stride 1 pad 1": dict(kernel=3, strides=[1, 1], pads=[1, 1, 1, 1]),
    "3x3 stride 2 pads 0,0,1,1": dict(kernel=3, strides=[2, 2], pads=[0, 0, 1, 1]),
    "5x5 dilation 2": dict(kernel=5, dilations=[2, 2], pads=[4, 4, 4, 4]),
    "1x1": dict(kernel=1),
    "3x2 strides 1,2 pads 1,2,0,1": dict(kernel=(3, 2), strides=[1, 2], pads=[1, 2, 0, 1]),
    "3x3 same upper": dict(kernel=3, strides=[2, 2], auto_pad="SAME_UPPER"),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_depthwise_convs_run_the_direct_kernel_and_match_the_cpu_plan(name, dtype, bias):
    geometry = dict(GEOMETRIES[name])
    kernel = geometry.pop("kernel")
    kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    x_shape = (2, 3, 8, 7)
    g = conv_graph(dtype, x_shape, (3, 1, kh, kw), 3, bias, **geometry)
    assert DIRECT in device_against_cpu(g, x_shape, dtype)


def test_other_convs_stay_columns():
    grouped = conv_graph("float32", (1, 4, 5, 5), (4, 2, 3, 3), 2, True, pads=[1, 1, 1, 1])
    assert DIRECT not in device_against_cpu(grouped, (1, 4, 5, 5), "float32")
    multiplier = conv_graph("float32", (1, 2, 5, 5), (4, 1, 3, 3), 2, False)   # two outputs a channel
    assert DIRECT not in device_against_cpu(multiplier, (1, 2, 5, 5), "float32")
    one_d = conv_graph("float32", (1, 3, 6), (3, 1, 3), 3, False)
    assert DIRECT not in device_against_cpu(one_d, (1, 3, 6), "float32")


def depthwise_reference(x, w, bias, out_hw, strides, dilations, begins):
    """numpy: the input zero-padded, then one strided slice a tap."""
    (kh, kw), (oh, ow) = w.shape[2:], out_hw
    extent = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out_hw, strides, (kh, kw), dilations)]
    p = np.zeros(x.shape[:2] + tuple(max(e, b + n) for e, b, n in zip(extent, begins, x.shape[2:])), x.dtype)
    p[:, :, begins[0]:begins[0] + x.shape[2], begins[1]:begins[1] + x.shape[3]] = x
    out = np.zeros(x.shape[:2] + (oh, ow), x.dtype) + (0 if bias is None else bias[:, None, None])
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilations[0], j * dilations[1]
            rows = slice(top, top + (oh - 1) * strides[0] + 1, strides[0])
            cols = slice(left, left + (ow - 1) * strides[1] + 1, strides[1])
            out += p[:, :, rows, cols] * w[:, 0, i, j][:, None, None]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_launch_matches_numpy(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 9, 6)).astype(dtype)
    w = rng.standard_normal((4, 1, 3, 2)).astype(dtype)
    bias = rng.standard_normal(4).astype(dtype)
    for out_hw, strides, dilations, begins, b in [((9, 6), (1, 1), (1, 1), (1, 0), bias),
                                                  ((5, 3), (2, 2), (1, 2), (1, 1), None),
                                                  ((3, 5), (3, 1), (2, 1), (0, 0), bias)]:
        out = np.full(x.shape[:2] + out_hw, np.nan, dtype)
        launch = depthwise_conv2d(x.shape, w.shape, out.shape, strides, dilations, begins, dtype)
        launch(x, w, b, out)
        want = depthwise_reference(x, w, b, out_hw, strides, dilations, begins)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_a_launch_with_no_output_does_nothing_and_other_dtypes_are_refused():
    launch = depthwise_conv2d((0, 3, 4, 4), (3, 1, 3, 3), (0, 3, 2, 2), (1, 1), (1, 1), (0, 0), np.float32)
    launch(np.zeros((0, 3, 4, 4), np.float32), np.zeros((3, 1, 3, 3), np.float32), None,
           np.zeros((0, 3, 2, 2), np.float32))
    with pytest.raises(ValueError, match="no depthwise kernel"):
        depthwise_conv2d((1, 3, 4, 4), (3, 1, 3, 3), (1, 3, 2, 2), (1, 1), (1, 1), (0, 0), np.float16)


def test_the_device_signature_is_what_numba_compiles():
    """The simulator never compiles: the signature a GPU compiles ahead of the first launch is checked here (a
    wrong type name in it failed on an H100 only)."""
    import numba
    from numba.core.sigutils import normalize_signature

    from tlc.kernels.cuda_conv import _signature

    for dtype in ("float32", "float64"):
        sig = _signature(np.dtype(dtype))
        args, _ = normalize_signature(sig)
        assert len(args) == 12 and args[0] == numba.types.Array(numba.from_dtype(np.dtype(dtype)), 4, "C")
