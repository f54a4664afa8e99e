"""Convolutions: Conv and ConvTranspose over 1-D, 2-D and 3-D NCHW-style tensors, grouped and dilated.

The references are vectorised: Conv is im2col (a strided window view copied once into columns) and one batched
matmul per group; ConvTranspose is one batched matmul followed by col2im, a scatter-add per kernel tap. Both
multiply in the input dtype (float32 stays float32, accumulated by BLAS as onnxruntime's MLAS does).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir.types import Dim, TensorType
from .registry import Attr, InferContext, OpDef, Trait, register
from .window import SAME, Window, kernel_from, make_window, pad_spatial, prod, taps, window_attrs

CONV_TRAITS = frozenset({Trait.PURE, Trait.FOLDABLE, Trait.CONTRACTION, Trait.LAYOUT_SENSITIVE})


def _window_or_fail(ctx: InferContext, kernel: list[Dim]) -> Window | None:
    """The node's window, or None when the kernel sizes are not known yet."""
    if any(not isinstance(k, int) for k in kernel):
        return None
    try:
        return make_window(ctx.attrs, kernel)
    except ValueError as exc:
        ctx.fail(str(exc))


def _check_operands(ctx: InferContext) -> tuple[TensorType, TensorType, int]:
    """Common checks of X, W and B: dtypes, ranks, group; returns (x, w, number of spatial axes or -1)."""
    x, w = ctx.type(0), ctx.type(1)
    for i in range(1, ctx.num_inputs):
        if ctx.has_input(i) and ctx.type(i).dtype != x.dtype:
            ctx.fail(f"input {i} has dtype {ctx.type(i).dtype}, expected {x.dtype} like X")
    group = ctx.attrs["group"]
    if group < 1:
        ctx.fail(f"group must be >= 1, got {group}")
    rank = x.rank if x.rank is not None else w.rank
    if rank is None:
        return x, w, -1
    if rank < 3:
        ctx.fail(f"X must have rank >= 3 (N, C, spatial...), got {x}")
    if x.rank is not None and w.rank is not None and x.rank != w.rank:
        ctx.fail(f"X {x} and W {w} have different ranks")
    return x, w, rank - 2


def _conv_infer(ctx: InferContext) -> list[TensorType]:
    x, w, nsp = _check_operands(ctx)
    if nsp < 0:
        return [TensorType(x.dtype, None)]
    xs = x.shape or (None,) * (nsp + 2)
    ws = w.shape or (None,) * (nsp + 2)
    group = ctx.attrs["group"]
    c_in, c_w, m = xs[1], ws[1], ws[0]
    if isinstance(c_in, int) and isinstance(c_w, int) and c_in != c_w * group:
        ctx.fail(f"input channels do not match the weight: X {x} has {c_in} channels (dim 1) but W {w} "
                 f"has {c_w} channels per group (dim 1) x group {group} = {c_w * group}")
    if isinstance(m, int) and m % group:
        ctx.fail(f"W {w} has {m} output channels (dim 0), not a multiple of group {group}")
    _check_bias(ctx, m)
    try:
        kernel = kernel_from(ctx.attrs, w.shape, nsp)
    except ValueError as exc:
        ctx.fail(str(exc))
    if any(isinstance(d, int) and d != k for d, k in zip(ws[2:], kernel)):
        ctx.fail(f"kernel_shape {kernel} differs from the spatial dims of W {w}")
    window = _window_or_fail(ctx, kernel)
    spatial: list[Dim] = [None] * nsp
    if window is not None:
        try:
            spatial = [window.output_dim(i, d) for i, d in enumerate(xs[2:])]
        except ValueError as exc:
            ctx.fail(f"X {x}: {exc}")
    return [TensorType(x.dtype, (xs[0], m, *spatial))]


def _check_bias(ctx: InferContext, channels: Dim) -> None:
    if not ctx.has_input(2):
        return
    b = ctx.type(2)
    if b.shape is None:
        return
    if len(b.shape) != 1 or (isinstance(channels, int) and isinstance(b.shape[0], int) and b.shape[0] != channels):
        ctx.fail(f"bias B {b} should have shape [{channels}] (one value per output channel)")


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *, auto_pad: str = "NOTSET",
         dilations: Any = None, group: int = 1, kernel_shape: Any = None, pads: Any = None,
         strides: Any = None) -> np.ndarray:
    """ONNX Conv: im2col then a batched matmul per group."""
    n, c = x.shape[:2]
    m, nsp = w.shape[0], x.ndim - 2
    window = make_window({"auto_pad": auto_pad, "dilations": dilations, "pads": pads, "strides": strides},
                         w.shape[2:])
    if kernel_shape and tuple(kernel_shape) != w.shape[2:]:
        raise ValueError(f"kernel_shape {list(kernel_shape)} differs from W's spatial dims {list(w.shape[2:])}")
    if c != w.shape[1] * group:
        raise ValueError(f"X has {c} channels but W {list(w.shape)} with group {group} expects {w.shape[1] * group}")
    outs, begins, ends = window.resolve(x.shape[2:])
    k = w.shape[1] * prod(window.kernel)
    length = prod(outs)
    if all(e == 1 for e in window.extents) and all(s == 1 for s in window.strides) and not any(begins + ends):
        cols = x.reshape(n, group, k, length)  # 1x1 convolution: the input already is the column matrix
    else:
        xp = pad_spatial(x, begins, ends)
        view = sliding_window_view(xp, window.extents, axis=tuple(range(2, 2 + nsp)))
        index = ((slice(None), slice(None)) + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, window.strides))
                 + tuple(slice(None, None, d) for d in window.dilations))
        view = view[index]  # (N, C, *outs, *kernel)
        order = (0, 1, *range(2 + nsp, 2 + 2 * nsp), *range(2, 2 + nsp))
        cols = view.transpose(order).reshape(n, group, k, length)  # the im2col copy
    y = np.matmul(w.reshape(group, m // group, k), cols)  # (N, group, M / group, L)
    y = y.reshape(n, m, *outs)
    if b is not None:
        y += b.reshape((m,) + (1,) * nsp)
    return y.astype(x.dtype, copy=False)


register(OpDef(name="Conv", infer=_conv_infer, reference=conv, inputs=(2, 3),
               attrs={**window_attrs(kernel_required=False), "group": Attr("int", 1)}, traits=CONV_TRAITS,
               cost=2, bias=(2, 1), doc="N-D convolution (NCHW), grouped and dilated, with optional bias."))


# ---------------------------------------------------------------------------- ConvTranspose
def transpose_axis(window: Window, i: int, size: int, output_padding: int, output_size: int | None) -> tuple[int, int]:
    """(output size, begin pad) of axis ``i`` of ConvTranspose, per the ONNX spec.

    The full (uncropped) output is s * (in - 1) + output_padding + extent; pads crop it. An explicit
    output_shape, or auto_pad SAME_* (output = in * stride), sets the pads instead: the total is split with the
    larger half at the end for SAME_UPPER and at the begin otherwise.
    """
    s = window.strides[i]
    full = s * (size - 1) + output_padding + window.extents[i]
    if output_size is None and window.auto_pad in SAME:
        output_size = size * s
    if output_size is not None:
        total = full - output_size
        return output_size, total // 2 if window.auto_pad == "SAME_UPPER" else total - total // 2
    begin, end = (window.pads[i], window.pads[i + window.rank]) if window.auto_pad == "NOTSET" else (0, 0)
    if full - begin - end < 1:
        raise ValueError(f"pads {begin}, {end} leave an empty output on spatial axis {i} (uncropped size {full})")
    return full - begin - end, begin


def transpose_attrs(attrs: dict[str, Any], rank: int) -> tuple[list[int], list[int | None]]:
    """output_padding (zeros by default) and the spatial output_shape (Nones when absent)."""
    output_padding = list(attrs.get("output_padding") or [0] * rank)
    if len(output_padding) != rank:
        raise ValueError(f"output_padding {output_padding} has {len(output_padding)} values for {rank} spatial axes")
    output_shape = attrs.get("output_shape")
    if not output_shape:
        return output_padding, [None] * rank
    if len(output_shape) not in (rank, rank + 2):
        raise ValueError(f"output_shape {list(output_shape)} should have {rank} (spatial) or {rank + 2} values")
    return output_padding, [int(v) for v in output_shape[-rank:]]


def _conv_transpose_infer(ctx: InferContext) -> list[TensorType]:
    x, w, nsp = _check_operands(ctx)
    if nsp < 0:
        return [TensorType(x.dtype, None)]
    xs = x.shape or (None,) * (nsp + 2)
    ws = w.shape or (None,) * (nsp + 2)
    group = ctx.attrs["group"]
    if isinstance(xs[1], int) and isinstance(ws[0], int) and xs[1] != ws[0]:
        ctx.fail(f"input channels do not match the weight: X {x} has {xs[1]} channels (dim 1) but W {w} "
                 f"has {ws[0]} input channels (dim 0)")
    if isinstance(ws[0], int) and ws[0] % group:
        ctx.fail(f"W {w} has {ws[0]} input channels (dim 0), not a multiple of group {group}")
    m = ws[1] * group if isinstance(ws[1], int) else None
    _check_bias(ctx, m)
    try:
        kernel = kernel_from(ctx.attrs, w.shape, nsp)
        output_padding, output_shape = transpose_attrs(ctx.attrs, nsp)
    except ValueError as exc:
        ctx.fail(str(exc))
    if any(isinstance(d, int) and d != k for d, k in zip(ws[2:], kernel)):
        ctx.fail(f"kernel_shape {kernel} differs from the spatial dims of W {w}")
    window = _window_or_fail(ctx, kernel)
    spatial: list[Dim] = list(output_shape)
    for i, d in enumerate(xs[2:]):
        if window is not None and isinstance(d, int):
            try:
                spatial[i] = transpose_axis(window, i, d, output_padding[i], output_shape[i])[0]
            except ValueError as exc:
                ctx.fail(f"X {x}: {exc}")
    return [TensorType(x.dtype, (xs[0], m, *spatial))]


def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *, auto_pad: str = "NOTSET",
                   dilations: Any = None, group: int = 1, kernel_shape: Any = None, output_padding: Any = None,
                   output_shape: Any = None, pads: Any = None, strides: Any = None) -> np.ndarray:
    """ONNX ConvTranspose: a batched matmul per group, then col2im (a scatter-add per kernel tap)."""
    n, c = x.shape[:2]
    nsp = x.ndim - 2
    m = w.shape[1] * group
    window = make_window({"auto_pad": auto_pad, "dilations": dilations, "pads": pads, "strides": strides},
                         w.shape[2:])
    if c != w.shape[0]:
        raise ValueError(f"X has {c} channels but W {list(w.shape)} expects {w.shape[0]}")
    padding, shape = transpose_attrs({"output_padding": output_padding, "output_shape": output_shape}, nsp)
    sizes = list(x.shape[2:])
    geometry = [transpose_axis(window, i, size, padding[i], shape[i]) for i, size in enumerate(sizes)]
    outs, begins = [g[0] for g in geometry], [g[1] for g in geometry]
    kernel = list(window.kernel)
    length = prod(sizes)
    wg = w.reshape(group, c // group, (m // group) * prod(kernel)).transpose(0, 2, 1)
    cols = np.matmul(wg, x.reshape(n, group, c // group, length))  # (N, group, M/group * K, L)
    cols = cols.reshape(n, m, *kernel, *sizes)
    full = [max(s * (i - 1) + e, bg + o) for s, i, e, bg, o in zip(window.strides, sizes, window.extents, begins, outs)]
    lead = [max(0, -bg) for bg in begins]  # negative begin pads (output_shape larger than the full output)
    y = np.zeros((n, m, *(f + ld for f, ld in zip(full, lead))), dtype=x.dtype)
    scatter = Window(window.kernel, window.strides, window.dilations, (0,) * (2 * nsp))
    for offset, slices in taps(scatter, sizes):
        shifted = tuple(slice(sl.start + ld, sl.stop + ld, sl.step) for sl, ld in zip(slices, lead))
        y[(slice(None), slice(None), *shifted)] += cols[(slice(None), slice(None), *offset)]
    y = y[(slice(None), slice(None), *(slice(bg + ld, bg + ld + o) for bg, ld, o in zip(begins, lead, outs)))]
    if b is not None:
        y = y + b.reshape((m,) + (1,) * nsp)
    return np.ascontiguousarray(y).astype(x.dtype, copy=False)


register(OpDef(name="ConvTranspose", infer=_conv_transpose_infer, reference=conv_transpose, inputs=(2, 3),
               attrs={**window_attrs(kernel_required=False), "group": Attr("int", 1),
                      "output_padding": Attr("ints"), "output_shape": Attr("ints")},
               traits=CONV_TRAITS, cost=2,
               doc="N-D transposed convolution (NCHW), grouped and dilated, with output_padding/output_shape."))
