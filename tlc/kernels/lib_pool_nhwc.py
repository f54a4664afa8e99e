"""Library pooling kernels for channels-last data (2-D, NHWC): max and average pooling as strided taps.

The twins of ``lib_pool``'s taps over [N, Ho, Wo, C] views, whose inner axis is the contiguous channel
vector. Geometry, divisors and workspace are ``lib_pool``'s (``PoolGeometry`` holds sizes, not a layout).
"""

from __future__ import annotations

import numpy as np

from .lib_pool import PoolGeometry


def workspace(geo: PoolGeometry) -> list[tuple[int, ...]]:
    """Scratch shapes (input dtype): the padded input [N, Hp, Wp, C] when padding is needed."""
    return [(geo.n, *geo.padded_hw, geo.c)] if geo.needs_padding else []


def _padded(x: np.ndarray, geo: PoolGeometry, work: list[np.ndarray], fill: float) -> np.ndarray:
    if not geo.needs_padding:
        return x
    buf = work[0]
    h, w = x.shape[1:3]
    top, left = geo.pt, geo.pl
    buf[:, :top] = fill
    buf[:, top + h:] = fill
    buf[:, top:top + h, :left] = fill
    buf[:, top:top + h, left + w:] = fill
    buf[:, top:top + h, left:left + w] = x
    return buf


def _taps(xp: np.ndarray, geo: PoolGeometry):
    """The kh*kw strided views [N, Ho, Wo, C] whose elementwise reduction is the pooling."""
    eh, ew = (geo.ho - 1) * geo.sh + 1, (geo.wo - 1) * geo.sw + 1
    for i in range(geo.kh):
        for j in range(geo.kw):
            yield xp[:, i * geo.dh:i * geo.dh + eh:geo.sh, j * geo.dw:j * geo.dw + ew:geo.sw]


def max_pool(x: np.ndarray, out: np.ndarray, geo: PoolGeometry, work: list[np.ndarray]) -> np.ndarray:
    fill = -np.inf if out.dtype.kind == "f" else np.iinfo(out.dtype).min
    taps = _taps(_padded(x, geo, work, fill), geo)
    np.copyto(out, next(taps))
    for tap in taps:
        np.copyto(out, tap, where=tap > out)   # NaN counts as a window's first tap only, as in the reference
    return out


def avg_pool(x: np.ndarray, out: np.ndarray, geo: PoolGeometry, work: list[np.ndarray],
             divisor: np.ndarray) -> np.ndarray:
    """``divisor`` is ``lib_pool.avg_divisor`` ([Ho, Wo]); it broadcasts over the channel axis here."""
    taps = _taps(_padded(x, geo, work, 0), geo)
    np.copyto(out, next(taps))
    for tap in taps:
        np.add(out, tap, out=out)
    return np.divide(out, divisor[:, :, None], out=out)
