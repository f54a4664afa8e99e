"""QDQ products to quantized ops (-O2): ``Q(Conv(DQ(x), DQ(w), DQ(b)))`` -> QLinearConv, ``Q(MatMul(DQ(a),
DQ(b)))`` -> QLinearMatMul, each optionally with a Relu before the QuantizeLinear.

This is the form quantization tools write (onnxruntime's ``quantize_static`` in QDQ format): the float graph
with DequantizeLinear on every input of a product and QuantizeLinear on its output. The rewrite computes the
product on the integers: the accumulation is exact, and the result is requantized once, rounding half to even
and saturating (``tlc.ops.quant``). The float graph computes the same real value with float32 rounding in the
sums, so the two agree except where that value lies within float error of a rounding boundary: at most one
quantization step, as onnxruntime's own QDQ fusion (which does the same rewrite at its basic level).

What fires (and otherwise the check says why):

- the activation: DequantizeLinear of a uint8/int8 value with a constant per-tensor float32 scale (and zero
  point); the output: QuantizeLinear to uint8/int8 with a constant per-tensor float32 scale;
- the weight: DequantizeLinear of a uint8/int8 constant, per tensor or per output channel (Conv: axis 0; MatMul:
  the last axis of a 2-D B, per column), or a float constant: ``fold`` evaluates DequantizeLinear of a constant
  weight before ``simplify`` runs, so at -O1 and above the weight arrives as floats. The integer weight is then
  recovered as symmetric int8 per channel (scale max|w| / 127 or / 128, within two ulps) and used only when
  ``q * scale`` gives back every float weight bit for bit, i.e. when the rewrite computes with exactly the
  weights the QDQ graph dequantizes. A MatMul's B may also be a runtime DequantizeLinear (per-tensor);
- the Conv bias (optional): an int32 DequantizeLinear or a float constant, requantized to int32 with scale
  ``x_scale * w_scale`` as onnxruntime's quantizer writes it (kept as it is where its scale is already that);
  rounding moves it by at most half an accumulator unit, far below an output step;
- a Relu between the product and the QuantizeLinear only when the output zero point is the type's minimum:
  then the saturation at the bottom of the range is the Relu, exactly.

Left alone: MatMul + Add (QLinearMatMul has no bias; quantizers put a QuantizeLinear between them anyway),
Gemm, ConvTranspose, float8/int4/int16 types, blocked or per-row parameters, runtime scales, asymmetric or
otherwise irrecoverable folded weights.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Value
from ..rewrite import Builder, Const, Match, OneOf, Op, Opt, Rule, RuleSet, Var

BYTES = ("uint8", "int8")
INT32_MAX = 2**31 - 1
#: ulps around max|w| / divisor tried when recovering a folded weight's scale
_ULPS = (0, -1, 1, -2, 2)


def _dq(prefix: str, data) -> Op:
    return Op("DequantizeLinear", data, Const(name=f"{prefix}_scale"), Opt(Const(name=f"{prefix}_zero")),
              name=f"{prefix}_dq", shared=True)


def _quantized(product: Op) -> Op:
    inner = OneOf(Op("Relu", product, name="relu"), product)
    return Op("QuantizeLinear", inner, Const(name="y_scale"), Opt(Const(name="y_zero")), name="q")


def _folded(name: str) -> Op:
    """A constant, as an op pattern: the matcher's producer pre-filter skips a ``Const`` inside a ``OneOf``."""
    return Op("Constant", name=name)


_X = _dq("x", Var("x_q", dtype=BYTES))
_CONV = Op("Conv", _X, OneOf(_dq("w", Const(name="w_q")), _folded("w_f")),
           Opt(OneOf(_dq("b", Const(name="b_q")), _folded("b_f"))), name="conv")
_MATMUL = Op("MatMul", _X, OneOf(_dq("w", Var("w_q", dtype=BYTES)), _folded("w_f")), name="mm")


# ---------------------------------------------------------------------------- checks
def _param_reason(m: Match, prefix: str, per_tensor: bool = True) -> str | None:
    """A reason unless the DequantizeLinear/QuantizeLinear ``prefix`` has a float32 scale (one value when
    ``per_tensor``), a zero point of its shape, and no blocked or dtype-changing attributes."""
    node = m.node("q" if prefix == "y" else f"{prefix}_dq")
    attrs = m.attrs("q" if prefix == "y" else f"{prefix}_dq")
    scale, zero = m.const(f"{prefix}_scale"), m.const(f"{prefix}_zero")
    if attrs.get("block_size", 0) or attrs.get("precision", 0):
        return f"{node.op} {node.name!r} is blocked or has a precision: not a plain linear quantization"
    if scale.dtype != np.float32:
        return f"{node.op} {node.name!r} has a {scale.dtype} scale; QLinear ops take float32"
    if per_tensor and scale.size != 1:
        return f"{node.op} {node.name!r} has {scale.size} scales; only a per-tensor one is rewritten here"
    if zero is not None and zero.size != scale.size:
        return f"{node.op} {node.name!r}: zero point of {zero.size} values for {scale.size} scales"
    return None


def _io_reason(m: Match) -> str | None:
    """The activation's DequantizeLinear, the output's QuantizeLinear and the Relu."""
    for prefix in ("x", "y"):
        reason = _param_reason(m, prefix)
        if reason:
            return reason
    out = m.graph.type_of(m.root.output(0))
    if out is None or out.dtype not in BYTES:
        return f"QuantizeLinear gives {None if out is None else out.dtype}, not uint8/int8"
    dq = m.type("x_dq")
    if dq is None or dq.dtype != "float32":
        return f"the activation dequantizes to {None if dq is None else dq.dtype}, not float32"
    if "relu" in m.nodes:
        zero = m.const("y_zero")
        y_zero, lowest = (0 if zero is None else int(zero.reshape(-1)[0])), int(np.iinfo(out.dtype).min)
        if y_zero != lowest:
            return f"a Relu before an output zero point of {y_zero} (not {lowest}): the saturation is not the Relu"
    return None


def _weight(m: Match, axis: int, rank: int) -> tuple[np.ndarray | None, np.ndarray, np.ndarray] | str:
    """(integer weight or None for a runtime one, scale, zero point), or a reason. ``axis``: the channel axis."""
    if "w_dq" in m.nodes:
        reason = _param_reason(m, "w", per_tensor=False)
        if reason:
            return reason
        scale, zero = m.const("w_scale"), m.const("w_zero")
        q = m.const("w_q")
        if scale.size > 1:
            dq_axis = m.attrs("w_dq")["axis"] % rank
            if dq_axis != axis or q is None:
                return f"the weight is quantized along axis {dq_axis}; only per output channel (axis {axis})"
        if zero is None:
            zero = np.zeros(scale.shape, m.type("w_q").dtype)
        return q, scale, zero
    found = recover_int8(m.const("w_f"), axis)
    if found is None:
        return "the float weight is not symmetric int8 times a per-channel scale, bit for bit"
    return found


def recover_int8(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(q int8, scale float32 [C], zero int8 [C]) with ``float32(q) * scale == w`` exactly, per channel along
    ``axis`` (a folded symmetric DequantizeLinear), or None."""
    if w.dtype != np.float32 or w.ndim <= axis or w.size == 0:
        return None
    rows = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    amax = np.abs(rows).max(axis=1)
    scale = np.where(amax > 0, np.float32(0), np.float32(1)).astype(np.float32)
    done = amax == 0
    for divisor in (127, 128):
        base = (amax / np.float32(divisor)).astype(np.float32)
        for ulps in _ULPS:
            trial = base
            for _ in range(abs(ulps)):
                trial = np.nextafter(trial, np.float32(np.inf if ulps > 0 else 0)).astype(np.float32)
            safe = np.where(done | (trial == 0), np.float32(1), trial)
            q = np.rint(rows / safe[:, None])
            fits = ((q >= -128) & (q <= 127)).all(axis=1)
            exact = ((q.astype(np.float32) * safe[:, None]) == rows).all(axis=1)
            good = fits & exact & ~done
            scale[good] = trial[good]
            done |= good
        if done.all():
            break
    if not done.all():
        return None
    shape = [-1 if i == axis else 1 for i in range(w.ndim)]
    q = np.rint(w / scale.reshape(shape)).astype(np.int8)
    return q, scale, np.zeros(scale.shape, np.int8)


def _int_bias(m: Match, x_scale: float, w_scale: np.ndarray, channels: int) -> np.ndarray | str | None:
    """The Conv bias as int32 with scale x_scale * w_scale (None without a bias), or a reason."""
    if "b_dq" not in m and "b_f" not in m:
        return None
    acc_scale = (np.float32(x_scale) * w_scale.astype(np.float32)).astype(np.float32)
    acc_scale = np.broadcast_to(acc_scale.reshape(-1), (channels,))
    if "b_dq" in m.nodes:
        b_q, scale, zero = m.const("b_q"), m.const("b_scale"), m.const("b_zero")
        if b_q.dtype != np.int32 or m.attrs("b_dq").get("block_size", 0):
            return f"the bias is {b_q.dtype} (blocked or not int32)"
        if (zero is None or not zero.any()) and np.array_equal(np.broadcast_to(scale.reshape(-1), (channels,)),
                                                              acc_scale) and b_q.size == channels:
            return b_q.reshape(channels)   # as the quantizer wrote it
        real = (b_q.astype(np.float64) - (0 if zero is None else zero.astype(np.float64))) * scale.astype(np.float64)
    else:
        real = m.const("b_f").astype(np.float64)
    if real.size != channels:
        return f"the bias has {real.size} values for {channels} channels"
    q = np.rint(real.reshape(channels) / acc_scale.astype(np.float64))
    if np.abs(q).max(initial=0) > INT32_MAX:
        return "the bias does not fit int32 at scale x_scale * w_scale"
    return q.astype(np.int32)


# ---------------------------------------------------------------------------- rules
def _conv_check(m: Match) -> str | None:
    reason = _io_reason(m)
    if reason:
        return reason
    conv = m.type("conv")
    if conv.dtype != "float32" or conv.shape is None or not isinstance(conv.shape[1], int):
        return f"the Conv gives {conv}: not float32 with a known channel count"
    found = _weight(m, 0, len(conv.shape))
    if isinstance(found, str):
        return found
    q, scale, _ = found
    if q is None:
        return "the Conv weight is not a constant"
    bias = _int_bias(m, float(m.const("x_scale").reshape(-1)[0]), scale, q.shape[0])
    return bias if isinstance(bias, str) else None


def _matmul_check(m: Match) -> str | None:
    reason = _io_reason(m)
    if reason:
        return reason
    if m.type("mm").dtype != "float32":
        return "the MatMul is not float32"
    w_type = m.type("w_q") if "w_q" in m else m.type("w_f")
    rank = w_type.rank if w_type is not None else None
    if rank is None:
        return "the rank of B is unknown"
    found = _weight(m, rank - 1, rank)
    if isinstance(found, str):
        return found
    if found[1].size > 1 and rank != 2:
        return f"a per-column B of rank {rank}: QLinearMatMul's per-column parameters need a 2-D B"
    return None


def _io(m: Match, b: Builder) -> tuple[Value, Value, Value, Value]:
    """(x_scale, x_zero, y_scale, y_zero) as values (a zero constant for an absent zero point)."""
    x_zero = m.get("x_zero") or b.constant(np.zeros((), m.type("x_q").dtype))
    out = m.graph.type_of(m.root.output(0)).dtype
    y_zero = m.get("y_zero") or b.constant(np.zeros((), out))
    return m["x_scale"], x_zero, m["y_scale"], y_zero


def _weight_values(m: Match, b: Builder, axis: int, rank: int) -> tuple[Value, Value, Value, np.ndarray]:
    q, scale, zero = _weight(m, axis, rank)
    if "w_dq" in m.nodes:
        w_zero = m.get("w_zero") or b.constant(zero)
        return m["w_q"], m["w_scale"], w_zero, scale
    return b.constant(q), b.constant(scale), b.constant(zero), scale


def _conv_rewrite(m: Match, b: Builder):
    x_scale, x_zero, y_scale, y_zero = _io(m, b)
    shape = m.type("conv").shape
    w, w_scale, w_zero, scale = _weight_values(m, b, 0, len(shape))
    channels = int(shape[1])
    bias = _int_bias(m, float(m.const("x_scale").reshape(-1)[0]), scale, channels)
    inputs = [m["x_q"], x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero]
    if bias is not None:
        inputs.append(b.constant(bias))
    return b.op("QLinearConv", *inputs, **dict(m.node("conv").attrs))


def _matmul_rewrite(m: Match, b: Builder):
    x_scale, x_zero, y_scale, y_zero = _io(m, b)
    rank = (m.type("w_q") if "w_q" in m else m.type("w_f")).rank
    w, w_scale, w_zero, _ = _weight_values(m, b, rank - 1, rank)
    return b.op("QLinearMatMul", m["x_q"], x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero)


RULES = RuleSet("qdq", (
    Rule("qdq-conv", _quantized(_CONV), _conv_rewrite, _conv_check, min_level=2, produces=("QLinearConv",),
         description="Q(Conv(DQ(x), DQ(w), DQ(b)) [+ Relu]) -> QLinearConv (int32 bias at x_scale * w_scale)"),
    Rule("qdq-matmul", _quantized(_MATMUL), _matmul_rewrite, _matmul_check, min_level=2,
         produces=("QLinearMatMul",), description="Q(MatMul(DQ(a), DQ(b)) [+ Relu]) -> QLinearMatMul"),
), "QDQ products to QLinearConv / QLinearMatMul")
