"""Decomposed LayerNorm, as PyTorch exporters and hand-written models emit it, -> LayerNormalization (-O2).

    mean = ReduceMean(x, axes)            d = x - mean
    var  = ReduceMean(d^2 | d*d, axes)    y = d / Sqrt(var + eps)   (or Pow(var + eps, 0.5))
    out  = y * gamma + beta               (gamma and beta optional)

``axes`` must be the trailing axes of x (one axis: ``axis=-1``; k trailing axes: ``axis=-k``) in both
ReduceMeans, with keepdims; ``eps`` a one-element constant. gamma and beta must have the normalized shape
(x.shape[axis:]); constant ones that merely broadcast to it are expanded. Without gamma, a constant of ones
(static normalized shape) is the Scale. Three rules, largest first, so that the form with gamma and beta wins.

The replacement computes the same function with its own rounding: a recognition, checked with a tolerance.
"""

from __future__ import annotations

import numpy as np

from ..rewrite import FLOAT, Builder, Const, Match, OneOf, Op, Rule, RuleSet, Var
from .common import int_list, normalize, root_keeps_type, shapes_known_equal, unidirectional_broadcast_reason

_KEEP = {"keepdims": 1}


def _core() -> Op:
    x = Var("x", dtype=FLOAT)
    mean = Op("ReduceMean", x, Const(name="axes_mean"), name="mean", attrs=_KEEP)
    d = Op("Sub", x, mean, name="centered")
    square = OneOf(Op("Pow", d, Const(2.0, scalar=True)), Op("Mul", d, d))
    var = Op("ReduceMean", square, Const(name="axes_var"), name="var", attrs=_KEEP)
    var_eps = Op("Add", var, Const(name="eps", scalar=True))
    std = OneOf(Op("Sqrt", var_eps), Op("Pow", var_eps, Const(0.5, scalar=True)))
    return Op("Div", d, std, name="norm")


def _normalized_axes(m: Match) -> tuple[int, str | None]:
    """(k, reason): the number of trailing axes normalized, or a reason why the axes do not fit."""
    rank = m.type("x").rank
    if rank is None:
        return 0, "the rank of x is unknown"
    a1, a2 = normalize(int_list(m.const("axes_mean")), rank), normalize(int_list(m.const("axes_var")), rank)
    if a1 is None or a2 is None or sorted(set(a1)) != sorted(set(a2)):
        return 0, f"the two ReduceMeans reduce different axes: {int_list(m.const('axes_mean'))} and " \
                  f"{int_list(m.const('axes_var'))}"
    axes = sorted(set(a1))
    if not axes or axes != list(range(rank - len(axes), rank)):
        return 0, f"axes {axes} are not the trailing axes of a rank-{rank} x"
    return len(axes), None


def _param_reason(m: Match, name: str, norm_shape: tuple) -> str | None:
    if name not in m:
        return None
    ttype = m.type(name)
    if ttype is None or ttype.dtype != m.type("x").dtype:
        return f"{name} has type {ttype}, x has dtype {m.type('x').dtype}"
    if m.const(name) is not None and all(isinstance(d, int) for d in norm_shape):
        reason = unidirectional_broadcast_reason(ttype.shape, norm_shape)
        return None if reason is None else f"{name}: {reason}"
    if not shapes_known_equal(ttype.shape, norm_shape):
        return f"{name} has shape {ttype}, the normalized shape is {list(norm_shape)}"
    return None


def _check(m: Match) -> str | None:
    k, reason = _normalized_axes(m)
    if reason:
        return reason
    reason = root_keeps_type(m)
    if reason:
        return f"gamma or beta broadcast x: {reason}"
    norm_shape = tuple(m.type("x").shape[-k:])
    if "gamma" not in m and not all(isinstance(d, int) for d in norm_shape):
        return f"no gamma and normalized shape {list(norm_shape)} is not static (cannot build a Scale of ones)"
    return _param_reason(m, "gamma", norm_shape) or _param_reason(m, "beta", norm_shape)


def _param(m: Match, b: Builder, name: str, norm_shape: tuple):
    array = m.const(name)
    if array is None or tuple(array.shape) == norm_shape:
        return m[name]
    return b.constant(np.broadcast_to(array, norm_shape).copy())


def _rewrite(m: Match, b: Builder):
    k, _ = _normalized_axes(m)
    x = m["x"]
    norm_shape = tuple(m.type("x").shape[-k:])
    scale = _param(m, b, "gamma", norm_shape) if "gamma" in m else b.constant(np.ones(norm_shape), like=x)
    bias = _param(m, b, "beta", norm_shape) if "beta" in m else None
    eps = float(np.asarray(m.const("eps")).reshape(()))
    return b.op("LayerNormalization", x, scale, bias, axis=-k, epsilon=eps, num_outputs=1)


def _rule(name: str, pattern: Op, description: str) -> Rule:
    return Rule(name, pattern, _rewrite, _check, min_level=2, produces=("LayerNormalization",),
                description=description)


RULES = RuleSet("layernorm", (
    _rule("layernorm-affine", Op("Add", Op("Mul", _core(), Var("gamma"), name="scaled"), Var("beta")),
          "decomposed LayerNorm * gamma + beta -> LayerNormalization(x, gamma, beta)"),
    _rule("layernorm-scale", Op("Mul", _core(), Var("gamma")),
          "decomposed LayerNorm * gamma -> LayerNormalization(x, gamma)"),
    _rule("layernorm", _core(), "decomposed LayerNorm -> LayerNormalization(x, ones)"),
), "decomposed LayerNorm recognition")
