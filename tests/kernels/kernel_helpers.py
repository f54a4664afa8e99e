"""Helpers of the kernel tests: random inputs and a numeric check against the reference executor."""

from __future__ import annotations

import numpy as np

from tlc.ir import Graph, TensorType
from tlc.kernels import KernelCache, compile_group
from tlc.reference import run_graph

TOLERANCE = {"float32": (2e-5, 2e-6), "float64": (1e-12, 1e-13)}


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
