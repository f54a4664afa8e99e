"""DOT and GraphML dumps of a graph.

DOT (through pydot) is for looking at: top-to-bottom, one compact label per op (op type, name, output
types), inputs, outputs and constants in their own shapes and colours, a constant with a single consumer
folded into that consumer's label, and each ``tlc.Fused`` node drawn as a cluster holding its body.

GraphML (through networkx) is for tools and round trips. GraphML holds only scalars, so each node's data
is flattened into typed keys: ``index``, ``op``, ``domain``, ``name``, ``doc``, ``num_inputs``,
``num_outputs``, ``out<i>.name`` and ``out<i>.type`` (text-IR type syntax), and per attribute ``k``:
``kind.k`` (int, float, bool, string, tensor, graph or list) with the value in ``attr.k`` (a typed scalar;
a tensor as base64 of its little-endian bytes plus ``dtype.k`` and ``shape.k``; a graph as text IR; a list
as JSON). Edges carry ``src_port`` and ``dst_port``; graph data carries ``format``, ``name``, ``doc``,
``producer_name``, ``producer_version``, ``opset``, ``metadata`` and ``outputs`` (JSON). Strings XML
cannot carry (control characters, ``\\r``, lone surrogates) are stored as ``base64:`` + UTF-8 base64.
``read_graphml`` rebuilds the exact graph. A GraphML file is untrusted input (SECURITY.md): expat refuses entity
expansion bombs and external entities; a malformed or hostile file (ports past what its edges use, JSON nested
past Python's recursion limit, bad base64) is an ``InvalidModelError``.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pydot

from ..errors import InvalidModelError
from ..ir.fileutil import atomic_write
from ..ir.graph import Graph, Node, Value
from ..ir.text import add_exact_node, format_type, parse_graph, parse_type, print_graph
from ..ir.types import dtype_name, np_dtype
from ..ops import Trait, lookup

__all__ = ["from_networkx", "read_graphml", "to_dot", "to_graphml", "to_networkx", "write_dot", "write_graphml"]

# ---------------------------------------------------------------------------- DOT
_OP_STYLE = {"shape": "box", "style": "rounded,filled", "fillcolor": "#dde8f8", "color": "#1f4e8c"}
_STYLES = {  # ops use the node defaults (_OP_STYLE); the others override them
    "op": {},
    "input": {"shape": "ellipse", "style": "filled", "fillcolor": "#d7f2d7", "color": "#2e7d32"},
    "output": {"shape": "invhouse", "style": "filled", "fillcolor": "#fde2c8", "color": "#e65100"},
    "constant": {"shape": "box", "style": "filled", "fillcolor": "#eeeeee", "color": "#9e9e9e",
                 "fontsize": "7", "height": "0.15", "margin": "0.03,0.01"},
}
_CLUSTER = {"style": "rounded,filled", "fillcolor": "#fff8e1", "color": "#f9a825", "fontsize": "9"}
_NAME_CHARS = 28


def _show(text: str, limit: int = _NAME_CHARS) -> str:
    """Display form of a name: escaped non-printables, shortened from the left, HTML-escaped."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > limit:
        text = "…" + text[-(limit - 1):]
    return html.escape(text)


def _small(text: str, colour: str = "#555555") -> str:
    return f'<font point-size="8" color="{colour}">{text}</font>'


def _types(node: Node) -> str:
    types = [format_type(t) for t in node.output_types if t is not None]
    more = f" +{len(types) - 3}" if len(types) > 3 else ""
    return _show(", ".join(types[:3]) + more, 60)


def _is(node: Node, op: str) -> bool:
    return node.domain == "" and node.op == op


def _is_cluster(node: Node) -> bool:
    """A node drawn as a cluster: a subgraph op (asked of the registry) whose ``body`` maps its inputs and outputs
    one to one (``tlc.Fused``). Control flow (If, Loop, Scan: bodies with other interfaces) is drawn as one op."""
    opdef = lookup(node.op, node.domain)
    body = node.attrs.get("body")
    return (opdef is not None and opdef.has(Trait.SUBGRAPH) and isinstance(body, Graph)
            and len(body.inputs) == node.num_inputs and len(body.outputs) == node.num_outputs
            and not any(k != "body" and isinstance(v, Graph) for k, v in node.attrs.items())
            and "num_scan_inputs" not in node.attrs)


_Source = tuple[str, int]  # (DOT node id, output port to label or -1)


class _Dot:
    """Emits one graph (and, recursively, fused bodies) into a pydot container."""

    def __init__(self, dot: pydot.Dot):
        self.dot = dot

    def emit(self, graph: Graph, container: Any, prefix: str) -> tuple[dict[Value, _Source], list[str]]:
        """Add ``graph``'s nodes; return where each value comes from (dot node, port) and the input nodes."""
        sources: dict[Value, _Source] = {}
        folded: dict[int, list[str]] = {}
        entry: list[str] = []
        for node in graph.nodes():
            nid = f"{prefix}n{node.id}"
            target = self._fold_target(graph, node) if _is(node, "Constant") else None
            if target is not None:
                const = _show(node.output_names[0] if node.output_names else node.name, 20)
                folded.setdefault(target, []).append(f"{const}: {_types(node)}")
                continue
            if _is_cluster(node):
                self._fused(graph, node, container, prefix, sources)
                continue
            kind = "input" if _is(node, "Input") else "constant" if _is(node, "Constant") else "op"
            container.add_node(pydot.Node(nid, label=self._label(node, kind, folded.get(node.id, [])),
                                          **_STYLES[kind]))
            if kind == "input":
                entry.append(nid)
            for value in graph.inputs_of(node):
                if value is not None and value in sources:
                    self._edge(sources[value], nid)
            for v in node.outputs:
                sources[v] = (nid, v.port if node.num_outputs > 1 else -1)
        return sources, entry

    @staticmethod
    def _fold_target(graph: Graph, node: Node) -> int | None:
        """The id of the one consumer a constant is folded into, or None when it is drawn on its own."""
        users = graph.users(node.output(0)) if node.num_outputs == 1 else []
        if len(users) != 1 or graph.is_output(node.output(0)) or _is_cluster(users[0][0]):
            return None
        return users[0][0].id

    @staticmethod
    def _label(node: Node, kind: str, folded: list[str]) -> str:
        if kind == "input":
            return f"<<b>{_show(node.name)}</b><br/>{_small(_types(node))}>"
        if kind == "constant":
            return f"<{_show(node.name, 20)}: {_types(node)}>"
        lines = [f"<b>{_show(node.qualified_op, 40)}</b>"]
        if node.name != node.op:
            lines.append(_small(_show(node.name), "#333333"))
        if any(t is not None for t in node.output_types):
            lines.append(_small(_types(node)))
        lines += [_small(text, "#777777") for text in folded]
        return "<" + "<br/>".join(lines) + ">"

    def _edge(self, source: _Source, target: str) -> None:
        # NOTE: only the output port of a multi-output producer is labelled; input ports keep their
        # left-to-right order in the layout, and labelling them all clutters a 400-node drawing.
        attrs = {"taillabel": str(source[1])} if source[1] >= 0 else {}
        self.dot.add_edge(pydot.Edge(source[0], target, **attrs))

    def _fused(self, graph: Graph, node: Node, container: Any, prefix: str,
               sources: dict[Value, _Source]) -> None:
        body: Graph = node.attrs["body"]
        title = f"tlc.Fused ({node.attrs.get('kind', 'elementwise')})"
        title += "" if node.name == node.op else f" {node.name}"
        cluster = pydot.Cluster(f"{prefix}c{node.id}", label=f"<{_show(title, 48)}>", **_CLUSTER)
        container.add_subgraph(cluster)
        body_sources, entry = self.emit(body, cluster, f"{prefix}f{node.id}_")
        for port, value in enumerate(graph.inputs_of(node)):
            if value is not None and value in sources and port < len(entry):
                self._edge(sources[value], entry[port])
        for port, (inner, _) in enumerate(body.outputs):
            if port < node.num_outputs and inner in body_sources:
                sources[Value(node.id, port)] = body_sources[inner]


def to_dot(graph: Graph) -> pydot.Dot:
    """A pydot graph for ``graph`` (render with Graphviz: ``dot -Tsvg``)."""
    dot = pydot.Dot("tlc", graph_type="digraph", rankdir="TB", nodesep="0.15", ranksep="0.25",
                    fontname="Helvetica", label=f"<{_show(graph.name, 60)}>", labelloc="t")
    dot.set_node_defaults(fontname="Helvetica", fontsize="10", height="0.3", margin="0.06,0.03", **_OP_STYLE)
    dot.set_edge_defaults(arrowsize="0.5", color="#555555", fontsize="7", fontcolor="#777777")
    sources, _ = _Dot(dot).emit(graph, dot, "")
    for i, (value, name) in enumerate(graph.outputs):
        dot.add_node(pydot.Node(f"out{i}", label=f"<<b>{_show(name)}</b>>", **_STYLES["output"]))
        if value in sources:
            _Dot(dot)._edge(sources[value], f"out{i}")
    return dot


def write_dot(graph: Graph, path: str | os.PathLike) -> None:
    text = to_dot(graph).to_string()
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


# ---------------------------------------------------------------------------- GraphML
FORMAT = "tlc-graphml-1"
#: input ports a node may declare beyond those its edges feed (trailing missing optional inputs); bounds what a
#: small file can make the reader allocate
MAX_MISSING_PORTS = 32
_B64 = "base64:"
_XML_UNSAFE = re.compile("[^\t\n\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _safe(text: str) -> str:
    """``text`` as XML can carry it; escaped when it holds what XML cannot (or looks escaped)."""
    if _XML_UNSAFE.search(text) or text.startswith(_B64):
        return _B64 + base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")
    return text


def _unsafe(text: str) -> str:
    if text.startswith(_B64):
        return base64.b64decode(text[len(_B64):]).decode("utf-8", "surrogatepass")
    return text


def _json(value: Any) -> str:
    """JSON of ``value`` with every string made XML-safe; ASCII only; floats in their exact repr."""
    return json.dumps(_map_strings(value, _safe), ensure_ascii=True)


def _unjson(text: str) -> Any:
    # NOTE: strings go through _safe first because JSON would merge two escaped lone surrogates into one
    # character, and a round trip must keep them apart.
    return _map_strings(json.loads(text), _unsafe)


def _map_strings(value: Any, fn) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    return value


def _list_to_json(value: Any) -> Any:
    """A list attribute as JSON-able data; tensors and graphs inside it become tagged objects."""
    if isinstance(value, (list, tuple)):
        return [_list_to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"tensor": _tensor_data(value)}
    if isinstance(value, Graph):
        return {"graph": print_graph(value, inline_limit=sys.maxsize)}
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    return value


def _list_from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_list_from_json(v) for v in value]
    if isinstance(value, dict):
        return _tensor_of(*value["tensor"]) if "tensor" in value else parse_graph(value["graph"])
    return value


def _tensor_data(array: np.ndarray) -> list:
    dtype = dtype_name(array.dtype)
    if dtype == "string":
        return [dtype, list(array.shape), _json(array.ravel().tolist())]
    data = np.ascontiguousarray(array, dtype=np_dtype(dtype).newbyteorder("<")).tobytes()
    return [dtype, list(array.shape), base64.b64encode(data).decode("ascii")]


def _tensor_of(dtype: str, shape: list, data: str) -> np.ndarray:
    if dtype == "string":
        return np.array(_unjson(data), dtype=object).reshape(shape)
    flat = np.frombuffer(base64.b64decode(data), dtype=np_dtype(dtype).newbyteorder("<"))
    return flat.astype(np_dtype(dtype)).reshape(shape)


def _attr_data(key: str, value: Any) -> dict[str, Any]:
    """The GraphML data of one attribute: ``kind.key`` plus the value key(s)."""
    if isinstance(value, (bool, np.bool_)):
        return {f"kind.{key}": "bool", f"attr.{key}": bool(value)}
    if isinstance(value, (int, np.integer)):
        return {f"kind.{key}": "int", f"attr.{key}": int(value)}
    if isinstance(value, (float, np.floating)):
        return {f"kind.{key}": "float", f"attr.{key}": float(value)}
    if isinstance(value, str):
        return {f"kind.{key}": "string", f"attr.{key}": _safe(value)}
    if isinstance(value, np.ndarray):
        dtype, shape, data = _tensor_data(value)
        return {f"kind.{key}": "tensor", f"attr.{key}": data, f"dtype.{key}": dtype,
                f"shape.{key}": _json(shape)}
    if isinstance(value, Graph):
        return {f"kind.{key}": "graph", f"attr.{key}": _safe(print_graph(value, inline_limit=sys.maxsize))}
    if isinstance(value, (list, tuple)):
        return {f"kind.{key}": "list", f"attr.{key}": _json(_list_to_json(value))}
    raise InvalidModelError(f"attribute {key!r} of type {type(value).__name__} cannot be written to GraphML")


def _attr_of(data: dict[str, Any], key: str, kind: str) -> Any:
    raw = data.get(f"attr.{key}", "")
    if kind in ("bool", "int", "float"):
        return {"bool": bool, "int": int, "float": float}[kind](raw)
    if kind == "string":
        return _unsafe(raw)
    if kind == "tensor":
        return _tensor_of(data[f"dtype.{key}"], _unjson(data[f"shape.{key}"]), raw)
    if kind == "graph":
        return parse_graph(_unsafe(raw), source=f"graph attribute {key!r}")
    if kind == "list":
        return _list_from_json(_unjson(raw))
    raise InvalidModelError(f"unknown attribute kind {kind!r} for attribute {key!r}")


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """The flattened networkx graph that ``write_graphml`` writes (node ids ``n<index>``)."""
    G = nx.MultiDiGraph()
    G.graph.update({
        "format": FORMAT, "name": _safe(graph.name), "doc": _safe(graph.doc),
        "producer_name": _safe(graph.producer_name), "producer_version": _safe(graph.producer_version),
        "opset": _json(list(graph.opset.items())), "metadata": _json(list(graph.metadata.items()))})
    index = {}
    for i, node in enumerate(graph.nodes()):
        index[node.id] = i
        data: dict[str, Any] = {"index": i, "op": _safe(node.op), "domain": _safe(node.domain),
                                "name": _safe(node.name), "num_inputs": node.num_inputs,
                                "num_outputs": node.num_outputs}
        if node.doc:
            data["doc"] = _safe(node.doc)
        for port, (out, ttype) in enumerate(zip(node.output_names, node.output_types, strict=True)):
            data[f"out{port}.name"] = _safe(out)
            if ttype is not None:
                data[f"out{port}.type"] = _safe(format_type(ttype))
        for key, value in node.attrs.items():
            data.update(_attr_data(_safe(key), value))
        G.add_node(f"n{i}", **data)
        for port, value in enumerate(graph.inputs_of(node)):
            if value is not None:
                G.add_edge(f"n{index[value.node]}", f"n{i}", key=port, src_port=value.port, dst_port=port)
    G.graph["outputs"] = _json([[index[v.node], v.port, name] for v, name in graph.outputs])
    return G


def to_graphml(graph: Graph) -> str:
    return "\n".join(nx.generate_graphml(to_networkx(graph)))


def write_graphml(graph: Graph, path: str | os.PathLike) -> None:
    G = to_networkx(graph)
    atomic_write(path, lambda tmp: nx.write_graphml(G, tmp))


def read_graphml(path: str | os.PathLike) -> Graph:
    """Rebuild the exact graph from a GraphML file written by ``write_graphml``."""
    try:
        G = nx.read_graphml(path, force_multigraph=True)
    except Exception as exc:  # networkx raises a mix of XML, KeyError and NetworkXError on bad files
        raise InvalidModelError(f"cannot read GraphML file {str(path)!r}: {exc}") from exc
    if G.graph.get("format") != FORMAT:
        raise InvalidModelError(f"{str(path)!r} is not a GraphML file written by tlc (no format={FORMAT!r} "
                                f"graph data; got {G.graph.get('format')!r})")
    try:
        return from_networkx(G)
    except InvalidModelError as exc:
        raise InvalidModelError(f"malformed tlc GraphML file {str(path)!r}: {exc}") from None
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError, RecursionError) as exc:
        raise InvalidModelError(f"malformed tlc GraphML file {str(path)!r}: "
                                f"{type(exc).__name__}: {exc}") from None


def from_networkx(G: nx.MultiDiGraph) -> Graph:
    """The inverse of ``to_networkx``."""
    data = G.graph
    graph = Graph(_unsafe(data.get("name", "")), doc=_unsafe(data.get("doc", "")))
    graph.opset = dict(_unjson(data["opset"]))
    graph.metadata = dict(_unjson(data["metadata"]))
    graph.producer_name = _unsafe(data.get("producer_name", ""))
    graph.producer_version = _unsafe(data.get("producer_version", ""))
    values: dict[str, list[Value]] = {}
    ordered = sorted(G.nodes(data=True), key=lambda item: item[1]["index"])
    for nid, nd in ordered:
        edges = list(G.in_edges(nid, data=True))
        num_inputs, num_outputs = int(nd["num_inputs"]), int(nd["num_outputs"])
        if not (0 <= num_inputs <= len(edges) + MAX_MISSING_PORTS and 0 <= num_outputs <= len(nd)):
            raise InvalidModelError(f"node {nid!r} declares {num_inputs} inputs and {num_outputs} outputs; expected "
                                    f"at most {len(edges) + MAX_MISSING_PORTS} (its {len(edges)} edges and "
                                    f"{MAX_MISSING_PORTS} missing) and at most one per data key")
        inputs: list[Value | None] = [None] * num_inputs
        for src, _, edge in edges:
            source = values[src]
            inputs[_port(edge["dst_port"], num_inputs, nid)] = source[_port(edge["src_port"], len(source), src)]
        outs = range(num_outputs)
        types = [parse_type(_unsafe(nd[f"out{p}.type"])) if f"out{p}.type" in nd else None for p in outs]
        attrs = {_unsafe(k[5:]): _attr_of(nd, k[5:], kind) for k, kind in nd.items() if k.startswith("kind.")}
        node = add_exact_node(graph, _unsafe(nd.get("op", "")), _unsafe(nd.get("domain", "")),
                              _unsafe(nd.get("name", "")), attrs, inputs,
                              [_unsafe(nd.get(f"out{p}.name", "")) for p in outs], types,
                              _unsafe(nd.get("doc", "")))
        values[nid] = node.outputs
    by_index = {nd["index"]: nid for nid, nd in ordered}
    for index, port, name in _unjson(data["outputs"]):
        outs = values[by_index[index]]
        graph.outputs.append((outs[_port(port, len(outs), by_index[index])], name))
    return graph


def _port(port: object, count: int, nid: str) -> int:
    """``port`` checked to be one of ``count`` (Python would read -1 as the last one)."""
    if not isinstance(port, int) or not 0 <= port < count:
        raise InvalidModelError(f"port {port!r} of node {nid!r} is out of range: it has {count}")
    return port
