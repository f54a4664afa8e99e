"""horizontal: products that read one activation become one product (horizontal fusion; -O2).

Models often multiply one activation by several weights side by side: attention's query, key and value
projections, the heads of a multi-task net, the fifty small branches of ``tools/models.branches50``. Each is
a step of its own, with its own launch and its own pass over the activation. This pass puts the weights side by
side instead (TVM's CombineParallelDense, TensorRT's horizontal fusion):

    MatMul(a, B1) [+ c1], MatMul(a, B2) [+ c2], ...   ->   Split(MatMul(a, [B1 B2 ...]) [+ [c1 c2 ...]], -1)
    Gemm(a, B1, C1), Gemm(a, B2, C2), ...             ->   Split(Gemm(a, [B1 B2 ...], [C1 C2 ...]), -1)

Members: the same first input ``a`` (the value, not an equal one: CSE runs first), a constant 2-D B with the same
K and dtype, and for Gemm the same ``alpha``, ``beta``, ``transB`` and ``transA = 0``; a bias (MatMul's only
consumer an Add of a constant, Gemm's C) that varies along the output's last axis only ([N], [1, N] or a
scalar). Members with a bias and members without form separate groups. Each column of a product is its own
dot product over K, so the fused product computes what the members did (to the last bit where the product
kernel sums each column in the same order at any width; numpy's may differ by an ulp).

Then what follows the Split is cleaned up, so that branches that are concatenated again vanish:

- **hoist**: every output of a Split feeding one unary elementwise op of the same kind (Relu, Clip with equal
  scalar bounds, ...) -> the op once before the Split;
- **join**: a Concat of all the outputs of one Split, in order, along its axis -> the Split's input.

Where the outputs stay apart (attention's query, key, value), the Split is one copy of the fused result. The pass
skips groups whose fused product would be large (``MAX_FUSED_MACS`` multiply-adds per row of ``a``'s
matrix, summed over the members): those products are not launch-bound, and one big product in place of three
would only add the Split's copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ops import lookup
from .base import Pass, PassResult, register_pass

#: groups whose fused product exceeds this many multiply-adds per row of A (K * sum of N) are left alone: a
#: product of that size is compute-bound, so a launch saved is nothing next to the Split's copy of the result
#: (tools/models.transformer_block's three 768 x 768 projections: 1.8M per row)
MAX_FUSED_MACS = 1 << 17


@dataclass
class _Member:
    node: Node           # the MatMul or Gemm
    weight: np.ndarray   # B as [K, N] (a Gemm's transB=1 weight transposed)
    bias: np.ndarray | None   # [N], or None
    add: Node | None     # a MatMul's bias Add
    result: Value        # what the member's consumers read (the Add's output where there is one)


@register_pass
class HorizontalPass(Pass):
    name = "horizontal"
    min_level = 2
    description = ("horizontal fusion: products of one activation by several constant weights become one "
                   "product and a Split; Split -> same unary op -> Concat folds away")

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        graph.infer_missing_types()
        for members in _groups(graph):
            self.current_node = members[0].node.name
            _combine(graph, members)
            result.count("products_combined", len(members))
        self.current_node = None
        changed = True
        while changed:
            changed = False
            for node in graph.nodes():
                if node.domain != "":
                    continue
                if node.op == "Split" and _hoist(graph, node):
                    result.count("ops_hoisted")
                    changed = True
                    break
                if node.op == "Concat" and _join(graph, node):
                    result.count("splits_joined")
                    changed = True
                    break
        return result


# ---------------------------------------------------------------------------- grouping
def _groups(graph: Graph) -> list[list[_Member]]:
    groups: dict[tuple, list[_Member]] = {}
    for node in graph.nodes():
        if node.domain != "" or node.op not in ("MatMul", "Gemm"):
            continue
        found = _member(graph, node)
        if found is not None:
            key, member = found
            groups.setdefault(key, []).append(member)
    out = []
    for members in groups.values():
        k = members[0].weight.shape[0]
        if len(members) >= 2 and k * sum(m.weight.shape[1] for m in members) <= MAX_FUSED_MACS:
            out.append(members)
    return out


def _member(graph: Graph, node: Node) -> tuple[tuple, _Member] | None:
    """The node's group key and its member record, or None when it cannot take part."""
    inputs = graph.inputs_of(node)
    a = inputs[0] if inputs else None
    b = graph.const_value(inputs[1]) if len(inputs) > 1 else None
    a_type, out_type = graph.type_of(a) if a is not None else None, graph.type_of(node.outputs[0])
    if (b is None or b.ndim != 2 or a_type is None or a_type.rank is None or a_type.rank < 1 or out_type is None
            or out_type.rank is None or a_type.dtype != b.dtype.name or out_type.rank < 1):
        return None
    if node.op == "MatMul":
        add, bias = _bias_add(graph, node, out_type.rank)
        weight, key_attrs = b, ()
    else:
        attrs = lookup("Gemm").resolved_attrs(node)
        if attrs.get("transA", 0):
            return None
        weight = b.T if attrs.get("transB", 0) else b
        has_c = len(inputs) > 2 and inputs[2] is not None
        c = graph.const_value(inputs[2]) if has_c else None
        bias = None if c is None else _row_bias(c, weight.shape[1], 2)
        if has_c and bias is None:   # a C that is no constant, or one that varies along rows
            return None
        add, key_attrs = None, (float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0)))
    result = add.outputs[0] if add is not None else node.outputs[0]
    key = (node.op, a, weight.shape[0], weight.dtype.str, key_attrs, bias is not None)
    return key, _Member(node, weight, bias, add, result)


def _bias_add(graph: Graph, node: Node, rank: int) -> tuple[Node | None, np.ndarray | None]:
    """A MatMul's bias: its only consumer an Add of a constant that varies along the last axis only."""
    out = node.outputs[0]
    users = graph.users(out)
    if len(users) != 1 or graph.num_uses(out) != 1:
        return None, None
    add, port = users[0]
    if add.op != "Add" or add.domain != "":
        return None, None
    other = graph.inputs_of(add)[1 - port]
    c = graph.const_value(other)
    if c is None or c.dtype.name != graph.type_of(out).dtype or graph.type_of(add.outputs[0]) != graph.type_of(out):
        return None, None
    n = graph.shape_of(out)[-1]
    bias = _row_bias(c, n, rank) if isinstance(n, int) else None
    return (add, bias) if bias is not None else (None, None)


def _row_bias(c: np.ndarray, n: int, rank: int) -> np.ndarray | None:
    """``c`` as an [n] row when it broadcasts along the last axis only (shape [n], [1, .., 1, n] or all ones)
    and has no more than ``rank`` axes; else None."""
    if c.ndim > rank or any(d != 1 for d in c.shape[:-1]) or (c.ndim and c.shape[-1] not in (1, n)):
        return None
    return np.broadcast_to(c.reshape(-1) if c.ndim else c.reshape(1), (n,)).copy()


# ---------------------------------------------------------------------------- rewriting
def _combine(graph: Graph, members: list[_Member]) -> None:
    first = members[0].node
    a = graph.inputs_of(first)[0]
    weight = graph.constant(np.concatenate([m.weight for m in members], axis=1), f"{first.name}_combined_w")
    biases = [m.bias for m in members]
    if first.op == "MatMul":
        fused = graph.add_node("MatMul", [a, weight], name=f"{first.name}_combined")
        if biases[0] is not None:
            bias = graph.constant(np.concatenate(biases), f"{first.name}_combined_b")
            fused = graph.add_node("Add", [fused, bias], name=f"{first.name}_combined_bias")
    else:
        attrs = lookup("Gemm").resolved_attrs(first)
        inputs = [a, weight]
        if biases[0] is not None:
            inputs.append(graph.constant(np.concatenate(biases), f"{first.name}_combined_c"))
        fused = graph.add_node("Gemm", inputs, name=f"{first.name}_combined",
                               alpha=float(attrs.get("alpha", 1.0)), beta=float(attrs.get("beta", 1.0)))
    sizes = graph.constant(np.array([m.weight.shape[1] for m in members], np.int64), f"{first.name}_sizes")
    parts = graph.add_node("Split", [fused, sizes], name=f"{first.name}_split", axis=-1,
                           output_names=[graph.fresh_name(f"{m.node.name}_part") for m in members])
    parts = parts if isinstance(parts, tuple) else (parts,)
    graph.replace_values([(m.result, part) for m, part in zip(members, parts, strict=True)],
             [n for m in members for n in (m.add, m.node) if n is not None])


def _split_parts(graph: Graph, split: Node) -> tuple[list[int], int] | None:
    """A Split's part sizes and its axis (non-negative), when both are known."""
    inputs = graph.inputs_of(split)
    x_type = graph.type_of(inputs[0])
    if x_type is None or x_type.rank is None:
        return None
    axis = lookup("Split").resolved_attrs(split).get("axis", 0)
    axis = axis + x_type.rank if axis < 0 else axis
    sizes = [graph.shape_of(v)[axis] if graph.shape_of(v) is not None else None for v in split.outputs]
    if any(not isinstance(s, int) for s in sizes):
        return None
    return sizes, axis


def _hoist(graph: Graph, split: Node) -> bool:
    """Split -> the same unary elementwise op on every part  =>  the op -> Split."""
    parts = _split_parts(graph, split)
    if parts is None:
        return False
    users = []
    for out in split.outputs:
        found = graph.users(out)
        if len(found) != 1 or graph.num_uses(out) != 1 or found[0][1] != 0:
            return False
        users.append(found[0][0])
    first = users[0]
    opdef = lookup(first.op, first.domain)
    if opdef is None or not opdef.is_elementwise or not opdef.is_pure or first.num_outputs != 1:
        return False
    extra = graph.inputs_of(first)[1:]
    attrs = opdef.resolved_attrs(first)
    for user in users:
        if (user.op, user.domain) != (first.op, first.domain) or graph.inputs_of(user)[1:] != extra \
                or opdef.resolved_attrs(user) != attrs:
            return False
    for v in extra:   # other operands: scalars every part sees alike (Clip's bounds)
        shape = graph.shape_of(v) if v is not None else ()
        if shape is None or any(d != 1 for d in shape):
            return False
    x, sizes = graph.inputs_of(split)[0], graph.inputs_of(split)[1:]
    hoisted = graph.add_node(first.op, [x, *extra], domain=first.domain, name=f"{first.name}_hoisted",
                             attrs=dict(first.attrs))
    new_parts = graph.add_node("Split", [hoisted, *sizes], name=f"{split.name}_after",
                               output_names=[graph.fresh_name(f"{u.name}_part") for u in users],
                               attrs=dict(split.attrs))
    new_parts = (new_parts,) if isinstance(new_parts, Value) else tuple(new_parts)   # Value is a tuple too
    graph.replace_values([(u.outputs[0], part) for u, part in zip(users, new_parts, strict=True)], [*users, split])
    return True


def _join(graph: Graph, concat: Node) -> bool:
    """Concat of every part of one Split, in order, along the Split's axis  =>  the Split's input."""
    inputs = graph.inputs_of(concat)
    if not inputs or any(v is None for v in inputs):
        return False
    split = graph.producer(inputs[0])
    if split.op != "Split" or split.domain != "" or list(inputs) != list(split.outputs):
        return False
    parts = _split_parts(graph, split)
    out_type = graph.type_of(concat.outputs[0])
    if parts is None or out_type is None or out_type.rank is None:
        return False
    axis = lookup("Concat").resolved_attrs(concat).get("axis")
    axis = axis + out_type.rank if axis < 0 else axis
    if axis != parts[1]:
        return False
    graph.replace_values([(concat.outputs[0], graph.inputs_of(split)[0])], [concat])
    graph.erase_if_dead([split], cascade=False)
    return True
