"""A 1x1 expansion conv and the 3x3 depthwise conv after it, in bands of rows: MobileNetV2's inverted residual
blocks without their widest tensor in memory.

Run one after the other, the expansion writes C_exp planes (96 x 112 x 112 floats at batch 1, 4.8 MB; 38 MB at
batch 8) that the depthwise conv reads back from L3 or memory. Here a part computes, band after band, the
expansion's rows that a band of the depthwise conv's output rows reads (``tlc_panel``: the input's planes read
in place, bias and clamp applied as it stores) into a scratch of ``SCRATCH_BYTES`` that stays in L2, then the
band's outputs from it (``tlc_dw3x3`` on the scratch: ``top`` says that the row above the band's first is
there, not padding). The rows a band shares with the next (two at stride 1, one at stride 2) move to the top of
the scratch instead of being computed again. Parts take runs of bands (of every image: ``units``), each with a
scratch of its own.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .panel import BIAS_ROWS, CLAMP, PANEL, depthwise_3x3_band, panel_strided

#: bytes of expanded rows a part's band may hold: half of one core's L2 on the Zen 4 (1 MB), with room for the
#: input's rows the expansion reads and the output rows the band writes
SCRATCH_BYTES = 384 << 10


def band_rows(channels: int, width: int, stride: int, ho: int) -> int:
    """Output rows a band computes: its expanded rows (``stride * rows + 2``) within ``SCRATCH_BYTES``."""
    rows = (SCRATCH_BYTES // max(1, channels * width * 4) - 2) // stride
    return max(1, min(ho, rows))


def scratch_elements(channels: int, width: int, stride: int, band: int) -> int:
    """float32 elements of one part's scratch: ``band`` output rows' expanded rows of every channel."""
    return channels * (band * stride + 2) * width


@njit(cache=True, nogil=True)
def chain_units(x, w1, b1, clamp1, wd, bd, clamp2, out, scratch, band, stride, u0, u1):
    """Units [u0, u1) (image ``u // bands``, band ``u % bands`` of ``band`` output rows) of ``out`` [N, C_exp, Ho,
    Wo] = depthwise(wd [C_exp, 9], bias bd, clamp2)(expansion(w1 [C_exp, C_in], bias b1, clamp1)(x [N, C_in, H,
    W])); ``clamp1``/``clamp2``: two float32 bounds, or empty for none; ``scratch``: ``scratch_elements``."""
    n_img, cin, h, width = x.shape
    cexp, ho, wo = out.shape[1], out.shape[2], out.shape[3]
    bands = (ho + band - 1) // band
    plane = (band * stride + 2) * width   # a channel's rows in the scratch
    sp = scratch.ctypes.data
    c1 = clamp1.ctypes.data if clamp1.size == 2 else 0
    c2 = clamp2.ctypes.data if clamp2.size == 2 else 0
    mode1 = BIAS_ROWS | (CLAMP if c1 != 0 else 0)
    prev_n, prev_a, prev_e = -1, 0, 0
    for u in range(u0, u1):
        n, j = u // bands, u % bands
        r0 = j * band
        r1 = min(ho, r0 + band)
        a = max(0, r0 * stride - 1)              # the expanded rows [a, e) the band reads
        e = min(h, (r1 - 1) * stride + 2)
        c0 = a
        if prev_n == n and prev_a <= a < prev_e:   # the rows the band before computed: moved to the top
            shift, keep = (a - prev_a) * width, (prev_e - a) * width
            for c in range(cexp):
                base = c * plane
                if shift >= keep:   # apart: one vector copy
                    scratch[base:base + keep] = scratch[base + shift:base + shift + keep]
                else:
                    for i in range(keep):
                        scratch[base + i] = scratch[base + shift + i]
            c0 = prev_e
        if e > c0:
            panel_strided(x.ctypes.data + (n * cin * h * width + c0 * width) * 4, h * width, PANEL,
                          w1.ctypes.data, cin, 1, sp + (c0 - a) * width * 4, plane, 1, cexp, cin, (e - c0) * width,
                          b1.ctypes.data, mode1, c1)
        top = r0 * stride - a
        depthwise_3x3_band(sp + top * width * 4, wd.ctypes.data, bd.ctypes.data,
                           out.ctypes.data + (n * cexp * ho * wo + r0 * wo) * 4, cexp, e - r0 * stride, width,
                           r1 - r0, wo, stride, c2, plane, ho * wo, top)
        prev_n, prev_a, prev_e = n, a, e


@njit(cache=True, nogil=True, parallel=True)
def _chain_parallel(x, w1, b1, clamp1, wd, bd, clamp2, out, scratch, band, stride, nparts):
    units = x.shape[0] * ((out.shape[2] + band - 1) // band)
    size = scratch.shape[0] // nparts
    for p in prange(nparts):
        chain_units(x, w1, b1, clamp1, wd, bd, clamp2, out, scratch[p * size:(p + 1) * size], band, stride,
                    units * p // nparts, units * (p + 1) // nparts)


def chain_run(x, w1, b1, clamp1, wd, bd, clamp2, out, scratch, band, stride, nparts) -> None:
    """The chain over every unit, in ``nparts`` parts on Numba's pool (one: on this thread); ``scratch``: ``nparts``
    times ``scratch_elements``."""
    if nparts > 1:
        _chain_parallel(x, w1, b1, clamp1, wd, bd, clamp2, out, scratch, band, stride, nparts)
    else:
        units = x.shape[0] * ((out.shape[2] + band - 1) // band)
        chain_units(x, w1, b1, clamp1, wd, bd, clamp2, out, scratch, band, stride, 0, units)


def compile_for(nparts: int) -> None:
    """Compile (or load) the chain's functions for the plan's argument types: a run on one tiny image."""
    f32 = np.float32
    x, out = np.zeros((1, 1, 4, 4), f32), np.zeros((1, 1, 4, 4), f32)
    clamp = np.zeros(2, f32)
    chain_run(x, np.zeros((1, 1), f32), np.zeros(1, f32), clamp, np.zeros((1, 9), f32), np.zeros(1, f32), clamp,
              out, np.zeros(nparts * scratch_elements(1, 4, 1, 4), f32), 4, 1, nparts)


def parts(units: int, threads: int) -> int:
    """Parts of the chain's units at ``threads`` threads: one a thread, no more than units."""
    return max(1, min(threads, units))


def reference(x, w1, b1, clamp1, wd, bd, clamp2, stride) -> np.ndarray:
    """The chain in numpy (for tests and benchmarks): the expansion, then the depthwise conv."""
    e = np.einsum("mc,nchw->nmhw", w1, x) + b1[None, :, None, None]
    if clamp1.size == 2:
        e = np.clip(e, clamp1[0], clamp1[1])
    n, c, h, w = e.shape
    ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
    p = np.pad(e, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, c, ho, wo), np.float64) + bd[None, :, None, None]
    for ki in range(3):
        for kj in range(3):
            y += p[:, :, ki:ki + stride * ho:stride, kj:kj + stride * wo:stride] * wd[None, :, 3 * ki + kj, None, None]
    if clamp2.size == 2:
        y = np.clip(y, clamp2[0], clamp2[1])
    return y.astype(np.float32)
