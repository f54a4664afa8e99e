"""Step timings of profiled runs: a summary table, Chrome trace JSON (Perfetto) and collapsed stacks.

A profiled run (the profiling variant of the generated runner, which reads the clock around each step)
collects its events locally and hands them over once, at its end, under a lock; a ``Profile`` returned by
``Plan.profile()`` is a snapshot that later runs do not change.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plan import Plan


@dataclass(frozen=True)
class RunRecord:
    thread_id: int
    thread_name: str
    start_ns: int
    duration_ns: int
    events: tuple[tuple[int, int, int], ...]      # (step index, start ns, duration ns)


@dataclass(frozen=True)
class StepInfo:
    name: str       # node name
    label: str      # op, or tlc.Fused[kind]
    kind: str       # fused group kind, or the implementation mode (library, reference, view)
    ops: str        # the op, or a fused group's ops joined by "+"


def _step_info(plan: Plan) -> list[StepInfo]:
    """Per step: names, and its kind: a fused group's, else how it runs now (``plan.stats()``'s mode)."""
    infos = []
    modes = [s.mode for s in plan.stats().steps]
    for step, mode in zip(plan.program.steps, modes):
        attrs = step.node.attrs
        if step.label.startswith("tlc.Fused"):
            ops = "+".join(n.op for n in attrs["body"].ops())
            infos.append(StepInfo(step.node.name, step.label, f"fused-{attrs['kind']}", ops))
        else:
            infos.append(StepInfo(step.node.name, step.label, mode, step.node.op))
    return infos


class Profile:
    """The record of profiled runs of one plan."""

    def __init__(self, plan: Plan, runs: list[RunRecord] | None = None):
        self.plan = plan
        self.plan_name = plan.name
        self.runs: list[RunRecord] = list(runs or [])
        self._lock = threading.Lock()

    def record(self, start_ns: int, duration_ns: int, events: list[tuple[int, int, int]]) -> None:
        thread = threading.current_thread()
        with self._lock:
            self.runs.append(RunRecord(threading.get_ident(), thread.name, start_ns, duration_ns, tuple(events)))

    def snapshot(self, reset: bool = False) -> Profile:
        with self._lock:
            runs = list(self.runs)
            if reset:
                self.runs.clear()
        return Profile(self.plan, runs)

    # ------------------------------------------------------------------ analysis
    def step_totals(self) -> list[dict[str, Any]]:
        """Per step: name, label, kind, calls, total_ms."""
        infos = _step_info(self.plan)
        calls = [0] * len(infos)
        total = [0] * len(infos)
        for run in self.runs:
            for t, _, dur in run.events:
                calls[t] += 1
                total[t] += dur
        return [{"step": t, "name": i.name, "label": i.label, "kind": i.kind, "calls": calls[t],
                 "total_ms": total[t] / 1e6} for t, i in enumerate(infos)]

    def summary(self) -> list[dict[str, Any]]:
        """Rows per (op or group kind, implementation), sorted by total time: calls, total/mean ms, percent."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for s in self.step_totals():
            row = rows.setdefault((s["label"], s["kind"]), {"op": s["label"], "kind": s["kind"], "calls": 0,
                                                             "total_ms": 0.0})
            row["calls"] += s["calls"]
            row["total_ms"] += s["total_ms"]
        grand = sum(r["total_ms"] for r in rows.values()) or 1.0
        out = sorted(rows.values(), key=lambda r: (-r["total_ms"], r["op"]))
        for r in out:
            r["mean_ms"] = r["total_ms"] / r["calls"] if r["calls"] else 0.0
            r["percent"] = 100.0 * r["total_ms"] / grand
        return out

    def table(self) -> str:
        rows = self.summary()
        width = max([len(r["op"]) for r in rows] + [10])
        kind_width = max([len(r["kind"]) for r in rows] + [20])
        lines = [f"profile of plan {self.plan_name!r}: {len(self.runs)} run(s)",
                 f"{'op / group':<{width}}  {'kind':<{kind_width}} {'calls':>7} {'total ms':>10} {'mean ms':>9} "
                 f"{'%':>6}"]
        for r in rows:
            lines.append(f"{r['op']:<{width}}  {r['kind']:<{kind_width}} {r['calls']:>7} {r['total_ms']:>10.3f} "
                         f"{r['total_ms'] / max(r['calls'], 1):>9.4f} {r['percent']:>6.1f}")
        return "\n".join(lines)

    __str__ = table

    # ------------------------------------------------------------------ exports
    def chrome_trace(self) -> dict[str, Any]:
        """The Chrome trace-event document: one "X" event per step per run and one per run, a track per thread."""
        infos = _step_info(self.plan)
        origin = min((r.start_ns for r in self.runs), default=0)
        tids: dict[int, int] = {}
        events: list[dict[str, Any]] = []
        for run in self.runs:
            if run.thread_id not in tids:
                tids[run.thread_id] = len(tids) + 1
                events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tids[run.thread_id],
                               "args": {"name": run.thread_name}})
            tid = tids[run.thread_id]
            events.append({"name": f"run {self.plan_name}", "cat": "plan", "ph": "X", "pid": 1, "tid": tid,
                           "ts": (run.start_ns - origin) / 1e3, "dur": run.duration_ns / 1e3})
            for t, start, dur in run.events:
                info = infos[t]
                events.append({"name": info.label, "cat": info.kind, "ph": "X", "pid": 1, "tid": tid,
                               "ts": (start - origin) / 1e3, "dur": dur / 1e3,
                               "args": {"node": info.name, "step": t}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def to_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write Chrome trace JSON (open it in Perfetto or chrome://tracing)."""
        from ..io import atomic_write

        doc = self.chrome_trace()
        atomic_write(path, lambda tmp: _write_text(tmp, json.dumps(doc)))

    def collapsed(self) -> list[str]:
        """Collapsed stacks ``plan;kind;ops microseconds``, one line per distinct stack (for flame graphs)."""
        infos = _step_info(self.plan)
        totals: dict[str, int] = {}
        for run in self.runs:
            for t, _, dur in run.events:
                info = infos[t]
                stack = ";".join(_frame(x) for x in (self.plan_name, info.kind, info.ops))
                totals[stack] = totals.get(stack, 0) + dur
        return [f"{stack} {max(1, round(ns / 1e3))}" for stack, ns in sorted(totals.items())]

    def to_collapsed(self, path: str | os.PathLike) -> None:
        from ..io import atomic_write

        text = "".join(line + "\n" for line in self.collapsed())
        atomic_write(path, lambda tmp: _write_text(tmp, text))


def _frame(name: str) -> str:
    # ';' separates frames and a space ends the stack in the collapsed format
    return name.replace(";", "_").replace(" ", "_") or "_"


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
