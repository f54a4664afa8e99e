"""Scaled dot-product attention, one (batch, head) at a time: S = scale * Q K^T and Y = P V by BLAS from compiled
code (``blas.gemm_*``), the masked softmax of each row of S in between, while S is in cache.

The runtime (``tlc.runtime.attention``) hands every array flat (1-D, C-contiguous) with the element strides of
its (batch, heads, seq, size) view in an int64 [4] array, so 3-D (batch, seq, heads * size) and 4-D inputs, a
KV cache concatenated into the present outputs, and a Y in either layout take one compiled function per dtype.
Query head h reads key/value head h // group (GQA/MQA).

Which keys row i of batch b sees (its absolute position is ``pos = offset[b] + i``): [lo, hi) with
lo = pos - left (left >= 0), hi = min(limit[b], pos + 1 if causal, pos + right + 1 (right >= 0), total); inside
it an additive ``bias`` (float, any broadcast strides, last axis ``bias_width`` long, keys past it masked) and a
boolean ``allow`` (uint8, the same) apply. Scores are soft-capped first (cap * tanh(s / cap)) when ``softcap``
> 0. A row that sees no key (empty range, or every score -inf) is zeros, as the reference's errata say.

The exp is ``tlc.kernels.mathlib``'s (no libm call: the row loop vectorizes). P V takes the panel product of
``tlc.kernels.panel`` on V where it lies (float32, AVX-512 hosts: ``uses_panel``), else BLAS.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from . import gemm, panel, typed
from .blas import gemm_f32, gemm_f64
from .panel import BIAS_NONE, PANEL, panel_strided

panel.ensure()   # the symbol the panel product calls (compiled code links it by name)

U = np.uint64
#: query rows per block: the products of a block stop at the last key one of its rows sees
BLOCK = 32


class Geometry(NamedTuple):
    """Sizes and attributes of one attention call (fixed per input-shape signature)."""

    batch: int
    q_heads: int
    group: int           # query heads per key/value head
    q_seq: int
    total: int           # keys: past + new
    head: int            # Q/K head size
    v_head: int
    scale: float
    softcap: float
    causal: bool
    left: int            # -1: unbounded
    right: int
    nparts: int
    panel: bool          # P V by the panel product on V where it is (float32, AVX-512), else BLAS


@njit(cache=True, nogil=True, inline="always")
def _gemm(m, n, k, alpha, pa, a_rs, a_cs, pb, b_rs, b_cs, pc, ldc, item):
    if item == 4:
        gemm_f32(m, n, k, alpha, pa, a_rs, a_cs, pb, b_rs, b_cs, 0.0, pc, ldc)
    else:
        gemm_f64(m, n, k, alpha, pa, a_rs, a_cs, pb, b_rs, b_cs, 0.0, pc, ldc)


@njit(cache=True, nogil=True)
def _softmax_row(row, lo, hi, b, h, i, bias, bstr, bwidth, allow, astr, awidth, softcap):
    """row[lo:hi] <- the masked softmax of it; the rest of the row <- 0."""
    total = row.shape[0]
    zero = typed.of_type(row, 0.0)
    neg_inf = typed.of_type(row, -np.inf)
    for j in range(0, lo):
        row[U(j)] = zero
    for j in range(hi, total):
        row[U(j)] = zero
    if softcap > 0:
        cap = typed.of_type(row, softcap)
        inv = typed.of_type(row, 1.0 / softcap)
        for j in range(lo, hi):
            row[U(j)] = cap * typed.tanh(row[U(j)] * inv)
    if bias.size > 0:
        base = b * bstr[0] + h * bstr[1] + i * bstr[2]
        for j in range(lo, hi):
            row[U(j)] += bias[U(base + j * bstr[3])] if j < bwidth else neg_inf
    if allow.size > 0:
        base = b * astr[0] + h * astr[1] + i * astr[2]
        for j in range(lo, hi):
            if j >= awidth or allow[U(base + j * astr[3])] == 0:
                row[U(j)] = neg_inf
    top = _row_max(row, lo, hi)
    if top == neg_inf:   # sees no key (or an empty range): zeros
        for j in range(lo, hi):
            row[U(j)] = zero
        return
    for j in range(lo, hi):
        row[U(j)] = typed.exp(row[U(j)] - top)
    scale = typed.of_type(row, 1.0) / _row_sum(row, lo, hi)
    for j in range(lo, hi):
        row[U(j)] *= scale


# NOTE: the two reductions may reassociate (and assume no NaN) so that they vectorize; no infinity flag: masked
# scores are -inf
_REDUCE = {"cache": True, "nogil": True, "fastmath": {"reassoc", "nsz", "nnan", "contract"}}


@njit(**_REDUCE)
def _row_max(row, lo, hi):
    top = typed.of_type(row, -np.inf)
    for j in range(lo, hi):
        top = max(top, row[U(j)])
    return top


@njit(**_REDUCE)
def _row_sum(row, lo, hi):
    total = typed.of_type(row, 0.0)
    for j in range(lo, hi):
        total += row[U(j)]
    return total


@njit(cache=True, nogil=True, inline="always")
def _keys(g, offset, limit, bi, i):
    """The keys [lo, hi) query row ``i`` of batch ``bi`` sees (hi == lo: none)."""
    pos = offset[bi] + i
    lo = 0 if g.left < 0 else min(max(0, pos - g.left), g.total)
    hi = min(limit[bi], g.total)
    if g.causal:
        hi = min(hi, pos + 1)
    if g.right >= 0:
        hi = min(hi, pos + g.right + 1)
    return lo, max(hi, lo)


@njit(cache=True, nogil=True)
def _one_head(g, q, k, v, y, qs, ks, vs, ys, bi, h, offset, limit, bias, bstr, bwidth, allow, astr, awidth,
              scores):
    """Y[bi, h] = softmax(mask(scale * Q[bi, h] K[bi, h // group]^T)) V[bi, h // group], in blocks of ``BLOCK``
    query rows whose products stop at the last key any row of the block sees (half the work when causal)."""
    item = scores.itemsize
    hk = h // g.group
    total = g.total
    pq = q.ctypes.data + (bi * qs[0] + h * qs[1]) * item
    pk = k.ctypes.data + (bi * ks[0] + hk * ks[1]) * item
    pv = v.ctypes.data + (bi * vs[0] + hk * vs[1]) * item
    y0 = bi * ys[0] + h * ys[1]
    for r0 in range(0, g.q_seq, BLOCK):
        r1 = min(g.q_seq, r0 + BLOCK)
        width = 0
        for i in range(r0, r1):
            width = max(width, _keys(g, offset, limit, bi, i)[1])
        if width == 0:   # no row of the block sees a key: zeros
            for i in range(r0, r1):
                for c in range(g.v_head):
                    y[U(y0 + i * ys[2] + c)] = typed.of_type(y, 0.0)
            continue
        ps = scores.ctypes.data + r0 * total * item
        _gemm(r1 - r0, width, g.head, g.scale, pq + r0 * qs[2] * item, qs[2], qs[3], pk, ks[3], ks[2], ps, total,
              item)
        for i in range(r0, r1):
            lo, hi = _keys(g, offset, limit, bi, i)
            _softmax_row(scores[i, :width], lo, hi, bi, h, i, bias, bstr, bwidth, allow, astr, awidth, g.softcap)
        py = y.ctypes.data + (y0 + r0 * ys[2]) * item
        if g.panel:
            panel_strided(pv, vs[2], PANEL, ps, total, 1, py, ys[2], 1, r1 - r0, width, g.v_head, 0, BIAS_NONE)
        else:
            _gemm(r1 - r0, g.v_head, width, 1.0, ps, total, 1, pv, vs[2], vs[3], py, ys[2], item)


@njit(cache=True, nogil=True)
def _part(g, q, k, v, y, qs, ks, vs, ys, offset, limit, bias, bstr, bwidth, allow, astr, awidth, scores, p):
    count = g.batch * g.q_heads
    for pair in range(count * p // g.nparts, count * (p + 1) // g.nparts):
        _one_head(g, q, k, v, y, qs, ks, vs, ys, pair // g.q_heads, pair % g.q_heads, offset, limit, bias, bstr,
                  bwidth, allow, astr, awidth, scores[p])


@njit(cache=True, nogil=True)
def _serial(g, q, k, v, y, qs, ks, vs, ys, offset, limit, bias, bstr, bwidth, allow, astr, awidth, scores):
    _part(g, q, k, v, y, qs, ks, vs, ys, offset, limit, bias, bstr, bwidth, allow, astr, awidth, scores, 0)


@njit(cache=True, nogil=True, parallel=True)
def _parallel(g, q, k, v, y, qs, ks, vs, ys, offset, limit, bias, bstr, bwidth, allow, astr, awidth, scores):
    for p in prange(g.nparts):
        _part(g, q, k, v, y, qs, ks, vs, ys, offset, limit, bias, bstr, bwidth, allow, astr, awidth, scores, p)


def run(g: Geometry, q, k, v, y, qs, ks, vs, ys, offset, limit, bias, bstr, bwidth, allow, astr, awidth,
        scores) -> None:
    """The whole attention into ``y`` (arguments: see the module docstring); ``scores`` [nparts, q_seq, total]."""
    fn = _parallel if g.nparts > 1 else _serial
    fn(g, q, k, v, y, qs, ks, vs, ys, offset, limit, bias, bstr, bwidth, allow, astr, awidth, scores)


def parts_for(batch_heads: int, macs: int, threads: int) -> int:
    """Parts of a parallel run: the threads, when there are enough heads and ~1M multiply-adds to share."""
    return max(1, min(threads, batch_heads)) if macs >= 1 << 20 else 1


def uses_panel(dtype, v_head: int, total: int) -> bool:
    """Whether P V takes the panel product on V in place (``tlc.kernels.gemm.in_place``: 12 x 128 x 128 x 64 in
    226 us against BLAS's 273)."""
    return gemm.in_place(dtype, True, v_head, total, 1.0)


def warm(dtype, nparts: int) -> str:
    """Compile (or load from Numba's cache) what ``run`` calls for ``dtype`` and ``nparts``: one tiny head."""
    g = Geometry(1, 1, 1, 1, 1, 1, 1, 1.0, 0.0, False, -1, -1, nparts, False)
    one = np.zeros(1, dtype)
    strides = np.zeros(4, np.int64)
    ids = np.zeros(1, np.int64)
    run(g, one, one, one, one.copy(), strides, strides, strides, strides, ids, ids + 1, np.zeros(0, dtype), strides,
        0, np.zeros(0, np.uint8), strides, 0, np.zeros((nparts, 1, 1), dtype))
    return "attention"
