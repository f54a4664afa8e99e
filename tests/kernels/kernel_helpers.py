"""Helpers of the kernel tests: random inputs and a numeric check against the reference executor."""

from __future__ import annotations

import re
from contextlib import contextmanager

import numpy as np

from tlc.ir import Graph, TensorType
from tlc.kernels import KernelCache, compile_group
from tlc.ops import registry
from tlc.ops.infer import normalize_axis
from tlc.ops.reduce import REDUCE, REDUCE_ATTRS, _reduce_infer, reduce_axes
from tlc.ops.registry import Attr, OpDef, Trait
from tlc.reference import run_graph

TOLERANCE = {"float32": (2e-5, 2e-6), "float64": (1e-12, 1e-13)}
_LLVM_SCALAR = {"float32": "float", "float64": "double"}


def vectorized(ir: str, dtype: str) -> bool:
    """Whether LLVM IR holds vector arithmetic on ``dtype`` (at least 128 bits wide: 4 floats, 2 doubles).

    The width is the host's (8 floats with AVX2, 16 with AVX-512), so the test asks for any vector width.
    """
    lanes = [int(n) for n in re.findall(rf"<(\d+) x {_LLVM_SCALAR[dtype]}>", ir)]
    return any(n * np.dtype(dtype).itemsize >= 16 for n in lanes)


def random_array(rng: np.random.Generator, shape, dtype: str, scale: float = 2.0) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -50), min(info.max, 50)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    return np.asarray(rng.standard_normal(shape) * scale).astype(dtype)


def check_against_reference(
    kernel, body: Graph, inputs: list[np.ndarray], outputs=None, tolerance: tuple[float, float] | None = None
) -> list[np.ndarray]:
    """Run ``kernel`` (into fresh or given outputs) and the reference executor; compare every output."""
    expected = run_graph(body, [np.asarray(x) for x in inputs])
    if outputs is None:
        outputs = [np.empty(e.shape, e.dtype) for e in expected]
    kernel(inputs, outputs)
    for got, want in zip(outputs, expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        if want.dtype.kind == "f":
            rtol, atol = tolerance or TOLERANCE[want.dtype.name]
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, want)
    return outputs


def compile_for(body: Graph, kind: str, cache: KernelCache, **kwargs):
    """Compile ``body`` for the types its inputs declare."""
    types = [TensorType(n.output_types[0].dtype, n.output_types[0].shape) for n in body.inputs]
    return compile_group(body, kind, types, cache=cache, **kwargs)


# ---------------------------------------------------------------------------- stand-in ops
def _reduction_def(name: str, fn) -> OpDef:
    def ref(x, axes=None, *, keepdims, noop_with_empty_axes):
        ax = reduce_axes(x.ndim, axes, noop_with_empty_axes)
        return np.asarray(fn(x, axis=ax, keepdims=bool(keepdims))).astype(x.dtype)

    return OpDef(name=name, infer=_reduce_infer, reference=ref, inputs=(1, 2), attrs=dict(REDUCE_ATTRS), traits=REDUCE)


def _layer_norm(x, scale, bias=None, *, axis, epsilon, stash_type):
    mean = x.mean(axis=-1, keepdims=True)
    inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + epsilon)
    y = (x - mean) * inv * scale + (0 if bias is None else bias)
    return [y.astype(x.dtype), mean.astype(x.dtype), inv.astype(x.dtype)]


def _log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(x.dtype)


def _layer_norm_infer(ctx):
    t = ctx.type(0)
    reduced = TensorType(t.dtype, t.shape[:-1] + (1,))
    return [t, reduced, reduced][: ctx.node.num_outputs]


def _log_softmax_infer(ctx):
    normalize_axis(ctx.attrs["axis"], ctx.type(0).rank, ctx)
    return [ctx.type(0)]


PURE = frozenset({Trait.PURE, Trait.FOLDABLE, Trait.REDUCTION})
STAND_INS = [
    _reduction_def("ReduceMax", np.max),
    _reduction_def("ReduceMin", np.min),
    _reduction_def("ReduceMean", np.mean),
    _reduction_def("ReduceSumSquare", lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims)),
    _reduction_def("ReduceL2", lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))),
    OpDef(
        name="LogSoftmax",
        infer=_log_softmax_infer,
        attrs={"axis": Attr("int", -1)},
        traits=PURE,
        reference=lambda x, *, axis: _log_softmax(x, axis),
    ),
    OpDef(
        name="LayerNormalization",
        infer=_layer_norm_infer,
        reference=_layer_norm,
        inputs=(2, 3),
        outputs=lambda attrs, n: 3,
        traits=PURE,
        attrs={"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5), "stash_type": Attr("int", 1)},
    ),
]


@contextmanager
def stand_in_ops():
    """ONNX ops the registry does not hold yet, registered while the block runs (the real ones win)."""
    added = [op for op in STAND_INS if not registry.is_registered(op.name)]
    for op in added:
        registry._REGISTRY[("", op.name)] = op
    try:
        yield
    finally:
        for op in added:
            del registry._REGISTRY[("", op.name)]
