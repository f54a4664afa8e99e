"""Channels-last twins of the layout-sensitive CNN ops: ``tlc.ConvNhwc``, ``tlc.MaxPoolNhwc``, ...

Each twin is defined by its ONNX op on transposed data, so it is correct by construction (and its reference is
bit for bit the ONNX op's):
``tlc.<Op>Nhwc(x, w, ...) == Transpose(<Op>(Transpose(x, NHWC_TO_NCHW), w', ...), NCHW_TO_NHWC)`` where the
data input ``x`` and the output are [N, H, W, C] and a convolution weight ``w`` is OHWI [M, kh, kw, C/group]
(``w' = Transpose(w, NHWC_TO_NCHW)`` is ONNX's OIHW). Attributes are the ONNX op's, unchanged (``pads``,
``strides``, ... name spatial axes in the same order). Inference, the reference and the ONNX export (a model-local
function holding Transpose + op + Transpose, ``OpDef.decompose``) all derive from the ONNX op's registry entry, and so
does the bias (``OpDef.bias``: Conv's per-channel B runs along the last axis of the twin's output).

``TWINS`` maps an ONNX op to its twin and ``AXIS_OPS`` names the ops that go channels-last by remapping an axis
attribute; the layout pass reads both (elementwise ops it recognises by their trait).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ShapeInferenceError
from ..ir.graph import TLC_DOMAIN, Graph, Node
from ..ir.types import TensorType
from . import conv, pool  # noqa: F401  (the ONNX ops must be registered before their twins)
from .registry import InferContext, OpDef, get, register

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)


@dataclass(frozen=True)
class Twin:
    """A channels-last twin: its name (tlc domain), the ONNX op it mirrors, and whether input 1 is a weight."""

    name: str
    onnx_op: str
    has_weight: bool = False

    @property
    def permuted_inputs(self) -> tuple[int, ...]:
        """The inputs stored channels-last (the data, and the weight of a convolution)."""
        return (0, 1) if self.has_weight else (0,)


def _permute_type(t: TensorType | None, perm: tuple[int, ...]) -> TensorType | None:
    if t is None or t.shape is None:
        return t
    if len(t.shape) != len(perm):
        raise ShapeInferenceError(f"expected a rank-{len(perm)} tensor, got {t}")
    return TensorType(t.dtype, tuple(t.shape[p] for p in perm))


class _AsNchw(InferContext):
    """The twin's node seen by its ONNX op's inference: channels-last inputs transposed to NCHW."""

    def __init__(self, ctx: InferContext, twin: Twin):
        super().__init__(ctx.graph, ctx.node, get(twin.onnx_op))
        self.twin = twin
        try:
            self.input_types = [_permute_type(t, NHWC_TO_NCHW) if i in twin.permuted_inputs else t
                                for i, t in enumerate(ctx.input_types)]
        except ShapeInferenceError as exc:
            ctx.fail(str(exc))

    def fail(self, message: str) -> None:
        super().fail(f"as {self.twin.onnx_op} on the inputs transposed to NCHW: {message}")


def _make_infer(twin: Twin):
    def infer(ctx: InferContext) -> list[TensorType]:
        as_nchw = _AsNchw(ctx, twin)
        out = as_nchw.opdef.infer(as_nchw)
        return [_permute_type(out[0], NCHW_TO_NHWC)]

    return infer


def _make_reference(twin: Twin):
    def reference(*inputs: np.ndarray | None, **attrs: Any) -> np.ndarray:
        # NOTE: contiguous copies, so that the ONNX op's reference reduces in the same order as on NCHW data and
        # the twin's result is bit for bit the ONNX op's (numpy sums a transposed view in another order)
        ins = [np.ascontiguousarray(np.transpose(a, NHWC_TO_NCHW)) if i in twin.permuted_inputs and a is not None
               else a for i, a in enumerate(inputs)]
        (y, *_) = get(twin.onnx_op).run_reference(ins, attrs)
        return np.ascontiguousarray(np.transpose(y, NCHW_TO_NHWC))

    return reference


def _make_decompose(twin: Twin):
    def decompose(graph: Graph, node: Node) -> Graph:
        """``node`` as Transpose + ONNX op + Transpose, typed for its inputs (the exporter's function body)."""
        body = Graph(f"{twin.name}_body", opset=dict(graph.opset))
        ins = []
        for i, v in enumerate(graph.inputs_of(node)):
            if v is None:
                ins.append(None)
                continue
            t = graph.type_of(v)
            x = body.input(f"in{i}", t.dtype, t.shape)
            ins.append(body.add_node("Transpose", [x], perm=list(NHWC_TO_NCHW)) if i in twin.permuted_inputs else x)
        y = body.add_node(twin.onnx_op, ins, attrs=dict(node.attrs))
        body.output(body.add_node("Transpose", [y], perm=list(NCHW_TO_NHWC)), "out0")
        return body

    return decompose


def _register(twin: Twin) -> Twin:
    base = get(twin.onnx_op)
    bias = base.bias and (base.bias[0], None if base.bias[1] is None else NCHW_TO_NHWC.index(base.bias[1]))
    register(OpDef(name=twin.name, domain=TLC_DOMAIN, infer=_make_infer(twin), reference=_make_reference(twin),
                   inputs=base.inputs, outputs=1, attrs=dict(base.attrs), traits=base.traits, cost=base.cost,
                   decompose=_make_decompose(twin), bias=bias,  # Conv's per-channel bias: the last axis here
                   doc=f"{twin.onnx_op} on channels-last (NHWC) data"
                       + (", weight OHWI [M, kh, kw, C/group]." if twin.has_weight else ".")))
    return twin


#: ONNX op -> its channels-last twin
TWINS: dict[str, Twin] = {t.onnx_op: _register(t) for t in (
    Twin("ConvNhwc", "Conv", has_weight=True),
    Twin("MaxPoolNhwc", "MaxPool"),
    Twin("AveragePoolNhwc", "AveragePool"),
    Twin("GlobalAveragePoolNhwc", "GlobalAveragePool"),
    Twin("GlobalMaxPoolNhwc", "GlobalMaxPool"),
)}


#: ONNX ops whose only dependence on the layout is one axis attribute: channels-last by remapping that axis.
AXIS_OPS: dict[str, str] = {"Concat": "axis"}


def twin_of(op: str, domain: str = "") -> Twin | None:
    """The channels-last twin of ONNX op ``op``, or None."""
    return TWINS.get(op) if domain == "" else None
