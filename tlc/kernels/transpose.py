"""A transposed copy in tiles: ``out = x.transpose(perm)`` into a contiguous ``out`` when the permutation moves
the input's last axis and numpy's copy would read the input with a stride that is a multiple of 1 KiB.

numpy copies such a view in output order, each output row reading one element per input row; at strides that
are multiples of 1 KiB those reads fall in a few L1 sets and evict each other (BERT's K^T, [1, 128, 12, 64] ->
[1, 12, 64, 128], a 3 KiB stride: 86 us; MLP-Mixer's [1, 196, 256] -> [1, 256, 196], 1 KiB: 42 us). Here the two
axes that matter, the output's last one and the one the input is contiguous along, are walked in 16 x 16
tiles: a tile reads 16 input lines and writes 16 output lines, each whole (36 and 18 us; [1, 512, 1024] 341
against 1121 us). At other strides numpy's copy is faster (a 784-byte stride: 12.5 against 18 us).

``plan(shape, perm, itemsize)`` says whether a permutation takes this path and with which strides; ``copy``
runs it (up to four axes: longer ones, rarer, keep numpy's copy).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

TILE = 16
#: axes the kernel walks (shapes of fewer are padded with unit axes in front)
RANK = 4


#: input strides (bytes) of the output's last axis that take the tiles: multiples of this
ALIASING_STRIDE = 1024


def _element_strides(shape: tuple[int, ...]) -> list[int]:
    """A C-contiguous array's strides in elements."""
    return [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]


def plan(shape: tuple[int, ...], perm: tuple[int, ...], itemsize: int) -> tuple[tuple[int, ...], ...] | None:
    """(output shape, input element strides, output element strides), each as four axes reordered so that the
    axis the input is contiguous along comes third and the output's last one fourth; None where numpy's copy
    is as fast: the permutation keeps the input's last axis last (whole rows), or reads the output's last axis
    at a stride that is no multiple of ``ALIASING_STRIDE``, or has more than four axes."""
    n = len(shape)
    if n < 2 or n > RANK or perm[-1] == n - 1:
        return None
    in_strides = _element_strides(shape)
    if (in_strides[perm[-1]] * itemsize) % ALIASING_STRIDE:
        return None
    out_shape = [shape[p] for p in perm]
    src = [in_strides[p] for p in perm]                       # input stride of each output axis
    dst = [int(np.prod(out_shape[k + 1:], dtype=np.int64)) for k in range(n)]
    unit = perm.index(n - 1)                                  # the output axis the input is contiguous along
    order = [k for k in range(n - 1) if k != unit] + [unit, n - 1]
    pad = RANK - n
    return (tuple([1] * pad + [out_shape[k] for k in order]), tuple([0] * pad + [src[k] for k in order]),
            tuple([0] * pad + [dst[k] for k in order]))


@njit(cache=True, nogil=True, boundscheck=False)
def copy(x, out, shape, src, dst):
    """``out`` (flat) from ``x`` (flat) by ``plan``'s reordered axes: tiles of TILE x TILE over the last two."""
    n0, n1, n2, n3 = shape[0], shape[1], shape[2], shape[3]
    for i0 in range(n0):
        for i1 in range(n1):
            bi = i0 * src[0] + i1 * src[1]
            bo = i0 * dst[0] + i1 * dst[1]
            for t2 in range(0, n2, TILE):
                e2 = min(t2 + TILE, n2)
                for t3 in range(0, n3, TILE):
                    e3 = min(t3 + TILE, n3)
                    for i2 in range(t2, e2):
                        ri = bi + i2 * src[2]
                        ro = bo + i2 * dst[2]
                        for i3 in range(t3, e3):
                            out[np.uint64(ro + i3 * dst[3])] = x[np.uint64(ri + i3 * src[3])]


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
