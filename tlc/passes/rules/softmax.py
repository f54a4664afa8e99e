"""Written-out softmax -> Softmax(axis) (-O2).

``softmax``: Exp(x - ReduceMax(x, [a])) / ReduceSum(that Exp, [a]) computes what Softmax computes, step for step.
``softmax-unstable``: Exp(x) / ReduceSum(Exp(x), [a]) needs fast_math: Softmax subtracts the max first, which
changes rounding and turns the overflow of large inputs (inf / inf = nan) into finite results.
Both reductions must reduce the same single axis with keepdims.
"""

from __future__ import annotations

from ..rewrite import FLOAT, Builder, Const, Match, Op, Rule, RuleSet, Var
from .common import int_list, normalize

_KEEP = {"keepdims": 1}


def _stable() -> Op:
    x = Var("x", dtype=FLOAT)
    shifted = Op("Sub", x, Op("ReduceMax", x, Const(name="axes_max"), name="max", attrs=_KEEP))
    e = Op("Exp", shifted, name="exp")
    return Op("Div", e, Op("ReduceSum", e, Const(name="axes_sum"), name="sum", attrs=_KEEP))


def _unstable() -> Op:
    e = Op("Exp", Var("x", dtype=FLOAT), name="exp")
    return Op("Div", e, Op("ReduceSum", e, Const(name="axes_sum"), name="sum", attrs=_KEEP))


def _axis(m: Match) -> tuple[int, str | None]:
    rank = m.type("x").rank
    if rank is None:
        return 0, "the rank of x is unknown"
    axes = normalize(int_list(m.const("axes_sum")), rank)
    if axes is None or len(set(axes)) != 1:
        return 0, f"ReduceSum reduces axes {int_list(m.const('axes_sum'))}, Softmax needs exactly one"
    if "axes_max" in m and normalize(int_list(m.const("axes_max")), rank) != axes:
        return 0, f"ReduceMax reduces {int_list(m.const('axes_max'))}, ReduceSum {int_list(m.const('axes_sum'))}"
    return axes[0] - rank, None


def _check(m: Match) -> str | None:
    return _axis(m)[1]


def _rewrite(m: Match, b: Builder):
    return b.op("Softmax", m["x"], axis=_axis(m)[0])


RULES = RuleSet("softmax", (
    Rule("softmax", _stable(), _rewrite, _check, min_level=2, produces=("Softmax",),
         description="Exp(x - ReduceMax(x)) / ReduceSum(...) over one axis -> Softmax(x, axis)"),
    Rule("softmax-unstable", _unstable(), _rewrite, _check, min_level=2, fast_math=True, produces=("Softmax",),
         description="Exp(x) / ReduceSum(Exp(x)) over one axis -> Softmax(x, axis) (changes rounding/overflow)"),
), "softmax recognition")
