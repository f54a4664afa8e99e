"""Quantized products: ConvInteger, QLinearConv, MatMulInteger and QLinearMatMul as one kernel family.

Every product here is ``acc[m, p] = sum_k W'[m, k] * col[k, p]`` with integer operands: ``W'`` the constant
weight minus its zero point (per output channel ``m``), ``col`` the activation minus its zero point, laid out by
an im2col over one slab of output positions ``p``. A MatMul ``A[M, K] @ B[K, N]`` is the same product with
``W' = (B - zb)^T`` (channel = output column) and ``col[k, p] = A[p, k] - za`` (a 1x1 "conv" whose positions
are A's rows); only the output's strides differ. The epilogue either wraps ``acc`` to int32 (the *Integer ops)
or requantizes it: ``q = clip(rint((acc + bias) * s1 * s2[m] / y_scale) + y_zero)`` in float64, in the
reference's order of operations (``tlc.ops.quant``), so results equal the reference's bit for bit.

Why float32 BLAS for an integer product: centered uint8/int8 values are at most 255 in magnitude, so each
product is an integer below 2^16 and every partial sum of ``kc`` of them stays below 2^24, where float32 is
exact whatever order or FMA the BLAS uses. The product runs in depth chunks of ``kc`` (``chunk_depth``: 258 for
the worst case, 514 for int8 symmetric weights), each an exact sgemm whose result is added to a float64
accumulator (exact to 2^53). On this host's AVX-512 that is ~150 GMAC/s per core, against ~30 for an int32
multiply-add loop that Numba vectorizes (``vpmulld``).

``geo`` (``geometry``) holds the sizes and strides as int64 (see ``G_*``); ``part(..., p, nparts)`` computes
every ``nparts``-th work item from ``p``, an item being one (image, group, slab of output positions).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .blas import gemm_f32

# geo fields: images, groups, channels and positions per group, input strides (elements), window, output strides
(G_N, G_G, G_CG, G_MG, G_H, G_W, G_XN, G_XC, G_XH, G_XW, G_KH, G_KW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_OH,
 G_OW, G_ON, G_OC, G_OP, G_SIGNED, G_ZX, G_KC, G_SLABS, G_SLABW, G_MODE, G_PERCHAN) = range(30)
GEO_SIZE = 30
#: exact float32 integers: |partial sums| below 2^24
EXACT_F32 = 1 << 24
#: output positions per work item at most (bounds the im2col scratch: 576 rows x 2048 x 4 B = 4.5 MiB)
MAX_SLAB = 2048
MODE_INT32, MODE_REQUANT = 0, 1


def chunk_depth(a_max: int, w_max: int) -> int:
    """Products per exact float32 partial sum for operands bounded by ``a_max`` and ``w_max`` in magnitude."""
    return max(1, EXACT_F32 // max(1, a_max * w_max))


def centered_bound(dtype: np.dtype, zero: int) -> int:
    """The largest magnitude of ``x - zero`` over the integer dtype's range."""
    info = np.iinfo(dtype)
    return int(max(abs(int(info.min) - zero), abs(int(info.max) - zero)))


def geometry(n: int, groups: int, cin_g: int, mout_g: int, hw: tuple[int, int], x_strides: tuple[int, ...],
             kernel: tuple[int, int], strides: tuple[int, int], pads: tuple[int, int], dilations: tuple[int, int],
             out_hw: tuple[int, int], out_strides: tuple[int, int, int], signed: bool, x_zero: int, kc: int,
             mode: int, per_channel: bool, nparts: int) -> np.ndarray:
    """The ``geo`` array of one product (see the module docstring); cuts positions into slabs so that there are
    at least ``nparts`` items and no slab is wider than ``MAX_SLAB``."""
    positions = out_hw[0] * out_hw[1]
    units = n * groups
    slabs = max(1, -(-nparts // units), -(-positions // MAX_SLAB))
    slabs = min(slabs, max(1, positions))
    width = -(-positions // slabs)
    geo = np.zeros(GEO_SIZE, np.int64)
    values = {G_N: n, G_G: groups, G_CG: cin_g, G_MG: mout_g, G_H: hw[0], G_W: hw[1], G_XN: x_strides[0],
              G_XC: x_strides[1], G_XH: x_strides[2], G_XW: x_strides[3], G_KH: kernel[0], G_KW: kernel[1],
              G_SH: strides[0], G_SW: strides[1], G_PH: pads[0], G_PW: pads[1], G_DH: dilations[0],
              G_DW: dilations[1], G_OH: out_hw[0], G_OW: out_hw[1], G_ON: out_strides[0], G_OC: out_strides[1],
              G_OP: out_strides[2], G_SIGNED: int(signed), G_ZX: x_zero, G_KC: kc, G_SLABS: slabs, G_SLABW: width,
              G_MODE: mode, G_PERCHAN: int(per_channel)}
    for k, v in values.items():
        geo[k] = v
    return geo


def scratch_sizes(geo: np.ndarray, nparts: int) -> tuple[int, int]:
    """Elements per part of the im2col scratch (float32) and of the product scratch (float32 and float64)."""
    width = int(geo[G_SLABW])
    return int(geo[G_CG] * geo[G_KH] * geo[G_KW]) * width, int(geo[G_MG]) * width


@njit(cache=True, nogil=True)
def _im2col(x, geo, img, g, p0, p1, col):
    """col[k, j] = x[img, g * CG + c, ih, iw] - zx (0 outside the image) for k = (c, kh, kw), j = p - p0.
    Walks output rows: per (row k, output row) the valid columns are one range, read through a 256-entry table
    of centered values (a uint8 view of int8 data included)."""
    cg, h, w = geo[G_CG], geo[G_H], geo[G_W]
    kh_, kw_, ow = geo[G_KH], geo[G_KW], geo[G_OW]
    xc, xh, xw = geo[G_XC], geo[G_XH], geo[G_XW]
    sh, sw, ph, pw, dh, dw = geo[G_SH], geo[G_SW], geo[G_PH], geo[G_PW], geo[G_DH], geo[G_DW]
    table = np.empty(256, np.float32)
    for v in range(256):
        table[v] = np.float32((v - 256 if geo[G_SIGNED] and v >= 128 else v) - geo[G_ZX])
    width = p1 - p0
    base = img * geo[G_XN] + g * cg * xc
    oh0, oh1 = p0 // ow, (p1 - 1) // ow
    row = 0
    for c in range(cg):
        cbase = base + c * xc
        for a in range(kh_):
            for b in range(kw_):
                dst = row * width - p0
                # output columns whose input column is inside the image: lo <= ow_ < hi
                off = b * dw - pw
                lo = min(ow, max(0, (-off + sw - 1) // sw))
                hi = max(lo, min(ow, (w - 1 - off) // sw + 1)) if w - 1 - off >= 0 else lo
                for oh in range(oh0, oh1 + 1):
                    q0, q1 = max(p0, oh * ow), min(p1, (oh + 1) * ow)
                    ih = oh * sh - ph + a * dh
                    if ih < 0 or ih >= h:
                        for p in range(q0, q1):
                            col[dst + p] = 0.0
                        continue
                    src = cbase + ih * xh + off * xw
                    start = oh * ow
                    for p in range(q0, min(q1, start + lo)):
                        col[dst + p] = 0.0
                    for p in range(max(q0, start + lo), min(q1, start + hi)):
                        col[dst + p] = table[x[src + (p - start) * sw * xw]]
                    for p in range(max(q0, start + hi), q1):
                        col[dst + p] = 0.0
                row += 1


@njit(cache=True, nogil=True)
def _epilogue(acc, width, img, g, p0, p1, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi):
    """acc[m, j] (+ bias) into the output at (img, g * MG + m, p0 + j): wrapped to int32, or requantized."""
    mg = geo[G_MG]
    per_channel = geo[G_PERCHAN]
    requant = geo[G_MODE] == MODE_REQUANT
    for m in range(mg):
        ch = g * mg + m
        o = img * geo[G_ON] + ch * geo[G_OC] + p0 * geo[G_OP]
        b = bias[ch] if bias.size > 0 else 0.0
        s = s2[ch] if per_channel else s2[0]
        src = m * width
        step = geo[G_OP]
        for j in range(p1 - p0):
            v = acc[src + j] + b
            if requant:
                q = min(max(np.rint((v * s1) * s / y_scale) + y_zero, lo), hi)
                out[o + j * step] = np.int64(q) & 255   # an int8 output is written through a uint8 view
            else:
                out[o + j * step] = np.int32(np.int64(v))   # wraps, as the reference's astype(int32)


@njit(cache=True, nogil=True)
def part(x, w, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col, prod, acc, p, nparts):
    """Work items p, p + nparts, ... of the product (see the module docstring). ``w``: [G, MG, CG*KH*KW]
    float32, centered; ``col``, ``prod``, ``acc``: this part's scratch (flat)."""
    units = geo[G_N] * geo[G_G]
    slabs, width = geo[G_SLABS], geo[G_SLABW]
    positions = geo[G_OH] * geo[G_OW]
    mg, kc = geo[G_MG], geo[G_KC]
    depth = geo[G_CG] * geo[G_KH] * geo[G_KW]
    for item in range(p, units * slabs, nparts):
        unit, slab = item // slabs, item % slabs
        img, g = unit // geo[G_G], unit % geo[G_G]
        p0 = slab * width
        p1 = min(positions, p0 + width)
        if p0 >= p1:
            continue
        cols = p1 - p0
        _im2col(x, geo, img, g, p0, p1, col)
        for k0 in range(0, depth, kc):
            kk = min(kc, depth - k0)
            pw = w.ctypes.data + (g * mg * depth + k0) * 4
            pc = col.ctypes.data + k0 * cols * 4
            gemm_f32(mg, cols, kk, 1.0, pw, depth, 1, pc, cols, 1, 0.0, prod.ctypes.data, cols)
            if k0 == 0:
                for i in range(mg * cols):
                    acc[i] = prod[i]
            else:
                for i in range(mg * cols):
                    acc[i] += prod[i]
        if depth == 0:
            acc[:mg * cols] = 0.0
        _epilogue(acc, cols, img, g, p0, p1, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi)


@njit(cache=True, nogil=True, parallel=True)
def _parallel(x, w, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col, prod, acc, nparts):
    for p in prange(nparts):
        part(x, w, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col[p], prod[p], acc[p], p, nparts)


def run(x: np.ndarray, w: np.ndarray, out: np.ndarray, geo: np.ndarray, bias: np.ndarray, s1: float,
        s2: np.ndarray, y_scale: float, y_zero: float, lo: float, hi: float, col: np.ndarray, prod: np.ndarray,
        acc: np.ndarray, nparts: int) -> None:
    """The whole product into ``out`` (C-contiguous; int32, uint8 or int8) from ``x`` (C-contiguous uint8 or
    int8); scratch [nparts, *]. Bytes go in and out as uint8 (``G_SIGNED`` says how to read them): one compiled
    signature per output kind."""
    x = x.reshape(-1).view(np.uint8)
    out = out.reshape(-1)
    if out.dtype == np.int8:
        out = out.view(np.uint8)
    if nparts > 1:
        _parallel(x, w, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col, prod, acc, nparts)
    else:
        part(x, w, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col[0], prod[0], acc[0], 0, 1)


def compile_for(out_dtype: np.dtype, nparts: int) -> str:
    """Compile (or load from the cache) the driver a product with this output dtype and part count calls, by
    running it on a 1x1 product."""
    requant = np.dtype(out_dtype) != np.int32
    geo = geometry(1, 1, 1, 1, (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (1, 1), (1, 1), (1, 1, 1), False, 0,
                   1, MODE_REQUANT if requant else MODE_INT32, False, nparts)
    cols, prods = scratch_sizes(geo, nparts)
    out = np.zeros(1, out_dtype)
    run(np.ones(1, np.uint8), np.ones((1, 1, 1), np.float32), out, geo, np.zeros(0), 1.0, np.ones(1), 1.0, 0.0,
        0.0, 255.0, np.zeros((nparts, cols), np.float32), np.zeros((nparts, prods), np.float32),
        np.zeros((nparts, prods)), nparts)
    return "qgemm"
