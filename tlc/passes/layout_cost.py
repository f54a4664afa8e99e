"""The layout pass's cost model: predicted time of conv/pool kernels in NCHW and NHWC, and of transposes.

It models the library kernels ``tlc.kernels.lib_conv`` (NCHW) and ``lib_conv_nhwc``/``lib_pool_nhwc`` (NHWC)
without importing them (passes never import kernels): both layouts run the same BLAS GEMM, so what a layout
changes is the memory traffic around it. numpy copies a strided view run by run, and a run costs ``run_ns`` on
top of ``elem_ns`` per element; NCHW's im2col copies runs of ``Wo`` values (7 in the last ResNet stage) where
NHWC's copies runs of ``kw * C`` (thousands). A transpose costs per element, more in the NHWC -> NCHW
direction (a gather over C-strided elements). Each target declares its constants (``Target.costs``, a
``TargetCosts``; the CPU's in ``tlc/targets/cpu.py``, fitted on the 2-core Xeon of FACTS.md with
``tools/layout_bench.py --fit``, medians of 21 interleaved runs); that script also prints the model's prediction
beside every measured conv of the light models. A target without costs gets no layout changes.

The model is deliberately simple and its use conservative: the pass switches a region only when the predicted
saving beats a margin (``TargetCosts.min_gain_us`` and ``rel_margin`` of the region's NCHW time). What it
predicts for the light models' main region, and what ``--e2e`` measured (1 thread, CPU-time medians; the shared
machine was too loaded for 2-thread timings to mean anything):

| model        | predicted saving (of conv time) | decision | measured -O3 (NHWC) vs -O2           |
|--------------|---------------------------------|----------|--------------------------------------|
| inception_v1 | 19.7%                           | NHWC     | 11% faster                           |
| inception_v2 | 15.0%                           | NHWC     | 10% faster                           |
| densenet121  | 11.3%                           | NHWC     | 5% faster                            |
| squeezenet   | 6.3%                            | NHWC     | 2.5% faster                          |
| resnet50     | 4.9%                            | NCHW     | forced NHWC: 0-4% faster, noisy      |
| shufflenet   | -75% (channel-shuffle boundaries) | NCHW   | -                                    |
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..ops import Trait, lookup
from ..ops.layout_ops import AXIS_OPS, twin_of
from ..targets import TargetCosts


class ConvShape(NamedTuple):
    """Sizes of one 2-D convolution or pooling (layout-free): batch, channels in/out, spatial, window."""

    n: int
    c: int
    h: int
    w: int
    m: int
    kh: int
    kw: int
    ho: int
    wo: int
    group: int
    sh: int
    sw: int
    dw: int
    padded: bool

    @property
    def pointwise(self) -> bool:
        return self.kh == self.kw == 1 and not self.padded

    @property
    def depthwise(self) -> bool:
        return self.group == self.c == self.m and self.group > 1


def _copy(t: TargetCosts, elements: float, run: float, strided: bool = False) -> float:
    """ns of a numpy copy of ``elements`` values in contiguous runs of ``run``."""
    per = t.strided_elem_ns if strided else t.elem_ns
    return elements * per + elements / max(run, 1) * t.run_ns


def conv_ns(t: TargetCosts, s: ConvShape) -> tuple[float, float]:
    """(NCHW ns, NHWC ns) of one convolution with the library kernels each layout's runtime picks."""
    out = s.n * s.m * s.ho * s.wo
    gemm = 2.0 * out * (s.c // s.group) * s.kh * s.kw / t.gemm_gflops
    if s.depthwise:
        nchw = out * s.kh * s.kw * t.dw_direct_ns
        taps = (2 * s.kh * s.kw - 1) * out * t.ufunc_elem_ns + out * (2 * s.kh * s.kw) / s.c * t.run_ns
        pad = _copy(t, s.n * s.h * s.w * s.c, s.w * s.c) if s.padded else 0.0
        return nchw, taps + pad
    if s.pointwise and s.group == 1:
        sub = s.n * s.c * s.ho * s.wo
        strided = (s.sh, s.sw) != (1, 1)
        nchw = gemm + (_copy(t, sub, s.wo, strided=True) if strided else 0.0)
        nhwc = gemm + (_copy(t, sub, s.c) if strided else 0.0)
        return nchw, nhwc
    cols = s.n * s.c * s.kh * s.kw * s.ho * s.wo
    nchw = gemm + _copy(t, cols, s.wo, strided=s.sw > 1)
    nhwc = gemm + _copy(t, cols, s.kw * s.c // s.group if s.dw == 1 else s.c // s.group)
    if s.padded:
        image = s.n * s.c * s.h * s.w
        nchw += _copy(t, image, s.w)
        nhwc += _copy(t, image, s.w * s.c)
    if s.group > 1:  # NHWC writes each group's GEMM result into a channel slice of the output
        nhwc += _copy(t, out, s.m // s.group)
    return nchw, nhwc


def pool_ns(t: TargetCosts, s: ConvShape) -> tuple[float, float]:
    """(NCHW ns, NHWC ns) of a max/average pooling as kh*kw strided taps (``lib_pool``/``lib_pool_nhwc``)."""
    out = s.n * s.c * s.ho * s.wo
    taps = s.kh * s.kw
    # a strided inner axis costs a ufunc what it costs a copy
    per = t.ufunc_elem_ns + (t.strided_elem_ns - t.elem_ns if s.sw > 1 else 0.0)
    nchw = taps * (out * per + out / s.wo * t.run_ns)
    nhwc = taps * (out * t.ufunc_elem_ns + out / s.c * t.run_ns)
    if s.padded:
        image = s.n * s.c * s.h * s.w
        nchw += _copy(t, image, s.w)
        nhwc += _copy(t, image, s.w * s.c)
    return nchw, nhwc


def transpose_ns(t: TargetCosts, ttype: TensorType | None, to_nhwc: bool) -> float:
    """ns of one Transpose of a value of type ``ttype`` (symbolic dims count as 1: the pass needs static ones)."""
    if ttype is None or ttype.shape is None:
        return math.inf
    elements = math.prod(d if isinstance(d, int) else 1 for d in ttype.shape)
    return elements * (t.to_nhwc_ns if to_nhwc else t.to_nchw_ns)


def concat_ns(t: TargetCosts, graph: Graph, node: Node) -> tuple[float, float]:
    """(NCHW ns, NHWC ns) of a channel Concat: NCHW copies one run per image and input, NHWC one per pixel."""
    n, c, h, w = node.output_types[0].shape
    parts = sum(1 for v in graph.inputs_of(node) if v is not None)
    elements = n * c * h * w
    return _copy(t, elements, elements / (n * parts)), _copy(t, elements, elements / (n * h * w * parts))


def _static4(t: TensorType | None) -> tuple[int, ...] | None:
    if t is None or t.shape is None or len(t.shape) != 4 or not all(isinstance(d, int) for d in t.shape):
        return None
    return tuple(t.shape)


def window_shape(graph: Graph, node: Node, has_weight: bool) -> ConvShape | None:
    """The ``ConvShape`` of an NCHW conv (``has_weight``) or pooling node with static 4-D shapes, else None."""
    ins = graph.inputs_of(node)
    x = _static4(graph.type_of(ins[0])) if ins and ins[0] is not None else None
    y = _static4(node.output_types[0])
    if x is None or y is None:
        return None
    attrs = lookup(node.op, node.domain).resolved_attrs(node)
    if has_weight:
        w = _static4(graph.type_of(ins[1])) if len(ins) > 1 and ins[1] is not None else None
        if w is None:
            return None
        kernel = w[2:]
    else:
        kernel = tuple(attrs.get("kernel_shape") or x[2:])
    strides = tuple(attrs.get("strides") or (1, 1))
    dilations = tuple(attrs.get("dilations") or (1, 1))
    pads = tuple(attrs.get("pads") or (0, 0, 0, 0))
    padded = any(pads) or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")
    return ConvShape(x[0], x[1], x[2], x[3], y[1], kernel[0], kernel[1], y[2], y[3], int(attrs.get("group") or 1),
                     strides[0], strides[1], dilations[1], bool(padded))


def node_ns(t: TargetCosts, graph: Graph, node: Node) -> tuple[float, float] | None:
    """(NCHW ns, NHWC ns) of a node that has a channels-last form (``layout_ops``), or None: it stays NCHW."""
    if _static4(node.output_types[0]) is None or node.num_outputs != 1:
        return None
    if node.domain == "" and node.op in AXIS_OPS:
        return concat_ns(t, graph, node)
    twin = twin_of(node.op, node.domain)
    if twin is None:
        return None
    if lookup(node.op, node.domain).has(Trait.REDUCTION):
        return 0.0, 0.0  # global pools: a mean over contiguous rows or over whole channel vectors, alike
    shape = window_shape(graph, node, twin.has_weight)
    if shape is None:
        return None
    return conv_ns(t, shape) if twin.has_weight else pool_ns(t, shape)
