"""Decomposed transformer blocks, as torch.onnx and Hugging Face models write them -> RMSNormalization and
RotaryEmbedding (-O2).

RMSNorm (Llama, Mistral, Qwen, T5, Gemma), over the trailing axes of xs with keepdims:

    ms  = ReduceMean(xs^2 | xs*xs, axes)       std = Sqrt(ms + eps) | Pow(ms + eps, 0.5)
    y   = xs * Reciprocal(std) | xs * (1 / std) | xs * Pow(ms + eps, -0.5) | xs / std
    out = y * weight                            (weight optional: a Scale of ones, static normalized shape)

``xs`` is either x itself (the RMSNormalization computes in x's type: ``stash_type`` = x's) or, the HF form,
``Cast(x, to=float32)`` with ``Cast(y, to=x's type)`` before the weight: exactly the op's order of casts
(normalize in the stash type, back to X's type, then times scale). A Cast in without the Cast back is the
plain form on the cast value (RMSNormalization(Cast(x), ...)). The replacement divides by the rms where the
graph may multiply by its reciprocal: a recognition, checked with a tolerance.

Rotary embedding, the non-interleaved ("rotate half") form of HF Llama/Mistral/Qwen/GPT-NeoX (before 4.38:
cos/sin caches gathered by position ids), on x of shape (batch, heads, seq, head):

    cos = Unsqueeze(Gather(cos_cache, position_ids), [1])     (sin alike; shared by the q and k rotations)
    out = x * cos + Concat(Neg(x[..., half:]), x[..., :half], axis=-1) * sin

-> RotaryEmbedding(x, cos_cache[:, :half], sin_cache[:, :half], position_ids). It is the op's semantics only
when each cache is (positions, head) with equal halves (HF builds it as cat(freqs, freqs)); then it is exact
in float32/float64 (x1*c + (-x2)*s is c*x1 - s*x2 bit for bit). Refused, with a reason: caches computed at run
time (newer HF: cos(inv_freq @ position_ids), the positions are not bounded), unequal halves, slices that are not
the two halves of the last axis, a (batch, seq, heads, head) layout (Unsqueeze at axis 2), partial rotary (the
rotated part concatenated with a pass-through part: a bigger pattern this rule does not spell), and the
interleaved GPT-J form (stack/flatten of even and odd features). position_ids of batch 1 against a static batch
are expanded (RotaryEmbedding wants one row of ids per batch).

SwiGLU needs no rule: gate * Sigmoid(gate) * up is an elementwise chain that fusion already makes one kernel
(or an epilogue of the up/gate MatMul), which is all a SwiGLU node would compile to.
"""

from __future__ import annotations

import numpy as np

from ...ir.types import ONNX_TYPE_CODES
from ..rewrite import FLOAT, Builder, Const, Match, OneOf, Op, Opt, Pattern, Rule, RuleSet, Var
from .common import int_list, normalize, root_keeps_type, scalar, shapes_known_equal

_KEEP = {"keepdims": 1}


# ---------------------------------------------------------------------------- RMSNorm
def _rms_core(xs: Pattern) -> OneOf:
    """xs / sqrt(mean(xs^2) + eps) in the forms exporters write."""
    square = OneOf(Op("Pow", xs, Const(2.0, scalar=True)), Op("Mul", xs, xs))
    mean_square = Op("ReduceMean", square, Const(name="axes"), name="mean_square", attrs=_KEEP)
    var_eps = Op("Add", mean_square, Const(name="eps", scalar=True))
    std = OneOf(Op("Sqrt", var_eps), Op("Pow", var_eps, Const(0.5, scalar=True)))
    inv = OneOf(Op("Reciprocal", std), Op("Div", Const(1.0, scalar=True), std),
                Op("Pow", var_eps, Const(-0.5, scalar=True)))
    return OneOf(Op("Mul", xs, inv), Op("Div", xs, std))


def _cast_in() -> Op:
    return Op("Cast", Var("x", dtype=FLOAT), name="cast_in")


def _rms_axes(m: Match, xs: str) -> tuple[int, str | None]:
    """(k, reason): the number of trailing axes of ``xs`` the mean reduces."""
    rank = m.type(xs).rank
    if rank is None:
        return 0, "the rank of x is unknown"
    axes = normalize(int_list(m.const("axes")), rank)
    if not axes or sorted(set(axes)) != list(range(rank - len(set(axes)), rank)):
        return 0, f"ReduceMean axes {int_list(m.const('axes'))} are not the trailing axes of a rank-{rank} x"
    return len(set(axes)), None


def _rms_check(m: Match) -> str | None:
    if "cast_out" in m.nodes:
        back = m.graph.type_of(m.node("cast_out").outputs[0]).dtype
        if back != m.type("x").dtype:
            return f"the result is cast to {back}, not back to x's {m.type('x').dtype}"
    k, reason = _rms_axes(m, "x")
    if reason:
        return reason
    reason = root_keeps_type(m)
    if reason:
        return f"the weight broadcasts x or changes its type: {reason}"
    norm_shape = m.type("x").shape[-k:]
    if "weight" not in m and not all(isinstance(d, int) for d in norm_shape):
        return f"no weight and normalized shape {list(norm_shape)} is not static (cannot build a Scale of ones)"
    return None


def _rms_rewrite(m: Match, b: Builder):
    k, _ = _rms_axes(m, "x")
    x = m["x"]
    stash = m.graph.type_of(m.node("cast_in").outputs[0] if "cast_in" in m.nodes else x).dtype
    scale = m["weight"] if "weight" in m else b.constant(np.ones(m.type("x").shape[-k:]), like=x)
    return b.op("RMSNormalization", x, scale, axis=-k, epsilon=scalar(m.const("eps")),
                stash_type=ONNX_TYPE_CODES[stash])


def _rms_rule(name: str, pattern: Op, description: str) -> Rule:
    return Rule(name, pattern, _rms_rewrite, _rms_check, min_level=2, produces=("RMSNormalization",),
                description=description)


# ---------------------------------------------------------------------------- rotary embedding
def _half(x: Pattern, name: str) -> Op:
    return Op("Slice", x, Const(name=f"{name}_starts"), Const(name=f"{name}_ends"), Opt(Const(name=f"{name}_axes")),
              Opt(Const(name=f"{name}_steps")), name=name)


def _cache(name: str) -> Op:
    """Unsqueeze(Gather(constant cache, position_ids), axes): kept for the other rotation that reads it."""
    gathered = Op("Gather", Const(name=f"{name}_cache"), Var("position_ids", dtype="int64"), name=f"{name}_gather",
                  shared=True)
    return Op("Unsqueeze", gathered, Const(name=f"{name}_axes"), name=f"{name}_unsqueeze", shared=True)


def _rotary_pattern() -> Op:
    x = Var("x", dtype=FLOAT, rank=4)
    rotated = Op("Concat", Op("Neg", _half(x, "second")), _half(x, "first"), name="rotated")
    return Op("Add", Op("Mul", x, _cache("cos")), Op("Mul", rotated, _cache("sin")))


def _slice_reason(m: Match, name: str, start: int, end: int, head: int) -> str | None:
    """A reason unless Slice ``name`` takes [start, end) of the last axis (end == head: to the end)."""
    axes = int_list(m.const(f"{name}_axes")) if f"{name}_axes" in m else [0]
    steps = int_list(m.const(f"{name}_steps")) if f"{name}_steps" in m else [1]
    starts, ends = int_list(m.const(f"{name}_starts")), int_list(m.const(f"{name}_ends"))
    if normalize(axes, 4) != [3] or steps != [1] or len(starts) != 1 or len(ends) != 1:
        return f"Slice {m.node(name).name!r} does not cut the last axis alone with step 1 (axes {axes}, steps {steps})"
    got_end = ends[0] + head if ends[0] < 0 else min(ends[0], head)
    got_start = starts[0] + head if starts[0] < 0 else starts[0]
    if (got_start, got_end) != (start, end):
        return f"Slice {m.node(name).name!r} takes [{got_start}, {got_end}) of the head, expected [{start}, {end})"
    return None


def _cache_reason(m: Match, name: str, head: int) -> str | None:
    cache = m.const(f"{name}_cache")
    if m.attrs(f"{name}_gather")["axis"] != 0 or cache.ndim != 2 or cache.shape[1] != head:
        return f"{name} is not rows of a (positions, {head}) cache gathered on axis 0 (cache {list(cache.shape)})"
    if cache.dtype != np.dtype(m.type("x").dtype):
        return f"the {name} cache is {cache.dtype}, x {m.type('x').dtype}"
    if not np.array_equal(cache[:, :head // 2], cache[:, head // 2:]):
        return f"the two halves of the {name} cache differ (not cat(freqs, freqs): not RotaryEmbedding's semantics)"
    if normalize(int_list(m.const(f"{name}_axes")), 4) != [1]:
        return f"{name} is unsqueezed at {int_list(m.const(f'{name}_axes'))}, not 1: x is not (batch, heads, seq, head)"
    return None


def _rotary_check(m: Match) -> str | None:
    shape = m.type("x").shape
    head = shape[3]
    if not isinstance(head, int) or head % 2:
        return f"the head size of x {m.type('x')} is not a static even number"
    if normalize([m.attrs("rotated")["axis"]], 4) != [3]:
        return f"the halves are concatenated on axis {m.attrs('rotated')['axis']}, not the last"
    reason = (_slice_reason(m, "first", 0, head // 2, head) or _slice_reason(m, "second", head // 2, head, head)
              or _cache_reason(m, "cos", head) or _cache_reason(m, "sin", head))
    if reason:
        return reason
    ids = m.type("position_ids").shape
    if ids is None or len(ids) != 2 or not shapes_known_equal(ids[1:], shape[2:3]):
        return f"position_ids {m.type('position_ids')} is not (batch, seq) of x {m.type('x')}"
    if not shapes_known_equal(ids[:1], shape[:1]) and not (ids[0] == 1 and isinstance(shape[0], int)):
        return f"position_ids {m.type('position_ids')} has another batch than x {m.type('x')}"
    return root_keeps_type(m)


def _rotary_rewrite(m: Match, b: Builder):
    head = m.type("x").shape[3]
    ids = m["position_ids"]
    batch = m.type("x").shape[0]
    if m.type("position_ids").shape[0] != batch:   # batch 1 against a static batch (checked)
        ids = b.op("Expand", ids, b.constant(np.array([batch, 1], np.int64)))
    cos = b.constant(np.ascontiguousarray(m.const("cos_cache")[:, :head // 2]))
    sin = b.constant(np.ascontiguousarray(m.const("sin_cache")[:, :head // 2]))
    return b.op("RotaryEmbedding", m["x"], cos, sin, ids)


RULES = RuleSet("transformer", (
    _rms_rule("rmsnorm-cast-scale", Op("Mul", Op("Cast", _rms_core(_cast_in()), name="cast_out"), Var("weight")),
              "Cast(RMSNorm(Cast(x, float32)), x's type) * weight -> RMSNormalization(x, weight, stash float32)"),
    _rms_rule("rmsnorm-cast", Op("Cast", _rms_core(_cast_in()), name="cast_out"),
              "Cast(RMSNorm(Cast(x, float32)), x's type) -> RMSNormalization(x, ones, stash float32)"),
    _rms_rule("rmsnorm-scale", Op("Mul", _rms_core(Var("x", dtype=FLOAT)), Var("weight")),
              "x / sqrt(mean(x^2) + eps) * weight -> RMSNormalization(x, weight)"),
    _rms_rule("rmsnorm", _rms_core(Var("x", dtype=FLOAT)), "x / sqrt(mean(x^2) + eps) -> RMSNormalization(x, ones)"),
    Rule("rotary-rotate-half", _rotary_pattern(), _rotary_rewrite, _rotary_check, min_level=2,
         produces=("RotaryEmbedding",),
         description="x * cos + rotate_half(x) * sin, caches gathered by position ids -> RotaryEmbedding"),
), "RMSNorm and rotary embedding recognition")
