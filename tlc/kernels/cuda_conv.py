"""Library CUDA kernels of convolutions (hand-written ``cuda.jit``, not generated from a graph): the direct
depthwise 2-D convolution, one thread per output element.

A depthwise convolution (group == C == M: one input and one output channel a group) as columns and a batched
product is a 1 x (kh*kw) by (kh*kw) x positions product per (image, channel): cuBLAS's worst case. Here each
thread computes whole outputs instead, walking the flat NCHW output (``ow`` fastest, so a warp reads neighbouring
input columns and writes neighbouring outputs) over a grid-stride loop; it reads the input with bounds checks in
place of padding (no padded copy), the channel's taps and its bias, and accumulates in the input's dtype. The
geometry (kernel size, strides, dilations, begin pads) is passed as ints, so one compiled kernel a dtype serves
every depthwise convolution; ``depthwise_conv2d`` compiles it ahead of the first launch and fixes the grid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numba
import numpy as np
from numba import cuda, types

from .cuda import MAX_BLOCKS, THREADS, device_view
from .cudalib import SIMULATED

#: dtypes the depthwise kernel computes in
DEPTHWISE_DTYPES = frozenset({"float32", "float64"})
#: (blocks, threads) at most under Numba's simulator, which runs every thread as a Python thread: the grid-stride
#: loop covers the rest
_SIMULATED_GRID = (2, 4)


@cuda.jit
def _depthwise_kernel(x, w, bias, out, kh, kw, sh, sw, dh, dw, ph, pw):
    """out[n, c, oh, ow] = bias[c] + sum over (i, j) of x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] * w[c, 0, i, j],
    taps outside the input skipped (zero padding)."""
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    out_h, out_w = out.shape[2], out.shape[3]
    count = out.shape[0] * channels * out_h * out_w
    for flat in range(cuda.grid(1), count, cuda.gridsize(1)):
        rest = flat // out_w
        ow = flat - rest * out_w
        plane = rest // out_h
        oh = rest - plane * out_h
        n = plane // channels
        c = plane - n * channels
        acc = bias[c]
        top, left = oh * sh - ph, ow * sw - pw
        for i in range(kh):
            ih = top + i * dh
            if 0 <= ih < height:
                for j in range(kw):
                    iw = left + j * dw
                    if 0 <= iw < width:
                        acc += x[n, c, ih, iw] * w[c, 0, i, j]
        out[n, c, oh, ow] = acc


def _signature(dtype: np.dtype) -> tuple:
    element = numba.from_dtype(dtype)
    plane = types.Array(element, 4, "C")
    return (plane, plane, types.Array(element, 1, "C"), plane) + (types.int64,) * 8


def depthwise_conv2d(x_shape: Sequence[int], w_shape: Sequence[int], out_shape: Sequence[int],
                     strides: Sequence[int], dilations: Sequence[int], begins: Sequence[int],
                     dtype) -> Callable:
    """The launch of a depthwise 2-D convolution of these shapes: ``fn(x, w, bias_or_None, out)`` on device arrays
    (Numba device arrays, CuPy arrays through ``device_view``, numpy arrays under the simulator), C-contiguous,
    x (N, C, H, W), w (C, 1, kh, kw), bias (C,), out (N, C, OH, OW). ``begins`` are the top and left pads; the
    bottom and right ones only shape ``out``. The kernel is compiled here for ``dtype`` (once a dtype: later
    convolutions find it compiled); a missing bias reads zeros copied to the device here."""
    dtype = np.dtype(dtype)
    n, c, _, _ = x_shape
    if dtype.name not in DEPTHWISE_DTYPES or len(x_shape) != 4 or tuple(w_shape[:2]) != (c, 1) \
            or tuple(out_shape[:2]) != (n, c):
        raise ValueError(f"no depthwise kernel for X {list(x_shape)}, W {list(w_shape)}, Y {list(out_shape)} "
                         f"of {dtype}")
    count = math.prod(out_shape)
    if count == 0:
        return _nothing
    if not SIMULATED:
        _depthwise_kernel.compile(_signature(dtype))
    zeros = np.zeros(c, dtype) if SIMULATED else cuda.to_device(np.zeros(c, dtype))
    geometry = (*(int(k) for k in w_shape[2:]), *(int(s) for s in strides), *(int(d) for d in dilations),
                *(int(b) for b in begins))
    if SIMULATED:
        grid = (min(_SIMULATED_GRID[0], -(-count // _SIMULATED_GRID[1])), _SIMULATED_GRID[1])

        def launch(x, w, bias, out) -> None:
            # NOTE: the simulator's ``kernel[grid]`` sets the grid on the kernel object itself: set at each launch
            _depthwise_kernel[grid](x, w, zeros if bias is None else bias, out, *geometry)

        return launch
    configured = _depthwise_kernel[min(MAX_BLOCKS, -(-count // THREADS)), THREADS]

    def launch(x, w, bias, out) -> None:
        configured(device_view(x), device_view(w), zeros if bias is None else device_view(bias), device_view(out),
                   *geometry)

    return launch


def _nothing(x, w, bias, out) -> None:
    """The launch of a convolution with no output element: none."""
