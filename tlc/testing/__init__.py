"""Differential fuzzing of tlc (and of your own passes): random graphs over the whole op registry, oracles that
run each graph several ways and compare, and shrinking to a minimal reproducer.

    from tlc.testing import generate, check_case
    case = generate(seed=1)                     # a random graph with its feeds
    report = check_case(case)                   # every oracle; report.disagreements lists what differed
    small, feeds = shrink(case.graph, case.feeds, disagrees("O2-eager-t1"))   # (tlc.testing.shrink)

Hypothesis strategies are in ``tlc.testing.strategies`` (imported on its own: hypothesis is a test dependency).
"""

from .compare import compare
from .generate import Case, Chooser, RngChooser, fuzzable_ops, generate
from .oracles import ORACLES, CaseReport, Checker, Outcome, check_case
from .shrink import load_reproducer, replay, save_reproducer, shrink

__all__ = ["ORACLES", "Case", "CaseReport", "Checker", "Chooser", "Outcome", "RngChooser", "check_case", "compare",
           "fuzzable_ops", "generate", "load_reproducer", "replay", "save_reproducer", "shrink"]
