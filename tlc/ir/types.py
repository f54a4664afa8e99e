"""Value types: an element type (dtype) and a shape whose dims are ints, symbols or unknown.

A dtype is named by its numpy name ("float32", "int64", "bool", ...); "string" holds Python strings in
object arrays. The machine-learning element types of ONNX (bfloat16, the float8 kinds, float4, float6,
int4/uint4, int2/uint2) are held in numpy with ``ml_dtypes`` under its names ("float8_e4m3fn", "int4", ...):
generated kernels do not compute in them (``ML_DTYPES``), the reference executor does. A dim is an ``int``,
a ``str`` symbol ("N") or ``None`` (unknown); a shape of ``None`` means the rank itself is unknown.

Besides tensors, a value may be a sequence of tensors (``SequenceType``: its elements may differ in shape; the
element type's shape is the merge of what is known of them all) or an optional (``OptionalType``: of a tensor or
of a sequence). At run time a sequence is a Python list of numpy arrays and an optional is None or its value.
NOTE: most of tlc computes on tensors only and reads ``graph.type_of(v)`` as a ``TensorType``; code that may meet
another value asks ``is_tensor`` and refuses by name (``non_tensor_error``) what it cannot handle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes  # noqa: F401 - registers bfloat16, float8_*, int4, ... as numpy dtypes (np.dtype("int4"))
import numpy as np

from ..errors import ValidationError

Dim = int | str | None
Shape = tuple[Dim, ...]

DTYPES: tuple[str, ...] = (
    "float16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "bool", "string",
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "int4", "uint4", "int2", "uint2",
)
#: numpy's own floats and ints: what rewrite rules and generated kernels reason about
FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES
#: the ml_dtypes element types: storage and conversion types of quantized and low-precision models. Ops that
#: accept them say so; arithmetic on them runs in the reference executor only (no kernel computes in them).
ML_FLOAT_DTYPES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                             "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"})
ML_INT_DTYPES = frozenset({"int4", "uint4", "int2", "uint2"})
ML_DTYPES = ML_FLOAT_DTYPES | ML_INT_DTYPES


def dtype_name(dtype: object) -> str:
    """The canonical dtype name for a numpy dtype, a Python/numpy type or a name."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    if isinstance(dtype, np.dtype) and dtype in _NATIVE_NAMES:
        return _NATIVE_NAMES[dtype]  # NOTE: the common case, asked for every constant; dtype.name is slow
    if dtype in (str, "str", "object") or (isinstance(dtype, np.dtype) and dtype.kind in "OUS"):
        return "string"
    try:
        name = np.dtype(dtype).name  # type: ignore[arg-type]
    except TypeError as exc:
        raise ValidationError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}") from exc
    if name not in DTYPES:
        raise ValidationError(f"unsupported dtype {name!r}; expected one of {', '.join(DTYPES)}")
    return name


_NATIVE_NAMES: dict[np.dtype, str] = {np.dtype(name): name for name in DTYPES if name != "string"}


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype that holds values of the named dtype."""
    return np.dtype(object) if name == "string" else np.dtype(name)


def _check_dim(d: object) -> Dim:
    if d is None:
        return None
    if isinstance(d, (bool, np.bool_)):
        raise ValidationError(f"a dim must be an int, a symbol or None; got {d!r}")
    if isinstance(d, (int, np.integer)):
        if d < 0:
            raise ValidationError(f"a dim must be >= 0; got {d}")
        return int(d)
    if isinstance(d, str) and d:
        return d
    raise ValidationError(f"a dim must be an int, a symbol or None; got {d!r}")


@dataclass(frozen=True, slots=True)
class TensorType:
    """The type of one value: dtype plus shape (``None`` shape = unknown rank)."""

    dtype: str
    shape: Shape | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(_check_dim(d) for d in self.shape))

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dim is a known int."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        """Number of elements, or None when the shape is not static."""
        if not self.is_static:
            return None
        return math.prod(self.shape)

    def with_shape(self, shape: Shape | None) -> TensorType:
        return TensorType(self.dtype, shape)

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(dtype, self.shape)

    def matches(self, array: np.ndarray) -> bool:
        """True when ``array`` has this dtype and fits this shape (symbols and None match any size)."""
        if dtype_name(array.dtype) != self.dtype:
            return False
        if self.shape is None:
            return True
        if array.ndim != len(self.shape):
            return False
        return all(not isinstance(d, int) or d == n for d, n in zip(self.shape, array.shape))

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype}[*]"
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(dtype_name(array.dtype), tuple(array.shape))


class _NotATensor:
    """What sequence and optional types answer to code that reads them as tensors: a TypeError that says so (the
    registry's inference names the node around it; the pass manager the pass), not an AttributeError."""

    __slots__ = ()

    def _refuse(self, what: str):
        raise TypeError(non_tensor_error(self, f"code that reads a tensor's {what}"))

    dtype = property(lambda self: self._refuse("dtype"))
    shape = property(lambda self: self._refuse("shape"))
    rank = property(lambda self: self._refuse("rank"))
    is_static = property(lambda self: self._refuse("shape"))
    numel = property(lambda self: self._refuse("size"))


@dataclass(frozen=True, slots=True)
class SequenceType(_NotATensor):
    """A sequence of tensors of one dtype; ``elem`` is what all its elements satisfy (dims that differ are None)."""

    elem: TensorType

    def __post_init__(self) -> None:
        if not isinstance(self.elem, TensorType):
            raise ValidationError(f"a sequence holds tensors; got an element type {self.elem!r}")

    kind = "sequence"

    def matches(self, value: object) -> bool:
        """True when ``value`` is a list of arrays that each fit the element type."""
        return isinstance(value, list) and all(isinstance(a, np.ndarray) and self.elem.matches(a) for a in value)

    def __str__(self) -> str:
        return f"seq<{self.elem}>"


@dataclass(frozen=True, slots=True)
class OptionalType(_NotATensor):
    """A value that is absent (None at run time) or present: a tensor or a sequence of tensors."""

    elem: TensorType | SequenceType

    def __post_init__(self) -> None:
        if not isinstance(self.elem, (TensorType, SequenceType)):
            raise ValidationError(f"an optional holds a tensor or a sequence; got {self.elem!r}")

    kind = "optional"

    def matches(self, value: object) -> bool:
        """True when ``value`` is None or fits the element type."""
        if value is None:
            return True
        if isinstance(self.elem, TensorType):
            return isinstance(value, np.ndarray) and self.elem.matches(value)
        return self.elem.matches(value)

    def __str__(self) -> str:
        return f"opt<{self.elem}>"


ValueType = TensorType | SequenceType | OptionalType


def is_tensor(t: object) -> bool:
    """True for a ``TensorType`` (and None, an untyped value, which tlc treats as a tensor of unknown type)."""
    return t is None or isinstance(t, TensorType)


def non_tensor_error(t: ValueType | None, where: str) -> str:
    """The message of a part of tlc that refuses a sequence or optional value: "sequence values are not supported
    by <where>"."""
    kind = getattr(t, "kind", "non-tensor")
    return f"{kind} values are not supported by {where} (a value of type {t})"


def merge_types(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    """The type both ``a`` and ``b`` satisfy: dims that agree stay, others become unknown (rank too); sequences and
    optionals merge their element types, and a value merged with an optional of its kind is that optional.
    ValueError when they cannot meet (dtypes or kinds differ)."""
    if a is None or b is None:
        return a if b is None else b
    if isinstance(a, OptionalType) != isinstance(b, OptionalType):  # a value may stand where its optional does
        return OptionalType(merge_types(a.elem if isinstance(a, OptionalType) else a,
                                        b.elem if isinstance(b, OptionalType) else b))
    if type(a) is not type(b):
        raise ValueError(f"value kinds differ: {a} and {b}")
    if isinstance(a, (SequenceType, OptionalType)):
        return type(a)(merge_types(a.elem, b.elem))
    if a.dtype != b.dtype:
        raise ValueError(f"element types differ: {a.dtype} and {b.dtype}")
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.dtype, None)
    return TensorType(a.dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


def format_shape(shape: Shape | None) -> str:
    if shape is None:
        return "[*]"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


#: ONNX ``TensorProto.DataType`` codes for the dtypes tlc holds. Ops such as Cast take these codes as
#: attributes (ONNX semantics), so the table lives here, below both the registry and the ONNX importer.
ONNX_TYPE_CODES: dict[str, int] = {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "string": 8,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13,
    "bfloat16": 16, "float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19, "float8_e5m2fnuz": 20,
    "uint4": 21, "int4": 22, "float4_e2m1fn": 23, "float8_e8m0fnu": 24, "uint2": 25, "int2": 26,
    "float6_e2m3fn": 27, "float6_e3m2fn": 28,
}
DTYPE_OF_ONNX_CODE: dict[int, str] = {code: name for name, code in ONNX_TYPE_CODES.items()}


def dtype_of_onnx_code(code: int) -> str:
    """The dtype name for an ONNX element-type code (ValidationError for ones tlc does not hold)."""
    try:
        return DTYPE_OF_ONNX_CODE[int(code)]
    except (KeyError, ValueError, TypeError):
        raise ValidationError(f"ONNX element type {code!r} is not supported; supported: "
                              + ", ".join(f"{c} ({n})" for n, c in ONNX_TYPE_CODES.items())) from None
