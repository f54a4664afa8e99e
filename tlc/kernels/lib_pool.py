"""Library windowed-reduction kernels (NCHW): max and average pooling, global pooling, LRN.

Pooling runs as kh*kw vectorised passes over strided views of a padded input ("taps"): for the small windows
CNNs use (2x2, 3x3) that beats a window-axis reduction and needs no JIT. LRN is the same idea across
channels. Kernels write into preallocated outputs and take scratch arrays from the caller (``workspace``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .lib_conv import needs_padding, pad_into, padded_hw


class PoolGeometry(NamedTuple):
    """Sizes of one 2-D pooling with pads resolved; ``pb``/``pr`` are the explicit pads after."""

    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    ho: int
    wo: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    pb: int
    pr: int

    @property
    def padded_hw(self) -> tuple[int, int]:
        return padded_hw(self)

    @property
    def needs_padding(self) -> bool:
        return needs_padding(self)


def workspace(geo: PoolGeometry) -> list[tuple[int, ...]]:
    """Scratch shapes (input dtype) for ``max_pool``/``avg_pool``: the padded input when padding is needed."""
    return [(geo.n, geo.c, *geo.padded_hw)] if geo.needs_padding else []


def _padded(x: np.ndarray, geo: PoolGeometry, work: list[np.ndarray], fill: float) -> np.ndarray:
    return pad_into(work[0], x, geo.pt, geo.pl, fill) if geo.needs_padding else x


def _taps(xp: np.ndarray, geo: PoolGeometry):
    """The kh*kw strided views [N, C, Ho, Wo] whose elementwise reduction is the pooling."""
    eh, ew = (geo.ho - 1) * geo.sh + 1, (geo.wo - 1) * geo.sw + 1
    for i in range(geo.kh):
        for j in range(geo.kw):
            yield xp[:, :, i * geo.dh:i * geo.dh + eh:geo.sh, j * geo.dw:j * geo.dw + ew:geo.sw]


def max_pool(x: np.ndarray, out: np.ndarray, geo: PoolGeometry, work: list[np.ndarray]) -> np.ndarray:
    fill = -np.inf if out.dtype.kind == "f" else np.iinfo(out.dtype).min
    taps = _taps(_padded(x, geo, work, fill), geo)
    np.copyto(out, next(taps))
    for tap in taps:
        np.copyto(out, tap, where=tap > out)   # NaN counts as a window's first tap only, as in the reference
    return out


def avg_divisor(geo: PoolGeometry, count_include_pad: bool, dtype: np.dtype) -> np.ndarray:
    """How many elements each output averages ([Ho, Wo]): windows clipped to the (padded) input, as ONNX says."""

    def counts(size: int, k: int, s: int, before: int, after: int, n_out: int) -> np.ndarray:
        start = np.arange(n_out) * s - before
        hi = size + after if count_include_pad else size
        lo = start if count_include_pad else np.maximum(start, 0)
        return np.minimum(start + k, hi) - lo

    ch = counts(geo.h, geo.kh, geo.sh, geo.pt, geo.pb, geo.ho)
    cw = counts(geo.w, geo.kw, geo.sw, geo.pl, geo.pr, geo.wo)
    return np.outer(ch, cw).astype(dtype)


def avg_pool(x: np.ndarray, out: np.ndarray, geo: PoolGeometry, work: list[np.ndarray],
             divisor: np.ndarray) -> np.ndarray:
    taps = _taps(_padded(x, geo, work, 0), geo)
    np.copyto(out, next(taps))
    for tap in taps:
        np.add(out, tap, out=out)
    return np.divide(out, divisor, out=out)


def global_pool(x: np.ndarray, out: np.ndarray, reduce: str) -> np.ndarray:
    """GlobalAveragePool / GlobalMaxPool: reduce every axis after the channel axis, keeping them."""
    axes = tuple(range(2, x.ndim))
    if reduce == "mean":
        return np.mean(x, axis=axes, keepdims=True, out=out)
    return np.max(x, axis=axes, keepdims=True, out=out)


def lrn_workspace(shape: tuple[int, ...], size: int) -> list[tuple[int, ...]]:
    return [(shape[0], shape[1] + size - 1, *shape[2:])]


def lrn(x: np.ndarray, out: np.ndarray, work: list[np.ndarray], *, size: int, alpha: float, beta: float,
        bias: float) -> np.ndarray:
    """ONNX LRN: x / (bias + alpha/size * sum of squares over a window of ``size`` channels) ** beta."""
    c = x.shape[1]
    lo = (size - 1) // 2
    sq = work[0]
    sq[:, :lo] = 0
    sq[:, lo + c:] = 0
    np.square(x, out=sq[:, lo:lo + c])
    np.copyto(out, sq[:, :c])
    for k in range(1, size):
        np.add(out, sq[:, k:k + c], out=out)
    t = out.dtype.type
    np.multiply(out, t(alpha / size), out=out)
    np.add(out, t(bias), out=out)
    np.power(out, t(-beta), out=out)
    return np.multiply(x, out, out=out)
