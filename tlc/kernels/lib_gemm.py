"""Library GEMM kernels: MatMul and Gemm through numpy's BLAS, writing into preallocated outputs.

``np.matmul(a, b, out=...)`` reaches BLAS sgemm/dgemm for float inputs whose strides BLAS accepts (transposed
views included), so ONNX's ``transA``/``transB`` cost nothing: they are passed as views.
"""

from __future__ import annotations

import numpy as np


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """ONNX MatMul (numpy matmul semantics, batch dims broadcast) into ``out``."""
    return np.matmul(a, b, out=out)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, out: np.ndarray, *, alpha: float = 1.0,
         beta: float = 1.0, trans_a: int = 0, trans_b: int = 0) -> np.ndarray:
    """ONNX Gemm: ``out = alpha * A' @ B' + beta * C`` with C broadcast to the output (unidirectionally)."""
    np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=out)
    return scale_add(out, c, alpha, beta)


def scale_add(out: np.ndarray, c: np.ndarray | None, alpha: float, beta: float) -> np.ndarray:
    """``out = alpha * out + beta * C`` in place (Gemm's tail; C broadcast to ``out``)."""
    if alpha != 1.0:
        np.multiply(out, out.dtype.type(alpha), out=out)
    if c is not None and beta != 0.0:
        if beta == 1.0:
            np.add(out, c, out=out)
        else:
            np.add(out, c * c.dtype.type(beta), out=out)
    return out
