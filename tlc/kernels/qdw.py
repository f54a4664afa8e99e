"""Quantized depthwise convolutions (QLinearConv, ConvInteger with one input channel a group) as a direct int32
kernel, and QuantizeLinear / DequantizeLinear on bytes.

A depthwise product has a depth of KH * KW (9 for a 3x3): too shallow for an im2col and a GEMM (the float32
BLAS path spent 131 us on 32 x 16x16 3x3, most of it laying out and chunking). Here each (image, output
channel) is one item: the input channel's plane is centered (``x - x_zero``) into a zero-bordered scratch
plane once, so that the taps need no bounds tests, then each output row accumulates ``w'[a, b] * plane[...]``
over the taps (a vector over the output columns) and goes through ``tlc.kernels.qgemm``'s epilogue
(``_finish``: int32 wrap, or requantization in the reference's order), so results equal the reference's bit
for bit. int32 sums are exact while ``taps * |x'| * |w'|`` stays below 2^31 (the caller checks: ``exact``); an
int32 output wraps as the reference's does. (float32 sums, exact below 2^24, ran the taps no faster: 61 against
64 us on 144 x 56x56.)

Bytes go in and out as uint8 (an int8 input is read through ``(b ^ 128) - 128``, an int8 output written as its
low byte), so one compiled signature serves both. The geometry is ``qgemm.geometry``'s array (``G_CG`` = 1).

NOTE: loops run over unsigned indices (``U``): a signed index costs a wraparound test per element, which kept
the loads scalar (see ``tlc.kernels.recurrent``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import qgemm
from .qgemm import MODE_REQUANT, _finish

# the fields of ``qgemm.geometry``'s array this module reads
G_N, G_G, G_MG, G_H, G_W, G_XN, G_XC = qgemm.G_N, qgemm.G_G, qgemm.G_MG, qgemm.G_H, qgemm.G_W, qgemm.G_XN, qgemm.G_XC
G_KH, G_KW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW = (qgemm.G_KH, qgemm.G_KW, qgemm.G_SH, qgemm.G_SW, qgemm.G_PH,
                                                  qgemm.G_PW, qgemm.G_DH, qgemm.G_DW)
G_OH, G_OW, G_ON, G_OC = qgemm.G_OH, qgemm.G_OW, qgemm.G_ON, qgemm.G_OC
G_SIGNED, G_ZX, G_MODE, G_PERCHAN = qgemm.G_SIGNED, qgemm.G_ZX, qgemm.G_MODE, qgemm.G_PERCHAN

U = np.uint64
EXACT_I32 = (1 << 31) - 1


def exact(taps: int, a_bound: int, w_bound: int, requant: bool) -> bool:
    """Whether int32 sums equal the reference's: an int32 output wraps as the reference does; a requantized one
    needs every sum of ``taps`` centered products below 2^31."""
    return not requant or taps * a_bound * w_bound <= EXACT_I32


def plane_size(geo: np.ndarray) -> tuple[int, int]:
    """(rows, columns) of the zero-bordered plane an item reads: every input row and column a tap touches."""
    rows = (int(geo[G_OH]) - 1) * int(geo[G_SH]) + (int(geo[G_KH]) - 1) * int(geo[G_DH]) + 1
    cols = (int(geo[G_OW]) - 1) * int(geo[G_SW]) + (int(geo[G_KW]) - 1) * int(geo[G_DW]) + 1
    return rows, cols


def scratch_size(geo: np.ndarray) -> int:
    """Elements per part of the int32 scratch (the plane, then the sums): the plane's size each."""
    rows, cols = plane_size(geo)
    return rows * cols


@njit(cache=True, nogil=True)
def _load_plane(x, geo, img, c, plane, rows, cols):
    """plane[r, q] = x[img, c, r - PH, q - PW] - zx inside the image, 0 outside (int32, centered)."""
    h, w = geo[G_H], geo[G_W]
    ph, pw = geo[G_PH], geo[G_PW]
    flip = np.int32(128) if geo[G_SIGNED] else np.int32(0)
    off = np.int32(geo[G_ZX] + (128 if geo[G_SIGNED] else 0))
    base = img * geo[G_XN] + c * geo[G_XC]
    c0, c1 = min(cols, max(0, pw)), min(cols, max(0, pw + w))   # plane columns the image covers
    for r in range(rows):
        at = U(r * cols)
        ih = r - ph
        if ih < 0 or ih >= h:
            for q in range(U(cols)):
                plane[at + q] = 0
            continue
        for q in range(U(c0)):
            plane[at + q] = 0
        src, dst = U(base + ih * w + c0 - pw), at + U(c0)
        for q in range(U(c1 - c0)):
            plane[dst + q] = (np.int32(x[src + q]) ^ flip) - off
        for q in range(U(c1), U(cols)):
            plane[at + q] = 0


@njit(cache=True, nogil=True)
def _load_plane_split(x, geo, img, c, plane, rows, cols):
    """``_load_plane`` with each row's even columns first, then its odd ones (``half`` = the even ones' count):
    plane[r, q // 2 + (q % 2) * half], so that a stride-2 conv's taps read unit-stride runs."""
    h, w = geo[G_H], geo[G_W]
    ph, pw = geo[G_PH], geo[G_PW]
    flip = np.int32(128) if geo[G_SIGNED] else np.int32(0)
    off = np.int32(geo[G_ZX] + (128 if geo[G_SIGNED] else 0))
    base = img * geo[G_XN] + c * geo[G_XC]
    half = (cols + 1) // 2
    for r in range(rows):
        at = U(r * cols)
        for q in range(U(cols)):
            plane[at + q] = 0
        ih = r - ph
        if ih < 0 or ih >= h:
            continue
        row = U(base + ih * w)
        for parity in range(2):
            dst = at + U(parity * half)
            # plane columns q = 2k + parity inside the image: pw <= q < pw + w
            k0 = max(0, (pw - parity + 1) // 2)
            k1 = min((cols - parity + 1) // 2, (pw + w - parity + 1) // 2)
            if k1 <= k0:
                continue
            src = row + U(2 * k0 + parity - pw)
            n = U(k1 - k0)
            d0 = dst + U(k0)
            for k in range(n):
                plane[d0 + k] = (np.int32(x[src + U(2) * k]) ^ flip) - off


@njit(cache=True, nogil=True)
def _taps_s2_3x3(plane, wc, dh, dw, cols, acc, oh, ow):
    """A 3x3 of stride 2 over a split plane (``_load_plane_split``): output (r, j)'s tap (a, b) is plane row
    2r + a dh, column 2j + b dw: in the even or odd half at j + (b dw) // 2, unit stride along j; the nine taps
    summed in registers into acc[r * ow + j]."""
    p = plane
    half = (cols + 1) // 2
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = wc[0], wc[1], wc[2], wc[3], wc[4], wc[5], wc[6], wc[7], wc[8]
    c0 = U(0)                                   # tap column 0: the even half, at j
    c1 = U((dw % 2) * half + dw // 2)
    c2 = U(((2 * dw) % 2) * half + (2 * dw) // 2)
    r1, r2 = U(dh * cols), U(2 * dh * cols)
    for r in range(oh):
        s0 = U(2 * r * cols)
        d0 = U(r * ow)
        for j in range(U(ow)):
            i = s0 + j
            acc[d0 + j] = (w0 * p[i + c0] + w1 * p[i + c1] + w2 * p[i + c2] + w3 * p[i + r1 + c0]
                           + w4 * p[i + r1 + c1] + w5 * p[i + r1 + c2] + w6 * p[i + r2 + c0]
                           + w7 * p[i + r2 + c1] + w8 * p[i + r2 + c2])


@njit(cache=True, nogil=True)
def _row(plane, start, wc, kh, kw, dh, dw, sw, cols, acc, a0, ow):
    """acc[a0 + j] = sum over taps (a, b) of wc[a * kw + b] * plane[start + a * dh * cols + b * dw + j * sw].
    NOTE: offsets, not slices: a slice in this loop costs a reference count update (NRT calls) per tap."""
    dst = U(a0)
    for j in range(U(ow)):
        acc[dst + j] = 0
    for a in range(kh):
        for b in range(kw):
            wv = wc[a * kw + b]
            at = U(start + a * dh * cols + b * dw)
            if sw == 1:
                for j in range(U(ow)):
                    acc[dst + j] += wv * plane[at + j]
            else:
                step = U(sw)
                for j in range(U(ow)):
                    acc[dst + j] += wv * plane[at + j * step]


@njit(cache=True, nogil=True)
def _taps_flat(plane, wc, kh, kw, dh, dw, cols, acc, span):
    """acc[i] = sum over taps (a, b) of wc[a * kw + b] * plane[i + a * dh * cols + b * dw], for i < span: a stride-1
    conv over the plane taken as one flat row, so each tap is one long vector loop (a row of 16 outputs left
    LLVM's unrolled vector body unused); columns past the output's width are computed and dropped."""
    n = U(span)
    w0 = wc[0]
    for i in range(n):
        acc[i] = w0 * plane[i]
    for t in range(1, kh * kw):
        wv = wc[t]
        at = U((t // kw) * dh * cols + (t % kw) * dw)
        for i in range(n):
            acc[i] += wv * plane[at + i]


@njit(cache=True, nogil=True)
def _taps_flat_3x3(plane, wc, dh, dw, cols, acc, span):
    """``_taps_flat`` of a 3x3: the nine taps of an output summed in registers, one store an output (a tap at a
    time loaded and stored the sums nine times: 144 x 56x56 97-158 -> 64 us)."""
    p = plane
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = wc[0], wc[1], wc[2], wc[3], wc[4], wc[5], wc[6], wc[7], wc[8]
    b1, b2 = U(dw), U(2 * dw)
    r1, r2 = U(dh * cols), U(2 * dh * cols)
    for i in range(U(span)):
        acc[i] = (w0 * p[i] + w1 * p[i + b1] + w2 * p[i + b2] + w3 * p[i + r1] + w4 * p[i + r1 + b1]
                  + w5 * p[i + r1 + b2] + w6 * p[i + r2] + w7 * p[i + r2 + b1] + w8 * p[i + r2 + b2])


@njit(cache=True, nogil=True)
def part(x, wc, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, scratch, p, nparts):
    """Items p, p + nparts, ... (an item: one image's output channel); ``wc``: [channels, KH * KW] int32,
    centered; ``out`` as bytes (an int32 output through an int32 view of them: one signature for every output
    type); ``scratch`` (int32, twice ``scratch_size``): this part's."""
    mg, oh_, ow = geo[G_MG], geo[G_OH], geo[G_OW]
    kh, kw, sh, sw, dh, dw = geo[G_KH], geo[G_KW], geo[G_SH], geo[G_SW], geo[G_DH], geo[G_DW]
    channels = geo[G_G] * mg
    requant = geo[G_MODE] == MODE_REQUANT
    rows = (oh_ - 1) * sh + (kh - 1) * dh + 1
    cols = (ow - 1) * sw + (kw - 1) * dw + 1
    plane = scratch[:rows * cols]
    acc = scratch[rows * cols:2 * rows * cols]
    words = scratch[:0] if requant else out.view(np.int32)
    flat = sh == 1 and sw == 1
    span = (oh_ - 1) * cols + ow
    # a 3x3 of stride 2: its plane split into even and odd columns, so its taps read unit-stride runs (tap by tap
    # at a run-time stride of 2 the loads stayed scalar: 144 x 56x56 / 2 took 372 us, onnxruntime 53)
    s2_flat = kh == 3 and kw == 3 and sh == 2 and sw == 2
    last = -1
    for item in range(p, geo[G_N] * channels, nparts):
        img, ch = item // channels, item % channels
        c = ch // mg
        if img * geo[G_G] + c != last:   # the items of a channel multiplier share the plane
            if s2_flat:
                _load_plane_split(x, geo, img, c, plane, rows, cols)
            else:
                _load_plane(x, geo, img, c, plane, rows, cols)
            last = img * geo[G_G] + c
        b = bias[ch] if bias.size > 0 else 0.0
        s = s2[ch] if geo[G_PERCHAN] else s2[0]
        weights = wc[ch]
        o = img * geo[G_ON] + ch * geo[G_OC]
        if flat:   # the plane's rows (cols wide) as one flat row; each row's first ow are the outputs
            if kh == 3 and kw == 3:
                _taps_flat_3x3(plane, weights, dh, dw, cols, acc, span)
            else:
                _taps_flat(plane, weights, kh, kw, dh, dw, cols, acc, span)
            step, count, width = cols, oh_, ow
        elif s2_flat:   # the split plane's unit-stride runs (``_taps_s2_3x3``)
            _taps_s2_3x3(plane, weights, dh, dw, cols, acc, oh_, ow)
            step, count, width = oh_ * ow, 1, oh_ * ow
        else:
            for r in range(oh_):
                _row(plane, r * sh * cols, weights, kh, kw, dh, dw, sw, cols, acc, r * ow, ow)
            step, count, width = oh_ * ow, 1, oh_ * ow
        if requant:
            _emit_rows(acc, step, count, width, out[o:o + oh_ * ow], words, b, s, True, s1, y_scale, y_zero, lo, hi)
        else:
            _emit_rows(acc, step, count, width, out, words[o:o + oh_ * ow], b, s, False, s1, y_scale, y_zero, lo,
                       hi)


@njit(cache=True, nogil=True)
def _emit_rows(acc, step, count, width, out, words, b, s, requant, s1, y_scale, y_zero, lo, hi):
    """out[r * width + j] (bytes, requantized) or words[r * width + j] (int32, wrapped) = ``_finish`` of
    acc[r * step + j] + b for r < count, j < width: one output plane straight into place from sums ``step``
    apart a row (the flat taps' rows; staged and copied a row at a time, 32 x 16x16 spent a third of its time in
    the copies). A function of its own on views, one loop a mode, so that each vectorizes (inlined into
    ``part``'s loops it stayed scalar: 32 x 16x16 took 43 us)."""
    for r in range(count):
        src, dst = U(r * step), U(r * width)
        if requant:
            for j in range(U(width)):
                _finish(out, dst + j, np.float64(acc[src + j]) + b, True, s1, s, y_scale, y_zero, lo, hi)
        else:
            for j in range(U(width)):
                _finish(words, dst + j, np.float64(acc[src + j]) + b, False, s1, 1.0, y_scale, y_zero, lo, hi)


@njit(cache=True, nogil=True, parallel=True)
def _parallel(x, wc, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, scratch, nparts):
    for p in prange(nparts):
        part(x, wc, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, scratch[p], p, nparts)


def run(x: np.ndarray, wc: np.ndarray, out: np.ndarray, geo: np.ndarray, bias: np.ndarray, s1: float,
        s2: np.ndarray, y_scale: float, y_zero: float, lo: float, hi: float, scratch: np.ndarray,
        nparts: int) -> None:
    """The whole depthwise product into ``out`` (C-contiguous NCHW; int32, uint8 or int8) from ``x`` (C-contiguous
    NCHW uint8 or int8); ``scratch`` [nparts, 2 * scratch_size] int32. Everything goes to the kernel as bytes: one
    compiled signature."""
    x = x.reshape(-1).view(np.uint8)
    out = out.reshape(-1).view(np.uint8)
    if nparts > 1:
        _parallel(x, wc, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, scratch, nparts)
    else:
        part(x, wc, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, scratch[0], 0, 1)


def compile_for(out_dtype: np.dtype, nparts: int) -> str:
    """Compile (or load from the cache) the depthwise driver for this part count (one signature for every output
    dtype), on a 1x1."""
    requant = np.dtype(out_dtype) != np.int32
    geo = qgemm.geometry(1, 1, 1, 1, (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (1, 1), (1, 1), (1, 1, 1), False,
                         0, 0, MODE_REQUANT if requant else qgemm.MODE_INT32, False, nparts)
    size = scratch_size(geo)
    run(np.ones(1, np.uint8), np.ones((1, 1), np.int32), np.zeros(1, out_dtype), geo, np.zeros(0), 1.0,
        np.ones(1), 1.0, 0.0, 0.0, 255.0, np.zeros((nparts, 2 * size), np.int32), nparts)
    return "qdw"


# ---------------------------------------------------------------------------- QuantizeLinear, DequantizeLinear
# A tensor as [outer, C, inner] with one scale and zero point per C (C = 1: per tensor), in the reference's
# order: Quantize rounds float32(x) / scale in float32 to nearest even (np.rint), adds the zero point and
# saturates; Dequantize multiplies float32(x - zero) by the scale in float32.
@njit(cache=True, nogil=True)
def _quantize(x, scale, zero, out, outer, chans, inner, lo, hi):
    """out (bytes: an int8's low byte) = clip(rint(x / scale[c]) + zero[c], lo, hi); ``x`` float32."""
    for o in range(outer):
        for c in range(chans):
            s, z = scale[c], zero[c]
            at = U((o * chans + c) * inner)
            for i in range(U(inner)):
                q = np.float64(np.rint(np.float32(x[at + i] / s))) + z
                q = lo if q < lo else q   # selects, as ``qgemm._finish``
                q = hi if q > hi else q
                out[at + i] = np.int64(q) & 255


@njit(cache=True, nogil=True)
def _dequantize(x, scale, zero, out, outer, chans, inner, signed):
    """out = float32(x - zero[c]) * scale[c] in float32; ``x`` bytes, read as int8 where ``signed``."""
    flip = np.int32(128) if signed else np.int32(0)
    for o in range(outer):
        for c in range(chans):
            s = scale[c]
            off = np.int32(zero[c]) + flip
            at = U((o * chans + c) * inner)
            for i in range(U(inner)):
                out[at + i] = np.float32((np.int32(x[at + i]) ^ flip) - off) * s


def quantize(x: np.ndarray, out: np.ndarray, scale: np.ndarray, zero: np.ndarray, outer: int, chans: int,
             inner: int, lo: float, hi: float) -> None:
    """QuantizeLinear of ``x`` (float32, C-contiguous) into ``out`` (uint8 or int8); ``scale`` float32 and
    ``zero`` float64, one value per channel of the [outer, chans, inner] view."""
    _quantize(x.reshape(-1), scale, zero, out.reshape(-1).view(np.uint8), outer, chans, inner, lo, hi)


def dequantize(x: np.ndarray, out: np.ndarray, scale: np.ndarray, zero: np.ndarray, outer: int, chans: int,
               inner: int, signed: bool) -> None:
    """DequantizeLinear of ``x`` (uint8 or int8, C-contiguous) into ``out`` (float32); ``scale`` float32 and
    ``zero`` float64 per channel (as ``quantize``)."""
    _dequantize(x.reshape(-1).view(np.uint8), scale, zero, out.reshape(-1), outer, chans, inner, signed)


def compile_quantize() -> str:
    """Compile (or load from the cache) QuantizeLinear's kernel on one value."""
    quantize(np.ones(1, np.float32), np.zeros(1, np.uint8), np.ones(1, np.float32), np.zeros(1), 1, 1, 1, 0.0, 255.0)
    return "quantize"


def compile_dequantize() -> str:
    """Compile (or load from the cache) DequantizeLinear's kernel on one value."""
    dequantize(np.ones(1, np.uint8), np.zeros(1, np.float32), np.ones(1, np.float32), np.zeros(1), 1, 1, 1, False)
    return "dequantize"
