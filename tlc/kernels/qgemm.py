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

On a host with AVX-512 VNNI the same items run on ``tlc.kernels.qpanel`` instead (``vrun``): the product in
int32 with ``vpdpbusd`` on the weight packed once (signed bytes), the activations as unsigned bytes (int8 ones
+ 128), the zero points' column term the kernel's starting value and the row term (a weight zero point that the
signed bytes could not absorb) added here, then the same epilogue (``_finish``). A MatMul reads A's rows in
place; a convolution whose weight needs a row term reads an im2row over a channels-last copy of its input (a 1x1
convolution of stride 1 the copy's pixels in place).

Every other convolution runs transposed (``trun``): C = W' A^T on ``tlc_qpanel_t``, the output channels C's rows
and the positions its columns, so that the epilogue reads and writes whole runs of an output plane (the
row-major product's epilogue gathered C's columns: 0.7 ns an output, 130 us of a 64 x 56x56 3x3 conv's 467). No
im2row: the input is copied once into phase planes of four-channel words (``_phase_copy``: per stride phase the
padded input's rows and columns of that phase), in which the window of a tap over every output position is one
shifted run, so the kernel reads A^T in place through a table of per-tap offsets. Positions are counted in the
phase planes' width (a few columns past OW are computed and dropped). On the qdq_convnet's layers this took the
convs from 32 / 25 / 20 us to 8-10 / 8 / 6.5 (onnxruntime: 23 / 9 / 7).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import qpanel
from .blas import gemm_f32

qpanel.ensure()   # the symbol the VNNI items call (compiled code links it by name)

# geo fields: images, groups, channels and positions per group, input strides (elements), window, output strides
(G_N, G_G, G_CG, G_MG, G_H, G_W, G_XN, G_XC, G_XH, G_XW, G_KH, G_KW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_OH,
 G_OW, G_ON, G_OC, G_OP, G_SIGNED, G_ZX, G_KC, G_SLABS, G_SLABW, G_MODE, G_PERCHAN) = range(30)
# the VNNI product's fields (``vnni_fields``): A's row length in bytes, C's row length (whole panels), the
# activation's zero point as an unsigned byte, whether a row term is added, where A's rows are, A's byte xor
G_KPAD, G_NPAD, G_ZA, G_ROWTERM, G_ROWS, G_AXOR = range(30, 36)
#: the transposed product's: the phase planes' rows and columns (``_phase_copy``), whether its one phase plane
#: is the interleaved input itself (no padding, stride 1, the plane the input's size)
G_PHH, G_PHW, G_DIRECT = 36, 37, 38
GEO_SIZE = 39
#: where the VNNI product finds A's rows: an im2row scratch, the input itself (a MatMul), the channels-last copy
ROWS_IM2ROW, ROWS_INPUT, ROWS_CHANNELS_LAST = 0, 1, 2
#: ... or an im2row of every position built before the items, from the NCHW input (``_im2row_planes``: a conv
#: over fewer than ``FEW_CHANNELS`` channels, whose im2row holds at most ``PLANES_BYTES``)
ROWS_PLANES = 3
#: ... or the transposed product (``tlc_qpanel_t``): C = W' A^T, channels as C's rows, so that a conv's output
#: planes come out whole, A^T read in place from a copy of the input (``_phase_copy``), no im2row
ROWS_TRANSPOSED = 4
FEW_CHANNELS = 8
PLANES_BYTES = 8 << 20
#: bytes of A a VNNI slab holds at most (its rows stay in L2 while every panel of B walks them: 512 x 1024 x
#: 1024 ran at 148 GMAC/s in one slab, 224 in slabs of 192 rows)
VNNI_SLAB_BYTES = 196608
#: exact float32 integers: |partial sums| below 2^24
EXACT_F32 = 1 << 24
#: output positions per work item at most (bounds the im2col scratch: 576 rows x 2048 x 4 B = 4.5 MiB)
MAX_SLAB = 2048
MODE_INT32, MODE_REQUANT = 0, 1
U = np.uint64   # NOTE: unsigned offsets: a signed index costs a wraparound test per access


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
             mode: int, per_channel: bool, nparts: int, max_slab: int = MAX_SLAB) -> np.ndarray:
    """The ``geo`` array of one product (see the module docstring); cuts positions into slabs so that there are
    at least ``nparts`` items and no slab is wider than ``max_slab``."""
    positions = out_hw[0] * out_hw[1]
    units = n * groups
    slabs = max(1, -(-nparts // units), -(-positions // max_slab))
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


@njit(cache=True, nogil=True, inline="always")
def _finish(out, at, v, requant, s1, s, y_scale, y_zero, lo, hi):
    """out[at] = the exact accumulator ``v`` (float64, bias added) wrapped to int32, or requantized in the
    reference's order of operations."""
    if requant:
        q = np.rint((v * s1) * s / y_scale) + y_zero
        # NOTE: clipped with selects, not min/max (whose NaN branches kept the loops scalar: 4096 outputs
        # 6.7 -> 2.5 us); the same values for every finite q and for infinities
        q = lo if q < lo else q
        q = hi if q > hi else q
        out[at] = np.int64(q) & 255   # an int8 output is written through a uint8 view
    else:
        out[at] = np.int32(np.int64(v))   # wraps, as the reference's astype(int32)


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
            _finish(out, o + j * step, acc[src + j] + b, requant, s1, s, y_scale, y_zero, lo, hi)


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


# ---------------------------------------------------------------------------- the VNNI product
def vnni_exact(depth: int, a_bound: int, w_bound: int, requant: bool) -> bool:
    """Whether the int32 product is the reference's: always for an int32 output (both wrap modulo 2^32); for a
    requantized one while no sum of ``depth`` centered products can pass 2^31."""
    return not requant or depth * a_bound * w_bound <= qpanel.EXACT_I32


def vnni_weights(weight: np.ndarray, w_zero: np.ndarray, x_dtype: np.dtype, x_zero: int):
    """(packed [G, *] int8, init [G, NPAD] int32, row zero points [G * MG] int64, whether a row term is needed,
    the activation's zero point as an unsigned byte, A's byte xor) of ``weight`` [G, MG, depth] (uint8 or int8, in
    the order A's rows hold the depth) with zero points ``w_zero`` [G * MG]. The kernel multiplies As (unsigned:
    int8 activations + 128) by Bs (signed): Bs = W - zb where that fits a signed byte (no row term), else W - 128
    for uint8 W; what Bs still carries, zb', gives the row term -zb' rowsum(As)."""
    groups, mg, depth = weight.shape
    zb = w_zero.astype(np.int64).reshape(groups, mg, 1)
    centered = weight.astype(np.int64) - zb
    if centered.min() >= -128 and centered.max() <= 127:
        bs, zbp = centered, np.zeros((groups, mg), np.int64)
    elif weight.dtype == np.uint8:
        bs, zbp = weight.astype(np.int64) - 128, zb[..., 0] - 128
    else:
        bs, zbp = weight.astype(np.int64), zb[..., 0]
    signed = np.dtype(x_dtype) == np.int8
    za = x_zero + 128 if signed else x_zero
    npad = qpanel.padded(mg)
    init = np.zeros((groups, npad), np.int64)
    init[:, :mg] = -za * bs.sum(axis=2) + depth * za * zbp
    init = ((init + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)   # the kernel wraps modulo 2^32
    packed = np.stack([qpanel.pack(bs[g].T.astype(np.int8)) for g in range(groups)])
    return packed, init, np.ascontiguousarray(zbp.reshape(-1)), bool(zbp.any()), za, 0x80808080 if signed else 0


def vnni_weights_t(weight: np.ndarray, w_zero: np.ndarray, taps: int, x_dtype: np.dtype, x_zero: int):
    """(weight [G, MG * KPAD] int8, init [G, MG] int32, the activation's zero point as an unsigned byte) of the
    transposed product, or None where the centered weight ``weight - w_zero`` (``weight`` [G, MG, CG * taps] in
    the ONNX order (c, kh, kw)) does not fit a signed byte (a row term: the row-major product handles it). The
    depth in the order the taps' offsets (``vnni_fields_t``) walk A^T: (tap, channel) with the channels padded
    to a multiple of 4 (zero weights there)."""
    groups, mg, depth = weight.shape
    cg = depth // taps
    centered = weight.astype(np.int64) - w_zero.astype(np.int64).reshape(groups, mg, 1)
    if centered.min() < -128 or centered.max() > 127:
        return None
    c4 = -(-cg // 4) * 4
    w = np.zeros((groups, mg, taps, c4), np.int64)
    w[..., :cg] = centered.reshape(groups, mg, cg, taps).transpose(0, 1, 3, 2)
    za = x_zero + 128 if np.dtype(x_dtype) == np.int8 else x_zero
    init = -za * w.sum(axis=(2, 3))
    init = ((init + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)   # the kernel wraps modulo 2^32
    return np.ascontiguousarray(w.reshape(groups, -1).astype(np.int8)), init, za


def vnni_fields_t(geo: np.ndarray, za: int, nparts: int) -> np.ndarray:
    """Sets ``geo``'s fields for the transposed product and returns A^T's group offsets (int64 bytes, one per
    group of four depth rows, from a unit's phase planes; see ``_phase_copy``).

    Positions are counted in the phase planes' width ``G_PHW`` (>= OW: the columns past OW are computed and
    dropped), so that a tap's window of every position is one shifted run of a phase plane: position
    (oh, ow) of tap (a, b) reads phase ((a DH) % SH, (b DW) % SW) at row oh + (a DH) // SH, column
    ow + (b DW) // SW. A slab is ``G_SLABW`` whole output rows (C's rows ``G_NPAD`` long; ``slab_rows``), at
    least ``nparts`` items."""
    kh, kw, sh, sw, dh, dw = (int(geo[i]) for i in (G_KH, G_KW, G_SH, G_SW, G_DH, G_DW))
    oh, ow, cg = int(geo[G_OH]), int(geo[G_OW]), int(geo[G_CG])
    c4s = -(-cg // 4)
    phh, phw = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    kpad = kh * kw * c4s * 4
    units = int(geo[G_N] * geo[G_G])
    geo[G_KPAD], geo[G_PHH], geo[G_PHW] = kpad, phh, phw
    geo[G_DIRECT] = int(sh == 1 and sw == 1 and geo[G_PH] == 0 and geo[G_PW] == 0 and phh == geo[G_H]
                        and phw == geo[G_W])
    rows = slab_rows(oh, phw, int(geo[G_MG]), -(-oh // -(-nparts // units)))
    geo[G_SLABW], geo[G_SLABS] = rows, -(-oh // rows)
    geo[G_NPAD] = -(-rows * phw // qpanel.PANEL) * qpanel.PANEL
    geo[G_ZA], geo[G_ROWTERM], geo[G_ROWS], geo[G_AXOR] = za, 0, ROWS_TRANSPOSED, 0
    plane = phh * phw
    offsets = np.empty(kh * kw * c4s, np.int64)
    for a in range(kh):
        for b in range(kw):
            phase = (a * dh) % sh * sw + (b * dw) % sw
            shift = (a * dh) // sh * phw + (b * dw) // sw
            for c4 in range(c4s):
                offsets[(a * kw + b) * c4s + c4] = 4 * ((phase * c4s + c4) * plane + shift)
    return offsets


#: bytes of C a transposed item holds at most (it stays in L2 for the epilogue)
T_SLAB_BYTES = 1 << 18


def slab_rows(oh: int, phw: int, mg: int, most: int) -> int:
    """Output rows a transposed item computes: at most ``most`` and C within ``T_SLAB_BYTES``, the fewest panel
    lanes over all items (a slab's positions are rounded up to whole panels: 5 rows of 30 positions filled 150
    of 192 lanes, 17 fill 510 of 512), then the most rows."""
    cap = max(1, min(oh, most, max(qpanel.PANEL, T_SLAB_BYTES // (4 * mg)) // phw))

    def lanes(r: int) -> int:
        whole = -(-r * phw // qpanel.PANEL) * qpanel.PANEL
        rest = oh % r * phw
        return oh // r * whole + -(-rest // qpanel.PANEL) * qpanel.PANEL
    return min(range(1, cap + 1), key=lambda r: (lanes(r), -r))


def interleaved_words(geo: np.ndarray) -> int:
    """Words of the interleaved input (``_interleave``); 1 where it goes straight to the phase planes
    (``G_DIRECT``)."""
    if geo[G_DIRECT]:
        return 1
    return int(geo[G_N] * geo[G_G] * geo[G_H] * geo[G_W]) * (-(-int(geo[G_CG]) // 4))


def phase_words(geo: np.ndarray) -> int:
    """Words of every unit's phase planes (``_phase_copy``), with the slack a last panel reads past them."""
    c4s = -(-int(geo[G_CG]) // 4)
    plane = int(geo[G_PHH] * geo[G_PHW])
    return int(geo[G_N] * geo[G_G] * geo[G_SH] * geo[G_SW]) * c4s * plane + int(geo[G_PHW]) + qpanel.PANEL


def vnni_fields(geo: np.ndarray, kernel_taps: int, rows_from: int, za: int, rowterm: bool, a_xor: int) -> None:
    """Sets ``geo``'s VNNI fields (``kernel_taps``: KH * KW; ``rows_from``: ``ROWS_*``)."""
    depth = int(geo[G_CG]) * kernel_taps
    geo[G_KPAD] = -(-depth // 4) * 4
    geo[G_NPAD] = qpanel.padded(int(geo[G_MG]))
    geo[G_ZA], geo[G_ROWTERM], geo[G_ROWS], geo[G_AXOR] = za, int(rowterm), rows_from, a_xor


def vnni_slab(depth: int) -> int:
    """The widest slab of positions whose A rows fit ``VNNI_SLAB_BYTES``."""
    return max(qpanel.TILE, min(MAX_SLAB, VNNI_SLAB_BYTES // max(1, depth) // qpanel.TILE * qpanel.TILE))


def vnni_scratch_sizes(geo: np.ndarray) -> tuple[int, int, int, int]:
    """Elements per part of the im2row scratch (uint8), of C (int32) and of the row sums (int64), and of the
    channels-last copy of the input (uint8, one for all parts)."""
    width = int(geo[G_SLABW])
    if geo[G_ROWS] == ROWS_TRANSPOSED:   # C's slab and the phase planes (A^T is read in place)
        return 1, int(geo[G_MG] * geo[G_NPAD]), 1, 4 * phase_words(geo)
    rows = int(geo[G_KPAD]) * width if geo[G_ROWS] == ROWS_IM2ROW else 1
    copy = int(geo[G_N] * geo[G_G] * geo[G_H] * geo[G_W] * geo[G_CG]) if geo[G_ROWS] != ROWS_INPUT else 1
    if geo[G_ROWS] == ROWS_PLANES:   # the whole im2row takes the copy's place
        copy = planes_bytes(geo)
    return rows, int(geo[G_NPAD]) * width, width, copy


def planes_bytes(geo: np.ndarray) -> int:
    """Bytes of the im2row of every position (``ROWS_PLANES``)."""
    return int(geo[G_N] * geo[G_G] * geo[G_OH] * geo[G_OW] * geo[G_KPAD])


@intrinsic
def _copy_bytes(typingctx, dst, src, count):
    """memcpy(dst, src, count) on addresses: a tap's run of channels (Numba's byte loop ran at ~1 GB/s there,
    its vector body skipped; 64 x 56x56 3x3's im2row took 2.4 ms)."""
    def codegen(context, builder, signature, args):
        d, s, n = args
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(d, i8p), builder.inttoptr(s, i8p), n, 1)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64), codegen


@intrinsic
def _fill_bytes(typingctx, dst, count, value):
    """memset(dst, value, count) on an address."""
    def codegen(context, builder, signature, args):
        d, n, v = args
        cgutils.memset(builder, builder.inttoptr(d, ir.IntType(8).as_pointer()), n, builder.trunc(v, ir.IntType(8)))
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64), codegen


@njit(cache=True, nogil=True)
def _im2row_planes(x, geo, col):
    """col[(unit, p), (a, b, c)] for every image and group, from the NCHW input (as unsigned bytes; the zero point
    outside the image, zeros past the depth): per channel, tap and output row the positions inside the image are
    one range, stored ``G_KPAD`` apart. For few channels: a memcpy per tap of 3 channels cost more than its bytes
    (the first conv of an RGB net spent ~21 us of its 92 in 9216 of them, and ~4 us on the channels-last copy).
    One function for every output type and part count, called before the items (inlined into them, it cost
    every driver's compilation ~1 s)."""
    cg, h, w, oh_, ow = geo[G_CG], geo[G_H], geo[G_W], geo[G_OH], geo[G_OW]
    kh_, kw_, kpad = geo[G_KH], geo[G_KW], geo[G_KPAD]
    sh, sw, ph, pw, dh, dw = geo[G_SH], geo[G_SW], geo[G_PH], geo[G_PW], geo[G_DH], geo[G_DW]
    za = np.uint8(geo[G_ZA])
    flip = np.uint8(128) if geo[G_SIGNED] else np.uint8(0)
    ld = U(kpad)
    for j in range(U(geo[G_N] * geo[G_G] * oh_ * ow * kpad)):
        col[j] = 0   # the padding past the depth (the rest is written below)
    for unit in range(geo[G_N] * geo[G_G]):
        for oh in range(oh_):
            row = (unit * oh_ + oh) * ow
            for a in range(kh_):
                ih = oh * sh - ph + a * dh
                for b in range(kw_):
                    off = b * dw - pw
                    lo = min(ow, max(0, (-off + sw - 1) // sw))
                    hi = max(lo, min(ow, (w - 1 - off) // sw + 1)) if 0 <= ih < h and w - 1 - off >= 0 else lo
                    for c in range(cg):
                        k = (a * kw_ + b) * cg + c
                        for j in range(lo):
                            col[(row + j) * kpad + k] = za
                        if hi > lo:
                            src = U((unit * cg + c) * h * w + ih * w + lo * sw + off)
                            dst, step = U((row + lo) * kpad + k), U(sw)
                            for j in range(U(hi - lo)):
                                col[dst + j * ld] = x[src + j * step] ^ flip
                        for j in range(hi, ow):
                            col[(row + j) * kpad + k] = za


@njit(cache=True, nogil=True)
def _im2row(xt, geo, img, g, p0, p1, col):
    """col[j, (a, b, c)] = xt[img, g, ih, iw, c] for output position p = p0 + j and tap (a, b) (the activation's
    zero point outside the image; zeros past the depth up to ``G_KPAD``): one run of CG bytes per tap."""
    cg, h, w, ow = geo[G_CG], geo[G_H], geo[G_W], geo[G_OW]
    kh_, kw_, kpad = geo[G_KH], geo[G_KW], geo[G_KPAD]
    sh, sw, ph, pw, dh, dw = geo[G_SH], geo[G_SW], geo[G_PH], geo[G_PW], geo[G_DH], geo[G_DW]
    za = geo[G_ZA]
    source = xt.ctypes.data + (img * geo[G_G] + g) * h * w * cg
    depth = kh_ * kw_ * cg
    target = col.ctypes.data
    for p in range(p0, p1):
        oh, ow_ = p // ow, p % ow
        dst = target + (p - p0) * kpad
        for a in range(kh_):
            ih = oh * sh - ph + a * dh
            for b in range(kw_):
                iw = ow_ * sw - pw + b * dw
                if 0 <= ih < h and 0 <= iw < w:
                    _copy_bytes(dst, source + (ih * w + iw) * cg, cg)
                else:
                    _fill_bytes(dst, cg, za)
                dst += cg
        if kpad > depth:
            _fill_bytes(dst, kpad - depth, 0)


@njit(cache=True, nogil=True)
def _words(x, src, hw, xp, at, n, flip):
    """xp[at + j] = the word of the bytes x[src + j + t hw], t < 4 (lowest first), xored with ``flip``, for j < n.
    NOTE: on slices, the shifts by uint32 amounts: on offsets into the whole arrays the loop stayed scalar (0.6 ns
    a word against 0.04; with an int64 shift, which made the words int64, 1.4)."""
    b8, b16, b24 = np.uint32(8), np.uint32(16), np.uint32(24)
    o = xp[at:at + n]
    x0, x1, x2, x3 = x[src:src + n], x[src + hw:src + hw + n], x[src + 2 * hw:src + 2 * hw + n], \
        x[src + 3 * hw:src + 3 * hw + n]
    for j in range(n):
        o[j] = (np.uint32(x0[j]) | (np.uint32(x1[j]) << b8) | (np.uint32(x2[j]) << b16)
                | (np.uint32(x3[j]) << b24)) ^ flip


@njit(cache=True, nogil=True)
def _few_words(x, src, hw, xp, at, n, flip, channels):
    """``_words`` of 1 to 3 channels (zeros in the other bytes)."""
    b8, b16 = np.uint32(8), np.uint32(16)
    o = xp[at:at + n]
    x0 = x[src:src + n]
    if channels == 1:
        for j in range(n):
            o[j] = np.uint32(x0[j]) ^ flip
    elif channels == 2:
        x1 = x[src + hw:src + hw + n]
        for j in range(n):
            o[j] = (np.uint32(x0[j]) | (np.uint32(x1[j]) << b8)) ^ flip
    else:
        x1, x2 = x[src + hw:src + hw + n], x[src + 2 * hw:src + 2 * hw + n]
        for j in range(n):
            o[j] = (np.uint32(x0[j]) | (np.uint32(x1[j]) << b8) | (np.uint32(x2[j]) << b16)) ^ flip


@njit(cache=True, nogil=True)
def _interleave(x, geo, xi):
    """xi[unit, c4, pixel] (uint32) = the word of channels 4 c4 .. 4 c4 + 3 of the pixel (lowest channel in the
    lowest byte, as unsigned bytes: int8 + 128; zeros past CG, whose weights are zeros): a plane of words at a
    time, from the contiguous NCHW input."""
    cg, hw = geo[G_CG], U(geo[G_H] * geo[G_W])
    c4s = (cg + 3) // 4
    flip = np.uint32(0x80808080) if geo[G_SIGNED] else np.uint32(0)
    for unit in range(geo[G_N] * geo[G_G]):
        for c4 in range(c4s):
            dst = U(unit * c4s + c4) * hw
            src = U(unit * cg + 4 * c4) * hw
            channels = min(4, cg - 4 * c4)
            if channels == 4:
                _words(x, src, hw, xi, dst, hw, flip)
            else:
                _few_words(x, src, hw, xi, dst, hw, flip & np.uint32((1 << (8 * channels)) - 1), channels)


@njit(cache=True, nogil=True)
def _phase_copy(x, geo, xp, xi):
    """xp[unit, phase, c4, r, c] (uint32) = the word (``_interleave``) of the padded input at row r SH + pr,
    column c SW + pc, phase = pr SW + pc; the zero point's word in the padding. Only the phases some tap reads are
    written. The interleaved input goes to ``xi`` first, or straight to ``xp`` where the one phase plane is the
    input (``G_DIRECT``)."""
    cg, h, w, kh_, kw_ = geo[G_CG], geo[G_H], geo[G_W], geo[G_KH], geo[G_KW]
    sh, sw, ph, pw, dh, dw = geo[G_SH], geo[G_SW], geo[G_PH], geo[G_PW], geo[G_DH], geo[G_DW]
    phh, phw = geo[G_PHH], geo[G_PHW]
    if geo[G_DIRECT]:
        _interleave(x, geo, xp)
        return
    _interleave(x, geo, xi)
    c4s = (cg + 3) // 4
    plane = phh * phw
    za = np.uint32(geo[G_ZA]) * np.uint32(0x01010101)
    step = U(sw)
    for unit in range(geo[G_N] * geo[G_G]):
        for pr in range(sh):
            used = False
            for a in range(kh_):
                used = used or (a * dh) % sh == pr
            for pc in range(sw):
                used_c = False
                for b in range(kw_):
                    used_c = used_c or (b * dw) % sw == pc
                if not (used and used_c):
                    continue
                # columns c whose input column c SW + pc - PW is inside the image: lo <= c < hi
                off = pc - pw
                lo = min(phw, max(0, (-off + sw - 1) // sw))
                hi = max(lo, min(phw, (w - 1 - off) // sw + 1)) if w - 1 - off >= 0 else lo
                for c4 in range(c4s):
                    base = U(((unit * sh * sw + pr * sw + pc) * c4s + c4) * plane)
                    src0 = U((unit * c4s + c4) * h * w)
                    for r in range(phh):
                        dst = base + U(r * phw)
                        ih = r * sh + pr - ph
                        if ih < 0 or ih >= h:
                            for c in range(U(phw)):
                                xp[dst + c] = za
                            continue
                        for c in range(lo):
                            xp[dst + c] = za
                        for c in range(hi, phw):
                            xp[dst + c] = za
                        src = src0 + U(ih * w + lo * sw + off)
                        at = dst + U(lo)
                        if sw == 1:
                            for j in range(U(hi - lo)):
                                xp[at + j] = xi[src + j]
                        else:
                            for j in range(U(hi - lo)):
                                xp[at + j] = xi[src + j * step]


@njit(cache=True, nogil=True)
def _vnni_epilogue_t(cbuf, img, g, r0, r1, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi):
    """C[m, (r - r0) PHW + ow] (int32, rows of ``G_NPAD``) plus the bias into the output plane of channel
    g * MG + m at (r, ow) for output rows r0 <= r < r1 and ow < OW (C's columns past OW dropped), through
    ``_finish``: runs of a row in and out, so that the loops vectorize."""
    mg, ld, phw, ow = geo[G_MG], U(geo[G_NPAD]), U(geo[G_PHW]), U(geo[G_OW])
    requant = geo[G_MODE] == MODE_REQUANT
    for m in range(mg):
        c = g * mg + m
        b = bias[c]
        s = s2[c] if requant else 1.0
        for r in range(r0, r1):
            o = U(img * geo[G_ON] + c * geo[G_OC] + r * geo[G_OW])
            src = U(m) * ld + U(r - r0) * phw
            if requant:
                for j in range(ow):
                    _finish(out, o + j, np.float64(cbuf[src + j]) + b, True, s1, s, y_scale, y_zero, lo, hi)
            else:
                for j in range(ow):
                    _finish(out, o + j, np.float64(cbuf[src + j]) + b, False, s1, 1.0, y_scale, y_zero, lo, hi)


@njit(cache=True, nogil=True)
def _row_sums(rows, start, lda, depth, count, flip, sums):
    """sums[j] = sum over k < depth of rows[start + j * lda + k] ^ flip, for j < count."""
    for j in range(count):
        at = start + j * lda
        total = 0
        for k in range(depth):
            total += rows[at + k] ^ flip
        sums[j] = total


@njit(cache=True, nogil=True)
def _vnni_epilogue(cbuf, sums, zbp, img, g, p0, p1, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi):
    """C[j, m] (int32, rows of ``G_NPAD``), plus the row term -zb'[m] sums[j] where there is one, wrapped to
    int32, plus the bias, into the output at (img, p0 + j, g * MG + m) through ``_finish``: where the output's
    channels are contiguous (a MatMul's) a row of channels at a time, else (a conv's [N, C, positions]) a
    channel's positions at a time, so that the inner loops vectorize. ``bias`` and ``s2`` hold a value per
    output channel."""
    mg, npad = geo[G_MG], geo[G_NPAD]
    requant = geo[G_MODE] == MODE_REQUANT
    c0 = g * mg
    if geo[G_OC] != 1:   # a conv's output [N, C, positions]: per channel, a run of positions
        column = np.empty(p1 - p0, np.float64)
        for m in range(mg):
            o = img * geo[G_ON] + (c0 + m) * geo[G_OC] + p0 * geo[G_OP]
            _finish_plane(cbuf, m, npad, sums, -zbp[c0 + m] if geo[G_ROWTERM] else 0, p1 - p0, out, o, bias[c0 + m],
                          s2[c0 + m], requant, s1, y_scale, y_zero, lo, hi, column)
        return
    for j in range(p1 - p0):
        src = j * npad
        o = img * geo[G_ON] + c0 + (p0 + j) * geo[G_OP]
        if geo[G_ROWTERM]:
            row = sums[j]
            for m in range(mg):   # modulo 2^32, as the kernel
                cbuf[src + m] = np.int32(np.int64(cbuf[src + m]) - zbp[c0 + m] * row)
        _finish_row(cbuf[src:src + mg], out[o:o + mg], bias[c0:c0 + mg], s2[c0:c0 + mg], requant, s1, y_scale,
                    y_zero, lo, hi)


@njit(cache=True, nogil=True)
def _finish_plane(cbuf, m, npad, sums, zrow, count, out, o, b, s, requant, s1, y_scale, y_zero, lo, hi, column):
    """out[o + j] = ``_finish`` of C[j, m] (+ zrow * sums[j], wrapped to int32) + b for j < count: one output
    channel's positions, contiguous in a conv's output. C's column is gathered into ``column`` first (strided
    loads kept the epilogue's loop scalar), on offsets, not slices (a slice costs reference counting: the
    epilogue of 1024 x 16 outputs through rows and the channels-last copy took 45 us)."""
    ld, at, n = U(npad), U(m), U(count)
    if zrow != 0:
        for j in range(n):
            column[j] = np.float64(np.int32(np.int64(cbuf[at + j * ld]) + zrow * sums[j])) + b
    else:
        for j in range(n):
            column[j] = np.float64(cbuf[at + j * ld]) + b
    if requant:
        for j in range(n):
            _finish(out, U(o) + j, column[j], True, s1, s, y_scale, y_zero, lo, hi)
    else:
        for j in range(n):
            _finish(out, U(o) + j, column[j], False, s1, 1.0, y_scale, y_zero, lo, hi)


@njit(cache=True, nogil=True)
def _finish_row(acc, out, bias, s2, requant, s1, y_scale, y_zero, lo, hi):
    """out[m] = ``_finish`` of acc[m] + bias[m]: one row of views, one loop a mode, so that each vectorizes
    (indexing the whole arrays inside the epilogue's loops kept them scalar: 128 x 768 outputs 169 -> 36 us)."""
    if requant:
        for m in range(acc.size):
            _finish(out, m, np.float64(acc[m]) + bias[m], True, s1, s2[m], y_scale, y_zero, lo, hi)
    else:
        for m in range(acc.size):
            _finish(out, m, np.float64(acc[m]) + bias[m], False, s1, 1.0, y_scale, y_zero, lo, hi)


@njit(cache=True, nogil=True)
def vpart(x, xt, packed, init, zbp, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col, cbuf, sums, p, nparts):
    """Work items p, p + nparts, ... of the product on the VNNI kernel (``vrun``); ``xt`` already holds the
    channels-last copy where A's rows come from it or from an im2row."""
    units = geo[G_N] * geo[G_G]
    slabs, width = geo[G_SLABS], geo[G_SLABW]
    positions = geo[G_OH] * geo[G_OW]
    mg, cg, kpad, npad = geo[G_MG], geo[G_CG], geo[G_KPAD], geo[G_NPAD]
    rows_from = geo[G_ROWS]
    # the product straight into the output: int32, no row term, C's layout the output's (a MatMul's)
    direct_out = geo[G_MODE] == MODE_INT32 and not geo[G_ROWTERM] and geo[G_OC] == 1
    for item in range(p, units * slabs, nparts):
        unit, slab = item // slabs, item % slabs
        img, g = unit // geo[G_G], unit % geo[G_G]
        p0 = slab * width
        p1 = min(positions, p0 + width)
        if p0 >= p1:
            continue
        if rows_from == ROWS_INPUT:   # A's rows in place (a MatMul: unit channel stride)
            rows, start, lda, depth, flip = x, img * geo[G_XN] + g * cg * geo[G_XC] + p0 * geo[G_XW], geo[G_XW], cg, 128
        elif rows_from == ROWS_PLANES:   # the im2row of every position, built by ``vrun``
            rows, start, lda, depth, flip = xt, (unit * positions + p0) * kpad, kpad, kpad, 0
        elif rows_from == ROWS_CHANNELS_LAST:   # a 1x1 convolution of stride 1: the copy's pixels are its rows
            rows, start, lda, depth, flip = xt, ((img * geo[G_G] + g) * geo[G_H] * geo[G_W] + p0) * cg, cg, cg, 0
        else:
            _im2row(xt, geo, img, g, p0, p1, col)
            rows, start, lda, depth, flip = col, 0, kpad, kpad, 0
        a_xor = geo[G_AXOR] if rows_from == ROWS_INPUT else 0
        pb = packed[g].ctypes.data
        pi = init[g].ctypes.data
        if direct_out:
            c_addr = out.ctypes.data + 4 * (img * geo[G_ON] + g * mg + p0 * geo[G_OP])
            qpanel.qpanel(pb, rows.ctypes.data + start, lda, c_addr, geo[G_OP], p1 - p0, depth, mg, a_xor, pi)
            continue
        qpanel.qpanel(pb, rows.ctypes.data + start, lda, cbuf.ctypes.data, npad, p1 - p0, depth, mg, a_xor, pi)
        if geo[G_ROWTERM]:
            _row_sums(rows, start, lda, depth, p1 - p0, flip if a_xor else 0, sums)
        _vnni_epilogue(cbuf, sums, zbp, img, g, p0, p1, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi)


@njit(cache=True, nogil=True, parallel=True)
def _vparallel(x, xt, packed, init, zbp, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col, cbuf, sums, nparts):
    for p in prange(nparts):
        vpart(x, xt, packed, init, zbp, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col[p], cbuf[p], sums[p],
              p, nparts)


def vrun(x: np.ndarray, packed: np.ndarray, init: np.ndarray, zbp: np.ndarray, out: np.ndarray, geo: np.ndarray,
         bias: np.ndarray, s1: float, s2: np.ndarray, y_scale: float, y_zero: float, lo: float, hi: float,
         col: np.ndarray, cbuf: np.ndarray, sums: np.ndarray, xt: np.ndarray, nparts: int) -> None:
    """The whole product into ``out`` on the VNNI kernel (``vnni_weights``, ``vnni_fields``); scratch [nparts, *]
    (``vnni_scratch_sizes``). A convolution's input is copied channels-last into ``xt`` first (as unsigned
    bytes: numpy's transposing copies took 60 us on 64 x 56x56 bytes, Numba's byte loops 110-170 us, their
    strided stores); its items write the output in place, a channel's positions at a time (``_finish_plane``).
    Bytes in and out as uint8, as ``run``."""
    n, groups, cg, hw = (int(v) for v in (geo[G_N], geo[G_G], geo[G_CG], geo[G_H] * geo[G_W]))
    x = x.reshape(-1).view(np.uint8)
    if geo[G_ROWS] == ROWS_PLANES:
        _im2row_planes(x, geo, xt)
    elif geo[G_ROWS] != ROWS_INPUT:
        moved = xt[:x.size].reshape(n, groups, hw, cg)
        np.copyto(moved, x.reshape(n, groups, cg, hw).transpose(0, 1, 3, 2))
        if geo[G_SIGNED]:
            np.bitwise_xor(moved, np.uint8(128), out=moved)
    target = out.reshape(-1)
    if target.dtype == np.int8:
        target = target.view(np.uint8)
    if nparts > 1:
        _vparallel(x, xt, packed, init, zbp, target, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col, cbuf, sums,
                   nparts)
    else:
        vpart(x, xt, packed, init, zbp, target, geo, bias, s1, s2, y_scale, y_zero, lo, hi, col[0], cbuf[0],
              sums[0], 0, 1)


@njit(cache=True, nogil=True)
def tpart(xp, weight, init, offsets, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, cbuf, p, nparts):
    """Work items p, p + nparts, ... of the transposed product (``trun``): an item is a slab of ``G_SLABW``
    output rows of one (image, group), C = W' A^T with A^T read in place from the phase planes ``xp``."""
    units = geo[G_N] * geo[G_G]
    slabs, rows, oh, phw = geo[G_SLABS], geo[G_SLABW], geo[G_OH], geo[G_PHW]
    mg, kpad, ld = geo[G_MG], geo[G_KPAD], geo[G_NPAD]
    planes = geo[G_SH] * geo[G_SW] * ((geo[G_CG] + 3) // 4) * geo[G_PHH] * phw   # words a unit
    for item in range(p, units * slabs, nparts):
        unit, slab = item // slabs, item % slabs
        img, g = unit // geo[G_G], unit % geo[G_G]
        r0 = slab * rows
        r1 = min(oh, r0 + rows)
        if r0 >= r1:
            continue
        qpanel.qpanel_t(weight[g].ctypes.data, kpad, xp.ctypes.data + 4 * (unit * planes + r0 * phw),
                        offsets.ctypes.data, cbuf.ctypes.data, ld, mg, kpad, (r1 - r0) * phw, init[g].ctypes.data)
        _vnni_epilogue_t(cbuf, img, g, r0, r1, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi)


@njit(cache=True, nogil=True)
def _tsingle(x, xp, xi, weight, init, offsets, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, cbuf):
    _phase_copy(x, geo, xp, xi)
    tpart(xp, weight, init, offsets, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, cbuf[0], 0, 1)


@njit(cache=True, nogil=True, parallel=True)
def _tparallel(x, xp, xi, weight, init, offsets, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, cbuf, nparts):
    _phase_copy(x, geo, xp, xi)
    for p in prange(nparts):
        tpart(xp, weight, init, offsets, out, geo, bias, s1, s2, y_scale, y_zero, lo, hi, cbuf[p], p, nparts)


def trun(x: np.ndarray, weight: np.ndarray, init: np.ndarray, offsets: np.ndarray, out: np.ndarray,
         geo: np.ndarray, bias: np.ndarray, s1: float, s2: np.ndarray, y_scale: float, y_zero: float, lo: float,
         hi: float, cbuf: np.ndarray, xp: np.ndarray, xi: np.ndarray, nparts: int) -> None:
    """A convolution on the transposed VNNI product (``vnni_weights_t``, ``vnni_fields_t``): the input copied
    once into phase planes of four-channel words (``_phase_copy``; ``xp``: uint32 [``phase_words``], ``xi``:
    uint32 [``interleaved_words``]), then per item C = W' A^T (``tlc_qpanel_t``, A^T read in place at the taps'
    offsets) and the epilogue into the output's planes (``cbuf``: int32 [nparts, MG * NPAD]). Bytes in and out
    as uint8, as ``vrun``."""
    x = x.reshape(-1).view(np.uint8)
    target = out.reshape(-1)
    if target.dtype == np.int8:
        target = target.view(np.uint8)
    if nparts > 1:
        _tparallel(x, xp, xi, weight, init, offsets, target, geo, bias, s1, s2, y_scale, y_zero, lo, hi, cbuf,
                   nparts)
    else:
        _tsingle(x, xp, xi, weight, init, offsets, target, geo, bias, s1, s2, y_scale, y_zero, lo, hi, cbuf)


def compile_transposed_for(out_dtype: np.dtype, nparts: int) -> str:
    """Compile (or load from the cache) the transposed product's driver for this output dtype and part count."""
    requant = np.dtype(out_dtype) != np.int32
    geo = geometry(1, 1, 1, 1, (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (1, 1), (1, 1), (1, 1, 1), False, 0,
                   1, MODE_REQUANT if requant else MODE_INT32, False, nparts)
    weight, init, za = vnni_weights_t(np.ones((1, 1, 1), np.int8), np.zeros(1), 1, np.dtype(np.uint8), 0)
    offsets = vnni_fields_t(geo, za, nparts)
    _, cs, _, copy = vnni_scratch_sizes(geo)
    trun(np.ones((1, 1, 1, 1), np.uint8), weight, init, offsets, np.zeros((1, 1, 1, 1), out_dtype), geo,
         np.zeros(1), 1.0, np.ones(1), 1.0, 0.0, 0.0, 255.0, np.zeros((nparts, cs), np.int32),
         np.zeros(copy // 4, np.uint32), np.zeros(interleaved_words(geo), np.uint32), nparts)
    return "qgemm-transposed"


def compile_vnni_for(out_dtype: np.dtype, nparts: int) -> str:
    """Compile (or load from the cache) the VNNI driver for this output dtype and part count, on a 1x1 product."""
    requant = np.dtype(out_dtype) != np.int32
    geo = geometry(1, 1, 1, 1, (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), (0, 0), (1, 1), (1, 1), (1, 1, 1), False, 0,
                   1, MODE_REQUANT if requant else MODE_INT32, False, nparts)
    packed, init, zbp, rowterm, za, a_xor = vnni_weights(np.ones((1, 1, 1), np.int8), np.zeros(1), np.uint8, 0)
    vnni_fields(geo, 1, ROWS_IM2ROW, za, rowterm, a_xor)
    rows, cs, width, copy = vnni_scratch_sizes(geo)
    vrun(np.ones(1, np.uint8), packed, init, zbp, np.zeros(1, out_dtype), geo, np.zeros(1), 1.0, np.ones(1), 1.0,
         0.0, 0.0, 255.0, np.zeros((nparts, rows), np.uint8), np.zeros((nparts, cs), np.int32),
         np.zeros((nparts, width), np.int64), np.zeros(copy, np.uint8), nparts)
    geo[G_ROWS] = ROWS_PLANES   # called by ``vrun`` itself, compiled here too
    _im2row_planes(np.ones(1, np.uint8), geo, np.zeros(planes_bytes(geo), np.uint8))
    return "qgemm-vnni"
