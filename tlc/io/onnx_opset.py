"""Bringing a model to the IR's operator semantics (opset ``DEFAULT_OPSET``) and choosing the opset to export.

Older models (opset < 21) go through ``onnx.version_converter``, which carries the semantic changes (Softmax
before 13, Reduce* axes becoming inputs at 18, Split/Squeeze/Unsqueeze at 13, ...). Measured with onnx 1.23 on
the ONNX backend node cases of opset 1 to 20: it converts all 879, and onnx's reference evaluator computes the
expected outputs from the converted model in all 859 cases where it does so from the original. One conversion
is tlc's own: Upsample and Resize 10 become an opset-11 Resize without their asymmetric coordinate rule
(``_keep_legacy_resize`` sets it).

Newer models (opset > 21) are *not* down-converted: onnx's down adapters refuse most of them (269 of the 978
newer node cases fail, e.g. "No Adapter From Version 22 for GlobalMaxPool" or a type restriction), although
almost all ops changed after 21 only by accepting more element types. Instead each node is checked against the
op's schema history: an op unchanged since 21, changed only in its type constraints, or new after 21 (then the
registry defines it at its own version) is read as it is; an op whose inputs or attributes changed is read with
its opset-21 meaning only when the node uses nothing that 21 lacks (no new attribute other than at its default,
no new input, no attribute left to a default that changed). Otherwise the node is refused with
``UnsupportedOperatorError`` naming the op, the opset and what it uses (of the 978 newer node cases one is:
a SpaceToDepth with ``mode="CRD"``).
"""

from __future__ import annotations

import functools
from collections import Counter

import onnx
from onnx import defs, helper, version_converter

from ..errors import InvalidModelError, UnsupportedOperatorError
from ..ir.graph import DEFAULT_OPSET
from .onnx_tensors import tensor_to_array

#: Opsets before 7 are converted on a best-effort basis (the converter has adapters from opset 1, but old
#: models with e.g. ``consumed_inputs`` attributes are rare and little tested).
TESTED_MIN_OPSET = 7


def default_opset(model: onnx.ModelProto) -> int:
    """The model's version of the default ONNX domain (0 when it imports none)."""
    versions = [op.version for op in model.opset_import if op.domain in ("", "ai.onnx")]
    return max(versions) if versions else 0


def convert_opset(model: onnx.ModelProto, warnings: list[str]) -> onnx.ModelProto:
    """``model`` with opset-``DEFAULT_OPSET`` semantics; notes what was done in ``warnings``."""
    version = default_opset(model)
    if version in (0, DEFAULT_OPSET):
        return model
    if version > DEFAULT_OPSET:
        model = read_newer_nodes(model, version)
        warnings.append(f"opset {version} is newer than tlc's {DEFAULT_OPSET}: every op was checked to mean the "
                        f"same at both (changes after {DEFAULT_OPSET} only add element types)")
        return model
    if version < TESTED_MIN_OPSET:
        warnings.append(f"opset {version} is older than {TESTED_MIN_OPSET}; converted on a best-effort basis")
    try:
        converted = _convert_without_weights(model)
    except Exception as exc:  # the converter raises RuntimeError/ValidationError with a C++ assertion text
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidModelError(f"could not convert the model from opset {version} to {DEFAULT_OPSET}: "
                                f"{reason}") from None
    warnings.append(f"converted from opset {version} to {DEFAULT_OPSET}")
    if version < 11:
        _keep_legacy_resize(model, converted, warnings)
    return converted


#: initializers of at least this many bytes of raw data go around the converter (see ``_convert_without_weights``)
AROUND_CONVERTER_BYTES = 1 << 12


def _convert_without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``version_converter.convert_version`` of ``model`` without the raw data of its large initializers, each
    copied back into the result by name: the converter copies the whole model several times (serialized, into its
    own IR and back), and ResNet-18's 45 MB of weights took the import's peak memory from 215 to 495 MB. Its
    adapters rewrite nodes and read small constant inputs (shapes, axes, scales), which go in whole; a weight
    they would read or copy under another name (none known) shows as an initializer left without its data, and
    then the whole model is converted as it is."""
    graph = model.graph
    large = {t.name: t for t in graph.initializer if len(t.raw_data) >= AROUND_CONVERTER_BYTES}
    if not large:
        return version_converter.convert_version(model, DEFAULT_OPSET)
    light = onnx.ModelProto()
    _copy_fields(model, light, skip="graph")
    _copy_fields(graph, light.graph, skip="initializer")
    for tensor in graph.initializer:
        if tensor.name in large:   # its name, type and shape only
            light.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        else:
            light.graph.initializer.append(tensor)
    converted = version_converter.convert_version(light, DEFAULT_OPSET)
    for tensor in converted.graph.initializer:
        original = large.get(tensor.name)
        if original is not None and not tensor.raw_data and list(tensor.dims) == list(original.dims):
            tensor.CopyFrom(original)   # (in the protobuf library: no bytes object in between)
        elif _data_bytes(tensor) and not (tensor.raw_data or _typed_data(tensor)):
            return version_converter.convert_version(model, DEFAULT_OPSET)   # a weight the converter moved
    return converted


def _copy_fields(source, target, skip: str) -> None:
    """Every field set in the message ``source`` but ``skip`` copied into ``target``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):   # a repeated field
            getattr(target, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):   # a message
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _data_bytes(tensor: onnx.TensorProto) -> int:
    """The bytes a fixed-size tensor's raw data holds (0 for strings and unknown types)."""
    itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize if tensor.data_type not in (
        0, onnx.TensorProto.STRING) else 0
    count = 1
    for d in tensor.dims:
        count *= d
    return count * itemsize


def _typed_data(tensor: onnx.TensorProto) -> bool:
    return any(len(getattr(tensor, f)) for f in ("float_data", "int32_data", "int64_data", "double_data",
                                                   "uint64_data", "string_data"))


def _keep_legacy_resize(model: onnx.ModelProto, converted: onnx.ModelProto, warnings: list[str]) -> None:
    """Upsample (opset 7-9) and Resize 10 map output coordinates asymmetrically (x_in = x_out / scale); the
    converter writes an opset-11 Resize with only ``mode``, which then means half_pixel. Sets the old rule on
    those Resize nodes of ``converted`` (found by their output names). Nearest takes the floor neighbour
    (Upsample's scales are >= 1); a Resize 10 that shrinks takes the ceiling, as onnxruntime does, where its
    constant scales all shrink."""
    legacy = {n.output[0]: n for n in model.graph.node if n.op_type in ("Upsample", "Resize") and n.output}
    constants = {t.name: t for t in model.graph.initializer}
    for node in converted.graph.node:
        old = legacy.get(node.output[0]) if node.op_type == "Resize" and node.output else None
        if old is None:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if "coordinate_transformation_mode" not in attrs:
            node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
        if attrs.get("mode", b"nearest") != b"nearest" or "nearest_mode" in attrs:
            continue
        rounding = "floor"
        if old.op_type == "Resize":
            scales = constants.get(old.input[1]) if len(old.input) > 1 else None
            values = tensor_to_array(scales) if scales is not None else None  # checks shape against data
            if values is not None and values.size and (values <= 1).all() and (values < 1).any():
                rounding = "ceil"
            elif values is None or (values < 1).any():
                warnings.append(f"Resize {old.name or node.output[0]!r} (opset 10, nearest): scales not constant "
                                f"or mixed; the floor neighbour is taken (onnxruntime takes the ceiling where it "
                                f"shrinks)")
        node.attribute.append(helper.make_attribute("nearest_mode", rounding))


def read_newer_nodes(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """``model`` (opset ``version`` > 21) with opset-21 meaning: refuses (all at once) the nodes whose meaning
    differs, and drops attributes new after 21 that a node sets to their default (a copy when it drops any)."""
    refused: Counter = Counter()
    reasons: dict[str, str] = {}
    drops: dict[int, list[str]] = {}
    for index, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        num_inputs = max((k + 1 for k, name in enumerate(node.input) if name), default=0)
        reason, defaulted = _newer_use(node.op_type, version, {a.name: a for a in node.attribute}, num_inputs)
        if reason:
            refused[("", node.op_type)] += 1
            reasons.setdefault(node.op_type, reason)
        elif defaulted:
            drops[index] = defaulted
    if refused:
        listing = "; ".join(f"{op} x{refused[('', op)]}: {why}" for op, why in sorted(reasons.items()))
        raise UnsupportedOperatorError(f"opset {version} ops whose meaning changed after opset {DEFAULT_OPSET}, "
                                       f"used in a way tlc does not support: {listing}", dict(refused))
    if not drops:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for index, names in drops.items():
        node = copy.graph.node[index]
        kept = [a for a in node.attribute if a.name not in names]
        del node.attribute[:]
        node.attribute.extend(kept)
    return copy


def _newer_use(op: str, version: int, attrs: dict[str, onnx.AttributeProto], num_inputs: int
               ) -> tuple[str, list[str]]:
    """Why this use of ``op`` at ``version`` differs from opset 21 ("" when it does not), and the attributes new
    after 21 that it sets to their default: the default is the behaviour from before the attribute existed."""
    change = _schema_change(op, version)
    if change is None:
        return "", []
    old_attrs, old_defaults, old_inputs = change
    new = defs.get_schema(op, version, "")
    added = [a for a in attrs if a not in old_attrs]
    defaulted = [a for a in added if _is_default(attrs[a], new.attributes.get(a))]
    if len(defaulted) < len(added):
        return f"attribute(s) {', '.join(sorted(set(added) - set(defaulted)))} new after opset {DEFAULT_OPSET}", []
    if old_inputs is not None and num_inputs > old_inputs:
        return f"input {old_inputs + 1} is new after opset {DEFAULT_OPSET}", []
    for name, attr in new.attributes.items():
        if name not in attrs and name in old_defaults and old_defaults[name] != attr.default_value.SerializeToString():
            return f"attribute {name!r} is left to a default that changed after opset {DEFAULT_OPSET}", []
    return "", defaulted


def _is_default(attr: onnx.AttributeProto, spec: defs.OpSchema.Attribute | None) -> bool:
    if spec is None or spec.default_value.type == onnx.AttributeProto.UNDEFINED:
        return False
    return helper.get_attribute_value(attr) == helper.get_attribute_value(spec.default_value)


@functools.cache
def _schema_change(op: str, version: int) -> tuple[frozenset[str], dict[str, bytes], int | None] | None:
    """None when ``op`` means at ``version`` what it means at opset 21 (same inputs and attributes, or an op new
    after 21); else the opset-21 attribute names, their defaults and the number of inputs (None: variadic)."""
    try:
        new = defs.get_schema(op, version, "")
    except defs.SchemaError:
        return None  # not an ONNX op: the registry check names it
    if new.since_version <= DEFAULT_OPSET:
        return None
    try:
        old = defs.get_schema(op, DEFAULT_OPSET, "")
    except defs.SchemaError:
        return None  # introduced after 21: the registry defines it at its own version
    if _signature(old) == _signature(new):
        return None
    variadic = any(i.option == defs.OpSchema.FormalParameterOption.Variadic for i in old.inputs)
    defaults = {n: a.default_value.SerializeToString() for n, a in old.attributes.items()}
    return frozenset(old.attributes), defaults, None if variadic else len(old.inputs)


def _signature(schema: defs.OpSchema) -> tuple:
    inputs = tuple((i.name, i.option) for i in schema.inputs)
    outputs = tuple((o.name, o.option) for o in schema.outputs)
    attrs = tuple(sorted((n, a.type, a.required, a.default_value.SerializeToString())
                         for n, a in schema.attributes.items()))
    return inputs, outputs, attrs


# ---------------------------------------------------------------------------- export
def export_opset(graph_opset: int, ops: set[str], attrs: dict[str, set[str]] | None = None) -> int:
    """The default-domain opset to write: the graph's, raised to where every used op exists and, for ``attrs``
    (op -> attribute names written), to where the op has those attributes (DequantizeLinear's ``output_dtype``
    is opset 23's: a graph whose other opset-23 ops were folded away must not be written at 21 with it)."""
    version = graph_opset
    for op in sorted(ops):
        try:
            defs.get_schema(op, version, "")
        except defs.SchemaError:
            try:
                first = min(s.since_version for s in defs.get_all_schemas_with_history()
                            if s.name == op and s.domain == "")
            except ValueError:
                continue  # not an ONNX op (the checker will say so)
            version = max(version, first)
    for op, names in sorted((attrs or {}).items()):
        try:
            schema = defs.get_schema(op, version, "")
        except defs.SchemaError:
            continue
        if names <= set(schema.attributes):
            continue
        later = [s.since_version for s in defs.get_all_schemas_with_history()
                 if s.name == op and s.domain == "" and s.since_version > schema.since_version
                 and names <= set(s.attributes)]
        if later:
            version = max(version, min(later))
    return version
