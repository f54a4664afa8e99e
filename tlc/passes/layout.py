"""layout: run conv regions channels-last (NHWC) where the target's cost model says it pays; sink and cancel
transposes.

A region is a connected set of 4-D ops that have a channels-last form: layout-sensitive ops with a twin in
``tlc.ops.layout_ops`` (Conv, MaxPool, AveragePool, global pools), ops whose only layout dependence is an axis
(``AXIS_OPS``: Concat), and elementwise ops (``Trait.ELEMENTWISE``) between them. For each region the cost model
(``layout_cost``) predicts the kernels' time in both layouts plus the transposes at the region's boundary: one
per value entering (constants are transposed at compile time, free) and one per value leaving. A region is
rewritten only when NHWC wins by the model's margin; otherwise the graph is left exactly as it was. Then the
transpose rules (``rules/transpose.py``, run by the rewrite engine) cancel, compose, fold and sink what
transposes there are.

The constants come from the target (``PassOptions.target.costs``); a target without them gets no layout changes.
``prefer`` (a constructor argument) overrides the model: ``"nhwc"`` rewrites every region, ``"nchw"`` none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import TLC_DOMAIN, Graph, Node, Value
from ..ops import Trait, lookup
from ..ops.layout_ops import AXIS_OPS, NCHW_TO_NHWC, NHWC_TO_NCHW, twin_of
from ..targets import Target, get
from . import layout_cost
from .base import Pass, PassOptions, PassResult, register_pass
from .layout_transpose import permute_constant, simplify_transposes, transposes_for_free

PREFERENCES = ("auto", "nchw", "nhwc")


@dataclass
class Region:
    """Ops that would switch layout together, in topological order, and the model's verdict on them."""

    nodes: list[Node]
    ids: set[int] = field(default_factory=set)
    nchw_ns: float = 0.0            # predicted time of its layout-sensitive ops as they are
    nhwc_ns: float = 0.0            # the same ops channels-last
    boundary_ns: float = 0.0        # the transposes switching would add
    anchors: int = 0                # ops with a channels-last twin

    @property
    def gain_ns(self) -> float:
        return self.nchw_ns - self.nhwc_ns - self.boundary_ns

    def wins(self, costs: layout_cost.TargetCosts) -> bool:
        return self.gain_ns > max(costs.min_gain_us * 1e3, costs.rel_margin * self.nchw_ns)


def _static4(graph: Graph, v: Value | None) -> bool:
    shape = None if v is None else graph.shape_of(v)   # NOTE: None for sequence and optional values too
    return shape is not None and len(shape) == 4 and all(isinstance(d, int) for d in shape)


def _rank(graph: Graph, v: Value) -> int | None:
    shape = graph.shape_of(v)
    return None if shape is None else len(shape)


def data_ports(graph: Graph, node: Node) -> list[int]:
    """Input ports of ``node`` that carry 4-D activations (what switches layout with the region)."""
    twin = twin_of(node.op, node.domain)
    if twin is not None:
        return [0]
    return [p for p, v in enumerate(graph.inputs_of(node))
            if v is not None and not graph.is_constant(v) and _rank(graph, v) == 4]


class _Roles:
    """Which ops can go channels-last, and what each costs in both layouts."""

    def __init__(self, graph: Graph, costs: layout_cost.TargetCosts):
        self.graph = graph
        self.costs = costs
        self.ns: dict[int, tuple[float, float]] = {}

    def member(self, node: Node) -> bool:
        g = self.graph
        if node.num_outputs != 1 or not _static4(g, node.output(0)):
            return False
        opdef = lookup(node.op, node.domain)
        if opdef is None:
            return False
        if (twin_of(node.op, node.domain) is not None and opdef.has(Trait.LAYOUT_SENSITIVE)) or (
                node.domain == "" and node.op in AXIS_OPS):
            ns = layout_cost.node_ns(self.costs, g, node)
            if ns is None:
                return False
            self.ns[node.id] = ns
            return True
        if not opdef.is_elementwise:
            return False
        # every input: a 4-D activation, a constant (broadcast, transposed at compile time), or a scalar
        return all(v is None or _rank(g, v) in (0, 4) or (g.is_constant(v) and (_rank(g, v) or 0) <= 4)
                   for v in g.inputs_of(node))


def find_regions(graph: Graph, costs: layout_cost.TargetCosts) -> list[Region]:
    """The graph's regions with at least one op that has a channels-last twin, each costed."""
    roles = _Roles(graph, costs)
    order = graph.nodes()
    members = {n.id for n in order if roles.member(n)}
    parent = {i: i for i in members}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for node in order:
        if node.id not in members:
            continue
        for port in data_ports(graph, node):
            src = graph.inputs_of(node)[port].node
            if src in members:
                parent[find(src)] = find(node.id)
    groups: dict[int, list[Node]] = {}
    for node in order:
        if node.id in members:
            groups.setdefault(find(node.id), []).append(node)
    regions = []
    for nodes in groups.values():
        region = Region(nodes, {n.id for n in nodes})
        region.anchors = sum(1 for n in nodes if twin_of(n.op, n.domain) is not None)
        if region.anchors:
            _cost(graph, region, roles)
            regions.append(region)
    return regions


def _cost(graph: Graph, region: Region, roles: _Roles) -> None:
    t = roles.costs
    for node in region.nodes:
        nchw, nhwc = roles.ns.get(node.id, (0.0, 0.0))
        region.nchw_ns += nchw
        region.nhwc_ns += nhwc
    entering: set[Value] = set()
    for node in region.nodes:
        ins = graph.inputs_of(node)
        for port in data_ports(graph, node):
            if ins[port].node not in region.ids:
                entering.add(ins[port])
        twin = twin_of(node.op, node.domain)
        if twin is not None and twin.has_weight and not transposes_for_free(graph, ins[1]):
            entering.add(ins[1])
    region.boundary_ns = sum(layout_cost.transpose_ns(t, graph.type_of(v), True) for v in entering)
    for node in region.nodes:
        if _leaves(graph, region, node.output(0)):
            region.boundary_ns += layout_cost.transpose_ns(t, node.output_types[0], False)


def _leaves(graph: Graph, region: Region, v: Value) -> bool:
    return graph.is_output(v) or any(u.id not in region.ids for u, _ in graph.users(v))


class _Rewriter:
    """Rebuilds one region channels-last: twins for the layout-sensitive ops, a remapped axis for Concat, the
    same elementwise ops on transposed operands; transposes at the boundary, one per value."""

    def __init__(self, graph: Graph, region: Region):
        self.g = graph
        self.region = region
        self.nhwc: dict[Value, Value] = {}      # a region value or an entering value -> its NHWC version

    def to_nhwc(self, v: Value) -> Value:
        if v not in self.nhwc:
            g = self.g
            if g.is_constant(v):
                self.nhwc[v] = g.constant(permute_constant(g.const_value(v), list(NCHW_TO_NHWC)),
                                          name=g.fresh_name(f"{g.value_name(v)}_nhwc"))
            else:
                self.nhwc[v] = g.add_node("Transpose", [v], perm=list(NCHW_TO_NHWC),
                                          name=g.fresh_name(f"{g.value_name(v)}_to_nhwc"))
        return self.nhwc[v]

    def operand(self, v: Value | None) -> Value | None:
        """An elementwise operand channels-last: activations and constants transposed, scalars as they are."""
        if v is None or _rank(self.g, v) == 0:
            return v
        return self.to_nhwc(v)

    def rebuild(self, node: Node) -> Value:
        g = self.g
        ins = g.inputs_of(node)
        name = g.fresh_name(f"{node.name}_nhwc")
        twin = twin_of(node.op, node.domain)
        if twin is not None:
            new = [self.to_nhwc(ins[0])] + [self.to_nhwc(v) if p == 1 and twin.has_weight else v
                                            for p, v in enumerate(ins) if p > 0]
            return g.add_node(twin.name, new, domain=TLC_DOMAIN, name=name, attrs=dict(node.attrs))
        attrs = dict(node.attrs)
        if node.domain == "" and node.op in AXIS_OPS:
            key = AXIS_OPS[node.op]
            axis = int(lookup(node.op).resolved_attrs(node)[key]) % 4
            attrs[key] = NCHW_TO_NHWC.index(axis)
        return g.add_node(node.op, [self.operand(v) for v in ins], domain=node.domain, name=name, attrs=attrs)

    def run(self) -> int:
        """Rewrite the region; returns the number of transposes it added."""
        g = self.g
        for node in self.region.nodes:
            self.nhwc[node.output(0)] = self.rebuild(node)
        added = sum(1 for v, new in self.nhwc.items() if v.node not in self.region.ids and not g.is_constant(v))
        exits: list[tuple[str, Value]] = []
        for node in self.region.nodes:
            v = node.output(0)
            if not _leaves(g, self.region, v):
                continue
            back = g.add_node("Transpose", [self.nhwc[v]], perm=list(NHWC_TO_NCHW),
                              name=g.fresh_name(f"{node.name}_to_nchw"))
            g.replace_all_uses(v, back)     # users outside; those inside are erased below
            exits.append((g.value_name(v), back))
            added += 1
        feeding = {v.node for node in self.region.nodes for v in g.inputs_of(node) if v is not None}
        for node in reversed(self.region.nodes):
            g.erase(node)
        g.erase_if_dead(feeding - self.region.ids, cascade=True)  # what only the region read (NCHW weights)
        for name, back in exits:  # the values leaving keep their names (graph outputs above all)
            if not g.has_value(name):
                g.rename_value(back, name)
        return added


@register_pass
class LayoutPass(Pass):
    name = "layout"
    min_level = 3
    description = "run conv regions channels-last (NHWC) where the kernel cost model says so; sink/cancel transposes"

    def __init__(self, options: PassOptions | None = None, prefer: str = "auto"):
        super().__init__(options)
        if prefer not in PREFERENCES:
            raise ValueError(f"layout pass: prefer must be one of {', '.join(PREFERENCES)}, got {prefer!r}")
        self.prefer = prefer

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        costs = self.options.target.costs
        if costs is not None and self.prefer != "nchw":
            for region in find_regions(graph, costs):
                self.current_node = region.nodes[0].name
                if self.prefer == "nhwc" or region.wins(costs):
                    result.count("regions_nhwc")
                    result.count("nodes_nhwc", len(region.nodes))
                    result.note("boundary_transposes", _Rewriter(graph, region).run())
                    result.note("predicted_gain_us", int(region.gain_ns / 1e3))
                else:
                    result.note("regions_kept_nchw")
            self.current_node = None
        simplify_transposes(graph, result, self.options.fold_size_limit, hook=self.options.step_hook,
                            pass_name=self.name)
        return result


def predicted_regions(graph: Graph, target: str | Target = "cpu") -> list[Region]:
    """The regions of ``graph`` and the cost model's numbers for them (for reports and tests)."""
    costs = get(target).costs
    return [] if costs is None else find_regions(graph, costs)


__all__ = ["PREFERENCES", "LayoutPass", "Region", "find_regions", "predicted_regions"]
