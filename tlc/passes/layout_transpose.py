"""Transpose clean-up of the layout pass: the transpose rules of ``rules/transpose.py`` run by the rewrite engine.

The rules (cancel, compose, fold into constants and splats, turn into views, sink through elementwise ops) live
in one place, ``tlc.passes.rules.transpose``; ``simplify`` runs the first three of them too. This module runs
them all after a region rewrite, counts what they did under the layout pass's counters, and keeps the helpers
the region rewrite needs (what transposes for free).
"""

from __future__ import annotations

import math

from ..ir.graph import Graph, Value
from .base import PassResult, StepHook
from .rewrite import apply_rules
from .rules.transpose import inverse, is_transpose, layout_rules, perm_of, permute_constant

__all__ = ["COUNTERS", "inverse", "is_splat", "is_transpose", "perm_of", "permute_constant", "simplify_transposes",
           "transposes_bytes", "transposes_for_free"]

#: the layout pass's counter for each transpose rule
COUNTERS = {
    "transpose-identity": "transposes_cancelled",
    "transpose-cancel": "transposes_cancelled",
    "transpose-transpose": "transposes_composed",
    "transpose-fold": "transposes_folded",
    "transpose-fold-splat": "transposes_folded",
    "transpose-to-reshape": "transposes_to_reshape",
    "transpose-sink": "transposes_sunk",
}


def is_splat(graph: Graph, v: Value) -> bool:
    """``v`` is a ConstantOfShape of a constant shape: every element equal, whatever the layout."""
    node = graph.producer(v)
    return node.domain == "" and node.op == "ConstantOfShape" and graph.is_constant(graph.inputs_of(node)[0])


def transposes_for_free(graph: Graph, v: Value) -> bool:
    """A transpose of ``v`` costs nothing at run time: it is a constant or a splat, transposed at compile time."""
    return graph.is_constant(v) or is_splat(graph, v)


def simplify_transposes(graph: Graph, result: PassResult, fold_limit: int, max_sweeps: int = 32,
                        hook: StepHook | None = None, pass_name: str = "layout") -> None:
    """Apply the transpose rules until none fires (bounded by ``max_sweeps``); counts go into ``result``."""
    outcome = apply_rules(graph, layout_rules(fold_limit), max_sweeps=max_sweeps, pass_name=pass_name, hook=hook)
    for rule, n in outcome.counts.items():
        result.count(COUNTERS[rule], n)


def transposes_bytes(graph: Graph) -> int:
    """Elements moved by the graph's Transpose nodes (a summary for tests and stats)."""
    total = 0
    for node in graph.ops():
        if is_transpose(node) and node.output_types[0] is not None and node.output_types[0].shape is not None:
            total += math.prod(d if isinstance(d, int) else 1 for d in node.output_types[0].shape)
    return total
