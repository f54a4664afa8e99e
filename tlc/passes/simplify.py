"""``simplify``: apply the rewrite rule sets (identities, Pow reduction, BN folding, Gemm, LayerNorm, GELU, softmax).

At -O1 the exact simple rules run; -O2 adds the canonical rewrites and recognitions; rules that change rounding
run only with ``fast_math`` (each rule's ``min_level`` and ``fast_math`` against ``PassOptions``). Rules whose
target op is not registered are skipped. Counters per rule name go into the PassResult stats. Types are
inferred first when some are missing (a graph read from text may be untyped): rules check types.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph
from .base import Pass, PassOptions, PassResult, register_pass
from .rewrite import Rule, Tracer, apply_rules
from .rules import all_rules


@dataclass(frozen=True)
class RuleInfo:
    """One row of the rule listing (docs, ``--list-passes`` details)."""

    name: str
    rule_set: str
    min_level: int
    fast_math: bool
    available: bool
    description: str

    def __str__(self) -> str:
        flags = f"-O{self.min_level}" + (" fast-math" if self.fast_math else "")
        missing = "" if self.available else " (unavailable: target op not registered)"
        return f"{self.name:<22} {self.rule_set:<10} {flags:<14} {self.description}{missing}"


def list_rules() -> list[RuleInfo]:
    """Every rule ``simplify`` knows, in driver order, with its set, level, fast-math flag and description."""
    return [RuleInfo(r.name, rs.name, r.min_level, r.fast_math, r.available, r.description)
            for rs, r in all_rules()]


def rules_table() -> str:
    """The rule listing as aligned text lines."""
    return "\n".join(str(info) for info in list_rules())


@register_pass
class SimplifyPass(Pass):
    name = "simplify"
    min_level = 1
    description = ("rewrite rules: exact identities and Pow reduction (-O1); BN folding, MatMul+Add->Gemm, "
                   "LayerNorm/GELU/softmax recognition (-O2); rounding-changing rules with fast-math")

    def __init__(self, options: PassOptions | None = None, *, tracer: Tracer | None = None,
                 max_sweeps: int = 16):
        super().__init__(options)
        self.tracer = tracer
        self.max_sweeps = max_sweeps

    def active_rules(self) -> list[Rule]:
        """The rules this pass runs under its options, in driver order."""
        return [r for _, r in all_rules() if r.enabled(self.options) and r.available]

    def run(self, graph: Graph) -> PassResult:
        graph.infer_missing_types()  # text IR may omit types; rules check types before they fire
        outcome = apply_rules(graph, self.active_rules(), max_sweeps=self.max_sweeps, tracer=self.tracer,
                              pass_name=self.name, hook=self.options.step_hook)
        result = PassResult()
        for rule, n in outcome.counts.items():
            result.count(rule, n)
        if outcome.nodes_removed > 0:
            result.stats["nodes_removed"] = outcome.nodes_removed
        if not outcome.converged:
            result.stats["unconverged"] = 1
        return result
