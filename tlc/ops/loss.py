"""Loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both read scores of shape (N, C, d1, ..., dk) with the classes on axis 1 and integer labels of shape
(N, d1, ..., dk). The loss of one sample is ``-log_prob[n, label, d...] * weight[label]`` (weight 1 without the
optional per-class weight input), and 0 where the label equals ``ignore_index``. Reduction ``none`` keeps the
per-sample losses (the labels' shape); ``sum`` and ``mean`` give a scalar, the mean dividing by the sum of the
weights applied (with no weight input: the number of samples not ignored), as the ONNX function bodies do. A
label outside [0, C) that is not ``ignore_index`` is an execution error, never a silent clamp.

Arithmetic runs in float32 for float16 scores (softmax, products and sums), in the scores' type otherwise; the
results are rounded to the scores' type once.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType, format_shape
from . import dims
from .nn import log_softmax
from .norm import accumulate_dtype
from .registry import Attr, InferContext, OpDef, Trait, register

LOSS_TRAITS = frozenset({Trait.PURE, Trait.FOLDABLE, Trait.REDUCTION, Trait.LAYOUT_SENSITIVE})
REDUCTIONS = ("none", "sum", "mean")
LABEL_DTYPES = ("int32", "int64")
LOSS_ATTRS = {"ignore_index": Attr("int"), "reduction": Attr("string", "mean")}


# ---------------------------------------------------------------------------- inference
def _loss_infer(ctx: InferContext, max_outputs: int) -> list[TensorType]:
    """Types of (loss[, log_prob]): checks scores, labels and weight against each other, dims where known."""
    op = ctx.node.op
    if ctx.node.num_outputs > max_outputs:
        ctx.fail(f"{ctx.node.num_outputs} outputs; {op} has at most {max_outputs}")
    reduction = ctx.attrs["reduction"]
    if reduction not in REDUCTIONS:
        ctx.fail(f"reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    scores, labels = ctx.type(0), ctx.type(1)
    if scores.dtype not in FLOAT_DTYPES:
        ctx.fail(f"scores (input 0) have dtype {scores.dtype}; {op} takes {', '.join(sorted(FLOAT_DTYPES))}")
    if labels.dtype not in LABEL_DTYPES:
        ctx.fail(f"labels (input 1) have dtype {labels.dtype}; {op} takes {' or '.join(LABEL_DTYPES)}")
    if scores.rank is not None and scores.rank < 2:
        ctx.fail(f"scores {format_shape(scores.shape)} must have rank >= 2 (N, C, d1, ..., dk)")
    classes = None if scores.shape is None else scores.shape[1]
    sample_shape = _sample_shape(ctx, scores.shape, labels.shape)
    if ctx.has_input(2):
        weight = ctx.type(2)
        if weight.dtype != scores.dtype:
            ctx.fail(f"weight (input 2) has dtype {weight.dtype}, expected the scores' {scores.dtype}")
        if weight.shape is not None:
            if len(weight.shape) != 1:
                ctx.fail(f"weight {format_shape(weight.shape)} must be 1-D (one value per class)")
            try:
                dims.merge(weight.shape[0], classes)
            except ValueError:
                ctx.fail(f"weight {format_shape(weight.shape)} has {weight.shape[0]} values for the {classes} "
                         f"classes of scores {format_shape(scores.shape)}")
    loss = TensorType(scores.dtype, sample_shape if reduction == "none" else ())
    return [loss, scores][: ctx.node.num_outputs]


def _sample_shape(ctx: InferContext, scores, labels) -> tuple | None:
    """(N, d1, ..., dk): the labels' shape, checked against the scores' shape without its class axis."""
    if scores is None:
        return labels
    expected = (scores[0],) + tuple(scores[2:])
    if labels is None:
        return expected
    if len(labels) != len(expected):
        ctx.fail(f"labels {format_shape(labels)} must have rank {len(expected)}, the rank of scores "
                 f"{format_shape(scores)} without the class axis")
    try:
        return tuple(dims.merge(a, b) for a, b in zip(labels, expected))
    except ValueError:
        ctx.fail(f"labels {format_shape(labels)} do not match scores {format_shape(scores)} without the class "
                 f"axis, {format_shape(expected)}")


def _nll_infer(ctx: InferContext) -> list[TensorType]:
    return _loss_infer(ctx, max_outputs=1)


def _sce_infer(ctx: InferContext) -> list[TensorType]:
    return _loss_infer(ctx, max_outputs=2)


# ---------------------------------------------------------------------------- reference
def _reduce(log_prob: np.ndarray, labels: np.ndarray, weight: np.ndarray | None, ignore_index: int | None,
            reduction: str, dtype: np.dtype) -> np.ndarray:
    """The (reduced) loss from log-probabilities in the accumulation type; the result in ``dtype``."""
    classes = log_prob.shape[1]
    expected = log_prob.shape[:1] + log_prob.shape[2:]
    if weight is not None and weight.shape != (classes,):   # as inference says (fuzz seed 906392)
        raise ValueError(f"weight {list(weight.shape)} does not hold one value per class of scores "
                         f"{list(log_prob.shape)}")
    if labels.shape != expected:  # NOTE: never broadcast (inference refuses it at known shapes)
        raise ValueError(f"labels {list(labels.shape)} do not match scores {list(log_prob.shape)} without the class "
                         f"axis, {list(expected)}")
    labels = labels.astype(np.int64)
    keep = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    safe = np.where(keep, labels, 0)
    bad = (safe < 0) | (safe >= classes)
    if bad.any():
        first = int(safe[bad].ravel()[0])
        ignored = " (no ignore_index is set)" if ignore_index is None else f" or the ignore_index {ignore_index}"
        raise ValueError(f"label {first} is out of range: expected a class in [0, {classes}){ignored}")
    picked = np.take_along_axis(log_prob, np.expand_dims(safe, 1), axis=1).squeeze(1)
    if weight is None:
        applied = keep.astype(log_prob.dtype)
    else:
        applied = np.where(keep, weight.astype(log_prob.dtype)[safe], 0).astype(log_prob.dtype)
    with np.errstate(invalid="ignore"):  # an ignored sample is 0 even where its stand-in class has -inf
        loss = np.where(keep, -picked * applied, 0).astype(log_prob.dtype, copy=False)
    if reduction == "none":
        return loss.astype(dtype)
    total = loss.sum(dtype=log_prob.dtype)
    if reduction == "sum":
        return np.asarray(total, dtype)
    if reduction != "mean":
        raise ValueError(f"reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    with np.errstate(divide="ignore", invalid="ignore"):  # every sample ignored: 0 / 0 is NaN, as in the spec
        return np.asarray(total / applied.sum(dtype=log_prob.dtype), dtype)


def negative_log_likelihood_loss(scores, labels, weight=None, *, ignore_index: int | None,
                                 reduction: str) -> np.ndarray:
    """The loss of log-probabilities ``scores`` (N, C, d...) at ``labels`` (N, d...)."""
    acc = scores.astype(accumulate_dtype(scores.dtype), copy=False)
    return _reduce(acc, labels, weight, ignore_index, reduction, scores.dtype)


def softmax_cross_entropy_loss(scores, labels, weights=None, *, ignore_index: int | None,
                               reduction: str) -> list[np.ndarray]:
    """[loss, log_prob]: the negative log likelihood loss of log_softmax(scores) over the class axis."""
    log_prob = log_softmax(scores.astype(accumulate_dtype(scores.dtype), copy=False), axis=1)
    loss = _reduce(log_prob, labels, weights, ignore_index, reduction, scores.dtype)
    return [loss, log_prob.astype(scores.dtype, copy=False)]


register(OpDef(name="NegativeLogLikelihoodLoss", infer=_nll_infer, reference=negative_log_likelihood_loss,
               inputs=(2, 3), attrs=LOSS_ATTRS, traits=LOSS_TRAITS, cost=2,
               doc="-input[n, label, d...] * weight[label] per sample (0 at ignore_index), then none, sum or a "
                   "mean weighted by the applied weights."))
register(OpDef(name="SoftmaxCrossEntropyLoss", infer=_sce_infer, reference=softmax_cross_entropy_loss,
               inputs=(2, 3), attrs=LOSS_ATTRS, traits=LOSS_TRAITS, cost=14,
               doc="NegativeLogLikelihoodLoss of log_softmax(scores) over axis 1; also gives that log_prob."))
