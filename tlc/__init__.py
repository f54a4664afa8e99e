"""tlc: a compiler-style graph optimizer and JIT for ONNX models.

The public API is re-exported here; see README.md.
"""

from . import ops as ops  # registers every operator and installs the IR's op resolver
from . import reference as reference
from .errors import (
    BackendError,
    CompileError,
    DTypeMismatchError,
    ExecutionError,
    InputError,
    InvalidModelError,
    PassError,
    ShapeInferenceError,
    ShapeMismatchError,
    TlcError,
    UnsupportedOperatorError,
    ValidationError,
)
from .ir import Graph, Node, TensorType, Value

__version__ = "0.1.0"

__all__ = [
    "BackendError", "CompileError", "DTypeMismatchError", "ExecutionError", "Graph", "InputError",
    "InvalidModelError", "Node", "PassError", "ShapeInferenceError", "ShapeMismatchError", "TensorType",
    "TlcError", "UnsupportedOperatorError", "ValidationError", "Value", "reference",
]
