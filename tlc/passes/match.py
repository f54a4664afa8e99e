"""Matching state for the rewrite engine: cached graph queries, partial-match bindings, and the found ``Match``.

``MatchContext`` caches what patterns read of a graph (nodes, inputs, types, constants) until the graph changes
and keeps, when tracing, the reason the last attempt got furthest before failing. ``MatchState`` is one partial
match (forked on every new binding, so backtracking needs no undo). ``Match`` is what checks and rewrites see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from ..ops.registry import lookup


class MatchContext:
    """What matching reads of a graph, cached (valid until the graph changes: ``invalidate``), and the log of why
    the last match attempt failed (kept only when ``trace`` is on: the failure that got furthest, formatted
    lazily)."""

    def __init__(self, graph: Graph, trace: bool = False):
        self.graph = graph
        self.trace = trace
        self._nodes: dict[int, Node] = {}
        self._inputs: dict[int, list[Value | None]] = {}
        self.progress = -1
        self._reason: Callable[[], str] | None = None

    def invalidate(self) -> None:
        self._nodes.clear()
        self._inputs.clear()

    def start(self) -> None:
        """Forget the previous attempt's failure."""
        self.progress, self._reason = -1, None

    def node(self, value: Value) -> Node:
        node = self._nodes.get(value.node)
        if node is None:
            node = self._nodes[value.node] = self.graph.node(value.node)
        return node

    def inputs(self, node: Node) -> list[Value | None]:
        ins = self._inputs.get(node.id)
        if ins is None:
            ins = self._inputs[node.id] = self.graph.inputs_of(node)
        return ins

    def type_of(self, value: Value) -> TensorType | None:
        return self.node(value).output_types[value.port]

    def const_value(self, value: Value) -> np.ndarray | None:
        node = self.node(value)
        return node.attrs.get("value") if node.op == "Constant" and node.domain == "" else None

    def fail(self, progress: int, reason: Callable[[], str]) -> None:
        if self.trace and progress > self.progress:
            self.progress, self._reason = progress, reason

    @property
    def reason(self) -> str:
        return self._reason() if self._reason is not None else ""


class MatchState:
    """Bindings of one partial match; forked (shallow copies) whenever a binding is added."""

    __slots__ = ("ctx", "values", "nodes", "memo", "matched")

    def __init__(self, ctx: MatchContext):
        self.ctx = ctx
        self.values: dict[str, Value] = {}
        self.nodes: dict[str, Node] = {}
        self.memo: dict[int, Value] = {}
        self.matched: tuple[tuple[int, bool], ...] = ()   # (node id, may keep other users)

    @property
    def graph(self) -> Graph:
        return self.ctx.graph

    def fork(self) -> MatchState:
        st = MatchState(self.ctx)
        st.values, st.nodes, st.memo = dict(self.values), dict(self.nodes), dict(self.memo)
        st.matched = self.matched
        return st

    def fail(self, reason: Callable[[], str], extra: int = 0) -> None:
        """Record why matching stopped (``reason`` formats it on demand); ``extra`` = 1 once the node's op type
        matched."""
        self.ctx.fail(len(self.matched) + extra, reason)

    def describe(self, value: Value) -> str:
        node = self.ctx.node(value)
        return f"{node.qualified_op} {node.name!r}"


def bind(st: MatchState, name: str | None, value: Value) -> Iterator[MatchState]:
    if name is None:
        yield st
        return
    bound = st.values.get(name)
    if bound is None:
        new = st.fork()
        new.values[name] = value
        yield new
    elif bound == value:
        yield st
    else:
        st.fail(lambda: f"{name!r} is bound to {st.graph.value_name(bound)!r} but here it would be "
                f"{st.graph.value_name(value)!r}")


class Match:
    """A found match: captured values (``m["x"]`` or ``m.x``), captured nodes, and every matched op node."""

    def __init__(self, graph: Graph, root: Node, st: MatchState):
        self.graph = graph
        self.root = root
        self.values = st.values
        self.nodes = st.nodes
        ids: dict[int, bool] = {}
        for nid, shared in st.matched:
            ids[nid] = ids.get(nid, False) or shared
        self.matched: list[Node] = [graph.node(n) for n in ids]
        self.shared: frozenset[int] = frozenset(n for n, s in ids.items() if s)

    def __getitem__(self, name: str) -> Value:
        try:
            return self.values[name]
        except KeyError:
            raise KeyError(f"the match captured no {name!r}; it has {sorted(self.values)}") from None

    def __getattr__(self, name: str) -> Value:
        if name.startswith("_") or name in ("values", "nodes"):
            raise AttributeError(name)
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(f"the match captured no {name!r}; it has {sorted(self.values)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default: Value | None = None) -> Value | None:
        return self.values.get(name, default)

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def const(self, name: str) -> np.ndarray | None:
        """The array behind capture ``name`` when it is a constant (None when absent or not constant)."""
        return self.graph.const_value(self.values.get(name))

    def type(self, name: str) -> TensorType | None:
        return self.graph.type_of(self[name])

    def attrs(self, name: str) -> dict[str, Any]:
        """The attributes of captured node ``name`` with the registry's defaults filled in."""
        node = self.nodes[name]
        opdef = lookup(node.op, node.domain)
        return opdef.resolved_attrs(node) if opdef is not None else dict(node.attrs)
