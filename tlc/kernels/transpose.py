"""A transposed copy in tiles: ``out = x.transpose(perm)`` into a contiguous ``out`` when the permutation moves
the input's last axis and numpy's copy would read the input at a stride that evicts its own lines (``plan``);
whole rows (``copy_rows``) when it keeps the last axis.

numpy copies such a view in output order, each output row reading one element per input row; at strides that
are multiples of 1 KiB those reads fall in a few L1 sets and evict each other (BERT's K^T, [1, 128, 12, 64] ->
[1, 12, 64, 128], a 3 KiB stride: 86 us; MLP-Mixer's [1, 196, 256] -> [1, 256, 196], 1 KiB: 42 us). Here the two
axes that matter, the output's last one and the one the input is contiguous along, are walked in 16 x 16
tiles: a tile reads 16 input lines and writes 16 output lines, each whole. A whole tile runs loops of constant
length, which LLVM unrolls and vectorizes (written with a branch for the edges inside the tile loops it did
neither, and lost to numpy's copy at other strides: a 784-byte stride 20.5 against 14.9 us); the edges run
after the whole tiles. One core, warm caches, against numpy's copy: [1, 196, 256] -> [1, 256, 196] 15.0 against
46.0 us (the kernel before, a loop with the edges inside the tiles: 33.7), GPT-2's K^T [1, 128, 12, 64] ->
[1, 12, 64, 128] 30.5 against 86.4 (65.3), ViT's K^T [1, 3, 197, 64] -> [1, 3, 64, 197] 11.6 against 23.8.

``plan(shape, perm, itemsize, threads)`` says whether a permutation takes this path, with which strides and in
how many parts; ``copy`` runs it, ``copy_parallel`` a part a thread over the leading planes (up to four axes:
longer ones, rarer, keep numpy's copy). The module also holds the copies of whole rows (``copy_rows``: a
transpose that keeps the last axis), of blocks of rows (``copy_block``: Concat and Split) and a ConvTranspose's
taps interleaved into its output where its kernel is its stride (``interleave_taps``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

TILE = 16
#: axes the kernel walks (shapes of fewer are padded with unit axes in front)
RANK = 4
#: input strides (bytes) of the output's last axis at which numpy's copy evicts its own lines: tiles at any size
#: (one core, half the input written by the other core just before, as in a model at two threads: [1, 196, 256]
#: -> [1, 256, 196] 27.5 us against numpy's 47.7; GPT-2's K^T [1, 128, 12, 64] 53 against 88; at batch 8 224
#: against 391)
ALIASING_STRIDE = 1024
#: ... and multiples of this in arrays up to ``SMALL_BYTES`` (ViT's K^T [1, 3, 197, 64], a 256-byte stride: 13 us
#: against 27 in the model at two threads). Larger ones ran slower in tiles (ViT's K^T at batch 8, 700 against
#: 440 us in the model), as did a 784-byte stride whose input the other core had written (MLP-Mixer's [1, 256,
#: 196] -> [1, 196, 256]: 35 against 25 us; numpy's walk down a column is its good case there)
SMALL_ALIASING_STRIDE = 256
SMALL_BYTES = 256 << 10
#: arrays from this size (bytes) take the tiles in parts at several threads whatever the stride (numpy's copy runs
#: on one thread): in the models at 2 threads, ViT's K^T copies at batch 8 1540 -> 645 us, MLP-Mixer's token
#: transposes 1782 -> 1408
PARALLEL_BYTES = 1 << 20


def _element_strides(shape: tuple[int, ...]) -> list[int]:
    """A C-contiguous array's strides in elements."""
    return [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]


def plan(shape: tuple[int, ...], perm: tuple[int, ...], itemsize: int,
         threads: int = 1) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int] | None:
    """(output shape, input element strides, output element strides, parts), the first three as four axes
    reordered so that the axis the input is contiguous along comes third and the output's last one fourth; None
    where the permutation keeps the input's last axis last (whole rows: ``rows_plan``), has more than four axes,
    or numpy's copy is as fast: one thread's copy at a stride that is no multiple of ``ALIASING_STRIDE`` (of
    ``SMALL_ALIASING_STRIDE`` in an array of up to ``SMALL_BYTES``). From ``PARALLEL_BYTES`` at several
    ``threads`` the tiles run a part a thread (``copy_parallel``) at any stride, where there are as many (i0, i1)
    planes."""
    n = len(shape)
    if n < 2 or n > RANK or perm[-1] == n - 1:
        return None
    in_strides = _element_strides(shape)
    out_shape = [shape[p] for p in perm]
    src = [in_strides[p] for p in perm]                       # input stride of each output axis
    dst = [int(np.prod(out_shape[k + 1:], dtype=np.int64)) for k in range(n)]
    unit = perm.index(n - 1)                                  # the output axis the input is contiguous along
    order = [k for k in range(n - 1) if k != unit] + [unit, n - 1]
    pad = RANK - n
    walk = (tuple([1] * pad + [out_shape[k] for k in order]), tuple([0] * pad + [src[k] for k in order]),
            tuple([0] * pad + [dst[k] for k in order]))
    nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
    if threads > 1 and nbytes >= PARALLEL_BYTES and walk[0][0] * walk[0][1] >= threads:
        return (*walk, threads)
    stride = in_strides[perm[-1]] * itemsize
    if stride % (SMALL_ALIASING_STRIDE if nbytes <= SMALL_BYTES else ALIASING_STRIDE):
        return None
    return (*walk, 1)


@njit(cache=True, nogil=True, boundscheck=False)
def copy(x, out, shape, src, dst):
    """``out`` (flat) from ``x`` (flat) by ``plan``'s reordered axes: tiles of TILE x TILE over the last two (the
    input contiguous along the third, ``src[2] == 1``; the output along the fourth, ``dst[3] == 1``). A whole tile
    runs loops of constant length with those unit strides written in, so LLVM unrolls and vectorizes them;
    the edges take the general loops."""
    n0, n1, n2, n3 = shape[0], shape[1], shape[2], shape[3]
    s3, d2 = src[3], dst[2]
    f2, f3 = n2 - n2 % TILE, n3 - n3 % TILE      # the whole tiles end here
    for i0 in range(n0):
        for i1 in range(n1):
            bi = i0 * src[0] + i1 * src[1]
            bo = i0 * dst[0] + i1 * dst[1]
            for t2 in range(0, f2, TILE):
                for t3 in range(0, f3, TILE):
                    ti = bi + t2 + t3 * s3
                    to = bo + t2 * d2 + t3
                    for i2 in range(TILE):
                        for i3 in range(TILE):
                            out[np.uint64(to + i2 * d2 + i3)] = x[np.uint64(ti + i2 + i3 * s3)]
            for i2 in range(n2):                 # the edges: the last columns of every row, the last rows
                for i3 in range(f3 if i2 < f2 else 0, n3):
                    out[np.uint64(bo + i2 * d2 + i3)] = x[np.uint64(bi + i2 + i3 * s3)]


@njit(cache=True, nogil=True, parallel=True)
def copy_parallel(x, out, shape, src, dst, nparts):
    """``copy`` in ``nparts`` runs of the (i0, i1) planes of ``plan``'s leading axes on the pool."""
    planes = shape[0] * shape[1]
    one = np.array([1, 1, shape[2], shape[3]], np.int64)
    for p in prange(nparts):
        for q in range(planes * p // nparts, planes * (p + 1) // nparts):
            i0, i1 = q // shape[1], q % shape[1]
            copy(x[i0 * src[0] + i1 * src[1]:], out[i0 * dst[0] + i1 * dst[1]:], one, src, dst)


# ---------------------------------------------------------------------------- whole rows, in parts
#: leading axes ``copy_rows`` walks (shapes of fewer are padded with unit axes in front)
ROWS_RANK = 6


def rows_plan(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """(the output's leading axes, the input element stride of each, the row length) for a permutation that
    keeps the input's last axis last, so that the copy moves whole rows (ViT's [B, 197, 3, 3, 64] -> [3, B, 3,
    197, 64]: rows of 64); None for any other, or more than ``ROWS_RANK`` + 1 axes."""
    n = len(shape)
    if n < 2 or n > ROWS_RANK + 1 or perm[-1] != n - 1 or list(perm) == list(range(n)):
        return None
    in_strides = _element_strides(shape)
    lead = [shape[p] for p in perm[:-1]]
    src = [in_strides[p] for p in perm[:-1]]
    pad = ROWS_RANK - len(lead)
    return tuple([1] * pad + lead), tuple([0] * pad + src), int(shape[-1])


@njit(cache=True, nogil=True, boundscheck=False)
def copy_rows(x, out, shape, src, row, q0, q1):
    """Rows [q0, q1) of ``out`` (flat, rows of ``row`` elements in the order of the leading axes ``shape``) from
    ``x`` (flat), the row with leading index (i0..i5) starting at sum(i_k * src[k]): the index of row q0 worked
    out once, then counted up row by row (a division per axis and row cost more than the copy)."""
    if q0 >= q1:
        return
    idx = np.empty(ROWS_RANK, np.int64)
    rest, at = q0, 0
    for k in range(ROWS_RANK - 1, -1, -1):
        idx[k] = rest % shape[k]
        rest //= shape[k]
        at += idx[k] * src[k]
    base = q0 * row
    for _ in range(q0, q1):
        for j in range(row):   # (unsigned indices: no negative-index wrap to check, so the loop vectorizes)
            out[np.uint64(base + j)] = x[np.uint64(at + j)]
        base += row
        k = ROWS_RANK - 1
        idx[k] += 1
        at += src[k]
        while k > 0 and idx[k] == shape[k]:   # carry into the axis before
            at -= shape[k] * src[k]
            idx[k] = 0
            k -= 1
            idx[k] += 1
            at += src[k]


@njit(cache=True, nogil=True, parallel=True)
def copy_rows_parallel(x, out, shape, src, row, nparts):
    """``copy_rows`` of every row, in ``nparts`` runs of rows on the pool."""
    rows = out.size // row
    for p in prange(nparts):
        copy_rows(x, out, shape, src, row, rows * p // nparts, rows * (p + 1) // nparts)


# ---------------------------------------------------------------------------- blocks: Concat, Split
@njit(cache=True, nogil=True, boundscheck=False)
def copy_block(x, out, width, x_stride, x_off, out_stride, out_off, lo, hi):
    """Elements [lo, hi) (row-major) of a block of rows of ``width`` elements from ``x`` (flat; row r at ``x_off +
    r * x_stride``) to ``out`` (flat; row r at ``out_off + r * out_stride``): a Concat's input into its range of
    every row of the output, a Split's range of every row of the input into an output."""
    r, j = lo // width, lo % width
    while lo < hi:
        n = min(width - j, hi - lo)
        src, dst = x_off + r * x_stride + j, out_off + r * out_stride + j
        for k in range(n):   # (unsigned indices: the loop vectorizes)
            out[np.uint64(dst + k)] = x[np.uint64(src + k)]
        lo += n
        r += 1
        j = 0


@njit(cache=True, nogil=True, parallel=True)
def copy_block_parallel(x, out, width, x_stride, x_off, out_stride, out_off, total, nparts):
    """``copy_block`` of a block's ``total`` elements, in ``nparts`` runs on the pool."""
    for p in prange(nparts):
        copy_block(x, out, width, x_stride, x_off, out_stride, out_off, total * p // nparts,
                   total * (p + 1) // nparts)


# ---------------------------------------------------------------------------- a ConvTranspose's taps
@njit(cache=True, nogil=True, boundscheck=False)
def interleave_taps(cols, bias, out, kh, kw):
    """The taps of a ConvTranspose whose kernel is its stride (no padding, dilation or output padding: every
    output element is one tap's) into its output, with the bias: ``out[b, c, iy * kh + ti, ix * kw + tj] =
    cols[b, c, ti * kw + tj, iy, ix] + bias[c]`` (``cols`` [N, M, kh * kw, H, W], ``bias`` [M]: -0.0 each where
    the conv has none, which keeps every value as it is). The output is written row by row, a 2-wide kernel's
    two taps as pairs of lanes (vectorized), where numpy's strided copy a tap, then the bias, took two passes."""
    n, m, taps, h, w = cols.shape
    wo = w * kw
    cf, of = cols.reshape(cols.size), out.reshape(out.size)
    plane = h * w
    for q in range(n * m):
        add = bias[q % m]
        base, top = q * taps * plane, q * h * kh * wo
        for iy in range(h):
            for ti in range(kh):
                o = top + (iy * kh + ti) * wo
                if kw == 2:
                    s0 = base + ti * 2 * plane + iy * w
                    s1 = s0 + plane
                    for ix in range(w):
                        of[np.uint64(o + 2 * ix)] = cf[np.uint64(s0 + ix)] + add
                        of[np.uint64(o + 2 * ix + 1)] = cf[np.uint64(s1 + ix)] + add
                    continue
                for tj in range(kw):
                    s = base + (ti * kw + tj) * plane + iy * w
                    for ix in range(w):
                        of[np.uint64(o + ix * kw + tj)] = cf[np.uint64(s + ix)] + add
