"""Transformer building blocks other than attention: RotaryEmbedding (opset 23), SwiGLU (28), and the recurrent
blocks of linear-attention models, LinearAttention and CausalConvWithState (27).

LinearAttention runs its recurrence token by token (the spec's sequential semantics; ``chunk_size`` is only a
tuning hint), with the state in float32 for float16 inputs, as is CausalConvWithState's accumulation. SwiGLU is
elementwise (its two inputs have one shape; the spec does not broadcast), so fusion may pull it into a kernel.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import FLOAT_DTYPES, Dim, TensorType
from . import dims
from . import expr as E
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 is computed in float32 (one rounding at the end); float32 and float64 in themselves."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _float_type(ctx: InferContext, i: int, what: str) -> TensorType:
    t = ctx.type(i)
    if t.dtype not in FLOAT_DTYPES:
        ctx.fail(f"{what} has dtype {t.dtype}; {ctx.node.op} takes float types")
    return t


def _same_dtype(ctx: InferContext, first: int, others: dict[int, str]) -> None:
    """Inputs ``others`` (index -> name), where present, have the dtype of input ``first``."""
    want = ctx.type(first).dtype
    for i, what in others.items():
        if ctx.has_input(i) and ctx.type(i).dtype != want:
            ctx.fail(f"{what} has dtype {ctx.type(i).dtype}, expected {want} like input {first}")


def _rank(ctx: InferContext, i: int, what: str, ranks: tuple[int, ...]) -> tuple[Dim, ...] | None:
    """The shape of input ``i`` (None when unknown), failing when its rank is not one of ``ranks``."""
    shape = ctx.shape(i)
    if shape is not None and len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        ctx.fail(f"{what} {ctx.type(i)} must have rank {want}")
    return shape


def _merge(ctx: InferContext, a: Dim, b: Dim, what: str) -> Dim:
    try:
        return dims.merge(a, b)
    except ValueError:
        ctx.fail(f"{what}: {a} and {b} must be equal")


def _quotient(ctx: InferContext, total: Dim, parts: int, what: str) -> Dim:
    """``total / parts`` for a dim that must divide evenly; a symbol divides only by 1 (else None)."""
    if not isinstance(total, int):
        return total if parts == 1 else None
    if total % parts:
        ctx.fail(f"{what}: {total} is not a multiple of {parts}")
    return total // parts


def _num_outputs(ctx: InferContext, most: int) -> int:
    if ctx.node.num_outputs > most:
        ctx.fail(f"{ctx.node.num_outputs} outputs; {ctx.node.op} has at most {most}")
    return ctx.node.num_outputs


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), written so that neither branch overflows."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# ---------------------------------------------------------------------------- RotaryEmbedding
def _rotary_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_type(ctx, 0, "X")
    _same_dtype(ctx, 0, {1: "cos_cache", 2: "sin_cache"})
    shape = _rank(ctx, 0, "X", (3, 4))
    with_ids = ctx.has_input(3)
    if with_ids and ctx.type(3).dtype != "int64":
        ctx.fail(f"position_ids has dtype {ctx.type(3).dtype}, expected int64")
    num_heads, rotary_dim = ctx.attrs["num_heads"], ctx.attrs["rotary_embedding_dim"]
    if rotary_dim < 0 or rotary_dim % 2:
        ctx.fail(f"rotary_embedding_dim {rotary_dim} must be even and >= 0 (0: the whole head)")
    if shape is None:
        return [x]
    if len(shape) == 3:
        if not num_heads or num_heads < 1:
            ctx.fail(f"X {x} is 3-D (batch, sequence, hidden); num_heads must be given (> 0), got {num_heads}")
        head_size = _quotient(ctx, shape[2], num_heads, f"hidden size of X {x} for num_heads {num_heads}")
    else:
        head_size = shape[3]
    batch, seq = (shape[0], shape[1]) if len(shape) == 3 else (shape[0], shape[2])
    if isinstance(head_size, int):
        if head_size % 2:
            ctx.fail(f"head size {head_size} of X {x} must be even")
        if rotary_dim > head_size:
            ctx.fail(f"rotary_embedding_dim {rotary_dim} exceeds the head size {head_size}")
    half = (rotary_dim or head_size) // 2 if isinstance(rotary_dim or head_size, int) else None
    cache_rank = 2 if with_ids else 3
    for i, what in ((1, "cos_cache"), (2, "sin_cache")):
        cache = ctx.shape(i)
        if cache is None:
            continue
        if len(cache) != cache_rank:
            form = ("(max_position + 1, rotary_dim / 2) with position_ids" if with_ids
                    else "(batch, sequence, rotary_dim / 2) without position_ids")
            ctx.fail(f"{what} {ctx.type(i)} must be {form}")
        _merge(ctx, cache[-1], half, f"{what} {ctx.type(i)}: last dim against half the rotary dim")
        if not with_ids:
            _merge(ctx, cache[0], batch, f"{what} {ctx.type(i)}: batch against X {x}")
            _merge(ctx, cache[1], seq, f"{what} {ctx.type(i)}: sequence against X {x}")
    if with_ids and ctx.shape(3) is not None:
        ids = ctx.shape(3)
        if len(ids) != 2:
            ctx.fail(f"position_ids {ctx.type(3)} must be (batch, sequence)")
        _merge(ctx, ids[0], batch, f"position_ids {ctx.type(3)}: batch against X {x}")
        _merge(ctx, ids[1], seq, f"position_ids {ctx.type(3)}: sequence against X {x}")
    return [x]


def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved: int, num_heads: int | None,
                     rotary_embedding_dim: int) -> np.ndarray:
    """Rotate pairs of each head's first ``rotary_embedding_dim`` features (halves, or even/odd neighbours when
    interleaved) by the angles of the token's position; the other features pass through."""
    if x.ndim == 4:  # (batch, heads, sequence, head) -> (batch, sequence, heads, head)
        heads = x.transpose(0, 2, 1, 3)
    else:
        heads = x.reshape(x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads)
    rotary = rotary_embedding_dim or heads.shape[-1]
    if position_ids is not None:
        if position_ids.size and (position_ids.min() < 0 or position_ids.max() >= cos_cache.shape[0]):
            raise ValueError(f"position_ids hold values in [{position_ids.min()}, {position_ids.max()}]; the caches "
                             f"have {cos_cache.shape[0]} positions")
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != rotary // 2 or sin_cache.shape[-1] != rotary // 2:
        raise ValueError(f"caches of {cos_cache.shape[-1]} and {sin_cache.shape[-1]} angles; the rotary dim "
                         f"{rotary} needs {rotary // 2}")
    dtype = _compute_dtype(x.dtype)
    heads = heads.astype(dtype, copy=False)
    cos = cos_cache[:, :, None, :].astype(dtype, copy=False)  # one angle set per token, for every head
    sin = sin_cache[:, :, None, :].astype(dtype, copy=False)
    out = heads.copy()
    if interleaved:
        first, second = heads[..., 0:rotary:2], heads[..., 1:rotary:2]
        out[..., 0:rotary:2] = cos * first - sin * second
        out[..., 1:rotary:2] = sin * first + cos * second
    else:
        half = rotary // 2
        first, second = heads[..., :half], heads[..., half:rotary]
        out[..., :half] = cos * first - sin * second
        out[..., half:rotary] = sin * first + cos * second
    out = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)
    return out.astype(x.dtype, copy=False)


register(OpDef(name="RotaryEmbedding", infer=_rotary_infer, reference=rotary_embedding, inputs=(3, 4),
               attrs={"interleaved": Attr("int", 0), "num_heads": Attr("int", None),
                      "rotary_embedding_dim": Attr("int", 0)},
               traits=PURE, cost=4,
               doc="Rotary position embedding (RoPE) of 4-D (batch, heads, seq, head) or 3-D (batch, seq, hidden) "
                   "input, optionally at position_ids and over part of each head (opset 23)."))


# ---------------------------------------------------------------------------- SwiGLU
def _swiglu_infer(ctx: InferContext) -> list[TensorType]:
    a = _float_type(ctx, 0, "A")
    _same_dtype(ctx, 0, {1: "B"})
    b = ctx.type(1)
    if a.shape is None or b.shape is None:
        return [TensorType(a.dtype, a.shape if b.shape is None else b.shape)]
    if len(a.shape) != len(b.shape):
        ctx.fail(f"A {a} and B {b} must have the same shape (SwiGLU does not broadcast)")
    shape = tuple(_merge(ctx, x, y, f"A {a} and B {b} must have the same shape; dims")
                  for x, y in zip(a.shape, b.shape))
    return [TensorType(a.dtype, shape)]


def swiglu(a: np.ndarray, b: np.ndarray, *, alpha: float) -> np.ndarray:
    """Swish_alpha(A) * B = A * sigmoid(alpha * A) * B, float16 through float32."""
    if a.shape != b.shape:
        raise ValueError(f"A {list(a.shape)} and B {list(b.shape)} must have the same shape")
    dtype = _compute_dtype(a.dtype)
    ac = a.astype(dtype, copy=False)
    gate = ac * _sigmoid(np.asarray(alpha, dtype) * ac)
    return (gate * b.astype(dtype, copy=False)).astype(a.dtype, copy=False)


register(OpDef(name="SwiGLU", infer=_swiglu_infer, reference=swiglu, inputs=(2, 2), attrs={"alpha": Attr("float", 1.0)},
               expr=lambda a, b, *, alpha: a * E.sigmoid(alpha * a) * b,
               traits=PURE | {Trait.ELEMENTWISE}, cost=12,
               doc="Gated activation Swish_alpha(A) * B of two same-shaped inputs (opset 28)."))


# ---------------------------------------------------------------------------- CausalConvWithState
CAUSAL_CONV_ACTIVATIONS = ("none", "silu", "swish")


def _causal_conv_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_type(ctx, 0, "input")
    _same_dtype(ctx, 0, {1: "weight", 2: "bias", 3: "past_state"})
    outputs = _num_outputs(ctx, 2)
    if ctx.attrs["activation"] not in CAUSAL_CONV_ACTIVATIONS:
        ctx.fail(f"activation {ctx.attrs['activation']!r} is not one of {', '.join(CAUSAL_CONV_ACTIVATIONS)}")
    batch, channels, _ = _rank(ctx, 0, "input", (3,)) or (None, None, None)
    kernel: Dim = None
    weight = _rank(ctx, 1, "weight", (3,))
    if weight is not None:
        if isinstance(weight[1], int) and weight[1] != 1:
            ctx.fail(f"weight {ctx.type(1)} must be (channels, 1, k): the convolution is depthwise")
        channels = _merge(ctx, channels, weight[0], f"weight {ctx.type(1)}: channels against input {x}")
        kernel = weight[2]
    if kernel == 0:
        ctx.fail(f"weight {ctx.type(1)} has an empty kernel")
    if ctx.has_input(2):
        bias = _rank(ctx, 2, "bias", (1,))
        if bias is not None:
            channels = _merge(ctx, channels, bias[0], f"bias {ctx.type(2)}: channels against input {x}")
    carry = dims.add(kernel, -1) if kernel is not None else None
    if ctx.has_input(3):
        past = _rank(ctx, 3, "past_state", (3,))
        if past is not None:
            batch = _merge(ctx, batch, past[0], f"past_state {ctx.type(3)}: batch against input {x}")
            channels = _merge(ctx, channels, past[1], f"past_state {ctx.type(3)}: channels against input {x}")
            carry = _merge(ctx, carry, past[2], f"past_state {ctx.type(3)}: length against kernel size - 1")
    state = TensorType(x.dtype, (batch, channels, carry))
    return [x, state][:outputs]


def causal_conv_with_state(x, weight, bias=None, past_state=None, *, activation: str) -> list[np.ndarray]:
    """[output, present_state]: a depthwise convolution of (past_state or zeros) ++ input whose last tap is the
    current token, plus bias, then the activation; the state is the last k - 1 positions of that sequence."""
    if activation not in CAUSAL_CONV_ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(CAUSAL_CONV_ACTIVATIONS)}")
    batch, channels, length = x.shape
    kernel = weight.shape[2]
    if past_state is None:
        past_state = np.zeros((batch, channels, kernel - 1), x.dtype)
    elif past_state.shape != (batch, channels, kernel - 1):
        raise ValueError(f"past_state is {list(past_state.shape)}, expected {[batch, channels, kernel - 1]}")
    padded = np.concatenate([past_state, x], axis=2)
    dtype = _compute_dtype(x.dtype)
    taps = weight[:, 0, :].astype(dtype, copy=False)
    out = np.zeros((batch, channels, length), dtype)
    for j in range(kernel):
        out += taps[None, :, j, None] * padded[:, :, j:j + length]
    if bias is not None:
        out += bias.astype(dtype, copy=False)[None, :, None]
    if activation != "none":  # silu and swish are one function
        out = out * _sigmoid(out)
    return [out.astype(x.dtype, copy=False), padded[:, :, padded.shape[2] - (kernel - 1):]]


register(OpDef(name="CausalConvWithState", infer=_causal_conv_infer, reference=causal_conv_with_state, inputs=(2, 4),
               outputs=2, attrs={"activation": Attr("string", "none")},
               traits=PURE | {Trait.LAYOUT_SENSITIVE}, cost=4,
               doc="Causal depthwise 1-D convolution (batch, channels, length) carrying its last k - 1 inputs as "
                   "state, with an optional bias and SiLU (opset 27)."))


# ---------------------------------------------------------------------------- LinearAttention
LINEAR_ATTENTION_RULES = ("linear", "gated", "delta", "gated_delta")


def _linear_attention_infer(ctx: InferContext) -> list[TensorType]:
    q = _float_type(ctx, 0, "query")
    _same_dtype(ctx, 0, {1: "key", 2: "value", 4: "decay", 5: "beta"})
    if ctx.has_input(3):
        _float_type(ctx, 3, "past_state")
    outputs = _num_outputs(ctx, 2)
    attrs = ctx.attrs
    rule, q_heads, kv_heads = attrs["update_rule"], attrs["q_num_heads"], attrs["kv_num_heads"]
    if rule not in LINEAR_ATTENTION_RULES:
        ctx.fail(f"update_rule {rule!r} is not one of {', '.join(LINEAR_ATTENTION_RULES)}")
    if q_heads < 1 or kv_heads < 1 or q_heads % kv_heads:
        ctx.fail(f"q_num_heads {q_heads} must be a positive multiple of kv_num_heads {kv_heads}")
    if attrs["chunk_size"] < 1:
        ctx.fail(f"chunk_size must be >= 1, got {attrs['chunk_size']}")
    if rule in ("gated", "gated_delta") and not ctx.has_input(4):
        ctx.fail(f"update_rule {rule!r} needs the decay input (4)")
    if rule in ("delta", "gated_delta") and not ctx.has_input(5):
        ctx.fail(f"update_rule {rule!r} needs the beta input (5)")
    batch = seq = key_dim = value_dim = None
    names = {0: "query", 1: "key", 2: "value", 4: "decay", 5: "beta"}
    packed = {}
    for i, what in names.items():
        shape = _rank(ctx, i, what, (3,)) if ctx.has_input(i) else None
        if shape is None:
            continue
        batch = _merge(ctx, batch, shape[0], f"{what} {ctx.type(i)}: batch against the other inputs")
        seq = _merge(ctx, seq, shape[1], f"{what} {ctx.type(i)}: sequence against the other inputs")
        packed[i] = shape[2]
    if 0 in packed:
        key_dim = _quotient(ctx, packed[0], q_heads, f"query {q}: last dim for q_num_heads {q_heads}")
    if 1 in packed:
        key_dim = _merge(ctx, key_dim, _quotient(ctx, packed[1], kv_heads, f"key {ctx.type(1)}: last dim for "
                                                 f"kv_num_heads {kv_heads}"), "d_k of key against query")
    if 2 in packed:
        value_dim = _quotient(ctx, packed[2], kv_heads, f"value {ctx.type(2)}: last dim for kv_num_heads {kv_heads}")
    per_key = dims.product([kv_heads, key_dim])
    if isinstance(packed.get(4), int) and packed[4] not in (kv_heads, per_key):
        ctx.fail(f"decay {ctx.type(4)}: last dim must be kv_num_heads * d_k ({per_key}) or kv_num_heads "
                 f"({kv_heads})")
    if isinstance(packed.get(5), int) and packed[5] not in (kv_heads, 1):
        ctx.fail(f"beta {ctx.type(5)}: last dim must be kv_num_heads ({kv_heads}) or 1")
    state_dtype = q.dtype
    if ctx.has_input(3):
        state_dtype = ctx.type(3).dtype
        past = _rank(ctx, 3, "past_state", (4,))
        if past is not None:
            batch = _merge(ctx, batch, past[0], f"past_state {ctx.type(3)}: batch against query")
            _merge(ctx, past[1], kv_heads, f"past_state {ctx.type(3)}: heads against kv_num_heads")
            key_dim = _merge(ctx, key_dim, past[2], f"past_state {ctx.type(3)}: d_k against query")
            value_dim = _merge(ctx, value_dim, past[3], f"past_state {ctx.type(3)}: d_v against value")
    output = TensorType(q.dtype, (batch, seq, dims.product([q_heads, value_dim])))
    state = TensorType(state_dtype, (batch, kv_heads, key_dim, value_dim))
    return [output, state][:outputs]


def _heads(x: np.ndarray, heads: int, dtype: np.dtype) -> np.ndarray:
    """(B, T, H * D) -> (B, T, H, D) in ``dtype``."""
    return x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads).astype(dtype, copy=False)


def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, chunk_size: int,
                     kv_num_heads: int, q_num_heads: int, scale: float, update_rule: str) -> list[np.ndarray]:
    """[output, present_state], running the recurrence of ``update_rule`` one token at a time. The state S of each
    KV head is (d_k, d_v); query head h reads KV head h // (q_num_heads / kv_num_heads)."""
    if update_rule not in LINEAR_ATTENTION_RULES:
        raise ValueError(f"update_rule {update_rule!r} is not one of {', '.join(LINEAR_ATTENTION_RULES)}")
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if (gated and decay is None) or (delta and beta is None):
        raise ValueError(f"update_rule {update_rule!r} needs {'decay' if gated and decay is None else 'beta'}")
    dtype = _compute_dtype(query.dtype)
    q, k, v = _heads(query, q_num_heads, dtype), _heads(key, kv_num_heads, dtype), _heads(value, kv_num_heads, dtype)
    batch, steps, _, key_dim = q.shape
    value_dim = v.shape[3]
    state_dtype = query.dtype if past_state is None else past_state.dtype
    if past_state is None:
        state = np.zeros((batch, kv_num_heads, key_dim, value_dim), dtype)
    else:
        state = past_state.astype(dtype)  # a copy: the state is updated in place
    if gated:  # per key dim (B, T, H, d_k, 1) or per head (B, T, H, 1, 1): scales the rows of S
        factor = np.exp(_heads(decay, kv_num_heads, dtype))[..., None]
    if delta:  # (B, T, H or 1, 1)
        rate = beta.astype(dtype, copy=False)[..., None]
    group = q_num_heads // kv_num_heads
    factor_scale = np.asarray(scale if scale != 0.0 else 1 / math.sqrt(key_dim), dtype)
    out = np.empty((batch, steps, q_num_heads, value_dim), dtype)
    for t in range(steps):
        if gated:
            state *= factor[:, t]
        k_t, v_t = k[:, t], v[:, t]
        if delta:
            v_t = rate[:, t] * (v_t - np.einsum("bhkv,bhk->bhv", state, k_t))
        state += k_t[..., :, None] * v_t[..., None, :]
        shared = np.repeat(state, group, axis=1) if group > 1 else state
        out[:, t] = np.einsum("bhk,bhkv->bhv", q[:, t], shared)
    out *= factor_scale
    return [out.reshape(batch, steps, q_num_heads * value_dim).astype(query.dtype, copy=False),
            state.astype(state_dtype, copy=False)]


register(OpDef(name="LinearAttention", infer=_linear_attention_infer, reference=linear_attention, inputs=(3, 6),
               outputs=2,
               attrs={"chunk_size": Attr("int", 64), "kv_num_heads": Attr("int", REQUIRED),
                      "q_num_heads": Attr("int", REQUIRED), "scale": Attr("float", 0.0),
                      "update_rule": Attr("string", "gated_delta")},
               traits=PURE, cost=16,
               doc="Recurrent linear attention (linear, gated, delta or gated-delta rule) over packed (B, T, H * D) "
                   "inputs with grouped KV heads, carrying a (B, H_kv, d_k, d_v) state (opset 27)."))
