"""fuse: partition the graph into ``tlc.Fused`` groups that one kernel can compute.

Three kinds of group, found in this order (a node joins at most one group):

1. ``epilogue``: a contraction (``Trait.CONTRACTION``: MatMul, Gemm, Conv) and the elementwise ops downstream
   of it with the contraction's output shape (bias add, activation such as x*sigmoid(x), residual add), as
   long as the raw contraction result is not needed outside. The runtime computes the contraction into the
   output buffer and applies the elementwise part in place.
2. ``reduction``: row kernels: reductions over the last axis only (``Trait.ROW_REDUCIBLE`` ops whose axes are
   the last one, keepdims) with the elementwise work feeding and following them; every value in the group has the
   full shape F or the row shape F[:-1] + (1,). Softmax, layer norm, mean/variance.
3. ``elementwise``: connected regions of elementwise ops whose outputs all have one shape (inputs broadcast).

Then, where the target runs them (``chain``), an epilogue group of a 1x1 conv (stride 1, no padding, one group)
whose only reader is the epilogue group of a 3x3 depthwise conv (padding 1, stride 1 or 2), each epilogue no
more than a constant per-channel bias and a Relu or a Clip of constant bounds, become one ``chain`` group holding
the two: MobileNetV2's expansion and depthwise convs, which the runtime computes in bands of rows
(``tlc.kernels.chain``) so that the expanded tensor never goes to memory whole.

The pass asks op traits, never op names, and the target (``PassOptions.target``) which kinds of group it runs
and which dtypes its kernels compute in: values of other dtypes (integers, float16) stay outside groups, bool
only inside them or as their outputs (masks). A group is legal only when it is convex (no path leaves the group and
comes back, so outlining it creates no cycle); values a group computes that are needed outside it become
outputs of the ``tlc.Fused`` node, under their original names, so nothing is lost and graph outputs keep theirs.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..ir.graph import TLC_DOMAIN, Graph, Node, Value
from ..ir.types import Shape
from ..ops import Trait, lookup, opdef_of
from ..targets import Target
from .base import Pass, PassResult, register_pass

#: nodes an elementwise or row-reduction group grows to at most (``FusePass._grow``; the rest of a region forms
#: groups of its own): a wide group's kernel compiles in time that grows faster than its size. The 800 tiny ops'
#: one group of 401 nodes (a fan of 50 branches) took 32 s to compile with a cold kernel cache and the process
#: 674 MB; capped, 4.9 s and 314 MB (its runs unchanged: b8 208 us against onnxruntime's 576). A chain of 100
#: ops compiled in seconds either way: no suite model but those two has a group above 8 nodes.
MAX_GROUP_NODES = 64


def _static_or_symbolic(shape: Shape | None) -> bool:
    return shape is not None and all(d is not None for d in shape)


class _Partition:
    """Topological indices and group membership while the pass grows groups."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.order = graph.nodes()
        self.index = {n.id: i for i, n in enumerate(self.order)}
        self.group_of: dict[int, int] = {}

    def convex(self, members: set[int]) -> bool:
        """True when no path leaves ``members`` and re-enters it."""
        g, index = self.graph.nx, self.index
        top = max(index[m] for m in members)
        frontier = [s for m in members for s in g.successors(m) if s not in members and index[s] < top]
        seen = set(frontier)
        while frontier:
            node = frontier.pop()
            for s in g.successors(node):
                if s in members:
                    return False
                if s not in seen and index[s] < top:
                    seen.add(s)
                    frontier.append(s)
        return True


def _value_types_ok(graph: Graph, node: Node, allowed: frozenset[str]) -> bool:
    types = [graph.type_of(v) for v in graph.inputs_of(node) if v is not None] + list(node.output_types)
    return all(t is not None and t.dtype in allowed for t in types)


def _elementwise(graph: Graph, node: Node, target: Target) -> bool:
    opdef = lookup(node.op, node.domain)
    return (opdef is not None and opdef.is_elementwise and node.num_outputs == 1
            and _value_types_ok(graph, node, target.internal_dtypes)
            and _static_or_symbolic(node.output_types[0].shape))


def _last_axis_reduction(graph: Graph, node: Node, target: Target) -> bool:
    """A reduction over the last axis alone, keeping dims (or a row op like Softmax that keeps the shape)."""
    opdef = lookup(node.op, node.domain)
    if opdef is None or not opdef.has(Trait.ROW_REDUCIBLE):
        return False
    ins = graph.inputs_of(node)
    in_type = graph.type_of(ins[0]) if ins and ins[0] is not None else None
    if in_type is None or not _static_or_symbolic(in_type.shape) or in_type.rank == 0:
        return False
    dtypes = target.dtypes
    if in_type.dtype not in dtypes or any(t is None or t.dtype not in dtypes for t in node.output_types[:1]):
        return False
    rank = in_type.rank
    attrs = opdef.resolved_attrs(node)
    if any(graph.num_uses(v) for v in node.outputs[1:]):
        return False  # only the main output may be used (LayerNormalization's Mean/InvStdDev)
    if "axis" in opdef.attrs:
        axes = [attrs["axis"]]
    elif len(ins) > 1 and ins[1] is not None:
        axes_value = graph.const_value(ins[1])
        if axes_value is None:
            return False
        axes = [int(a) for a in axes_value.ravel()]
        if not attrs.get("keepdims", 1):
            return False
        if any(v is not None for v in ins[2:]):
            return False
    else:
        return False
    if len(axes) != 1 or axes[0] % rank != rank - 1:
        return False
    out_shape = node.output_types[0].shape
    return out_shape in (in_type.shape, tuple(in_type.shape[:-1]) + (1,))


def _row_shape(shape: Shape) -> Shape:
    return tuple(shape[:-1]) + (1,)


@register_pass
class FusePass(Pass):
    name = "fuse"
    min_level = 2
    description = "group elementwise regions, row reductions and contraction epilogues into tlc.Fused nodes"

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        graph.infer_missing_types()  # groups are chosen by dtype and shape: a graph read from text may lack them
        target = self.options.target
        part = _Partition(graph)
        groups: list[tuple[str, list[int]]] = []
        if target.fuses("epilogue"):
            for node in part.order:
                opdef = lookup(node.op, node.domain)
                if (opdef is not None and opdef.has(Trait.CONTRACTION) and node.id not in part.group_of
                        and _value_types_ok(graph, node, target.dtypes)):
                    chain = self._epilogue(part, node)
                    if len(chain) > 1:
                        groups.append(("epilogue", self._claim(part, chain, len(groups))))
        if target.fuses("reduction"):
            for node in part.order:
                if node.id not in part.group_of and _last_axis_reduction(graph, node, target):
                    full = graph.type_of(graph.inputs_of(node)[0]).shape
                    members = self._grow(part, node, {full, _row_shape(full)})
                    groups.append(("reduction", self._claim(part, members, len(groups))))
        if target.fuses("elementwise"):
            for node in part.order:
                if node.id not in part.group_of and _elementwise(graph, node, target):
                    members = self._grow(part, node, {node.output_types[0].shape})
                    groups.append(("elementwise", self._claim(part, members, len(groups))))
        for kind, members in groups:
            self._outline(graph, part, kind, members)
            result.count(f"groups_{kind}")
            result.count("nodes_fused", len(members))
        if target.fuses("chain"):
            for node in list(graph.ops()):
                second = _chain_partner(graph, node) if node.id in graph else None
                if second is not None:
                    self._outline(graph, None, "chain", [node.id, second.id])
                    result.count("groups_chain")
        return result

    # ---------------------------------------------------------------- finding groups
    @staticmethod
    def _claim(part: _Partition, members: Iterable[int], group: int) -> list[int]:
        ordered = sorted(members, key=part.index.__getitem__)
        for m in ordered:
            part.group_of[m] = group
        return ordered

    def _epilogue(self, part: _Partition, root: Node) -> list[int]:
        """The contraction plus the elementwise ops downstream of it that one in-place pass can apply.

        Grows forward only (consumers of values already in the group), over elementwise ops of the
        contraction's output shape, keeping the group convex. The contraction's own result must not be needed
        outside the group: the kernel overwrites it in place.
        """
        graph, target = part.graph, self.options.target
        result = root.outputs[0]
        shape = graph.type_of(result).shape
        if graph.is_output(result) or graph.type_of(result).dtype not in target.dtypes:
            return [root.id]
        members = {root.id}
        frontier = [root]
        while frontier:
            node = frontier.pop(0)
            users = sorted({u.id: u for v in node.outputs for u, _ in graph.users(v)}.values(),
                           key=lambda n: part.index[n.id])
            for user in users:
                if (user.id in members or user.id in part.group_of or not _elementwise(graph, user, target)
                        or user.output_types[0].shape != shape or user.output_types[0].dtype not in target.dtypes
                        or not part.convex(members | {user.id})):
                    continue
                members.add(user.id)
                frontier.append(user)
        if any(u.id not in members for u, _ in graph.users(result)):
            return [root.id]  # the raw contraction result escapes: no in-place epilogue
        return sorted(members, key=part.index.__getitem__)

    def _grow(self, part: _Partition, seed: Node, shapes: set[Shape]) -> set[int]:
        """Grow a convex region from ``seed`` over eligible neighbours whose shapes are in ``shapes``."""
        graph = part.graph
        members = {seed.id}
        frontier = [seed]
        reduction = len(shapes) > 1
        while frontier:
            node = frontier.pop(0)
            neighbours = [graph.node(v.node) for v in graph.inputs_of(node) if v is not None]
            neighbours += [u for v in node.outputs for u, _ in graph.users(v)]
            for cand in sorted(neighbours, key=lambda n: part.index[n.id]):
                if len(members) >= MAX_GROUP_NODES:
                    return members
                if cand.id in members or cand.id in part.group_of:
                    continue
                if not self._fits(graph, cand, shapes, reduction, self.options.target):
                    continue
                if not part.convex(members | {cand.id}):
                    continue
                members.add(cand.id)
                frontier.append(cand)
        return members

    @staticmethod
    def _fits(graph: Graph, node: Node, shapes: set[Shape], reduction: bool, target: Target) -> bool:
        if _elementwise(graph, node, target):
            return node.output_types[0].shape in shapes
        if reduction and _last_axis_reduction(graph, node, target):
            return graph.type_of(graph.inputs_of(node)[0]).shape in shapes
        return False

    # ---------------------------------------------------------------- outlining
    def _outline(self, graph: Graph, part: _Partition | None, kind: str, members: list[int]) -> None:
        member_set = set(members)
        nodes = [graph.node(m) for m in members]
        body = Graph(graph.fresh_name("fused_body"), opset=dict(graph.opset))
        mapping: dict[Value, Value] = {}
        outer_inputs: list[Value] = []
        absorbed: list[Value] = []  # scalar constants the body holds its own copy of
        for node in nodes:
            for v in graph.inputs_of(node):
                if v is None or v.node in member_set or v in mapping:
                    continue
                array = graph.const_value(v)
                name = graph.value_name(v)
                if array is not None and array.size == 1:
                    mapping[v] = body.constant(array, name=name)
                    absorbed.append(v)
                else:
                    t = graph.type_of(v)
                    mapping[v] = body.input(name, t.dtype, t.shape)
                    outer_inputs.append(v)
            # NOTE: the body sees the same input types as the node did, so its output types are the node's: copied,
            # not inferred again (inference was most of this pass's time on DenseNet-121).
            outs = body.add_node(node.op, [None if v is None else mapping[v] for v in graph.inputs_of(node)],
                                 domain=node.domain, name=node.name, output_names=list(node.output_names),
                                 attrs=node.attrs, infer=False)
            outs = (outs,) if isinstance(outs, Value) else outs
            body.node(outs[0]).output_types = list(node.output_types)
            for old, new in zip(node.outputs, outs):
                mapping[old] = new
        escaping: list[Value] = []
        for node in nodes:
            for v in node.outputs:
                if graph.is_output(v) or any(u.id not in member_set for u, _ in graph.users(v)):
                    escaping.append(v)
        if not escaping:
            return  # nothing of the group is used: leave it to dce
        for v in escaping:
            body.output(mapping[v], graph.value_name(v))
        names = [graph.value_name(v) for v in escaping]
        fused_name = graph.fresh_name(f"fused_{kind}")
        temp_names = [graph.fresh_name(f"{fused_name}_out{i}") for i in range(len(escaping))]
        fused = graph.add_node("Fused", outer_inputs, domain=TLC_DOMAIN, name=fused_name, output_names=temp_names,
                               body=body, kind=kind)
        fused = (fused,) if isinstance(fused, Value) else fused
        for old, new in zip(escaping, fused):
            graph.replace_all_uses(old, new)
        for node in reversed(nodes):
            graph.erase(node)
        # an outer constant only the group read would be left dead (an unused initializer)
        graph.erase_if_dead([v.node for v in absorbed], cascade=False)
        for new, name in zip(fused, names):
            graph.rename_value(new, name)


# -------------------------------------------------------------------- chains
def _epilogue_conv(graph: Graph, node: Node) -> tuple[Node, Graph, dict] | None:
    """(the conv, the body, its attributes) of an epilogue group of a float32 2-D Conv whose epilogue is no more
    than a constant per-channel bias added and a Relu or a Clip of constant bounds; else None."""
    if node.domain != TLC_DOMAIN or node.op != "Fused" or node.attrs.get("kind") != "epilogue" \
            or len(node.outputs) != 1:
        return None
    body: Graph = node.attrs["body"]
    ops = body.ops()
    head = ops[0] if ops else None
    if head is None or head.domain != "" or head.op != "Conv":
        return None
    out = body.type_of(head.outputs[0])
    if out is None or out.dtype != "float32" or len(out.shape) != 4:
        return None
    rest = ops[1:]
    if rest and rest[0].op == "Add":   # the bias: an input of the group that is a constant of the outer graph
        a, b = body.inputs_of(rest[0])
        other = b if a == head.outputs[0] else a
        src = body.node(other.node)
        if src.op != "Input":
            return None
        port = [n.id for n in body.inputs].index(src.id)
        if graph.const_value(graph.inputs_of(node)[port]) is None:
            return None
        rest = rest[1:]
    if len(rest) > 1 or rest and rest[0].op not in ("Relu", "Clip"):
        return None
    if rest and rest[0].op == "Clip" and any(v is not None and body.const_value(v) is None
                                             for v in body.inputs_of(rest[0])[1:]):
        return None
    if any(n.domain != "" for n in rest):
        return None
    attrs = opdef_of(head).resolved_attrs(head)
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "") or any(d != 1 for d in attrs.get("dilations") or [1]):
        return None
    return head, body, attrs


def _chain_partner(graph: Graph, node: Node) -> Node | None:
    """The depthwise conv's epilogue group that ``node``, a 1x1 conv's, feeds alone (see the module docstring)."""
    first = _epilogue_conv(graph, node)
    if first is None:
        return None
    head, body, attrs = first
    w = body.type_of(body.inputs_of(head)[1])
    if w is None or tuple(w.shape[2:]) != (1, 1) or attrs.get("group", 1) != 1 \
            or any(s != 1 for s in attrs.get("strides") or [1]) or any(p != 0 for p in attrs.get("pads") or [0]):
        return None
    value = node.outputs[0]
    users = graph.users(value)
    if graph.is_output(value) or len(users) != 1:
        return None
    user, port = users[0]
    if any(v is not None and v != value and (graph.const_value(v) is not None and graph.const_value(v).size == 1)
           for n in (node, user) for v in graph.inputs_of(n)):
        return None   # (outlined, a scalar constant would move into the chain's body, out of the groups' reach)
    second = _epilogue_conv(graph, user)
    if second is None:
        return None
    head2, body2, attrs2 = second
    x2 = body2.inputs_of(head2)[0]
    w2 = body2.type_of(body2.inputs_of(head2)[1])
    channels = w.shape[0]
    strides = tuple(attrs2.get("strides") or [1, 1])
    if body2.node(x2.node).id != body2.inputs[port].id or w2 is None or tuple(w2.shape) != (channels, 1, 3, 3) \
            or attrs2.get("group", 1) != channels or strides not in ((1, 1), (2, 2)) \
            or list(attrs2.get("pads") or [0] * 4) != [1, 1, 1, 1]:
        return None
    return user
