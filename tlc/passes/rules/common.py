"""Helpers the rule sets share: type comparisons, constant reading, axis normalisation, ONNX sentinels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir.graph import Graph, Value
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, Shape, TensorType
from ..match import Match

#: Slice ends at or beyond this (INT32_MAX, as exporters write "to the end") take the rest of an axis.
SLICE_TO_END = 2**31 - 1


def same_type_reason(graph: Graph, replaced: Value, by: Value) -> str | None:
    """A reason when ``by`` cannot stand for ``replaced``: dtypes differ or the shapes are not known equal.

    NOTE: equal symbolic dims are the same size (inference propagates symbols), unknown (None) dims are not.
    """
    a, b = graph.type_of(replaced), graph.type_of(by)
    if a is None or b is None:
        return "a type is unknown"
    if a.dtype != b.dtype:
        return f"dtype changes from {b.dtype} to {a.dtype}"
    if not shapes_known_equal(a.shape, b.shape):
        return f"shape changes from {b} to {a} (broadcasting) or is not known to be the same"
    return None


def shapes_known_equal(a: Shape | None, b: Shape | None) -> bool:
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is not None and x == y for x, y in zip(a, b))


def root_keeps_type(m: Match, x: str = "x") -> str | None:
    """The common check of identity rules: the root's output has exactly the type of capture ``x``."""
    return same_type_reason(m.graph, m.root.output(0), m[x])


def is_float(ttype: TensorType | None) -> bool:
    return ttype is not None and ttype.dtype in FLOAT_DTYPES


def is_int(ttype: TensorType | None) -> bool:
    return ttype is not None and ttype.dtype in INT_DTYPES


def scalar(array: np.ndarray) -> float:
    """The one element of a one-element array, as a Python float."""
    return float(np.asarray(array).reshape(()))


def int_list(array: np.ndarray | None) -> list[int] | None:
    return None if array is None else [int(v) for v in np.asarray(array).ravel()]


def normalize(axes: Sequence[int], rank: int) -> list[int] | None:
    """Axes mapped to [0, rank); None when one is out of range."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            return None
        out.append(a % rank)
    return out


def unidirectional_broadcast_reason(small: Shape | None, big: Shape | None) -> str | None:
    """A reason unless ``small`` broadcasts to ``big`` without growing it (ONNX unidirectional broadcast)."""
    if small is None or big is None:
        return "a shape is unknown"
    if len(small) > len(big):
        return f"rank {len(small)} is larger than {len(big)}"
    for s, b in zip(reversed(small), reversed(big)):
        if s != 1 and (s is None or s != b):
            return f"shape {list(small)} does not broadcast to {list(big)}"
    return None
