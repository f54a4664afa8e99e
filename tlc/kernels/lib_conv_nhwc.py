"""Library convolution kernels for channels-last data (2-D, NHWC): GEMM for 1x1, im2col + BLAS, depthwise.

The NHWC twins of ``lib_conv``: the input is [N, H, W, C], the weight is OHWI [M, kh, kw, C/group] (the
layout pass transposes constant weights once, at compile time), the output is [N, Ho, Wo, M]. What the
layout buys with these kernels, and when, is measured in ``tlc/passes/layout_cost.py`` (the table there
comes from ``tools/layout_bench.py``):

- 1x1, no padding, one group: ``X[N*H*W, C] @ W[M, C].T``; the batch folds into the GEMM's rows and a strided
  1x1 copies whole channel vectors (contiguous) instead of single elements;
- im2col: every column row is ``kh`` runs of ``kw * C`` contiguous values, where NCHW's im2col copies runs of
  ``Wo`` values (7 or 14 in the last stages of a ResNet), then ``cols[Ho*Wo, K] @ W[M, K].T``;
- depthwise: kh*kw multiply-adds over [Ho, Wo, C] views whose inner axis is the contiguous channel vector.

Every kernel writes into a preallocated output and takes its scratch arrays (``workspace``) from the caller.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .lib_conv import ConvGeometry

ALGORITHMS = ("gemm1x1", "im2col", "depthwise")


def geometry(x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_shape: tuple[int, ...],
             strides: tuple[int, int], pads_begin: tuple[int, int], dilations: tuple[int, int],
             group: int) -> ConvGeometry:
    """The ``ConvGeometry`` of an NHWC convolution: x [N, H, W, C], w OHWI [M, kh, kw, C/g], out [N, Ho, Wo, M]."""
    n, h, w, c = x_shape
    m, kh, kw, _ = w_shape
    return ConvGeometry(n, c, h, w, m, kh, kw, out_shape[1], out_shape[2], group, strides[0], strides[1],
                        dilations[0], dilations[1], pads_begin[0], pads_begin[1])


def choose_algorithm(geo: ConvGeometry) -> str:
    if geo.is_depthwise and geo.m == geo.c:
        return "depthwise"
    if geo.kh == geo.kw == 1 and geo.pt == geo.pl == 0 and not geo.needs_padding:
        return "gemm1x1"
    return "im2col"


def workspace(geo: ConvGeometry, algorithm: str) -> list[tuple[int, ...]]:
    """Shapes of the scratch arrays (input dtype) that ``run`` needs for ``algorithm``."""
    hp, wp = geo.padded_hw
    if algorithm == "gemm1x1":
        return [(geo.n, geo.ho, geo.wo, geo.c)] if (geo.sh, geo.sw) != (1, 1) else []
    if algorithm == "im2col":
        cg = geo.c // geo.group
        cols = (geo.ho * geo.wo, geo.kh * geo.kw * cg)
        return [(hp, wp, geo.c), cols] if geo.needs_padding else [cols]
    if algorithm == "depthwise":
        return [(hp, wp, geo.c), (geo.ho, geo.wo, geo.c)] if geo.needs_padding else [(geo.ho, geo.wo, geo.c)]
    raise ValueError(f"unknown NHWC conv algorithm {algorithm!r}; expected one of {ALGORITHMS}")


def run(algorithm: str, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, out: np.ndarray,
        geo: ConvGeometry, work: list[np.ndarray]) -> np.ndarray:
    """Compute the NHWC convolution into ``out`` with ``algorithm``; ``work`` as ``workspace`` described it."""
    if algorithm == "gemm1x1":
        _gemm1x1(x, w, out, geo, work)
    elif algorithm == "im2col":
        _im2col(x, w, out, geo, work)
    elif algorithm == "depthwise":
        _depthwise(x, w, out, geo, work)
    else:
        raise ValueError(f"unknown NHWC conv algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if b is not None:
        np.add(out, b, out=out)  # the bias broadcasts over the last (channel) axis
    return out


def _grouped_matmul(a: np.ndarray, w2: np.ndarray, out2: np.ndarray, group: int) -> None:
    """``out2[:, g] = a[:, g] @ w2[g].T`` per channel group g (a: [L, C], w2: [M, K/g], out2: [L, M])."""
    if group == 1:
        np.matmul(a, w2.T, out=out2)
        return
    cg, mg = a.shape[1] // group, w2.shape[0] // group
    for g in range(group):
        out2[:, g * mg:(g + 1) * mg] = a[:, g * cg:(g + 1) * cg] @ w2[g * mg:(g + 1) * mg].T


def _gemm1x1(x, w, out, geo: ConvGeometry, work) -> None:
    if (geo.sh, geo.sw) != (1, 1):
        sub = work[0]
        np.copyto(sub, x[:, ::geo.sh, ::geo.sw][:, :geo.ho, :geo.wo])
        x = sub
    rows = geo.n * geo.ho * geo.wo
    _grouped_matmul(x.reshape(rows, geo.c), w.reshape(geo.m, -1), out.reshape(rows, geo.m), geo.group)


def pad_into(buf: np.ndarray, image: np.ndarray, top: int, left: int, fill: float = 0.0) -> np.ndarray:
    """Copy ``image`` [H, W, C] into ``buf`` [Hp, Wp, C] at (top, left) and fill the border around it.

    NOTE: scratch buffers are shared with other steps between runs, so the border is refilled every time.
    """
    h, w = image.shape[:2]
    buf[:top] = fill
    buf[top + h:] = fill
    buf[top:top + h, :left] = fill
    buf[top:top + h, left + w:] = fill
    buf[top:top + h, left:left + w] = image
    return buf


def windows(xp: np.ndarray, geo) -> np.ndarray:
    """A read-only [Ho, Wo, kh, kw, C] view of the windows of a padded image [Hp, Wp, C]."""
    s0, s1, s2 = xp.strides
    return as_strided(xp, (geo.ho, geo.wo, geo.kh, geo.kw, xp.shape[2]),
                      (s0 * geo.sh, s1 * geo.sw, s0 * geo.dh, s1 * geo.dw, s2), writeable=False)


def _im2col(x, w, out, geo: ConvGeometry, work) -> None:
    cols = work[-1]
    cg = geo.c // geo.group
    w2 = w.reshape(geo.m, -1)
    length = geo.ho * geo.wo
    for n in range(geo.n):
        xp = pad_into(work[0], x[n], geo.pt, geo.pl) if geo.needs_padding else x[n]
        if geo.group == 1:
            np.copyto(cols.reshape(geo.ho, geo.wo, geo.kh, geo.kw, cg), windows(xp, geo))
            np.matmul(cols, w2.T, out=out[n].reshape(length, geo.m))
            continue
        mg = geo.m // geo.group
        for g in range(geo.group):
            np.copyto(cols.reshape(geo.ho, geo.wo, geo.kh, geo.kw, cg), windows(xp[:, :, g * cg:(g + 1) * cg], geo))
            out[n].reshape(length, geo.m)[:, g * mg:(g + 1) * mg] = cols @ w2[g * mg:(g + 1) * mg].T


def _depthwise(x, w, out, geo: ConvGeometry, work) -> None:
    """Depthwise conv as kh*kw multiply-adds over [Ho, Wo, C] views (contiguous channel vectors)."""
    tmp = work[-1]
    taps = np.ascontiguousarray(w.reshape(geo.c, geo.kh, geo.kw).transpose(1, 2, 0))  # [kh, kw, C]
    for n in range(geo.n):
        xp = pad_into(work[0], x[n], geo.pt, geo.pl) if geo.needs_padding else x[n]
        win = windows(xp, geo)
        o = out[n]
        np.multiply(win[:, :, 0, 0], taps[0, 0], out=o)
        for i in range(geo.kh):
            for j in range(geo.kw):
                if i or j:
                    np.multiply(win[:, :, i, j], taps[i, j], out=tmp)
                    np.add(o, tmp, out=o)
