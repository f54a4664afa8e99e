"""Library kernels: a reduction over one run of adjacent axes (ReduceSum/Mean/Max/Min/Prod, channels-last global
pools), the input viewed as [A, R, B] and reduced over R into [A, B].

B == 1 (the last axes reduced) reduces rows of R elements (a sum keeps vectorized partial sums, ``acc_add``);
B > 1 accumulates R rows of B elements into the output row, one vector loop over B per input row. Max and min
propagate NaN as numpy's do; a mean divides the sum by R in the element type. The plan calls the compiled
functions' entry points itself (numpy's reductions in a model cost several times their time alone: MLP-Mixer's
[1, 196, 256] mean over the tokens ~100 us a run in the model, ~10 us alone, most of it numpy's own code and
data brought back into the caches after the products).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .mathlib import acc_add

SUM, MEAN, MAX, MIN, PROD = range(5)
#: the ONNX ops' codes
CODES = {"ReduceSum": SUM, "ReduceMean": MEAN, "ReduceMax": MAX, "ReduceMin": MIN, "ReduceProd": PROD}


@njit(nogil=True, boundscheck=False, inline="always")
def _pick(acc, v, op):
    """max/min that keeps the first NaN it meets (``v != v``: a NaN replaces any value; none replaces a NaN)."""
    if op == MAX:
        return v if (v > acc or v != v) else acc
    return v if (v < acc or v != v) else acc


@njit(nogil=True, boundscheck=False)
def reduce_range(x, out, r, b, op, lo, hi):
    """Outputs [lo, hi) (flat indices of [A, B]) of x (flat, viewed [A, R, B], R > 0) reduced over R into out
    (flat)."""
    den = np.empty(1, out.dtype)
    den[0] = r
    if b == 1:
        for i in range(lo, hi):
            base = i * r
            if op == SUM or op == MEAN:
                acc = x[base]            # the first element, as numpy's: -0.0 stays -0.0, inf stays inf
                for k in range(1, r):
                    acc = acc_add(acc, x[np.uint64(base + k)])
                out[i] = acc / den[0] if op == MEAN else acc
            elif op == PROD:
                acc = x[base]
                for k in range(1, r):
                    acc = acc * x[np.uint64(base + k)]
                out[i] = acc
            else:
                acc = x[base]
                for k in range(1, r):
                    acc = _pick(acc, x[np.uint64(base + k)], op)
                out[i] = acc
        return
    for i in range(lo // b, (hi - 1) // b + 1):
        j0 = max(lo - i * b, 0)
        j1 = min(hi - i * b, b)
        o = out[i * b + j0:i * b + j1]
        first = i * r * b
        o[:] = x[first + j0:first + j1]
        for k in range(1, r):
            row = x[first + k * b + j0:first + k * b + j1]
            if op == SUM or op == MEAN:
                for j in range(j1 - j0):
                    o[j] = o[j] + row[j]
            elif op == PROD:
                for j in range(j1 - j0):
                    o[j] = o[j] * row[j]
            else:
                for j in range(j1 - j0):
                    o[j] = _pick(o[j], row[j], op)
        if op == MEAN:
            for j in range(j1 - j0):
                o[j] = o[j] / den[0]


@njit(cache=True, nogil=True)
def reduce_serial(x, out, r, b, op):
    """x (C-contiguous, any rank, viewed [A, R, B]) reduced over R into out (A * B elements, any rank)."""
    reduce_range(x.reshape(x.size), out.reshape(out.size), r, b, op, 0, out.size)


@njit(cache=True, nogil=True, parallel=True)
def reduce_parallel(x, out, r, b, op, nparts):
    """``reduce_serial`` in ``nparts`` runs of outputs on the pool."""
    flat_in, flat_out = x.reshape(x.size), out.reshape(out.size)
    n = flat_out.size
    for p in prange(nparts):
        lo, hi = n * p // nparts, n * (p + 1) // nparts
        if hi > lo:
            reduce_range(flat_in, flat_out, r, b, op, lo, hi)


def axes_view(shape: tuple[int, ...], axes: list[int]) -> tuple[int, int, int] | None:
    """(A, R, B) of ``shape`` reduced over ``axes`` (sorted), or None where they are not one run of adjacent axes."""
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        return None
    a = int(np.prod(shape[:axes[0]], dtype=np.int64))
    r = int(np.prod(shape[axes[0]:axes[-1] + 1], dtype=np.int64))
    b = int(np.prod(shape[axes[-1] + 1:], dtype=np.int64))
    return a, r, b
