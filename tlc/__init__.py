"""tlc: a compiler-style graph optimizer and JIT for ONNX models.

The public API is re-exported here; see README.md.
"""

from . import _platform as _platform  # NOTE: first: picks numpy's BLAS kernels before anything loads numpy
from . import ops as ops  # registers every operator and installs the IR's op resolver
from . import reference as reference
from ._version import __version__ as __version__
from .errors import (
    BackendError,
    BatchError,
    ChunkError,
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
from .io import load, save
from .ir import Graph, Node, TensorType, Value
from .passes import PassOptions, PassResult
from .passes.manager import PassManager, optimize
from .passes.report import PassReport
from .runtime import CompileOptions, InferenceSession, Plan, PlanStats, Profile, compile

# NOTE: tlc.backend (the onnx.backend.base.Backend) is imported on its own: it pulls in onnx.backend.

__all__ = [
    "BackendError", "BatchError", "ChunkError", "CompileError", "CompileOptions", "DTypeMismatchError",
    "ExecutionError", "Graph", "InferenceSession", "InputError", "InvalidModelError", "Node", "PassError",
    "PassManager", "PassOptions", "PassReport", "PassResult", "Plan", "PlanStats", "Profile", "ShapeInferenceError",
    "ShapeMismatchError", "TensorType", "TlcError", "UnsupportedOperatorError", "ValidationError", "Value", "compile",
    "load", "optimize", "reference", "save",
]
