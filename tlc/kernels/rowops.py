"""Row forms of last-axis reductions, for ``"reduction"`` groups: each op becomes accumulations over the row
(sum, max, min) and elementwise steps built from ``tlc.ops.expr``, which the renderers draw like any other.

NOTE: the registry holds each op's row form (``OpDef.row_form``, next to the op; ``tlc.ops.rowform`` describes
the builder it writes through, which ``PlanBuilder`` implements). Here the plan builder only asks for it.
"""

from __future__ import annotations

from ..ir.graph import Node
from ..ops import OpDef, all_ops
from .plan import PlanBuilder


def expand_row_op(b: PlanBuilder, node: Node, opdef: OpDef) -> list[str]:
    """Append the row form of ``node`` to the plan; returns the variable of each output."""
    if opdef.row_form is None:
        supported = ", ".join(op.qualified_name for op in all_ops() if op.row_form is not None)
        b.fail(node, f"no row form for this op (supported: {supported})")
    return opdef.row_form(b, node, opdef.resolved_attrs(node))
