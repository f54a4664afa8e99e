"""The rewrite engine: rules are data (pattern, check with a reason, rewrite); one driver applies any rule set.

A ``Rule`` pairs a DAG pattern (``tlc.passes.patterns``) with an optional ``check(match) -> None | reason`` and a
``rewrite(match, builder) -> Value | list[Value]`` that builds the replacement with the Graph API (None for an
output nothing reads). The driver (``apply_rules``) replaces the root's uses, erases the matched nodes that became
dead, keeps graph output names (``Graph.replace_values``), and checks that the replacement has the root's type.
Every pass that rewrites by rules runs them here: ``simplify`` (all rule sets), ``dce`` (Identity/Dropout
bypass) and ``layout`` (the transpose rules).

Steps: each rule application is one step of the pipeline. ``apply_rules(..., hook=...)`` calls
``hook(graph, pass_name, rule_name, node_name)`` after every application (the PassManager hands its
instruments' ``run_after_rule`` down this way, through ``PassOptions.step_hook``), so a driver can check the
graph after each one (``tlc.passes.bisect``) or stop the pipeline by raising ``StopPipeline``.

Driver order (deterministic): sweeps over the rule list in order; each rule visits the nodes its root could
match in topological order (node id breaks ties; nodes created during the sweep come after, in creation order)
and fires wherever it matches. Sweeps repeat until one makes
no change, at most ``max_sweeps`` times. Rules earlier in a list therefore win: put exact clean-ups first and,
among recognitions of overlapping shapes, the largest pattern first (LayerNorm with gamma and beta before
LayerNorm without).

A matched intermediate whose value has users outside the match is not deleted: unless its pattern says
``shared=True`` (then the rewrite keeps it for those users) the rule refuses, and the tracer says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import PassError
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from ..ops.registry import is_registered
from .base import PassOptions, StepHook
from .match import Match, MatchContext
from .patterns import FLOAT, Const, OneOf, Op, Opt, Pattern, Var, find_matches

#: the pattern DSL is re-exported here: rule modules import everything they need from ``tlc.passes.rewrite``.
__all__ = ["FLOAT", "Builder", "Const", "Match", "NearMiss", "OneOf", "Op", "Opt", "Pattern", "RewriteResult", "Rule",
           "RuleSet", "StepHook", "Tracer", "Var", "apply_rules", "find_match"]

logger = logging.getLogger("tlc.passes.rewrite")

CheckFn = Callable[[Match], "str | None"]
RewriteFn = Callable[[Match, "Builder"], "Value | Sequence[Value | None]"]


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``pattern`` (rooted at an ``Op`` or a ``OneOf`` of Ops), ``check``, ``rewrite``.

    ``min_level``: the lowest opt level that runs it; ``fast_math``: it changes rounding, so it runs only with
    ``PassOptions.fast_math``; ``produces``: ops the rewrite creates (the rule is unavailable while one of them
    is not registered).
    """

    name: str
    pattern: Pattern
    rewrite: RewriteFn
    check: CheckFn | None = None
    min_level: int = 1
    fast_math: bool = False
    description: str = ""
    produces: tuple[str, ...] = ()

    def enabled(self, options: PassOptions) -> bool:
        return options.opt_level >= self.min_level and (options.fast_math or not self.fast_math)

    @property
    def available(self) -> bool:
        return all(is_registered(op) for op in self.produces)


@dataclass(frozen=True)
class RuleSet:
    """A named, ordered group of rules (one module under ``tlc/passes/rules/``)."""

    name: str
    rules: tuple[Rule, ...]
    description: str = ""


@dataclass
class NearMiss:
    """A rule that almost fired: the root matched, then a constraint or ``check`` refused (``reason``)."""

    rule: str
    node: str
    op: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.op} {self.node!r}: {self.reason}"


class Tracer:
    """Collects applied rewrites and near misses; also logs them to ``tlc.passes.rewrite`` at DEBUG.

    Structural failures count as near misses only once ``min_progress`` op nodes matched (1 = the root alone),
    so a rule whose root op merely has the right type is not reported for every node; refusals by a type or
    single-use constraint, or by ``check``, are always reported.
    """

    def __init__(self, min_progress: int = 2):
        self.min_progress = min_progress
        self.near_misses: list[NearMiss] = []
        self.applied: list[tuple[str, str]] = []
        self._seen: set[tuple[str, int, str]] = set()

    def near_miss(self, rule: Rule, node: Node, reason: str) -> None:
        key = (rule.name, node.id, reason)
        if key in self._seen:
            return
        self._seen.add(key)
        miss = NearMiss(rule.name, node.name, node.qualified_op, reason)
        self.near_misses.append(miss)
        logger.debug("near miss %s", miss)

    def fired(self, rule: Rule, node: Node) -> None:
        self.applied.append((rule.name, node.name))
        logger.debug("applied %s at %s %r", rule.name, node.qualified_op, node.name)

    def report(self) -> str:
        lines = [f"applied {r} at {n!r}" for r, n in self.applied]
        lines += [f"near miss {m}" for m in self.near_misses]
        return "\n".join(lines)


class Builder:
    """What a rewrite builds the replacement with: new ops (named after their op type) and constants."""

    def __init__(self, graph: Graph, root: Node):
        self.graph = graph
        self.root = root
        self.created: list[int] = []
        self.heir: int | None = None

    def op(self, op: str, *inputs: Value | None, domain: str = "", num_outputs: int | None = None,
           node_name: str | None = None, **attrs: Any) -> Any:
        """Add ``op`` on ``inputs`` (None = missing optional input); returns its output (a tuple when several).
        The node is named ``node_name`` (made unique) or after its op type."""
        out = self.graph.add_node(op, list(inputs), domain=domain, name=node_name or op,
                                  num_outputs=num_outputs, attrs=attrs)
        first = out if isinstance(out, Value) else out[0]
        self.created.append(first.node)
        return out

    def inherit_root_name(self, value: Value) -> None:
        """Once the root is erased, the node of ``value`` (built here) takes the root's name: a rewrite that
        rebuilds the root on other inputs (transpose sinking) keeps the names readers know."""
        self.heir = value.node

    def constant(self, array: object, like: Value | None = None, name: str | None = None) -> Value:
        """A new constant; with ``like`` it takes that value's dtype."""
        arr = np.asarray(array)
        if like is not None:
            ttype = self.graph.type_of(like)
            if ttype is not None:
                arr = arr.astype(ttype.dtype)
        v = self.graph.constant(arr, name=name)
        self.created.append(v.node)
        return v


@dataclass
class RewriteResult:
    """What ``apply_rules`` did: rewrites per rule (in first-fired order), sweeps run, whether it converged."""

    counts: dict[str, int] = field(default_factory=dict)
    sweeps: int = 0
    converged: bool = True
    nodes_removed: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def find_match(graph: Graph, rule: Rule, node: Node, tracer: Tracer | None = None,
               ctx: MatchContext | None = None) -> Match | None:
    """The first match of ``rule`` rooted at ``node`` that passes the single-use constraints and ``check``."""
    ctx = ctx or MatchContext(graph)
    ctx.trace = tracer is not None
    ctx.start()
    refusal = ""
    for match in find_matches(graph, rule.pattern, node, ctx):
        reason = _shared_intermediate(graph, match) or (rule.check(match) if rule.check else None)
        if reason is None:
            return match
        refusal = refusal or reason
    if tracer is not None:
        if refusal:
            tracer.near_miss(rule, node, refusal)
        elif ctx.progress >= tracer.min_progress:
            tracer.near_miss(rule, node, ctx.reason)
    return None


def _shared_intermediate(graph: Graph, match: Match) -> str | None:
    """A reason when a matched intermediate (not marked ``shared``) has users outside the match."""
    inside = {n.id for n in match.matched}
    for node in match.matched:
        if node.id == match.root.id or node.id in match.shared:
            continue
        for value in node.outputs:
            outside = [u.name for u, _ in graph.users(value) if u.id not in inside]
            if graph.is_output(value):
                outside.append("a graph output")
            if outside:
                return (f"intermediate {node.qualified_op} {node.name!r} is also used by "
                        f"{', '.join(map(repr, outside))}; it cannot be removed")
    return None


def apply_rules(graph: Graph, rules: Sequence[Rule], *, max_sweeps: int = 16, tracer: Tracer | None = None,
                pass_name: str = "rewrite", hook: StepHook | None = None) -> RewriteResult:
    """Apply ``rules`` greedily to a fixed point (see the module docstring for the order); mutates ``graph``.
    ``hook`` is called after every rule application (see "Steps" in the module docstring)."""
    if tracer is None and logger.isEnabledFor(logging.DEBUG):
        tracer = Tracer()
    result = RewriteResult(converged=False)
    before = len(graph)
    for _ in range(max_sweeps):
        result.sweeps += 1
        if not _sweep(graph, rules, tracer, result, pass_name, hook):
            result.converged = True
            break
    result.nodes_removed = before - len(graph)
    if not result.converged:
        logger.warning("%s: no fixed point after %d sweeps (%s)", pass_name, max_sweeps,
                       ", ".join(f"{k}={v}" for k, v in result.counts.items()))
    return result


def _sweep(graph: Graph, rules: Sequence[Rule], tracer: Tracer | None, result: RewriteResult,
           pass_name: str, hook: StepHook | None) -> bool:
    """One pass over every rule; True when something changed.

    NOTE: the topological order is computed once per sweep (it is the expensive part); nodes created during the
    sweep are visited after the old ones, in creation order, which keeps the order deterministic.
    """
    order = graph.nodes()
    position = {n.id: i for i, n in enumerate(order)}
    by_op: dict[str, list[Node]] = {}
    for n in order:
        by_op.setdefault(n.op, []).append(n)
    created: list[Node] = []
    ctx = MatchContext(graph)
    changed = False
    for rule in rules:
        ops = rule.pattern.root_ops()
        if ops is None:
            candidates = order + created
        else:
            old = sorted((n for op in ops for n in by_op.get(op, ())), key=lambda n: position[n.id])
            candidates = old + [n for n in created if n.op in ops]
        for node in candidates:
            if node.id not in graph.nx or not rule.pattern.root_accepts(node):
                continue  # erased by an earlier rewrite, or another domain/trait
            match = find_match(graph, rule, node, tracer, ctx)
            if match is None:
                continue
            created += [graph.node(nid) for nid in _apply(graph, rule, match, pass_name) if nid in graph.nx]
            ctx.invalidate()
            result.counts[rule.name] = result.counts.get(rule.name, 0) + 1
            if tracer is not None:
                tracer.fired(rule, node)
            if hook is not None:
                hook(graph, pass_name, rule.name, node.name)
            changed = True
    return changed


def _apply(graph: Graph, rule: Rule, match: Match, pass_name: str) -> list[int]:
    """Build the replacement, rewire the root's users to it, erase what died; returns the new nodes' ids."""
    root = match.root
    builder = Builder(graph, root)
    result = rule.rewrite(match, builder)
    news = [result] if isinstance(result, Value) else list(result)
    where = f"rule {rule.name!r} at {root.qualified_op} {root.name!r}"
    if len(news) != root.num_outputs:
        raise PassError(f"{where}: the rewrite gave {len(news)} values for {root.num_outputs} outputs",
                        pass_name, root.name)
    for nid in builder.created:
        if any(v is not None and v.node == root.id for v in graph.inputs_of(nid)):
            raise PassError(f"{where}: the replacement reads the root it replaces", pass_name, root.name)
    pairs = []
    for old, new in zip(root.outputs, news):
        if new is None:
            if graph.num_uses(old):
                raise PassError(f"{where}: the rewrite gave no value for output {old.port}, which is used",
                                pass_name, root.name)
            continue
        _check_same_type(graph.type_of(old), graph.type_of(new), f"{where}, output {old.port}", pass_name, root)
        pairs.append((old, new))
    graph.replace_values(pairs, [root, *match.matched], cascade=True)
    if builder.heir is not None and root.id not in graph.nx and builder.heir in graph.nx:
        try:
            graph.node(root.name)
        except KeyError:  # the name is free
            graph.rename_node(builder.heir, root.name)
    return builder.created


def _check_same_type(old: TensorType | None, new: TensorType | None, where: str, pass_name: str,
                     root: Node) -> None:
    if old is None or new is None:
        return
    if not _types_fit(old, new):
        raise PassError(f"{where}: the replacement has type {new}, the value it replaces {old}", pass_name,
                        root.name)


def _types_fit(old, new) -> bool:
    """Same kind (tensor, or the sequence and optional types of ``tlc.ir.types``), same dtype, agreeing dims."""
    if not isinstance(old, TensorType) or not isinstance(new, TensorType):
        return type(old) is type(new) and _types_fit(old.elem, new.elem)
    ok = old.dtype == new.dtype
    if ok and old.shape is not None and new.shape is not None:
        ok = len(old.shape) == len(new.shape) and all(
            a == b for a, b in zip(old.shape, new.shape) if isinstance(a, int) and isinstance(b, int))
    return ok
