"""Library kernels for the channels-last twins (``tlc.ConvNhwc``, ``tlc.MaxPoolNhwc``, ...; tlc/ops/layout_ops.py).

The NHWC counterparts of ``library.ConvImpl``/``PoolImpl``/``GlobalPoolImpl``: they read the ONNX attributes
and the [N, H, W, C] shapes and bind ``tlc.kernels.lib_conv_nhwc``/``lib_pool_nhwc``. ``NHWC_LIBRARY`` is merged
into ``library.LIBRARY`` under the twins' qualified names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.types import np_dtype
from ..kernels import lib_conv_nhwc, lib_pool, lib_pool_nhwc
from .impl import Bound, Impl, NotNative, spatial_window, static_shapes
from .options import CompileOptions


class ConvNhwcImpl(Impl):
    reason = "NHWC conv: GEMM (1x1), im2col/BLAS, or depthwise taps, chosen per shape"

    def __init__(self, attrs: dict[str, Any]):
        self.attrs = attrs

    def bind(self, in_types, out_types) -> Bound:
        x, w, *_ = static_shapes(in_types, "input")
        (y,) = static_shapes(out_types, "output")
        if len(x) != 4:
            raise NotNative(f"only 2-D convolutions are native (input rank {len(x)})")
        window, begin, _ = spatial_window(self.attrs, w[1:3], x[1:3])
        geo = lib_conv_nhwc.geometry(x, w, y, window.strides, begin, window.dilations,
                                     int(self.attrs.get("group", 1)))
        algo = lib_conv_nhwc.choose_algorithm(geo)
        dtype = np_dtype(in_types[0].dtype)

        def fn(ins, outs, work):
            b = ins[2] if len(ins) > 2 else None
            return [lib_conv_nhwc.run(algo, ins[0], ins[1], b, outs[0], geo, work)]

        return Bound(fn, [(s, dtype) for s in lib_conv_nhwc.workspace(geo, algo)], f"nhwc {algo}")


class PoolNhwcImpl(Impl):
    def __init__(self, attrs: dict[str, Any], reduce: str):
        self.attrs = attrs
        self.reduce = reduce
        self.reason = f"NHWC {reduce} pool: strided taps"
        if reduce == "avg" and any(d != 1 for d in attrs.get("dilations") or ()):
            raise NotNative("AveragePool with dilations is not native")

    def bind(self, in_types, out_types) -> Bound:
        (x,) = static_shapes(in_types[:1], "input")
        (y,) = static_shapes(out_types, "output")
        if len(x) != 4:
            raise NotNative(f"only 2-D pooling is native (input rank {len(x)})")
        kernel = tuple(int(k) for k in self.attrs["kernel_shape"])
        window, begin, end = spatial_window(self.attrs, kernel, x[1:3])
        n, h, w, c = x
        geo = lib_pool.PoolGeometry(n, c, h, w, *kernel, *y[1:3], *window.strides, *window.dilations, *begin, *end)
        dtype = np_dtype(in_types[0].dtype)
        work = [(s, dtype) for s in lib_pool_nhwc.workspace(geo)]
        if self.reduce == "max":
            return Bound(lambda ins, outs, wk: [lib_pool_nhwc.max_pool(ins[0], outs[0], geo, wk)], work)
        divisor = lib_pool.avg_divisor(geo, bool(self.attrs.get("count_include_pad", 0)), dtype)
        return Bound(lambda ins, outs, wk: [lib_pool_nhwc.avg_pool(ins[0], outs[0], geo, wk, divisor)], work)


class GlobalPoolNhwcImpl(Impl):
    def __init__(self, reduce: str):
        self.reduce = reduce
        self.reason = f"numpy {reduce} over the spatial axes"

    def bind(self, in_types, out_types) -> Bound:
        static_shapes(out_types, "output")
        reduce = np.mean if self.reduce == "mean" else np.max

        def fn(ins, outs, work):
            axes = tuple(range(1, ins[0].ndim - 1))
            return [reduce(ins[0], axis=axes, keepdims=True, out=outs[0])]

        return Bound(fn)


def _single(make: Callable[[dict[str, Any]], Impl]) -> Callable[..., Impl]:
    def factory(attrs: dict[str, Any], num_outputs: int, options: CompileOptions) -> Impl:
        if num_outputs != 1:
            raise NotNative(f"only the single-output form is native ({num_outputs} outputs)")
        return make(attrs)

    return factory


#: qualified op name -> factory(attrs, num_outputs, options) -> Impl
NHWC_LIBRARY: dict[str, Callable[[dict[str, Any], int, CompileOptions], Impl]] = {
    "tlc.ConvNhwc": _single(ConvNhwcImpl),
    "tlc.MaxPoolNhwc": _single(lambda attrs: PoolNhwcImpl(attrs, "max")),
    "tlc.AveragePoolNhwc": _single(lambda attrs: PoolNhwcImpl(attrs, "avg")),
    "tlc.GlobalAveragePoolNhwc": _single(lambda attrs: GlobalPoolNhwcImpl("mean")),
    "tlc.GlobalMaxPoolNhwc": _single(lambda attrs: GlobalPoolNhwcImpl("max")),
}
