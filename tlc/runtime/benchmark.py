"""Quick comparisons of a compiled plan with the unoptimized reference executor (and onnxruntime, if present).

``tlc-opt --bench`` uses this to show what the pipeline bought. It is a smoke-level measurement: interleaved
rounds, medians and spread. The full suite with every contender is ``tools/bench.py``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import reference
from ..ir.feeds import random_feeds  # noqa: F401  (tlc-opt --bench takes it from here)
from ..ir.graph import Graph

Runner = Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]


@dataclass
class Timing:
    label: str
    samples_ms: list[float] = field(default_factory=list)
    max_abs_error: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)


#: untimed calls after each pause, then timed ones: after ~50 ms idle, a 2-core VM's sleeping vCPU takes up to
#: ~2 ms to wake the first parallel region of a run, and data untouched for ~0.1 s is slow for the next passes
#: (FACTS.md); steady-state latency is what follows
WARM_CALLS = 2
TIMED_CALLS = 3


def compare(contenders: dict[str, Runner], feeds: Mapping[str, np.ndarray], *, rounds: int = 10,
            budget_s: float = 10.0, pause_s: float = 0.15) -> list[Timing]:
    """Time contenders round-robin: per round and contender, a pause (other contenders' BLAS threads spin
    ~0.13 s after a call), ``WARM_CALLS`` untimed calls, then ``TIMED_CALLS`` timed ones. The first contender
    is the baseline whose outputs the others are compared with. A contender slower than ``budget_s`` in total
    stops early."""
    baseline = None
    timings = []
    for label, run in contenders.items():
        outputs = run(feeds)
        baseline = outputs if baseline is None else baseline
        err = max((float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                   for a, b in zip(outputs, baseline) if a.size and a.dtype.kind in "fiub"), default=0.0)
        timings.append(Timing(label, max_abs_error=err))
    spent = dict.fromkeys(contenders, 0.0)
    for r in range(rounds):
        for timing, (label, run) in zip(timings, contenders.items()):
            if r >= 3 and spent[label] > budget_s:
                continue
            time.sleep(pause_s)
            for _ in range(WARM_CALLS):
                run(feeds)
            for _ in range(TIMED_CALLS):
                start = time.perf_counter()
                run(feeds)
                elapsed = time.perf_counter() - start
                spent[label] += elapsed * (1 + WARM_CALLS / TIMED_CALLS)
                timing.samples_ms.append(elapsed * 1e3)
    return timings


def reference_runner(graph: Graph) -> Runner:
    names = [n for _, n in graph.outputs]
    return lambda feeds: [reference.run(graph, feeds)[n] for n in names]


def plan_runner(plan, graph: Graph) -> Runner:
    names = [n for _, n in graph.outputs]
    return lambda feeds: [plan.run(feeds)[n] for n in names]


def onnxruntime_runner(model_bytes: bytes, threads: int | None,
                       provider: str = "CPUExecutionProvider") -> tuple[Runner, str] | None:
    """An onnxruntime session (ORT_ENABLE_ALL) on ``provider`` where the installed onnxruntime has it, else on
    its CPU provider, and the provider it runs on; None when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    if provider not in ort.get_available_providers():
        provider = "CPUExecutionProvider"
    sess = ort.InferenceSession(model_bytes, so, providers=[provider])
    return (lambda feeds: sess.run(None, dict(feeds))), provider


def format_table(timings: list[Timing]) -> str:
    base = timings[0].median
    lines = [f"{'contender':<28} {'median ms':>10} {'min':>9} {'max':>9} {'speed-up':>9} {'max |err|':>10}"]
    for t in timings:
        lines.append(f"{t.label:<28} {t.median:>10.2f} {min(t.samples_ms):>9.2f} {max(t.samples_ms):>9.2f} "
                     f"{base / t.median:>8.2f}x {t.max_abs_error:>10.2e}")
    return "\n".join(lines)
