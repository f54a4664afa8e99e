"""tlc.kernels.blas: numpy's OpenBLAS gemm called from compiled code, on strided, transposed and empty operands."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tlc.kernels import blas

pytestmark = pytest.mark.skipif(not blas.AVAILABLE, reason=f"numpy's BLAS not callable: {blas.REASON}")


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0, beta: float = 0.0) -> None:
    item = a.itemsize
    fn = blas.gemm_f32 if a.dtype == np.float32 else blas.gemm_f64
    fn(a.shape[0], b.shape[1], a.shape[1], alpha, a.ctypes.data, a.strides[0] // item, a.strides[1] // item,
       b.ctypes.data, b.strides[0] // item, b.strides[1] // item, beta, c.ctypes.data, c.strides[0] // item)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_matches_numpy_for_every_transpose_and_degenerate_size(dtype):
    rng = np.random.default_rng(0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for (m, n, k), ta, tb in itertools.product([(3, 4, 5), (1, 7, 3), (6, 1, 4), (5, 5, 1), (1, 1, 1), (0, 3, 2),
                                                (3, 0, 2), (3, 2, 0)], [False, True], [False, True]):
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
        a, b = (a.T if ta else a), (b.T if tb else b)
        assert blas.blas_operand(a) and blas.blas_operand(b)
        c = rng.standard_normal((m, n)).astype(dtype)
        want = 0.5 * (a @ b) + 2.0 * c
        gemm(a, b, c, 0.5, 2.0)
        np.testing.assert_allclose(c, want, rtol=tol, atol=tol)


def test_gemm_on_slabs_of_larger_arrays():
    rng = np.random.default_rng(1)
    big = rng.standard_normal((8, 10)).astype(np.float32)
    a, b = big[2:6, 3:9], rng.standard_normal((6, 10)).astype(np.float32)
    out = np.zeros((4, 10), np.float32)
    gemm(a, b[:, 4:], out[:, 4:])           # a column slab of B into a column slab of C (row stride 10)
    np.testing.assert_allclose(out[:, 4:], a @ b[:, 4:], rtol=1e-5, atol=1e-5)
    assert not out[:, :4].any()
    # one column or one row (gemv): a column of C at row stride 10, a row of A read at column stride 10
    col = np.zeros((4, 10), np.float32)
    gemm(a, b[:, 7:8], col[:, 7:8], 0.5, 0.0)
    np.testing.assert_allclose(col[:, 7:8], 0.5 * (a @ b[:, 7:8]), rtol=1e-5, atol=1e-5)
    assert not col[:, :7].any() and not col[:, 8:].any()
    x, w = big[:, 5:6].T, rng.standard_normal((8, 6)).astype(np.float32)   # x: [1, 8] at column stride 10
    row = np.zeros((1, 6), np.float32)
    gemm(x, w, row)
    np.testing.assert_allclose(row, x @ w, rtol=1e-5, atol=1e-5)


def test_operands_blas_cannot_take_are_refused():
    assert not blas.blas_operand(np.broadcast_to(np.ones(3, np.float32), (4, 3)))   # row stride 0
    assert not blas.blas_operand(np.ones((4, 6), np.float32)[:, ::2])                # both strides > 1
    assert not blas.blas_operand(np.ones((2, 3, 4), np.float32))                     # not a matrix
    assert blas.blas_operand(np.ones((4, 6), np.float32)[::2])                        # strided rows are fine


def test_thread_count_round_trips():
    before = blas.get_threads()
    try:
        blas.set_threads(1)
        assert blas.get_threads() == 1
    finally:
        blas.set_threads(before)
    assert blas.get_threads() == before
