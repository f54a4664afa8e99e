"""Graph.nodes(): networkx's lexicographical topological order (node id breaks ties), and cycles named."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import tlc


def test_nodes_order_is_the_lexicographical_topological_order(rng):
    g = tlc.Graph()
    values = [g.input(f"x{i}", "float32", (2,)) for i in range(3)]
    for _ in range(200):
        a, b = (values[int(i)] for i in rng.integers(0, len(values), 2))
        values.append(g.add_node("Add", [a, b]))       # parallel edges when a == b
    late = g.constant(np.ones(2, np.float32))           # a high id with no producers
    g.set_input(g.producer(values[5]), 1, late)
    g.output(values[-1], "y")
    assert [n.id for n in g.nodes()] == list(nx.lexicographical_topological_sort(g.nx))


def test_cycle_is_a_validation_error():
    g = tlc.Graph()
    x = g.input("x", "float32", (2,))
    a = g.add_node("Relu", [x])
    b = g.add_node("Neg", [a])
    g.set_input(g.producer(a), 0, b)
    with pytest.raises(tlc.ValidationError, match="has a cycle"):
        g.nodes()
