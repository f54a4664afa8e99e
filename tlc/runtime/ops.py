"""How each op runs on the CPU: one table, qualified op name -> implementation, read when a graph is lowered
(through the target: ``tlc.targets.cpu`` names ``CPU_OPS`` as its ``ops``).

The table is the only place that names ops in the runtime. An op it does not list runs as a one-op generated
kernel when it is elementwise (its scalar expression comes from the registry, so a newly registered elementwise
op is native with no entry here), and otherwise on its reference implementation, with the reason in
``plan.stats()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ir.graph import TLC_DOMAIN, Node
from ..ops import Trait, opdef_of
from . import library as lib
from . import native, quantized
from .attention import AttentionImpl
from .bound import NotNative
from .control import IfImpl, LoopImpl, ScanImpl
from .impl import ReferenceImpl, StepImpl, opdef_attrs
from .options import CompileOptions

Factory = Callable[[dict[str, Any], Node, CompileOptions], StepImpl]


def _single_output(make: Callable[[dict[str, Any]], StepImpl]) -> Factory:
    def factory(attrs: dict[str, Any], node: Node, options: CompileOptions) -> StepImpl:
        if node.num_outputs != 1:
            raise NotNative(f"only the single-output form is native ({node.num_outputs} outputs)")
        return make(attrs)

    return factory


def _fused(attrs: dict[str, Any], node: Node, options: CompileOptions) -> StepImpl:
    if attrs["kind"] == "epilogue":
        return native.EpilogueImpl(attrs["body"])
    if attrs["kind"] == "chain":
        return native.ChainImpl(attrs["body"])
    return native.FusedImpl(attrs["body"], attrs["kind"])


def _reduce(op: str) -> Factory:
    return _single_output(lambda attrs: lib.ReduceImpl(op, attrs))


_view = _single_output(lambda attrs: lib.ViewImpl())

#: the key of a table's entry for elementwise ops it does not list by name (their one-op kernels)
ELEMENTWISE = "<elementwise>"

#: qualified op name -> factory(resolved attrs, node, options) -> StepImpl (the CPU target's op table)
CPU_OPS: dict[str, Factory] = {
    f"{TLC_DOMAIN}.Fused": _fused,
    ELEMENTWISE: lambda attrs, node, options: native.ElementwiseImpl(),
    "MatMul": _single_output(lambda attrs: native.ProductImpl("MatMul", attrs)),
    "Gemm": _single_output(lambda attrs: native.ProductImpl("Gemm", attrs)),
    "Conv": _single_output(native.ConvImpl),
    "MaxPool": _single_output(lambda attrs: lib.PoolImpl(attrs, "max")),
    "AveragePool": _single_output(lambda attrs: lib.PoolImpl(attrs, "avg")),
    "GlobalAveragePool": _single_output(lambda attrs: lib.GlobalPoolImpl("mean")),
    "GlobalMaxPool": _single_output(lambda attrs: lib.GlobalPoolImpl("max")),
    "LRN": _single_output(lib.LRNImpl),
    "BatchNormalization": lambda attrs, node, options: lib.BatchNormImpl(attrs),
    "Softmax": _single_output(lambda attrs: lib.SoftmaxImpl(attrs, log=False)),
    "LogSoftmax": _single_output(lambda attrs: lib.SoftmaxImpl(attrs, log=True)),
    "Concat": _single_output(lib.ConcatImpl),
    "Transpose": _single_output(lib.TransposeImpl),
    "Gather": _single_output(lib.GatherImpl),
    "Slice": _single_output(lambda attrs: lib.SliceImpl()),
    "Split": lambda attrs, node, options: lib.SplitImpl(attrs),
    "Expand": _single_output(lambda attrs: lib.ExpandImpl()),
    "Tile": _single_output(lambda attrs: lib.TileImpl()),
    "Pad": _single_output(lib.PadImpl),
    "Trilu": _single_output(lib.TriluImpl),
    "Resize": _single_output(lib.ResizeImpl),
    "ConvTranspose": _single_output(lib.ConvTransposeImpl),
    "RNN": lambda attrs, node, options: lib.RecurrentImpl("RNN", attrs),
    "GRU": lambda attrs, node, options: lib.RecurrentImpl("GRU", attrs),
    "LSTM": lambda attrs, node, options: lib.RecurrentImpl("LSTM", attrs),
    **quantized.CPU_OPS,
    "Attention": AttentionImpl,
    "If": IfImpl, "Loop": LoopImpl, "Scan": ScanImpl,
    "ReduceSum": _reduce("ReduceSum"), "ReduceMean": _reduce("ReduceMean"), "ReduceMax": _reduce("ReduceMax"),
    "ReduceMin": _reduce("ReduceMin"), "ReduceProd": _reduce("ReduceProd"),
    "ArgMax": _single_output(lambda attrs: lib.ArgImpl("ArgMax", attrs)),
    "ArgMin": _single_output(lambda attrs: lib.ArgImpl("ArgMin", attrs)),
    "Reshape": _view, "Flatten": _view, "Squeeze": _view, "Unsqueeze": _view, "Identity": _view,
    f"{TLC_DOMAIN}.ConvNhwc": _single_output(lib.ConvNhwcImpl),
    f"{TLC_DOMAIN}.MaxPoolNhwc": _single_output(lambda attrs: lib.PoolNhwcImpl(attrs, "max")),
    f"{TLC_DOMAIN}.AveragePoolNhwc": _single_output(lambda attrs: lib.PoolNhwcImpl(attrs, "avg")),
    f"{TLC_DOMAIN}.GlobalAveragePoolNhwc": _single_output(lambda attrs: lib.GlobalPoolNhwcImpl("mean")),
    f"{TLC_DOMAIN}.GlobalMaxPoolNhwc": _single_output(lambda attrs: lib.GlobalPoolNhwcImpl("max")),
}


def choose(node: Node, options: CompileOptions) -> StepImpl:
    """The implementation of ``node`` from the target's op table (``CPU_OPS`` for the CPU; see the module
    docstring): its own entry, else (an elementwise op) the table's ``ELEMENTWISE`` entry, else the reference."""
    attrs = opdef_attrs(node)
    table = options.target.op_table()
    factory = table.get(node.qualified_op)
    if factory is None and _elementwise(node):
        factory = table.get(ELEMENTWISE)
    reason = f"no native kernel for {node.qualified_op}"
    if factory is not None:
        try:
            return factory(attrs, node, options)
        except NotNative as exc:
            reason = str(exc)
    return ReferenceImpl(reason)


def _elementwise(node: Node) -> bool:
    opdef = opdef_of(node)
    return opdef.has(Trait.ELEMENTWISE) and opdef.expr is not None and node.num_outputs == 1
