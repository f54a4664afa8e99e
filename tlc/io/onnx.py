"""ONNX import (and, re-exported from ``onnx_export``, export) with the ``onnx`` package.

Import decisions:

- Opsets: every model is read with opset-21 semantics, see ``onnx_opset`` (older: onnx's version converter;
  newer: checked op by op, not converted).
- Initializers become Constant nodes. An initializer that is also listed as a graph input (required before IR 4;
  an overridable default since) is a constant too: tlc compiles for inference, and an overridable weight would
  block constant folding; the report warns when an IR >= 4 model does this. To feed a weight, remove its
  initializer from the model.
- Every Constant attribute form (value, value_float(s), value_int(s), value_string(s), sparse_value) becomes a
  Constant node with one ``value`` array.
- External data is read only from files inside the model's folder (``read_model``); a ModelProto given directly
  with external references is refused rather than read relative to the working directory.
- Element types: every one of ``tlc.ir.types.DTYPES``, the ml_dtypes ones (bfloat16, float8, float6, float4, int4,
  int2) included; their tensors (packed 4- and 2-bit data too) are read and written by ``onnx.numpy_helper``.
- Refusals come all at once with ``UnsupportedOperatorError``: every unknown op with its count, every element
  type tlc does not hold (complex64, complex128) and every value kind it does not (map, sparse tensor, sequences
  of sequences) with where it occurs. Sequences of tensors and optionals of tensors or sequences are imported
  (``tlc.ir.types``); Optional's ``type`` attribute becomes the text IR's form of the type.
- Model-local functions are inlined, except the ``tlc``-domain functions tlc writes for ``tlc.Fused`` nodes,
  which become ``tlc.Fused`` nodes again (so export -> import keeps fused groups).
- The Identity nodes the exporter adds to name graph outputs (marked by their doc string) are read as the
  outputs themselves, so export -> import gives the graph back; every other Identity is kept.
- Graph, model and node metadata (names, doc strings, producer, metadata_props) are kept for export.
- Control flow (If, Loop, Scan, SequenceMap): graph attributes become tlc ``Graph`` bodies, recursively. The outer
  names a body reads (at any depth) become explicit captures: trailing inputs of the node matched to trailing body
  inputs (the convention of ``tlc.ops.control``). Body inputs that declare no type or no shape take their types
  from the node's inputs (a Loop's carried value: its initial type, widened where the body changes it). Scan in
  its opset-8 form (a batch axis and ``sequence_lens``) is refused by name.
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
import onnx.inliner
from google.protobuf.descriptor import FieldDescriptor

from ..errors import InvalidModelError, ShapeInferenceError, UnsupportedOperatorError, ValidationError
from ..ir.graph import DEFAULT_OPSET, TLC_DOMAIN, Graph, Node, Value, op_resolver
from ..ir.text import format_type
from ..ir.types import SequenceType, TensorType, ValueType, is_tensor
from ..ir.verify import MAX_BODY_DEPTH, verify
from ..ops import is_registered
from ..ops.attention import flex_scores_type
from ..ops.control import CONTROL_OPS, is_control_op, merge_types
from .onnx_export import EXPORT_IR_VERSION, FUSED_PREFIX, OUTPUT_ALIAS_DOC, save_onnx, to_onnx
from .onnx_opset import convert_opset, default_opset
from .onnx_tensors import (
    array_to_tensor,
    load_external_data,
    sparse_to_array,
    tensor_to_array,
    type_from_proto,
    unsupported_types,
    value_type,
)

__all__ = ["EXPORT_IR_VERSION", "MAX_BODY_DEPTH", "ImportReport", "array_to_tensor", "from_onnx", "import_onnx",
           "load_onnx", "parse_model", "read_model", "save_onnx", "tensor_to_array", "to_onnx"]


@dataclass
class ImportReport:
    """What importing a model found and did; ``str()`` gives a readable summary."""

    path: str = ""
    producer: str = ""
    ir_version: int = 0
    source_opset: int = 0
    opset: int = DEFAULT_OPSET
    nodes: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    initializers: int = 0
    parameters: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        opset = f"opset {self.source_opset}" + (f" -> {self.opset}" if self.source_opset != self.opset else "")
        head = f"imported {self.path or 'model'}"
        if self.producer:
            head += f" (from {self.producer})"
        top = sorted(self.ops.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{op} {n}" for op, n in top[:8]) + (", ..." if len(top) > 8 else "")
        lines = [head,
                 f"  IR version {self.ir_version}, {opset}",
                 f"  {self.nodes} nodes" + (f": {shown}" if shown else ""),
                 f"  {self.initializers} initializers, {self.parameters:,} parameters",
                 f"  {self.seconds * 1000:.0f} ms"]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# ---------------------------------------------------------------------------- reading files
def read_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Parse an ONNX file; external data only from inside the model's folder."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidModelError(f"cannot read ONNX model {str(path)!r}: {exc.strerror or exc}") from None
    model = parse_model(data, repr(str(path)))
    load_external_data(model, path.parent)
    return model


def parse_model(data: bytes, source: str = "the data") -> onnx.ModelProto:
    """A ModelProto from serialized bytes, its external data left unread (``from_onnx`` refuses it then).

    Malformed bytes (truncated, bit-flipped, nested past protobuf's depth limit) raise ``InvalidModelError``."""
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError (and, in some builds, other types)
        raise InvalidModelError(f"{source} is not a valid ONNX model: {type(exc).__name__}: {exc}") from None
    return model


# ---------------------------------------------------------------------------- checks before building
def _local_function_ids(model: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(f.domain, f.name) for f in model.functions}


def _fused_function_ids(model: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(f.domain, f.name) for f in model.functions if f.domain == TLC_DOMAIN and f.name.startswith(FUSED_PREFIX)]


def _inline_other_functions(model: onnx.ModelProto, report: ImportReport) -> onnx.ModelProto:
    """Inline every model-local function except tlc's Fused bodies."""
    keep = _fused_function_ids(model)
    if len(keep) == len(model.functions):
        return model
    report.warnings.append(f"inlined {len(model.functions) - len(keep)} model-local function(s)")
    try:
        return onnx.inliner.inline_selected_functions(model, keep, exclude=True)
    except Exception as exc:
        raise InvalidModelError(f"could not inline the model's local functions: {exc}") from None


def _unregistered(model: onnx.ModelProto) -> Counter:
    missing: Counter = Counter()
    local = _local_function_ids(model)
    bodies = [model.graph.node] + [f.node for f in model.functions]
    for nodes in bodies:
        for node in _all_nodes(nodes):
            domain = "" if node.domain == "ai.onnx" else node.domain
            if (domain, node.op_type) not in local and not is_registered(node.op_type, domain):
                missing[(domain, node.op_type)] += 1
    return missing


def _subgraphs(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """The graph attributes of a node (name, graph); GRAPHS lists count as one entry each."""
    A = onnx.AttributeProto
    found = []
    for attr in node.attribute:
        if attr.type == A.GRAPH:
            found.append((attr.name, attr.g))
        elif attr.type == A.GRAPHS:
            found.extend((attr.name, g) for g in attr.graphs)
    return found


def _all_nodes(nodes, depth: int = 0):
    """``nodes`` and, recursively, the nodes of their subgraphs."""
    if depth > MAX_BODY_DEPTH:
        raise InvalidModelError(f"subgraphs are nested more than {MAX_BODY_DEPTH} levels deep")
    for node in nodes:
        yield node
        for _, g in _subgraphs(node):
            yield from _all_nodes(g.node, depth + 1)


def _free_names(gp: onnx.GraphProto, depth: int = 0) -> list[str]:
    """The names ``gp`` (or a graph nested in it) reads without defining them: its outer-scope captures, in order
    of first use."""
    if depth > MAX_BODY_DEPTH:
        raise InvalidModelError(f"subgraphs are nested more than {MAX_BODY_DEPTH} levels deep")
    defined = ({vi.name for vi in gp.input} | {t.name for t in gp.initializer}
               | {o for node in gp.node for o in node.output if o})
    found: dict[str, None] = {}
    for node in gp.node:
        for name in list(node.input) + [n for _, g in _subgraphs(node) for n in _free_names(g, depth + 1)]:
            if name and name not in defined:
                found.setdefault(name)
    for vi in gp.output:
        if vi.name not in defined:
            found.setdefault(vi.name)
    return list(found)


def _has_scan8(model: onnx.ModelProto) -> bool:
    return default_opset(model) < 9 and any(n.op_type == "Scan" and n.domain in ("", "ai.onnx")
                                            for n in _all_nodes(model.graph.node))


def _refuse(missing: Counter, types: dict[str, list[str]]) -> None:
    parts = []
    if missing:
        listing = ", ".join(f"{d + '.' if d else ''}{op} x{n}" for (d, op), n in sorted(missing.items()))
        parts.append(f"{len(missing)} operator(s) tlc does not support: {listing}")
    if types:
        listing = "; ".join(f"{kind} ({', '.join(map(repr, where[:3]))}{', ...' if len(where) > 3 else ''})"
                            for kind, where in sorted(types.items()))
        parts.append(f"{len(types)} value type(s) tlc does not support: {listing}")
    raise UnsupportedOperatorError("the model uses " + "; and ".join(parts), dict(missing))


def _check_supported(model: onnx.ModelProto, report: ImportReport) -> onnx.ModelProto:
    """Refuse unknown ops and types (all at once); then bring the model to opset 21."""
    missing, types = _unregistered(model), unsupported_types(model)
    if _has_scan8(model):
        raise UnsupportedOperatorError("the model uses Scan in its opset-8 form (batch axis and sequence_lens), "
                                       "which tlc does not support; Scan from opset 9 on is", {("", "Scan"): 1})
    # NOTE: the converter may turn an old op into a registered one (opset < 21), so missing default-domain
    # ops are final only when no conversion follows.
    if types or any(d for d, _ in missing) or (missing and default_opset(model) >= DEFAULT_OPSET):
        _refuse(missing, types)
    try:
        model = convert_opset(model, report.warnings)
    except InvalidModelError:
        if missing:  # the converter trips over ops it does not know: name them instead
            _refuse(missing, {})
        raise
    missing = _unregistered(model)
    if missing:
        _refuse(missing, {})
    return model


# ---------------------------------------------------------------------------- building the graph
def _attribute(attr: onnx.AttributeProto, where: str) -> Any:
    A = onnx.AttributeProto
    kind = attr.type
    if attr.ref_attr_name:
        raise UnsupportedOperatorError(f"{where}: attribute {attr.name!r} refers to a function attribute "
                                       f"({attr.ref_attr_name!r}); not supported", {})
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
        return sparse_to_array(attr.sparse_tensor)
    if kind == A.TYPE_PROTO:  # Optional's ``type``: held as the text IR's form of the type (tlc.ops.sequence)
        return format_type(type_from_proto(attr.tp, f"{where}, attribute {attr.name!r}", need_dtype=True))
    raise UnsupportedOperatorError(f"{where}: attribute {attr.name!r} of type {A.AttributeType.Name(kind)} is "
                                   f"not supported", {})


_CONSTANT_FORMS = {
    "value_float": lambda v: np.array(v, np.float32), "value_floats": lambda v: np.array(v, np.float32),
    "value_int": lambda v: np.array(v, np.int64), "value_ints": lambda v: np.array(v, np.int64),
    "value_string": lambda v: np.array(v, object), "value_strings": lambda v: np.array(v, object),
    "value": np.asarray, "sparse_value": np.asarray,
}
_CONSTANT_KINDS = {
    "value_float": onnx.AttributeProto.FLOAT, "value_floats": onnx.AttributeProto.FLOATS,
    "value_int": onnx.AttributeProto.INT, "value_ints": onnx.AttributeProto.INTS,
    "value_string": onnx.AttributeProto.STRING, "value_strings": onnx.AttributeProto.STRINGS,
    "value": onnx.AttributeProto.TENSOR, "sparse_value": onnx.AttributeProto.SPARSE_TENSOR,
}


class _Builder:
    """Adds ONNX nodes to one Graph (the main graph or a Fused body), tracking ONNX value names."""

    def __init__(self, graph: Graph, functions: dict[tuple[str, str], onnx.FunctionProto], nodes, outputs,
                 calls: tuple[str, ...] = ()):
        self.g = graph
        self.functions = functions
        self.values: dict[str, Value] = {}
        self.renames = _output_renames(nodes, outputs)
        self.calls = calls  # the Fused functions whose bodies are being built around this one, outermost first

    def add(self, node: onnx.NodeProto) -> None:
        g = self.g
        domain = "" if node.domain == "ai.onnx" else node.domain
        where = f"node {node.name!r} ({node.op_type})"
        if not node.output:
            raise InvalidModelError(f"{where}: a node needs at least one output, got none")
        for out in node.output:
            if out and out in self.values:
                raise InvalidModelError(f"{where}: value {out!r} is produced twice")
        if node.output and node.output[0] in self.renames:
            self.values[node.output[0]] = self.values[node.input[0]]
            return
        graphs = _subgraphs(node)
        attrs = {a.name: _attribute(a, where) for a in node.attribute
                 if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)}
        if graphs:
            self.add_control(node, domain, attrs, graphs, where)
            return
        if node.op_type == "Constant" and domain == "":
            if len(attrs) != 1 or next(iter(attrs)) not in _CONSTANT_FORMS:
                raise InvalidModelError(f"{where}: a Constant needs exactly one value attribute, got {sorted(attrs)}")
            ((key, raw),) = attrs.items()
            kind = node.attribute[0].type
            if kind != _CONSTANT_KINDS[key]:
                names = onnx.AttributeProto.AttributeType.Name
                raise InvalidModelError(f"{where}: attribute {key!r} should be of type {names(_CONSTANT_KINDS[key])}, "
                                        f"got {names(kind)}")
            self.values[node.output[0]] = g.constant(_CONSTANT_FORMS[key](raw), name=node.output[0])
            return
        inputs = [self.values[n] if n else None for n in node.input]
        output_names = [o or g.fresh_name(f"{node.name or node.op_type}_unused{i}") for i, o in enumerate(node.output)]
        name = g.fresh_name(node.name or (node.output[0] if node.output and node.output[0] else node.op_type))
        fn = self.functions.get((domain, node.op_type))
        if fn is not None:
            body = self.function_body(fn, inputs, where)
            kind = attrs.pop("kind", _function_default(fn, "kind", "elementwise"))
            if attrs:
                raise InvalidModelError(f"{where}: unexpected attribute(s) {sorted(attrs)} on a tlc.Fused call")
            outs = g.add_node("Fused", inputs, domain=TLC_DOMAIN, name=name, output_names=output_names,
                              doc=node.doc_string, attrs={"body": body, "kind": kind})
        else:  # NOTE: attrs=, not keywords: an ONNX attribute may be named like a parameter (num_outputs)
            outs = _checked(g, g.add_node(node.op_type, inputs, domain=domain, name=name, output_names=output_names,
                                          doc=node.doc_string, attrs=attrs, infer=False))
        self.define(node, outs)

    def define(self, node: onnx.NodeProto, outs: Value | tuple[Value, ...]) -> None:
        """The values of ``node``'s named outputs, for the nodes after it to read by name."""
        outs = (outs,) if isinstance(outs, Value) else outs
        for out_name, v in zip(node.output, outs):
            if out_name:
                self.values[out_name] = v

    def add_control(self, node: onnx.NodeProto, domain: str, attrs: dict[str, Any],
                    graphs: list[tuple[str, onnx.GraphProto]], where: str) -> None:
        """An If, Loop, Scan, SequenceMap or FlexAttention: bodies built first, then the node with its captures as
        trailing inputs."""
        g = self.g
        if not is_control_op(node.op_type, domain) or len({k for k, _ in graphs}) != len(graphs):
            known = ", ".join(f"{d}.{op}" if d else op for d, op in sorted(CONTROL_OPS))
            raise UnsupportedOperatorError(f"{where}: graph attributes are supported on {known} only",
                                           {(domain, node.op_type): 1})
        captures: dict[str, None] = {}
        for _, gp in graphs:
            captures.update(dict.fromkeys(_free_names(gp)))
        absent = [c for c in captures if c not in self.values]
        if absent:
            raise InvalidModelError(f"{where}: a body reads {', '.join(map(repr, absent))}, which no enclosing "
                                    f"graph defines before the node")
        formal = [self.values[n] if n else None for n in node.input]
        if node.op_type == "Loop":
            formal += [None] * (2 - len(formal))
        for key, gp in graphs:
            attrs[key] = self.body(node.op_type, gp, formal, list(captures), attrs, where)
        if captures and node.op_type != "If":
            attrs["num_captures"] = len(captures)
        inputs = formal + [self.values[c] for c in captures]
        output_names = [o or g.fresh_name(f"{node.name or node.op_type}_unused{i}") for i, o in enumerate(node.output)]
        name = g.fresh_name(node.name or (node.output[0] if node.output and node.output[0] else node.op_type))
        self.define(node, _checked(g, g.add_node(node.op_type, inputs, domain=domain, name=name,
                                                 output_names=output_names, doc=node.doc_string, attrs=attrs,
                                                 infer=False)))

    def body(self, op: str, gp: onnx.GraphProto, formal: list[Value | None], captures: list[str],
             attrs: dict[str, Any], where: str) -> Graph:
        """The tlc Graph of one body: typed formal inputs, one input per capture, its nodes and outputs.

        A Loop's carried value whose type the body does not declare in full starts with its initial type; where
        the body returns another type, the body is built again with the two merged (at most a few times).
        """
        derived = self.body_input_types(op, gp, formal, attrs, where)
        if op == "If":
            try:
                return self.build_body(gp, derived, captures, where)
            except ShapeInferenceError:
                # NOTE: a branch may not type-check for the shapes of this model when it is the branch never
                # taken (AffineGrid's 2-D branch in a 3-D model); typed for captures of unknown dims it may
                return self.build_body(gp, derived, captures, where, relaxed=True)
        for _ in range(4):
            body = self.build_body(gp, derived, captures, where)
            if op != "Loop":
                return body
            undeclared = [i for i, vi in enumerate(gp.input[2:], 2) if not _declares_shape(vi)]
            outs = [body.type_of(v) for v, _ in body.outputs]
            widened = list(derived)
            for i in undeclared:
                if i - 1 < len(outs):
                    try:
                        widened[i] = merge_types(derived[i], outs[i - 1])
                    except ValueError as exc:
                        raise InvalidModelError(f"{where}: loop-carried value {i - 2}: {exc}") from None
            if widened == derived:
                return body
            derived = widened
        raise InvalidModelError(f"{where}: the types of the loop-carried values do not settle")

    def body_input_types(self, op: str, gp: onnx.GraphProto, formal: list[Value | None], attrs: dict[str, Any],
                         where: str) -> list[ValueType]:
        """The types of a body's formal inputs: declared where they give a shape, else from the node's inputs
        (a sequence or optional: from the node's input where it is one of the same kind)."""
        def outer(v: Value | None) -> ValueType | None:
            return None if v is None else self.g.type_of(v)

        if op == "If":
            implied: list[ValueType | None] = []
        elif op == "SequenceMap":
            implied = [t.elem if isinstance(t, SequenceType) else t for t in map(outer, formal)]
        elif op == "Loop":
            implied = [TensorType("int64", ()), TensorType("bool", ())] + [outer(v) for v in formal[2:]]
        elif op == "FlexAttention":
            try:
                implied = [flex_scores_type(outer(formal[0]), outer(formal[1]), attrs.get("softmax_precision"))]
            except ValueError as exc:
                raise InvalidModelError(f"{where}: {exc}") from None
        else:
            m, given = attrs.get("num_scan_inputs", 0), attrs.get("scan_input_axes") or []
            if not (type(m) is int and 0 <= m <= len(formal) and all(type(a) is int for a in given)):
                raise InvalidModelError(f"{where}: num_scan_inputs {m!r} and scan_input_axes {given!r} do not fit "
                                        f"the node's {len(formal)} inputs")
            n = len(formal) - m
            axes = list(given) + [0] * m
            implied = [outer(v) for v in formal[:n]]
            for j, v in enumerate(formal[n:]):
                t = outer(v)
                if isinstance(t, TensorType) and t.shape is not None and t.rank:
                    shape = list(t.shape)
                    shape.pop(axes[j] % len(shape))
                    t = t.with_shape(tuple(shape))
                implied.append(t)
        if len(gp.input) != len(implied):
            raise InvalidModelError(f"{where}: body {gp.name!r} has {len(gp.input)} inputs, expected "
                                    f"{len(implied)} for the node's inputs")
        types = []
        for vi, want in zip(gp.input, implied):
            declared = value_type(vi, need_dtype=False)
            if not is_tensor(declared):
                types.append(want if want is not None and type(want) is type(declared) else declared)
            elif declared is not None and declared.shape is not None:
                types.append(declared)
            elif want is not None and (declared is None or (isinstance(want, TensorType)
                                                             and want.dtype == declared.dtype)):
                types.append(want)
            elif declared is not None:
                types.append(declared)
            else:
                raise InvalidModelError(f"{where}: body input {vi.name!r} has no type and none follows from the "
                                        f"node's inputs")
        return types

    def build_body(self, gp: onnx.GraphProto, types: list[ValueType], captures: list[str],
                   where: str, *, relaxed: bool = False) -> Graph:
        body = Graph(gp.name or "body", opset={"": DEFAULT_OPSET}, doc=gp.doc_string)
        inner = _Builder(body, self.functions, gp.node, [o.name for o in gp.output], self.calls)
        try:
            for vi, t in zip(gp.input, types):
                inner.values[vi.name] = body.input(vi.name, t)
            for name in captures:
                t = self.g.type_of(self.values[name])
                if relaxed and isinstance(t, TensorType) and t.shape is not None:
                    t = t.with_shape((None,) * len(t.shape))
                inner.values[name] = body.input(name, t)
        except ValidationError as exc:
            raise InvalidModelError(f"{where}: body {gp.name!r}: {exc}") from None
        for tensor in gp.initializer:
            if tensor.name in inner.values:
                raise InvalidModelError(f"{where}: body {gp.name!r} defines {tensor.name!r} twice")
            inner.values[tensor.name] = body.constant(tensor_to_array(tensor), name=tensor.name)
        for node in _schedule(gp.node, set(inner.values)):
            inner.add(node)
        seen: set[str] = set()
        for vi in gp.output:
            if vi.name not in inner.values:
                raise InvalidModelError(f"{where}: body output {vi.name!r} is not produced by any node")
            name = vi.name if vi.name not in seen else body.fresh_name(vi.name)
            seen.add(name)
            body.output(inner.values[vi.name], name)
        return body

    def function_body(self, fn: onnx.FunctionProto, inputs: list[Value | None], where: str) -> Graph:
        """The body Graph of a tlc Fused function, typed for this call's inputs."""
        if len(inputs) != len(fn.input) or any(v is None for v in inputs):
            raise InvalidModelError(f"{where}: calls {fn.name!r} with {sum(v is not None for v in inputs)} inputs; "
                                    f"it takes {len(fn.input)}")
        if fn.name in self.calls or len(self.calls) >= MAX_BODY_DEPTH:
            chain = " -> ".join(map(repr, self.calls + (fn.name,)))
            raise InvalidModelError(f"{where}: Fused functions call each other in a cycle or more than "
                                    f"{MAX_BODY_DEPTH} deep: {chain}")
        body = Graph(fn.name, opset={"": DEFAULT_OPSET}, doc=fn.doc_string)
        inner = _Builder(body, self.functions, fn.node, fn.output, self.calls + (fn.name,))
        for name, v in zip(fn.input, inputs):
            inner.values[name] = body.input(name, self.g.type_of(v))
        for node in _schedule(fn.node, set(fn.input)):
            inner.add(node)
        for name in fn.output:
            if name not in inner.values:
                raise InvalidModelError(f"function {fn.name!r}: output {name!r} is not produced by any node")
            body.output(inner.values[name], name)
        return body


def _checked(g: Graph, outs: Value | tuple[Value, ...]) -> Value | tuple[Value, ...]:
    """``outs`` after the registry checked their node (input count, attribute kinds) and typed it.

    The check is the verifier's, run before inference rather than after: a string where an int axis belongs is
    then refused as "attribute 'axis' should be int, got str", not as whatever inference trips over."""
    node: Node = g.node(outs if isinstance(outs, Value) else outs[0])
    resolver = op_resolver()
    if resolver is not None:
        resolver.check(g, node)
    g.infer_node(node)
    return outs


def _declares_shape(vi: onnx.ValueInfoProto) -> bool:
    return vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.HasField("shape")


def _output_renames(nodes, outputs) -> set[str]:
    """Graph outputs named by an Identity the exporter added (tlc names outputs apart from values); nothing
    else may read them."""
    consumed = {name for node in nodes for name in node.input}
    return {node.output[0] for node in nodes
            if node.op_type == "Identity" and node.doc_string == OUTPUT_ALIAS_DOC and len(node.output) == 1
            and node.input and node.input[0] and node.output[0] in set(outputs) and node.output[0] not in consumed}


def _function_default(fn: onnx.FunctionProto, name: str, fallback: Any) -> Any:
    for attr in fn.attribute_proto:
        if attr.name == name:
            return _attribute(attr, f"function {fn.name!r}")
    return fallback


def _schedule(nodes, available: set[str]) -> list[onnx.NodeProto]:
    """The nodes in an order where every input is defined first; names cycles and dangling inputs.

    ONNX requires topological order already; this tolerates any order and explains what is wrong otherwise.
    """
    known = set(available)
    pending, order = list(nodes), []
    reads = {id(node): list(node.input) + [n for _, g in _subgraphs(node) for n in _free_names(g)]
             for node in nodes}
    while pending:
        stuck = []
        for node in pending:
            if all(not n or n in known for n in reads[id(node)]):
                order.append(node)
                known.update(o for o in node.output if o)
            else:
                stuck.append(node)
        if len(stuck) == len(pending):
            node = stuck[0]
            absent = [n for n in reads[id(node)] if n and n not in known]
            produced = {o for s in stuck for o in s.output}
            what = "a cycle" if all(a in produced for a in absent) else "a dangling input"
            raise InvalidModelError(f"{what}: node {node.name!r} ({node.op_type}) reads "
                                    f"{', '.join(map(repr, absent))}, which no node, input or initializer "
                                    f"provides before it")
        pending = stuck
    return order


def _graph_names(gp: onnx.GraphProto) -> set[str]:
    return {vi.name for vi in gp.input} | {t.name for t in gp.initializer}


def _add_interface(g: Graph, builder: _Builder, gp: onnx.GraphProto, report: ImportReport) -> None:
    """Graph inputs (those without an initializer) and initializers as constants."""
    initializer_names = [t.name for t in gp.initializer]
    dupes = sorted(n for n, c in Counter(initializer_names).items() if c > 1)
    if dupes:
        raise InvalidModelError(f"initializer name(s) {', '.join(map(repr, dupes))} are used more than once")
    defaults = [vi.name for vi in gp.input if vi.name in set(initializer_names)]
    if defaults and report.ir_version >= 4:
        report.warnings.append(f"{len(defaults)} graph input(s) have an initializer (an overridable default in "
                               f"ONNX): tlc reads them as constants, e.g. {defaults[0]!r}")
    for vi in gp.input:
        if vi.name not in set(initializer_names):
            builder.values[vi.name] = g.input(vi.name, value_type(vi, need_dtype=True))
    for tensor in gp.initializer:
        array = tensor_to_array(tensor)
        builder.values[tensor.name] = g.constant(array, name=tensor.name)
        report.parameters += int(array.size)
    report.initializers = len(gp.initializer)


def _add_outputs(g: Graph, builder: _Builder, gp: onnx.GraphProto, report: ImportReport) -> None:
    for vi in gp.output:
        if vi.name not in builder.values:
            raise InvalidModelError(f"graph output {vi.name!r} is not produced by any node")
        value = builder.values[vi.name]
        g.output(value, vi.name)
        declared, inferred = value_type(vi, need_dtype=False), g.type_of(value)
        if (isinstance(declared, TensorType) and isinstance(inferred, TensorType)
                and declared.dtype != inferred.dtype):
            report.warnings.append(f"graph output {vi.name!r} is declared {declared.dtype} but computes "
                                   f"{inferred.dtype}")


def _check_strings(model: onnx.ModelProto) -> None:
    """Refuse a model with a string field that is not UTF-8.

    ONNX's messages are proto2, whose parser does not check UTF-8: a name with a stray byte reads back as
    ``bytes``, not ``str``, and would fail far from here. One walk over every message (~9 us per node)."""
    string, message = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
    stack: list = [model]
    while stack:
        msg = stack.pop()
        for desc, value in msg.ListFields():
            if desc.type == message:
                if desc.is_repeated:
                    stack.extend(value)
                else:
                    stack.append(value)
            elif desc.type == string:
                bad = next((v for v in value if type(v) is bytes), None) if desc.is_repeated else (
                    value if type(value) is bytes else None)
                if bad is not None:
                    raise InvalidModelError(f"{desc.full_name} holds {bad[:40]!r}, which is not UTF-8 text")


def from_onnx(model: onnx.ModelProto, *, path: str = "") -> tuple[Graph, ImportReport]:
    """Build a verified Graph from a ModelProto; returns it with an import report."""
    start = time.perf_counter()
    _check_strings(model)
    report = ImportReport(path=path, ir_version=model.ir_version, source_opset=default_opset(model),
                          producer=" ".join(p for p in (model.producer_name, model.producer_version) if p))
    original = model
    order = _schedule(model.graph.node, _graph_names(model.graph))  # structural errors before any conversion
    model = _inline_other_functions(model, report)
    model = _check_supported(model, report)
    gp = model.graph
    if model is not original:  # inlined or converted: other nodes
        order = _schedule(gp.node, _graph_names(gp))
    side = {o.domain: o.version for o in model.opset_import if o.domain not in ("", "ai.onnx")}
    g = Graph(gp.name or "graph", opset={**side, "": DEFAULT_OPSET}, doc=gp.doc_string)
    g.producer_name, g.producer_version = model.producer_name, model.producer_version
    g.metadata = {p.key: p.value for p in model.metadata_props}
    if model.doc_string:
        g.metadata.setdefault("model_doc_string", model.doc_string)
    builder = _Builder(g, {(f.domain, f.name): f for f in model.functions}, gp.node, [o.name for o in gp.output])
    _add_interface(g, builder, gp, report)
    for node in order:
        builder.add(node)
    _add_outputs(g, builder, gp, report)
    # NOTE: every node was typed by inference as it was added (``_checked``), so the structure is what is left
    # to verify; inferring the whole graph again would only repeat that work (a third of a large import).
    verify(g, check_types=False)
    report.nodes = len(gp.node)
    report.ops = dict(Counter(n.qualified_op for n in g.ops()))
    report.seconds = time.perf_counter() - start
    return g, report


def import_onnx(path: str | os.PathLike) -> tuple[Graph, ImportReport]:
    """Read and import an ONNX file; returns the graph and the import report."""
    return from_onnx(read_model(path), path=str(path))


def load_onnx(path: str | os.PathLike) -> Graph:
    return import_onnx(path)[0]
