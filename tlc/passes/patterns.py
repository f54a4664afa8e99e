"""The rewrite engine's pattern language: DAG patterns over a ``Graph``, matched with backtracking.

A pattern describes how a value was computed, looking up through producers: ``Op("Mul", X, Const(1.0))``
matches a Mul node with a constant 1 on either side (the registry says Mul is commutative, so both input
orders are tried). Captures bind values: ``Var("x")``, and named ``Op``/``Const`` patterns. A capture name used
twice must bind the same value both times, and one pattern object used twice (a DAG, e.g. the ``x - mean`` of
a LayerNorm feeding both its Pow and its Div) must match the same value both times.

NOTE: matching only reads the graph. Whether a matched intermediate may be deleted (single consumer) is decided
by the engine (``tlc.passes.rewrite``) once a whole match is found; ``Op(..., shared=True)`` marks an
intermediate that may keep other users (the rewrite then leaves it in place for them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ir.types import FLOAT_DTYPES, TensorType
from ..ops.registry import Trait, lookup
from .match import Match, MatchContext, MatchState, bind

#: dtype constraint: any floating-point dtype.
FLOAT = "float"


class TypeSpec:
    """Type constraints on a matched value: dtype (a name, a set of names or ``FLOAT``), rank, static shape."""

    __slots__ = ("dtype", "rank", "static")

    def __init__(self, dtype: str | Sequence[str] | None = None, rank: int | None = None, static: bool = False):
        if dtype == FLOAT:
            dtype = FLOAT_DTYPES
        self.dtype = frozenset([dtype]) if isinstance(dtype, str) else (None if dtype is None else frozenset(dtype))
        self.rank = rank
        self.static = static

    def violation(self, ttype: TensorType | None) -> str | None:
        if self.dtype is None and self.rank is None and not self.static:
            return None
        if ttype is None:
            return "has no type"
        if self.dtype is not None and ttype.dtype not in self.dtype:
            return f"has dtype {ttype.dtype}, expected {'/'.join(sorted(self.dtype))}"
        if self.rank is not None and ttype.rank != self.rank:
            return f"has rank {ttype.rank}, expected {self.rank}"
        if self.static and not ttype.is_static:
            return f"has shape {ttype}, expected a static shape"
        return None


class Pattern:
    """Something that matches a value (or, for ``Opt``, a missing optional input)."""

    def matches(self, value: Value | None, st: MatchState) -> Iterator[MatchState]:  # pragma: no cover - abstract
        raise NotImplementedError

    def root_accepts(self, node: Node) -> bool:
        """Cheap pre-filter: could a match rooted at ``node`` exist? (Only root patterns need it.)"""
        return False

    def root_ops(self) -> frozenset[str] | None:
        """The op types a match can be rooted at (None: any op, the pattern asks a trait or a predicate)."""
        return frozenset()


def as_pattern(p: Pattern | float | int) -> Pattern:
    """Numbers in a pattern mean constants equal to them: ``Op("Add", X, 0.0)``."""
    if isinstance(p, Pattern):
        return p
    if isinstance(p, (int, float)) and not isinstance(p, bool):
        return Const(p)
    raise TypeError(f"not a pattern: {p!r}")


class Var(Pattern):
    """Any value (never a missing input), optionally captured and type-constrained."""

    def __init__(self, name: str | None = None, *, dtype: str | Sequence[str] | None = None,
                 rank: int | None = None, static: bool = False,
                 where: Callable[[Graph, Value], bool] | None = None):
        self.name = name
        self.type = TypeSpec(dtype, rank, static)
        self.where = where

    def matches(self, value: Value | None, st: MatchState) -> Iterator[MatchState]:
        label = self.name or "value"
        if value is None:
            st.fail(lambda: f"{label}: input is missing")
            return
        reason = self.type.violation(st.ctx.type_of(value))
        if reason:
            st.fail(lambda: f"{label} ({st.describe(value)}) {reason}")
            return
        if self.where is not None and not self.where(st.graph, value):
            st.fail(lambda: f"{label} ({st.describe(value)}) does not satisfy its predicate")
            return
        yield from bind(st, self.name, value)

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


def _close_to(array: np.ndarray, want: float, rtol: float, atol: float) -> bool:
    if array.size == 0 or array.dtype.kind not in "fiub":
        return False
    if rtol == 0 and atol == 0:
        return bool(np.all(array == want))
    a = array.astype(np.float64)
    return bool(np.all(np.abs(a - want) <= atol + rtol * abs(want)))


def _summary(array: np.ndarray) -> str:
    if array.size == 1:
        return f"{array.reshape(()).item()!r}"
    return f"{array.dtype}{list(array.shape)}"


class Const(Pattern):
    """A value produced by a Constant: any, one whose every element equals ``value`` (within ``rtol``/``atol``),
    a single element (``scalar``), or one accepted by ``where(array)``."""

    def __init__(self, value: float | None = None, name: str | None = None, *, rtol: float = 0.0,
                 atol: float = 0.0, scalar: bool = False, where: Callable[[np.ndarray], bool] | None = None):
        self.value = value
        self.name = name
        self.rtol, self.atol = rtol, atol
        self.scalar = scalar
        self.where = where

    def matches(self, value: Value | None, st: MatchState) -> Iterator[MatchState]:
        if value is None:
            st.fail(lambda: f"{self!r}: input is missing")
            return
        array = st.ctx.const_value(value)
        if array is None:
            st.fail(lambda: f"expected a constant ({self!r}), got {st.describe(value)}")
            return
        if self.scalar and array.size != 1:
            st.fail(lambda: f"expected a one-element constant, got shape {list(array.shape)}")
            return
        if self.value is not None and not _close_to(array, self.value, self.rtol, self.atol):
            st.fail(lambda: f"expected constant {self.value!r}, got {_summary(array)}")
            return
        if self.where is not None and not self.where(array):
            st.fail(lambda: f"constant {_summary(array)} does not satisfy the predicate of {self!r}")
            return
        yield from bind(st, self.name, value)

    def __repr__(self) -> str:
        parts = [repr(self.value)] if self.value is not None else []
        if self.name:
            parts.append(repr(self.name))
        return f"Const({', '.join(parts)})"


class Op(Pattern):
    """A node of the given op type(s) (or of any op with a ``Trait``, or accepted by a predicate on its
    ``OpDef``) whose inputs match ``inputs`` in order; for commutative ops (asked of the registry) every order
    of the inputs is tried.

    ``attrs`` maps attribute names to a required value or a predicate, checked against the node's attributes
    with registry defaults filled in. ``shared=True`` lets this intermediate have users outside the match.
    ``extra_inputs=True`` accepts nodes with more inputs than ``inputs`` lists.
    """

    def __init__(self, op: str | Sequence[str] | Trait | Callable[[Any], bool], *inputs: Pattern | float | int,
                 name: str | None = None, attrs: dict[str, Any] | None = None, domain: str = "", port: int = 0,
                 shared: bool = False, extra_inputs: bool = False, dtype: str | Sequence[str] | None = None,
                 rank: int | None = None, static: bool = False):
        self.op = op
        self.inputs = [as_pattern(p) for p in inputs]
        self.name = name
        self.attrs = dict(attrs or {})
        self.domain = domain
        self.port = port
        self.shared = shared
        self.extra_inputs = extra_inputs
        self.type = TypeSpec(dtype, rank, static)
        self._needs: list[frozenset[str] | None] | None = None

    def describe_op(self) -> str:
        if isinstance(self.op, str):
            return self.op
        if isinstance(self.op, Trait):
            return f"an op with trait {self.op.value}"
        if callable(self.op):
            return "an op accepted by the pattern's predicate"
        return "/".join(self.op)

    def root_ops(self) -> frozenset[str] | None:
        if isinstance(self.op, str):
            return frozenset([self.op])
        if isinstance(self.op, Trait) or callable(self.op):
            return None
        return frozenset(self.op)

    def root_accepts(self, node: Node) -> bool:
        if node.domain != self.domain:
            return False
        if isinstance(self.op, str):
            return node.op == self.op
        if isinstance(self.op, Trait) or callable(self.op):
            opdef = lookup(node.op, node.domain)
            if opdef is None:
                return False
            return opdef.has(self.op) if isinstance(self.op, Trait) else bool(self.op(opdef))
        return node.op in self.op

    def matches(self, value: Value | None, st: MatchState) -> Iterator[MatchState]:
        if value is None:
            st.fail(lambda: f"expected {self.describe_op()}, the input is missing")
            return
        seen = st.memo.get(id(self))
        if seen is not None:
            if seen == value:
                yield st
            else:
                st.fail(lambda: f"the same {self.describe_op()} should feed both uses, got {st.describe(seen)} and "
                        f"{st.describe(value)}")
            return
        node = st.ctx.node(value)
        if not self.root_accepts(node):
            st.fail(lambda: f"expected {self.describe_op()}, got {node.qualified_op} {node.name!r}")
            return
        reason = self._node_violation(node, value, st)
        if reason:
            st.fail(lambda: reason, extra=1)
            return
        found = list(st.ctx.inputs(node))
        if len(found) > len(self.inputs) and not self.extra_inputs and any(found[len(self.inputs):]):
            st.fail(lambda: f"{node.qualified_op} {node.name!r} has {len(found)} inputs, "
                            f"the pattern {len(self.inputs)}")
            return
        if not st.ctx.trace and not self._inputs_may_match(node, found, st.ctx):
            return
        found += [None] * (len(self.inputs) - len(found))
        new = st.fork()
        new.memo[id(self)] = value
        new.matched = st.matched + ((node.id, self.shared),)
        if self.name is not None:
            if self.name in new.nodes and new.nodes[self.name].id != node.id:
                st.fail(lambda: f"{self.name!r} is bound to node {new.nodes[self.name].name!r}, here {node.name!r}")
                return
            new.nodes[self.name] = node
        for order in self._orders(node):
            for bound in bind(new, self.name, value):
                yield from _match_all(self.inputs, [found[i] for i in order], bound, 0)

    def _inputs_may_match(self, node: Node, found: list[Value | None], ctx: MatchContext) -> bool:
        """A cheap necessary condition (producer op types of the inputs) checked before backtracking.

        Skipped while tracing, so that near misses get the full matcher's reasons.
        """
        needs = self._needs
        if needs is None:
            needs = self._needs = [_producer_ops(p) for p in self.inputs]
        if all(need is None for need in needs):
            return True
        kinds = [None if v is None else ctx.node(v).op for v in found]
        if len(self._orders(node)) > 1:
            present = set(kinds)
            return all(need is None or not need.isdisjoint(present) for need in needs)
        return all(need is None or kind in need for need, kind in zip(needs, kinds))

    def _node_violation(self, node: Node, value: Value, st: MatchState) -> str | None:
        if value.port != self.port:
            return f"expected output {self.port} of {node.qualified_op} {node.name!r}, got output {value.port}"
        reason = self.type.violation(st.ctx.type_of(value))
        if reason:
            return f"{node.qualified_op} {node.name!r} {reason}"
        if self.attrs:
            opdef = lookup(node.op, node.domain)
            have = opdef.resolved_attrs(node) if opdef is not None else dict(node.attrs)
            for key, want in self.attrs.items():
                got = have.get(key)
                ok = bool(want(got)) if callable(want) else _attr_equal(got, want)
                if not ok:
                    return f"{node.qualified_op} {node.name!r}: attribute {key}={got!r} does not match the pattern"
        return None

    def _orders(self, node: Node) -> list[Sequence[int]]:
        n = len(self.inputs)
        opdef = lookup(node.op, node.domain)
        if opdef is not None and opdef.is_commutative and 2 <= n <= 3:
            return list(itertools.permutations(range(n)))
        return [range(n)]

    def __repr__(self) -> str:
        return f"Op({self.describe_op()}{', ' if self.inputs else ''}{', '.join(map(repr, self.inputs))})"


def _producer_ops(p: Pattern) -> frozenset[str] | None:
    """The op types that can produce a value ``p`` matches (None: anything, or a missing input)."""
    if isinstance(p, Const):
        return frozenset(["Constant"])
    if isinstance(p, OneOf):   # each alternative as an input pattern (a Const one is produced by a Constant)
        found: frozenset[str] = frozenset()
        for alt in p.alternatives:
            ops = _producer_ops(alt)
            if ops is None:
                return None
            found |= ops
        return found
    if isinstance(p, Op):
        return p.root_ops()
    return None


def _attr_equal(got: Any, want: Any) -> bool:
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and list(got) == list(want)
    return got == want


def _match_all(patterns: Sequence[Pattern], values: Sequence[Value | None], st: MatchState,
               i: int) -> Iterator[MatchState]:
    if i == len(patterns):
        yield st
        return
    for nxt in patterns[i].matches(values[i], st):
        yield from _match_all(patterns, values, nxt, i + 1)


class OneOf(Pattern):
    """The first alternatives that match (each is tried in order; backtracking may try the next)."""

    def __init__(self, *alternatives: Pattern | float | int):
        if not alternatives:
            raise ValueError("OneOf needs at least one alternative")
        self.alternatives = [as_pattern(a) for a in alternatives]

    def matches(self, value: Value | None, st: MatchState) -> Iterator[MatchState]:
        for alt in self.alternatives:
            yield from alt.matches(value, st)

    def root_accepts(self, node: Node) -> bool:
        return any(a.root_accepts(node) for a in self.alternatives)

    def root_ops(self) -> frozenset[str] | None:
        found: frozenset[str] = frozenset()
        for alt in self.alternatives:
            ops = alt.root_ops()
            if ops is None:
                return None
            found |= ops
        return found

    def __repr__(self) -> str:
        return f"OneOf({', '.join(map(repr, self.alternatives))})"


class Opt(Pattern):
    """An optional input: matches a missing input, or a present one that ``inner`` matches."""

    def __init__(self, inner: Pattern | float | int | None = None):
        self.inner = None if inner is None else as_pattern(inner)

    def matches(self, value: Value | None, st: MatchState) -> Iterator[MatchState]:
        if value is None or self.inner is None:
            yield st
        else:
            yield from self.inner.matches(value, st)

    def __repr__(self) -> str:
        return f"Opt({self.inner!r})"


def find_matches(graph: Graph, pattern: Pattern, node: Node, ctx: MatchContext | None = None) -> Iterator[Match]:
    """Every structural match of ``pattern`` rooted at ``node``'s output ``pattern.port`` (lazily)."""
    ctx = ctx or MatchContext(graph)
    port = getattr(pattern, "port", 0)
    if port >= node.num_outputs:
        return
    for st in pattern.matches(Value(node.id, port), MatchState(ctx)):
        yield Match(graph, node, st)
