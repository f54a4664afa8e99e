"""Hypothesis strategies over ``tlc.testing.generate``: random graphs that shrink to a minimal failing graph.

    from hypothesis import given
    from tlc.testing.strategies import cases

    @given(cases(max_nodes=6))
    def test_my_pass_keeps_outputs(case):
        ...  # case.graph, case.feeds

Every decision of the generator is a hypothesis draw, so shrinking a failing case shrinks its choices: fewer
nodes, earlier ops of the registry, default attributes, smaller shapes. (This module imports hypothesis, a test
dependency; ``tlc.testing`` itself does not.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from .generate import Case, GraphBuilder, OpSpec, fuzzable_ops


class DrawChooser:
    """The generator's choices as hypothesis draws (``tlc.testing.generate.Chooser``)."""

    def __init__(self, draw):
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, items: Sequence[Any]) -> Any:
        return items[self.draw(st.integers(0, len(items) - 1))]

    def coin(self, p: float) -> bool:
        return self.draw(st.integers(0, 99)) < round(p * 100)


@st.composite
def cases(draw, ops: Sequence[OpSpec] | None = None, min_nodes: int = 1, max_nodes: int = 12) -> Case:
    """A ``Case`` (graph and feeds) of ``min_nodes`` to ``max_nodes`` generated nodes over ``ops`` (default: every
    fuzzable op of the registry)."""
    builder = GraphBuilder(DrawChooser(draw), ops if ops is not None else fuzzable_ops())
    return builder.build(min_nodes, max_nodes)
