"""Broadcast patterns: how each operand maps onto a kernel's iteration space, and the collapse of that space.

A kernel is specialised on a ``Layout``: the output dims grouped into collapsed dims, and for every operand
whether it runs along each collapsed dim ("full") or is broadcast there (size 1 or absent). Adjacent
dims merge when every operand agrees on both, so a contiguous elementwise add of two [N, C, H, W] arrays is
one flat loop, and a bias [C, 1, 1] against [N, C, H, W] is three dims (N | C | H*W). Sizes are not part of
the layout: ``Layout.dims`` computes them from the arrays at run time and returns None when the arrays do not
fit (a symbolic dim that turned out to be 1), in which case the kernel builds a layout for those arrays.

Row layouts (reduction kernels) keep the last axis as its own collapsed dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir.types import Shape


@dataclass(frozen=True)
class Layout:
    rank: int  # rank of the full (output) shape
    groups: tuple[tuple[int, ...], ...]  # output axes of each collapsed dim
    flags: tuple[tuple[bool, ...], ...]  # per operand: full (True) or broadcast per collapsed dim
    row: bool = False  # last collapsed dim is the row (reduction kernels)

    @property
    def ndim(self) -> int:
        return len(self.groups)

    def key(self) -> str:
        """A short text that names this layout in generated source (digits and letters only)."""
        groups = "_".join("".join(str(a) for a in g) or "x" for g in self.groups)
        flags = "_".join("".join("f" if f else "b" for f in fl) for fl in self.flags)
        return f"r{self.rank}{'row' if self.row else ''}_{groups}_{flags}"

    def dims(self, full: Sequence[int], shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
        """Collapsed sizes for arrays of ``shapes`` under output shape ``full``; None if they do not fit."""
        if len(full) != self.rank:
            return None
        covered = {a for g in self.groups for a in g}
        if any(full[a] != 1 for a in range(self.rank) if a not in covered):
            return None
        for shape, flags in zip(shapes, self.flags, strict=False):
            padded = (1,) * (self.rank - len(shape)) + tuple(shape)
            if len(padded) != self.rank:
                return None
            for group, is_full in zip(self.groups, flags, strict=True):
                for a in group:
                    if padded[a] != (full[a] if is_full else 1) and full[a] != 1:
                        return None
        out = []
        for group in self.groups:
            size = 1
            for a in group:
                size *= full[a]
            out.append(size)
        return tuple(out)


def _is_full(dim, out_dim) -> bool:
    """An operand dim runs along the output dim unless it is 1 (or absent) where the output may be larger."""
    return not (dim == 1 and out_dim != 1)


def make_layout(full: Shape, shapes: Sequence[Shape], row: bool = False) -> Layout:
    """The collapsed layout of operands with ``shapes`` over output shape ``full`` (dims may be symbolic)."""
    rank = len(full)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    last = rank - 1 if row and rank else None
    axes = [a for a in range(rank) if full[a] != 1 or a == last]
    groups: list[list[int]] = []
    for a in axes:
        mergeable = (
            groups
            and a != last
            and groups[-1][-1] != last
            and all(_is_full(p[groups[-1][-1]], full[groups[-1][-1]]) == _is_full(p[a], full[a]) for p in padded)
        )
        if mergeable:
            groups[-1].append(a)
        else:
            groups.append([a])
    if not groups:  # a scalar iteration space: one dim of size 1
        return Layout(rank, ((),), tuple((True,) for _ in shapes), row)
    flags = tuple(tuple(_is_full(p[g[0]], full[g[0]]) for g in groups) for p in padded)
    return Layout(rank, tuple(tuple(g) for g in groups), flags, row)


def concrete_layout(full: Sequence[int], shapes: Sequence[Sequence[int]], row: bool = False) -> Layout:
    """The layout of concrete arrays (size-1 output dims drop out)."""
    return make_layout(tuple(full), [tuple(s) for s in shapes], row)
