"""Row forms: how a last-axis reduction (``Trait.ROW_REDUCIBLE``) is computed per row by a row kernel.

An op's ``OpDef.row_form(builder, node, attrs) -> [variable per output]`` writes the op as accumulations over the
row (sum, max, min) and elementwise steps built from ``tlc.ops.expr``, through the ``RowBuilder`` it is handed
(the kernel builder, ``tlc.kernels.plan.PlanBuilder``, implements it; the ops layer never imports the kernels).
Each row form lives next to its op; the helpers here are what they share: the row input and the last-axis checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ir.types import FLOAT_DTYPES, TensorType
from . import expr as E


class RowBuilder(Protocol):
    """What a row form may use of the kernel builder. Variables are names (str) of values in the kernel."""

    body: Graph                     # the group's body, typed
    var_of: dict[Value, str]        # the variable holding each body value computed so far

    def add_op(self, expr: E.Expr, args: list[str | None], dtype: str) -> str:
        """A variable holding ``expr`` (``E.arg(i)`` is ``args[i]``) computed elementwise in ``dtype``."""
        ...

    def add_reduce(self, source: str, op: str) -> str:
        """A variable holding the ``op`` ("sum", "max", "min") of ``source`` over the row (shape F[:-1] + (1,))."""
        ...

    def row_length(self, dtype: str) -> str:
        """A variable holding the row length, converted to ``dtype``."""
        ...

    def type_of(self, value: Value) -> TensorType:
        """The type of a body value (fails when its rank or dtype is not supported)."""
        ...

    def fail(self, node: Node | None, message: str) -> NoReturn:
        """Refuse the group (raises ``CompileError``), naming ``node``."""
        ...


RowForm = Callable[[RowBuilder, Node, dict[str, Any]], list[str]]
"""``(builder, node, resolved attrs) -> the variable of each output``."""


def row_input(b: RowBuilder, node: Node, float_only: bool) -> tuple[str, str, int]:
    """The variable, dtype and rank of input 0 (the rows)."""
    value = b.body.inputs_of(node)[0]
    if value is None or value not in b.var_of:
        b.fail(node, "input 0 is not a computed value")
    t = b.type_of(value)
    if not t.shape:
        b.fail(node, "a row reduction needs an input of rank >= 1")
    if float_only and t.dtype not in FLOAT_DTYPES:
        b.fail(node, f"needs a float input, got {t.dtype}")
    return b.var_of[value], t.dtype, len(t.shape)


def check_last_axis(b: RowBuilder, node: Node, axes: list[int], rank: int) -> None:
    if sorted({a % rank for a in axes}) != [rank - 1]:
        b.fail(
            node,
            f"reduces axes {axes}; only the last axis ({rank - 1} or -1) of a rank-{rank} input is "
            "supported in a row kernel",
        )


def check_reduce_axes(b: RowBuilder, node: Node, attrs: dict[str, Any], rank: int) -> None:
    """A ``Reduce*`` node (axes as an optional constant input 1) reduces the last axis only, with keepdims."""
    inputs = b.body.inputs_of(node)
    if len(inputs) > 1 and inputs[1] is not None:
        axes = b.body.const_value(inputs[1])
        if axes is None:
            b.fail(node, "the axes input is not a constant")
        axes = [int(a) for a in np.asarray(axes).ravel()]
    else:
        axes = [] if attrs.get("noop_with_empty_axes") else list(range(rank))
    if not axes:
        b.fail(node, "reduces no axis (noop_with_empty_axes)")
    check_last_axis(b, node, axes, rank)
    if not attrs.get("keepdims", 1):
        b.fail(node, "keepdims=0; row kernels keep the reduced axis (keepdims=1)")
