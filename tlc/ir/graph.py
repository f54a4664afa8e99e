"""The graph IR: a typed wrapper that owns one ``networkx.MultiDiGraph``.

Nodes of the networkx graph are operations, keyed by an int id that only grows, with the ``Node`` object
under the node attribute ``"node"``. Graph inputs and constants are nodes too (ops ``Input`` and
``Constant``). An edge carries one value: its key is the destination's input port and its ``src_port``
attribute the source's output port. Graph outputs are an ordered list of (value, name).

NOTE: passes use the methods here (``users``, ``replace_all_uses``, ``erase``), never the networkx graph
directly for mutation, so names, edges and types stay consistent. Iteration is deterministic: topological
order with node id as the tie-break.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import networkx as nx
import numpy as np

from ..errors import ValidationError
from .types import OptionalType, SequenceType, Shape, TensorType, ValueType, dtype_name

#: The default ONNX opset of the IR's operator semantics (see docs/architecture.md).
DEFAULT_OPSET = 21
TLC_DOMAIN = "tlc"


class Value(NamedTuple):
    """A value in a graph: output ``port`` of node ``node`` (an id)."""

    node: int
    port: int = 0


class Node:
    """One operation. ``attrs`` holds only attributes set explicitly (defaults live in the op registry)."""

    __slots__ = ("id", "op", "domain", "name", "attrs", "num_inputs", "output_names", "output_types", "doc")

    def __init__(self, nid: int, op: str, domain: str, name: str, attrs: dict[str, Any],
                 num_inputs: int, output_names: list[str], doc: str = ""):
        self.id = nid
        self.op = op
        self.domain = domain
        self.name = name
        self.attrs = attrs
        self.num_inputs = num_inputs
        self.output_names = output_names
        self.output_types: list[ValueType | None] = [None] * len(output_names)
        self.doc = doc

    @property
    def num_outputs(self) -> int:
        return len(self.output_names)

    @property
    def outputs(self) -> list[Value]:
        return [Value(self.id, i) for i in range(len(self.output_names))]

    def output(self, port: int = 0) -> Value:
        if not 0 <= port < len(self.output_names):
            raise ValidationError(f"node {self.name!r} ({self.op}) has no output port {port}")
        return Value(self.id, port)

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}.{self.op}" if self.domain else self.op

    def __repr__(self) -> str:
        return f"<Node {self.id} {self.name!r} {self.qualified_op}>"


class OpResolver(Protocol):
    """What the IR needs to know of operators; the op registry installs one (ir imports nothing of ops)."""

    def num_outputs(self, op: str, domain: str, attrs: dict[str, Any], num_inputs: int) -> int: ...

    def infer(self, graph: Graph, node: Node) -> list[TensorType]: ...

    def check(self, graph: Graph, node: Node) -> None: ...


_resolver: OpResolver | None = None


def set_op_resolver(resolver: OpResolver | None) -> None:
    """Install the operator knowledge the builder and verifier use (done by ``tlc.ops`` on import)."""
    global _resolver
    _resolver = resolver


def op_resolver() -> OpResolver | None:
    return _resolver


class Graph:
    """A computation graph: operations, the values between them, inputs, outputs and model metadata."""

    def __init__(self, name: str = "graph", *, opset: dict[str, int] | int | None = None, doc: str = ""):
        self.name = name
        self.doc = doc
        if isinstance(opset, int):
            opset = {"": opset}
        self.opset: dict[str, int] = {"": DEFAULT_OPSET, **(opset or {})}
        self.producer_name = "tlc"
        self.producer_version = ""
        self.metadata: dict[str, str] = {}
        self.nx = nx.MultiDiGraph()
        self.outputs: list[tuple[Value, str]] = []
        self._ids = itertools.count()
        self._node_names: dict[str, int] = {}
        self._value_names: dict[str, Value] = {}
        self._name_counters: dict[str, itertools.count] = {}

    # ------------------------------------------------------------------ building
    def input(self, name: str, dtype: object, shape: Sequence[int | str | None] | None = None) -> Value:
        """Add a graph input named ``name`` with the given dtype and shape (dims: int, symbol or None; no shape:
        unknown rank), or of the type given as ``dtype`` (a ``TensorType``, ``SequenceType`` or ``OptionalType``)."""
        if isinstance(dtype, (TensorType, SequenceType, OptionalType)):
            if shape is not None:
                raise ValidationError(f"input {name!r}: a shape goes with a dtype, not with a type ({dtype})")
            ttype: ValueType = dtype
        else:
            ttype = TensorType(dtype_name(dtype), None if shape is None else tuple(shape))
        if name in self._value_names:
            raise ValidationError(f"graph {self.name!r} already has a value named {name!r}")
        node = self._new_node("Input", "", name, {}, 0, [name])
        node.output_types[0] = ttype
        return Value(node.id, 0)

    def constant(self, array: object, name: str | None = None) -> Value:
        """Add a constant; the array is stored as given (NOTE: constants are never mutated in place)."""
        value = np.asarray(array)
        if value.dtype.kind in "US":
            value = value.astype(object)
        name = self._unique_name(name or "const")
        node = self._new_node("Constant", "", name, {"value": value}, 0, [name])
        node.output_types[0] = TensorType.of(value)
        return Value(node.id, 0)

    def add_node(self, op: str, inputs: Sequence[Value | None] = (), *, domain: str = "",
                 name: str | None = None, num_outputs: int | None = None,
                 output_names: Sequence[str] | None = None, infer: bool = True, doc: str = "",
                 attrs: dict[str, Any] | None = None, **kwattrs: Any) -> Any:
        """Add an operation and return its output value (a tuple of values when it has several).

        ``None`` in ``inputs`` is a missing optional input. Output types are inferred through the op registry
        unless ``infer`` is False (the importer infers once the whole graph is built). Attributes come as
        keywords or in ``attrs``; an attribute named like a parameter here (Split's ``num_outputs``) must come
        in ``attrs``.
        """
        attrs = {**(attrs or {}), **kwattrs}
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        for i, v in enumerate(inputs):
            if v is not None and not (isinstance(v, tuple) and len(v) == 2 and v.node in self.nx):
                raise ValidationError(f"input {i} of new {op} node is not a value of graph {self.name!r}: {v!r}")
        if output_names is not None:
            num_outputs = len(output_names)
        if num_outputs is None:
            num_outputs = _resolver.num_outputs(op, domain, attrs, len(inputs)) if _resolver else 1
        node_name = self._unique_name(name or op)
        if output_names is None:
            output_names = [node_name] if num_outputs == 1 else [f"{node_name}:{i}" for i in range(num_outputs)]
        names = []
        for out in output_names:
            if out in self._value_names:
                raise ValidationError(f"value name {out!r} is used twice in graph {self.name!r}")
            names.append(out)
        node = self._new_node(op, domain, node_name, dict(attrs), len(inputs), names, doc)
        for port, v in enumerate(inputs):
            if v is not None:
                self.nx.add_edge(v.node, node.id, key=port, src_port=v.port)
        if infer and _resolver is not None:
            self.infer_node(node)
        outs = node.outputs
        return outs[0] if len(outs) == 1 else tuple(outs)

    def output(self, value: Value, name: str | None = None) -> None:
        """Mark ``value`` as a graph output called ``name`` (default: the value's name).

        The value itself takes the name when it can (it is no graph input, no output yet, and the name is
        free), so that output names and value names agree as they do in ONNX.
        """
        self._check_value(value)
        name = name or self.value_name(value)
        if any(n == name for _, n in self.outputs):
            raise ValidationError(f"graph {self.name!r} already has an output named {name!r}")
        if (name != self.value_name(value) and name not in self._value_names and not self.is_output(value)
                and self.node(value.node).op != "Input"):
            self.rename_value(value, name)
        self.outputs.append((value, name))

    def _new_node(self, op: str, domain: str, name: str, attrs: dict[str, Any], num_inputs: int,
                  output_names: list[str], doc: str = "") -> Node:
        if name in self._node_names:
            raise ValidationError(f"node name {name!r} is used twice in graph {self.name!r}")
        nid = next(self._ids)
        node = Node(nid, op, domain, name, attrs, num_inputs, output_names, doc)
        self.nx.add_node(nid, node=node)
        self._node_names[name] = nid
        for port, out in enumerate(output_names):
            self._value_names[out] = Value(nid, port)
        return node

    def _unique_name(self, base: str) -> str:
        if base not in self._node_names and base not in self._value_names:
            return base
        counter = self._name_counters.setdefault(base, itertools.count(1))
        while True:
            cand = f"{base}_{next(counter)}"
            if cand not in self._node_names and cand not in self._value_names:
                return cand

    def fresh_name(self, base: str) -> str:
        """A node/value name not yet used in this graph, derived from ``base``."""
        return self._unique_name(base)

    # ------------------------------------------------------------------ queries
    def node(self, key: int | Value | str) -> Node:
        """The node with this id, the producer of this value, or the node with this name."""
        if isinstance(key, str):
            if key not in self._node_names:
                raise KeyError(f"no node named {key!r} in graph {self.name!r}")
            key = self._node_names[key]
        elif isinstance(key, tuple):
            key = key[0]
        try:
            return self.nx._node[key]["node"]
        except KeyError:
            raise KeyError(f"no node {key!r} in graph {self.name!r}") from None

    def producer(self, value: Value) -> Node:
        return self.node(value.node)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, tuple):
            return key[0] in self.nx and key[1] < self.nx.nodes[key[0]]["node"].num_outputs
        return key in self.nx

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def nodes(self) -> list[Node]:
        """All nodes in deterministic topological order (node id breaks ties)."""
        # NOTE: the order of nx.lexicographical_topological_sort, computed with a heap of int ids: every pass
        # calls this, and the generic networkx version is several times slower. ``_pred``/``_succ``/``_node`` are
        # networkx's own adjacency dicts (documented for fast read access); the views around them cost more
        # than the work here.
        predecessors, successors, data = self.nx._pred, self.nx._succ, self.nx._node
        indegree = {n: sum(map(len, p.values())) for n, p in predecessors.items()}
        ready = [n for n, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            nid = heapq.heappop(ready)
            order.append(data[nid]["node"])
            for succ, edges in successors[nid].items():
                indegree[succ] -= len(edges)
                if indegree[succ] == 0:
                    heapq.heappush(ready, succ)
        if len(order) != len(indegree):
            raise ValidationError(f"graph {self.name!r} has a cycle")
        return order

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes())

    def ops(self) -> list[Node]:
        """Nodes that compute something: not Input, not Constant (topological order)."""
        return [n for n in self.nodes() if not (n.domain == "" and n.op in ("Input", "Constant"))]

    @property
    def inputs(self) -> list[Node]:
        """The graph's Input nodes, in the order they were added."""
        return [d for n, d in sorted(self.nx.nodes(data="node")) if d.op == "Input" and d.domain == ""]

    def input_value(self, name: str) -> Value:
        for node in self.inputs:
            if node.name == name:
                return Value(node.id, 0)
        raise KeyError(f"graph {self.name!r} has no input {name!r}")

    def inputs_of(self, node: Node | int) -> list[Value | None]:
        """The values feeding each input port of ``node`` (None for a missing optional input)."""
        node = node if isinstance(node, Node) else self.node(node)
        result: list[Value | None] = [None] * node.num_inputs
        for src, edges in self.nx._pred[node.id].items():
            for port, attrs in edges.items():
                if port >= node.num_inputs:
                    raise ValidationError(
                        f"node {node.name!r} ({node.qualified_op}) has an edge into port {port} "
                        f"but only {node.num_inputs} inputs")
                result[port] = Value(src, attrs["src_port"])
        return result

    def input_of(self, node: Node | int, port: int) -> Value | None:
        ins = self.inputs_of(node)
        return ins[port] if port < len(ins) else None

    def users(self, value: Value) -> list[tuple[Node, int]]:
        """Consumers of ``value``: (node, input port) pairs sorted by node id then port."""
        data = self.nx._node
        found = [(dst, port) for dst, edges in self.nx._succ[value.node].items()
                 for port, attrs in edges.items() if attrs["src_port"] == value.port]
        return [(data[dst]["node"], port) for dst, port in sorted(found)]

    def num_uses(self, value: Value) -> int:
        """Consumers of ``value``, counting graph outputs."""
        port = value.port
        consumers = sum(attrs["src_port"] == port for edges in self.nx._succ[value.node].values()
                        for attrs in edges.values())
        return consumers + sum(1 for v, _ in self.outputs if v == value)

    def is_output(self, value: Value) -> bool:
        return any(v == value for v, _ in self.outputs)

    def type_of(self, value: Value) -> ValueType | None:
        """The value's type: a ``TensorType`` for nearly every value, else a sequence or an optional type."""
        return self.node(value.node).output_types[value.port]

    def set_type(self, value: Value, ttype: ValueType | None) -> None:
        self.node(value.node).output_types[value.port] = ttype

    def shape_of(self, value: Value) -> Shape | None:
        t = self.type_of(value)
        return t.shape if isinstance(t, TensorType) else None

    def value_name(self, value: Value) -> str:
        return self.node(value.node).output_names[value.port]

    def value(self, name: str) -> Value:
        """The value with this name."""
        if name not in self._value_names:
            raise KeyError(f"no value named {name!r} in graph {self.name!r}")
        return self._value_names[name]

    def has_value(self, name: str) -> bool:
        return name in self._value_names

    def const_value(self, value: Value | None) -> np.ndarray | None:
        """The array behind ``value`` when its producer is a Constant, else None."""
        if value is None:
            return None
        node = self.node(value.node)
        if node.op == "Constant" and node.domain == "":
            return node.attrs.get("value")
        return None

    def is_constant(self, value: Value | None) -> bool:
        return self.const_value(value) is not None

    # ------------------------------------------------------------------ mutation
    def set_input(self, node: Node | int, port: int, value: Value | None) -> None:
        """Connect ``value`` to input ``port`` of ``node`` (None disconnects an optional input)."""
        node = node if isinstance(node, Node) else self.node(node)
        for src, _, key in list(self.nx.in_edges(node.id, keys=True)):
            if key == port:
                self.nx.remove_edge(src, node.id, key=key)
        if value is not None:
            self._check_value(value)
            self.nx.add_edge(value.node, node.id, key=port, src_port=value.port)
            node.num_inputs = max(node.num_inputs, port + 1)
        elif port == node.num_inputs - 1:
            ins = self.inputs_of(node)
            while ins and ins[-1] is None:
                ins.pop()
            node.num_inputs = len(ins)

    def set_inputs(self, node: Node | int, values: Sequence[Value | None]) -> None:
        """Replace all inputs of ``node``."""
        node = node if isinstance(node, Node) else self.node(node)
        for src, dst, key in list(self.nx.in_edges(node.id, keys=True)):
            self.nx.remove_edge(src, dst, key=key)
        values = list(values)
        while values and values[-1] is None:
            values.pop()
        node.num_inputs = len(values)
        for port, v in enumerate(values):
            if v is not None:
                self._check_value(v)
                self.nx.add_edge(v.node, node.id, key=port, src_port=v.port)

    def replace_all_uses(self, old: Value, new: Value) -> int:
        """Make every consumer of ``old`` (graph outputs included) read ``new``; returns how many."""
        if old == new:
            return 0
        self._check_value(new)
        count = 0
        for user, port in self.users(old):
            self.nx.remove_edge(old.node, user.id, key=port)
            self.nx.add_edge(new.node, user.id, key=port, src_port=new.port)
            count += 1
        for i, (v, name) in enumerate(self.outputs):
            if v == old:
                self.outputs[i] = (new, name)
                count += 1
        return count

    def erase(self, node: Node | int) -> None:
        """Remove ``node``; its outputs must be unused (neither consumed nor graph outputs)."""
        node = node if isinstance(node, Node) else self.node(node)
        for v in node.outputs:
            if self.num_uses(v):
                users = ", ".join(repr(u.name) for u, _ in self.users(v)) or "a graph output"
                raise ValidationError(f"cannot erase node {node.name!r} ({node.qualified_op}): "
                                      f"output {v.port} is still used by {users}")
        self.nx.remove_node(node.id)
        del self._node_names[node.name]
        for out in node.output_names:
            self._value_names.pop(out, None)

    def rename_value(self, value: Value, name: str) -> None:
        node = self.node(value.node)
        old = node.output_names[value.port]
        if name == old:
            return
        if name in self._value_names:
            raise ValidationError(f"value name {name!r} is used twice in graph {self.name!r}")
        del self._value_names[old]
        node.output_names[value.port] = name
        self._value_names[name] = value

    def erase_if_dead(self, nodes: Iterable[Node | int], *, cascade: bool = True) -> int:
        """Erase each of ``nodes`` that nothing reads any more (no consumer, no graph output); with ``cascade``,
        then the producers that fed only erased nodes, and so on up. Graph inputs always stay. Returns how many
        nodes were erased.

        NOTE: ONNX operators have no side effects, so a node whose results nobody reads is dead whatever its op.
        The one helper every pass uses after rewiring (the rewrite engine, dce's bypasses, the layout pass, fuse).
        """
        given = {n.id if isinstance(n, Node) else n for n in nodes}
        stack = sorted(given)  # highest id first: consumers usually come after their producers
        erased = 0
        while stack:
            nid = stack.pop()
            if nid not in self.nx:
                continue
            node = self.node(nid)
            if (node.op == "Input" and node.domain == "") or any(self.num_uses(v) for v in node.outputs):
                continue
            producers = sorted(src for src in self.nx._pred[nid] if cascade or src in given)
            self.erase(node)
            erased += 1
            stack.extend(producers)  # they may have died with it
        return erased

    def adopt_output_name(self, value: Value, name: str) -> bool:
        """Give ``value`` the graph-output name ``name`` it now computes, when nothing is lost by it; returns
        whether it did.

        Passes call this after pointing output ``name`` at ``value`` and erasing the node that held the name
        (``replace_values`` does all three), so the output stays a named value rather than an alias of another
        (which ONNX export writes as an Identity). Graph inputs keep their names (they are the interface), a value
        that is also an output under another name keeps its own, and a name still in use is not taken.
        """
        if self.value_name(value) == name or name in self._value_names or self.node(value.node).op == "Input":
            return False
        if any(v == value and n != name for v, n in self.outputs):
            return False
        self.rename_value(value, name)
        return True

    def replace_values(self, pairs: Iterable[tuple[Value, Value]], dead: Iterable[Node | int] = (), *,
                       cascade: bool = False) -> int:
        """Make every use of each old value (graph outputs included) read its new one, erase the nodes of ``dead``
        that nothing reads any more (``erase_if_dead``), then move each graph output's name onto the value now
        behind it (``adopt_output_name``). Returns how many nodes were erased."""
        names: list[tuple[Value, str]] = []
        for old, new in pairs:
            names += [(new, name) for v, name in self.outputs if v == old][:1]
            self.replace_all_uses(old, new)
        erased = self.erase_if_dead(dead, cascade=cascade)
        for value, name in names:
            self.adopt_output_name(value, name)
        return erased

    def rename_node(self, node: Node | int, name: str) -> None:
        """Give ``node`` a new name; a single output named after the node is renamed with it."""
        node = node if isinstance(node, Node) else self.node(node)
        if name == node.name:
            return
        if name in self._node_names:
            raise ValidationError(f"node name {name!r} is used twice in graph {self.name!r}")
        if node.output_names == [node.name] and name not in self._value_names:
            self.rename_value(node.output(0), name)
        del self._node_names[node.name]
        node.name = name
        self._node_names[name] = node.id

    def remove_unused(self) -> int:
        """Erase nodes whose outputs reach no graph output (Input nodes stay: they are the interface)."""
        live: set[int] = set()
        for v, _ in self.outputs:
            live.add(v.node)
            live |= nx.ancestors(self.nx, v.node)
        dead = [n for n in self.nx.nodes if n not in live and self.node(n).op != "Input"]
        for nid in sorted(dead, reverse=True):
            node = self.node(nid)
            self.nx.remove_node(nid)
            del self._node_names[node.name]
            for out in node.output_names:
                self._value_names.pop(out, None)
        return len(dead)

    def inline(self, body: Graph, inputs: Sequence[Value], *, infer: bool = False) -> list[Value]:
        """Copy ``body``'s operations into this graph with its inputs bound to ``inputs`` (in order); returns the
        values of ``body``'s outputs. Names are made unique here; graph attributes are copied; types are copied,
        or inferred again for the new inputs with ``infer``."""
        if len(inputs) != len(body.inputs):
            raise ValidationError(f"inlining {body.name!r} needs {len(body.inputs)} inputs, got {len(inputs)}")
        mapping: dict[Value, Value] = {}
        for node, value in zip(body.inputs, inputs):
            self._check_value(value)
            mapping[node.output(0)] = value
        for node in body.nodes():
            if node.op == "Input" and node.domain == "":
                continue
            if node.op == "Constant" and node.domain == "":
                mapping[node.output(0)] = self.constant(node.attrs["value"], name=node.output_names[0])
                continue
            names: list[str] = []
            for out in node.output_names:
                name = self._unique_name(out)
                while name in names:  # not registered yet, so a fresh name may repeat within one node
                    name = self._unique_name(f"{name}_")
                names.append(name)
            ins = [None if v is None else mapping[v] for v in body.inputs_of(node)]
            outs = self.add_node(node.op, ins, domain=node.domain, name=node.name, output_names=names,
                                 attrs=_copy_attrs(node.attrs), infer=infer, doc=node.doc)
            outs = (outs,) if isinstance(outs, Value) else outs
            if not infer:
                self.node(outs[0]).output_types = list(node.output_types)
            mapping.update(zip(node.outputs, outs))
        return [mapping[v] for v, _ in body.outputs]

    def _check_value(self, value: Value) -> None:
        if not isinstance(value, tuple) or value.node not in self.nx:
            raise ValidationError(f"{value!r} is not a value of graph {self.name!r}")
        if not 0 <= value.port < self.node(value.node).num_outputs:
            raise ValidationError(f"node {self.node(value.node).name!r} has no output port {value.port}")

    # ------------------------------------------------------------------ types
    def infer_node(self, node: Node) -> None:
        """Run the registry's type inference for one node and store the result."""
        if _resolver is None:
            return
        types = _resolver.infer(self, node)
        if len(types) != node.num_outputs:
            raise ValidationError(f"inference for {node.name!r} ({node.qualified_op}) gave {len(types)} types "
                                  f"for {node.num_outputs} outputs")
        node.output_types = list(types)

    def infer_types(self) -> None:
        """Re-run type inference over the whole graph in topological order."""
        for node in self.nodes():
            if node.op in ("Input", "Constant") and node.domain == "":
                continue
            self.infer_node(node)

    def infer_missing_types(self) -> bool:
        """Type a graph that has untyped values (the text IR may omit types): constants from their arrays, then
        every operation by inference. Returns False (and changes nothing) when every value is typed already."""
        nodes = self.nodes()
        if all(t is not None for n in nodes if n.op != "Input" for t in n.output_types):
            return False
        for node in nodes:
            if _resolver is not None:  # NOTE: text read from a file may lack a required attribute (a body) that
                _resolver.check(self, node)  # inference would trip over; the verifier's check names it first
            if node.op == "Constant" and node.domain == "" and node.output_types[:1] == [None]:
                value = node.attrs.get("value")  # NOTE: text read from a file may give a Constant no tensor
                if not isinstance(value, np.ndarray):
                    raise ValidationError(f"node {node.name!r} (Constant): expected a tensor attribute 'value', "
                                          f"got {type(value).__name__}")
                node.output_types[0] = TensorType.of(value)
        self.infer_types()
        return True

    # ------------------------------------------------------------------ whole-graph services
    def verify(self) -> None:
        """Check the graph (see ``tlc.ir.verify``); raises ``ValidationError`` naming node, op and port."""
        from .verify import verify

        verify(self)

    def structural_hash(self) -> str:
        from .hashing import graph_hash

        return graph_hash(self)

    def copy(self) -> Graph:
        """A deep copy: new nodes, edges and attribute containers; constant arrays are shared (immutable)."""
        g = Graph.__new__(Graph)
        g.name, g.doc = self.name, self.doc
        g.opset = dict(self.opset)
        g.producer_name, g.producer_version = self.producer_name, self.producer_version
        g.metadata = dict(self.metadata)
        g.outputs = list(self.outputs)
        g.nx = nx.MultiDiGraph()
        for nid, node in self.nx.nodes(data="node"):
            clone = Node(nid, node.op, node.domain, node.name, _copy_attrs(node.attrs), node.num_inputs,
                         list(node.output_names), node.doc)
            clone.output_types = list(node.output_types)
            g.nx.add_node(nid, node=clone)
        g.nx.add_edges_from(self.nx.edges(keys=True, data=True))
        last = max(self.nx.nodes, default=-1)
        g._ids = itertools.count(max(last + 1, _peek(self._ids)))
        g._node_names = dict(self._node_names)
        g._value_names = dict(self._value_names)
        g._name_counters = {}
        return g

    def __str__(self) -> str:
        from .text import print_graph

        return print_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self)} nodes, {len(self.outputs)} outputs>"

    def op_counts(self) -> dict[str, int]:
        """How many nodes of each (qualified) op type, Input and Constant included."""
        counts: dict[str, int] = {}
        for _, node in self.nx.nodes(data="node"):
            counts[node.qualified_op] = counts.get(node.qualified_op, 0) + 1
        return dict(sorted(counts.items()))


def _peek(counter: itertools.count) -> int:
    # itertools.count's repr is "count(N)"; reading it does not advance the counter.
    return int(repr(counter)[6:-1])


def _copy_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, Graph):
            out[k] = v.copy()
        elif isinstance(v, list):
            out[k] = [x.copy() if isinstance(x, Graph) else x for x in v]
        else:
            out[k] = v
    return out


def topo_values(graph: Graph) -> Iterable[Value]:
    """Every value of ``graph`` in topological order."""
    for node in graph.nodes():
        yield from node.outputs
