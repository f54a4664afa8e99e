"""Structural hashing: equal structure (ops, attributes, wiring, constant contents) gives equal hashes.

Names do not take part, so two graphs that differ only in node or value names hash alike. Used by CSE (per
value) and by the kernel cache (per graph).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .graph import Graph, Value


def attr_digest(value: Any) -> str:
    """A stable text digest of one attribute value."""
    if isinstance(value, np.ndarray):
        h = hashlib.sha256()
        h.update(f"{value.dtype.str}{value.shape}".encode())
        if value.dtype == object:
            h.update(repr(value.tolist()).encode())
        else:
            h.update(np.ascontiguousarray(value).tobytes())
        return "T" + h.hexdigest()
    if isinstance(value, Graph):
        return "G" + graph_hash(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(attr_digest(v) for v in value) + "]"
    if isinstance(value, float):
        return "f" + value.hex()
    if isinstance(value, (bool, np.bool_)):
        return "b" + str(bool(value))
    if isinstance(value, (int, np.integer)):
        return "i" + str(int(value))
    return "s" + repr(value)


def value_hashes(graph: Graph) -> dict[Value, str]:
    """A structural hash for every value, computed in topological order."""
    result: dict[Value, str] = {}
    input_index = {node.id: i for i, node in enumerate(graph.inputs)}
    for node in graph.nodes():
        h = hashlib.sha256()
        h.update(f"{node.domain}.{node.op}|".encode())
        if node.op == "Input" and node.domain == "":
            h.update(f"input{input_index[node.id]}|{node.output_types[0]}".encode())
        for key in sorted(node.attrs):
            h.update(f"{key}={attr_digest(node.attrs[key])};".encode())
        for v in graph.inputs_of(node):
            h.update(("-" if v is None else result[v]).encode())
            h.update(b",")
        base = h.hexdigest()
        for port in range(node.num_outputs):
            result[Value(node.id, port)] = base if node.num_outputs == 1 else f"{base}:{port}"
    return result


def graph_hash(graph: Graph) -> str:
    """One hash for a whole graph: its output values' hashes, in order, and their types."""
    hashes = value_hashes(graph)
    h = hashlib.sha256()
    for value, _ in graph.outputs:
        h.update(f"{hashes[value]}|{graph.type_of(value)};".encode())
    return h.hexdigest()
