"""Transpose rules, the one place they live: ``simplify`` runs the first three (``RULES``), the layout pass all of
them (``layout_rules``), both through the rewrite engine.

- ``transpose-identity``: a Transpose with the identity perm is its input;
- ``transpose-cancel``: ``Transpose(Transpose(x, p), q)`` with ``p∘q`` the identity is ``x``;
- ``transpose-transpose``: otherwise the pair is one ``Transpose(x, p∘q)``;
- ``transpose-fold``: a Transpose of a constant is the transposed constant (when the constant has no other user,
  or is at most ``fold_limit`` elements), and ``transpose-fold-splat``: of a ConstantOfShape splat, the splat in
  the permuted shape;
- ``transpose-to-reshape``: a Transpose that moves only size-1 axes is a Reshape (a view at run time, no copy);
- ``transpose-sink``: ``E(Transpose(x, p), c)`` for an elementwise E is ``Transpose(E(x, c'), p)``, ``c'`` the
  constant transposed back. It fires when it merges several transposes into one, or when the transpose it moves
  down reaches another Transpose through a chain of such ops (and then cancels or composes with it).

Every rule leaves fewer or cheaper transposes, never more. Perms the rank cannot resolve (ONNX's default perm
of an input of unknown rank) make every rule refuse.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node, Value
from ...ops import Trait, lookup
from ..rewrite import Builder, Const, Match, Op, Rule, RuleSet, Var

#: how far sinking looks down a chain of elementwise ops for a Transpose to meet
SINK_LOOKAHEAD = 16


def is_transpose(node: Node) -> bool:
    return node.domain == "" and node.op == "Transpose"


def perm_of(graph: Graph, node: Node) -> list[int] | None:
    """The node's permutation (the default reverses the axes), or None when the input rank is unknown."""
    perm = node.attrs.get("perm")
    if perm:
        return list(perm)
    t = graph.type_of(graph.inputs_of(node)[0])
    rank = getattr(t, "rank", None)
    return None if rank is None else list(reversed(range(rank)))


def inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def permute_constant(array: np.ndarray, perm: list[int]) -> np.ndarray:
    """``array`` broadcast up to ``len(perm)`` axes (leading 1s, numpy-style), then transposed by ``perm``."""
    if array.ndim == 0:
        return array
    full = array.reshape((1,) * (len(perm) - array.ndim) + array.shape)
    return np.ascontiguousarray(full.transpose(perm))


# ---------------------------------------------------------------------------- identity, cancel, compose
def _identity_check(m: Match) -> str | None:
    perm = perm_of(m.graph, m.root)
    if perm is None:
        return "rank unknown, the default perm cannot be resolved"
    return None if perm == sorted(perm) else f"perm {perm} is not the identity"


def _composed(m: Match) -> list[int] | None:
    inner, outer = perm_of(m.graph, m.node("inner")), perm_of(m.graph, m.root)
    if inner is None or outer is None or len(inner) != len(outer):
        return None
    return [inner[j] for j in outer]


def _cancel_check(m: Match) -> str | None:
    perm = _composed(m)
    if perm is None:
        return "a perm cannot be resolved (rank unknown)"
    return None if perm == sorted(perm) else f"the perms compose to {perm}, not the identity"


def _compose_check(m: Match) -> str | None:
    return None if _composed(m) is not None else "a perm cannot be resolved (rank unknown)"


def _compose_rewrite(m: Match, b: Builder) -> Value:
    perm = _composed(m)
    if perm == sorted(perm):
        return m["x"]
    out = b.op("Transpose", m["x"], perm=perm, node_name=m.root.name)
    b.inherit_root_name(out)
    return out


_PAIR = Op("Transpose", Op("Transpose", Var("x"), name="inner", shared=True))

IDENTITY = Rule("transpose-identity", Op("Transpose", Var("x")), lambda m, b: m["x"], _identity_check,
                description="Transpose with the identity perm -> x")
CANCEL = Rule("transpose-cancel", _PAIR, lambda m, b: m["x"], _cancel_check,
              description="Transpose(Transpose(x, p), q) with p∘q the identity -> x")
COMPOSE = Rule("transpose-transpose", _PAIR, _compose_rewrite, _compose_check,
               description="Transpose(Transpose(x, p), q) -> Transpose(x, p∘q)")

RULES = RuleSet("transpose", (IDENTITY, CANCEL, COMPOSE), "transposes that do nothing, cancel or compose")


# ---------------------------------------------------------------------------- layout: fold, view, sink
def _fold_rule(fold_limit: int) -> Rule:
    def check(m: Match) -> str | None:
        if perm_of(m.graph, m.root) is None:
            return "rank unknown"
        size = m.const("c").size
        if m.graph.num_uses(m["c"]) > 1 and size > fold_limit:
            return f"the constant has other users and {size} elements (more than {fold_limit})"
        return None

    def rewrite(m: Match, b: Builder) -> Value:
        array = np.ascontiguousarray(m.const("c").transpose(perm_of(m.graph, m.root)))
        return b.constant(array, name=m.graph.fresh_name(f"{m.root.name}_c"))

    return Rule("transpose-fold", Op("Transpose", Const(name="c")), rewrite, check,
                description="Transpose of a constant -> the transposed constant")


def _splat_check(m: Match) -> str | None:
    return None if perm_of(m.graph, m.root) is not None else "rank unknown"


def _splat_rewrite(m: Match, b: Builder) -> Value:
    """Its transpose is the same splat in the permuted shape (weights too large to fold are often splats)."""
    dims = m.const("dims")
    perm = perm_of(m.graph, m.root)
    name = m.root.name
    shape = b.constant(np.array([int(dims[p]) for p in perm], np.int64), name=m.graph.fresh_name(f"{name}_shape"))
    return b.op("ConstantOfShape", shape, node_name=f"{name}_splat", **m.node("splat").attrs)


def _moves_only_unit_axes(shape, perm: list[int]) -> bool:
    """True when the axes of size other than 1 keep their order (so the transpose is a reshape)."""
    if shape is None or not all(isinstance(d, int) for d in shape):
        return False
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


def _view_check(m: Match) -> str | None:
    perm = perm_of(m.graph, m.root)
    if perm is None or m.graph.shape_of(m.root.output(0)) is None:
        return "rank or shape unknown"
    return None if _moves_only_unit_axes(m.graph.shape_of(m["x"]), perm) else "it moves axes of size other than 1"


def _view_rewrite(m: Match, b: Builder) -> Value:
    name = m.root.name
    shape = b.constant(np.array(m.graph.shape_of(m.root.output(0)), np.int64),
                       name=m.graph.fresh_name(f"{name}_shape"))
    return b.op("Reshape", m["x"], shape, node_name=f"{name}_view")


def _sink_perm(graph: Graph, node: Node) -> list[int] | None:
    """The perm of the first input of ``node`` that a Transpose makes."""
    for v in graph.inputs_of(node):
        if v is not None and is_transpose(graph.producer(v)):
            return perm_of(graph, graph.producer(v))
    return None


def _takes_transposed(graph: Graph, user: Node, perm: list[int]) -> bool:
    """``user`` is elementwise, single-output, of rank len(perm), no graph output, and its inputs are each a
    Transpose by ``perm``, a constant, or a scalar."""
    opdef = lookup(user.op, user.domain)
    out_type = user.output_types[0] if user.num_outputs == 1 else None
    if opdef is None or not opdef.is_elementwise or getattr(out_type, "rank", None) != len(perm):
        return False
    if graph.is_output(user.output(0)):
        return False
    for v in graph.inputs_of(user):
        if v is None or graph.is_constant(v):
            continue
        t = graph.type_of(v)
        producer = graph.producer(v)
        if getattr(t, "rank", None) == 0:
            continue
        if not (is_transpose(producer) and perm_of(graph, producer) == perm):
            return False
    return True


def _leads_to_transpose(graph: Graph, node: Node) -> bool:
    """Whether the single-user chain of sinkable ops after ``node`` (an op taking the transpose) ends in one."""
    for _ in range(SINK_LOOKAHEAD):
        out = node.output(0)
        users = graph.users(out)
        if len(users) != 1 or graph.is_output(out):
            return False
        nxt = users[0][0]
        if is_transpose(nxt):
            return True
        opdef = lookup(nxt.op, nxt.domain)
        if opdef is None or not opdef.is_elementwise or nxt.num_outputs != 1:
            return False
        others = [v for v in graph.inputs_of(nxt) if v is not None and v != out]
        if not all(graph.is_constant(v) or getattr(graph.type_of(v), "rank", None) == 0 for v in others):
            return False
        node = nxt
    return False


def _transposed_inputs(graph: Graph, node: Node) -> set[Value]:
    return {v for v in graph.inputs_of(node) if v is not None and is_transpose(graph.producer(v))}


def _sink_check(m: Match) -> str | None:
    graph, user = m.graph, m.root
    perm = _sink_perm(graph, user)
    if perm is None:
        return "no input is a Transpose of a known perm"
    if not _takes_transposed(graph, user, perm):
        return "not every input is a Transpose by the same perm, a constant or a scalar (or it is an output)"
    # transposes that die once ``user`` reads around them; the moved one costs one, meeting a transpose below
    # saves one again (it composes with it)
    freed = sum(1 for v in _transposed_inputs(graph, user)
                if not graph.is_output(v) and all(u.id == user.id for u, _ in graph.users(v)))
    if freed == 0:
        return "every transpose it reads has other users"
    if freed + _leads_to_transpose(graph, user) < 2:
        return "moving the transpose down would neither merge transposes nor meet another one"
    return None


def _sink_rewrite(m: Match, b: Builder) -> Value:
    graph, user = m.graph, m.root
    perm = _sink_perm(graph, user)
    inv = inverse(perm)
    transposed = _transposed_inputs(graph, user)
    inputs: list[Value | None] = []
    for v in graph.inputs_of(user):
        if v in transposed:
            inputs.append(graph.inputs_of(graph.producer(v))[0])
        elif graph.is_constant(v) and graph.const_value(v).ndim > 0:
            c = permute_constant(graph.const_value(v), inv)
            inputs.append(b.constant(c, name=graph.fresh_name(f"{graph.value_name(v)}_t")))
        else:
            inputs.append(v)
    rebuilt = b.op(user.op, *inputs, domain=user.domain, node_name=user.name, **user.attrs)
    b.inherit_root_name(rebuilt)
    return b.op("Transpose", rebuilt, perm=perm, node_name=f"{user.name}_t")


SPLAT = Rule("transpose-fold-splat",
             Op("Transpose", Op("ConstantOfShape", Const(name="dims"), name="splat", shared=True)),
             _splat_rewrite, _splat_check, description="Transpose of a ConstantOfShape splat -> the permuted splat")
VIEW = Rule("transpose-to-reshape", Op("Transpose", Var("x")), _view_rewrite, _view_check,
            description="Transpose that moves only size-1 axes -> Reshape")
SINK = Rule("transpose-sink", Op(Trait.ELEMENTWISE, extra_inputs=True), _sink_rewrite, _sink_check,
            description="E(Transpose(x, p), c) -> Transpose(E(x, c'), p) when it merges or meets transposes")


def layout_rules(fold_limit: int) -> tuple[Rule, ...]:
    """The layout pass's transpose clean-up, in driver order; constants above ``fold_limit`` elements that
    others read too stay untransposed."""
    return (IDENTITY, CANCEL, COMPOSE, _fold_rule(fold_limit), SPLAT, VIEW, SINK)
