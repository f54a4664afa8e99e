"""The step loops of RNN, GRU and LSTM: one compiled function per cell type, parallel over directions.

The runtime (``tlc.runtime.library.RecurrentImpl``) projects the whole sequence through W first, every step and
both directions in one product ``xw = X @ [W_0^T | W_1^T]`` (``tlc.kernels.gemm``); what is left per step is
the recurrence, ``h @ R^T`` for the batch's rows, then the gates. Here each step is one BLAS call from compiled
code (``blas.gemm_*``: OpenBLAS's gemv for one row) into a gate buffer, then passes over each live row's gates
while they are in L1: the pre-activations (projection, summed biases, peepholes), each gate's activation
(``tlc.kernels.mathlib``: branch-free, so each pass vectorizes), and the new state. A direction runs on one
thread from start to end; the two directions of a bidirectional layer run on two (``nparts``).

Semantics are the reference's (``tlc.ops.recurrent``): a row whose sequence has ended keeps its state and its
outputs past its length are 0; a reverse direction reads row b's step ``lens[b] - 1 - t``; Y_h / Y_c hold the
last state (0 for a sequence of length 0); ``clip`` bounds every activation's input but LSTM's output one.

Arguments (C-contiguous; an absent optional array has size 0):
- ``xw`` [S * B, D * G]: the projection, row ``t * B + b`` (layout 0) or ``b * S + t`` (layout 1), no bias;
- ``r`` [D, G, H]; ``bias`` [D, G]: Wb + Rb (GRU with linear_before_reset: Wb only for the h gate, whose Rb is
  ``rbh`` [D, H]); ``p`` [D, 3H] LSTM's peepholes;
- ``lens`` int64 [B] (checked by the caller); ``h0``, ``c0``, ``y``, ``yh``, ``yc`` in the node's layout;
- scratch ``hs``, ``cs``, ``tmp`` [D, B, H] and ``g`` [D, B, G];
- ``acts`` int64 [D, k]: activation codes (``SIGMOID``, ``TANH``, ``RELU``) per direction; ``reverse`` int64
  [D]; ``clip`` (0: none), ``batch_first``, ``flag`` (LSTM's input_forget, GRU's linear_before_reset).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from . import gemm, mathlib, panel, typed
from .blas import gemm_f32, gemm_f64
from .panel import BIAS_NONE, PANEL, panel_strided

SIGMOID, TANH, RELU = 0, 1, 2
U = np.uint64
#: codes the kernels take, by the registry's activation name (lower case); others run the reference
CODES = {"sigmoid": SIGMOID, "tanh": TANH, "relu": RELU}


# ---------------------------------------------------------------------------- pieces of a step
@njit(cache=True, nogil=True, inline="always")
def _product(a, a_off, a_rows, r, r_off, rp, rp_off, cols, k, c, c_off, ldc):
    """C[a_rows, cols] = A @ R_slab^T: A rows of ``k`` at element ``a_off`` of ``a`` (row stride k), C at
    ``c_off`` with row stride ``ldc``; the slab is ``cols`` rows of R from element ``r_off`` (BLAS reads it
    transposed) or, where ``rp`` holds R^T in panels (float32), the panels from element ``rp_off`` of ``rp``."""
    item = c.itemsize
    pa, pc = a.ctypes.data + a_off * item, c.ctypes.data + c_off * item
    if rp.size > 0:
        panel_strided(rp.ctypes.data + rp_off * 4, PANEL, k * PANEL, pa, k, 1, pc, ldc, 1, a_rows, k, cols, 0,
                      BIAS_NONE)
    elif item == 4:
        gemm_f32(a_rows, cols, k, 1.0, pa, k, 1, r.ctypes.data + r_off * item, 1, k, 0.0, pc, ldc)
    else:
        gemm_f64(a_rows, cols, k, 1.0, pa, k, 1, r.ctypes.data + r_off * item, 1, k, 0.0, pc, ldc)


@njit(cache=True, nogil=True)
def _activate(code, row, lo, hi, clip):
    """row[lo:hi] = act(clip(row[lo:hi])) in place; one loop per code, each vectorized."""
    if clip > 0:
        c = typed.of_type(row, clip)
        for j in range(lo, hi):
            row[U(j)] = mathlib.minimum(mathlib.maximum(row[U(j)], -c), c)
    if code == SIGMOID:
        for j in range(lo, hi):
            row[U(j)] = typed.sigmoid(row[U(j)])
    elif code == TANH:
        for j in range(lo, hi):
            row[U(j)] = typed.tanh(row[U(j)])
    else:
        zero = typed.of_type(row, 0)
        for j in range(lo, hi):
            row[U(j)] = mathlib.maximum(row[U(j)], zero)


@njit(cache=True, nogil=True)
def _add_input(row, lo, hi, xrow, bias):
    """row[lo:hi] += xrow[lo:hi] + bias[lo:hi]: the step's projection and biases."""
    for j in range(lo, hi):
        row[U(j)] += xrow[U(j)] + bias[U(j)]


@njit(cache=True, nogil=True)
def _longest(lens):
    """The loop's step count: the longest sequence (a loop: ``lens.max()`` cost 0.3 s of compile per kernel)."""
    longest = 0
    for b in range(lens.size):
        longest = max(longest, lens[b])
    return longest


@njit(cache=True, nogil=True, inline="always")
def _source(t, b, lens, reverse, d):
    """The step row ``b`` reads at loop step ``t``, or -1 when its sequence has ended."""
    n = lens[b]
    if t >= n:
        return -1
    return n - 1 - t if reverse[d] else t


@njit(cache=True, nogil=True, inline="always")
def _xw_row(xw, src, b, seq, batch, batch_first, d, gates):
    """The projection of row ``b`` at step ``src`` for direction ``d`` (a view of ``gates`` elements)."""
    row = b * seq + src if batch_first else src * batch + b
    return xw[row, d * gates:(d + 1) * gates]


@njit(cache=True, nogil=True)
def _emit(y, hrow, d, b, src, batch_first):
    """Y at step ``src`` of row ``b`` = the new state."""
    if y.size == 0:
        return
    out = y[b, src, d] if batch_first else y[src, d, b]
    for j in range(hrow.size):
        out[U(j)] = hrow[U(j)]


@njit(cache=True, nogil=True)
def _load_state(s, s0, d, batch_first):
    """The state of direction ``d`` from the initial one in the node's layout (absent: 0).
    NOTE: element loops, not slice assignment: a broadcasting setitem took 2 s of Numba's compile."""
    row = s[d]
    for b in range(row.shape[0]):
        for j in range(row.shape[1]):
            if s0.size == 0:
                row[b, j] = 0
            elif batch_first:
                row[b, j] = s0[b, d, j]
            else:
                row[b, j] = s0[d, b, j]


@njit(cache=True, nogil=True)
def _final_state(ys, s, lens, d, batch_first):
    """Y_h (Y_c) from the state; 0 for a sequence of length 0."""
    if ys.size == 0:
        return
    row = s[d]
    for b in range(row.shape[0]):
        keep = lens[b] > 0
        for j in range(row.shape[1]):
            v = row[b, j] if keep else 0
            if batch_first:
                ys[b, d, j] = v
            else:
                ys[d, b, j] = v


@njit(cache=True, nogil=True)
def _zero_tail(y, lens, d, seq, batch_first):
    """Y past each row's length: 0 (the planned buffer holds anything)."""
    if y.size == 0:
        return
    for b in range(lens.size):
        for t in range(lens[b], seq):
            for j in range(y.shape[3]):
                if batch_first:
                    y[b, t, d, j] = 0
                else:
                    y[t, d, b, j] = 0


# ---------------------------------------------------------------------------- each cell's loop
# The directions ``first``, ``first + step``, ... of a layer, one after the other; ``run`` calls a layer function
# once (every direction) or, for two directions on two threads, once per thread from a parallel driver.
# NOTE: the loops over a row index with np.uint64 (``U``): a signed index costs a wraparound test per element,
# which turned the loads into gathers (an LSTM step of 8 x 128 took 31 us, 21 of them in its gate loops).
@njit(cache=True, nogil=True)
def rnn_layer(xw, r, rp, bias, lens, h0, y, yh, hs, g, acts, reverse, clip, batch_first, first, step):
    directions, batch, hidden = hs.shape
    seq = xw.shape[0] // max(batch, 1)
    for d in range(first, directions, step):
        _load_state(hs, h0, d, batch_first)
        for t in range(_longest(lens)):
            _product(hs, d * batch * hidden, batch, r, d * hidden * hidden, rp, d * (rp.size // directions), hidden,
                     hidden, g, d * batch * hidden, hidden)
            for b in range(batch):
                src = _source(t, b, lens, reverse, d)
                if src < 0:
                    continue
                grow, hrow = g[d, b], hs[d, b]
                _add_input(grow, 0, hidden, _xw_row(xw, src, b, seq, batch, batch_first, d, hidden), bias[d])
                _activate(acts[d, 0], grow, 0, hidden, clip)
                for j in range(hidden):
                    hrow[U(j)] = grow[U(j)]
                _emit(y, hrow, d, b, src, batch_first)
        _zero_tail(y, lens, d, seq, batch_first)
        _final_state(yh, hs, lens, d, batch_first)


@njit(cache=True, nogil=True)
def gru_layer(xw, r, rp, slab, bias, rbh, lens, h0, y, yh, hs, g, tmp, acts, reverse, clip, batch_first,
              linear_before_reset, first, step):
    directions, batch, hidden = hs.shape
    gates, h2 = 3 * hidden, 2 * hidden
    seq = xw.shape[0] // max(batch, 1)
    per_direction = rp.size // directions
    one = typed.of_type(g, 1)
    for d in range(first, directions, step):
        _load_state(hs, h0, d, batch_first)
        for t in range(_longest(lens)):
            # z and r (and with linear_before_reset the h gate's h @ R_h^T too) in one product
            _product(hs, d * batch * hidden, batch, r, d * gates * hidden, rp, d * per_direction,
                     gates if linear_before_reset else h2, hidden, g, d * batch * gates, gates)
            for b in range(batch):
                src = _source(t, b, lens, reverse, d)
                if src < 0:
                    continue
                grow, hrow, brow = g[d, b], hs[d, b], bias[d]
                xrow = _xw_row(xw, src, b, seq, batch, batch_first, d, gates)
                _add_input(grow, 0, h2, xrow, brow)
                _activate(acts[d, 0], grow, 0, h2, clip)
                if linear_before_reset:
                    rb = rbh[d]
                    for j in range(hidden):
                        grow[U(h2 + j)] = (xrow[U(h2 + j)] + brow[U(h2 + j)]
                                           + grow[U(hidden + j)] * (grow[U(h2 + j)] + rb[U(j)]))
                else:
                    trow = tmp[d, b]
                    for j in range(hidden):
                        trow[U(j)] = grow[U(hidden + j)] * hrow[U(j)]
            if not linear_before_reset:   # (r * h) @ R_h^T once every row's r is known
                _product(tmp, d * batch * hidden, batch, r, (d * gates + h2) * hidden, rp, d * per_direction + slab,
                         hidden, hidden, g, d * batch * gates + h2, gates)
            for b in range(batch):
                src = _source(t, b, lens, reverse, d)
                if src < 0:
                    continue
                grow, hrow = g[d, b], hs[d, b]
                if not linear_before_reset:
                    _add_input(grow, h2, gates, _xw_row(xw, src, b, seq, batch, batch_first, d, gates), bias[d])
                _activate(acts[d, 1], grow, h2, gates, clip)
                for j in range(hidden):
                    z = grow[U(j)]
                    hrow[U(j)] = (one - z) * grow[U(h2 + j)] + z * hrow[U(j)]
                _emit(y, hrow, d, b, src, batch_first)
        _zero_tail(y, lens, d, seq, batch_first)
        _final_state(yh, hs, lens, d, batch_first)


@njit(cache=True, nogil=True)
def lstm_layer(xw, r, rp, bias, p, lens, h0, c0, y, yh, yc, hs, cs, g, tmp, acts, reverse, clip, batch_first,
               input_forget, first, step):
    directions, batch, hidden = hs.shape
    gates, h2, h3 = 4 * hidden, 2 * hidden, 3 * hidden
    seq = xw.shape[0] // max(batch, 1)
    one = typed.of_type(g, 1)
    peep = p.size > 0
    for d in range(first, directions, step):
        _load_state(hs, h0, d, batch_first)
        _load_state(cs, c0, d, batch_first)
        for t in range(_longest(lens)):
            _product(hs, d * batch * hidden, batch, r, d * gates * hidden, rp, d * (rp.size // directions), gates,
                     hidden, g, d * batch * gates, gates)
            for b in range(batch):
                src = _source(t, b, lens, reverse, d)
                if src < 0:
                    continue
                grow, hrow, crow, trow = g[d, b], hs[d, b], cs[d, b], tmp[d, b]
                _add_input(grow, 0, gates, _xw_row(xw, src, b, seq, batch, batch_first, d, gates), bias[d])
                if peep:   # i and f look at the previous cell
                    prow = p[d]
                    for j in range(hidden):
                        grow[U(j)] += prow[U(j)] * crow[U(j)]
                        grow[U(h2 + j)] += prow[U(h2 + j)] * crow[U(j)]
                _activate(acts[d, 0], grow, 0, hidden, clip)                 # i
                if not input_forget:
                    _activate(acts[d, 0], grow, h2, h3, clip)                # f
                _activate(acts[d, 1], grow, h3, gates, clip)                 # c
                for j in range(hidden):
                    i = grow[U(j)]
                    f = one - i if input_forget else grow[U(h2 + j)]
                    c = f * crow[U(j)] + i * grow[U(h3 + j)]
                    crow[U(j)] = c
                    trow[U(j)] = c
                if peep:   # o looks at the new cell
                    prow = p[d]
                    for j in range(hidden):
                        grow[U(hidden + j)] += prow[U(hidden + j)] * crow[U(j)]
                _activate(acts[d, 0], grow, hidden, h2, clip)                # o
                _activate(acts[d, 2], trow, 0, hidden, 0.0)                  # h's, never clipped
                for j in range(hidden):
                    hrow[U(j)] = grow[U(hidden + j)] * trow[U(j)]
                _emit(y, hrow, d, b, src, batch_first)
        _zero_tail(y, lens, d, seq, batch_first)
        _final_state(yh, hs, lens, d, batch_first)
        _final_state(yc, cs, lens, d, batch_first)


# ---------------------------------------------------------------------------- two directions on two threads
@njit(cache=True, nogil=True, parallel=True)
def _rnn_parallel(xw, r, rp, bias, lens, h0, y, yh, hs, g, acts, reverse, clip, batch_first, nparts):
    for part in prange(nparts):
        rnn_layer(xw, r, rp, bias, lens, h0, y, yh, hs, g, acts, reverse, clip, batch_first, part, nparts)


@njit(cache=True, nogil=True, parallel=True)
def _gru_parallel(xw, r, rp, slab, bias, rbh, lens, h0, y, yh, hs, g, tmp, acts, reverse, clip, batch_first,
                  linear_before_reset, nparts):
    for part in prange(nparts):
        gru_layer(xw, r, rp, slab, bias, rbh, lens, h0, y, yh, hs, g, tmp, acts, reverse, clip, batch_first,
                  linear_before_reset, part, nparts)


@njit(cache=True, nogil=True, parallel=True)
def _lstm_parallel(xw, r, rp, bias, p, lens, h0, c0, y, yh, yc, hs, cs, g, tmp, acts, reverse, clip, batch_first,
                   input_forget, nparts):
    for part in prange(nparts):
        lstm_layer(xw, r, rp, bias, p, lens, h0, c0, y, yh, yc, hs, cs, g, tmp, acts, reverse, clip, batch_first,
                   input_forget, part, nparts)


# ---------------------------------------------------------------------------- a layer: projection, then the loop
class Layer(NamedTuple):
    """One RNN/GRU/LSTM node bound to its shapes: what ``run`` needs besides the arrays."""

    cell: str                   # "RNN" | "GRU" | "LSTM"
    seq: int
    batch: int
    size: int                   # input_size
    hidden: int
    directions: int
    gates: int                  # per direction: 1, 3 or 4
    batch_first: bool           # layout 1
    acts: np.ndarray            # int64 [D, k]: activation codes
    reverse: np.ndarray         # int64 [D]
    clip: float                 # 0: none
    flag: bool                  # LSTM input_forget, GRU linear_before_reset
    proj_parts: int             # the projection's parts (tlc.kernels.gemm)
    proj_cols: bool
    loop_parts: int             # threads the directions run on

    @property
    def columns(self) -> int:
        return self.directions * self.gates * self.hidden

    def workspace(self) -> list[tuple[int, ...]]:
        """Scratch shapes: the projection [S * B, D * G], states h, c and a row buffer [D, B, H], gates."""
        state = (self.directions, self.batch, self.hidden)
        return [(self.seq * self.batch, self.columns), state, state, state,
                (self.directions, self.batch, self.gates * self.hidden)]


_NO_OFFSETS = np.zeros((1, 3), np.int64)


def stacked_weights(w: np.ndarray) -> np.ndarray:
    """W [D, G, I] as the projection's B operand [I, D * G] (C-contiguous): every direction in one product."""
    return np.ascontiguousarray(np.concatenate(list(np.swapaxes(w, 1, 2)), axis=1))


def summed_biases(b: np.ndarray | None, layer: Layer, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(bias [D, G], rbh [D, H]): Wb + Rb per gate; GRU with linear_before_reset keeps its h gate's Rb apart
    (inside the reset product). Missing B: zeros."""
    d, gh, h = layer.directions, layer.gates * layer.hidden, layer.hidden
    if b is None:
        return np.zeros((d, gh), dtype), np.zeros((d, h), dtype)
    b = np.asarray(b, dtype)
    wb, rb = b[:, :gh], b[:, gh:]
    bias = np.ascontiguousarray(wb + rb)
    rbh = np.zeros((d, h), dtype)
    if layer.cell == "GRU" and layer.flag:
        bias[:, 2 * h:] = wb[:, 2 * h:]
        rbh[:] = rb[:, 2 * h:]
    return bias, rbh


class Weights(NamedTuple):
    """The layer's weights as the kernels take them: prepared once when constant, else each run."""

    wcat: np.ndarray            # [I, D * G]
    packed: np.ndarray          # wcat in panels (tlc.kernels.panel), or gemm.UNPACKED
    r: np.ndarray               # [D, G, H]
    rp: np.ndarray              # R^T of each direction in panels (float32), or empty: BLAS on r
    slab: int                   # GRU without linear_before_reset: where the h gate's panels start (per direction)
    bias: np.ndarray            # [D, G]
    rbh: np.ndarray             # [D, H]
    p: np.ndarray               # [D, 3H] or empty


def recurrence_panels(r: np.ndarray, layer: Layer) -> tuple[np.ndarray, int]:
    """(R^T of each direction in panels, flat, and the h gate's slab offset) where the panel product applies:
    float32 on an AVX-512 host. It packs R once; BLAS packs it again every step (8 x 256 @ 256 x 1024: 39 us
    a step against sgemm's 160). Elsewhere (empty, 0): BLAS reads R where it is."""
    if r.dtype != np.float32 or not panel.fast():
        return np.zeros(0, np.float32), 0
    h2 = 2 * layer.hidden
    split = layer.cell == "GRU" and not layer.flag   # (r * h) @ R_h^T is a product of its own
    per_direction, slab = [], 0
    for rd in r:
        slabs = [rd[:h2], rd[h2:]] if split else [rd]
        packed = [panel.pack(np.ascontiguousarray(part.T)) for part in slabs]
        slab = packed[0].size if split else 0
        per_direction.append(np.concatenate(packed))
    return np.concatenate(per_direction), slab


def prepare(layer: Layer, dtype, w, r, b, p, pack: bool) -> Weights:
    """The weights as the kernels take them; ``pack``: W and R in panels where that is faster."""
    wcat = stacked_weights(np.asarray(w, dtype))
    packed = panel.pack(wcat) if pack and gemm.packs(wcat, 1.0) else gemm.UNPACKED
    r = _writable(np.asarray(r, dtype))
    rp, slab = recurrence_panels(r, layer) if pack else (np.zeros(0, np.float32), 0)
    bias, rbh = summed_biases(b, layer, dtype)
    p = np.zeros((0, 0), dtype) if p is None else _writable(np.asarray(p, dtype))
    return Weights(wcat, packed, r, rp, slab, bias, rbh, p)


def _writable(a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous and writable (Numba types a read-only array apart: a compile at run time)."""
    return a if a.flags.c_contiguous and a.flags.writeable else np.array(a, order="C")


def run(layer: Layer, weights: Weights | None, x, w, r, b, lens, h0, c0, p, y, yh, yc, xw, hs, cs, tmp, g) -> None:
    """The whole layer: the projection into ``xw``, then every direction's loop (see the module docstring).
    ``weights``: prepared at bind time (constant W, R, B, P), else None and made from ``w, r, b, p`` here;
    ``lens`` int64 [B], already checked; absent optional arrays are empty."""
    if weights is None:
        weights = prepare(layer, xw.dtype, w, r, b, p, pack=False)
    gemm.matmul(x.reshape(layer.seq * layer.batch, layer.size), weights.wcat, xw, _NO_OFFSETS, 1.0,
                layer.proj_cols, layer.proj_parts, weights.packed)
    h0, c0 = _writable(h0), _writable(c0)
    w, n = weights, layer.loop_parts
    if layer.cell == "LSTM":
        args = (xw, w.r, w.rp, w.bias, w.p, lens, h0, c0, y, yh, yc, hs, cs, g, tmp, layer.acts, layer.reverse,
                layer.clip, layer.batch_first, layer.flag)
        if n > 1:
            _lstm_parallel(*args, n)
        else:
            lstm_layer(*args, 0, 1)
    elif layer.cell == "GRU":
        args = (xw, w.r, w.rp, w.slab, w.bias, w.rbh, lens, h0, y, yh, hs, g, tmp, layer.acts, layer.reverse,
                layer.clip, layer.batch_first, layer.flag)
        if n > 1:
            _gru_parallel(*args, n)
        else:
            gru_layer(*args, 0, 1)
    else:
        args = (xw, w.r, w.rp, w.bias, lens, h0, y, yh, hs, g, layer.acts, layer.reverse, layer.clip,
                layer.batch_first)
        if n > 1:
            _rnn_parallel(*args, n)
        else:
            rnn_layer(*args, 0, 1)


def warm(layer: Layer, dtype) -> str:
    """Compile (or load from Numba's cache) what ``run`` calls for ``layer``'s types: a one-step, one-row,
    one-unit problem of the same cell, directions, dtype and parts."""
    tiny = layer._replace(seq=1, batch=1, size=1, hidden=1)
    d, gh = tiny.directions, tiny.gates
    zeros = (lambda *shape: np.zeros(shape, dtype))
    weights = prepare(tiny, dtype, zeros(d, gh, 1), zeros(d, gh, 1), None,
                      zeros(d, 3) if layer.cell == "LSTM" else None, pack=False)
    y = zeros(1, 1, d, 1) if layer.batch_first else zeros(1, d, 1, 1)
    state = zeros(1, d, 1) if layer.batch_first else zeros(d, 1, 1)
    work = [zeros(*s) for s in tiny.workspace()]
    run(tiny, weights, zeros(1, 1, 1), None, None, None, np.ones(1, np.int64), state, state.copy(), None, y,
        state.copy(), state.copy(), *work)
    return f"{layer.cell.lower()} loop"
