"""Transpose cleanups of the layout pass: cancel, compose, fold, turn into views, and sink through elementwise ops.

Every rule leaves fewer or cheaper transposes, never more:

- ``Transpose(Transpose(x, p), q)`` is one ``Transpose(x, p∘q)``, or ``x`` when that is the identity (as is a
  Transpose with an identity perm);
- a Transpose of a constant is the transposed constant (when the constant has no other user, or is small), and a
  Transpose of a ConstantOfShape splat the splat in the permuted shape;
- a Transpose that moves only size-1 axes is a Reshape (a view in the runtime, no copy);
- sinking: ``E(Transpose(x, p), c)`` for an elementwise E is ``Transpose(E(x, c'), p)`` with ``c'`` the constant
  transposed back. It fires when it merges several transposes into one, or when the transpose it moves down
  reaches another Transpose through a chain of such ops (and then composes with it).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ops import lookup
from .base import PassResult

#: how far sinking looks down a chain of elementwise ops for a Transpose to meet
SINK_LOOKAHEAD = 16


def is_transpose(node: Node) -> bool:
    return node.domain == "" and node.op == "Transpose"


def perm_of(graph: Graph, node: Node) -> list[int] | None:
    """The node's permutation (the default reverses the axes), or None when the input rank is unknown."""
    perm = node.attrs.get("perm")
    if perm:
        return list(perm)
    t = graph.type_of(graph.inputs_of(node)[0])
    return None if t is None or t.rank is None else list(reversed(range(t.rank)))


def inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def is_splat(graph: Graph, v: Value) -> bool:
    """``v`` is a ConstantOfShape of a constant shape: every element equal, whatever the layout."""
    node = graph.producer(v)
    return node.domain == "" and node.op == "ConstantOfShape" and graph.is_constant(graph.inputs_of(node)[0])


def transposes_for_free(graph: Graph, v: Value) -> bool:
    """A transpose of ``v`` costs nothing at run time: it is a constant or a splat, transposed at compile time."""
    return graph.is_constant(v) or is_splat(graph, v)


def permute_constant(array: np.ndarray, perm: list[int]) -> np.ndarray:
    """``array`` broadcast up to ``len(perm)`` axes (leading 1s, numpy-style), then transposed by ``perm``."""
    if array.ndim == 0:
        return array
    full = array.reshape((1,) * (len(perm) - array.ndim) + array.shape)
    return np.ascontiguousarray(full.transpose(perm))


def simplify_transposes(graph: Graph, result: PassResult, fold_limit: int, max_sweeps: int = 32) -> None:
    """Apply the module's rules to every Transpose until none fires (bounded by ``max_sweeps``)."""
    for _ in range(max_sweeps):
        if not _sweep(graph, result, fold_limit):
            return


def _sweep(graph: Graph, result: PassResult, fold_limit: int) -> bool:
    changed = False
    for node in graph.nodes():
        if node.id not in graph.nx or not is_transpose(node):
            continue
        perm = perm_of(graph, node)
        if perm is None:
            continue
        if _simplify_one(graph, node, perm, result, fold_limit):
            changed = True
    return changed


def _simplify_one(graph: Graph, node: Node, perm: list[int], result: PassResult, fold_limit: int) -> bool:
    (src,) = graph.inputs_of(node)[:1]
    out = node.output(0)
    if perm == sorted(perm):
        _bypass(graph, node, src)
        result.count("transposes_cancelled")
        return True
    inner = graph.producer(src)
    if is_transpose(inner) and perm_of(graph, inner) is not None:
        composed = [perm_of(graph, inner)[p] for p in perm]
        node.attrs["perm"] = composed
        graph.set_input(node, 0, graph.inputs_of(inner)[0])
        graph.infer_node(node)
        _erase_if_unused(graph, inner)
        result.count("transposes_composed")
        return True
    value = graph.const_value(src)
    if value is not None and (graph.num_uses(src) == 1 or value.size <= fold_limit):
        folded = graph.constant(np.ascontiguousarray(value.transpose(perm)), name=graph.fresh_name(f"{node.name}_c"))
        _bypass(graph, node, folded)
        _erase_if_unused(graph, inner)
        result.count("transposes_folded")
        return True
    if is_splat(graph, src):
        # its transpose is the same splat in the permuted shape (weights too large to fold are often splats)
        dims = graph.const_value(graph.inputs_of(inner)[0])
        shape = graph.constant(np.array([int(dims[p]) for p in perm], np.int64),
                               name=graph.fresh_name(f"{node.name}_shape"))
        splat = graph.add_node("ConstantOfShape", [shape], attrs=dict(inner.attrs),
                               name=graph.fresh_name(f"{node.name}_splat"))
        _bypass(graph, node, splat)
        _erase_if_unused(graph, inner)
        result.count("transposes_folded")
        return True
    if _moves_only_unit_axes(graph.shape_of(src), perm) and graph.shape_of(out) is not None:
        shape = graph.constant(np.array(graph.shape_of(out), np.int64), name=graph.fresh_name(f"{node.name}_shape"))
        view = graph.add_node("Reshape", [src, shape], name=graph.fresh_name(f"{node.name}_view"))
        _bypass(graph, node, view)
        result.count("transposes_to_reshape")
        return True
    return _sink(graph, node, perm, result)


def erase_if_unused(graph: Graph, node: Node) -> None:
    """``_erase_if_unused`` for the layout pass (the values it stopped reading)."""
    _erase_if_unused(graph, node)


def _bypass(graph: Graph, node: Node, replacement: Value) -> None:
    """Make ``node``'s users read ``replacement``, keep the value name for graph outputs, erase ``node``."""
    out = node.output(0)
    name = graph.value_name(out)
    graph.replace_all_uses(out, replacement)
    graph.erase(node)
    # the replacement takes the name of the graph output it now is (when nothing else needs its own name)
    names = {n for v, n in graph.outputs if v == replacement}
    if names == {name} and graph.node(replacement.node).op not in ("Input", "Constant") \
            and not graph.has_value(name):
        graph.rename_value(replacement, name)


def _erase_if_unused(graph: Graph, node: Node) -> None:
    """Erase ``node`` when nothing uses it any more, and so on up through the pure ops that fed only it."""
    if node.id not in graph.nx or (node.op == "Input" and node.domain == ""):
        return
    opdef = lookup(node.op, node.domain)
    if opdef is None or not opdef.is_pure or any(graph.num_uses(v) for v in node.outputs):
        return
    feeding = [graph.producer(v) for v in graph.inputs_of(node) if v is not None]
    graph.erase(node)
    for producer in feeding:
        _erase_if_unused(graph, producer)


def _moves_only_unit_axes(shape, perm: list[int]) -> bool:
    """True when the axes of size other than 1 keep their order (so the transpose is a reshape)."""
    if shape is None or not all(isinstance(d, int) for d in shape):
        return False
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


# ---------------------------------------------------------------------------- sinking
def _sinkable_user(graph: Graph, node: Node, perm: list[int]) -> Node | None:
    """The elementwise op that consumes the Transpose ``node`` and could take it on its output, or None."""
    users = graph.users(node.output(0))
    if len(users) != 1 or graph.is_output(node.output(0)):
        return None
    user = users[0][0]
    return user if _takes_transposed(graph, user, perm) else None


def _takes_transposed(graph: Graph, user: Node, perm: list[int]) -> bool:
    """``user`` is elementwise, single-output, of rank len(perm), and its inputs are each a Transpose by
    ``perm``, a constant, or a scalar."""
    opdef = lookup(user.op, user.domain)
    out_type = user.output_types[0] if user.num_outputs == 1 else None
    if opdef is None or not opdef.is_elementwise or out_type is None or out_type.rank != len(perm):
        return False
    if graph.is_output(user.output(0)):
        return False
    for v in graph.inputs_of(user):
        if v is None or graph.is_constant(v):
            continue
        t = graph.type_of(v)
        producer = graph.producer(v)
        if t is not None and t.rank == 0:
            continue
        if not (is_transpose(producer) and perm_of(graph, producer) == perm):
            return False
    return True


def _leads_to_transpose(graph: Graph, node: Node, perm: list[int]) -> bool:
    """Whether the single-user chain of sinkable ops after ``node`` (an op taking the transpose) ends in one."""
    for _ in range(SINK_LOOKAHEAD):
        out = node.output(0)
        users = graph.users(out)
        if len(users) != 1 or graph.is_output(out):
            return False
        nxt = users[0][0]
        if is_transpose(nxt):
            return True
        opdef = lookup(nxt.op, nxt.domain)
        if opdef is None or not opdef.is_elementwise or nxt.num_outputs != 1:
            return False
        others = [v for v in graph.inputs_of(nxt) if v is not None and v != out]
        if not all(graph.is_constant(v) or (graph.type_of(v) is not None and graph.type_of(v).rank == 0)
                   for v in others):
            return False
        node = nxt
    return False


def _sink(graph: Graph, node: Node, perm: list[int], result: PassResult) -> bool:
    user = _sinkable_user(graph, node, perm)
    if user is None:
        return False
    transposed = {v for v in graph.inputs_of(user) if v is not None and is_transpose(graph.producer(v))}
    # transposes that die once ``user`` reads around them; the moved one costs one, meeting a transpose below
    # saves one again (it composes with it)
    freed = sum(1 for v in transposed if all(u.id == user.id for u, _ in graph.users(v)))
    if freed + (1 if _leads_to_transpose(graph, user, perm) else 0) < 2:
        return False
    inv = inverse(perm)
    new_inputs: list[Value | None] = []
    for v in graph.inputs_of(user):
        if v is None:
            new_inputs.append(None)
        elif v in transposed:
            new_inputs.append(graph.inputs_of(graph.producer(v))[0])
        elif graph.is_constant(v) and graph.const_value(v).ndim > 0:
            c = permute_constant(graph.const_value(v), inv)
            new_inputs.append(graph.constant(c, name=graph.fresh_name(f"{graph.value_name(v)}_t")))
        else:
            new_inputs.append(v)
    out = user.output(0)
    consumers = graph.users(out)
    old_inputs = graph.inputs_of(user)
    graph.set_inputs(user, new_inputs)
    graph.infer_node(user)
    moved = graph.add_node("Transpose", [out], perm=perm, name=graph.fresh_name(f"{user.name}_t"))
    for consumer, port in consumers:
        graph.set_input(consumer, port, moved)
    for v in old_inputs:
        if v is not None:
            _erase_if_unused(graph, graph.producer(v))
    result.count("transposes_sunk")
    return True


def transposes_bytes(graph: Graph) -> int:
    """Elements moved by the graph's Transpose nodes (a summary for tests and stats)."""
    total = 0
    for node in graph.ops():
        if is_transpose(node) and node.output_types[0] is not None and node.output_types[0].shape is not None:
            total += math.prod(d if isinstance(d, int) else 1 for d in node.output_types[0].shape)
    return total
