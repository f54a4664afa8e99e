"""The direct depthwise convolution kernel (``tlc.kernels.cuda_conv``) under Numba's simulator (tests/conftest.py
sets NUMBA_ENABLE_CUDASIM=1): its launch against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tlc.kernels.cuda_conv import depthwise_conv2d

cuda = pytest.importorskip("numba.cuda")
pytestmark = pytest.mark.skipif(not cuda.is_available(), reason="no CUDA device and no simulator")


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
