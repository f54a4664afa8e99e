"""ONNX tensors and types <-> numpy arrays and tlc types, refusing what tlc cannot hold by name.

tlc holds the element types of ``tlc.ir.types.DTYPES`` (numpy's, and bfloat16, float8, int4 and the other
low-precision types through ml_dtypes), in tensors, sequences of tensors and optionals of either
(``tlc.ir.types``). Everything else ONNX can express (complex64, complex128; maps, sparse tensors, sequences of
sequences or of optionals) is refused with an ``UnsupportedOperatorError`` that names the type and where it
occurs, never a ValidationError from deep inside.

A model file is untrusted input (SECURITY.md): a tensor whose declared shape and data disagree (a negative dim,
10^12 elements declared over 16 bytes, a raw buffer of the wrong length, strings that are not UTF-8) is refused
with an ``InvalidModelError`` before anything of its declared size is allocated; a sparse tensor is densified
only up to ``MAX_DENSE_BYTES``; external data is read only from regular files inside the model's folder, and
only the bytes its offset and length name, after checking they lie inside the file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx.shape_inference
from onnx import helper, numpy_helper

from ..errors import InvalidModelError, UnsupportedOperatorError
from ..ir.types import DTYPE_OF_ONNX_CODE, ONNX_TYPE_CODES, OptionalType, SequenceType, TensorType, ValueType

A = onnx.AttributeProto


def element_type_name(code: int) -> str:
    """ONNX's name of an element type code, lower case ("bfloat16", "float8e4m3fn"); the number if unknown."""
    try:
        return onnx.TensorProto.DataType.Name(int(code)).lower()
    except ValueError:
        return f"element type {code}"


def is_supported_element_type(code: int) -> bool:
    return int(code) in DTYPE_OF_ONNX_CODE


def tensor_to_array(tensor: onnx.TensorProto) -> np.ndarray:
    """The numpy array of an ONNX tensor whose data is inside the proto (external data must be loaded first)."""
    if tensor.data_type not in DTYPE_OF_ONNX_CODE:
        raise UnsupportedOperatorError(f"tensor {tensor.name!r} has element type "
                                       f"{element_type_name(tensor.data_type)}, which tlc does not support", {})
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        # NOTE: numpy_helper would read the file relative to the working directory; only read_model, which
        # confines external data to the model's folder, may resolve it.
        raise InvalidModelError(f"tensor {tensor.name!r} keeps its data in an external file; import the model "
                                f"from its path (tlc.io.onnx.import_onnx) so the data is read from its folder")
    dims = _dims(tensor.dims, f"tensor {tensor.name!r}")
    try:
        # NOTE: numpy_helper builds the array from the data present and reshapes it last, so a shape that the
        # data does not fill fails here without allocating the declared size.
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, OverflowError, IndexError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidModelError(f"tensor {tensor.name!r} declares shape {dims} ({math.prod(dims)} elements of "
                                f"{element_type_name(tensor.data_type)}) but its data does not fit it: "
                                f"{type(exc).__name__}: {exc}") from None
    if array.dtype.kind in "SU" or array.dtype == object:
        array = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()],
                         dtype=object).reshape(array.shape)
    return array


#: the largest dense array a sparse tensor may become (a few hundred bytes of proto could declare terabytes)
MAX_DENSE_BYTES = 2**31


def _dims(raw_dims, where: str) -> list[int]:
    """The dims of a tensor proto as ints, refusing negative ones (numpy would read -1 as "infer this dim")."""
    dims = [int(d) for d in raw_dims]
    if any(d < 0 for d in dims):
        raise InvalidModelError(f"{where} declares shape {dims}: dims must be >= 0")
    return dims


def sparse_to_array(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """Densify a sparse tensor: indices are either linear ([NNZ]) or coordinates ([NNZ, rank])."""
    values = tensor_to_array(sparse.values)
    indices = tensor_to_array(sparse.indices).astype(np.int64) if sparse.indices.dims else np.zeros(0, np.int64)
    name = sparse.values.name
    dims = tuple(_dims(sparse.dims, f"sparse tensor {name!r}"))
    size = math.prod(dims)
    if size * values.dtype.itemsize > MAX_DENSE_BYTES:
        raise InvalidModelError(f"sparse tensor {name!r} of shape {list(dims)} would densify to "
                                f"{size * values.dtype.itemsize:,} bytes; tlc densifies at most {MAX_DENSE_BYTES:,}")
    if indices.shape[:1] != (values.size,):
        raise InvalidModelError(f"sparse tensor {name!r}: {values.size} values but indices of shape "
                                f"{list(indices.shape)}")
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 1:
        if indices.size and (indices.min() < 0 or indices.max() >= size):
            raise InvalidModelError(f"sparse tensor {sparse.values.name!r}: an index is outside shape {list(dims)}")
        dense.reshape(-1)[indices] = values.reshape(-1)
    elif indices.ndim == 2 and indices.shape[1] == len(dims):
        if indices.size and ((indices < 0).any() or (indices >= np.array(dims)).any()):
            raise InvalidModelError(f"sparse tensor {sparse.values.name!r}: an index is outside shape {list(dims)}")
        dense[tuple(indices.T)] = values.reshape(-1)
    else:
        raise InvalidModelError(f"sparse tensor {sparse.values.name!r}: indices of shape {list(indices.shape)} "
                                f"do not fit a tensor of rank {len(dims)}")
    return dense


def array_to_tensor(array: np.ndarray, name: str) -> onnx.TensorProto:
    if array.dtype == object:
        return helper.make_tensor(name, onnx.TensorProto.STRING, array.shape, [str(v).encode() for v in array.ravel()])
    # NOTE: not np.ascontiguousarray, which turns a 0-d array (a scalar) into shape [1]
    return numpy_helper.from_array(np.require(array, requirements="C"), name)


def value_type(value_info: onnx.ValueInfoProto, *, need_dtype: bool) -> ValueType | None:
    """The tlc type of a declared value; None when the element type is left open and ``need_dtype`` is False."""
    if value_info.type.WhichOneof("value") is None and not need_dtype:
        return None  # an output declared by name only
    return type_from_proto(value_info.type, value_info.name, need_dtype=need_dtype)


def type_from_proto(tp: onnx.TypeProto, name: str, *, need_dtype: bool) -> ValueType | None:
    """The tlc type of an ONNX TypeProto (a tensor, a sequence of tensors, an optional of either); ``name`` says
    whose it is in errors. None when an element type is left open and ``need_dtype`` is False."""
    kind = tp.WhichOneof("value")
    if kind == "sequence_type" or kind == "optional_type":
        inner_tp = tp.sequence_type.elem_type if kind == "sequence_type" else tp.optional_type.elem_type
        inner_kind = inner_tp.WhichOneof("value")
        allowed = ("tensor_type",) if kind == "sequence_type" else ("tensor_type", "sequence_type")
        if inner_kind is None:
            if need_dtype:
                raise InvalidModelError(f"value {name!r} declares a {_kind_name(kind)} of no element type")
            return None
        if inner_kind not in allowed:
            raise UnsupportedOperatorError(f"value {name!r} is a {_kind_name(kind)} of {_kind_name(inner_kind)}; "
                                           f"tlc supports sequences of tensors and optionals of tensors or "
                                           f"sequences", {})
        inner = type_from_proto(inner_tp, name, need_dtype=need_dtype)
        if inner is None:
            return None
        return SequenceType(inner) if kind == "sequence_type" else OptionalType(inner)
    if kind != "tensor_type":
        raise UnsupportedOperatorError(f"value {name!r} is of type {_kind_name(kind)}; tlc supports "
                                       f"tensors, sequences of tensors and optionals", {})
    tt = tp.tensor_type
    if not tt.elem_type:
        if need_dtype:
            raise InvalidModelError(f"graph input {name!r} declares no element type")
        return None
    if not is_supported_element_type(tt.elem_type):
        raise UnsupportedOperatorError(f"value {name!r} has element type "
                                       f"{element_type_name(tt.elem_type)}, which tlc does not support", {})
    dtype = DTYPE_OF_ONNX_CODE[tt.elem_type]
    if not tt.HasField("shape"):
        return TensorType(dtype, None)
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorType(dtype, tuple(dims))


def _kind_name(kind: str | None) -> str:
    """ "sequence_type" -> "sequence" (the non-tensor value kinds of ONNX's TypeProto)."""
    return (kind or "undefined").removesuffix("_type").replace("_", " ")


def type_proto(t: ValueType) -> onnx.TypeProto:
    """The ONNX TypeProto of a tlc type."""
    if isinstance(t, SequenceType):
        return helper.make_sequence_type_proto(type_proto(t.elem))
    if isinstance(t, OptionalType):
        return helper.make_optional_type_proto(type_proto(t.elem))
    return helper.make_tensor_type_proto(ONNX_TYPE_CODES[t.dtype], None if t.shape is None else list(t.shape))


def value_info_proto(name: str, t: ValueType | None) -> onnx.ValueInfoProto:
    if t is None:
        return helper.make_empty_tensor_value_info(name)
    if not isinstance(t, TensorType):
        return helper.make_value_info(name, type_proto(t))
    return helper.make_tensor_value_info(name, ONNX_TYPE_CODES[t.dtype], None if t.shape is None else list(t.shape))


# ---------------------------------------------------------------------------- external data
def load_external_data(model: onnx.ModelProto, base: Path) -> None:
    """Read every external tensor of ``model`` into the proto; only files inside ``base`` (symlinks resolved)."""
    base = base.resolve()
    for tensor in _all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        try:
            offset, length = int(info.get("offset", 0)), info.get("length")
            length = None if length is None else int(length)
        except ValueError:
            raise InvalidModelError(f"tensor {tensor.name!r}: bad external data offset/length {info}") from None
        if offset < 0 or (length is not None and length < 0):
            raise InvalidModelError(f"tensor {tensor.name!r}: negative external data offset/length {info}")
        try:
            tensor.raw_data = _read_external(tensor.name, base, info.get("location", ""), offset, length)
        except (OSError, ValueError, RuntimeError) as exc:  # a name too long, a NUL byte, a symlink loop,
            # a file that vanished or cannot be read
            raise InvalidModelError(f"tensor {tensor.name!r}: cannot read external data "
                                    f"{info.get('location', '')!r}: {exc}") from None
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _read_external(name: str, base: Path, location: str, offset: int, length: int | None) -> bytes:
    """The bytes of one external tensor: a regular file inside ``base`` (symlinks resolved first), and a range
    inside the file (checked against its size before reading, so no length can make tlc allocate more)."""
    target = (base / location).resolve()
    if not location or os.path.isabs(location) or base not in target.parents:
        raise InvalidModelError(f"tensor {name!r} refers to external data {location!r} outside the "
                                f"model's folder {str(base)!r}; refusing to read it")
    if not target.is_file():
        raise InvalidModelError(f"tensor {name!r}: external data file {location!r} not found (or not a "
                                f"regular file)")
    with open(target, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        want = size - offset if length is None else length
        if offset > size or want > size - offset:
            raise InvalidModelError(f"tensor {name!r}: external data file {location!r} has {max(size - offset, 0)} "
                                    f"bytes at offset {offset}, expected {want}")
        f.seek(offset)
        data = f.read(want)
    if len(data) != want:  # the file shrank while it was read
        raise InvalidModelError(f"tensor {name!r}: external data file {location!r} has {len(data)} bytes at "
                                f"offset {offset}, expected {want}")
    return data


def _all_tensors(model: onnx.ModelProto):
    def in_nodes(nodes):
        for node in nodes:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices
                elif attr.type == onnx.AttributeProto.GRAPH:
                    yield from attr.g.initializer
                    yield from in_nodes(attr.g.node)

    yield from model.graph.initializer
    yield from in_nodes(model.graph.node)
    for fn in model.functions:
        yield from in_nodes(fn.node)


# ---------------------------------------------------------------------------- finding unsupported types
def unsupported_types(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Every element or value type in ``model`` tlc cannot hold: type name -> the values/tensors that have it.

    Looks at declared inputs, outputs and value_info, at what onnx's shape inference derives for intermediate
    values (a Cast to bfloat16 in the middle of a graph), at initializers and at tensor attributes.
    """
    found: dict[str, list[str]] = {}

    def note(kind: str, where: str) -> None:
        places = found.setdefault(kind, [])
        if where not in places:
            places.append(where)

    for vi in _declared_values(model):
        kind = _unsupported_kind(vi.type)
        if kind is not None:
            note(kind, vi.name)
    for tensor, where in _tensors(model):
        if not is_supported_element_type(tensor.data_type):
            note(element_type_name(tensor.data_type), where)
    return found


def _unsupported_kind(tp: onnx.TypeProto) -> str | None:
    """What of ``tp`` tlc cannot hold ("map", "sequence of sequence", "bfloat4"...), or None."""
    kind = tp.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("sequence_type", "optional_type"):
        inner = tp.sequence_type.elem_type if kind == "sequence_type" else tp.optional_type.elem_type
        inner_kind = inner.WhichOneof("value")
        allowed = ("tensor_type", None) if kind == "sequence_type" else ("tensor_type", "sequence_type", None)
        if inner_kind not in allowed:
            return f"{_kind_name(kind)} of {_kind_name(inner_kind)}"
        return _unsupported_kind(inner)
    if kind != "tensor_type":
        return _kind_name(kind)
    code = tp.tensor_type.elem_type
    return element_type_name(code) if code and not is_supported_element_type(code) else None


def _declared_values(model: onnx.ModelProto) -> Iterator[onnx.ValueInfoProto]:
    gp = model.graph
    yield from gp.input
    yield from gp.output
    yield from gp.value_info
    try:
        inferred = onnx.shape_inference.infer_shapes(_without_weights(model))
    except Exception:  # an invalid model: the importer names its defects later, with its own messages
        return
    yield from inferred.graph.value_info


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its initializers turned into typed inputs: element types propagate the same, and shape
    inference does not serialize (or choke on, past 2 GB) the weights."""
    gp = model.graph
    graph = helper.make_graph(list(gp.node), gp.name, list(gp.input), list(gp.output), value_info=list(gp.value_info))
    declared = {vi.name for vi in gp.input}
    graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in gp.initializer if t.name not in declared)
    light = helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    light.ir_version = model.ir_version
    return light


def _tensors(model: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    for t in model.graph.initializer:
        yield t, t.name
    graphs = [model.graph] + [f for f in model.functions]
    for g in graphs:
        for node in g.node:
            for attr in node.attribute:
                where = f"attribute {attr.name!r} of node {node.name or node.op_type!r}"
                if attr.type == A.TENSOR:
                    yield attr.t, where
                elif attr.type == A.TENSORS:
                    for t in attr.tensors:
                        yield t, where
                elif attr.type == A.SPARSE_TENSOR:
                    yield attr.sparse_tensor.values, where
