"""The rule sets of the ``simplify`` pass, one module each, in the order the driver tries them.

Order matters (the driver sweeps rules in this order, see ``tlc.passes.rewrite``): exact clean-ups first so
recognitions see canonical graphs, BatchNorm folding before Gemm (a Conv+BN pair must fold before BN becomes
Mul+Add), recognitions of bigger patterns before smaller, and the fast-math rewrites last so they do not
disturb the constants the recognitions look for.
"""

from __future__ import annotations

from ..rewrite import Rule, RuleSet
from . import algebraic, arith, batchnorm, gelu, gemm, layernorm, power, qdq, softmax, transformer

RULE_SETS: tuple[RuleSet, ...] = (
    algebraic.RULES,
    power.RULES,
    batchnorm.RULES,
    qdq.RULES,
    gemm.RULES,
    layernorm.RULES,
    gelu.RULES,
    softmax.RULES,
    transformer.RULES,
    arith.RULES,
)


def all_rules() -> list[tuple[RuleSet, Rule]]:
    """Every rule with its set, in driver order."""
    return [(rs, rule) for rs in RULE_SETS for rule in rs.rules]


def _check_unique() -> None:
    seen: set[str] = set()
    for _, rule in all_rules():
        if rule.name in seen:
            raise ValueError(f"rule name {rule.name!r} is used twice")
        seen.add(rule.name)


_check_unique()
