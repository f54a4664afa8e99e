"""Scheduling a reduction plan onto passes over each row.

In a row kernel every variable is either per element of the row or per row (a reduction result, an input
broadcast along the row, a constant). A per-element value can be computed in pass ``p`` once the per-row
values it needs exist; a reduction accumulated in pass ``p`` is ready for pass ``p + 1``. So a decomposed
layer norm takes three passes (sum x | sum (x - mean)^2 | write), a softmax three (max | sum exp, kept |
divide). A per-element value needed by a later pass is reloaded when it is an input and otherwise kept in a
per-task scratch row ("materialized"), so no transcendental is computed twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CompileError
from .layout import Layout
from .plan import KernelPlan, Reduce, ScalarOp


@dataclass
class RowSchedule:
    npasses: int
    element_pass: dict[str, int] = field(default_factory=dict)  # per-element variable -> its pass
    ready: dict[str, int] = field(default_factory=dict)  # per-row variable -> first pass that sees it
    materialized: set[str] = field(default_factory=set)  # per-element variables kept in scratch rows
    computed: list[set[str]] = field(default_factory=list)  # per pass: per-element variables computed
    reloaded: list[set[str]] = field(default_factory=list)  # per pass: materialized variables read back

    def is_element(self, var: str) -> bool:
        return var in self.element_pass


def schedule_rows(plan: KernelPlan, layout: Layout) -> RowSchedule:
    """Passes for ``plan`` under ``layout`` (whose last collapsed dim is the row)."""
    s = RowSchedule(0)
    producers: dict[str, ScalarOp | Reduce] = {step.target: step for step in plan.steps}
    for var, operand in plan.loads:
        if layout.flags[operand][-1]:
            s.element_pass[var] = 0
        else:
            s.ready[var] = 0
    for dtype in plan.row_length:
        s.ready[f"rowlen_{dtype}"] = 0
    last = 0
    for step in plan.steps:
        if isinstance(step, Reduce):
            if step.source not in s.element_pass:
                raise CompileError(
                    "cannot compile reduction group: a reduction reads a value that is broadcast along the row"
                )
            s.ready[step.target] = s.element_pass[step.source] + 1
            last = max(last, s.element_pass[step.source])
            continue
        args = [a for a in step.args if a is not None]
        passes = [s.element_pass[a] if a in s.element_pass else s.ready[a] for a in args]
        if any(a in s.element_pass for a in args):
            s.element_pass[step.target] = max(passes, default=0)
        else:
            s.ready[step.target] = max(passes, default=0)
    element_outputs = [var for _, var in plan.stores if var in s.element_pass]
    if element_outputs or any(isinstance(step, Reduce) for step in plan.steps):
        last = max([last] + [s.element_pass[v] for v in element_outputs])
        s.npasses = last + 1
    _assign_passes(s, plan, producers, element_outputs)
    return s


def _assign_passes(s: RowSchedule, plan: KernelPlan, producers: dict, element_outputs: list[str]) -> None:
    """Fill ``computed``/``reloaded``/``materialized``, walking the passes from the last to the first."""
    loads = {var for var, _ in plan.loads}
    roots: list[set[str]] = [set() for _ in range(s.npasses)]
    for step in plan.steps:
        if isinstance(step, Reduce):
            roots[s.element_pass[step.source]].add(step.source)
    for var in element_outputs:
        roots[s.element_pass[var]].add(var)
    s.computed = [set() for _ in range(s.npasses)]
    s.reloaded = [set() for _ in range(s.npasses)]
    for p in reversed(range(s.npasses)):
        stack = list(roots[p])
        while stack:
            var = stack.pop()
            if var in s.computed[p] or var in s.reloaded[p]:
                continue
            if var not in loads and s.element_pass[var] < p:
                s.materialized.add(var)
                s.reloaded[p].add(var)
                roots[s.element_pass[var]].add(var)
                continue
            s.computed[p].add(var)
            step = producers.get(var)
            if isinstance(step, ScalarOp):
                stack.extend(a for a in step.args if a is not None and a in s.element_pass)
