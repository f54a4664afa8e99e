"""The rule sets of the ``simplify`` pass, one module each, in the order the driver tries them.

Order matters (the driver sweeps rules in this order, see ``tlc.passes.rewrite``): exact clean-ups first so
recognitions see canonical graphs, BatchNorm folding before Gemm (a Conv+BN pair must fold before BN becomes
Mul+Add), recognitions of bigger patterns before smaller, and the fast-math rewrites last so they do not
disturb the constants the recognitions look for.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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


#: rule sets added for a while by ``extra_rule_set`` (tests plant a broken rule this way), run after the others
_EXTRA: list[RuleSet] = []


def all_rules() -> list[tuple[RuleSet, Rule]]:
    """Every rule with its set, in driver order."""
    return [(rs, rule) for rs in (*RULE_SETS, *_EXTRA) for rule in rs.rules]


@contextmanager
def extra_rule_set(rule_set: RuleSet) -> Iterator[RuleSet]:
    """Let ``simplify`` run ``rule_set`` after the built-in sets while the block runs.

    For tests and experiments: a test plants a deliberately wrong rule and checks that ``tlc.passes.bisect``
    names it. Rule names must stay unique.
    """
    _EXTRA.append(rule_set)
    try:
        _check_unique()
        yield rule_set
    finally:
        _EXTRA.remove(rule_set)


def _check_unique() -> None:
    seen: set[str] = set()
    for _, rule in all_rules():
        if rule.name in seen:
            raise ValueError(f"rule name {rule.name!r} is used twice")
        seen.add(rule.name)


_check_unique()
