"""fold: replace every pure node whose inputs are all constants (Shape/Size-like ops: statically shaped) by constants.

The values come from the op registry's reference implementation (``OpDef.run_reference``), so folding computes
exactly what the reference executor would. Rules:

- Only ops that are pure and foldable (``OpDef.is_pure``, ``OpDef.is_foldable``) fold; ops with subgraph
  attributes (``tlc.Fused``) do not (running a body is the reference executor's business, not a pass's).
- Ops with ``Trait.SHAPE_ONLY`` (Shape, Size) fold from their input's *type* when it is static: the reference
  sees a zero-strided stand-in array of that shape, so nothing of that size is allocated.
- Size bound: an output may hold at most ``max(options.fold_size_limit, largest constant input)`` elements, so
  folding never grows the model beyond the limit (a Transpose or Cast of a big weight still folds; a
  ConstantOfShape that would materialise a tensor larger than the limit does not). When inference gives a
  static output shape the check happens before computing; otherwise the result is computed, measured and
  dropped if it is too large. Skipped nodes are counted as ``skipped_too_large``.
- A folded value keeps its name (and so its graph-output name). Inputs left unused are DCE's to remove.
"""

from __future__ import annotations

import numpy as np

from ..errors import PassError
from ..ir.graph import Graph, Node, Value
from ..ir.types import np_dtype
from ..ops import OpDef, Trait, lookup
from .base import Pass, PassResult, register_pass


@register_pass
class FoldPass(Pass):
    name = "fold"
    min_level = 1
    description = "constant folding: nodes of constant inputs, and Shape/Size of static shapes, become constants"

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        for node in graph.nodes():
            opdef = _foldable_opdef(node)
            if opdef is None:
                continue
            found = _constant_inputs(graph, node, opdef)
            if found is None or not any(graph.num_uses(v) for v in node.outputs):
                continue
            self.current_node = node.name
            inputs, largest_input = found
            limit = max(self.options.fold_size_limit, largest_input)
            if any(t is not None and t.numel is not None and t.numel > limit for t in node.output_types):
                result.note("skipped_too_large")
                continue
            arrays = opdef.run_reference(inputs, node.attrs)[: node.num_outputs]
            if any(a.size > limit for a in arrays):
                result.note("skipped_too_large")
                continue
            _check_types(node, arrays)
            replace_with_constants(graph, node, arrays)
            result.count("folded")
        self.current_node = None
        return result


def _foldable_opdef(node: Node) -> OpDef | None:
    if node.domain == "" and node.op in ("Input", "Constant"):
        return None
    opdef = lookup(node.op, node.domain)
    if opdef is None or not (opdef.is_pure and opdef.is_foldable) or opdef.has(Trait.SUBGRAPH):
        return None
    return opdef


def _constant_inputs(graph: Graph, node: Node, opdef: OpDef) -> tuple[list[np.ndarray | None], int] | None:
    """When the node can fold: its input arrays (None for a missing optional input) and the size of its largest
    constant input; else None."""
    shape_only = opdef.has(Trait.SHAPE_ONLY)
    arrays: list[np.ndarray | None] = []
    largest = 0
    for v in graph.inputs_of(node):
        if v is None:
            arrays.append(None)
            continue
        value = graph.const_value(v)
        if value is not None:
            largest = max(largest, value.size)
        elif shape_only:
            t = graph.type_of(v)
            if t is not None and t.is_static:
                # NOTE: a read-only, zero-strided stand-in: it has the shape and dtype and allocates one element.
                value = np.broadcast_to(np.zeros((), np_dtype(t.dtype)), t.shape)
        if value is None:
            return None
        arrays.append(value)
    return arrays, largest


def _check_types(node: Node, arrays: list[np.ndarray]) -> None:
    for port, (array, t) in enumerate(zip(arrays, node.output_types)):
        if t is not None and not t.matches(array):
            raise PassError(f"folding node {node.name!r} ({node.qualified_op}): the reference implementation "
                            f"gave {array.dtype}{list(array.shape)} for output {port}, typed {t}",
                            pass_name="fold", node=node.name)


def replace_with_constants(graph: Graph, node: Node, arrays: list[np.ndarray]) -> list[Value]:
    """Replace ``node`` by one Constant per used output, each under the output's name; erase ``node``."""
    used = [(port, graph.value_name(v)) for port, v in enumerate(node.outputs) if graph.num_uses(v)]
    temporaries = []
    for port, name in used:
        tmp = graph.constant(arrays[port], name=graph.fresh_name(f"{name}.folded"))
        graph.replace_all_uses(Value(node.id, port), tmp)
        temporaries.append(tmp)
    graph.erase(node)
    # The old names are free now: move each constant under its value's original name.
    finals = []
    for (port, name), tmp in zip(used, temporaries):
        final = graph.constant(arrays[port], name=name)
        graph.replace_all_uses(tmp, final)
        graph.erase(tmp.node)
        finals.append(final)
    return finals
