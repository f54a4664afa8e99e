"""Writing a Graph as an ONNX model that onnx.checker accepts and onnxruntime runs.

- IR version 10 (opset 21's); onnxruntime 1.31 reads at most 13 (FACTS.md). A graph that uses an op introduced
  after opset 21 is written at the first opset that has it, with the IR version that opset needs.
- Constants become initializers; every value gets a value_info with its inferred type.
- ``tlc.Fused`` nodes become calls of model-local functions in the ``tlc`` domain (one function per distinct
  body, nested bodies as nested functions); the node's ``kind`` travels as an attribute of the call, declared by
  the function with a default. The importer turns these calls back into ``tlc.Fused`` nodes.
- Other ``tlc`` ops with an ``OpDef.decompose`` (``tlc.ConvNhwc``, ...) become calls of local functions holding
  their decomposition into ONNX ops (one per distinct body); the importer inlines those.
- Graph outputs whose name is not the name of their value (an input that is also an output under another name,
  a value output twice) get an Identity node producing the output name, marked ``OUTPUT_ALIAS_DOC``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import TlcError
from ..ir.graph import DEFAULT_OPSET, TLC_DOMAIN, Graph, Node, Value
from ..ops import lookup
from . import atomic_write
from .onnx_opset import export_opset
from .onnx_tensors import array_to_tensor, value_info_proto

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
    return [_attr_proto(k, v, opdef.attrs[k].kind if opdef and k in opdef.attrs else None)
            for k, v in sorted(node.attrs.items())]


class _Writer:
    """Collects the nodes of one graph or function body; functions and used ops are shared model-wide."""

    def __init__(self, graph: Graph, functions: dict[str, onnx.FunctionProto], ops: set[str]):
        self.graph = graph
        self.functions = functions
        self.ops = ops
        self.nodes: list[onnx.NodeProto] = []
        self.node_names = {n.name for n in graph.nodes()}

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.node_names:
            name, i = f"{base}_{i}", i + 1
        self.node_names.add(name)
        return name

    def inputs(self, node: Node) -> list[str]:
        return ["" if v is None else self.graph.value_name(v) for v in self.graph.inputs_of(node)]

    def add(self, node: Node, *, named: bool) -> None:
        name = node.name if named else None
        opdef = lookup(node.op, node.domain)
        if _is(node, "Fused", TLC_DOMAIN):
            fn = fused_function(node.attrs["body"], self.functions, self.ops)
            proto = helper.make_node(fn.name, self.inputs(node), list(node.output_names), name=name,
                                     domain=TLC_DOMAIN, doc_string=node.doc or None)
            proto.attribute.append(helper.make_attribute("kind", str(node.attrs.get("kind", "elementwise"))))
        elif node.domain == TLC_DOMAIN and opdef is not None and opdef.decompose is not None:
            # a tlc op with a decomposition: a call of a local function holding it (the importer inlines it)
            body = opdef.decompose(self.graph, node)
            fn = fused_function(body, self.functions, self.ops, prefix=f"{node.op}_")
            proto = helper.make_node(fn.name, self.inputs(node), list(node.output_names), name=name,
                                     domain=TLC_DOMAIN, doc_string=node.doc or None)
        else:
            proto = helper.make_node(node.op, self.inputs(node), list(node.output_names), name=name,
                                     domain=node.domain or None, doc_string=node.doc or None)
            proto.attribute.extend(_node_attrs(node))
            if node.domain == "":
                self.ops.add(node.op)
        self.nodes.append(proto)

    def identity(self, source: str, target: str, *, named: bool) -> None:
        self.nodes.append(helper.make_node("Identity", [source], [target], doc_string=OUTPUT_ALIAS_DOC,
                                           name=self.fresh(f"{target}_output") if named else None))
        self.ops.add("Identity")


def _needs_identity(graph: Graph, value: Value, name: str, seen: set[Value]) -> bool:
    """An output needs its own Identity when its name is not its value's name, or the value is already out."""
    return graph.value_name(value) != name or value in seen


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
    opset = export_opset(graph.opset.get("", DEFAULT_OPSET), ops)
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in sorted(graph.opset.items()) if d not in ("", TLC_DOMAIN)]
    if functions:
        opsets.append(helper.make_opsetid(TLC_DOMAIN, 1))
    model = helper.make_model(gp, opset_imports=opsets, producer_name=graph.producer_name or "tlc",
                              producer_version=graph.producer_version or "", functions=list(functions.values()))
    model.ir_version = max(EXPORT_IR_VERSION, helper.find_min_ir_version_for(opsets[:1], ignore_unknown=True))
    for fn in functions.values():
        fn.opset_import[0].version = opset  # NOTE: bodies share the model's default opset (one semantics)
    _write_metadata(graph, model)
    return model


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
