"""Inference-mode BatchNormalization folded away (-O2).

``conv-bn``: Conv(x, W, b) -> BatchNormalization(scale, bias, mean, var, eps) becomes one Conv with
``W' = W * s`` per output channel and ``b' = (b - mean) * s + bias``, where ``s = scale / sqrt(var + eps)``.
``bn-to-mul-add``: a BatchNormalization left alone becomes ``x * s + (bias - mean * s)`` with ``s`` and the shift
shaped [C, 1, ...] to broadcast over channel axis 1.

The folded constants are computed in float64 and rounded once to the weights' dtype, so results agree with the
unfolded graph to a few ulps, not bit for bit: the standard inference fold that onnxruntime and onnxsim do at
their basic level. Every BN parameter and the conv weights must be constants, and BN must be in inference mode
(``training_mode`` 0, one output).
"""

from __future__ import annotations

import numpy as np

from ..rewrite import FLOAT, Builder, Const, Match, Op, Opt, Rule, RuleSet, Var

_PARAMS = ("scale", "bias", "mean", "var")


def _bn(x) -> Op:
    return Op("BatchNormalization", x, *(Const(name=p) for p in _PARAMS), name="bn",
              attrs={"training_mode": lambda v: not v})


def _scale_shift(m: Match) -> tuple[np.ndarray, np.ndarray]:
    """``s`` and ``bias - mean * s`` in float64 (per channel)."""
    scale, bias, mean, var = (m.const(p).astype(np.float64).ravel() for p in _PARAMS)
    s = scale / np.sqrt(var + float(m.attrs("bn")["epsilon"]))
    return s, bias - mean * s


def _params_reason(m: Match, channels: int | str | None) -> str | None:
    if m.root.num_outputs != 1:
        return "BatchNormalization has its training outputs (running mean/var) connected"
    if not isinstance(channels, int):
        return f"the channel count is {channels!r}, not a known int"
    for p in _PARAMS:
        if m.const(p).size != channels:
            return f"{p} has {m.const(p).size} elements for {channels} channels"
    return None


def _conv_bn_check(m: Match) -> str | None:
    w = m.const("w")
    if w.dtype.kind != "f" or w.ndim < 3:
        return f"conv weights of dtype {w.dtype} and rank {w.ndim} are not foldable"
    return _params_reason(m, w.shape[0])


def _conv_bn_rewrite(m: Match, b: Builder):
    w = m.const("w")
    s, shift = _scale_shift(m)
    conv_bias = m.const("b")
    bias = shift if conv_bias is None else conv_bias.astype(np.float64).ravel() * s + shift
    w2 = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    conv = m.node("conv")
    return b.op("Conv", m["x"], b.constant(w2), b.constant(bias.astype(w.dtype)), **dict(conv.attrs))


def _bn_check(m: Match) -> str | None:
    shape = m.graph.shape_of(m["x"])
    if shape is None or len(shape) < 2:
        return f"x has shape {shape}, the channel axis 1 is not known"
    return _params_reason(m, shape[1])


def _bn_rewrite(m: Match, b: Builder):
    rank = len(m.graph.shape_of(m["x"]))
    s, shift = _scale_shift(m)
    channel = (-1,) + (1,) * (rank - 2)
    scaled = b.op("Mul", m["x"], b.constant(s.reshape(channel), like=m["x"]))
    return b.op("Add", scaled, b.constant(shift.reshape(channel), like=m["x"]))


RULES = RuleSet("batchnorm", (
    Rule("conv-bn", _bn(Op("Conv", Var("x", dtype=FLOAT), Const(name="w"), Opt(Const(name="b")), name="conv")),
         _conv_bn_rewrite, _conv_bn_check, min_level=2, produces=("Conv",),
         description="Conv followed by inference BatchNormalization -> one Conv with folded weights and bias"),
    Rule("bn-to-mul-add", _bn(Var("x", dtype=FLOAT)), _bn_rewrite, _bn_check, min_level=2,
         description="inference BatchNormalization -> x * scale' + shift' (constants over channel axis 1)"),
), "BatchNormalization folding")
