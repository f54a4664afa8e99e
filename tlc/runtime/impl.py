"""How one step computes: the ``StepImpl`` interface, what it is told when bound (``BindContext``), and the
reference implementation every other one falls back to.

A ``StepImpl`` is chosen per node when a graph is lowered (shape-independent; ``ops.CPU_OPS`` says which);
``bind(ctx)`` specialises it to the concrete types of one input-shape signature and returns a ``bound.Bound``
(or raises ``NotNative`` with a reason, and the step runs its reference). Implementations write into the
planned, C-contiguous output arrays they are given, unless they say otherwise (``writes_outputs=False``:
views, and the reference, whose results the memory planner treats as possibly aliasing their inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.graph import Node
from ..ir.types import TensorType, np_dtype
from ..ops import opdef_of
from ..ops.window import Window, make_window
from .bound import Bound, Call, NotNative, V, static_shapes
from .device import memory_of, on_host
from .options import CompileOptions

RunNode = Callable[[Node, list], list]


@dataclass
class BindContext:
    """What a step is bound to: its node, value ids, concrete types, known values and strides."""

    node: Node
    attrs: dict[str, Any]                          # resolved attributes (schema defaults filled in)
    inputs: tuple[int, ...]                        # value ids (an absent optional input: the program's "missing")
    outputs: tuple[int, ...]
    in_types: list[TensorType | None]
    out_types: list[TensorType | None]
    known: dict[int, np.ndarray]                   # value id -> its value, where fixed for this signature
    strides: dict[int, tuple[int, ...]]            # value id -> byte strides, for values that are strided views
    options: CompileOptions
    run_node: RunNode

    def const(self, port: int) -> np.ndarray | None:
        """The value of input ``port`` when it is fixed for this signature (a constant, or computed from shapes)."""
        return self.known.get(self.inputs[port]) if port < len(self.inputs) else None

    def require_const(self, port: int, what: str) -> np.ndarray:
        value = self.const(port)
        if value is None:
            raise NotNative(f"{what} (input {port}) is not a constant")
        return value

    def contiguous(self, port: int) -> bool:
        return self.inputs[port] not in self.strides

    def in_shapes(self) -> list[tuple[int, ...] | None]:
        return static_shapes(self.in_types, "input")

    def out_shapes(self) -> list[tuple[int, ...] | None]:
        return static_shapes(self.out_types, "output")

    def out_dtype(self, k: int = 0) -> np.dtype:
        return np_dtype(self.out_types[k].dtype)

    @property
    def threads(self) -> int:
        return self.options.threads


class StepImpl:
    """One op's implementation on a target; subclasses implement ``bind``."""

    mode = "library"          # library | native | view | reference (what stats() says while nothing is bound)
    reason = ""               # what it does, for stats()
    shapes_from_data = False  # binds outputs whose shapes depend on the data (returning arrays of its own)

    def bind(self, ctx: BindContext) -> Bound:
        raise NotImplementedError

    def accepts_strided(self, port: int) -> bool:
        """Whether input ``port`` may be any strided view at no extra cost (a transpose then becomes a view)."""
        return False

    def wants_unit_columns(self, port: int, dtype: str) -> bool:
        """Whether input ``port``, of ``dtype``, is read much faster with its last axis contiguous (a product's B,
        which the panel product reads where it is only so): a transpose that moves the last axis stays a copy."""
        return False


def reference_outputs(run_node: RunNode, node: Node) -> Callable[..., list]:
    """``fn(*inputs) -> outputs`` by the op's reference implementation (through the reference interpreter), each
    array C-contiguous: native steps downstream read their inputs by address in C order (ArrayFeatureExtractor's
    numpy result has the selected axis outermost in memory, and a pool kernel after it read the wrong elements)."""
    def fn(*ins):
        return [np.ascontiguousarray(r) if isinstance(r, np.ndarray) and not r.flags.c_contiguous else r
                for r in run_node(node, list(ins))]   # (ascontiguousarray turns a 0-d array into 1-d)

    return fn


def reference_into(run_node: RunNode, node: Node, num_inputs: int, memory=None) -> Callable[..., None]:
    """``fn(*inputs, *outputs)``: the op's reference implementation, its results copied into planned outputs
    (the fallback of a native step while its kernel compiles, or after it failed to). ``memory``: a device's
    (``tlc.runtime.device``): the inputs are copied to the host and the results back into the device outputs."""
    device = memory is not None and memory.device

    def fn(*arrays):
        ins = list(arrays[:num_inputs])
        if device:
            ins = [memory.host(a) for a in ins]
        results = run_node(node, ins)
        for out, res in zip(arrays[num_inputs:], results):
            if out.shape != np.shape(res):
                raise ValueError(f"{node.qualified_op} gave shape {list(np.shape(res))}, planned {list(out.shape)}")
            if device:
                out[...] = memory.to_device(np.asarray(res, out.dtype))
            else:
                np.copyto(out, res)

    return fn


def fallback_calls(ctx: BindContext) -> list[Call]:
    """The reference written into the planned outputs (see ``reference_into``)."""
    fn = reference_into(ctx.run_node, ctx.node, len(ctx.inputs), memory_of(ctx.options.target))
    return [Call(fn, tuple(V(i) for i in ctx.inputs) + tuple(V(o) for o in ctx.outputs))]


class ReferenceImpl(StepImpl):
    """The op's numpy reference implementation from the registry, returning arrays of its own."""

    mode = "reference"

    def __init__(self, reason: str):
        self.reason = reason

    def bind(self, ctx: BindContext) -> Bound:
        fn, note = reference_outputs(ctx.run_node, ctx.node), self.reason
        memory = memory_of(ctx.options.target)
        if memory.device:
            fn, note = on_host(fn, memory), f"{note}; on the host (inputs copied from the device, results back)"
        return Bound([Call(fn, tuple(V(i) for i in ctx.inputs), result=ctx.outputs, unpack=True)],
                     mode="reference", note=note, writes_outputs=False)


def spatial_window(attrs: dict[str, Any], kernel: tuple[int, ...],
                   in_spatial: tuple[int, ...]) -> tuple[Window, list[int], list[int]]:
    """A conv's or pool's window as the op registry reads it (strides, dilations, ``pads`` or ``auto_pad``), and
    its begin and end pads for an input of spatial sizes ``in_spatial``."""
    try:
        window = make_window(attrs, kernel, bool(attrs.get("ceil_mode", 0)))
        _, begins, ends = window.resolve(in_spatial)
    except ValueError as exc:
        raise NotNative(str(exc)) from None
    return window, begins, ends


def opdef_attrs(node: Node) -> dict[str, Any]:
    return opdef_of(node).resolved_attrs(node)
