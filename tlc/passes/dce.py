"""dce: bypass Identity and inference-mode Dropout, then erase every node whose results reach no graph output.

The bypass is the rewrite engine's ``forwarding`` rules (``rules/algebraic.py``: ``identity``,
``dropout-inference``), the same ones ``simplify`` runs, so bisection names them; this module itself only finds
and erases dead nodes.

Graph inputs always stay, used or not: they are the model's interface. Unused constants go like any other node.
ONNX operators have no side effects, so a node no output needs is dead whatever its op.

Bodies (If, Loop, Scan) are cleaned the same way first, outputs and inputs kept (they are the body's interface);
then captures no body reads any more are dropped from the node (``tlc.ops.control``), so the outer values they
held can die too.
"""

from __future__ import annotations

import networkx as nx

from ..ir.graph import Graph
from ..ops.control import bodies, drop_unused_captures
from .base import Pass, PassResult, register_pass
from .rewrite import apply_rules
from .rules.algebraic import FORWARDING


@register_pass
class DcePass(Pass):
    name = "dce"
    min_level = 1
    description = "dead-code elimination: remove nodes no output needs; bypass Identity and inference Dropout"

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        for _, node in sorted(graph.nx.nodes(data="node")):
            for _, body in bodies(node):
                absorb(result, self.run(body))
            dropped = drop_unused_captures(graph, node)
            if dropped:
                result.count("captures_dropped", dropped)
        bypass(graph, result, self)
        dead = dead_nodes(graph)
        # NOTE: consumers before producers, so every node erased is unused by then.
        for nid in reversed(list(nx.topological_sort(graph.nx.subgraph(dead)))):
            node = graph.node(nid)
            self.current_node = node.name
            is_constant = node.domain == "" and node.op == "Constant"
            graph.erase(node)
            result.count("constants_removed" if is_constant else "nodes_removed")
        self.current_node = None
        return result


def absorb(result: PassResult, inner: PassResult) -> None:
    """Add what a pass did inside a body (If, Loop, Scan) to ``result``: its counters as ``body_*``, and the change."""
    for key, n in inner.stats.items():
        result.note(f"body_{key}", n)
    result.changed = result.changed or inner.changed


def dead_nodes(graph: Graph) -> set[int]:
    """Ids of the nodes no graph output depends on, graph inputs excepted."""
    live: set[int] = set()
    stack = [v.node for v, _ in graph.outputs]
    while stack:
        nid = stack.pop()
        if nid not in live:
            live.add(nid)
            stack.extend(graph.nx.predecessors(nid))
    return {nid for nid, node in graph.nx.nodes(data="node")
            if nid not in live and not (node.domain == "" and node.op == "Input")}


def bypass(graph: Graph, result: PassResult, pass_: Pass) -> None:
    """Apply the forwarding rules; count the bypassed nodes (``bypassed``) and what died with them, as the dead
    code sweep counts its own (``constants_removed``, ``nodes_removed``)."""
    constants = {nid for nid, node in graph.nx.nodes(data="node") if node.domain == "" and node.op == "Constant"}
    before = set(graph.nx)
    outcome = apply_rules(graph, FORWARDING.rules, pass_name=pass_.name, hook=pass_.options.step_hook)
    if not outcome.total:
        return
    gone = before - set(graph.nx)
    # NOTE: each application erases its root (never a constant); the rest died with it
    counts = {"bypassed": outcome.total, "constants_removed": len(gone & constants),
              "nodes_removed": len(gone - constants) - outcome.total}
    for key, n in counts.items():
        if n:
            result.count(key, n)
