"""fold: replace every pure node whose inputs are all constants (Shape/Size-like ops: statically shaped) by constants.

The values come from the op registry's reference implementation (``OpDef.run_reference``), so folding computes
exactly what the reference executor would. Rules:

- Only ops that are pure and foldable (``OpDef.is_pure``, ``OpDef.is_foldable``) fold; ops with subgraph
  attributes (``tlc.Fused``, If, Loop, Scan) do not (running a body is the reference executor's business, not a
  pass's). An ``If`` whose condition is a constant is replaced by the branch it takes, inlined (its captures
  become the branch's inputs); the bodies of If, Loop and Scan are folded on their own (their captures are
  inputs there, not constants).
- Ops with ``Trait.SHAPE_ONLY`` (Shape, Size) fold from their input's *type* when it is static: the reference
  sees a zero-strided stand-in array of that shape, so nothing of that size is allocated.
- A folded value keeps its name (and so its graph-output name). Inputs left unused are DCE's to remove.
- Types downstream of a fold are inferred again: a value the importer could not know (a Reshape whose shape
  is ``Concat(Slice(Shape(x)), [-1])``, as ``flatten(2)`` exports) gets its dims once that shape is a constant,
  and the rewrites and fusion that need static shapes see them.

Size policy: the question is not how big a constant is but whether storing it costs anything the model does not
pay anyway.

1. *No growth*: a result no larger than the node's largest constant input always folds (a Transpose, Cast or
   Reshape of a weight): the model does not grow.
2. *Small*: a result of at most ``options.fold_size_limit`` elements always folds.
3. *Parameter*: a larger result folds when every run-time reader of it reads it whole: each consumer, reached
   directly or through consumers that fold as well, is an op that is not elementwise (``OpDef.is_elementwise``):
   a contraction's weight, a normalisation's scale, the table of a Gather, a Concat operand. Such an operand is
   materialised anyway, at compile time or at every run, and folding it lets rewrites see it (Conv+BatchNorm
   folding needs constant weights) and kernels prepare it once.
4. Otherwise the node stays: an elementwise reader takes its operand with broadcasting, so a large filled,
   expanded or tiled constant feeding Add/Mul/... (or a graph output) is model growth that computing at run
   time avoids. Skipped nodes are counted as ``skipped_too_large``.

The policy asks the registry (traits), not op names. When inference gives a static output shape the size check
happens before computing; otherwise the result is computed, measured and dropped if the policy refuses it.
Folds of equal inputs share one array (ConstantOfShape weights of one shape and fill): constants are immutable,
and CSE then merges the nodes without comparing bytes.

Memory: the light models' weights are ConstantOfShape fills, so -O2 materialises them. VGG-19: 144M float32
elements (fc6 alone 102M); equal fills shared, 490 MiB are held, and filling them is most of the -O2 time
(~0.5 s of 0.66 s in a fresh process). An unoptimized run fills every weight at every run instead: peak RSS of
load + one reference run is 821 MiB at -O0 and 762 MiB for load + -O2 + one run (measured on the 2-core VM).
"""

from __future__ import annotations

import numpy as np

from ..errors import PassError
from ..ir.graph import Graph, Node, Value
from ..ir.hashing import attr_digest
from ..ir.types import np_dtype
from ..ops import OpDef, Trait, lookup
from ..ops.control import bodies
from .base import Pass, PassResult, register_pass
from .dce import absorb

#: inputs up to this many elements (in all) make a fold shareable: its key is cheap to build.
_SHAREABLE_INPUTS = 4096


@register_pass
class FoldPass(Pass):
    name = "fold"
    min_level = 1
    description = "constant folding: nodes of constant inputs, and Shape/Size of static shapes, become constants"

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        policy = SizePolicy(graph, self.options.fold_size_limit)
        shared: dict[tuple, list[np.ndarray]] = {}
        folded: list[int] = []   # ids of the constants made
        for node in graph.nodes():
            if node.domain == "" and node.op == "If" and _constant_condition(graph, node) is not None:
                self.current_node = node.name
                folded.extend(v.node for v in inline_if(graph, node, _constant_condition(graph, node)))
                result.count("if_inlined")
                continue
            if bodies(node):
                before = list(node.output_types)
                for _, body in bodies(node):
                    absorb(result, self.run(body))
                graph.infer_node(node)
                if node.output_types != before:
                    folded.append(node.id)
                continue
            opdef = _foldable_opdef(graph, node)
            if opdef is None:
                continue
            found = _constant_inputs(graph, node, opdef)
            if found is None or not any(graph.num_uses(v) for v in node.outputs):
                continue
            self.current_node = node.name
            inputs, largest_input = found
            sizes = [t.numel for t in node.output_types if t is not None and t.numel is not None]
            if not policy.allows(node, max(sizes, default=0), largest_input):
                result.note("skipped_too_large")
                continue
            key = _share_key(node, opdef, inputs)
            arrays = shared.get(key) if key is not None else None
            if arrays is None:
                arrays = opdef.run_reference(inputs, node.attrs, [None if t is None else t.dtype
                                                                  for t in node.output_types])[: node.num_outputs]
                if not policy.allows(node, max((a.size for a in arrays), default=0), largest_input):
                    result.note("skipped_too_large")
                    continue
                _check_types(node, arrays)
                if key is not None:
                    shared[key] = arrays
            folded.extend(v.node for v in replace_with_constants(graph, node, arrays))
            result.count("folded")
        self.current_node = None
        refined = refine_types(graph, folded) if folded else 0
        if refined:
            result.note("types_refined", refined)
        return result


def _constant_condition(graph: Graph, node: Node) -> bool | None:
    cond = graph.const_value(graph.input_of(node, 0))
    return bool(cond.reshape(-1)[0]) if cond is not None and cond.size == 1 else None


def inline_if(graph: Graph, node: Node, taken: bool) -> list[Value]:
    """Replace an If by the operations of the branch it takes; returns the values that replace its outputs."""
    branch = node.attrs["then_branch" if taken else "else_branch"]
    values = graph.inline(branch, graph.inputs_of(node)[1:], infer=True)
    graph.replace_values(zip(node.outputs, values), [node])
    return values


def refine_types(graph: Graph, constants: list[int]) -> int:
    """Infer again, in topological order, the types of the nodes that read one of the new ``constants`` or a value
    whose type this walk changed; returns how many nodes got a different type."""
    sources = set(constants)
    changed_values: set[Value] = set()
    changed = 0
    for node in graph.nodes():
        if node.domain == "" and node.op in ("Input", "Constant"):
            continue
        if not any(v is not None and (v.node in sources or v in changed_values) for v in graph.inputs_of(node)):
            continue
        before = list(node.output_types)
        graph.infer_node(node)
        if node.output_types != before:
            changed += 1
            changed_values.update(v for v, old, new in zip(node.outputs, before, node.output_types) if old != new)
    return changed


class SizePolicy:
    """Whether a fold's result may be as large as it is (see the module docstring: no growth, small, parameter).

    NOTE: which nodes *could* fold is computed once, in topological order, when first needed: the consumers the
    parameter walk visits are nodes the pass has not reached yet, so folding upstream of them changes nothing
    of the answer (their inputs are constants or foldable nodes either way).
    """

    def __init__(self, graph: Graph, limit: int):
        self.graph = graph
        self.limit = limit
        self._computable: set[int] | None = None

    @property
    def computable(self) -> set[int]:
        """Ids of the nodes that could fold (constant or foldable inputs all the way up); computed when first
        needed, i.e. when a result exceeds the limit (most graphs never ask)."""
        if self._computable is None:
            self._computable = set()
            for node in self.graph.nodes():
                opdef = _foldable_opdef(self.graph, node)
                if opdef is not None and all(v is None or self._known(v, opdef)
                                             for v in self.graph.inputs_of(node)):
                    self._computable.add(node.id)
        return self._computable

    def _known(self, value: Value, opdef: OpDef) -> bool:
        if value.node in self._computable or self.graph.is_constant(value):
            return True
        t = self.graph.type_of(value)
        return opdef.has(Trait.SHAPE_ONLY) and t is not None and t.is_static

    def allows(self, node: Node, size: int, largest_input: int) -> bool:
        if size <= max(self.limit, largest_input):
            return True
        return self.read_whole(node)

    def read_whole(self, node: Node) -> bool:
        """True when every run-time reader of ``node``'s results (through consumers that fold too) is an op that
        is not elementwise, and no result is a graph output."""
        graph = self.graph
        stack, seen = [node], {node.id}
        while stack:
            current = stack.pop()
            for value in current.outputs:
                if graph.is_output(value):
                    return False
                for user, _ in graph.users(value):
                    if user.id in self.computable:
                        if user.id not in seen:
                            seen.add(user.id)
                            stack.append(user)
                        continue
                    opdef = lookup(user.op, user.domain)
                    if opdef is None or opdef.is_elementwise:
                        return False
        return True


def _foldable_opdef(graph: Graph, node: Node) -> OpDef | None:
    if node.domain == "" and node.op in ("Input", "Constant"):
        return None
    opdef = lookup(node.op, node.domain)
    if opdef is None or not (opdef.pure_at(graph, node) and opdef.is_foldable) or opdef.has(Trait.SUBGRAPH):
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


def _share_key(node: Node, opdef: OpDef, inputs: list[np.ndarray | None]) -> tuple | None:
    """A key equal for folds that compute the same arrays (same op, attributes and input values), when the inputs
    are small enough to key on; else None. A shape-only op keys on its inputs' shapes (its stand-ins are zeros)."""
    if opdef.has(Trait.SHAPE_ONLY):
        parts = tuple(None if a is None else (a.dtype.str, a.shape) for a in inputs)
    elif sum(a.size for a in inputs if a is not None) <= _SHAREABLE_INPUTS:
        parts = tuple(None if a is None else attr_digest(a) for a in inputs)
    else:
        return None
    attrs = tuple((k, attr_digest(v)) for k, v in sorted(node.attrs.items()))
    return node.domain, node.op, node.num_outputs, attrs, parts


def _check_types(node: Node, arrays: list[np.ndarray]) -> None:
    for port, (array, t) in enumerate(zip(arrays, node.output_types)):
        if t is not None and not t.matches(array):
            raise PassError(f"folding node {node.name!r} ({node.qualified_op}): the reference implementation "
                            f"gave {array.dtype}{list(array.shape)} for output {port}, typed {t}",
                            pass_name="fold", node=node.name)


def replace_with_constants(graph: Graph, node: Node, arrays: list[np.ndarray]) -> list[Value]:
    """Replace ``node`` by one Constant per used output, each under the output's name; erase ``node``."""
    used = [(port, graph.value_name(v)) for port, v in enumerate(node.outputs) if graph.num_uses(v)]
    if node.name not in {name for _, name in used}:
        # The usual case: renaming the outputs frees their names at once, so each constant is made only once.
        finals = []
        for port, name in used:
            graph.rename_value(Value(node.id, port), graph.fresh_name(f"{name}.folded"))
            final = graph.constant(arrays[port], name=name)
            graph.replace_all_uses(Value(node.id, port), final)
            finals.append(final)
        graph.erase(node)
        return finals
    temporaries = []
    for port, name in used:
        tmp = graph.constant(arrays[port], name=graph.fresh_name(f"{name}.folded"))
        graph.replace_all_uses(Value(node.id, port), tmp)
        temporaries.append(tmp)
    graph.erase(node)
    # The node's own name is one of the names: it is free only now that the node is gone.
    finals = []
    for (port, name), tmp in zip(used, temporaries):
        final = graph.constant(arrays[port], name=name)
        graph.replace_all_uses(tmp, final)
        graph.erase(tmp.node)
        finals.append(final)
    return finals
