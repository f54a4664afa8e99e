"""Reductions (opset 18+ form: ``axes`` is an optional second input) and ArgMax/ArgMin.

Reducing an empty set gives the ONNX identities: 0 for sums and norms, 1 for ReduceProd, -inf for ReduceMax,
ReduceLogSum and ReduceLogSumExp (the lowest value for integers), +inf for ReduceMin. Sums of float16 are
accumulated in float32; everything else in the input type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.graph import Node
from ..ir.types import TensorType
from . import expr as E
from .infer import normalize_axes, normalize_axis
from .registry import Attr, InferContext, OpDef, Trait, register
from .rowform import RowBuilder, RowForm, check_reduce_axes, row_input

REDUCE = frozenset({Trait.PURE, Trait.FOLDABLE, Trait.REDUCTION})
REDUCE_ATTRS = {"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)}


def reduce_axes(rank: int, axes: np.ndarray | None, noop_with_empty_axes: int) -> tuple[int, ...] | None:
    """The axes a reduction reduces; None means "no reduction" (empty axes with noop set)."""
    if axes is None or axes.size == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    return tuple(sorted(set(normalize_axes(axes.ravel().tolist(), rank))))


def _reduce_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.shape is None:
        return [t]
    if ctx.has_input(1) and ctx.const(1) is None:
        if ctx.attrs["keepdims"]:
            return [TensorType(t.dtype, (None,) * t.rank)]
        return [TensorType(t.dtype, None)]
    axes = reduce_axes(t.rank, ctx.const(1), ctx.attrs["noop_with_empty_axes"])
    if axes is None:
        return [t]
    if ctx.attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    else:
        shape = tuple(d for i, d in enumerate(t.shape) if i not in axes)
    return [TensorType(t.dtype, shape)]


Reducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def reduction(name: str, fn: Reducer, cost: float = 1.0, doc: str = "", row_form: RowForm | None = None) -> None:
    """Register an opset-18 style reduction computed by ``fn(x, axes, keepdims)``; ``row_form``: how a row kernel
    computes it over the last axis (then it is ``Trait.ROW_REDUCIBLE``)."""

    def ref(x, axes=None, *, keepdims, noop_with_empty_axes):
        ax = reduce_axes(x.ndim, axes, noop_with_empty_axes)
        if ax is None:  # NOTE: no axis is reduced, but the op's elementwise part still applies (ReduceL2: |x|,
            ax = ()     # ReduceSumSquare: x * x), as onnxruntime and ONNX's reference evaluator compute it
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.asarray(fn(x, ax, bool(keepdims))).astype(x.dtype, copy=False)

    register(OpDef(name=name, infer=_reduce_infer, reference=ref, inputs=(1, 2), attrs=dict(REDUCE_ATTRS),
                   traits=REDUCE | {Trait.ROW_REDUCIBLE} if row_form else REDUCE, cost=cost, doc=doc,
                   row_form=row_form))


# ---------------------------------------------------------------------------- row forms (tlc.ops.rowform)
X, Y = E.arg(0), E.arg(1)


def accumulate(
    op: str,
    *,
    square: bool = False,
    pre: Callable[[E.Expr], E.Expr] | None = None,
    post: Callable[[E.Expr, E.Expr], E.Expr] | None = None,
    float_only: bool = False,
) -> RowForm:
    """The row form of a reduction that is one ``op`` ("sum", "max", "min") accumulation over the row, with an
    optional square or ``pre`` step before it and ``post(accumulated, row length)`` after it."""

    def row_form(b: RowBuilder, node: Node, attrs: dict) -> list[str]:
        x, dtype, rank = row_input(b, node, float_only)
        check_reduce_axes(b, node, attrs, rank)
        src = b.add_op(X * X, [x], dtype) if square else b.add_op(pre(X), [x], dtype) if pre else x
        acc = b.add_reduce(src, op)
        if post is None:
            return [acc]
        return [b.add_op(post(X, Y), [acc, b.row_length(dtype)], dtype)]

    return row_form


def _log_sum_exp_row(b: RowBuilder, node: Node, attrs: dict) -> list[str]:
    """max + log(sum(exp(x - max))), stable for large x; -inf rows give -inf (the max) plus log(n) of nan-free 1s."""
    x, dtype, rank = row_input(b, node, True)
    check_reduce_axes(b, node, attrs, rank)
    peak = b.add_reduce(x, "max")
    total = b.add_reduce(b.add_op(E.exp(X - Y), [x, peak], dtype), "sum")
    return [b.add_op(Y + E.log(X), [total, peak], dtype)]


def _mean(s: E.Expr, n: E.Expr) -> E.Expr:
    return s / n


def _l2(s: E.Expr, n: E.Expr) -> E.Expr:
    return E.sqrt(s)


def _log(s: E.Expr, n: E.Expr) -> E.Expr:
    return E.log(s)


def _acc(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _lowest(dtype: np.dtype):
    return False if dtype.kind == "b" else (np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf)


def _highest(dtype: np.dtype):
    return True if dtype.kind == "b" else (np.iinfo(dtype).max if dtype.kind in "iu" else np.inf)


def _max(x, ax, keep):
    return np.max(x, axis=ax, keepdims=keep, initial=_lowest(x.dtype)) if x.size == 0 else \
        np.max(x, axis=ax, keepdims=keep)


def _min(x, ax, keep):
    return np.min(x, axis=ax, keepdims=keep, initial=_highest(x.dtype)) if x.size == 0 else \
        np.min(x, axis=ax, keepdims=keep)


def _log_sum_exp(x, ax, keep):
    """log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the (finite) maximum."""
    a = _acc(x)
    m = np.max(a, axis=ax, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(a - m), axis=ax, keepdims=True)) + m
    return out if keep else np.squeeze(out, axis=ax)


reduction("ReduceSum", lambda x, ax, keep: np.sum(_acc(x), axis=ax, keepdims=keep), doc="Sum over axes.",
          row_form=accumulate("sum"))
reduction("ReduceMean", lambda x, ax, keep: np.mean(_acc(x), axis=ax, keepdims=keep), doc="Mean over axes.",
          row_form=accumulate("sum", post=_mean, float_only=True))
reduction("ReduceMax", _max, doc="Maximum over axes (-inf, or the lowest value, for an empty set).",
          row_form=accumulate("max"))
reduction("ReduceMin", _min, doc="Minimum over axes (+inf, or the highest value, for an empty set).",
          row_form=accumulate("min"))
reduction("ReduceProd", lambda x, ax, keep: np.prod(_acc(x), axis=ax, keepdims=keep), doc="Product over axes.")
reduction("ReduceL1", lambda x, ax, keep: np.sum(np.abs(_acc(x)), axis=ax, keepdims=keep),
          doc="Sum of absolute values over axes.", row_form=accumulate("sum", pre=E.absolute))
reduction("ReduceL2", lambda x, ax, keep: np.sqrt(np.sum(np.square(_acc(x)), axis=ax, keepdims=keep)), cost=2,
          doc="Euclidean norm over axes.", row_form=accumulate("sum", square=True, post=_l2, float_only=True))
reduction("ReduceSumSquare", lambda x, ax, keep: np.sum(np.square(_acc(x)), axis=ax, keepdims=keep),
          doc="Sum of squares over axes.", row_form=accumulate("sum", square=True))
reduction("ReduceLogSum", lambda x, ax, keep: np.log(np.sum(_acc(x), axis=ax, keepdims=keep)), cost=2,
          doc="log of the sum over axes.", row_form=accumulate("sum", post=_log, float_only=True))
reduction("ReduceLogSumExp", _log_sum_exp, cost=8, doc="log(sum(exp(x))) over axes, computed stably.",
          row_form=_log_sum_exp_row)


# ---------------------------------------------------------------------------- ArgMax / ArgMin
def _arg_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.shape is None:
        return [TensorType("int64", None)]
    axis = normalize_axis(ctx.attrs["axis"], t.rank, ctx)
    if ctx.attrs["keepdims"]:
        shape = tuple(1 if i == axis else d for i, d in enumerate(t.shape))
    else:
        shape = tuple(d for i, d in enumerate(t.shape) if i != axis)
    return [TensorType("int64", shape)]


def _arg_reduce(pick: Callable[..., np.ndarray]):
    def ref(x: np.ndarray, *, axis: int, keepdims: int, select_last_index: int) -> np.ndarray:
        axis = axis % x.ndim
        if select_last_index:  # search the reversed axis, then map the position back
            idx = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
        else:
            idx = pick(x, axis=axis)
        idx = np.asarray(idx, dtype=np.int64)
        return np.expand_dims(idx, axis) if keepdims else idx

    return ref


_ARG_ATTRS = {"axis": Attr("int", 0), "keepdims": Attr("int", 1), "select_last_index": Attr("int", 0)}
register(OpDef(name="ArgMax", infer=_arg_infer, reference=_arg_reduce(np.argmax), attrs=dict(_ARG_ATTRS),
               traits=REDUCE, doc="Index (int64) of the maximum along `axis` (first, or last with select_last_index)."))
register(OpDef(name="ArgMin", infer=_arg_infer, reference=_arg_reduce(np.argmin), attrs=dict(_ARG_ATTRS),
               traits=REDUCE, doc="Index (int64) of the minimum along `axis` (first, or last with select_last_index)."))
