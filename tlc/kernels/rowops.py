"""Row forms of last-axis reductions, for ``"reduction"`` groups: each op becomes accumulations over the row
(sum, max, min) and elementwise steps built from ``tlc.ops.expr``, which the renderers draw like any other.

NOTE: the registry declares which ops have a row form (``Trait.ROW_REDUCIBLE``, what the fuse pass asks); the
decompositions live here, keyed by op, and a test checks that every op with the trait has one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.graph import Node
from ..ir.types import FLOAT_DTYPES
from ..ops import expr as E
from .plan import PlanBuilder

X, Y, Z = E.arg(0), E.arg(1), E.arg(2)


def expand_row_op(b: PlanBuilder, node: Node, opdef) -> list[str]:
    """Append the row form of ``node`` to the plan; returns the variable of each output."""
    recipe = _RECIPES.get((node.domain, node.op))
    if recipe is None:
        b.fail(node, "no row form for this op (supported: " + ", ".join(sorted(op for _, op in _RECIPES)) + ")")
    return recipe(b, node, opdef.resolved_attrs(node))


def _data(b: PlanBuilder, node: Node, float_only: bool) -> tuple[str, str, int]:
    """The variable, dtype and rank of input 0 (the rows)."""
    value = b.body.inputs_of(node)[0]
    if value is None or value not in b.var_of:
        b.fail(node, "input 0 is not a computed value")
    t = b.type_of(value)
    if not t.shape:
        b.fail(node, "a row reduction needs an input of rank >= 1")
    if float_only and t.dtype not in FLOAT_DTYPES:
        b.fail(node, f"needs a float input, got {t.dtype}")
    return b.var_of[value], t.dtype, len(t.shape)


def _check_last_axis(b: PlanBuilder, node: Node, axes: list[int], rank: int) -> None:
    if sorted({a % rank for a in axes}) != [rank - 1]:
        b.fail(
            node,
            f"reduces axes {axes}; only the last axis ({rank - 1} or -1) of a rank-{rank} input is "
            "supported in a row kernel",
        )


def _reduce_axes(b: PlanBuilder, node: Node, attrs: dict, rank: int) -> None:
    inputs = b.body.inputs_of(node)
    if len(inputs) > 1 and inputs[1] is not None:
        axes = b.body.const_value(inputs[1])
        if axes is None:
            b.fail(node, "the axes input is not a constant")
        axes = [int(a) for a in np.asarray(axes).ravel()]
    else:
        axes = [] if attrs.get("noop_with_empty_axes") else list(range(rank))
    if not axes:
        b.fail(node, "reduces no axis (noop_with_empty_axes)")
    _check_last_axis(b, node, axes, rank)
    if not attrs.get("keepdims", 1):
        b.fail(node, "keepdims=0; row kernels keep the reduced axis (keepdims=1)")


def _reduction(
    accumulate: str,
    *,
    square: bool = False,
    pre: Callable[[E.Expr], E.Expr] | None = None,
    post: Callable[[E.Expr, E.Expr], E.Expr] | None = None,
    float_only: bool = False,
):
    """ReduceSum/Max/Min/Mean/SumSquare/L2 over the last axis: optional square, accumulate, optional post."""

    def recipe(b: PlanBuilder, node: Node, attrs: dict) -> list[str]:
        x, dtype, rank = _data(b, node, float_only)
        _reduce_axes(b, node, attrs, rank)
        src = b.add_op(X * X, [x], dtype) if square else b.add_op(pre(X), [x], dtype) if pre else x
        acc = b.add_reduce(src, accumulate)
        if post is None:
            return [acc]
        return [b.add_op(post(X, Y), [acc, b.row_length(dtype)], dtype)]

    return recipe


def _softmax_parts(b: PlanBuilder, node: Node, attrs: dict) -> tuple[str, str, str, str]:
    """(x - max, exp(x - max), sum of it, dtype) for the row."""
    x, dtype, rank = _data(b, node, True)
    _check_last_axis(b, node, [attrs["axis"]], rank)
    peak = b.add_reduce(x, "max")
    shifted = b.add_op(X - Y, [x, peak], dtype)
    e = b.add_op(E.exp(X), [shifted], dtype)
    return shifted, e, b.add_reduce(e, "sum"), dtype


def _softmax(b: PlanBuilder, node: Node, attrs: dict) -> list[str]:
    _, e, total, dtype = _softmax_parts(b, node, attrs)
    return [b.add_op(X / Y, [e, total], dtype)]


def _log_softmax(b: PlanBuilder, node: Node, attrs: dict) -> list[str]:
    shifted, _, total, dtype = _softmax_parts(b, node, attrs)
    return [b.add_op(X - E.log(Y), [shifted, total], dtype)]


def _layer_norm(b: PlanBuilder, node: Node, attrs: dict) -> list[str]:
    """Y = (x - mean) * InvStdDev * scale + bias, with the variance from a second pass over x - mean."""
    x, dtype, rank = _data(b, node, True)
    _check_last_axis(b, node, [attrs["axis"]], rank)
    inputs = b.body.inputs_of(node)
    scale = b.var_of[inputs[1]]
    bias = b.var_of[inputs[2]] if len(inputs) > 2 and inputs[2] is not None else None
    length = b.row_length(dtype)
    mean = b.add_op(X / Y, [b.add_reduce(x, "sum"), length], dtype)
    centered = b.add_op(X - Y, [x, mean], dtype)
    var = b.add_op(X / Y, [b.add_reduce(b.add_op(X * X, [centered], dtype), "sum"), length], dtype)
    inv_std = b.add_op(1.0 / E.sqrt(X + float(attrs["epsilon"])), [var], dtype)
    if bias is None:
        y = b.add_op(X * Y * Z, [centered, inv_std, scale], dtype)
    else:
        y = b.add_op(X * Y * Z + E.arg(3), [centered, inv_std, scale, bias], dtype)
    return [y, mean, inv_std][: node.num_outputs]


def _log_sum_exp(b: PlanBuilder, node: Node, attrs: dict) -> list[str]:
    """max + log(sum(exp(x - max))), stable for large x; -inf rows give -inf (the max) plus log(n) of nan-free 1s."""
    x, dtype, rank = _data(b, node, True)
    _reduce_axes(b, node, attrs, rank)
    peak = b.add_reduce(x, "max")
    total = b.add_reduce(b.add_op(E.exp(X - Y), [x, peak], dtype), "sum")
    return [b.add_op(Y + E.log(X), [total, peak], dtype)]


def _mean(s: E.Expr, n: E.Expr) -> E.Expr:
    return s / n


def _l2(s: E.Expr, n: E.Expr) -> E.Expr:
    return E.sqrt(s)


_RECIPES = {
    ("", "ReduceSum"): _reduction("sum"),
    ("", "ReduceMax"): _reduction("max"),
    ("", "ReduceMin"): _reduction("min"),
    ("", "ReduceMean"): _reduction("sum", post=_mean, float_only=True),
    ("", "ReduceSumSquare"): _reduction("sum", square=True),
    ("", "ReduceL2"): _reduction("sum", square=True, post=_l2, float_only=True),
    ("", "ReduceL1"): _reduction("sum", pre=E.absolute),
    ("", "ReduceLogSum"): _reduction("sum", post=lambda s, n: E.log(s), float_only=True),
    ("", "ReduceLogSumExp"): _log_sum_exp,
    ("", "Softmax"): _softmax,
    ("", "LogSoftmax"): _log_softmax,
    ("", "LayerNormalization"): _layer_norm,
}
