"""The verifier: structural and typing checks on a graph, with errors that name node, op and port.

Checks: acyclic; port indices valid and each input port fed once; every required input connected and
attributes valid (asked of the op registry); stored types equal what inference gives (for sequences and
optionals: the same kind, and element types that agree); outputs exist;
node and value names unique; subgraph attributes verified recursively, at most ``MAX_BODY_DEPTH`` levels deep.
"""

from __future__ import annotations

import networkx as nx

from ..errors import ValidationError
from .graph import Graph, Node, op_resolver
from .types import TensorType

#: Bodies (If branches, Loop/Scan bodies, Fused groups) nested deeper than this are refused by the readers and the
#: verifier: they, the text printer and the passes recurse once per level, and this keeps every one of them far
#: from Python's recursion limit. Real models nest a few levels.
MAX_BODY_DEPTH = 24


def _where(node: Node) -> str:
    return f"node {node.name!r} ({node.qualified_op})"


def verify(graph: Graph, *, check_types: bool = True) -> None:
    """Raise ``ValidationError`` on the first defect found in ``graph``."""
    _verify(graph, check_types, 0)


def _verify(graph: Graph, check_types: bool, depth: int) -> None:
    if depth > MAX_BODY_DEPTH:
        raise ValidationError(f"graph {graph.name!r}: bodies are nested more than {MAX_BODY_DEPTH} levels deep")
    if not nx.is_directed_acyclic_graph(graph.nx):
        cycle = nx.find_cycle(graph.nx)
        names = " -> ".join(graph.node(u).name for u, *_ in cycle)
        raise ValidationError(f"graph {graph.name!r} has a cycle: {names}")

    seen_nodes: set[str] = set()
    seen_values: set[str] = set()
    for _, node in sorted(graph.nx.nodes(data="node")):
        if node.name in seen_nodes:
            raise ValidationError(f"node name {node.name!r} is used twice in graph {graph.name!r}")
        seen_nodes.add(node.name)
        for out in node.output_names:
            if out in seen_values:
                raise ValidationError(f"value name {out!r} is used twice ({_where(node)})")
            seen_values.add(out)
        _check_edges(graph, node)

    resolver = op_resolver()
    for node in graph.nodes():
        if resolver is not None:
            resolver.check(graph, node)
        for key, attr in node.attrs.items():
            if isinstance(attr, Graph):
                try:
                    _verify(attr, check_types, depth + 1)
                except ValidationError as exc:
                    raise ValidationError(f"in subgraph attribute {key!r} of {_where(node)}: {exc}") from None
        if check_types and resolver is not None and not (node.domain == "" and node.op in ("Input", "Constant")):
            _check_types(graph, node, resolver)

    if not graph.outputs:
        raise ValidationError(f"graph {graph.name!r} has no outputs")
    names = set()
    for value, name in graph.outputs:
        if value.node not in graph.nx or value.port >= graph.node(value.node).num_outputs:
            raise ValidationError(f"graph output {name!r} refers to a value that does not exist ({value})")
        if name in names:
            raise ValidationError(f"graph output name {name!r} is used twice")
        names.add(name)


def _check_edges(graph: Graph, node: Node) -> None:
    for src, _, port, src_port in graph.nx.in_edges(node.id, keys=True, data="src_port"):
        source = graph.node(src)
        if not isinstance(port, int) or not 0 <= port < node.num_inputs:
            raise ValidationError(f"{_where(node)}: input port {port} is out of range "
                                  f"(node has {node.num_inputs} inputs)")
        if src_port is None or not 0 <= src_port < source.num_outputs:
            raise ValidationError(f"{_where(node)}: input {port} reads output port {src_port} of "
                                  f"{_where(source)}, which has {source.num_outputs} outputs")


def _check_types(graph: Graph, node: Node, resolver) -> None:
    inferred = resolver.infer(graph, node)
    for port, (have, want) in enumerate(zip(node.output_types, inferred)):
        if have is None:
            continue
        if want is not None and not _types_agree(have, want):
            raise ValidationError(f"{_where(node)}: output {port} is typed {have} but inference gives {want}")


def _types_agree(have, want) -> bool:
    """Same kind (tensor, sequence, optional), same dtype, and shapes that agree where both know a dim."""
    if isinstance(have, TensorType) and isinstance(want, TensorType):
        return have.dtype == want.dtype and _shapes_agree(have.shape, want.shape)
    return type(have) is type(want) and _types_agree(have.elem, want.elem)


def _shapes_agree(a, b) -> bool:
    if a is None or b is None:
        return True
    if len(a) != len(b):
        return False
    return all(x == y or not isinstance(x, int) or not isinstance(y, int) for x, y in zip(a, b))
