"""Matrix products in parts: ONNX MatMul/Gemm as BLAS calls cut into slabs for the runtime's thread pool.

A product ``C[..., M, N] = alpha * A[..., M, K] @ B[..., K, N]`` with broadcast batch dims is described by the
arrays themselves (any strides BLAS accepts per matrix: transposed views cost nothing) and ``offs``, an int64
array [batch, 3] of byte offsets of each batch's A, B and C matrices, computed once per input shape
(``batch_offsets``). C is C-contiguous.

``gemm_part(a, b, c, offs, alpha, cols, packed, p, nparts) -> (lo, hi)`` computes part ``p`` of ``nparts`` as one
or a few single-threaded BLAS calls, or through the panel kernel of ``tlc.kernels.panel`` (float32, alpha 1,
A on any strides): where ``packed`` holds a constant B in panels (``packs``), or where it is ``IN_PLACE``, on
a B with contiguous columns read where it is (``in_place``: attention's probabilities times V, 3 x 197 x 197 x
64 in 130 us against BLAS's 154, 12 x 128 x 128 x 64 226 against 273):

- row parts (``cols`` False): the flattened rows ``batch * M`` of C cut into ``nparts`` runs; the part returns
  the flat element range [lo, hi) of C it wrote (contiguous), so an epilogue can follow on the same thread;
- column parts (``cols`` True, one batch): B's and C's columns cut instead, so each thread streams its half of
  the weights (a layer's [K, N] weights times a few rows of activations); the slab is strided and the part
  returns (0, 0): the epilogue runs after every part, over ranges of its own (``flat_part``).

``matmul(a, b, c, offs, alpha, cols, nparts)`` runs every part, on Numba's pool when ``nparts > 1``.
A product with ``nparts == 1`` is a plain BLAS call per batch.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import panel
from .blas import gemm_f32, gemm_f64
from .panel import BIAS_NONE, PANEL, panel_strided

panel.ensure()   # the symbol the product parts call (compiled code links it by name)

#: work (multiply-adds) from which a product is cut into parts: ~25 us on one core, 10x a parallel region's cost
PARALLEL_MIN_MACS = 1 << 20
#: weights (bytes) from which a product is cut into parts however little work it does: a matrix-vector product
#: reads its weights from memory in a model (evicted by the layers before) at one core's bandwidth; ResNet-18's
#: classifier at batch 1 (512 x 1000, 2 MB) took 86 us on one core against onnxruntime's 43 on two
PARALLEL_MIN_BYTES = 1 << 19
#: a column slab narrower than this costs BLAS more than the weight traffic it saves
COLUMN_SPLIT_MIN = 128


def batch_offsets(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                  b_strides: tuple[int, ...], c_shape: tuple[int, ...], itemsize: int) -> np.ndarray:
    """Byte offsets [batch, 3] of each batch's A, B and C matrix (numpy matmul broadcasting of batch dims)."""
    batch_shape = tuple(c_shape[:-2])
    count = int(np.prod(batch_shape, dtype=np.int64))
    offs = np.zeros((count, 3), np.int64)
    if not batch_shape:
        return offs
    index = np.indices(batch_shape).reshape(len(batch_shape), -1)
    for col, (shape, strides) in enumerate(((a_shape, a_strides), (b_shape, b_strides))):
        lead = len(batch_shape) - (len(shape) - 2)
        for d in range(len(shape) - 2):
            if shape[d] != 1:
                offs[:, col] += index[lead + d] * strides[d]
    c_strides = np.cumprod((1,) + tuple(c_shape[:0:-1]))[::-1] * itemsize
    for d in range(len(batch_shape)):
        offs[:, 2] += index[d] * int(c_strides[d])
    return offs


def column_split(m: int, n: int, batch: int, nparts: int) -> bool:
    """Whether to cut columns: one batch, B outweighs A (N > M), and each slab is wide enough."""
    return nparts > 1 and batch == 1 and n > m and n >= nparts * COLUMN_SPLIT_MIN


def parts_for(macs: int, threads: int, weight_bytes: int = 0) -> int:
    """Parts for a product of ``macs`` multiply-adds whose constant operand holds ``weight_bytes``: one per
    thread where either is large (``PARALLEL_MIN_MACS``, ``PARALLEL_MIN_BYTES``), else one."""
    large = macs >= PARALLEL_MIN_MACS or weight_bytes >= PARALLEL_MIN_BYTES
    return threads if threads > 1 and large else 1


@njit(cache=True, nogil=True, inline="always")
def _call(a, b, c, offs, bi, r0, r1, c0, c1, alpha, packed):
    """C[bi][r0:r1, c0:c1] = alpha * A[bi][r0:r1] @ B[bi][:, c0:c1]: one BLAS call, or (float32, alpha 1) the
    panel product on B ``packed`` in panels (``c0`` on a panel's edge) or, where ``packed`` is ``IN_PLACE``, on
    B where it is (unit column stride)."""
    item = c.itemsize
    k = a.shape[-1]
    n = c.shape[-1]
    a_rs, a_cs = a.strides[-2] // item, a.strides[-1] // item
    b_rs, b_cs = b.strides[-2] // item, b.strides[-1] // item
    pa = a.ctypes.data + offs[bi, 0] + (r0 * a_rs) * item
    pb = b.ctypes.data + offs[bi, 1] + (c0 * b_cs) * item
    pc = c.ctypes.data + offs[bi, 2] + (r0 * n + c0) * item
    if packed.size > 1:
        panel_strided(packed.ctypes.data + (c0 // PANEL) * k * PANEL * 4, PANEL, k * PANEL, pa, a_rs, a_cs, pc, n,
                      1, r1 - r0, k, c1 - c0, 0, BIAS_NONE)
        return
    if packed.size == 1:
        panel_strided(pb, b_rs, PANEL, pa, a_rs, a_cs, pc, n, 1, r1 - r0, k, c1 - c0, 0, BIAS_NONE)
        return
    # BLAS may skip the product when alpha is 0 (OpenBLAS does on some CPUs); ONNX keeps 0 * NaN and 0 * inf
    scale = 1.0 if alpha == 0.0 else alpha
    if item == 4:
        gemm_f32(r1 - r0, c1 - c0, k, scale, pa, a_rs, a_cs, pb, b_rs, b_cs, 0.0, pc, n)
    else:
        gemm_f64(r1 - r0, c1 - c0, k, scale, pa, a_rs, a_cs, pb, b_rs, b_cs, 0.0, pc, n)
    if alpha == 0.0:
        flat = c.reshape(-1)
        base = offs[bi, 2] // item + r0 * n + c0
        for i in range(r1 - r0):
            for j in range(c1 - c0):
                flat[base + i * n + j] *= 0.0


@njit(cache=True, nogil=True)
def gemm_part(a, b, c, offs, alpha, cols, packed, p, nparts):
    """Part ``p`` of ``nparts`` of the product (see the module docstring); returns the flat range it wrote."""
    m, n = c.shape[-2], c.shape[-1]
    if cols:   # with packed panels, cut on panel edges
        edge = PANEL if packed.size > 0 else 1
        c0 = n * p // nparts // edge * edge
        c1 = n if p == nparts - 1 else n * (p + 1) // nparts // edge * edge
        _call(a, b, c, offs, 0, 0, m, c0, c1, alpha, packed)
        return 0, 0
    rows = offs.shape[0] * m
    r0, r1 = rows * p // nparts, rows * (p + 1) // nparts
    r = r0
    while r < r1:
        bi = r // m
        stop = min(r1, (bi + 1) * m)
        _call(a, b, c, offs, bi, r - bi * m, stop - bi * m, 0, n, alpha, packed)
        r = stop
    return r0 * n, r1 * n


@njit(cache=True, nogil=True, inline="always")
def flat_part(size, p, nparts):
    """The flat range [lo, hi) of part ``p`` of ``nparts`` of ``size`` elements."""
    return size * p // nparts, size * (p + 1) // nparts


@njit(cache=True, nogil=True, parallel=True)
def _matmul_parallel(a, b, c, offs, alpha, cols, packed, nparts):
    for p in prange(nparts):
        gemm_part(a, b, c, offs, alpha, cols, packed, p, nparts)


@njit(cache=True, nogil=True)
def _matmul_serial(a, b, c, offs, alpha, packed):
    for bi in range(offs.shape[0]):
        _call(a, b, c, offs, bi, 0, c.shape[-2], 0, c.shape[-1], alpha, packed)


#: no packed panels: every product on BLAS
UNPACKED = np.zeros(0, np.float32)
#: the panel product on B where it is (an activation: attention's probabilities times V)
IN_PLACE = np.zeros(1, np.float32)
#: columns of C from which the panel product on B in place beats BLAS (a vector of 16 and more)
IN_PLACE_MIN_COLUMNS = 16


def packs(b: np.ndarray | None, alpha: float) -> bool:
    """Whether a product takes the panel product on B packed once: a constant float32 B [K, N] (K at least 1, N
    a panel or more), alpha 1, on an AVX-512 host (elsewhere BLAS stays faster). A's strides are the kernel's
    (a transposed A broadcasts six elements of one row a k-step)."""
    return (b is not None and b.ndim == 2 and b.dtype == np.float32 and b.shape[0] > 0 and b.shape[1] >= PANEL
            and alpha == 1.0 and panel.fast())


def reads_b_in_place(dtype, alpha: float) -> bool:
    """Whether the panel product can read a B that is no constant where it is, given its columns are contiguous
    (its rows are the kernel's panel rows): float32, alpha 1, an AVX-512 host. The lowering keeps a transpose
    that would make such a B's columns strided a copy (``StepImpl.wants_unit_columns``). ``dtype``: a numpy dtype
    or an IR dtype name (float8 names have no numpy dtype)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return name == "float32" and alpha == 1.0 and panel.fast()


def in_place(dtype, b_unit_columns: bool, n: int, k: int, alpha: float) -> bool:
    """Whether a product whose B is no constant takes the panel product on B where it is (``reads_b_in_place``):
    B's columns contiguous and C at least ``IN_PLACE_MIN_COLUMNS`` wide."""
    return reads_b_in_place(dtype, alpha) and b_unit_columns and n >= IN_PLACE_MIN_COLUMNS and k > 0


#: the whole product on the calling thread (``matmul`` with one part), called directly by the plans' runners
matmul_serial = _matmul_serial


def matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray, offs: np.ndarray, alpha: float, cols: bool,
           nparts: int, packed: np.ndarray = UNPACKED) -> None:
    """The whole product into ``c`` (see the module docstring): serially, or in parts on Numba's pool;
    ``packed``: B in panels (``panel.pack``), or empty."""
    if nparts > 1:
        _matmul_parallel(a, b, c, offs, alpha, cols, packed, nparts)
    else:
        _matmul_serial(a, b, c, offs, alpha, packed)
