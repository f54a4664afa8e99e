"""Attention (opset 23 to 25): scaled dot-product attention over 3-D or 4-D Q, K and V.

One op covers multi-head, grouped-query and multi-query attention (``q_num_heads`` a multiple of
``kv_num_heads``: query head h reads key/value head h // group), a KV cache concatenated inside the op
(``past_key``/``past_value`` -> ``present_key``/``present_value``) or held outside it (``nonpad_kv_seqlen``),
the causal and sliding-window masks aligned bottom-right by the cache offset, a boolean or additive
``attn_mask`` whose last axis may be shorter than the keys (padded with -inf), ``softcap`` and
``softmax_precision``. A query row whose every key is masked gives zeros (in Y and in the mode-3
``qk_matmul_output``), as the spec's errata say, not NaN.

The reference follows the spec's function body step by step: Q and K are each scaled by sqrt(scale) before
their product, the product is in T1 (Q's type), the softmax in ``softmax_precision`` (default T1) and cast back.

``ai.onnx.preview.FlexAttention`` (version 1) is the 4-D core of it (GQA, ``scale``, ``softmax_precision``) with
two optional modifier bodies instead of the masks: ``score_mod`` rewrites the scores before the softmax,
``prob_mod`` the probabilities after it. Its bodies follow tlc's capture convention (``tlc.ops.control``): the
outer values they read are trailing node inputs (``num_captures``), matched to trailing inputs of each body.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOperatorError
from ..ir.graph import Graph
from ..ir.types import DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, Dim, TensorType
from . import dims as D
from .control import num_captures
from .registry import Attr, InferContext, OpDef, Trait, register

#: softmax_precision codes (ONNX TensorProto element types) and the dtypes they name
SOFTMAX_PRECISIONS = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
#: T1 and T2: numpy's floats, and bfloat16 where tlc holds it (ml_dtypes; the reference executor computes in it)
ATTENTION_FLOATS = FLOAT_DTYPES | ({"bfloat16"} & set(DTYPES))

#: qk_matmul_output_mode: what the 4th output holds
QK_RAW, QK_SOFTCAPPED, QK_BIASED, QK_SOFTMAX = 0, 1, 2, 3

Q, K, V, MASK, PAST_KEY, PAST_VALUE, NONPAD = range(7)


def softmax_dtype(code: int | None, t1: str, where: str = "Attention") -> str:
    """The dtype the softmax runs in: ``softmax_precision`` when given, else T1 (Q's type).

    Raises ValueError for a code that is not a float type of the spec, and UnsupportedOperatorError for one that
    tlc does not hold."""
    if code is None:
        return t1
    if int(code) not in SOFTMAX_PRECISIONS:
        raise ValueError(f"softmax_precision {code} is not one of 1 (float32), 10 (float16), 11 (float64), "
                         f"16 (bfloat16)")
    name = SOFTMAX_PRECISIONS[int(code)]
    if name not in ATTENTION_FLOATS:
        raise UnsupportedOperatorError(f"{where}: softmax_precision={code} ({name}) is not supported; tlc does "
                                       f"not hold {name} (use 1 = float32, 10 = float16 or 11 = float64)", {})
    return name


# ---------------------------------------------------------------------------- inference
def _heads_view(ctx: InferContext, i: int, name: str, heads_attr: str, rank: int) -> tuple[Dim, Dim, Dim, Dim]:
    """Input ``i`` as (batch, heads, seq, head_size), from its 4-D shape or its 3-D (batch, seq, heads * size)."""
    t = ctx.type(i)
    if t.shape is None:
        if rank == 3:
            return None, ctx.attrs[heads_attr], None, None
        return None, None, None, None
    if len(t.shape) != rank:
        ctx.fail(f"{name} {t} has rank {len(t.shape)}; Q, K and V must all be 3-D or all 4-D (Q is {rank}-D)")
    if rank == 4:
        return t.shape
    heads = ctx.attrs[heads_attr]
    batch, seq, hidden = t.shape
    if isinstance(hidden, int) and hidden % heads:
        ctx.fail(f"{name} {t}: hidden size {hidden} is not a multiple of {heads_attr}={heads}")
    return batch, heads, seq, hidden // heads if isinstance(hidden, int) else None


def _merge(ctx: InferContext, what: str, *dims: Dim) -> Dim:
    out: Dim = None
    for d in dims:
        try:
            out = D.merge(out, d)
        except ValueError:
            ctx.fail(f"{what} differ: {', '.join('?' if x is None else str(x) for x in dims)}")
    return out


def _check_attrs(ctx: InferContext, rank: int | None) -> None:
    a = ctx.attrs
    if rank == 3:
        for key in ("q_num_heads", "kv_num_heads"):
            if a[key] is None or a[key] < 1:
                ctx.fail(f"3-D Q, K and V need a positive {key} attribute, got {a[key]}")
    if a["qk_matmul_output_mode"] not in (QK_RAW, QK_SOFTCAPPED, QK_BIASED, QK_SOFTMAX):
        ctx.fail(f"qk_matmul_output_mode must be 0, 1, 2 or 3, got {a['qk_matmul_output_mode']}")
    for key in ("left_window_size", "right_window_size"):
        if a[key] < -1:
            ctx.fail(f"{key} must be -1 (unbounded) or >= 0, got {a[key]}")
    if a["softcap"] < 0:
        ctx.fail(f"softcap must be >= 0 (0 = none), got {a['softcap']}")
    if a["is_causal"] not in (0, 1):
        ctx.fail(f"is_causal must be 0 or 1, got {a['is_causal']}")


def _check_types(ctx: InferContext) -> None:
    t1, t2 = ctx.type(Q).dtype, ctx.type(V).dtype
    for i, name, want in ((Q, "Q", None), (K, "K", t1), (V, "V", None), (PAST_KEY, "past_key", t1),
                          (PAST_VALUE, "past_value", t2)):
        if not ctx.has_input(i):
            continue
        dtype = ctx.type(i).dtype
        if dtype not in ATTENTION_FLOATS:
            ctx.fail(f"{name} has dtype {dtype}; Attention takes {', '.join(sorted(ATTENTION_FLOATS))}")
        if want is not None and dtype != want:
            ctx.fail(f"{name} has dtype {dtype}, expected {want} ({'like Q' if i in (K, PAST_KEY) else 'like V'})")
    if ctx.has_input(MASK):
        dtype = ctx.type(MASK).dtype
        if dtype != "bool" and dtype not in NUMERIC_DTYPES | ATTENTION_FLOATS:
            ctx.fail(f"attn_mask has dtype {dtype}; expected bool (True = attend) or a number type (added)")
    if ctx.has_input(NONPAD) and ctx.type(NONPAD).dtype != "int64":
        ctx.fail(f"nonpad_kv_seqlen has dtype {ctx.type(NONPAD).dtype}, expected int64")


def _check_mask(ctx: InferContext, batch: Dim, q_heads: Dim, q_seq: Dim, total: Dim) -> None:
    shape = ctx.type(MASK).shape
    if shape is None:
        return
    if len(shape) > 4:
        ctx.fail(f"attn_mask {ctx.type(MASK)} has rank {len(shape)}; at most 4 "
                 f"(batch, q_num_heads, q_sequence_length, total_sequence_length)")
    full = (batch, q_heads, q_seq, total)
    for axis, (d, want) in enumerate(zip(shape, full[4 - len(shape):])):
        if not isinstance(d, int) or not isinstance(want, int):
            continue
        last = axis == len(shape) - 1
        if (last and d > want) or (not last and d not in (1, want)):
            ctx.fail(f"attn_mask {ctx.type(MASK)} does not broadcast to (batch, q_num_heads, q_sequence_length, "
                     f"total_sequence_length) = [{', '.join('?' if x is None else str(x) for x in full)}]"
                     + (" (its last axis may be shorter than the keys, not longer)" if last else ""))


def _attention_infer(ctx: InferContext) -> list[TensorType]:
    if ctx.node.num_outputs > 4:
        ctx.fail(f"{ctx.node.num_outputs} outputs; Attention has at most 4 "
                 f"(Y, present_key, present_value, qk_matmul_output)")
    q, k, v = ctx.type(Q), ctx.type(K), ctx.type(V)
    rank = q.rank if q.rank is not None else k.rank if k.rank is not None else v.rank
    if rank not in (None, 3, 4):
        ctx.fail(f"Q {q} must be 3-D (batch, seq, hidden) or 4-D (batch, heads, seq, head_size)")
    _check_attrs(ctx, rank)
    _check_types(ctx)
    try:
        softmax_dtype(ctx.attrs["softmax_precision"], q.dtype, f"node {ctx.node.name!r} (Attention)")
    except ValueError as exc:
        ctx.fail(str(exc))
    if ctx.has_input(PAST_KEY) != ctx.has_input(PAST_VALUE):
        ctx.fail("past_key and past_value go together; only one of them is given")
    if ctx.has_input(NONPAD) and ctx.has_input(PAST_KEY):
        ctx.fail("nonpad_kv_seqlen (a cache held outside the op) cannot be used with past_key/past_value")
    if rank is None:
        unknown = [TensorType(q.dtype, None), TensorType(k.dtype, D.unknown(4)), TensorType(v.dtype, D.unknown(4)),
                   TensorType(q.dtype, D.unknown(4))]
        return unknown[: ctx.node.num_outputs]

    qb, qh, qs, qd = _heads_view(ctx, Q, "Q", "q_num_heads", rank)
    kb, kh, ks, kd = _heads_view(ctx, K, "K", "kv_num_heads", rank)
    vb, vh, vs, vd = _heads_view(ctx, V, "V", "kv_num_heads", rank)
    past_len: Dim = 0
    pk_dims = pv_dims = (None, None, None, None)
    if ctx.has_input(PAST_KEY):
        for i, name in ((PAST_KEY, "past_key"), (PAST_VALUE, "past_value")):
            t = ctx.type(i)
            if t.rank is not None and t.rank != 4:
                ctx.fail(f"{name} {t} must be 4-D (batch, kv_num_heads, past_sequence_length, head_size)")
        pk_dims = ctx.type(PAST_KEY).shape or pk_dims
        pv_dims = ctx.type(PAST_VALUE).shape or pv_dims
        past_len = _merge(ctx, "past sequence lengths of past_key and past_value", pk_dims[2], pv_dims[2])
    batch = _merge(ctx, "batch sizes of Q, K, V (and the past)", qb, kb, vb, pk_dims[0], pv_dims[0])
    kv_heads = _merge(ctx, "key/value head counts of K, V (and the past)", kh, vh, pk_dims[1], pv_dims[1])
    head = _merge(ctx, "head sizes of Q and K (and past_key)", qd, kd, pk_dims[3])
    v_head = _merge(ctx, "head sizes of V (and past_value)", vd, pv_dims[3])
    kv_seq = _merge(ctx, "sequence lengths of K and V", ks, vs)
    if isinstance(qh, int) and isinstance(kv_heads, int) and (kv_heads < 1 or qh % kv_heads):
        ctx.fail(f"q_num_heads {qh} is not a multiple of kv_num_heads {kv_heads}")
    if ctx.has_input(NONPAD):
        shape = ctx.type(NONPAD).shape
        if shape is not None:
            if len(shape) != 1:
                ctx.fail(f"nonpad_kv_seqlen {ctx.type(NONPAD)} must be 1-D (batch_size,)")
            batch = _merge(ctx, "batch sizes of Q and nonpad_kv_seqlen", batch, shape[0])
    total = D.total([past_len, kv_seq])
    if ctx.has_input(MASK):
        _check_mask(ctx, batch, qh, qs, total)
    y = (batch, qh, qs, v_head) if rank == 4 else (batch, qs, D.product([qh, v_head]))
    outs = [TensorType(q.dtype, y), TensorType(k.dtype, (batch, kv_heads, total, head)),
            TensorType(v.dtype, (batch, kv_heads, total, v_head)), TensorType(q.dtype, (batch, qh, qs, total))]
    return outs[: ctx.node.num_outputs]


# ---------------------------------------------------------------------------- reference
def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, hidden = x.shape
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def merge_heads(y: np.ndarray) -> np.ndarray:
    """(batch, heads, seq, size) -> (batch, seq, heads * size)."""
    b, h, s, d = y.shape
    return y.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def mask_bias(mask: np.ndarray, total: int, dtype: np.dtype) -> np.ndarray:
    """``attn_mask`` as an additive bias in ``dtype``: bool True -> 0, False -> -inf; numbers are cast. A last
    axis shorter than ``total`` is padded with -inf (the keys past it are masked)."""
    if mask.dtype == np.bool_:
        bias = np.where(mask, np.asarray(0, dtype), np.asarray(-np.inf, dtype))
    else:
        bias = mask.astype(dtype)
    if bias.ndim == 0:
        return bias
    width = bias.shape[-1]
    if width > total:
        raise ValueError(f"attn_mask's last axis has {width} keys, more than the {total} there are")
    if width < total:
        pad = [(0, 0)] * (bias.ndim - 1) + [(0, total - width)]
        bias = np.pad(bias, pad, constant_values=-np.inf)
    return bias


def structural_mask(q_seq: int, total: int, offset: np.ndarray | int, is_causal: int, left: int, right: int,
                    nonpad: np.ndarray | None) -> np.ndarray | None:
    """Which keys each query may see from the causal rule, the window and the non-padded length: a bool array
    that broadcasts to (batch, heads, q_seq, total), or None when nothing is masked. Query i sits at the absolute
    position ``offset + i`` (``offset`` per batch, shape (batch, 1, 1, 1), with an external cache)."""
    rows = np.arange(q_seq).reshape(q_seq, 1)
    cols = np.arange(total).reshape(1, total)
    pos = rows + offset
    allowed = None

    def both(a, b):
        return b if a is None else a & b

    if is_causal:
        allowed = both(allowed, cols <= pos)
    if left >= 0:
        allowed = both(allowed, cols >= pos - left)
    if right >= 0:
        allowed = both(allowed, cols <= pos + right)
    if nonpad is not None:
        allowed = both(allowed, cols < nonpad.reshape(-1, 1, 1, 1))
    return allowed


def grouped_kv(k: np.ndarray, v: np.ndarray, q_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """K and V (batch, kv_heads, seq, size) with one head per query head: query head h reads key/value head
    h // (q_heads / kv_heads)."""
    kv_heads = k.shape[1]
    if kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads are not a multiple of {kv_heads} key/value heads")
    group = q_heads // kv_heads
    if group == 1:
        return k, v
    return np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)


def masked_softmax(scores: np.ndarray, bias: np.ndarray | None, precision: str) -> np.ndarray:
    """Softmax over the keys in ``precision``, back in the scores' type; a row whose whole bias is -inf (it
    attends to nothing) is zeros, not the NaN of 0/0."""
    x = scores.astype(precision)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        probs = (e / e.sum(axis=-1, keepdims=True)).astype(scores.dtype)
    if bias is None:
        return probs
    fully_masked = np.max(bias, axis=-1, keepdims=True) == -np.inf
    return np.where(fully_masked, np.asarray(0, scores.dtype), probs)


def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *, is_causal: int,
              kv_num_heads: int | None, q_num_heads: int | None, qk_matmul_output_mode: int, scale: float | None,
              softcap: float, softmax_precision: int | None, left_window_size: int, right_window_size: int
              ) -> list[np.ndarray]:
    """[Y, present_key, present_value, qk_matmul_output]."""
    batches = {a.shape[0] for a in (q, k, v, past_key, past_value) if a is not None and a.ndim}
    if len(batches) > 1:   # as inference says (numpy's products broadcast a batch of 1; fuzz seed 802258)
        raise ValueError(f"batch sizes of Q, K, V (and the past) differ: {sorted(batches)}")
    three_d = q.ndim == 3
    if three_d:
        q, k, v = split_heads(q, q_num_heads), split_heads(k, kv_num_heads), split_heads(v, kv_num_heads)
    past = 0
    if past_key is not None:
        past = past_key.shape[2]
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    present_key, present_value = k, v
    _, q_heads, q_seq, head = q.shape
    total = k.shape[2]
    k, v = grouped_kv(k, v, q_heads)

    t1 = q.dtype
    root = np.sqrt(np.float64(1.0 / math.sqrt(head) if scale is None else scale)).astype(t1)
    # NOTE: the products are cast to T1: numpy (ml_dtypes) multiplies bfloat16 matrices into float32
    raw = np.matmul(q * root, np.swapaxes(k * root, -1, -2)).astype(t1, copy=False)
    capped = raw
    if softcap > 0:
        cap = np.asarray(softcap, t1)
        capped = cap * np.tanh(raw / cap)

    if nonpad_kv_seqlen is not None:
        offset: np.ndarray | int = (nonpad_kv_seqlen.astype(np.int64) - q_seq).reshape(-1, 1, 1, 1)
    else:
        offset = past
    allowed = structural_mask(q_seq, total, offset, is_causal, left_window_size, right_window_size,
                              nonpad_kv_seqlen)
    bias = None if attn_mask is None else mask_bias(attn_mask, total, t1)
    if allowed is not None:
        structural = np.where(allowed, np.asarray(0, t1), np.asarray(-np.inf, t1))
        bias = structural if bias is None else bias + structural
    biased = capped if bias is None else capped + bias

    probs = masked_softmax(biased, bias, softmax_dtype(softmax_precision, str(t1)))
    y = np.matmul(probs, v.astype(t1, copy=False))
    if three_d:
        y = merge_heads(y)
    qk = (raw, capped, biased, probs)[qk_matmul_output_mode]
    return [y.astype(t1, copy=False), present_key, present_value, qk.astype(t1, copy=False)]


register(OpDef(name="Attention", ml_dtypes=True, infer=_attention_infer, reference=attention, inputs=(3, 7),
               attrs={"is_causal": Attr("int", 0), "kv_num_heads": Attr("int", None),
                      "q_num_heads": Attr("int", None), "qk_matmul_output_mode": Attr("int", QK_RAW),
                      "scale": Attr("float", None), "softcap": Attr("float", 0.0),
                      "softmax_precision": Attr("int", None), "left_window_size": Attr("int", -1),
                      "right_window_size": Attr("int", -1)},
               traits=frozenset({Trait.PURE, Trait.FOLDABLE}), cost=12,
               doc="Scaled dot-product attention (MHA/GQA/MQA, 3-D or 4-D), with KV cache, causal and window "
                   "masks, attn_mask, softcap and qk_matmul_output (opset 23-25)."))


# ---------------------------------------------------------------------------- FlexAttention (ai.onnx.preview)
PREVIEW_DOMAIN = "ai.onnx.preview"
MODIFIERS = ("score_mod", "prob_mod")


def flex_softmax_dtype(code: int | None, t1: str, where: str = "FlexAttention") -> str:
    """FlexAttention's softmax type: ``softmax_precision`` when given, else float64 for float64 inputs and float32
    for the narrower ones (unlike Attention, whose default is T1)."""
    return softmax_dtype(code, "float64" if t1 == "float64" else "float32", where)


def flex_scores_type(q: TensorType | None, k: TensorType | None, code: int | None) -> TensorType | None:
    """The type each modifier body takes and returns: (batch, q_num_heads, q_sequence_length,
    kv_sequence_length) in the softmax type; None without Q's type. Raises ValueError for a bad ``code``."""
    if q is None:
        return None
    qs = q.shape if q.shape is not None and len(q.shape) == 4 else (None,) * 4
    ks = k.shape if k is not None and k.shape is not None and len(k.shape) == 4 else (None,) * 4
    return TensorType(flex_softmax_dtype(code, q.dtype), (D.merge(qs[0], ks[0]), qs[1], qs[2], ks[2]))


def _fits(t: TensorType, want: TensorType) -> bool:
    """``t`` has ``want``'s dtype and rank, and no static dim of it differs from a static dim of ``want``."""
    if t.dtype != want.dtype:
        return False
    if t.shape is None:
        return True
    return len(t.shape) == 4 and all(not (isinstance(a, int) and isinstance(b, int)) or a == b
                                     for a, b in zip(t.shape, want.shape))


def _check_modifier(ctx: InferContext, key: str, body: Graph, scores: TensorType) -> None:
    k = num_captures(ctx.node)
    if len(body.inputs) != 1 + k or len(body.outputs) != 1:
        ctx.fail(f"{key} has {len(body.inputs)} inputs and {len(body.outputs)} outputs; expected the scores and "
                 f"{k} captures in, the modified scores out")
    t_in = body.inputs[0].output_types[0]
    t_out = body.type_of(body.outputs[0][0])
    if t_out is None:
        typed = body.copy()
        typed.infer_missing_types()
        t_out = typed.type_of(typed.outputs[0][0])
    for what, t in (("input", t_in), ("output", t_out)):
        if not isinstance(t, TensorType) or not _fits(t, scores):
            ctx.fail(f"{key}'s {what} is {t}; a modifier takes and returns the scores, {scores}")


def _flex_infer(ctx: InferContext) -> list[TensorType]:
    types = [ctx.type(i) for i in range(3)]
    for name, t in zip("QKV", types):
        if t.dtype not in ATTENTION_FLOATS:
            ctx.fail(f"{name} has dtype {t.dtype}; FlexAttention takes {', '.join(sorted(ATTENTION_FLOATS))}")
        if t.dtype != types[0].dtype:
            ctx.fail(f"{name} has dtype {t.dtype}, expected {types[0].dtype} like Q")
        if t.rank not in (None, 4):
            ctx.fail(f"{name} {t} must be 4-D (batch, heads, sequence, head_size)")
    (qb, qh, qs, qd), (kb, kh, ks, kd), (vb, vh, vs, vd) = (t.shape or (None,) * 4 for t in types)
    batch = _merge(ctx, "batch sizes of Q, K and V", qb, kb, vb)
    kv_heads = _merge(ctx, "head counts of K and V", kh, vh)
    _merge(ctx, "head sizes of Q and K", qd, kd)
    kv_seq = _merge(ctx, "sequence lengths of K and V", ks, vs)
    if isinstance(qh, int) and isinstance(kv_heads, int) and (kv_heads < 1 or qh % kv_heads):
        ctx.fail(f"q_num_heads {qh} is not a multiple of kv_num_heads {kv_heads}")
    try:
        precision = flex_softmax_dtype(ctx.attrs["softmax_precision"], types[0].dtype,
                                       f"node {ctx.node.name!r} (FlexAttention)")
    except ValueError as exc:
        ctx.fail(str(exc))
    scores = TensorType(precision, (batch, qh, qs, kv_seq))
    for key in MODIFIERS:
        if ctx.attrs[key] is not None:
            _check_modifier(ctx, key, ctx.attrs[key], scores)
    return [TensorType(types[0].dtype, (batch, qh, qs, vd))]


def _modified(run_graph, body: Graph, x: np.ndarray, captures: tuple, key: str) -> np.ndarray:
    (out,) = run_graph(body, [x, *captures])
    out = np.asarray(out)
    if out.shape != x.shape:
        raise ValueError(f"{key} returned shape {list(out.shape)}; it must keep the shape {list(x.shape)}")
    return out.astype(x.dtype, copy=False)


def flex_attention(q, k, v, *captures, scale: float | None, score_mod: Graph | None, prob_mod: Graph | None,
                   softmax_precision: int | None, num_captures: int, run_graph) -> list[np.ndarray]:
    """[Y]: softmax(score_mod(Q K^T * scale)), through prob_mod, times V; each body gets its input and the
    captured values (``captures``, the node's trailing inputs)."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"Q, K and V must be 4-D, got {q.shape}, {k.shape}, {v.shape}")
    if len(captures) != num_captures:
        raise ValueError(f"{len(captures)} captured inputs, num_captures={num_captures}")
    t1 = q.dtype
    precision = flex_softmax_dtype(softmax_precision, str(t1))
    k, v = grouped_kv(k, v, q.shape[1])
    # NOTE: as the spec's function body: sqrt(scale) in float32, then in T1, on Q and K; their product in T1
    root = np.sqrt(np.float32(1.0 / math.sqrt(q.shape[3]) if scale is None else scale)).astype(t1)
    scores = np.matmul(q * root, np.swapaxes(k * root, -1, -2)).astype(t1, copy=False).astype(precision)
    if score_mod is not None:
        scores = _modified(run_graph, score_mod, scores, captures, "score_mod")
    probs = masked_softmax(scores, None, precision)
    if prob_mod is not None:
        probs = _modified(run_graph, prob_mod, probs, captures, "prob_mod")
    return [np.matmul(probs, v.astype(precision, copy=False)).astype(t1, copy=False)]


register(OpDef(name="FlexAttention", domain=PREVIEW_DOMAIN, ml_dtypes=True, infer=_flex_infer,
               reference=flex_attention, inputs=(3, None),
               attrs={"scale": Attr("float", None), "softmax_precision": Attr("int", None),
                      "score_mod": Attr("graph", None), "prob_mod": Attr("graph", None),
                      "num_captures": Attr("int", 0)},
               traits=frozenset({Trait.PURE, Trait.SUBGRAPH}), cost=12,
               doc="Scaled dot-product attention over 4-D Q, K and V (GQA) with optional score_mod and prob_mod "
                   "bodies and their captures (ai.onnx.preview, version 1)."))
