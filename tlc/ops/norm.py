"""Normalisations: BatchNormalization (inference), LayerNormalization, RMSNormalization, InstanceNormalization,
GroupNormalization, LRN, LpNormalization and MeanVarianceNormalization.

Statistics are two-pass (mean, then the mean of squared deviations) in the op's stash type (float32 unless
stash_type says otherwise) or, for ops without one, in the input type with float16 raised to float32, which is
what onnxruntime's kernels do. BatchNormalization folds its parameters into one per-channel scale and shift.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node
from ..ir.types import DTYPE_OF_ONNX_CODE, FLOAT_DTYPES, TensorType
from . import expr as E
from .infer import broadcast_shapes, normalize_axes, normalize_axis
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register
from .rowform import RowBuilder, check_last_axis, row_input

NORM_TRAITS = frozenset({Trait.PURE, Trait.FOLDABLE, Trait.REDUCTION})
CHANNEL_NORM_TRAITS = NORM_TRAITS | {Trait.LAYOUT_SENSITIVE}


def accumulate_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel vector against X (N, C, ...)."""
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _float_input(ctx: InferContext) -> TensorType:
    x = ctx.type(0)
    if x.dtype not in FLOAT_DTYPES:
        ctx.fail(f"X has dtype {x.dtype}; {ctx.node.op} takes float types")
    return x


def _check_channel_params(ctx: InferContext, first: int, channels, what: str = "one value per channel") -> None:
    """Inputs ``first``.. are per-channel vectors of length ``channels``."""
    for i in range(first, ctx.num_inputs):
        if not ctx.has_input(i):
            continue
        t = ctx.type(i)
        if t.shape is None:
            continue
        if len(t.shape) != 1 or (isinstance(channels, int) and isinstance(t.shape[0], int) and t.shape[0] != channels):
            ctx.fail(f"input {i} is {t}, expected shape [{channels}] ({what})")


# ---------------------------------------------------------------------------- BatchNormalization
def _batch_norm_infer(ctx: InferContext) -> list[TensorType]:
    training = bool(ctx.attrs["training_mode"])
    if ctx.node.num_outputs > 1 and not training:
        ctx.fail(f"{ctx.node.num_outputs} outputs; running_mean and running_var exist only in training mode")
    if ctx.node.num_outputs > 3:
        ctx.fail(f"{ctx.node.num_outputs} outputs; BatchNormalization has at most 3 (Y, running_mean, running_var)")
    x = _float_input(ctx)
    if x.rank is not None and x.rank < 2:
        ctx.fail(f"X {x} must have rank >= 2 (N, C, ...)")
    channels = None if x.shape is None else x.shape[1]
    _check_channel_params(ctx, 1, channels)
    running = TensorType(ctx.type(3).dtype, (channels,))
    return [x, running, running][: max(1, ctx.node.num_outputs)]


def batch_norm(x, scale, bias, mean, var, *, epsilon: float, momentum: float,
               training_mode: int) -> np.ndarray | list[np.ndarray]:
    """Inference mode: x * a + b with a = scale / sqrt(var + eps), b = bias - mean * a. Training mode: the same
    with the batch's own mean and (population) variance over every axis but the channels, and the running
    statistics ``mean * momentum + batch mean * (1 - momentum)`` (and so for var) as outputs 2 and 3."""
    channels = x.shape[1] if x.ndim > 1 else None
    for name, p in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        if p.shape != (channels,):   # as inference says ([1] broadcast here; fuzz seed 803984)
            raise ValueError(f"{name} has shape {list(p.shape)}, expected [{channels}] (X's channels)")
    if training_mode:
        axes = (0,) + tuple(range(2, x.ndim))
        wide = x.astype(np.float64)
        batch_mean, batch_var = wide.mean(axis=axes), wide.var(axis=axes)
        y = batch_norm(x, scale, bias, batch_mean, batch_var, epsilon=epsilon, momentum=momentum, training_mode=0)
        running_mean = mean.astype(np.float64) * momentum + batch_mean * (1 - momentum)
        running_var = var.astype(np.float64) * momentum + batch_var * (1 - momentum)
        return [y, running_mean.astype(mean.dtype), running_var.astype(var.dtype)]
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    b = bias.astype(np.float64) - mean.astype(np.float64) * a
    shape = _channel_shape(x)
    return (x * a.astype(x.dtype).reshape(shape) + b.astype(x.dtype).reshape(shape)).astype(x.dtype, copy=False)


register(OpDef(name="BatchNormalization", infer=_batch_norm_infer, reference=batch_norm, inputs=(5, 5),
               outputs=lambda attrs, n: 3 if attrs.get("training_mode") else 1,
               attrs={"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9), "training_mode": Attr("int", 0)},
               traits=frozenset({Trait.PURE, Trait.FOLDABLE, Trait.LAYOUT_SENSITIVE}), cost=2,
               doc="Batch normalisation over the channel axis (NCHW): with the given statistics (inference), or "
                   "with the batch's, returning the updated running statistics (training_mode=1)."))


# ---------------------------------------------------------------------------- LayerNormalization
def _stash_dtype(code: int) -> str:
    name = DTYPE_OF_ONNX_CODE.get(int(code))
    if name not in FLOAT_DTYPES:
        raise ValueError(f"stash_type {code} is not a float type tlc holds (1 = float32, 10 = float16, 11 = float64)")
    return name


def _layer_norm_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_input(ctx)
    if ctx.node.num_outputs > 3:
        ctx.fail(f"{ctx.node.num_outputs} outputs; LayerNormalization has at most 3 (Y, Mean, InvStdDev)")
    try:
        stash = _stash_dtype(ctx.attrs["stash_type"])
    except ValueError as exc:
        ctx.fail(str(exc))
    if x.shape is None:
        return [x] + [TensorType(stash, None)] * (ctx.node.num_outputs - 1)
    axis = normalize_axis(ctx.attrs["axis"], x.rank, ctx)
    for i in (1, 2):
        if ctx.has_input(i) and ctx.type(i).shape is not None:
            norm, shape = tuple(x.shape[axis:]), ctx.type(i).shape
            try:  # one way: to the normalised dims, never widening them (Y has X's shape)
                ok = len(shape) <= len(norm) and broadcast_shapes(norm, shape) == norm
            except Exception:
                ok = False
            if not ok:
                ctx.fail(f"input {i} {ctx.type(i)} does not broadcast to the normalised dims {list(norm)}")
    stats = TensorType(stash, tuple(x.shape[:axis]) + (1,) * (x.rank - axis))
    return [x] + [stats] * (ctx.node.num_outputs - 1)


def layer_norm(x, scale, bias=None, *, axis: int, epsilon: float, stash_type: int) -> list[np.ndarray]:
    """[Y, Mean, InvStdDev]; statistics in the stash type, the affine part in X's type (the ONNX function)."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    xs = x.astype(_stash_dtype(stash_type), copy=False)
    mean = xs.mean(axis=axes, keepdims=True)
    dev = xs - mean
    inv_std = 1 / np.sqrt((dev * dev).mean(axis=axes, keepdims=True) + np.asarray(epsilon, xs.dtype))
    y = (dev * inv_std).astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype, copy=False), mean, inv_std]


def _narrow_stash(b: RowBuilder, node: Node, attrs: dict, dtype: str) -> None:
    """A row kernel computes in X's type; float64 X with a float32 ``stash_type`` (the default) has ONNX's function
    compute the statistics in float32, 5e-8 from the float64 kernel (fuzz seed 809897): the reference runs it."""
    if dtype == "float64" and _stash_dtype(attrs["stash_type"]) != "float64":
        b.fail(node, f"float64 input with stash_type {attrs['stash_type']} (statistics in "
                     f"{_stash_dtype(attrs['stash_type'])}); a row kernel computes in float64")


def _layer_norm_row(b: RowBuilder, node: Node, attrs: dict) -> list[str]:
    """Y = (x - mean) * InvStdDev * scale + bias, with the variance from a second pass over x - mean."""
    X, Y, Z = E.arg(0), E.arg(1), E.arg(2)
    x, dtype, rank = row_input(b, node, True)
    _narrow_stash(b, node, attrs, dtype)
    check_last_axis(b, node, [attrs["axis"]], rank)
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


register(OpDef(name="LayerNormalization", infer=_layer_norm_infer, reference=layer_norm, inputs=(2, 3),
               attrs={"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5), "stash_type": Attr("int", 1)},
               traits=NORM_TRAITS | {Trait.ROW_REDUCIBLE}, cost=8,
               row_form=_layer_norm_row,
               doc="Normalise over the dims from `axis` on; also gives Mean, InvStdDev."))


# ---------------------------------------------------------------------------- RMSNormalization
def _rms_norm_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_input(ctx)
    scale = ctx.type(1)
    if scale.dtype not in FLOAT_DTYPES:
        ctx.fail(f"scale has dtype {scale.dtype}; RMSNormalization takes float types")
    try:
        _stash_dtype(ctx.attrs["stash_type"])
    except ValueError as exc:
        ctx.fail(str(exc))
    if x.shape is None:
        return [TensorType(scale.dtype, None)]
    normalize_axis(ctx.attrs["axis"], x.rank, ctx)
    if scale.shape is not None:
        try:
            ok = len(scale.shape) <= x.rank and broadcast_shapes(x.shape, scale.shape) == x.shape
        except Exception:
            ok = False
        if not ok:
            ctx.fail(f"scale {scale} does not broadcast to X {x} (scale must broadcast one way, to X)")
    return [TensorType(scale.dtype, x.shape)]


def rms_norm(x, scale, *, axis: int, epsilon: float, stash_type: int) -> np.ndarray:
    """X / sqrt(mean(X^2) + epsilon) over the dims from ``axis`` on, in the stash type; back in X's type, then
    times scale (the result in scale's type, the ONNX function's order of casts)."""
    if scale.ndim > x.ndim or np.broadcast_shapes(x.shape, scale.shape) != x.shape:  # as inference says
        raise ValueError(f"scale {list(scale.shape)} does not broadcast to X {list(x.shape)} (one way, to X)")
    axes = tuple(range(axis % x.ndim, x.ndim))
    xs = x.astype(_stash_dtype(stash_type), copy=False)
    rms = np.sqrt((xs * xs).mean(axis=axes, keepdims=True) + np.asarray(epsilon, xs.dtype))
    return ((xs / rms).astype(x.dtype) * scale).astype(scale.dtype, copy=False)


def _rms_norm_row(b: RowBuilder, node: Node, attrs: dict) -> list[str]:
    """Y = x / sqrt(sum(x * x) / length + epsilon) * scale, one pass over the row."""
    X, Y = E.arg(0), E.arg(1)
    x, dtype, rank = row_input(b, node, True)
    _narrow_stash(b, node, attrs, dtype)
    check_last_axis(b, node, [attrs["axis"]], rank)
    scale_value = b.body.inputs_of(node)[1]
    if b.type_of(scale_value).dtype != dtype:
        b.fail(node, f"scale has dtype {b.type_of(scale_value).dtype}, X {dtype}; a row kernel needs one dtype")
    mean_square = b.add_op(X / Y, [b.add_reduce(b.add_op(X * X, [x], dtype), "sum"), b.row_length(dtype)], dtype)
    inv_rms = b.add_op(1.0 / E.sqrt(X + float(attrs["epsilon"])), [mean_square], dtype)
    return [b.add_op(X * Y * E.arg(2), [x, inv_rms, b.var_of[scale_value]], dtype)]


register(OpDef(name="RMSNormalization", infer=_rms_norm_infer, reference=rms_norm, inputs=(2, 2),
               attrs={"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5), "stash_type": Attr("int", 1)},
               traits=NORM_TRAITS | {Trait.ROW_REDUCIBLE}, cost=6, row_form=_rms_norm_row,
               doc="Root-mean-square normalisation over the dims from `axis` on, then a scale (opset 23)."))


# ---------------------------------------------------------------------------- Instance / Group normalisation
def _instance_norm_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_input(ctx)
    if x.rank is not None and x.rank < 3:
        ctx.fail(f"X {x} must have rank >= 3 (N, C, spatial...)")
    _check_channel_params(ctx, 1, None if x.shape is None else x.shape[1])
    return [x]


def _standardize(xs: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    mean = xs.mean(axis=axes, keepdims=True)
    dev = xs - mean
    return dev / np.sqrt((dev * dev).mean(axis=axes, keepdims=True) + np.asarray(epsilon, xs.dtype))


def instance_norm(x, scale, bias, *, epsilon: float) -> np.ndarray:
    xs = x.astype(accumulate_dtype(x.dtype), copy=False)
    y = _standardize(xs, tuple(range(2, x.ndim)), epsilon)
    return (y * scale.reshape(_channel_shape(x)) + bias.reshape(_channel_shape(x))).astype(x.dtype)


register(OpDef(name="InstanceNormalization", infer=_instance_norm_infer, reference=instance_norm, inputs=(3, 3),
               attrs={"epsilon": Attr("float", 1e-5)}, traits=CHANNEL_NORM_TRAITS, cost=8,
               doc="Normalise each (n, c) plane over its spatial axes, then scale and shift per channel."))


def _group_norm_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_input(ctx)
    groups = ctx.attrs["num_groups"]
    try:
        _stash_dtype(ctx.attrs["stash_type"])
    except ValueError as exc:
        ctx.fail(str(exc))
    if x.rank is not None and x.rank < 3:
        ctx.fail(f"X {x} must have rank >= 3 (N, C, spatial...)")
    channels = None if x.shape is None else x.shape[1]
    if groups < 1 or (isinstance(channels, int) and channels % groups):
        ctx.fail(f"num_groups {groups} does not divide the {channels} channels of X {x}")
    scale = ctx.type(1).shape
    if scale is not None and scale == (groups,) and channels != groups:
        channels = groups  # opset 18's per-group scale and bias (onnx's version converter keeps them)
    _check_channel_params(ctx, 1, channels, "one value per channel, or per group as in opset 18")
    return [x]


def group_norm(x, scale, bias, *, epsilon: float, num_groups: int, stash_type: int) -> np.ndarray:
    """Opset-21 GroupNormalization; scale and bias of length num_groups (opset 18) apply to each group."""
    if x.ndim < 3:  # as inference says (reached at run time when the rank was unknown)
        raise ValueError(f"X of shape {list(x.shape)} must have rank >= 3 (N, C, spatial...)")
    n, c = x.shape[:2]
    xs = x.astype(_stash_dtype(stash_type), copy=False).reshape(n, num_groups, -1)
    y = _standardize(xs, (2,), epsilon).reshape(x.shape).astype(x.dtype)
    if scale.size == num_groups != c:
        scale, bias = np.repeat(scale, c // num_groups), np.repeat(bias, c // num_groups)
    return (y * scale.reshape(_channel_shape(x)) + bias.reshape(_channel_shape(x))).astype(x.dtype)


register(OpDef(name="GroupNormalization", infer=_group_norm_infer, reference=group_norm, inputs=(3, 3),
               attrs={"epsilon": Attr("float", 1e-5), "num_groups": Attr("int", REQUIRED),
                      "stash_type": Attr("int", 1)},
               traits=CHANNEL_NORM_TRAITS, cost=8,
               doc="Normalise each group of channels over the group and the spatial axes (opset 21)."))


# ---------------------------------------------------------------------------- LRN
def _lrn_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_input(ctx)
    if ctx.attrs["size"] < 1:
        ctx.fail(f"size must be >= 1, got {ctx.attrs['size']}")
    if x.rank is not None and x.rank < 3:
        ctx.fail(f"X {x} must have rank >= 3 (N, C, spatial...)")
    return [x]


def lrn(x, *, alpha: float, beta: float, bias: float, size: int) -> np.ndarray:
    """Local response normalisation across channels: a sum of `size` shifted squares, one slice per shift."""
    acc = x.astype(accumulate_dtype(x.dtype), copy=False)
    sq = acc * acc
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    channels = x.shape[1]
    total = padded[:, 0:channels].copy()
    for shift in range(1, size):
        total += padded[:, shift:shift + channels]
    denom = (np.asarray(bias, acc.dtype) + np.asarray(alpha / size, acc.dtype) * total) ** np.asarray(beta, acc.dtype)
    return (acc / denom).astype(x.dtype)


register(OpDef(name="LRN", infer=_lrn_infer, reference=lrn,
               attrs={"alpha": Attr("float", 1e-4), "beta": Attr("float", 0.75), "bias": Attr("float", 1.0),
                      "size": Attr("int", REQUIRED)},
               traits=CHANNEL_NORM_TRAITS, cost=10, doc="Local response normalisation across channels (NCHW)."))


# ---------------------------------------------------------------------------- Lp / mean-variance normalisation
def _lp_norm_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_input(ctx)
    if ctx.attrs["p"] not in (1, 2):
        ctx.fail(f"p must be 1 or 2, got {ctx.attrs['p']}")
    if x.rank is not None:
        normalize_axis(ctx.attrs["axis"], x.rank, ctx)
    return [x]


def lp_norm(x, *, axis: int, p: int) -> np.ndarray:
    """x / ||x||_p along ``axis``; 0 where the norm is 0 (as the ONNX reference does)."""
    acc = x.astype(accumulate_dtype(x.dtype), copy=False)
    norm = np.sum(np.abs(acc) if p == 1 else acc * acc, axis=axis, keepdims=True)
    if p == 2:
        norm = np.sqrt(norm)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norm == 0, 0, acc / norm).astype(x.dtype)


register(OpDef(name="LpNormalization", infer=_lp_norm_infer, reference=lp_norm,
               attrs={"axis": Attr("int", -1), "p": Attr("int", 2)}, traits=NORM_TRAITS, cost=4,
               doc="Divide by the L1 or L2 norm along `axis`."))


def _mvn_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_input(ctx)
    if x.rank is not None:
        normalize_axes(ctx.attrs["axes"], x.rank, ctx)
    return [x]


def mean_variance_norm(x, *, axes: list[int]) -> np.ndarray:
    """(x - mean) / (std + 1e-9) over ``axes``, the ONNX function's formula."""
    acc = x.astype(accumulate_dtype(x.dtype), copy=False)
    ax = tuple(sorted(set(normalize_axes(axes, x.ndim))))   # out of range: an error (fuzz seed 902413)
    mean = acc.mean(axis=ax, keepdims=True)
    dev = acc - mean
    std = np.sqrt((dev * dev).mean(axis=ax, keepdims=True))
    return (dev / (std + np.asarray(1e-9, acc.dtype))).astype(x.dtype)


register(OpDef(name="MeanVarianceNormalization", infer=_mvn_infer, reference=mean_variance_norm,
               attrs={"axes": Attr("ints", [0, 2, 3])}, traits=NORM_TRAITS, cost=8,
               doc="Zero mean, unit variance over `axes`."))
