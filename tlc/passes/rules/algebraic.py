"""Algebraic identities exact in floating point, and layout ops that do nothing (all at -O1).

Exact means bit-identical results for every input, nan, inf and signed zeros included:
``x*1``, ``x/1``, ``Neg(Neg x)``, ``Identity``, inference ``Dropout`` (``FORWARDING``, which dce runs too), and
layout ops whose output is their input (the transpose rules are ``rules/transpose.py``'s).
Identities on broadcasting ops fire only when the output has exactly x's type (``x + zeros(4, 8)`` with x of
shape [8] keeps its Add).

Signed zero, decided as LLVM and onnxruntime do: ``x + (+0.0)`` maps -0.0 to +0.0, so ``x + 0 -> x`` is exact
only when the zero is -0.0 (``x + (-0.0) == x`` for every x) and ``x - 0 -> x`` only when the zero is +0.0;
the other two forms need ``fast_math`` (no signed zeros). Integer zeros are exact either way.
``x*0 -> 0`` is never done: nan*0 is nan and -1*0 is -0.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Value
from ..rewrite import Builder, Const, Match, Op, Opt, Rule, RuleSet, Var
from . import transpose
from .common import SLICE_TO_END, int_list, is_int, normalize, root_keeps_type, shapes_known_equal

X = Var("x")


def _x(m: Match, b: Builder):
    return m["x"]


def _zero_sign_reason(m: Match, negative: bool) -> str | None:
    reason = root_keeps_type(m)
    if reason or is_int(m.type("x")):
        return reason
    signs = np.signbit(m.const("zero"))
    if negative and not signs.all():
        return "x + (+0.0) maps -0.0 to +0.0 (not exact; add-zero-nsz does it with fast_math)"
    if not negative and signs.any():
        return "x - (-0.0) maps -0.0 to +0.0 (not exact; sub-zero-nsz does it with fast_math)"
    return None


def _forward(m: Match, b: Builder) -> list[Value | None]:
    """x for the first output; nothing for the others (the checks made sure no one reads them)."""
    return [m["x"]] + [None] * (m.root.num_outputs - 1)


def _dropout_check(m: Match) -> str | None:
    if any(m.graph.num_uses(v) for v in m.root.outputs[1:]):
        return "the mask output is used"
    training = m.const("training")
    if "training" in m and (training is None or bool(np.asarray(training).any())):
        return "training_mode is not a constant false"
    return None


def _cast_check(m: Match) -> str | None:
    return root_keeps_type(m)


def _same_shape_check(m: Match) -> str | None:
    """Reshape/Expand that keep the shape: output type equals x's, every dim known (int or the same symbol)."""
    return root_keeps_type(m)


def _reshape_chain_check(m: Match) -> str | None:
    shape = int_list(m.const("shape"))
    if not m.attrs("outer")["allowzero"] and 0 in shape:
        return f"the outer target {shape} copies dims (0) from the inner Reshape's output"
    return None


def _reshape_chain_rewrite(m: Match, b: Builder):
    return b.op("Reshape", m["x"], m["shape"], allowzero=m.attrs("outer")["allowzero"])


def _axes_pair_check(m: Match, full_rank_of: str) -> str | None:
    """Unsqueeze and Squeeze on the same axes, each normalised against the rank with the axes present."""
    ttype = m.graph.type_of(m[full_rank_of])
    if ttype is None or ttype.rank is None:
        return "rank unknown"
    ua, sa = int_list(m.const("ua")), int_list(m.const("sa"))
    rank = ttype.rank
    nu, ns = normalize(ua, rank), normalize(sa, rank)
    if nu is None or ns is None or sorted(nu) != sorted(ns):
        return f"axes differ: Unsqueeze {ua}, Squeeze {sa}"
    return root_keeps_type(m)


def _slice_all_check(m: Match) -> str | None:
    shape = m.graph.shape_of(m["x"])
    if shape is None:
        return "rank unknown"
    starts, ends = int_list(m.const("starts")), int_list(m.const("ends"))
    axes = int_list(m.const("axes")) if "axes" in m else list(range(len(starts)))
    steps = int_list(m.const("steps")) if "steps" in m else [1] * len(starts)
    axes = normalize(axes, len(shape)) if axes is not None else None
    if axes is None or not len(starts) == len(ends) == len(axes) == len(steps):
        return "axes out of range or lengths differ"
    for axis, start, end, step in zip(axes, starts, ends, steps):
        dim = shape[axis]
        whole_start = start == 0 or (isinstance(dim, int) and start <= -dim)
        whole_end = end >= SLICE_TO_END or (isinstance(dim, int) and end >= dim)
        if step != 1 or not (whole_start and whole_end):
            return f"axis {axis} is sliced [{start}:{end}:{step}] of {dim}"
    return None


def _shape_kept(m: Match) -> str | None:
    ok = shapes_known_equal(m.graph.shape_of(m.root.output(0)), m.graph.shape_of(m["x"]))
    return None if ok else "the shape changes or is not known to be the same"


_ZERO = Const(0.0, "zero")

#: ops that merely pass their input on; dce bypasses them too, with these same rules
FORWARDING = RuleSet("forwarding", (
    Rule("identity", Op("Identity", X), _x, description="Identity(x) -> x"),
    Rule("dropout-inference", Op("Dropout", X, Opt(), Opt(Const(name="training"))), _forward, _dropout_check,
         description="Dropout(x) in inference mode, mask unused -> x"),
), "ops that pass their input on")

RULES = RuleSet("algebraic", (
    *FORWARDING.rules,
    Rule("neg-neg", Op("Neg", Op("Neg", X)), _x, description="Neg(Neg(x)) -> x"),
    Rule("mul-one", Op("Mul", X, Const(1.0)), _x, root_keeps_type, description="x * 1 -> x"),
    Rule("div-one", Op("Div", X, Const(1.0)), _x, root_keeps_type, description="x / 1 -> x"),
    Rule("add-zero", Op("Add", X, _ZERO), _x, lambda m: _zero_sign_reason(m, negative=True),
         description="x + (-0.0) -> x (exact); integer x + 0 -> x"),
    Rule("sub-zero", Op("Sub", X, _ZERO), _x, lambda m: _zero_sign_reason(m, negative=False),
         description="x - (+0.0) -> x (exact); integer x - 0 -> x"),
    Rule("add-zero-nsz", Op("Add", X, _ZERO), _x, root_keeps_type, fast_math=True,
         description="x + 0 -> x ignoring the sign of zero"),
    Rule("sub-zero-nsz", Op("Sub", X, _ZERO), _x, root_keeps_type, fast_math=True,
         description="x - 0 -> x ignoring the sign of zero"),
    Rule("cast-same-type", Op("Cast", X), _x, _cast_check, description="Cast(x) to x's own dtype -> x"),
    *transpose.RULES.rules,   # identity, cancel, compose: the same Rule objects the layout pass runs
    Rule("reshape-same-shape", Op("Reshape", X, Var()), _x, _same_shape_check,
         description="Reshape to x's own shape -> x"),
    Rule("reshape-reshape", Op("Reshape", Op("Reshape", X, Var(), shared=True), Const(name="shape"),
                               name="outer"),
         _reshape_chain_rewrite, _reshape_chain_check, description="Reshape(Reshape(x, s1), s2) -> Reshape(x, s2)"),
    Rule("expand-same-shape", Op("Expand", X, Var()), _x, _shape_kept, description="Expand to x's own shape -> x"),
    Rule("squeeze-unsqueeze", Op("Squeeze", Op("Unsqueeze", X, Const(name="ua"), name="inner", shared=True),
                                   Const(name="sa")),
         _x, lambda m: _axes_pair_check(m, "inner"), description="Squeeze(Unsqueeze(x, a), a) -> x"),
    Rule("unsqueeze-squeeze", Op("Unsqueeze", Op("Squeeze", X, Const(name="sa"), shared=True),
                                   Const(name="ua")),
         _x, lambda m: _axes_pair_check(m, "x"), description="Unsqueeze(Squeeze(x, a), a) -> x"),
    Rule("concat-single", Op("Concat", X), _x, description="Concat of one input -> x"),
    Rule("sum-single", Op("Sum", X), _x, root_keeps_type, description="Sum of one input -> x"),
    # (the residual adds of Caffe2's and some older exporters' ResNets: as an Add, the conv's epilogue takes it)
    Rule("sum-pair", Op("Sum", X, Var("y")), lambda m, b: b.op("Add", m["x"], m["y"]),
         description="Sum(x, y) -> Add(x, y): the same sum, in the op every later pass and kernel knows"),
    Rule("slice-everything", Op("Slice", X, Const(name="starts"), Const(name="ends"), Opt(Const(name="axes")),
                                Opt(Const(name="steps"))),
         _x, _slice_all_check, description="Slice that takes every element -> x"),
), "exact algebraic identities and no-op layout ops")
