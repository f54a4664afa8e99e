"""The op registry and every operator tlc knows. Importing this package registers them all."""

from . import elementwise, fused, index, layout, nn, reduce, resize, sort, tensor  # noqa: F401  (registration side effects)
from .expr import Expr
from .registry import (
    REQUIRED,
    Attr,
    InferContext,
    OpDef,
    Trait,
    all_ops,
    get,
    is_registered,
    lookup,
    opdef_of,
    register,
)

__all__ = ["REQUIRED", "Attr", "Expr", "InferContext", "OpDef", "Trait", "all_ops", "get", "is_registered",
           "lookup", "opdef_of", "register"]
