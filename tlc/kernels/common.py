"""What every renderer shares: the ``Variant`` a generated module is specialised on, and the index arithmetic
of a layout's collapsed space (products and sums of dims, a flat index split into per-dim indices, operands'
strides and bases over the outer dims, unsigned array indices) and where an in-place output is written, drawn as
``ast`` through ``emit``. Target-neutral: the CPU and CUDA renderers both import it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numba
import numpy as np

from . import emit as M
from .layout import Layout


@dataclass(frozen=True)
class Contraction:
    """The library routine an epilogue module calls for its contraction, in parts (see ``tlc.kernels.gemm``).

    Its part function is called ``module.part(c0, .., c{before-1}, acc, x0, .., x{after-1}, p, nparts)`` and
    returns the flat range [lo, hi) of ``acc`` it wrote; ``prepare`` (optional) is called
    ``module.prepare(c0, .., x0, .., p, nprep)`` for every p before any part runs.
    """

    module: str  # a dotted module path of tlc's own (never a string from a model)
    part: str
    before: int
    after: int
    prepare: str | None = None


@dataclass(frozen=True)
class Variant:
    """What one generated module is specialised on besides the plan."""

    layout: Layout
    fast_math: bool = False
    alias: tuple[int, ...] = ()  # per output: the input it is written into (in-place), or -1
    contraction: Contraction | None = None  # an epilogue module: the contraction it drives
    arguments: str = ""  # an epilogue module: its step's argument types (``tlc.kernels.parts.spec``)


def unsigned(index: ast.expr) -> ast.expr:
    """An array index Numba takes as unsigned, so it emits no negative-index wraparound: that select hides the
    address from LLVM's dependence analysis, and an in-place loop (load and store on one array) stays scalar.
    """
    return M.call("np.uint64", index)


def product(names: list[str]) -> ast.expr:
    """``n0 * n1 * ...`` of the named variables (1 for none)."""
    if not names:
        return M.integer(1)
    node: ast.expr = M.name(names[0])
    for n in names[1:]:
        node = M.binop(node, "*", M.name(n))
    return node


def split_index(flat: str, layout: Layout, outer: int) -> list[ast.stmt]:
    """``i{outer-1}, ..., i0`` from the flat index ``flat`` over dims n0..n{outer-1} (row-major)."""
    if outer == 0:
        return []
    if outer == 1:
        return [M.assign("i0", M.name(flat))]
    stmts = [M.assign("rest", M.name(flat))]
    for d in range(outer - 1, 0, -1):
        stmts.append(M.assign(f"i{d}", M.binop(M.name("rest"), "%", M.name(f"n{d}"))))
        stmts.append(M.assign("rest", M.binop(M.name("rest"), "//", M.name(f"n{d}"))))
    stmts.append(M.assign("i0", M.name("rest")))
    return stmts


def total(terms: list[ast.expr]) -> ast.expr:
    """``t0 + t1 + ...`` of the terms (0 for none)."""
    if not terms:
        return M.integer(0)
    node = terms[0]
    for t in terms[1:]:
        node = M.binop(node, "+", t)
    return node


def alias_of(variant: Variant, m: int) -> int:
    """The input output ``m`` is written into (in place), or -1."""
    return variant.alias[m] if m < len(variant.alias) else -1


def kernel_types(plan, variant: Variant) -> tuple:
    """Numba types of a kernel module's arguments ``(dims, *inputs, *constants, *outputs)`` for ``plan`` (a
    ``KernelPlan``), outputs computed in place left out: all 1-D C-contiguous (the constants are writeable
    copies: ``plan.py``)."""
    dtypes = [op.dtype for op in plan.operands]
    dtypes += [o.dtype for m, o in enumerate(plan.outputs) if alias_of(variant, m) < 0]
    return (numba.types.int64[::1],) + tuple(numba.types.Array(numba.from_dtype(np.dtype(d)), 1, "C")
                                             for d in dtypes)


def out_array(variant: Variant, m: int) -> str:
    """The parameter output ``m`` is stored through: its own ``out{m}``, or the input it is computed into."""
    a = alias_of(variant, m)
    return f"in{a}" if a >= 0 else f"out{m}"


def prologue(layout: Layout) -> list[ast.stmt]:
    """``n0 = dims[0]`` ... and the outer strides of every operand (``s3_1``: operand 3, dim 1) and of the
    outputs (``so_1``)."""
    stmts = [M.assign(f"n{d}", M.index("dims", M.integer(d))) for d in range(layout.ndim)]
    for k, flags in enumerate(layout.flags):
        for d in range(layout.ndim - 1):
            if flags[d]:
                later = [f"n{e}" for e in range(d + 1, layout.ndim) if flags[e]]
                stmts.append(M.assign(f"s{k}_{d}", product(later)))
    for d in range(layout.ndim - 1):
        stmts.append(M.assign(f"so_{d}", product([f"n{e}" for e in range(d + 1, layout.ndim)])))
    return stmts


def bases(layout: Layout, outer: int) -> list[ast.stmt]:
    """``b3 = i0 * s3_0 + ...`` for every operand, and ``bo`` for the outputs (over the outer dims)."""
    stmts = []
    for k, flags in enumerate(layout.flags):
        terms = [M.binop(M.name(f"i{d}"), "*", M.name(f"s{k}_{d}")) for d in range(outer) if flags[d]]
        stmts.append(M.assign(f"b{k}", total(terms)))
    stmts.append(M.assign("bo", total([M.binop(M.name(f"i{d}"), "*", M.name(f"so_{d}")) for d in range(outer)])))
    return stmts
