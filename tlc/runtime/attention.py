"""Attention (opset 23-25) as a native step: per (batch, head), scale * Q K^T by BLAS, the masked softmax in a
compiled row loop, then P V by BLAS into Y, all inside one compiled function (``tlc.kernels.attention``),
parallel over (batch, head) pairs on Numba's pool.

Native: float32 and float64, 3-D and 4-D Q/K/V, GQA/MQA, ``is_causal``, sliding windows, bool and additive
``attn_mask`` (any broadcast shape, a last axis shorter than the keys), ``past_key``/``past_value`` (concatenated
into ``present_key``/``present_value``, or a scratch buffer when those outputs are not asked for),
``nonpad_kv_seqlen``, ``scale`` and ``softcap``. The reference runs, with the reason in ``plan.stats()``:
``qk_matmul_output`` (a 4th output), a ``softmax_precision`` other than Q's type, float16/bfloat16 (the
reference's casts), ``jit='off'``, and a host where numpy's BLAS cannot be called from compiled code.

Numerics: the product is one ``alpha = scale`` BLAS call where the spec scales Q and K by sqrt(scale) first,
and the softmax multiplies by 1 / sum: a few ulp from the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.graph import Node
from ..ir.types import np_dtype
from ..kernels import attention as kattn
from ..kernels import blas
from ..ops.attention import MASK, NONPAD, PAST_KEY, PAST_VALUE, K, Q, softmax_dtype
from ..ops.attention import V as VALUE
from .bound import Bound, Call, KernelRequest, NotNative, V, W
from .impl import BindContext, StepImpl, fallback_calls
from .options import CompileOptions

NO_INTS = np.zeros(4, np.int64)


def _heads_strides(shape: tuple[int, ...], heads: int) -> tuple[tuple[int, int, int, int], int]:
    """Element strides of the (batch, heads, seq, size) view of a C-contiguous 3-D or 4-D array, and the size."""
    if len(shape) == 4:
        _, h, s, d = shape
        return (h * s * d, s * d, d, 1), d
    _, s, hidden = shape
    d = hidden // heads
    return (s * hidden, d, hidden, 1), d


def _broadcast_strides(shape: tuple[int, ...]) -> np.ndarray:
    """Element strides of a C-contiguous mask of ``shape`` read as (batch, heads, q_seq, keys), 0 where it
    broadcasts (a missing leading axis or a dim of 1)."""
    full = (1,) * (4 - len(shape)) + tuple(shape)
    strides, step = [], 1
    for d in reversed(full):
        strides.append(step if d != 1 else 0)
        step *= d
    return np.array(list(reversed(strides)), np.int64)


class AttentionImpl(StepImpl):
    """Attention through ``tlc.kernels.attention`` (see the module docstring)."""

    mode = "native"
    reason = "Q K^T and P V by BLAS per (batch, head), masked softmax compiled"

    def __init__(self, attrs: dict[str, Any], node: Node, options: CompileOptions):
        if node.num_outputs > 3:
            raise NotNative("qk_matmul_output (a 4th output) runs the reference")
        if not blas.AVAILABLE:
            raise NotNative(f"numpy's BLAS cannot be called from compiled code: {blas.REASON}")
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        a = self.attrs
        if not ctx.options.jit_enabled:
            raise NotNative("jit='off': the attention loop is compiled code")
        dtype = ctx.out_dtype()
        floats = [t.dtype for i, t in enumerate(ctx.in_types) if t is not None and i in (Q, K, VALUE, PAST_KEY,
                                                                                          PAST_VALUE)]
        if dtype not in (np.float32, np.float64) or any(np_dtype(d) != dtype for d in floats):
            raise NotNative(f"Attention of {', '.join(floats)} runs the reference (native: float32 and float64, "
                            f"one dtype)")
        if softmax_dtype(a["softmax_precision"], str(dtype)) != str(dtype):
            raise NotNative(f"softmax_precision {a['softmax_precision']} differs from Q's {dtype}")
        shapes = ctx.in_shapes()
        q_shape, k_shape, v_shape = shapes[Q], shapes[K], shapes[VALUE]
        has = [i < len(shapes) and shapes[i] is not None for i in range(7)]
        three_d = len(q_shape) == 3
        q_heads = a["q_num_heads"] if three_d else q_shape[1]
        kv_heads = a["kv_num_heads"] if three_d else k_shape[1]
        qs, head = _heads_strides(q_shape, q_heads)
        ks, _ = _heads_strides(k_shape, kv_heads)
        vs, v_head = _heads_strides(v_shape, kv_heads)
        batch, q_seq = q_shape[0], (q_shape[1] if three_d else q_shape[2])
        kv_seq = k_shape[1] if three_d else k_shape[2]
        past = shapes[PAST_KEY][2] if has[PAST_KEY] else 0
        total = past + kv_seq
        if q_heads % kv_heads or 0 in (batch, q_heads, q_seq, head, v_head):
            raise NotNative(f"{q_heads} query heads over {kv_heads} key/value heads, or an empty dimension")
        ys = (q_seq * q_heads * v_head, v_head, q_heads * v_head, 1) if three_d else \
            (q_heads * q_seq * v_head, q_seq * v_head, v_head, 1)
        scale = a["scale"] if a["scale"] is not None else 1.0 / float(np.sqrt(head))
        macs = batch * q_heads * q_seq * total * (head + v_head)
        nparts = kattn.parts_for(batch * q_heads, macs, ctx.threads)
        geo = kattn.Geometry(batch, q_heads, q_heads // kv_heads, q_seq, total, head, v_head, float(scale),
                             float(a["softcap"]), bool(a["is_causal"]), int(a["left_window_size"]),
                             int(a["right_window_size"]), nparts, kattn.uses_panel(dtype, v_head, total))
        work = [((nparts, q_seq, total), dtype)]
        outs = list(ctx.outputs)
        presents: list[Any] = []
        if has[PAST_KEY] or len(outs) > 1:
            for port, size in ((1, head), (2, v_head)):
                if len(outs) > port:
                    presents.append(V(outs[port]))
                else:
                    work.append(((batch, kv_heads, total, size), dtype))
                    presents.append(W(len(work) - 1))
        mask = None
        if has[MASK]:
            const = ctx.const(MASK)
            mask = _mask_arrays(const, dtype, total) if const is not None else V(ctx.inputs[MASK])
        layout = _Layout(geo, np.array(qs, np.int64), np.array(ks, np.int64), np.array(vs, np.int64),
                         np.array(ys, np.int64), three_d, kv_heads, past, dtype)
        args = (layout, V(ctx.inputs[Q]), V(ctx.inputs[K]), V(ctx.inputs[VALUE]), mask,
                V(ctx.inputs[PAST_KEY]) if has[PAST_KEY] else None,
                V(ctx.inputs[PAST_VALUE]) if has[PAST_VALUE] else None,
                V(ctx.inputs[NONPAD]) if has[NONPAD] else None, V(outs[0]), *presents)
        native = [Call(run_attention, args, {"scores": W(0)})]
        note = (f"Q K^T by BLAS, P V by {'panels' if geo.panel else 'BLAS'}, compiled softmax, {nparts} part(s)"
                + (", KV cache" if has[PAST_KEY] else ""))
        return Bound(fallback_calls(ctx), mode="native", workspace=work, blas=True, note=note,
                     request=KernelRequest("attention", lambda alias: kattn.warm(dtype, nparts),
                                           lambda kern, alias: native))


class _Layout:
    """What ``run_attention`` needs besides the arrays, fixed per input-shape signature."""

    def __init__(self, geo: kattn.Geometry, qs, ks, vs, ys, three_d: bool, kv_heads: int, past: int, dtype):
        self.geo, self.qs, self.ks, self.vs, self.ys = geo, qs, ks, vs, ys
        self.three_d, self.kv_heads, self.past, self.dtype = three_d, kv_heads, past, dtype
        self.offset = np.full(geo.batch, past, np.int64)
        self.limit = np.full(geo.batch, geo.total, np.int64)
        self.present_strides = [np.array([kv_heads * geo.total * d, geo.total * d, d, 1], np.int64)
                                for d in (geo.head, geo.v_head)]


def _mask_arrays(mask: np.ndarray, dtype, total: int) -> tuple:
    """(bias, bias strides, bias width, allow, allow strides, allow width) of a bool or additive mask."""
    if mask.shape and mask.shape[-1] > total:
        raise ValueError(f"attn_mask's last axis has {mask.shape[-1]} keys, more than the {total} there are")
    width = mask.shape[-1] if mask.ndim else total
    strides = _broadcast_strides(mask.shape)
    flat = np.ascontiguousarray(mask).reshape(-1)
    if mask.dtype == np.bool_:
        return np.zeros(0, dtype), NO_INTS, 0, flat.view(np.uint8), strides, width
    return flat.astype(dtype, copy=False), strides, width, np.zeros(0, np.uint8), NO_INTS, 0


def _kv(layout: _Layout, new: np.ndarray, past: np.ndarray | None, present: np.ndarray | None, which: int,
        strides: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys (or values) the products read: the input itself, or past ++ new written into ``present``."""
    if present is None:
        return new.reshape(-1), strides
    view = new
    if layout.three_d:
        view = new.reshape(new.shape[0], new.shape[1], layout.kv_heads, -1).transpose(0, 2, 1, 3)
    if past is not None:
        present[:, :, :layout.past] = past
    present[:, :, layout.past:] = view
    return present.reshape(-1), layout.present_strides[which]


def run_attention(layout: _Layout, q, k, v, mask, past_key, past_value, nonpad, y, present_key=None,
                  present_value=None, *, scores) -> None:
    """One run of the step: the KV cache written, the mask flattened, then ``tlc.kernels.attention.run``."""
    g = layout.geo
    kf, ks = _kv(layout, k, past_key, present_key, 0, layout.ks)
    vf, vs = _kv(layout, v, past_value, present_value, 1, layout.vs)
    if mask is None:
        bias, bstr, bwidth, allow, astr, awidth = np.zeros(0, layout.dtype), NO_INTS, 0, np.zeros(0, np.uint8), \
            NO_INTS, 0
    elif isinstance(mask, tuple):
        bias, bstr, bwidth, allow, astr, awidth = mask
    else:
        bias, bstr, bwidth, allow, astr, awidth = _mask_arrays(mask, layout.dtype, g.total)
    offset, limit = layout.offset, layout.limit
    if nonpad is not None:
        limit = nonpad.astype(np.int64)
        offset = limit - g.q_seq
    kattn.run(g, q.reshape(-1), kf, vf, y.reshape(-1), layout.qs, ks, vs, layout.ys, offset, limit, bias, bstr,
              bwidth, allow, astr, awidth, scores)
