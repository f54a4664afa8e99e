"""Sliding-window geometry shared by Conv, ConvTranspose and the pools (ONNX semantics).

A window over the spatial axes (those after N and C) has, per axis, a kernel size k, a stride s, a dilation d
and begin/end pads; ``auto_pad`` (SAME_UPPER, SAME_LOWER, VALID) replaces explicit pads. The dilated extent of a
kernel is (k - 1) * d + 1. Output sizes are computed on ints; a symbolic input size gives a symbolic output only
where the output provably equals the input (stride 1 and "same" padding), else an unknown dim.

The numpy helpers here (``pad_spatial``, ``taps``) let the reference implementations loop over kernel taps
(a handful of vectorised slices) instead of over pixels.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.types import Dim
from .registry import REQUIRED, Attr

SAME = ("SAME_UPPER", "SAME_LOWER")
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def window_attrs(kernel_required: bool) -> dict[str, Attr]:
    """The attribute schema every windowed op shares (ONNX defaults: absent lists mean ones / zeros)."""
    return {"auto_pad": Attr("string", "NOTSET"), "dilations": Attr("ints"),
            "kernel_shape": Attr("ints", REQUIRED if kernel_required else None), "pads": Attr("ints"),
            "strides": Attr("ints")}


@dataclass(frozen=True)
class Window:
    """The window of one node over ``len(kernel)`` spatial axes, attributes checked and defaults filled."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # ONNX order: all begins, then all ends (ignored unless auto_pad is NOTSET)
    auto_pad: str = "NOTSET"
    ceil_mode: bool = False

    @property
    def rank(self) -> int:
        return len(self.kernel)

    @property
    def extents(self) -> tuple[int, ...]:
        """Dilated kernel sizes: (k - 1) * d + 1 per axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))

    def axis(self, i: int, size: int) -> tuple[int, int, int]:
        """(output size, begin pad, end pad) of axis ``i`` for an input of ``size``; ValueError when empty."""
        k, s, ext = self.kernel[i], self.strides[i], self.extents[i]
        if self.auto_pad in SAME:
            out = -(-size // s)
            total = max(0, (out - 1) * s + ext - size)
            begin = total // 2 if self.auto_pad == "SAME_UPPER" else total - total // 2
            return out, begin, total - begin
        begin, end = (0, 0) if self.auto_pad == "VALID" else (self.pads[i], self.pads[i + self.rank])
        span = size + begin + end - ext
        if span < 0:
            raise ValueError(f"kernel extent {ext} (kernel {k}, dilation {self.dilations[i]}) is larger than the "
                             f"padded input {size + begin + end} on spatial axis {i}")
        if not self.ceil_mode:
            return span // s + 1, begin, end
        out = -(-span // s) + 1
        if (out - 1) * s >= size + begin:  # the last window must start inside the input or its begin pad
            out -= 1
        return out, begin, end

    def output_dim(self, i: int, size: Dim) -> Dim:
        """The output size of axis ``i`` for a possibly symbolic input size."""
        if isinstance(size, int):
            return self.axis(i, size)[0]
        if self.strides[i] != 1:
            return None
        if self.auto_pad in SAME:
            return size
        begin, end = (0, 0) if self.auto_pad == "VALID" else (self.pads[i], self.pads[i + self.rank])
        return size if begin + end == self.extents[i] - 1 else None

    def resolve(self, sizes: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """Output sizes, begin pads and end pads for concrete input sizes."""
        geo = [self.axis(i, n) for i, n in enumerate(sizes)]
        return [g[0] for g in geo], [g[1] for g in geo], [g[2] for g in geo]


def make_window(attrs: dict[str, Any], kernel: Sequence[int], ceil_mode: bool = False) -> Window:
    """A checked ``Window`` from a node's attributes and its kernel sizes; ValueError says what is wrong."""
    rank = len(kernel)
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise ValueError(f"auto_pad {auto_pad!r} is not one of {', '.join(AUTO_PADS)}")

    def ints(name: str, default: int, length: int, minimum: int) -> tuple[int, ...]:
        value = attrs.get(name)
        if value is None or len(value) == 0:
            return (default,) * length
        if len(value) != length:
            raise ValueError(f"{name} has {len(value)} values, expected {length} for {rank} spatial axes")
        if any(v < minimum for v in value):
            raise ValueError(f"{name} {list(value)} must be >= {minimum}")
        return tuple(int(v) for v in value)

    if any(k < 1 for k in kernel):
        raise ValueError(f"kernel sizes {list(kernel)} must be >= 1")
    if auto_pad != "NOTSET" and any(attrs.get("pads") or ()):
        # ONNX: pads "cannot be used simultaneously with auto_pad"; onnxruntime and ONNX's shape inference then
        # use the pads, the spec's formula ignores them (fuzz seeds 600072, 600464, 600571, 601114)
        raise ValueError(f"pads {list(attrs['pads'])} cannot be used with auto_pad {auto_pad}: ONNX takes one or "
                         f"the other")
    return Window(tuple(int(k) for k in kernel), ints("strides", 1, rank, 1), ints("dilations", 1, rank, 1),
                  ints("pads", 0, 2 * rank, 0), auto_pad, bool(ceil_mode))


def kernel_from(attrs: dict[str, Any], weight_shape: Sequence[Dim] | None, rank: int) -> list[Dim]:
    """Kernel sizes: the ``kernel_shape`` attribute, else the weight's spatial dims (None where unknown)."""
    given = attrs.get("kernel_shape")
    if given:
        if len(given) != rank:
            raise ValueError(f"kernel_shape {list(given)} has {len(given)} dims for {rank} spatial axes")
        return [int(k) for k in given]
    if weight_shape is None:
        return [None] * rank
    return list(weight_shape[2:])


# ---------------------------------------------------------------------------- numpy helpers
def pad_spatial(x: np.ndarray, begins: Sequence[int], ends: Sequence[int], value: Any = 0) -> np.ndarray:
    """``x`` with its spatial axes padded by ``value`` (no copy when there is nothing to pad)."""
    if not any(begins) and not any(ends):
        return x
    widths = [(0, 0)] * (x.ndim - len(begins)) + list(zip(begins, ends))
    return np.pad(x, widths, mode="constant", constant_values=value)


def end_pads_for(window: Window, sizes: Sequence[int], outs: Sequence[int], begins: Sequence[int],
                 ends: Sequence[int]) -> list[int]:
    """End pads large enough that every window fits (ceil_mode windows may run past the declared pads)."""
    need = [(o - 1) * s + e for o, s, e in zip(outs, window.strides, window.extents)]
    return [max(end, n - b - size) for end, n, b, size in zip(ends, need, begins, sizes)]


def taps(window: Window, outs: Sequence[int]) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each kernel tap (in row-major kernel order): its offsets and the spatial slices of a padded input
    that hold, for every output position, the input element that tap reads."""
    for offset in itertools.product(*(range(k) for k in window.kernel)):
        yield offset, tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                            for o, d, s, n in zip(offset, window.dilations, window.strides, outs))


def prod(values: Sequence[int]) -> int:
    return math.prod(int(v) for v in values)
