"""The reference executor: runs a graph op by op through the registry's numpy implementations.

It is -O0 and the oracle every pass is checked against. Intermediate arrays are dropped as soon as their last
consumer has run, so large models run in bounded memory.

Values are numpy arrays, or for sequences a list of arrays and for optionals None or their value
(``tlc.ir.types``). A node that reads or makes such a value calls its op's reference as it is (``run_values``):
``OpDef.run_reference`` turns every result into an array, which would stack a list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import ExecutionError, TlcError
from .ir.feeds import check_feeds
from .ir.graph import Graph, Node, Value
from .ir.types import OptionalType, SequenceType, TensorType
from .ops import OpDef, Trait, opdef_of


class Interpreter:
    """Runs a graph node by node; subclass and override ``run_node`` to observe or replace execution."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.order = [n for n in graph.nodes() if not (n.op == "Input" and n.domain == "")]
        self.inputs_of = {n.id: graph.inputs_of(n) for n in self.order}
        uses: dict[Value, int] = {}
        for n in self.order:
            for v in self.inputs_of[n.id]:
                if v is not None:
                    uses[v] = uses.get(v, 0) + 1
        for v, _ in graph.outputs:
            uses[v] = uses.get(v, 0) + 1
        self.uses = uses

    def run_node(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        opdef = opdef_of(node)
        context = {"run_graph": run_graph} if Trait.SUBGRAPH in opdef.traits else {}
        try:
            if carries_non_tensors(node, inputs):
                outs = run_values(opdef, node, inputs, context)
            else:
                outs = opdef.run_reference(inputs, node.attrs, _out_dtypes(node), **context)
        except TlcError:
            raise
        except Exception as exc:  # an implementation bug or an input it cannot take: say where
            shapes = ", ".join(describe_value(a) for a in inputs)
            raise ExecutionError(f"node {node.name!r} ({node.qualified_op}) failed on inputs ({shapes}): "
                                 f"{type(exc).__name__}: {exc}") from exc
        return outs[: node.num_outputs]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        g = self.graph
        env: dict[Value, np.ndarray] = {}
        by_name = {n.name: n for n in g.inputs}
        for name, array in feeds.items():
            env[Value(by_name[name].id, 0)] = array
        remaining = dict(self.uses)
        for node in self.order:
            ins = self.inputs_of[node.id]
            arrays = [None if v is None else env[v] for v in ins]
            outs = self.run_node(node, arrays)
            for port, array in enumerate(outs):
                env[Value(node.id, port)] = array
            for v in ins:
                if v is not None:
                    remaining[v] -= 1
                    if remaining[v] == 0:
                        del env[v]
        return {name: env[v] for v, name in g.outputs}


def run(graph: Graph, feeds: Mapping[str, object], outputs: Sequence[str] | None = None,
        *, check: bool = True) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (input name -> array); returns output name -> array.

    Feeds are checked against the declared inputs (names, dtypes, shapes) unless ``check`` is False.
    """
    specs = [(n.name, n.output_types[0]) for n in graph.inputs]
    if check:
        arrays, _ = check_feeds(specs, feeds)
    else:
        arrays = {k: v if v is None or isinstance(v, list) else np.asarray(v) for k, v in feeds.items()}
    result = Interpreter(graph).run(arrays)
    if outputs is not None:
        missing = [o for o in outputs if o not in result]
        if missing:
            raise KeyError(f"no output(s) {missing}; the graph's outputs are {list(result)}")
        result = {o: result[o] for o in outputs}
    # NOTE: outputs never alias feeds, constants or each other.
    return {k: copy_value(v) for k, v in result.items()}


def run_graph(graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a subgraph (e.g. a ``tlc.Fused`` body) positionally: its inputs in order, its outputs in order."""
    feeds = {node.name: array for node, array in zip(graph.inputs, inputs)}
    result = Interpreter(graph).run(feeds)
    return [result[name] for _, name in graph.outputs]


def copy_value(value: Any) -> Any:
    """A copy of a run-time value: an array, a list of arrays (a sequence) or None (an empty optional)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [np.array(a, copy=True) for a in value]
    return np.array(value, copy=True)


def describe_value(value: Any) -> str:
    """"float32[2, 3]", "seq[float32[2], ...]" or "None", for messages."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return "seq[" + ", ".join(describe_value(a) for a in value[:3]) + (", ...]" if len(value) > 3 else "]")
    value = np.asarray(value)
    return f"{value.dtype}{list(value.shape)}"


def carries_non_tensors(node: Node, inputs: Sequence[Any]) -> bool:
    """Whether ``node`` reads a sequence or makes a sequence or optional value (then ``run_values`` runs it)."""
    return (any(isinstance(x, list) for x in inputs)
            or any(t is not None and not isinstance(t, TensorType) for t in node.output_types))


def run_values(opdef: OpDef, node: Node, inputs: Sequence[Any], context: dict[str, Any]) -> list[Any]:
    """The op's reference on values of any kind; each output comes back as its type says (an array, a list of
    arrays, or None for an empty optional). A reference returns a list of outputs, or the one output itself."""
    attrs = opdef.resolved_attrs(node)
    result = opdef.reference(*inputs, **attrs, **context)
    if node.num_outputs == 1 and _is_value(result, node.output_types[0]):
        result = [result]
    elif not isinstance(result, (list, tuple)):
        result = [result]
    return [_as_value(r, t) for r, t in zip(result, node.output_types)]


def _is_value(x: Any, t: Any) -> bool:
    """Whether ``x`` is one value of type ``t`` (rather than a list of outputs)."""
    if isinstance(t, SequenceType):
        return isinstance(x, list) and all(isinstance(a, np.ndarray) for a in x)
    if isinstance(t, OptionalType):
        return x is None or _is_value(x, t.elem)
    return not isinstance(x, (list, tuple))


def _as_value(x: Any, t: Any) -> Any:
    if x is None and isinstance(t, OptionalType):
        return None
    if isinstance(x, list) and isinstance(t, (SequenceType, OptionalType)):
        return [np.asarray(a) for a in x]
    return np.asarray(x)


def _out_dtypes(node: Node) -> list[str | None]:
    return [t.dtype if isinstance(t, TensorType) else None for t in node.output_types]
