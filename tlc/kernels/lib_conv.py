"""Library convolution kernels (2-D, NCHW): GEMM for 1x1, im2col + BLAS, a direct Numba kernel, depthwise.

Every kernel writes into a preallocated output and takes its scratch arrays (``workspace``) from the caller,
so the runtime's memory planner owns all memory. ``choose_algorithm`` picks a kernel per shape class; the
rule comes from tests/runtime/conv_bench.py on the shared 2-core machine (best of 15 interleaved runs, ms;
medians were 2-10x higher and noisy under the machine's load):

| shape (N=1)               | im2col+BLAS | GEMM (1x1) | direct Numba | numpy taps |
|---------------------------|-------------|------------|--------------|------------|
| 7x7/2 3->64 @224 (conv1)  | 7.6         |            | 200          |            |
| 3x3 64->64 @56            | 3.7         |            | 49           |            |
| 3x3 256->256 @14          | 2.3         |            | 167          |            |
| 1x1 64->256 @56           | 1.9         | 1.8        | 23           |            |
| 1x1/2 256->512 @56        | 2.4         | 2.0        | 118          |            |
| depthwise 3x3 256 @28     | 3.7         |            | 0.9          | 2.0        |

- 1x1, no padding, one group: a plain GEMM (``W[M,C] @ X[C,H*W]``), after a strided copy when stride > 1;
- depthwise (group == C == M): the direct Numba kernel (im2col would be C tiny GEMMs); numpy taps without JIT;
- everything else: im2col + BLAS, 10-70x faster than the direct kernel on every ResNet-50 shape.

NOTE: right after a BLAS call OpenBLAS's threads spin (~0.13 s) and slow a parallel Numba kernel that follows
on the same cores; the depthwise medians above show it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

ALGORITHMS = ("gemm1x1", "im2col", "direct", "depthwise_taps")


class ConvGeometry(NamedTuple):
    """The sizes of one 2-D convolution, pads resolved: (top, left) before, (bottom, right) after."""

    n: int
    c: int
    h: int
    w: int
    m: int
    kh: int
    kw: int
    ho: int
    wo: int
    group: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int

    @property
    def is_depthwise(self) -> bool:
        return self.group == self.c == self.m and self.group > 1

    @property
    def is_pointwise(self) -> bool:
        return self.kh == self.kw == 1 and self.pt == self.pl == 0 and self.group == 1

    @property
    def padded_hw(self) -> tuple[int, int]:
        return padded_hw(self)

    @property
    def needs_padding(self) -> bool:
        return needs_padding(self)


def padded_hw(geo) -> tuple[int, int]:
    """Height and width of the padded input that every window of ``geo`` (conv or pool geometry) reads inside."""
    need_h = (geo.ho - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1
    need_w = (geo.wo - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1
    return max(need_h, geo.pt + geo.h), max(need_w, geo.pl + geo.w)


def needs_padding(geo) -> bool:
    return geo.pt > 0 or geo.pl > 0 or padded_hw(geo) != (geo.h, geo.w)


def geometry(x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_shape: tuple[int, ...],
             strides: tuple[int, int], pads_begin: tuple[int, int], dilations: tuple[int, int],
             group: int) -> ConvGeometry:
    n, c, h, w = x_shape
    m, _, kh, kw = w_shape
    return ConvGeometry(n, c, h, w, m, kh, kw, out_shape[2], out_shape[3], group, strides[0], strides[1],
                        dilations[0], dilations[1], pads_begin[0], pads_begin[1])


def choose_algorithm(geo: ConvGeometry, allow_numba: bool = True) -> str:
    """The fastest kernel for this shape class (see the module docstring for the measurements)."""
    if geo.is_pointwise:
        return "gemm1x1"
    if geo.is_depthwise:
        return "direct" if allow_numba else "depthwise_taps"
    return "im2col"


def workspace(geo: ConvGeometry, algorithm: str) -> list[tuple[int, ...]]:
    """Shapes of the scratch arrays (in the input's dtype) that ``run`` needs for ``algorithm``."""
    hp, wp = geo.padded_hw
    if algorithm == "gemm1x1":
        return [(geo.n, geo.c, geo.ho, geo.wo)] if (geo.sh, geo.sw) != (1, 1) else []
    if algorithm == "im2col":
        cg = geo.c // geo.group
        cols = (cg * geo.kh * geo.kw, geo.ho * geo.wo)
        return [(geo.c, hp, wp), cols] if geo.needs_padding else [cols]
    if algorithm == "depthwise_taps":
        return [(geo.c, hp, wp), (geo.c, geo.ho, geo.wo)]
    return []


def run(algorithm: str, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, out: np.ndarray,
        geo: ConvGeometry, work: list[np.ndarray]) -> np.ndarray:
    """Compute the convolution into ``out`` with ``algorithm``; ``work`` as ``workspace`` described it."""
    if algorithm == "gemm1x1":
        _gemm1x1(x, w, out, geo, work)
    elif algorithm == "im2col":
        _im2col(x, w, out, geo, work)
    elif algorithm == "depthwise_taps":
        _depthwise_taps(x, w, out, geo, work)
    elif algorithm == "direct":
        bias = b if b is not None else np.zeros(geo.m, out.dtype)
        direct_kernel()(np.ascontiguousarray(x), np.ascontiguousarray(w), bias, out, geo.sh, geo.sw, geo.dh,
                        geo.dw, geo.pt, geo.pl, geo.group)
        return out
    else:
        raise ValueError(f"unknown conv algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if b is not None:
        np.add(out, b.reshape(1, -1, 1, 1), out=out)
    return out


def _gemm1x1(x, w, out, geo: ConvGeometry, work) -> None:
    if (geo.sh, geo.sw) != (1, 1):
        sub = work[0]
        np.copyto(sub, x[:, :, ::geo.sh, ::geo.sw][:, :, :geo.ho, :geo.wo])
        x = sub
    np.matmul(w.reshape(geo.m, geo.c), x.reshape(geo.n, geo.c, geo.ho * geo.wo),
              out=out.reshape(geo.n, geo.m, geo.ho * geo.wo))


# ---------------------------------------------------------------------------- parts (for a caller's threads)
def splittable(geo: ConvGeometry, algorithm: str) -> bool:
    """Whether ``prepare_part``/``gemm_part`` can compute this conv in parts: one image, one group, GEMM-based."""
    return algorithm in ("gemm1x1", "im2col") and geo.n == 1 and geo.group == 1


def needs_prepare(geo: ConvGeometry, algorithm: str) -> bool:
    """Whether the parts need scratch filled first (im2col columns, a strided 1x1 input)."""
    return algorithm == "im2col" or (geo.sh, geo.sw) != (1, 1)


def prepare_part(algorithm: str, x: np.ndarray, geo: ConvGeometry, work: list[np.ndarray], c0: int, c1: int) -> None:
    """Fill the scratch rows of input channels [c0, c1) (every ``prepare_part`` before any ``gemm_part``)."""
    if algorithm == "gemm1x1":
        np.copyto(work[0][:, c0:c1], x[:, c0:c1, ::geo.sh, ::geo.sw][:, :, :geo.ho, :geo.wo])
        return
    image = x[0, c0:c1]
    xp = pad_into(work[0][c0:c1], image, geo.pt, geo.pl) if geo.needs_padding else image
    cols = work[-1].reshape(geo.c, geo.kh, geo.kw, geo.ho, geo.wo)
    np.copyto(cols[c0:c1], _windows(xp, geo))


def gemm_part(algorithm: str, x: np.ndarray, w: np.ndarray, out: np.ndarray, geo: ConvGeometry,
              work: list[np.ndarray], m0: int, m1: int) -> None:
    """Output channels [m0, m1) of the conv (no bias) from the prepared scratch."""
    if algorithm == "gemm1x1":
        src = work[0] if (geo.sh, geo.sw) != (1, 1) else x
        cols = src.reshape(geo.c, geo.ho * geo.wo)
    else:
        cols = work[-1]
    w2 = w.reshape(geo.m, -1)
    np.matmul(w2[m0:m1], cols, out=out.reshape(geo.m, geo.ho * geo.wo)[m0:m1])


def pad_into(buf: np.ndarray, image: np.ndarray, top: int, left: int, fill: float = 0.0) -> np.ndarray:
    """Copy ``image`` (last two axes H, W) into ``buf`` at (top, left) and fill the border around it.

    NOTE: scratch buffers are shared with other steps between runs, so the border is refilled every time.
    """
    h, w = image.shape[-2:]
    buf[..., :top, :] = fill
    buf[..., top + h:, :] = fill
    buf[..., top:top + h, :left] = fill
    buf[..., top:top + h, left + w:] = fill
    buf[..., top:top + h, left:left + w] = image
    return buf


def _windows(xp: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """A read-only [C, kh, kw, Ho, Wo] view of the windows of a padded image [C, Hp, Wp]."""
    s0, s1, s2 = xp.strides
    return as_strided(xp, (xp.shape[0], geo.kh, geo.kw, geo.ho, geo.wo),
                      (s0, s1 * geo.dh, s2 * geo.dw, s1 * geo.sh, s2 * geo.sw), writeable=False)


def _im2col(x, w, out, geo: ConvGeometry, work) -> None:
    cols = work[-1]
    cg, mg = geo.c // geo.group, geo.m // geo.group
    w2 = w.reshape(geo.m, cg * geo.kh * geo.kw)
    for n in range(geo.n):
        xp = pad_into(work[0], x[n], geo.pt, geo.pl) if geo.needs_padding else x[n]
        for g in range(geo.group):
            win = _windows(xp[g * cg:(g + 1) * cg], geo)
            np.copyto(cols.reshape(cg, geo.kh, geo.kw, geo.ho, geo.wo), win)
            np.matmul(w2[g * mg:(g + 1) * mg], cols, out=out[n, g * mg:(g + 1) * mg].reshape(mg, -1))


def _depthwise_taps(x, w, out, geo: ConvGeometry, work) -> None:
    """Depthwise conv as kh*kw vectorised multiply-adds over the whole image (no JIT needed)."""
    xp_buf, tmp = work
    for n in range(geo.n):
        xp = pad_into(xp_buf, x[n], geo.pt, geo.pl)
        win = _windows(xp, geo)
        o = out[n]
        for i in range(geo.kh):
            for j in range(geo.kw):
                wij = w[:, 0, i, j].reshape(-1, 1, 1)
                if i == j == 0:
                    np.multiply(win[:, 0, 0], wij, out=o)
                else:
                    np.multiply(win[:, i, j], wij, out=tmp)
                    np.add(o, tmp, out=o)


_DIRECT = None


def direct_kernel():
    """The direct Numba convolution (compiled on first use, cached on disk by Numba)."""
    global _DIRECT
    if _DIRECT is None:
        _DIRECT = _build_direct()
    return _DIRECT


def _build_direct():
    import numba

    @numba.njit(parallel=True, cache=True, nogil=True)
    def conv2d_direct(x, w, b, out, sh, sw, dh, dw, pt, pl, group):  # pragma: no cover - compiled
        nb, _, h, wd = x.shape
        m_all, cg, kh, kw = w.shape
        ho, wo = out.shape[2], out.shape[3]
        mg = m_all // group
        for nm in numba.prange(nb * m_all):
            n = nm // m_all
            m = nm - n * m_all
            g = m // mg
            o = out[n, m]
            o[:, :] = b[m]
            for c in range(cg):
                xc = x[n, g * cg + c]
                for ki in range(kh):
                    for kj in range(kw):
                        wv = w[m, c, ki, kj]
                        off = kj * dw - pl
                        j0 = 0 if off >= 0 else (-off + sw - 1) // sw
                        j1 = (wd - 1 - off) // sw + 1 if wd - 1 - off >= 0 else 0
                        j1 = min(j1, wo)
                        for i in range(ho):
                            ih = i * sh - pt + ki * dh
                            if ih < 0 or ih >= h:
                                continue
                            xrow = xc[ih]
                            orow = o[i]
                            for j in range(j0, j1):
                                orow[j] += wv * xrow[j * sw + off]

    return conv2d_direct
