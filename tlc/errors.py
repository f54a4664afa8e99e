"""The tlc exception hierarchy: every error a user can cause has a name here.

NOTE: this module is a leaf: it imports nothing, so every layer (ir included) may raise these.
Messages say what was expected, what came, and where (node, op, pass).
"""

from __future__ import annotations


class TlcError(Exception):
    """Base of every error tlc raises on purpose."""


class InvalidModelError(TlcError):
    """A model file or graph is malformed (bad protobuf, cycle, dangling input, bad attribute)."""


class UnsupportedOperatorError(TlcError):
    """The model uses operators tlc does not implement. ``ops`` maps (domain, op) -> count."""

    def __init__(self, message: str, ops: dict[tuple[str, str], int] | None = None):
        super().__init__(message)
        self.ops = dict(ops or {})


class ValidationError(InvalidModelError):
    """The verifier found a structural or typing defect in a graph."""


class ShapeInferenceError(TlcError):
    """Type or shape inference failed for a node."""


class PassError(TlcError):
    """An optimization pass raised; names the pass and, where known, the node."""

    def __init__(self, message: str, pass_name: str = "", node: str = "", reproducer: str | None = None):
        super().__init__(message)
        self.pass_name = pass_name
        self.node = node
        self.reproducer = reproducer


class CompileError(TlcError):
    """Lowering or code generation failed."""


class InputError(TlcError):
    """Feeds given to run() do not match the model's inputs."""


class ShapeMismatchError(InputError):
    """A feed has the wrong shape."""


class DTypeMismatchError(InputError):
    """A feed has the wrong element type."""


class ExecutionError(TlcError):
    """An operator failed while running (names the node, op and the shapes it got)."""


class BatchError(TlcError):
    """``run_batches`` cannot batch this model or was asked for a batch it cannot make: an input or output without
    a leading batch axis, inputs that disagree on the batch dim, a ``batch_size`` the model rules out."""


class BackendError(TlcError):
    """A target backend (Numba CPU, CUDA) is unavailable or failed at run time."""


class ChunkError(TlcError):
    """One chunk of a ``tlc.dask`` run was bad or failed: ``chunk`` (its block index along the batch axis),
    ``rows`` (start, stop), ``reason`` ("dtype", "shape", "nan" or "run") and ``name`` (the input or output)."""

    def __init__(self, message: str, chunk: int = -1, rows: tuple[int, int] = (0, 0), reason: str = "",
                 name: str = ""):
        super().__init__(message)
        self.chunk = chunk
        self.rows = tuple(rows)
        self.reason = reason
        self.name = name

    def __reduce__(self):  # NOTE: crosses processes (Dask workers); the default would drop the fields
        return (type(self), (str(self), self.chunk, self.rows, self.reason, self.name))


__all__ = [
    "TlcError",
    "InvalidModelError",
    "UnsupportedOperatorError",
    "ValidationError",
    "ShapeInferenceError",
    "PassError",
    "CompileError",
    "InputError",
    "ShapeMismatchError",
    "DTypeMismatchError",
    "ExecutionError",
    "BatchError",
    "BackendError",
    "ChunkError",
]
