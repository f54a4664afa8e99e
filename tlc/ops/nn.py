"""Contractions and the softmax family: MatMul, Gemm, Einsum, Softmax, LogSoftmax, Hardmax.

Convolutions live in ``conv``, pools in ``pool``, normalisations in ``norm``. Contractions multiply in the input
dtype (float32 stays float32, accumulated by BLAS as onnxruntime's MLAS does).
"""

from __future__ import annotations

import re

import numpy as np

from ..ir.graph import Node
from ..ir.types import Dim, TensorType
from . import expr as E
from .infer import broadcast_dims, broadcast_shapes, normalize_axis
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register
from .rowform import RowBuilder, check_last_axis, row_input

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


def _matmul_infer(ctx: InferContext) -> list[TensorType]:
    a, b = ctx.type(0), ctx.type(1)
    if a.dtype != b.dtype:
        ctx.fail(f"input dtypes differ: {a.dtype} and {b.dtype}")
    if a.shape is None or b.shape is None:
        return [TensorType(a.dtype, None)]
    sa, sb = list(a.shape), list(b.shape)
    if not sa or not sb:
        ctx.fail("MatMul inputs must have rank >= 1")
    squeeze_a, squeeze_b = len(sa) == 1, len(sb) == 1
    if squeeze_a:
        sa = [1] + sa
    if squeeze_b:
        sb = sb + [1]
    k1, k2 = sa[-1], sb[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(f"inner dims differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    out = list(batch) + [sa[-2], sb[-1]]
    if squeeze_a:
        out.pop(-2)
    if squeeze_b:
        out.pop(-1)
    return [TensorType(a.dtype, tuple(out))]


register(OpDef(name="MatMul", infer=_matmul_infer, reference=np.matmul, inputs=(2, 2),
               traits=PURE | {Trait.CONTRACTION}, cost=2, doc="numpy-style matrix product with batch broadcasting."))


# ---------------------------------------------------------------------------- Gemm
def _gemm_infer(ctx: InferContext) -> list[TensorType]:
    a, b = ctx.type(0), ctx.type(1)
    for i in range(1, ctx.num_inputs):
        if ctx.has_input(i) and ctx.type(i).dtype != a.dtype:
            ctx.fail(f"input {i} has dtype {ctx.type(i).dtype}, expected {a.dtype} like A")
    for name, t in (("A", a), ("B", b)):
        if t.rank is not None and t.rank != 2:
            ctx.fail(f"{name} must be a matrix, got {t}")
    sa = a.shape or (None, None)
    sb = b.shape or (None, None)
    m, k1 = sa[::-1] if ctx.attrs["transA"] else sa
    k2, n = sb[::-1] if ctx.attrs["transB"] else sb
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(f"inner dims differ: A {a} (transA={ctx.attrs['transA']}) and B {b} "
                 f"(transB={ctx.attrs['transB']}) give K = {k1} and {k2}")
    if ctx.has_input(2) and ctx.type(2).shape is not None:
        c = ctx.type(2).shape
        ok = len(c) <= 2 and all(not isinstance(d, int) or not isinstance(want, int) or d in (1, want)
                                 for d, want in zip(c[::-1], (n, m)))
        if not ok:
            ctx.fail(f"C {ctx.type(2)} does not broadcast to the output [{m}, {n}]")
    return [TensorType(a.dtype, (m, n))]


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *, alpha: float, beta: float, transA: int,
         transB: int) -> np.ndarray:
    """alpha * A' @ B' + beta * C, with C broadcast to the output."""
    y = np.matmul(a.T if transA else a, b.T if transB else b)
    if c is not None and np.broadcast_shapes(y.shape, c.shape) != y.shape:  # one way only, as inference says
        raise ValueError(f"C of shape {list(c.shape)} does not broadcast to the product's {list(y.shape)}")
    if alpha != 1.0:
        y = y * np.asarray(alpha, y.dtype if y.dtype.kind == "f" else np.float64)
    if c is not None and beta != 0.0:
        y = y + (c if beta == 1.0 else c * np.asarray(beta, c.dtype if c.dtype.kind == "f" else np.float64))
    return np.asarray(y).astype(a.dtype, copy=False)


register(OpDef(name="Gemm", infer=_gemm_infer, reference=gemm, inputs=(2, 3),
               attrs={"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0), "transA": Attr("int", 0),
                      "transB": Attr("int", 0)},
               traits=PURE | {Trait.CONTRACTION}, cost=2, bias=(2, None),
               doc="General matrix multiply alpha * A' @ B' + beta * C (C broadcast)."))


# ---------------------------------------------------------------------------- Einsum
_TERM = re.compile(r"^[A-Za-z]*(\.\.\.)?[A-Za-z]*$")


def parse_einsum(equation: str, num_inputs: int) -> tuple[list[str], str | None]:
    """The input terms and the explicit output term (None when implicit); ValueError when malformed."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != num_inputs:
        raise ValueError(f"equation {equation!r} has {len(terms)} input terms for {num_inputs} inputs")
    for term in terms + ([rhs] if arrow else []):
        if not _TERM.match(term):
            raise ValueError(f"equation {equation!r}: term {term!r} is not letters with at most one '...'")
    return terms, (rhs if arrow else None)


def _einsum_infer(ctx: InferContext) -> list[TensorType]:
    types = [ctx.type(i) for i in range(ctx.num_inputs)]
    if any(t.dtype != types[0].dtype for t in types):
        ctx.fail(f"inputs have different dtypes: {', '.join(t.dtype for t in types)}")
    try:
        terms, out_term = parse_einsum(ctx.attrs["equation"], len(types))
    except ValueError as exc:
        ctx.fail(str(exc))
    if any(t.shape is None for t in types):
        if out_term is None or "..." in out_term:
            return [TensorType(types[0].dtype, None)]
    letters: dict[str, Dim] = {}
    ellipses: list[tuple[Dim, ...]] = []
    for term, t in zip(terms, types):
        if t.shape is None:
            continue
        named = term.replace("...", "")
        if len(named) > t.rank or ("..." not in term and len(named) != t.rank):
            ctx.fail(f"term {term!r} does not fit input {t}")
        cut = term.find("...")
        n_ell = t.rank - len(named)
        dims = list(t.shape)
        if cut >= 0:
            ellipses.append(tuple(dims[cut:cut + n_ell]))
            dims = dims[:cut] + dims[cut + n_ell:]
        for letter, d in zip(named, dims):
            try:
                letters[letter] = broadcast_dims(letters[letter], d) if letter in letters else d
            except Exception:
                ctx.fail(f"label {letter!r} has sizes {letters[letter]} and {d}")
    ell = broadcast_shapes(*ellipses) if ellipses else ()
    if out_term is None:
        counts = "".join(terms).replace("...", "")
        out_term = ("..." if ellipses else "") + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    shape: list[Dim] = []
    for part in re.split(r"(\.\.\.)", out_term):
        shape += list(ell) if part == "..." else [letters.get(c) for c in part]
    return [TensorType(types[0].dtype, tuple(shape))]


def einsum(*inputs: np.ndarray, equation: str) -> np.ndarray:
    eq = equation.replace(" ", "")
    return np.asarray(np.einsum(eq, *inputs, optimize=len(inputs) > 1)).astype(inputs[0].dtype, copy=False)


register(OpDef(name="Einsum", infer=_einsum_infer, reference=einsum, inputs=(1, None),
               attrs={"equation": Attr("string", REQUIRED)}, traits=PURE | {Trait.CONTRACTION}, cost=2,
               doc="Einstein summation over labelled axes (numpy.einsum semantics)."))


# ---------------------------------------------------------------------------- softmax family
def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # a row of -inf (a fully masked attention row) gives NaN, as in ORT
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype, copy=False)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(x.dtype, copy=False)


def hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    if x.size == 0:
        return x.copy()
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - 1 - axis % x.ndim))
    return (positions == first).astype(x.dtype)


def _softmax_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.rank is not None:
        normalize_axis(ctx.attrs["axis"], t.rank, ctx)
    return [t]


def _softmax_parts(b: RowBuilder, node: Node, attrs: dict) -> tuple[str, str, str, str]:
    """(x - max, exp(x - max), sum of it, dtype) for the row."""
    x, dtype, rank = row_input(b, node, True)
    check_last_axis(b, node, [attrs["axis"]], rank)
    peak = b.add_reduce(x, "max")
    shifted = b.add_op(E.arg(0) - E.arg(1), [x, peak], dtype)
    e = b.add_op(E.exp(E.arg(0)), [shifted], dtype)
    return shifted, e, b.add_reduce(e, "sum"), dtype


def _softmax_row(b: RowBuilder, node: Node, attrs: dict) -> list[str]:
    """exp(x - max) times the reciprocal of the row's sum, once a row (as the attention kernel and onnxruntime
    do): a multiply an element where a divide was (ViT-Tiny's 3 x 197 x 197 scores, one core: 43 -> 40 us); within
    1 ulp of the divide, and safe, the sum being at least 1 (the max's own exp(0))."""
    _, e, total, dtype = _softmax_parts(b, node, attrs)
    return [b.add_op(E.arg(0) * E.arg(1), [e, b.add_op(1.0 / E.arg(0), [total], dtype)], dtype)]


def _log_softmax_row(b: RowBuilder, node: Node, attrs: dict) -> list[str]:
    shifted, _, total, dtype = _softmax_parts(b, node, attrs)
    return [b.add_op(E.arg(0) - E.log(E.arg(1)), [shifted, total], dtype)]


register(OpDef(name="Softmax", infer=_softmax_infer, reference=lambda x, *, axis: softmax(x, axis),
               attrs={"axis": Attr("int", -1)}, traits=PURE | {Trait.REDUCTION, Trait.ROW_REDUCIBLE}, cost=12,
               row_form=_softmax_row,
               doc="exp(x - max) / sum(exp(x - max)) along `axis`."))
register(OpDef(name="LogSoftmax", infer=_softmax_infer, reference=lambda x, *, axis: log_softmax(x, axis),
               attrs={"axis": Attr("int", -1)}, traits=PURE | {Trait.REDUCTION, Trait.ROW_REDUCIBLE}, cost=12,
               row_form=_log_softmax_row,
               doc="log(softmax(x)) along `axis`, computed as x - max - log(sum(exp(x - max)))."))
register(OpDef(name="Hardmax", infer=_softmax_infer, reference=lambda x, *, axis: hardmax(x, axis),
               attrs={"axis": Attr("int", -1)}, traits=PURE | {Trait.REDUCTION}, cost=2,
               doc="One-hot of the first maximum along `axis`."))
