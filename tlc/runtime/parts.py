"""Splitting a contraction step (and its epilogue) into parts for the runtime's worker threads.

A step's output is cut along its first axis longer than one, into one contiguous slab per thread; every array
the step reads is cut the same way where it runs along that axis (a GEMM's A rows for the M axis, B columns
for N, both for a batch axis; an epilogue input that broadcasts there is passed whole). ``PartsBound`` is what a
library impl that can split gives the executor: optional ``prepare`` parts (a conv's im2col, by channels) that
all finish before the ``parts`` that each compute one slab of the output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .impl import StepFn
from .workers import split_rows

#: a step is split when its multiply-adds reach this (2 x 4M flops: ~0.1 ms on one core; a hand-off ~20 us)
PARTS_MIN_MACS = 4 << 20


class Split(NamedTuple):
    axis: int                          # the output axis cut
    bounds: list[tuple[int, int]]      # one (start, stop) per part


class PartsBound(NamedTuple):
    split: Split
    parts: list[StepFn]                # part k writes outputs[0][slab k]
    prepare: list[StepFn] | None = None
    workspace: list[tuple[tuple[int, ...], np.dtype]] = []
    note: str = ""


def parts_note(parts: PartsBound) -> str:
    """What ``stats()`` says of a step run in parts: the algorithm and the number of parts."""
    return ", ".join(filter(None, [parts.note, f"{len(parts.parts)} parts"]))


def output_split(shape: tuple[int, ...], parts: int) -> Split | None:
    """Slabs of ``shape`` along its first axis longer than one (contiguous in C order), or None."""
    for axis, n in enumerate(shape):
        if n > 1:
            return Split(axis, split_rows(n, parts)) if parts > 1 and n >= parts else None
    return None


def slab(shape: tuple[int, ...] | None, out_rank: int, split: Split, k: int, along: int | None = None):
    """The index of part ``k`` of an array of ``shape`` read by a step cut by ``split``.

    ``along``: the array's axis that runs along the cut axis (default: ``shape`` right-aligned to the output, as
    broadcasting aligns it); None returned where the array is read whole.
    """
    if shape is None:
        return None
    if along is None:
        along = split.axis - (out_rank - len(shape))
        if along < 0:
            return None
    if shape[along] == 1:
        return None
    start, stop = split.bounds[k]
    return (slice(None),) * along + (slice(start, stop),)


def part_of(array: np.ndarray, index) -> np.ndarray:
    return array if index is None else array[index]


def contraction_axes(a_rank: int, b_rank: int, out_rank: int, axis: int) -> tuple[int | None, int | None]:
    """The axes of A [..., M, K] and B [..., K, N] that run along output axis ``axis`` (None: read whole)."""
    if axis == out_rank - 1:
        return None, b_rank - 1
    if axis == out_rank - 2:
        return a_rank - 2, None
    a, b = axis - (out_rank - a_rank), axis - (out_rank - b_rank)   # a batch axis, broadcast-aligned
    return (a if a >= 0 else None), (b if b >= 0 else None)


def matmul_parts(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...], threads: int,
                 views: Callable[[list], tuple[np.ndarray, np.ndarray]] = lambda ins: (ins[0], ins[1]),
                 finish: Callable[[list, np.ndarray, int], None] | None = None) -> PartsBound | None:
    """Parts of ``out = A @ B`` (numpy matmul semantics; A and B as ``views(ins)`` gives them, of the shapes
    given, rank >= 2), each followed by ``finish(ins, out_part, k)`` when given (Gemm's alpha and C)."""
    if len(a_shape) < 2 or len(b_shape) < 2 or threads < 2:
        return None
    macs = int(np.prod(out_shape, dtype=np.int64)) * a_shape[-1]
    if macs < PARTS_MIN_MACS:
        return None
    split = column_split(a_shape, b_shape, out_shape, threads) or output_split(out_shape, threads)
    if split is None:
        return None
    rank = len(out_shape)
    a_along, b_along = contraction_axes(len(a_shape), len(b_shape), rank, split.axis)
    fns = []
    for k in range(len(split.bounds)):
        ia = None if a_along is None else slab(a_shape, rank, split, k, a_along)
        ib = None if b_along is None else slab(b_shape, rank, split, k, b_along)
        fns.append(_matmul_part(k, ia, ib, slab(out_shape, rank, split, k), views, finish))
    return PartsBound(split, fns)


#: a column slab of B narrower than this many columns costs BLAS more than the B traffic it saves
COLUMN_SPLIT_MIN = 128


def column_split(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...],
                 threads: int) -> Split | None:
    """Slabs of the output's columns (N) when B outweighs A in a product with no batch.

    A row split makes every thread stream all of B: for a layer's weights ([K, N], megabytes) times a few
    rows of activations that doubles the memory traffic at 2 threads. A column split reads each column of B
    once in all (mlp at 2 threads, after 0.15 s idle: 1.85 ms against 2.15 ms for its 64x784x1024 GEMM).
    The slabs are strided (row stride N), which BLAS takes as they are; elementwise work on them runs after,
    in row slabs (``column_split`` users must not hand them to a kernel that wants contiguous arrays).
    """
    rank = len(out_shape)
    if threads < 2 or len(b_shape) != 2 or any(d != 1 for d in out_shape[:-2]):
        return None
    m, n = out_shape[-2], out_shape[-1]
    if n <= m or n < threads * COLUMN_SPLIT_MIN:   # B [K, N] no bigger than A [M, K]: rows are as good
        return None
    return Split(rank - 1, split_rows(n, threads))


def _matmul_part(k, ia, ib, io, views, finish) -> StepFn:
    def part(ins, outs, work):
        a, b = views(ins)
        out = part_of(outs[0], io)
        np.matmul(part_of(a, ia), part_of(b, ib), out=out)
        if finish is not None:
            finish(ins, out, k)

    return part
