"""The op registry and every operator tlc knows. Importing this package registers them all."""

from . import (  # noqa: F401  (registration side effects)
    attention,
    cast,
    control,
    conv,
    elementwise,
    fused,
    image,
    index,
    layout,
    layout_ops,
    loss,
    mlops,
    nn,
    norm,
    pool,
    quant,
    random,
    recurrent,
    reduce,
    resize,
    sequence,
    signal,
    sort,
    strings,
    tensor,
    transformer,
    vision,
)
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
