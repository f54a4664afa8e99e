"""Random generators: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike, Bernoulli, Multinomial.

Draws come from numpy's ``default_rng``, seeded by the ``seed`` attribute when a node has one (then every run of
that node draws the same values) and from fresh OS entropy otherwise. ONNX fixes no generator, so outputs agree
with other runtimes in distribution only (the node cases of these ops compare values drawn by another generator:
docs/conformance.md lists them as failing for that reason). These ops are not pure: CSE never merges two of
them and folding never runs them, so an unseeded node draws anew on every run.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, dtype_of_onnx_code, np_dtype
from .registry import REQUIRED, Attr, InferContext, OpDef, register

#: ONNX's default element type of the generators (TensorProto.FLOAT) and of Multinomial's indices (INT32)
_FLOAT, _INT32 = 1, 6
_SEED = {"seed": Attr("float")}


def _generator(seed: float | None) -> np.random.Generator:
    # the seed's bits: 1.0 and 1.5 seed apart, and no float maps to a negative seed
    return np.random.default_rng(None if seed is None else int(np.float64(seed).view(np.uint64)))


def _float_dtype(ctx: InferContext, code: int | None, fallback: str) -> str:
    dtype = fallback if code is None else dtype_of_onnx_code(code)
    if dtype not in FLOAT_DTYPES:
        ctx.fail(f"dtype {dtype}: {ctx.node.op} draws float16, float32 or float64")
    return dtype


def _shape_infer(ctx: InferContext) -> list[TensorType]:
    shape = ctx.attrs["shape"]
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {list(shape)} has a negative dim")
    return [TensorType(_float_dtype(ctx, ctx.attrs["dtype"], "float32"), tuple(shape))]


def _like_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    return [TensorType(_float_dtype(ctx, ctx.attrs["dtype"], t.dtype), t.shape)]


def _uniform(shape, dtype, low, high, seed) -> np.ndarray:
    return _generator(seed).uniform(low, high, size=shape).astype(np_dtype(dtype))


def _normal(shape, dtype, mean, scale, seed) -> np.ndarray:
    return _generator(seed).normal(mean, scale, size=shape).astype(np_dtype(dtype))


def _code(dtype: int | None, like: np.ndarray | None) -> str:
    return like.dtype.name if dtype is None else dtype_of_onnx_code(dtype)


_UNIFORM = {"high": Attr("float", 1.0), "low": Attr("float", 0.0), **_SEED}
_NORMAL = {"mean": Attr("float", 0.0), "scale": Attr("float", 1.0), **_SEED}
_TRAITS: frozenset = frozenset()

register(OpDef(name="RandomUniform", infer=_shape_infer, inputs=(0, 0), traits=_TRAITS, cost=4,
               attrs={"shape": Attr("ints", REQUIRED), "dtype": Attr("int", _FLOAT), **_UNIFORM},
               reference=lambda *, shape, dtype, high, low, seed: _uniform(tuple(shape), dtype_of_onnx_code(dtype),
                                                                          low, high, seed),
               doc="Uniform draws in [low, high) of the given shape."))
register(OpDef(name="RandomNormal", infer=_shape_infer, inputs=(0, 0), traits=_TRAITS, cost=4,
               attrs={"shape": Attr("ints", REQUIRED), "dtype": Attr("int", _FLOAT), **_NORMAL},
               reference=lambda *, shape, dtype, mean, scale, seed: _normal(tuple(shape), dtype_of_onnx_code(dtype),
                                                                           mean, scale, seed),
               doc="Normal draws (mean, scale) of the given shape."))
register(OpDef(name="RandomUniformLike", infer=_like_infer, traits=_TRAITS, cost=4,
               attrs={"dtype": Attr("int"), **_UNIFORM},
               reference=lambda x, *, dtype, high, low, seed: _uniform(x.shape, _code(dtype, x), low, high, seed),
               doc="Uniform draws in [low, high) of the input's shape (and dtype unless given)."))
register(OpDef(name="RandomNormalLike", infer=_like_infer, traits=_TRAITS, cost=4,
               attrs={"dtype": Attr("int"), **_NORMAL},
               reference=lambda x, *, dtype, mean, scale, seed: _normal(x.shape, _code(dtype, x), mean, scale, seed),
               doc="Normal draws (mean, scale) of the input's shape (and dtype unless given)."))


# ---------------------------------------------------------------------------- Bernoulli, Multinomial
def _bernoulli_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.dtype not in FLOAT_DTYPES:
        ctx.fail(f"input has dtype {t.dtype}; Bernoulli takes probabilities as float16, float32 or float64")
    dtype = t.dtype if ctx.attrs["dtype"] is None else dtype_of_onnx_code(ctx.attrs["dtype"])
    if dtype not in FLOAT_DTYPES | INT_DTYPES | {"bool"}:
        ctx.fail(f"dtype {dtype}: Bernoulli gives a float, integer or bool tensor")
    return [TensorType(dtype, t.shape)]


def _bernoulli(p, *, dtype, seed) -> np.ndarray:
    draws = _generator(seed).random(p.shape) < p.astype(np.float64)
    return draws.astype(p.dtype if dtype is None else np_dtype(dtype_of_onnx_code(dtype)))


register(OpDef(name="Bernoulli", infer=_bernoulli_infer, reference=_bernoulli, traits=_TRAITS, cost=4,
               attrs={"dtype": Attr("int"), **_SEED},
               doc="1 with probability p (the input, per element), else 0."))


def _multinomial_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.dtype not in FLOAT_DTYPES:
        ctx.fail(f"input has dtype {t.dtype}; Multinomial takes log-probabilities as a float tensor")
    if t.rank is not None and t.rank != 2:
        ctx.fail(f"input {t} must be 2-D [batch, classes]")
    dtype = dtype_of_onnx_code(ctx.attrs["dtype"])
    if dtype not in ("int32", "int64"):
        ctx.fail(f"dtype {dtype}: Multinomial gives int32 or int64 class indices")
    if ctx.attrs["sample_size"] < 1:
        ctx.fail(f"sample_size {ctx.attrs['sample_size']} must be at least 1")
    batch = None if t.shape is None else t.shape[0]
    return [TensorType(dtype, (batch, ctx.attrs["sample_size"]))]


def _multinomial(x, *, dtype, sample_size, seed) -> np.ndarray:
    """``sample_size`` class indices per row, drawn with probabilities softmax(row) (the input is unnormalised
    log-probabilities), by inverting each row's cumulative distribution."""
    logits = x.astype(np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(probs, axis=1)
    cdf /= cdf[:, -1:]
    u = _generator(seed).random((x.shape[0], sample_size))
    picks = np.minimum((u[:, :, None] >= cdf[:, None, :]).sum(axis=2), x.shape[1] - 1)
    return picks.astype(np_dtype(dtype_of_onnx_code(dtype)))


register(OpDef(name="Multinomial", infer=_multinomial_infer, reference=_multinomial, traits=_TRAITS, cost=8,
               attrs={"dtype": Attr("int", _INT32), "sample_size": Attr("int", 1), **_SEED},
               doc="Class indices drawn per row from the distribution softmax(row)."))
