"""Resize of an image's planes (the last two axes of NCHW) in one kernel, parallel over planes.

The library's general Resize (``tlc.runtime.library.ResizeImpl``) runs one numpy pass per resized axis: a
gather, a product with the axis's interpolation matrix, or its taps one by one, each over the whole tensor.
A UNet's 2x upsamplings took 0.19 ms (nearest, 32 x 64x64) and 0.34 ms (bilinear, 64 x 32x32) that way, on one
thread, three to five times onnxruntime's time. Here each plane is resized while it is in cache: the
horizontal taps of every input row the plane needs into a row buffer, then each output row as the weighted
sum of its vertical taps' rows (unit stride: vectorized); nearest copies an output row that repeats the one
before it. The taps (indices and weights per output position, per axis) are the reference's own
(``tlc.ops.resize.taps``), built once per signature by the caller; only the order of the two axes' sums may
differ from the reference's, float rounding aside.

A row doubled in width (the 2x upsampling of UNets and feature pyramids) reads its taps at fixed offsets from
the input column in the row's interior: output columns 2j and 2j + 1 take the same one or two taps at j plus
constant offsets, with constant weights (``pairs`` finds them, and the run of columns where they hold). There
the kernel reads the input at unit stride and stores the pair of outputs together, a loop LLVM vectorizes,
instead of one gather of an index per output; the row's ends keep the gathers.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

#: the taps a doubled row's interior loop takes (linear: 2; nearest: 1)
PAIR_TAPS = 2


def pairs(ix: np.ndarray, wx: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The 2x form of a row's taps ``ix``, ``wx`` [out, taps] over ``width`` input columns: ``pair`` (int64 [j0,
    j1, the offsets of column 2j's taps, of column 2j + 1's]) and ``weights`` (column 2j's, column 2j + 1's), each
    column's taps padded to ``PAIR_TAPS`` with zeros, where for every input column j in [j0, j1) outputs 2j and
    2j + 1 read the input at j plus those offsets with those weights; j0 == j1 (no interior) where the row is not
    doubled or takes more taps."""
    wo, tx = ix.shape
    pair, weights = np.zeros(2 + 2 * PAIR_TAPS, np.int64), np.zeros(2 * PAIR_TAPS, wx.dtype)
    if wo != 2 * width or tx > PAIR_TAPS or width < 2:
        return pair, weights
    mid = width // 2
    offsets, taken = ix[2 * mid:2 * mid + 2] - mid, wx[2 * mid:2 * mid + 2]
    column = np.arange(width)[:, None, None]
    match = (np.all(ix.reshape(width, 2, tx) - column == offsets, axis=(1, 2))
             & np.all(wx.reshape(width, 2, tx) == taken, axis=(1, 2)))
    j0, j1 = mid, mid + 1   # the run of matching columns around the middle one (which matches by definition)
    while j0 > 0 and match[j0 - 1]:
        j0 -= 1
    while j1 < width and match[j1]:
        j1 += 1
    pair[:2] = j0, j1
    for parity in range(2):
        pair[2 + parity * PAIR_TAPS:2 + parity * PAIR_TAPS + tx] = offsets[parity]
        weights[parity * PAIR_TAPS:parity * PAIR_TAPS + tx] = taken[parity]
    return pair, weights


@njit(cache=True, nogil=True, inline="always")
def _gathered(xf, src, dst, d0, ixf, wxf, tx, c0, c1, nearest):
    """Output columns [c0, c1) of an input row at ``xf[src:]`` into ``dst[d0:]``, each a gather of its taps."""
    if nearest:
        for j in range(c0, c1):
            dst[np.uint64(d0 + j)] = xf[np.uint64(src + ixf[j])]
    elif tx == 2:   # linear: the common case, its two taps unrolled
        for j in range(c0, c1):
            dst[np.uint64(d0 + j)] = (wxf[2 * j] * xf[np.uint64(src + ixf[2 * j])]
                                      + wxf[2 * j + 1] * xf[np.uint64(src + ixf[2 * j + 1])])
    else:
        for j in range(c0, c1):
            acc = wxf[j * tx] * xf[np.uint64(src + ixf[j * tx])]
            for b in range(1, tx):
                acc += wxf[j * tx + b] * xf[np.uint64(src + ixf[j * tx + b])]
            dst[np.uint64(d0 + j)] = acc


@njit(cache=True, nogil=True)
def resample_planes(x, out, iy, wy, ix, wx, pair, pw, nearest, p0, p1):
    """Planes [p0, p1) of ``x`` [planes, H, W] into ``out`` [planes, HO, WO]: output (i, j) is
    ``sum_a wy[i, a] * sum_b wx[j, b] * x[iy[i, a], ix[j, b]]``; ``nearest``: one tap each, weight 1; ``pair``,
    ``pw``: the horizontal taps' 2x form (``pairs``). Flat arrays and unsigned indices: a view per row cost a
    reference count, and signed indices a wraparound test per element that kept the row loops scalar."""
    h, w = x.shape[1], x.shape[2]
    ho, wo = out.shape[1], out.shape[2]
    ty, tx = iy.shape[1], ix.shape[1]
    xf, of = x.reshape(-1), out.reshape(-1)
    iyf, wyf, ixf, wxf = iy.reshape(-1), wy.reshape(-1), ix.reshape(-1), wx.reshape(-1)
    rows = np.empty(h * wo, out.dtype)   # a plane's input rows resized horizontally
    j0, j1 = pair[0], pair[1]   # (j0 < j1, or both 0: no interior, the ends' gathers take the row)
    v0, v1, u0, u1 = pw[0], pw[1], pw[2], pw[3]   # a doubled row's interior: its even, then odd columns' taps
    for p in range(p0, p1):
        x0, o0 = p * h * w, p * ho * wo
        if nearest:
            for i in range(ho):
                o = o0 + i * wo
                if i > 0 and iyf[i] == iyf[i - 1]:
                    for j in range(wo):
                        of[np.uint64(o + j)] = of[np.uint64(o - wo + j)]
                    continue
                src = x0 + iyf[i] * w
                _gathered(xf, src, of, o, ixf, wxf, tx, 0, 2 * j0, True)
                a, b = src + pair[2], src + pair[4]
                for j in range(j0, j1):   # a doubled row's interior (none where j1 == j0)
                    of[np.uint64(o + 2 * j)] = xf[np.uint64(a + j)]
                    of[np.uint64(o + 2 * j + 1)] = xf[np.uint64(b + j)]
                _gathered(xf, src, of, o, ixf, wxf, tx, 2 * j1, wo, True)
            continue
        for r in range(h):
            src, d0 = x0 + r * w, r * wo
            _gathered(xf, src, rows, d0, ixf, wxf, tx, 0, 2 * j0, False)
            if tx == 2:   # a doubled row's interior (none where j1 == j0)
                a0, a1, b0, b1 = src + pair[2], src + pair[3], src + pair[4], src + pair[5]
                for j in range(j0, j1):
                    rows[np.uint64(d0 + 2 * j)] = v0 * xf[np.uint64(a0 + j)] + v1 * xf[np.uint64(a1 + j)]
                    rows[np.uint64(d0 + 2 * j + 1)] = u0 * xf[np.uint64(b0 + j)] + u1 * xf[np.uint64(b1 + j)]
            else:
                a0, b0 = src + pair[2], src + pair[4]
                for j in range(j0, j1):
                    rows[np.uint64(d0 + 2 * j)] = v0 * xf[np.uint64(a0 + j)]
                    rows[np.uint64(d0 + 2 * j + 1)] = u0 * xf[np.uint64(b0 + j)]
            _gathered(xf, src, rows, d0, ixf, wxf, tx, 2 * j1, wo, False)
        for i in range(ho):
            o = o0 + i * wo
            w0, r0 = wyf[i * ty], iyf[i * ty] * wo
            if ty == 2:
                w1, r1 = wyf[i * ty + 1], iyf[i * ty + 1] * wo
                for j in range(wo):
                    of[np.uint64(o + j)] = w0 * rows[np.uint64(r0 + j)] + w1 * rows[np.uint64(r1 + j)]
                continue
            for j in range(wo):
                of[np.uint64(o + j)] = w0 * rows[np.uint64(r0 + j)]
            for a in range(1, ty):
                weight, row = wyf[i * ty + a], iyf[i * ty + a] * wo
                for j in range(wo):
                    of[np.uint64(o + j)] += weight * rows[np.uint64(row + j)]


@njit(cache=True, nogil=True, parallel=True)
def _resample_parallel(x, out, iy, wy, ix, wx, pair, pw, nearest, nparts):
    planes = x.shape[0]
    for p in prange(nparts):
        resample_planes(x, out, iy, wy, ix, wx, pair, pw, nearest, planes * p // nparts, planes * (p + 1) // nparts)


def resample(x, out, iy, wy, ix, wx, pair, pw, nearest: bool, nparts: int) -> None:
    """Every plane of ``x`` [planes, H, W] into ``out`` [planes, HO, WO], in ``nparts`` runs of planes."""
    if nparts > 1:
        _resample_parallel(x, out, iy, wy, ix, wx, pair, pw, nearest, nparts)
    else:
        resample_planes(x, out, iy, wy, ix, wx, pair, pw, nearest, 0, x.shape[0])
