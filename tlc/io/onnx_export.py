"""Writing a Graph as an ONNX model that onnx.checker accepts and onnxruntime runs.

- IR version 10 (opset 21's); onnxruntime 1.31 reads at most 13 (FACTS.md). A graph that uses an op introduced
  after opset 21 is written at the first opset that has it, with the IR version that opset needs.
- Constants become initializers; every value gets a value_info with its inferred type.
- ``tlc.Fused`` nodes become calls of model-local functions in the ``tlc`` domain (one function per distinct
  body, nested bodies as nested functions); the node's ``kind`` travels as an attribute of the call, declared by
  the function with a default. The importer turns these calls back into ``tlc.Fused`` nodes.
- Other ``tlc`` ops with an ``OpDef.decompose`` (``tlc.ConvNhwc``, ...) become calls of local functions holding
  their decomposition into ONNX ops (one per distinct body); the importer inlines those.
- Sequence and optional values get sequence and optional value infos; Optional's ``type`` attribute (text IR
  form in tlc) becomes a TypeProto again.
- If, Loop, Scan, SequenceMap and FlexAttention (``tlc.ops.control.is_control``): bodies become GraphProto
  attributes. Their captures (trailing node inputs matched to trailing body inputs, see ``tlc.ops.control``) turn
  back into implicit outer-scope references: the body reads the outer value's name and the capture inputs and
  ``num_captures`` go. Body names that an enclosing graph
  already uses are renamed (ONNX scopes are one SSA namespace); body outputs that are body inputs, repeat a
  value or need another name get an Identity marked ``OUTPUT_ALIAS_DOC``.
- Graph outputs whose name is not the name of their value (an input that is also an output under another name,
  a value output twice) get an Identity node producing the output name, marked ``OUTPUT_ALIAS_DOC``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import defs, helper

from ..errors import TlcError
from ..ir.graph import DEFAULT_OPSET, TLC_DOMAIN, Graph, Node, Value
from ..ir.text import parse_type
from ..ops import lookup
from ..ops.control import bodies, is_control, num_captures
from ..ops.sequence import TYPE_ATTRS
from . import atomic_write
from .onnx_opset import export_opset
from .onnx_tensors import array_to_tensor, type_proto, value_info_proto

EXPORT_IR_VERSION = 10  # opset 21's IR version
FUSED_PREFIX = "Fused_"
#: The doc string of the Identity nodes the exporter adds to name outputs; the importer reads them as the
#: outputs themselves again (and leaves every other Identity alone).
OUTPUT_ALIAS_DOC = "tlc: names a graph output"
_ATTR_TYPES = {"ints": onnx.AttributeProto.INTS, "floats": onnx.AttributeProto.FLOATS,
               "strings": onnx.AttributeProto.STRINGS}


def _is(node: Node, op: str, domain: str = "") -> bool:
    return node.op == op and node.domain == domain


def _attr_proto(name: str, value: Any, kind: str | None) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, array_to_tensor(value, name))
    if isinstance(value, Graph):
        raise TlcError(f"graph attribute {name!r} cannot be exported directly")
    if isinstance(value, (list, tuple)) and not value:
        if kind not in _ATTR_TYPES:
            raise TlcError(f"attribute {name!r} is an empty list of unknown element kind; cannot export it")
        return helper.make_attribute(name, [], attr_type=_ATTR_TYPES[kind])
    if kind == "float" and isinstance(value, (int, np.integer)):
        value = float(value)
    if kind == "floats":
        value = [float(v) for v in value]
    return helper.make_attribute(name, value)


def _node_attrs(node: Node) -> list[onnx.AttributeProto]:
    opdef = lookup(node.op, node.domain)
    types = TYPE_ATTRS.get((node.domain, node.op), frozenset())
    return [helper.make_attribute(k, type_proto(parse_type(v))) if k in types
            else _attr_proto(k, v, opdef.attrs[k].kind if opdef and k in opdef.attrs else None)
            for k, v in sorted(node.attrs.items())]


class _Writer:
    """Collects the nodes of one graph or function body; functions and used ops are shared model-wide."""

    def __init__(self, graph: Graph, functions: dict[str, onnx.FunctionProto], ops: set[str],
                 names: dict[Value, str] | None = None, scope: set[str] | None = None):
        self.graph = graph
        self.functions = functions
        self.ops = ops
        self.nodes: list[onnx.NodeProto] = []
        self.node_names = {n.name for n in graph.nodes()}
        #: exported names that differ from the values' own (a body's captures and renamed values)
        self.names = names or {}
        #: every name the enclosing graphs and this one define (a body may define none of them again)
        self.scope = scope if scope is not None else (
            {n for node in graph.nodes() for n in node.output_names} | {n for _, n in graph.outputs})

    def name(self, value: Value) -> str:
        return self.names.get(value) or self.graph.value_name(value)

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.node_names:
            name, i = f"{base}_{i}", i + 1
        self.node_names.add(name)
        return name

    def inputs(self, node: Node) -> list[str]:
        return ["" if v is None else self.name(v) for v in self.graph.inputs_of(node)]

    def outputs(self, node: Node) -> list[str]:
        return [self.name(v) for v in node.outputs]

    def add(self, node: Node, *, named: bool) -> None:
        name = node.name if named else None
        opdef = lookup(node.op, node.domain)
        if _is(node, "Fused", TLC_DOMAIN):
            fn = fused_function(node.attrs["body"], self.functions, self.ops)
            proto = helper.make_node(fn.name, self.inputs(node), self.outputs(node), name=name,
                                     domain=TLC_DOMAIN, doc_string=node.doc or None)
            proto.attribute.append(helper.make_attribute("kind", str(node.attrs.get("kind", "elementwise"))))
        elif node.domain == TLC_DOMAIN and opdef is not None and opdef.decompose is not None:
            # a tlc op with a decomposition: a call of a local function holding it (the importer inlines it)
            body = opdef.decompose(self.graph, node)
            fn = fused_function(body, self.functions, self.ops, prefix=f"{node.op}_")
            proto = helper.make_node(fn.name, self.inputs(node), self.outputs(node), name=name,
                                     domain=TLC_DOMAIN, doc_string=node.doc or None)
        elif is_control(node):
            proto = self.control(node, name)
        else:
            proto = helper.make_node(node.op, self.inputs(node), self.outputs(node), name=name,
                                     domain=node.domain or None, doc_string=node.doc or None)
            proto.attribute.extend(_node_attrs(node))
            if node.domain == "":
                self.ops.add(node.op)
        self.nodes.append(proto)

    def control(self, node: Node, name: str | None) -> onnx.NodeProto:
        """A node with bodies (``is_control``): formal inputs only; each body reads its captures by their outer
        names."""
        names = self.inputs(node)
        k = num_captures(node)
        formal, captured = names[: len(names) - k], names[len(names) - k:]
        if node.op == "Loop":
            formal += [""] * (2 - len(formal))
        proto = helper.make_node(node.op, formal, self.outputs(node), name=name, domain=node.domain or None,
                                 doc_string=node.doc or None)
        scope = self.scope | set(self.names.values())
        for key, body in bodies(node):
            proto.attribute.append(helper.make_attribute(key, self.body_proto(body, captured, scope)))
        opdef = lookup(node.op, node.domain)
        proto.attribute.extend(_attr_proto(k_, v, opdef.attrs[k_].kind) for k_, v in sorted(node.attrs.items())
                               if not isinstance(v, Graph) and k_ != "num_captures")
        if node.domain == "":
            self.ops.add(node.op)
        return proto

    def body_proto(self, body: Graph, captured: list[str], scope: set[str]) -> onnx.GraphProto:
        """A body as a GraphProto inside ``scope`` (the names of the graphs around it)."""
        inputs = body.inputs
        formal = inputs[: len(inputs) - len(captured)]
        names: dict[Value, str] = {n.output(0): outer for n, outer in zip(inputs[len(formal):], captured)}
        taken = set(scope)

        def fresh(base: str) -> str:
            name, i = base, 1
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            taken.add(name)
            return name

        for node in body.nodes():
            for v in node.outputs:
                if v not in names:
                    names[v] = fresh(body.value_name(v))
        writer = _Writer(body, self.functions, self.ops, names, taken)
        value_info = []
        for node in body.nodes():
            if _is(node, "Input"):
                continue
            if _is(node, "Constant"):
                out = names[node.output(0)]
                writer.nodes.append(helper.make_node("Constant", [], [out],
                                                     value=array_to_tensor(node.attrs["value"], out)))
                self.ops.add("Constant")
                continue
            writer.add(node, named=True)
            value_info.extend(value_info_proto(names[v], t) for v, t in zip(node.outputs, node.output_types))
        outputs, seen = [], set()
        for value, out_name in body.outputs:
            source = names[value]
            if source != out_name or value in seen or _is(body.node(value.node), "Input"):
                target = out_name if out_name not in taken else fresh(f"{out_name}_out")
                taken.add(target)
                writer.identity(source, target, named=False)
            else:
                target = source
            seen.add(value)
            outputs.append(value_info_proto(target, body.type_of(value)))
        out_names = {o.name for o in outputs}
        return helper.make_graph(writer.nodes, body.name, [value_info_proto(names[n.output(0)], n.output_types[0])
                                                           for n in formal], outputs,
                                 value_info=[v for v in value_info if v.name not in out_names],
                                 doc_string=body.doc or None)

    def identity(self, source: str, target: str, *, named: bool) -> None:
        self.nodes.append(helper.make_node("Identity", [source], [target], doc_string=OUTPUT_ALIAS_DOC,
                                           name=self.fresh(f"{target}_output") if named else None))
        self.ops.add("Identity")


def _needs_identity(graph: Graph, value: Value, name: str, seen: set[Value]) -> bool:
    """An output needs its own Identity when its name is not its value's name. NOTE: a value already out under
    another name needs none under its own (an Identity there would define that name twice), whatever ``seen``."""
    return graph.value_name(value) != name


def to_onnx(graph: Graph) -> onnx.ModelProto:
    """A ModelProto for ``graph`` that onnx.checker accepts and onnxruntime runs."""
    functions: dict[str, onnx.FunctionProto] = {}
    ops: set[str] = set()
    writer = _Writer(graph, functions, ops)
    initializers: list[onnx.TensorProto] = []
    value_info: list[onnx.ValueInfoProto] = []
    for node in graph.nodes():
        if _is(node, "Input"):
            continue
        if _is(node, "Constant"):
            initializers.append(array_to_tensor(node.attrs["value"], node.output_names[0]))
            continue
        writer.add(node, named=True)
        value_info.extend(value_info_proto(n, t) for n, t in zip(node.output_names, node.output_types))
    outputs, seen = [], set()
    for value, name in graph.outputs:
        if _needs_identity(graph, value, name, seen):
            writer.identity(graph.value_name(value), name, named=True)
        seen.add(value)
        outputs.append(value_info_proto(name, graph.type_of(value)))
    out_names = {o.name for o in outputs}
    inputs = [value_info_proto(n.name, n.output_types[0]) for n in graph.inputs]
    value_info = [v for v in value_info if v.name not in out_names]
    gp = helper.make_graph(writer.nodes, graph.name, inputs, outputs, initializer=initializers,
                           value_info=value_info, doc_string=graph.doc or None)
    attrs: dict[str, set[str]] = {}
    for node in gp.node:
        if node.domain in ("", "ai.onnx"):
            attrs.setdefault(node.op_type, set()).update(a.name for a in node.attribute)
    opset = export_opset(graph.opset.get("", DEFAULT_OPSET), ops, attrs)
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in sorted(graph.opset.items()) if d not in ("", TLC_DOMAIN)]
    if functions:
        opsets.append(helper.make_opsetid(TLC_DOMAIN, 1))
    opsets += _missing_domain_opsets(gp, {o.domain for o in opsets})
    model = helper.make_model(gp, opset_imports=opsets, producer_name=graph.producer_name or "tlc",
                              producer_version=graph.producer_version or "", functions=list(functions.values()))
    model.ir_version = max(EXPORT_IR_VERSION, helper.find_min_ir_version_for(opsets[:1], ignore_unknown=True))
    for fn in functions.values():
        fn.opset_import[0].version = opset  # NOTE: bodies share the model's default opset (one semantics)
    _write_metadata(graph, model)
    return model



def _missing_domain_opsets(gp: onnx.GraphProto, present: set[str]) -> list[onnx.OperatorSetIdProto]:
    """An opset import for each domain the graph's nodes (bodies included) use that ``present`` lacks (a graph
    built in Python with ops of an ONNX side domain or a custom one): ONNX's newest version of a domain it
    knows, else 1."""
    used: set[str] = set()
    stack = [gp]
    while stack:
        for node in stack.pop().node:
            used.add(node.domain)
            for attr in node.attribute:
                stack.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs))
    out = []
    for domain in sorted(used - present - {"", "ai.onnx"}):
        versions = [s.since_version for s in defs.get_all_schemas_with_history() if s.domain == domain]
        out.append(helper.make_opsetid(domain, max(versions, default=1)))
    return out


def _write_metadata(graph: Graph, model: onnx.ModelProto) -> None:
    doc = graph.metadata.get("model_doc_string")
    if doc:
        model.doc_string = doc
    for key, value in graph.metadata.items():
        if key != "model_doc_string":
            model.metadata_props.add(key=key, value=value)


def fused_function(body: Graph, functions: dict[str, onnx.FunctionProto], ops: set[str],
                   prefix: str = FUSED_PREFIX) -> onnx.FunctionProto:
    """A model-local function in the ``tlc`` domain computing ``body`` (shared by equal bodies).

    ``prefix`` starts its name: ``Fused_`` for tlc.Fused bodies (which the importer keeps as tlc.Fused nodes);
    other prefixes name decompositions of tlc ops (``ConvNhwc_``), which the importer inlines.
    """
    name = f"{prefix}{body.structural_hash()[:12]}"
    if name in functions:
        return functions[name]
    writer = _Writer(body, functions, ops)
    for node in body.nodes():
        if _is(node, "Input"):
            continue
        if _is(node, "Constant"):
            writer.nodes.append(helper.make_node("Constant", [], list(node.output_names),
                                                 value=array_to_tensor(node.attrs["value"], node.output_names[0])))
            ops.add("Constant")
            continue
        writer.add(node, named=False)
    seen: set[Value] = set()
    for value, out_name in body.outputs:
        if _needs_identity(body, value, out_name, seen) or _is(body.node(value.node), "Input"):
            writer.identity(body.value_name(value), out_name, named=False)
        seen.add(value)
    opsets = [helper.make_opsetid("", body.opset.get("", DEFAULT_OPSET))]
    if any(n.domain == TLC_DOMAIN for n in writer.nodes):
        opsets.append(helper.make_opsetid(TLC_DOMAIN, 1))
    # NOTE: a side-domain op fused into the body (ai.onnx.ml.Binarizer) needs its domain imported by the function
    opsets += _missing_domain_opsets(helper.make_graph(writer.nodes, name, [], []), {o.domain for o in opsets})
    fn = helper.make_function(TLC_DOMAIN, name, [n.name for n in body.inputs], [n for _, n in body.outputs],
                              writer.nodes, opset_imports=opsets, doc_string=body.doc or None,
                              attribute_protos=[helper.make_attribute("kind", "elementwise")])
    functions[name] = fn
    return fn


def check_exported(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise TlcError(f"internal error: the exported model fails onnx.checker: {exc}") from exc


def save_onnx(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` as an ONNX file (atomically) after checking it with onnx.checker."""
    model = to_onnx(graph)
    check_exported(model)
    atomic_write(path, lambda tmp: onnx.save(model, tmp))
