"""Keeping names readable while passes replace values: a graph output's name moves onto the value behind it."""

from __future__ import annotations

from ..ir.graph import Graph, Value


def adopt_output_name(graph: Graph, value: Value, name: str) -> bool:
    """Rename ``value`` to the graph-output name ``name`` when nothing is lost by it; returns whether it did.

    Passes call this after pointing output ``name`` at ``value`` (and erasing the node that held the name), so
    the output stays a named value rather than an alias of another (which ONNX export writes as an Identity).
    Graph inputs keep their names (they are the interface), a value that is an output under its own name keeps
    it, and a name still in use is not taken.
    """
    current = graph.value_name(value)
    if current == name or graph.has_value(name) or graph.producer(value).op == "Input":
        return False
    if any(v == value and n == current for v, n in graph.outputs):
        return False
    graph.rename_value(value, name)
    return True
