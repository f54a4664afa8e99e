"""BLAS from compiled code: numpy's own OpenBLAS ``sgemm``/``dgemm``, callable inside Numba kernels.

Why: the runtime runs a large product in parts on Numba's thread pool (one pool for the whole run), each part a
single-threaded BLAS call followed by its epilogue on the same thread, with no Python in between. numpy's wheels
ship OpenBLAS (scipy-openblas, ILP64: 64-bit ints, symbols ``scipy_cblas_sgemm64_``). The address of each symbol
is registered with LLVM under a fixed name (``tlc_cblas_sgemm``), and kernels declare it as an external function:
their cached machine code then links by name in the next process (a ctypes pointer as a global would make Numba
refuse to cache the kernel).

``AVAILABLE`` says whether numpy's BLAS was found; ``REASON`` says why not (another vendor, an LP64 build).
Kernels that call ``gemm_*`` must not be compiled when it is False; the runtime then keeps products on
``np.matmul`` and ``plan.stats()`` says so.

Matrices are passed as (address, row stride, column stride) in elements, so a transposed view or a slab of
rows or columns costs nothing: ``gemm_f32(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc)`` computes
``C[m, n] = alpha * A[m, k] @ B[k, n] + beta * C`` with C row-major (row stride ``ldc``, unit column stride).
A matrix whose rows and columns are both strided is not a BLAS operand; the caller copies it first.

The thread count of the library: ``set_threads(n)`` / ``get_threads()`` (process-wide in OpenBLAS).
"""

from __future__ import annotations

import ctypes
import hashlib

import llvmlite.binding as llvm
import numpy as np
from numba import njit, types

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

#: (symbol prefix, suffix) of the ILP64 builds numpy ships: scipy-openblas64 and a plain OpenBLAS64
_NAMINGS = (("scipy_", "64_"), ("", "64_"))


def _find() -> tuple[ctypes.CDLL | None, str, str, str, str]:
    """numpy's OpenBLAS: (library, symbol prefix, suffix, path, the kernels it runs: "Haswell", "SkylakeX", ...)
    or (None, reason, "", "", "")."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None, "threadpoolctl is not installed (it locates numpy's BLAS)", "", "", ""
    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not infos:
        return None, "numpy's BLAS library was not found", "", "", ""
    for info in infos:
        if info.get("internal_api") != "openblas":
            continue
        try:
            lib = ctypes.CDLL(info["filepath"])
        except OSError as exc:
            return None, f"cannot open {info['filepath']}: {exc}", "", "", ""
        for prefix, suffix in _NAMINGS:
            if hasattr(lib, f"{prefix}cblas_sgemm{suffix}"):
                return lib, prefix, suffix, info["filepath"], str(info.get("architecture") or "")
        return None, f"{info['filepath']} has no ILP64 cblas_sgemm (an LP64 build)", "", "", ""
    return None, f"numpy's BLAS is {infos[0].get('internal_api')}, not OpenBLAS", "", "", ""


_LIB, _PREFIX, _SUFFIX, PATH, CORE = _find()
AVAILABLE = _LIB is not None
#: OpenBLAS's kernel sets that use AVX-512 (``CORE`` names the one it runs: its choice, or OPENBLAS_CORETYPE's)
AVX512_CORES = frozenset({"SkylakeX", "Cooperlake", "SapphireRapids"})
REASON = "" if AVAILABLE else _PREFIX


def _address(name: str) -> int:
    return ctypes.cast(getattr(_LIB, f"{_PREFIX}{name}{_SUFFIX}"), ctypes.c_void_p).value


if AVAILABLE:
    llvm.add_symbol("tlc_cblas_sgemm", _address("cblas_sgemm"))
    llvm.add_symbol("tlc_cblas_dgemm", _address("cblas_dgemm"))
    llvm.add_symbol("tlc_cblas_sgemv", _address("cblas_sgemv"))
    llvm.add_symbol("tlc_cblas_dgemv", _address("cblas_dgemv"))
    _set = getattr(_LIB, f"{_PREFIX}openblas_set_num_threads{_SUFFIX}")
    _set.argtypes, _set.restype = [ctypes.c_int], None
    _get = getattr(_LIB, f"{_PREFIX}openblas_get_num_threads{_SUFFIX}")
    _get.argtypes, _get.restype = [], ctypes.c_int

#: what cached kernels that call BLAS depend on (part of the kernel cache's key)
IDENTITY = hashlib.sha256(f"{AVAILABLE};{PATH};{_PREFIX};{_SUFFIX}".encode()).hexdigest()[:16]


def set_threads(n: int) -> None:
    """OpenBLAS's (process-wide) thread count; a no-op where numpy's BLAS was not found."""
    if AVAILABLE:
        _set(int(n))


def get_threads() -> int:
    return int(_get()) if AVAILABLE else 0


_i32, _i64 = types.int32, types.int64


def _gemm_type(real) -> types.Function:
    # cblas_?gemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); pointers as int64
    return types.void(_i32, _i32, _i32, _i64, _i64, _i64, real, _i64, _i64, _i64, _i64, real, _i64, _i64)


def _gemv_type(real) -> types.Function:
    # cblas_?gemv(order, trans, M, N, alpha, A, lda, X, incX, beta, Y, incY); pointers as int64
    return types.void(_i32, _i32, _i64, _i64, real, _i64, _i64, _i64, _i64, real, _i64, _i64)


_sgemm = types.ExternalFunction("tlc_cblas_sgemm", _gemm_type(types.float32))
_dgemm = types.ExternalFunction("tlc_cblas_dgemm", _gemm_type(types.float64))
_sgemv = types.ExternalFunction("tlc_cblas_sgemv", _gemv_type(types.float32))
_dgemv = types.ExternalFunction("tlc_cblas_dgemv", _gemv_type(types.float64))


@njit(cache=True, nogil=True, inline="always")
def _operand(rows, cols, rs, cs):
    """(trans flag, leading dimension) of an operand [rows, cols] with strides ``rs``, ``cs`` (elements) that
    ``blas_operand`` accepted: unit column stride (as stored) or unit row stride (stored transposed)."""
    if cols <= 1 or cs == 1:
        return NO_TRANS, max(rs if rows > 1 else cols, 1)
    return TRANS, max(cs, 1)


@njit(cache=True, nogil=True, inline="always")
def _as_gemv(m, n, k, a, ta, lda, a_rs, a_cs, b, tb, ldb, b_rs, ldc):
    """A product with one row or one column as a matrix-vector product: (use it, trans, rows, cols, matrix,
    its leading dimension, vector, incX, incY). OpenBLAS's gemm does not forward these to gemv and packs the
    whole matrix every call (a batch-1 Linear 4096 -> 256: 208 us against gemv's 57)."""
    if k == 0 or (m != 1 and n != 1):
        return False, NO_TRANS, 0, 0, a, lda, b, 0, 0
    if m == 1:   # y[n] = B^T x: B stored [k, n] (NO_TRANS) or [n, k] (TRANS)
        inc_x = a_cs if k > 1 else 1
        if tb == NO_TRANS:
            return True, TRANS, k, n, b, ldb, a, inc_x, 1
        return True, NO_TRANS, n, k, b, ldb, a, inc_x, 1
    inc_x = b_rs if k > 1 else 1   # n == 1: y[m] = A x, y strided by ldc
    if ta == NO_TRANS:
        return True, NO_TRANS, m, k, a, lda, b, inc_x, max(ldc, 1)
    return True, TRANS, k, m, a, lda, b, inc_x, max(ldc, 1)


@njit(cache=True, nogil=True)
def gemm_f32(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc):
    """C = alpha * A @ B + beta * C in float32 (see the module docstring); nothing when m or n is 0. One row
    or one column runs as gemv."""
    if m == 0 or n == 0:
        return
    ta, lda = _operand(m, k, a_rs, a_cs)
    tb, ldb = _operand(k, n, b_rs, b_cs)
    vec, trans, rows, cols, mat, ld, x, inc_x, inc_y = _as_gemv(m, n, k, a, ta, lda, a_rs, a_cs, b, tb, ldb, b_rs,
                                                                 ldc)
    if vec:
        _sgemv(ROW_MAJOR, trans, rows, cols, np.float32(alpha), mat, ld, x, inc_x, np.float32(beta), c, inc_y)
        return
    _sgemm(ROW_MAJOR, ta, tb, m, n, k, np.float32(alpha), a, lda, b, ldb, np.float32(beta), c, max(ldc, n, 1))


@njit(cache=True, nogil=True)
def gemm_f64(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc):
    """C = alpha * A @ B + beta * C in float64 (see the module docstring); nothing when m or n is 0. One row
    or one column runs as gemv."""
    if m == 0 or n == 0:
        return
    ta, lda = _operand(m, k, a_rs, a_cs)
    tb, ldb = _operand(k, n, b_rs, b_cs)
    vec, trans, rows, cols, mat, ld, x, inc_x, inc_y = _as_gemv(m, n, k, a, ta, lda, a_rs, a_cs, b, tb, ldb, b_rs,
                                                                 ldc)
    if vec:
        _dgemv(ROW_MAJOR, trans, rows, cols, np.float64(alpha), mat, ld, x, inc_x, np.float64(beta), c, inc_y)
        return
    _dgemm(ROW_MAJOR, ta, tb, m, n, k, np.float64(alpha), a, lda, b, ldb, np.float64(beta), c, max(ldc, n, 1))


def blas_operand(a: np.ndarray) -> bool:
    """Whether a 2-D array can be passed to ``gemm_*`` as it is: rows (or columns) stored contiguously, at
    strides that do not overlap (a broadcast operand with stride 0 is not one)."""
    if a.ndim != 2:
        return False
    if a.size == 0:
        return True
    item = a.itemsize
    (rows, cols), (rs, cs) = a.shape, a.strides
    if (cols <= 1 or cs == item) and (rows <= 1 or (rs % item == 0 and rs >= max(cols, 1) * item)):
        return True
    return (rows <= 1 or rs == item) and cols > 1 and cs % item == 0 and cs >= max(rows, 1) * item
