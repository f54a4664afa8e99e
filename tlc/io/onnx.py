"""ONNX import and export with the ``onnx`` package.

Import: any opset from 7 is converted to the IR's opset (``DEFAULT_OPSET``) with ``onnx.version_converter``,
which also carries the semantic changes (Softmax before 13, Reduce* axes becoming inputs at 18, ...);
initializers become Constant nodes; external data is read only from inside the model's folder; unknown ops are
refused all at once with their counts. Export writes a model onnx.checker accepts and onnxruntime runs
(IR version <= 10, see FACTS.md).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

from ..errors import InvalidModelError, TlcError, UnsupportedOperatorError
from ..ir.graph import DEFAULT_OPSET, TLC_DOMAIN, Graph, Value
from ..ir.types import ONNX_TYPE_CODES, TensorType, dtype_of_onnx_code
from ..ops import is_registered, lookup
from . import atomic_write

MIN_OPSET = 7
EXPORT_IR_VERSION = 10  # IR version of opset 21; onnxruntime 1.31 reads at most 13 (FACTS.md)


@dataclass
class ImportReport:
    """What importing a model found and did."""

    path: str = ""
    source_opset: int = 0
    opset: int = DEFAULT_OPSET
    nodes: int = 0
    initializers: int = 0
    parameters: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"imported {self.path or 'model'}: {self.nodes} nodes, {self.initializers} initializers, "
                 f"{self.parameters:,} parameters, opset {self.source_opset}"
                 + (f" -> {self.opset}" if self.source_opset != self.opset else "")
                 + f", {self.seconds * 1000:.0f} ms"]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# ---------------------------------------------------------------------------- reading
def read_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Parse an ONNX file; external data only from inside the model's folder."""
    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InvalidModelError(f"{str(path)!r} is not a valid ONNX model: {type(exc).__name__}: {exc}") from None
    _load_external_data(model, path.parent)
    return model


def _load_external_data(model: onnx.ModelProto, base: Path) -> None:
    base = base.resolve()
    for tensor in _all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = (base / location).resolve()
        if not location or os.path.isabs(location) or base not in target.parents:
            raise InvalidModelError(f"tensor {tensor.name!r} refers to external data {location!r} outside the "
                                    f"model's folder {str(base)!r}; refusing to read it")
        if not target.is_file():
            raise InvalidModelError(f"tensor {tensor.name!r}: external data file {location!r} not found")
        offset, length = int(info.get("offset", 0)), info.get("length")
        with open(target, "rb") as f:
            f.seek(offset)
            data = f.read(int(length)) if length is not None else f.read()
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _all_tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_tensors(attr.g)


def _default_opset(model: onnx.ModelProto) -> int:
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return op.version
    return DEFAULT_OPSET


def _unsupported(model: onnx.ModelProto) -> Counter:
    missing: Counter = Counter()
    local = {(f.domain, f.name) for f in model.functions}
    for node in model.graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if (domain, node.op_type) in local:
            continue
        if not is_registered(node.op_type, domain):
            missing[(domain, node.op_type)] += 1
    return missing


def _raise_unsupported(missing: Counter) -> None:
    listing = ", ".join(f"{d + '.' if d else ''}{op} x{n}" for (d, op), n in sorted(missing.items()))
    raise UnsupportedOperatorError(f"the model uses {len(missing)} operator(s) tlc does not support: {listing}",
                                   dict(missing))


def convert_opset(model: onnx.ModelProto, report: ImportReport) -> onnx.ModelProto:
    """Bring the model to the IR's opset; older semantics are rewritten by onnx's version converter."""
    version = _default_opset(model)
    report.source_opset = version
    if version < MIN_OPSET:
        raise InvalidModelError(f"opset {version} is too old: tlc imports opset {MIN_OPSET} and later")
    if version == DEFAULT_OPSET:
        return model
    try:
        converted = version_converter.convert_version(model, DEFAULT_OPSET)
    except Exception as exc:
        if version > DEFAULT_OPSET:
            report.warnings.append(f"opset {version} is newer than tlc's {DEFAULT_OPSET} and could not be "
                                   f"converted ({exc}); ops are read with opset-{DEFAULT_OPSET} semantics")
            return model
        raise InvalidModelError(f"could not convert the model from opset {version} to {DEFAULT_OPSET}: {exc}") from None
    report.warnings.append(f"converted from opset {version} to {DEFAULT_OPSET}")
    return converted


def tensor_to_array(tensor: onnx.TensorProto) -> np.ndarray:
    if tensor.data_type not in ONNX_TYPE_CODES.values():
        raise UnsupportedOperatorError(
            f"tensor {tensor.name!r} has element type {onnx.TensorProto.DataType.Name(tensor.data_type)}, "
            f"which tlc does not support", {})
    array = numpy_helper.to_array(tensor)
    if array.dtype.kind in "SU" or array.dtype == object:
        array = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()],
                         dtype=object).reshape(array.shape)
    return array


def _type_of(value_info: onnx.ValueInfoProto) -> TensorType:
    tt = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        raise UnsupportedOperatorError(f"value {value_info.name!r} is not a tensor (sequences, maps and "
                                       f"optionals are not supported)", {})
    dtype = dtype_of_onnx_code(tt.elem_type) if tt.elem_type else "float32"
    if not tt.HasField("shape"):
        return TensorType(dtype, None)
    dims: list[Any] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorType(dtype, tuple(dims))


def _attribute(attr: onnx.AttributeProto, where: str) -> Any:
    kind = attr.type
    A = onnx.AttributeProto
    if kind == A.INT:
        return int(attr.i)
    if kind == A.FLOAT:
        return float(attr.f)
    if kind == A.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if kind == A.INTS:
        return [int(v) for v in attr.ints]
    if kind == A.FLOATS:
        return [float(v) for v in attr.floats]
    if kind == A.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if kind == A.TENSOR:
        return tensor_to_array(attr.t)
    if kind == A.SPARSE_TENSOR:
        from onnx.reference.ops.op_constant import _sparse_to_dense  # noqa: PLC0415 - rare path

        return np.asarray(_sparse_to_dense(attr.sparse_tensor))
    raise UnsupportedOperatorError(f"{where}: attribute {attr.name!r} of type {A.AttributeType.Name(kind)} is "
                                   f"not supported", {})


_CONSTANT_FORMS = {
    "value_float": lambda v: np.array(v, np.float32), "value_floats": lambda v: np.array(v, np.float32),
    "value_int": lambda v: np.array(v, np.int64), "value_ints": lambda v: np.array(v, np.int64),
    "value_string": lambda v: np.array(v, object), "value_strings": lambda v: np.array(v, object),
    "value": np.asarray, "sparse_value": np.asarray,
}


def from_onnx(model: onnx.ModelProto, *, path: str = "") -> tuple[Graph, ImportReport]:
    """Build a verified Graph from a ModelProto; returns it with an import report."""
    start = time.perf_counter()
    report = ImportReport(path=path)
    _schedule(model.graph.node, _graph_names(model.graph))  # structural errors before any conversion
    missing = _unsupported(model)
    missing_default = Counter({k: v for k, v in missing.items() if k[0] == ""})
    if missing and any(d for d, _ in missing):
        _raise_unsupported(missing)
    if not missing_default:
        model = convert_opset(model, report)
        missing = _unsupported(model)
    if missing:
        _raise_unsupported(missing)
    if model.functions:
        raise UnsupportedOperatorError("model-local functions are not supported on import "
                                       f"({', '.join(f.name for f in model.functions)})", {})
    gp = model.graph
    g = Graph(gp.name or "graph", opset={"": DEFAULT_OPSET}, doc=gp.doc_string)
    g.producer_name, g.producer_version = model.producer_name, model.producer_version
    g.metadata = {p.key: p.value for p in model.metadata_props}
    if model.doc_string:
        g.metadata.setdefault("model_doc_string", model.doc_string)
    values: dict[str, Value] = {}
    initializer_names = {t.name for t in gp.initializer}
    for vi in gp.input:
        if vi.name not in initializer_names:
            values[vi.name] = g.input(vi.name, _type_of(vi).dtype, _type_of(vi).shape)
    for tensor in gp.initializer:
        array = tensor_to_array(tensor)
        values[tensor.name] = g.constant(array, name=tensor.name)
        report.parameters += int(array.size)
    report.initializers = len(gp.initializer)
    for node in _schedule(gp.node, _graph_names(gp)):
        _add_node(g, node, values)
    for vi in gp.output:
        if vi.name not in values:
            raise InvalidModelError(f"graph output {vi.name!r} is not produced by any node")
        g.output(values[vi.name], vi.name)
    g.infer_types()
    g.verify()
    report.nodes = len(gp.node)
    report.seconds = time.perf_counter() - start
    return g, report


def _schedule(nodes, available: set[str]) -> list[onnx.NodeProto]:
    """The nodes in an order where every input is defined first; names cycles and dangling inputs.

    ONNX requires topological order already; this tolerates any order and explains what is wrong otherwise.
    """
    known = set(available)
    pending, order = list(nodes), []
    while pending:
        stuck = []
        for node in pending:
            if all(not n or n in known for n in node.input):
                order.append(node)
                known.update(o for o in node.output if o)
            else:
                stuck.append(node)
        if len(stuck) == len(pending):
            node = stuck[0]
            absent = [n for n in node.input if n and n not in known]
            produced = {o for s in stuck for o in s.output}
            what = "a cycle" if all(a in produced for a in absent) else "a dangling input"
            raise InvalidModelError(f"{what}: node {node.name!r} ({node.op_type}) reads "
                                    f"{', '.join(map(repr, absent))}, which no node, input or initializer "
                                    f"provides before it")
        pending = stuck
    return order


def _graph_names(gp: onnx.GraphProto) -> set[str]:
    return {vi.name for vi in gp.input} | {t.name for t in gp.initializer}


def _add_node(g: Graph, node: onnx.NodeProto, values: dict[str, Value]) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    where = f"node {node.name!r} ({node.op_type})"
    attrs = {a.name: _attribute(a, where) for a in node.attribute}
    for out in node.output:
        if out and out in values:
            raise InvalidModelError(f"{where}: value {out!r} is produced twice")
    if node.op_type == "Constant" and domain == "":
        if len(attrs) != 1 or next(iter(attrs)) not in _CONSTANT_FORMS:
            raise InvalidModelError(f"{where}: a Constant needs exactly one value attribute, got {sorted(attrs)}")
        (key, raw), = attrs.items()
        values[node.output[0]] = g.constant(_CONSTANT_FORMS[key](raw), name=node.output[0])
        return
    output_names = [o or g.fresh_name(f"{node.name or node.op_type}_unused{i}") for i, o in enumerate(node.output)]
    outs = g.add_node(node.op_type, [values[n] if n else None for n in node.input], domain=domain,
                      name=_node_name(g, node), output_names=output_names, infer=False, doc=node.doc_string,
                      attrs=attrs)
    outs = (outs,) if isinstance(outs, Value) else outs
    for out_name, v in zip(node.output, outs):
        if out_name:
            values[out_name] = v


def _node_name(g: Graph, node: onnx.NodeProto) -> str:
    base = node.name or (node.output[0] if node.output and node.output[0] else node.op_type)
    return g.fresh_name(base)


def import_onnx(path: str | os.PathLike) -> tuple[Graph, ImportReport]:
    """Read and import an ONNX file; returns the graph and the import report."""
    return from_onnx(read_model(path), path=str(path))


def load_onnx(path: str | os.PathLike) -> Graph:
    return import_onnx(path)[0]


# ---------------------------------------------------------------------------- writing
def _attr_proto(name: str, value: Any, kind: str | None) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, array_to_tensor(value, name))
    if isinstance(value, Graph):
        raise TlcError(f"graph attribute {name!r} cannot be exported directly")
    if isinstance(value, (list, tuple)) and not value and kind in ("ints", "floats", "strings"):
        attr_type = {"ints": onnx.AttributeProto.INTS, "floats": onnx.AttributeProto.FLOATS,
                     "strings": onnx.AttributeProto.STRINGS}[kind]
        return helper.make_attribute(name, [], attr_type=attr_type)
    if kind == "float" and isinstance(value, int):
        value = float(value)
    if kind == "floats":
        value = [float(v) for v in value]
    return helper.make_attribute(name, value)


def array_to_tensor(array: np.ndarray, name: str) -> onnx.TensorProto:
    if array.dtype == object:
        tensor = helper.make_tensor(name, onnx.TensorProto.STRING, array.shape,
                                    [str(v).encode() for v in array.ravel()])
        return tensor
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def _value_info(name: str, t: TensorType | None) -> onnx.ValueInfoProto:
    if t is None:
        return helper.make_empty_tensor_value_info(name)
    shape = None if t.shape is None else [d if d is not None else None for d in t.shape]
    return helper.make_tensor_value_info(name, ONNX_TYPE_CODES[t.dtype], shape)


def to_onnx(graph: Graph) -> onnx.ModelProto:
    """A ModelProto for ``graph`` that onnx.checker accepts and onnxruntime runs."""
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    value_info: list[onnx.ValueInfoProto] = []
    functions: dict[str, onnx.FunctionProto] = {}
    vname = graph.value_name
    for node in graph.nodes():
        if node.domain == "" and node.op == "Input":
            continue
        if node.domain == "" and node.op == "Constant":
            initializers.append(array_to_tensor(node.attrs["value"], node.output_names[0]))
            continue
        ins = ["" if v is None else vname(v) for v in graph.inputs_of(node)]
        if node.domain == TLC_DOMAIN and node.op == "Fused":
            fn = _fused_function(node.attrs["body"], functions)
            nodes.append(helper.make_node(fn.name, ins, list(node.output_names), name=node.name,
                                          domain=TLC_DOMAIN, doc_string=node.doc or None))
        else:
            opdef = lookup(node.op, node.domain)
            attrs = [_attr_proto(k, v, opdef.attrs[k].kind if opdef and k in opdef.attrs else None)
                     for k, v in sorted(node.attrs.items())]
            proto = helper.make_node(node.op, ins, list(node.output_names), name=node.name,
                                     domain=node.domain or None, doc_string=node.doc or None)
            proto.attribute.extend(attrs)
            nodes.append(proto)
        value_info.extend(_value_info(n, t) for n, t in zip(node.output_names, node.output_types))
    outputs = []
    for value, name in graph.outputs:
        if vname(value) != name:
            nodes.append(helper.make_node("Identity", [vname(value)], [name], name=f"{name}_output"))
        outputs.append(_value_info(name, graph.type_of(value)))
    inputs = [_value_info(n.name, n.output_types[0]) for n in graph.inputs]
    out_names = {v.name for v in outputs}
    value_info = [v for v in value_info if v.name not in out_names]
    gp = helper.make_graph(nodes, graph.name, inputs, outputs, initializer=initializers, value_info=value_info,
                           doc_string=graph.doc or None)
    opsets = [helper.make_opsetid("", graph.opset.get("", DEFAULT_OPSET))]
    if functions:
        opsets.append(helper.make_opsetid(TLC_DOMAIN, 1))
    model = helper.make_model(gp, opset_imports=opsets, producer_name=graph.producer_name or "tlc",
                              producer_version=graph.producer_version or "", functions=list(functions.values()))
    model.ir_version = EXPORT_IR_VERSION
    doc = graph.metadata.get("model_doc_string")
    if doc:
        model.doc_string = doc
    for key, value in graph.metadata.items():
        if key != "model_doc_string":
            model.metadata_props.add(key=key, value=value)
    return model


def _fused_function(body: Graph, functions: dict[str, onnx.FunctionProto]) -> onnx.FunctionProto:
    """A model-local function in the ``tlc`` domain computing ``body`` (shared by equal bodies)."""
    name = f"Fused_{body.structural_hash()[:12]}"
    if name in functions:
        return functions[name]
    nodes = []
    for node in body.nodes():
        if node.op == "Input" and node.domain == "":
            continue
        if node.op == "Constant" and node.domain == "":
            nodes.append(helper.make_node("Constant", [], list(node.output_names),
                                          value=array_to_tensor(node.attrs["value"], node.output_names[0])))
            continue
        if node.domain == TLC_DOMAIN and node.op == "Fused":
            inner = _fused_function(node.attrs["body"], functions)
            nodes.append(helper.make_node(inner.name, [body.value_name(v) if v else "" for v in body.inputs_of(node)],
                                          list(node.output_names), domain=TLC_DOMAIN))
            continue
        opdef = lookup(node.op, node.domain)
        proto = helper.make_node(node.op, [body.value_name(v) if v else "" for v in body.inputs_of(node)],
                                 list(node.output_names), domain=node.domain or None)
        proto.attribute.extend(_attr_proto(k, v, opdef.attrs[k].kind if opdef and k in opdef.attrs else None)
                               for k, v in sorted(node.attrs.items()))
        nodes.append(proto)
    outputs = []
    for value, out_name in body.outputs:
        if body.value_name(value) != out_name or body.node(value.node).op == "Input":
            nodes.append(helper.make_node("Identity", [body.value_name(value)], [out_name]))
        outputs.append(out_name)
    fn = helper.make_function(TLC_DOMAIN, name, [n.name for n in body.inputs], outputs, nodes,
                              opset_imports=[helper.make_opsetid("", body.opset.get("", DEFAULT_OPSET))])
    functions[name] = fn
    return fn


def save_onnx(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` as an ONNX file (atomically) after checking it with onnx.checker."""
    model = to_onnx(graph)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise TlcError(f"internal error: the exported model fails onnx.checker: {exc}") from exc
    atomic_write(path, lambda tmp: onnx.save(model, tmp))
