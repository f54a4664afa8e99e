"""dce: bypass Identity and inference-mode Dropout, then erase every node whose results reach no graph output.

Graph inputs always stay, used or not: they are the model's interface. Unused constants go like any other node.
ONNX operators have no side effects, so a node no output needs is dead whatever its op.

Bodies (If, Loop, Scan) are cleaned the same way first, outputs and inputs kept (they are the body's interface);
then captures no body reads any more are dropped from the node (``tlc.ops.control``), so the outer values they
held can die too.
"""

from __future__ import annotations

import networkx as nx

from ..ir.graph import Graph, Node, Value
from ..ops.control import bodies, drop_unused_captures
from .base import Pass, PassResult, register_pass
from .naming import adopt_output_name


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
        # Bypassing in id order: the order does not change the result (chains collapse either way).
        for _, node in sorted(graph.nx.nodes(data="node")):
            source = forwarded_input(graph, node)
            if source is not None:
                self.current_node = node.name
                bypass(graph, node, source)
                result.count("bypassed")
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


def forwarded_input(graph: Graph, node: Node) -> Value | None:
    """The input value ``node`` merely passes on, when it is one: Identity, and Dropout in inference mode
    (``training_mode`` absent or a constant false) whose mask output is unused."""
    # NOTE: the op registry has no "forwards its input" trait yet; these two are ONNX's only such ops.
    if node.domain != "" or node.op not in ("Identity", "Dropout"):
        return None
    inputs = graph.inputs_of(node)
    if not inputs or inputs[0] is None:
        return None
    if node.op == "Dropout":
        if any(graph.num_uses(v) for v in node.outputs[1:]):
            return None
        if len(inputs) > 2 and inputs[2] is not None:
            training = graph.const_value(inputs[2])
            if training is None or bool(training):
                return None
    return inputs[0]


def bypass(graph: Graph, node: Node, source: Value) -> None:
    """Make the users of ``node``'s first output read ``source`` and erase ``node``; a graph output it was keeps
    its name, and ``source`` takes that name where it can (``adopt_output_name``)."""
    out = node.outputs[0]
    output_names = [name for v, name in graph.outputs if v == out]
    graph.replace_all_uses(out, source)
    graph.erase(node)
    if output_names:
        adopt_output_name(graph, source, output_names[0])
