"""Sequence and optional values (ONNX opset-21 semantics): SequenceEmpty, SequenceConstruct, SequenceInsert,
SequenceAt, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap, Optional,
OptionalHasElement, OptionalGetElement.

At run time a sequence is a Python list of numpy arrays and an optional is None or its value
(``tlc.ir.types``). NOTE: references never change a list they are given (an insert or erase copies it), so CSE
may share one sequence between its readers. The references return a list of outputs always (a sequence is
itself a list); ``tlc.reference`` runs nodes that carry these values without ``OpDef.run_reference``'s array
conversion. None of these ops folds: a sequence or optional is never a constant.

``Optional``'s ``type`` attribute (ONNX: a TypeProto, needed when there is no input) is held as the text IR's
form of the type (``"float32[*]"``, ``"seq<int64[?]>"``); the ONNX importer and exporter convert it.
``SequenceMap`` follows the capture convention of ``tlc.ops.control``: ``SequenceMap(seq, extras..., captures...)``
with ``num_captures``; the body takes one element of the sequence, of each sequence extra (a tensor extra as it
is) and the captures, and returns one element of each output sequence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ExecutionError, ValidationError
from ..ir.graph import Graph
from ..ir.text import format_type, parse_type
from ..ir.types import OptionalType, SequenceType, TensorType, ValueType, dtype_of_onnx_code, merge_types
from .control import _output_types, num_captures
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

_TRAITS = frozenset({Trait.PURE})
_INDEX_DTYPES = ("int32", "int64")


# ---------------------------------------------------------------------------- helpers
def _seq(ctx: InferContext, i: int) -> SequenceType:
    t = ctx.type(i)
    if not isinstance(t, SequenceType):
        ctx.fail(f"input {i} must be a sequence, got {t}")
    return t


def _tensor(ctx: InferContext, i: int) -> TensorType:
    t = ctx.type(i)
    if not isinstance(t, TensorType):
        ctx.fail(f"input {i} must be a tensor, got {t}")
    return t


def _position_type(ctx: InferContext, i: int) -> None:
    if ctx.has_input(i):
        t = _tensor(ctx, i)
        if t.dtype not in _INDEX_DTYPES or t.numel not in (1, None) or (t.rank or 0) > 1:
            ctx.fail(f"the position must be one int32 or int64, got {t}")


def _merged(ctx: InferContext, a: TensorType | None, b: TensorType, what: str) -> TensorType:
    try:
        return merge_types(a, b)
    except ValueError as exc:
        ctx.fail(f"{what}: {exc}")


def _position(position: np.ndarray | None, length: int, op: str, *, inserting: bool = False) -> int | None:
    """A position in ``[-length, length - 1]`` (``[-length, length]`` when inserting) made non-negative."""
    if position is None:
        return None
    pos = np.asarray(position)
    if pos.size != 1:
        raise ExecutionError(f"{op}: the position must hold one element, got shape {list(pos.shape)}")
    p = int(pos.reshape(-1)[0])
    hi = length if inserting else length - 1
    if not -length <= p <= hi:
        raise ExecutionError(f"{op}: position {p} is out of range for a sequence of {length} "
                             f"(allowed {-length}..{hi})")
    return p + length if p < 0 else p


def _as_sequence(value: Any, op: str) -> list[np.ndarray]:
    if not isinstance(value, list):
        raise ExecutionError(f"{op}: expected a sequence (a list of arrays), got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------- SequenceEmpty, Construct, Insert
def _empty_infer(ctx: InferContext) -> list[ValueType]:
    try:
        dtype = dtype_of_onnx_code(ctx.attrs["dtype"])
    except ValidationError as exc:
        ctx.fail(str(exc))
    return [SequenceType(TensorType(dtype, None))]


def _empty_reference(*, dtype):
    return [[]]


register(OpDef(name="SequenceEmpty", infer=_empty_infer, reference=_empty_reference, inputs=(0, 0),
               attrs={"dtype": Attr("int", 1)}, traits=_TRAITS, cost=0,
               doc="An empty sequence of tensors of the element type ``dtype`` (an ONNX type code; float)."))


def _construct_infer(ctx: InferContext) -> list[ValueType]:
    elem = None
    for i in range(ctx.num_inputs):
        elem = _merged(ctx, elem, _tensor(ctx, i), f"input {i}")
    return [SequenceType(elem)]


register(OpDef(name="SequenceConstruct", infer=_construct_infer, reference=lambda *xs: [list(xs)],
               inputs=(1, None), traits=_TRAITS, cost=0, doc="A sequence of the input tensors, in order."))


def _insert_infer(ctx: InferContext) -> list[ValueType]:
    seq = _seq(ctx, 0)
    _position_type(ctx, 2)
    return [SequenceType(_merged(ctx, seq.elem, _tensor(ctx, 1), "the inserted tensor"))]


def _insert_reference(seq, tensor, position=None):
    seq = list(_as_sequence(seq, "SequenceInsert"))
    p = _position(position, len(seq), "SequenceInsert", inserting=True)
    seq.insert(len(seq) if p is None else p, tensor)
    return [seq]


register(OpDef(name="SequenceInsert", infer=_insert_infer, reference=_insert_reference, inputs=(2, 3),
               traits=_TRAITS, cost=0,
               doc="The sequence with the tensor inserted at ``position`` (default: appended); a new list."))


# ---------------------------------------------------------------------------- SequenceAt, Erase, Length
def _at_infer(ctx: InferContext) -> list[ValueType]:
    seq = _seq(ctx, 0)
    if not ctx.has_input(1):
        ctx.fail("the position is required")
    _position_type(ctx, 1)
    return [seq.elem]


def _at_reference(seq, position):
    seq = _as_sequence(seq, "SequenceAt")
    return [seq[_position(position, len(seq), "SequenceAt")]]


register(OpDef(name="SequenceAt", infer=_at_infer, reference=_at_reference, inputs=(2, 2), traits=_TRAITS,
               cost=0, doc="The element at ``position`` (negative counts from the back)."))


def _erase_infer(ctx: InferContext) -> list[ValueType]:
    seq = _seq(ctx, 0)
    _position_type(ctx, 1)
    return [seq]


def _erase_reference(seq, position=None):
    seq = list(_as_sequence(seq, "SequenceErase"))
    if not seq:
        raise ExecutionError("SequenceErase: the sequence is empty")
    p = _position(position, len(seq), "SequenceErase")
    del seq[-1 if p is None else p]
    return [seq]


register(OpDef(name="SequenceErase", infer=_erase_infer, reference=_erase_reference, inputs=(1, 2),
               traits=_TRAITS, cost=0, doc="The sequence without the element at ``position`` (default: the last)."))


def _length_infer(ctx: InferContext) -> list[ValueType]:
    _seq(ctx, 0)
    return [TensorType("int64", ())]


register(OpDef(name="SequenceLength", infer=_length_infer,
               reference=lambda seq: [np.array(len(_as_sequence(seq, "SequenceLength")), np.int64)],
               traits=_TRAITS, cost=0, doc="The number of elements, an int64 scalar."))


# ---------------------------------------------------------------------------- SplitToSequence, ConcatFromSequence
def _axis(axis: int, rank: int, op: str, fail) -> int:
    if not -rank <= axis < rank:
        fail(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def _split_infer(ctx: InferContext) -> list[ValueType]:
    t = _tensor(ctx, 0)
    if t.shape is None:
        return [SequenceType(TensorType(t.dtype, None))]
    axis = _axis(ctx.attrs["axis"], len(t.shape), "SplitToSequence", ctx.fail)
    shape = list(t.shape)
    if not ctx.has_input(1):
        if ctx.attrs["keepdims"]:
            shape[axis] = 1
        else:
            del shape[axis]
        return [SequenceType(TensorType(t.dtype, tuple(shape)))]
    split_t = _tensor(ctx, 1)
    if split_t.dtype not in _INDEX_DTYPES or (split_t.rank or 0) > 1:
        ctx.fail(f"split must be an int32 or int64 scalar or vector, got {split_t}")
    split = ctx.const(1)
    n = shape[axis]
    size = None
    if split is not None and split.ndim == 0 and isinstance(n, int) and int(split) > 0 and n % int(split) == 0:
        size = int(split)
    elif split is not None and split.ndim == 1 and split.size and len(set(split.tolist())) == 1:
        size = int(split[0])
    shape[axis] = size
    return [SequenceType(TensorType(t.dtype, tuple(shape)))]


def _split_reference(x, split=None, *, axis, keepdims):
    axis = _axis(axis, x.ndim, "SplitToSequence", _raise)
    n = x.shape[axis]
    if split is None:
        parts = [np.take(x, [i], axis=axis) for i in range(n)]
        return [parts if keepdims else [np.squeeze(p, axis=axis) for p in parts]]
    split = np.asarray(split)
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            raise ExecutionError(f"SplitToSequence: split must be > 0, got {size}")
        bounds = list(range(size, n, size))
    else:
        sizes = [int(s) for s in split.reshape(-1)]
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ExecutionError(f"SplitToSequence: split {sizes} does not add up to the axis length {n}")
        bounds = list(np.cumsum(sizes)[:-1])
    return [list(np.split(x, bounds, axis=axis))]


def _raise(message: str) -> None:
    raise ExecutionError(message)


register(OpDef(name="SplitToSequence", infer=_split_infer, reference=_split_reference, inputs=(1, 2),
               attrs={"axis": Attr("int", 0), "keepdims": Attr("int", 1)}, traits=_TRAITS, cost=1.0,
               doc="Splits a tensor along ``axis`` into a sequence: by ``split`` (a chunk size or sizes), else "
                   "into slices of 1 (dropped axis unless ``keepdims``)."))


def _concat_infer(ctx: InferContext) -> list[ValueType]:
    elem = _seq(ctx, 0).elem
    if elem.shape is None:
        return [TensorType(elem.dtype, None)]
    shape = list(elem.shape)
    rank = len(shape) + (1 if ctx.attrs["new_axis"] else 0)
    axis = _axis(ctx.attrs["axis"], rank, "ConcatFromSequence", ctx.fail)
    if ctx.attrs["new_axis"]:
        shape.insert(axis, None)
    else:
        shape[axis] = None
    return [TensorType(elem.dtype, tuple(shape))]


def _concat_reference(seq, *, axis, new_axis):
    seq = _as_sequence(seq, "ConcatFromSequence")
    if not seq:
        raise ExecutionError("ConcatFromSequence: the sequence is empty")
    if new_axis:
        return [np.stack(seq, axis=_axis(axis, seq[0].ndim + 1, "ConcatFromSequence", _raise))]
    return [np.concatenate(seq, axis=_axis(axis, seq[0].ndim, "ConcatFromSequence", _raise))]


register(OpDef(name="ConcatFromSequence", infer=_concat_infer, reference=_concat_reference,
               attrs={"axis": Attr("int", REQUIRED), "new_axis": Attr("int", 0)}, traits=_TRAITS, cost=1.0,
               doc="The elements concatenated along ``axis`` (stacked along a new axis when ``new_axis``)."))


# ---------------------------------------------------------------------------- SequenceMap
def _map_infer(ctx: InferContext) -> list[ValueType]:
    body: Graph = ctx.attrs["body"]
    k = num_captures(ctx.node)
    formal = ctx.num_inputs - k
    if formal < 1:
        ctx.fail(f"needs the input sequence before its {k} captures")
    _seq(ctx, 0)
    if len(body.inputs) != ctx.num_inputs:
        ctx.fail(f"the body has {len(body.inputs)} inputs, expected {ctx.num_inputs} ({formal} formal inputs "
                 f"and {k} captures)")
    result = []
    for j, t in enumerate(_output_types(ctx, body, "the body")):
        if not isinstance(t, TensorType):
            ctx.fail(f"body output {j} is {t}; each must be a tensor (one element of an output sequence)")
        result.append(SequenceType(t))
    if len(result) != ctx.node.num_outputs:
        ctx.fail(f"the body has {len(result)} outputs, the node {ctx.node.num_outputs}")
    return result


def element_types(types: list[ValueType | None]) -> list[ValueType | None]:
    """The types a SequenceMap body takes for the node's formal input types: a sequence's element type, a
    tensor's own type (used by the ONNX importer)."""
    return [t.elem if isinstance(t, SequenceType) else t for t in types]


def _map_reference(*inputs, body, num_captures, run_graph):
    formal, captures = list(inputs[: len(inputs) - num_captures]), list(inputs[len(inputs) - num_captures:])
    seqs = [x for x in formal if isinstance(x, list)]
    if not formal or not isinstance(formal[0], list):
        raise ExecutionError("SequenceMap: the first input must be a sequence")
    lengths = {len(s) for s in seqs}
    if len(lengths) != 1:
        raise ExecutionError(f"SequenceMap: the input sequences have different lengths {sorted(lengths)}")
    outputs: list[list[np.ndarray]] = [[] for _ in body.outputs]
    for i in range(len(formal[0])):
        args = [x[i] if isinstance(x, list) else x for x in formal]
        for out, value in zip(outputs, run_graph(body, args + captures)):
            out.append(np.asarray(value))
    return outputs


register(OpDef(
    name="SequenceMap", infer=_map_infer, reference=_map_reference, inputs=(1, None),
    outputs=lambda attrs, n: len(attrs["body"].outputs) if "body" in attrs else 1,
    attrs={"body": Attr("graph", REQUIRED), "num_captures": Attr("int", 0)},
    traits=frozenset({Trait.PURE, Trait.SUBGRAPH}), cost=8.0,
    doc="SequenceMap(seq, extras..., captures...): the body on each element; one output sequence per body output."))


# ---------------------------------------------------------------------------- Optional, HasElement, GetElement
def _optional_infer(ctx: InferContext) -> list[ValueType]:
    if ctx.has_input(0):
        t = ctx.type(0)
        if not isinstance(t, (TensorType, SequenceType)):
            ctx.fail(f"the input must be a tensor or a sequence, got {t}")
        return [OptionalType(t)]
    text = ctx.attrs["type"]
    if text is None:
        ctx.fail("an Optional without an input needs its 'type' attribute")
    try:
        t = parse_type(text)
    except Exception as exc:  # InvalidModelError from the parser: say which node
        ctx.fail(f"attribute 'type' {text!r} is not a type: {exc}")
    if not isinstance(t, (TensorType, SequenceType)):
        ctx.fail(f"attribute 'type' must be a tensor or sequence type, got {text!r}")
    return [OptionalType(t)]


def optional_type_text(t: TensorType | SequenceType) -> str:
    """The ``type`` attribute of an ``Optional`` node holding ``t``."""
    return format_type(t)


#: (domain, op) -> its attributes that hold a type as text (ONNX TYPE_PROTO attributes; the exporter asks here)
TYPE_ATTRS: dict[tuple[str, str], frozenset[str]] = {("", "Optional"): frozenset({"type"})}


register(OpDef(name="Optional", infer=_optional_infer, reference=lambda x=None, *, type: [x], inputs=(0, 1),
               attrs={"type": Attr("string")}, traits=_TRAITS, cost=0,
               doc="An optional holding the input, or an empty one of the attribute ``type`` (text IR form)."))


def _has_infer(ctx: InferContext) -> list[ValueType]:
    return [TensorType("bool", ())]


register(OpDef(name="OptionalHasElement", infer=_has_infer,
               reference=lambda x=None: [np.array(x is not None)], inputs=(0, 1), traits=_TRAITS, cost=0,
               doc="Whether the optional holds a value (true for a tensor or a sequence; false without input)."))


def _get_infer(ctx: InferContext) -> list[ValueType]:
    t = ctx.type(0)
    return [t.elem if isinstance(t, OptionalType) else t]


def _get_reference(x):
    if x is None:
        raise ExecutionError("OptionalGetElement: the optional is empty")
    return [x]


register(OpDef(name="OptionalGetElement", infer=_get_infer, reference=_get_reference, traits=_TRAITS, cost=0,
               doc="The value of an optional (a tensor or a sequence passes through); an empty one is an error."))
