"""Library kernels for single ops: which ops have a native implementation, and how each binds to shapes.

``LIBRARY`` maps an op (qualified name: ``Conv``, ``tlc.ConvNhwc``) to a factory
``(attrs, num_outputs, options) -> Impl`` (it raises ``NotNative`` with a reason when the node's attributes
are outside what the kernel does). The kernels themselves live in
``tlc.kernels.lib_gemm``/``lib_conv``/``lib_pool``; this module reads ONNX attributes and shapes for them.
Ops not listed here (and not single-ufunc elementwise ops, see ``impl.ufunc_impl``) run their reference.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.types import np_dtype
from ..kernels import lib_conv, lib_gemm, lib_pool
from .impl import Bound, Impl, NotNative, ViewImpl, spatial_window, static_shapes
from .library_nhwc import NHWC_LIBRARY
from .options import CompileOptions
from .parts import PARTS_MIN_MACS, PartsBound, matmul_parts, output_split, part_of, parts_note, slab
from .workers import split_rows, workers


class MatMulImpl(Impl):
    reason = "BLAS matmul"

    def __init__(self, threads: int = 1):
        self.threads = threads   # > 1: large products run in parts on the runtime's workers

    def accepts_strided(self, port: int) -> bool:
        return True   # np.matmul hands BLAS a transposed or row-strided matrix as it is

    def bind_parts(self, in_types, out_types) -> PartsBound | None:
        a, b = static_shapes(in_types[:2], "input")
        (y,) = static_shapes(out_types, "output")
        return matmul_parts(a, b, y, self.threads)

    def bind(self, in_types, out_types) -> Bound:
        parts = self.bind_parts(in_types, out_types)
        if parts is not None:
            return run_in_parts(parts, self.threads)
        return Bound(lambda ins, outs, work: [lib_gemm.matmul(ins[0], ins[1], outs[0])])


class GemmImpl(Impl):
    reason = "BLAS gemm"

    def accepts_strided(self, port: int) -> bool:
        return True

    def __init__(self, attrs: dict[str, Any], threads: int = 1):
        self.kw = {"alpha": float(attrs.get("alpha", 1.0)), "beta": float(attrs.get("beta", 1.0)),
                   "trans_a": int(attrs.get("transA", 0)), "trans_b": int(attrs.get("transB", 0))}
        self.threads = threads

    def bind_parts(self, in_types, out_types) -> PartsBound | None:
        a, b, *c = static_shapes(in_types, "input")
        (y,) = static_shapes(out_types, "output")
        kw = self.kw
        a, b = (a[::-1] if kw["trans_a"] else a), (b[::-1] if kw["trans_b"] else b)
        c_shape = c[0] if c and kw["beta"] != 0.0 else None

        def views(ins):
            return (ins[0].T if kw["trans_a"] else ins[0]), (ins[1].T if kw["trans_b"] else ins[1])

        def finish(ins, out, k):
            c_part = part_of(ins[2], c_slabs[k]) if c_shape is not None else None
            lib_gemm.scale_add(out, c_part, kw["alpha"], kw["beta"])

        parts = matmul_parts(a, b, y, self.threads, views, finish)
        c_slabs = [slab(c_shape, 2, parts.split, k) for k in range(len(parts.split.bounds))] if parts else []
        return parts

    def bind(self, in_types, out_types) -> Bound:
        parts = self.bind_parts(in_types, out_types)
        if parts is not None:
            return run_in_parts(parts, self.threads)
        kw = self.kw
        return Bound(lambda ins, outs, work: [
            lib_gemm.gemm(ins[0], ins[1], ins[2] if len(ins) > 2 else None, outs[0], **kw)])


def run_in_parts(parts: PartsBound, threads: int) -> Bound:
    """A step that runs its ``prepare`` parts, then its ``parts``, on the runtime's workers."""
    pool = workers(threads)
    prepare, fns = parts.prepare, parts.parts

    def fn(ins, outs, work):
        if prepare:
            pool.run([functools.partial(f, ins, outs, work) for f in prepare])
        pool.run([functools.partial(f, ins, outs, work) for f in fns])
        return outs

    return Bound(fn, parts.workspace, parts_note(parts))


class ConvImpl(Impl):
    def __init__(self, attrs: dict[str, Any], allow_numba: bool, eager: bool, threads: int = 1):
        self.attrs = attrs
        self.allow_numba = allow_numba
        self.eager = eager
        self.threads = threads
        self.reason = "conv: im2col/BLAS, GEMM, or direct Numba, chosen per shape"

    def _geometry(self, in_types, out_types) -> tuple[lib_conv.ConvGeometry, str]:
        x, w, *_ = static_shapes(in_types, "input")
        (y,) = static_shapes(out_types, "output")
        if len(x) != 4:
            raise NotNative(f"only 2-D convolutions are native (input rank {len(x)})")
        window, begin, _ = spatial_window(self.attrs, w[2:], x[2:])
        geo = lib_conv.geometry(x, w, y, window.strides, begin, window.dilations, int(self.attrs.get("group", 1)))
        return geo, lib_conv.choose_algorithm(geo, self.allow_numba)

    def bind_parts(self, in_types, out_types) -> PartsBound | None:
        """Output channels in slabs (after the im2col columns are filled, by input channels, in parts too)."""
        geo, algo = self._geometry(in_types, out_types)
        macs = geo.m * geo.c * geo.kh * geo.kw * geo.ho * geo.wo
        split = output_split((geo.n, geo.m, geo.ho, geo.wo), self.threads) if macs >= PARTS_MIN_MACS else None
        if split is None or split.axis != 1 or not lib_conv.splittable(geo, algo):
            return None
        dtype = np_dtype(in_types[0].dtype)
        has_bias = len(in_types) > 2 and in_types[2] is not None

        def gemm(m0, m1):
            def part(ins, outs, work):
                lib_conv.gemm_part(algo, ins[0], ins[1], outs[0], geo, work, m0, m1)
                if has_bias:
                    np.add(outs[0][:, m0:m1], ins[2][m0:m1].reshape(1, -1, 1, 1), out=outs[0][:, m0:m1])
            return part

        def prepare(c0, c1):
            return lambda ins, outs, work: lib_conv.prepare_part(algo, ins[0], geo, work, c0, c1)

        prep = [prepare(c0, c1) for c0, c1 in split_rows(geo.c, len(split.bounds))]
        return PartsBound(split, [gemm(m0, m1) for m0, m1 in split.bounds],
                          prep if lib_conv.needs_prepare(geo, algo) else None,
                          [(s, dtype) for s in lib_conv.workspace(geo, algo)], algo)

    def bind(self, in_types, out_types) -> Bound:
        parts = self.bind_parts(in_types, out_types) if self.threads > 1 else None
        if parts is not None:
            return run_in_parts(parts, self.threads)
        geo, algo = self._geometry(in_types, out_types)
        dtype = np_dtype(in_types[0].dtype)
        if algo == "direct" and self.eager:
            _warm_direct(dtype)

        def fn(ins, outs, work):
            b = ins[2] if len(ins) > 2 else None
            return [lib_conv.run(algo, ins[0], ins[1], b, outs[0], geo, work)]

        return Bound(fn, [(s, dtype) for s in lib_conv.workspace(geo, algo)], algo)


def _warm_direct(dtype: np.dtype) -> None:
    """Compile the direct conv kernel now (eager JIT) so the first run pays nothing."""
    x = np.zeros((1, 1, 1, 1), dtype)
    lib_conv.direct_kernel()(x, x.copy(), np.zeros(1, dtype), x.copy(), 1, 1, 1, 1, 0, 0, 1)


class PoolImpl(Impl):
    def __init__(self, attrs: dict[str, Any], reduce: str):
        self.attrs = attrs
        self.reduce = reduce
        self.reason = f"{reduce} pool: strided taps"
        if reduce == "avg" and any(d != 1 for d in attrs.get("dilations") or ()):
            raise NotNative("AveragePool with dilations is not native")

    def bind(self, in_types, out_types) -> Bound:
        (x,) = static_shapes(in_types[:1], "input")
        (y,) = static_shapes(out_types, "output")
        if len(x) != 4:
            raise NotNative(f"only 2-D pooling is native (input rank {len(x)})")
        kernel = tuple(int(k) for k in self.attrs["kernel_shape"])
        window, begin, end = spatial_window(self.attrs, kernel, x[2:])
        geo = lib_pool.PoolGeometry(*x, *kernel, *y[2:], *window.strides, *window.dilations, *begin, *end)
        dtype = np_dtype(in_types[0].dtype)
        work = [(s, dtype) for s in lib_pool.workspace(geo)]
        if self.reduce == "max":
            return Bound(lambda ins, outs, w: [lib_pool.max_pool(ins[0], outs[0], geo, w)], work)
        divisor = lib_pool.avg_divisor(geo, bool(self.attrs.get("count_include_pad", 0)), dtype)
        return Bound(lambda ins, outs, w: [lib_pool.avg_pool(ins[0], outs[0], geo, w, divisor)], work)


class GlobalPoolImpl(Impl):
    def __init__(self, reduce: str):
        self.reduce = reduce
        self.reason = f"numpy {reduce}"

    def bind(self, in_types, out_types) -> Bound:
        static_shapes(out_types, "output")
        reduce = self.reduce
        return Bound(lambda ins, outs, work: [lib_pool.global_pool(ins[0], outs[0], reduce)])


class LRNImpl(Impl):
    reason = "numpy channel taps"

    def __init__(self, attrs: dict[str, Any]):
        self.kw = {"size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
                   "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))}

    def bind(self, in_types, out_types) -> Bound:
        (x,) = static_shapes(in_types, "input")
        work = [(s, np_dtype(in_types[0].dtype)) for s in lib_pool.lrn_workspace(x, self.kw["size"])]
        kw = self.kw
        return Bound(lambda ins, outs, w: [lib_pool.lrn(ins[0], outs[0], w, **kw)], work)


class BatchNormImpl(Impl):
    """Inference BatchNormalization: ``x * a + b`` with per-channel a, b (elementwise in x: may run in place)."""

    reason = "numpy scale-shift"
    inplace = True

    def __init__(self, attrs: dict[str, Any]):
        self.epsilon = float(attrs.get("epsilon", 1e-5))

    def bind(self, in_types, out_types) -> Bound:
        (y,) = static_shapes(out_types, "output")
        bshape = (-1,) + (1,) * (len(y) - 2)
        eps = self.epsilon

        def fn(ins, outs, work):
            x, scale, bias, mean, var = ins[:5]
            a = scale / np.sqrt(var + var.dtype.type(eps))
            np.multiply(x, a.reshape(bshape), out=outs[0])
            np.add(outs[0], (bias - mean * a).reshape(bshape), out=outs[0])
            return outs

        return Bound(fn)


class SoftmaxImpl(Impl):
    """Softmax along one axis (opset 13): max, subtract, exp, sum, divide, all into the output."""

    reason = "numpy, in place in the output"
    inplace = True

    def __init__(self, attrs: dict[str, Any]):
        self.axis = int(attrs.get("axis", -1))

    def bind(self, in_types, out_types) -> Bound:
        static_shapes(out_types, "output")
        axis = self.axis

        def fn(ins, outs, work):
            x, out = ins[0], outs[0]
            m = np.max(x, axis=axis, keepdims=True)
            np.subtract(x, m, out=out)
            np.exp(out, out=out)
            np.divide(out, np.sum(out, axis=axis, keepdims=True), out=out)
            return outs

        return Bound(fn)


class ConcatImpl(Impl):
    reason = "numpy concatenate"

    def __init__(self, attrs: dict[str, Any]):
        self.axis = int(attrs["axis"])

    def bind(self, in_types, out_types) -> Bound:
        static_shapes(out_types, "output")
        axis = self.axis
        return Bound(lambda ins, outs, work: [np.concatenate(ins, axis=axis, out=outs[0])])


class TransposeImpl(Impl):
    reason = "numpy copy of a transposed view"

    def __init__(self, attrs: dict[str, Any]):
        self.perm = attrs.get("perm")

    @property
    def perm_tuple(self) -> tuple[int, ...] | None:
        return tuple(int(p) for p in self.perm) if self.perm else None

    def bind(self, in_types, out_types) -> Bound:
        static_shapes(out_types, "output")
        perm = self.perm_tuple

        def fn(ins, outs, work):
            np.copyto(outs[0], np.transpose(ins[0], perm))
            return outs

        return Bound(fn)


def _part_threads(options: CompileOptions) -> int:
    """Parts a large contraction runs in: the plan's threads when tlc runs them (``own_threads``), else 1."""
    return options.threads if options.own_threads else 1


def _single_output(make: Callable[..., Impl]) -> Callable[..., Impl]:
    def factory(attrs, num_outputs, options):
        if num_outputs != 1:
            raise NotNative(f"only the single-output form is native ({num_outputs} outputs)")
        return make(attrs, options)

    return factory


def _batchnorm(attrs, options):
    if attrs.get("training_mode"):
        raise NotNative("training_mode BatchNormalization is not native")
    return BatchNormImpl(attrs)


def _conv(attrs, options: CompileOptions):
    return ConvImpl(attrs, allow_numba=options.jit != "off", eager=options.jit == "eager",
                    threads=_part_threads(options))


_view = _single_output(lambda attrs, options: ViewImpl())

#: op name (default domain) -> factory(attrs, num_outputs, options) -> Impl
LIBRARY: dict[str, Callable[[dict[str, Any], int, CompileOptions], Impl]] = {
    "MatMul": _single_output(lambda attrs, options: MatMulImpl(_part_threads(options))),
    "Gemm": _single_output(lambda attrs, options: GemmImpl(attrs, _part_threads(options))),
    "Conv": _single_output(_conv),
    "MaxPool": _single_output(lambda attrs, options: PoolImpl(attrs, "max")),
    "AveragePool": _single_output(lambda attrs, options: PoolImpl(attrs, "avg")),
    "GlobalAveragePool": _single_output(lambda attrs, options: GlobalPoolImpl("mean")),
    "GlobalMaxPool": _single_output(lambda attrs, options: GlobalPoolImpl("max")),
    "LRN": _single_output(lambda attrs, options: LRNImpl(attrs)),
    "BatchNormalization": _single_output(_batchnorm),
    "Softmax": _single_output(lambda attrs, options: SoftmaxImpl(attrs)),
    "Concat": _single_output(lambda attrs, options: ConcatImpl(attrs)),
    "Transpose": _single_output(lambda attrs, options: TransposeImpl(attrs)),
    "Reshape": _view, "Flatten": _view, "Squeeze": _view, "Unsqueeze": _view, "Identity": _view,
}
LIBRARY.update(NHWC_LIBRARY)  # tlc's channels-last twins, under their qualified names


def library_impl(op: str, attrs: dict[str, Any], num_outputs: int, options: CompileOptions) -> Impl | None:
    """The library Impl for ``op`` (a qualified name) or None when it has none; NotNative when the attributes
    rule it out."""
    factory = LIBRARY.get(op)
    return None if factory is None else factory(attrs, num_outputs, options)
