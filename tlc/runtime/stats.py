"""``plan.stats()``: per step, how it runs (native, library, view, reference, pending, folded) and why; the
kernels' compile record; per specialization, the arena.

A step's mode is read from the most recent specialization: ``native`` (a compiled kernel), ``library`` (numpy
or BLAS calls), ``view`` (no copy), ``reference`` (the op's reference implementation: the reason says why),
``pending`` (its kernel is being compiled, or waits for the lazy JIT: it runs its fallback meanwhile) or
``folded`` (its value is fixed by the input shapes and computed once for them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .._platform import blas_note
from ..kernels import panel
from .native import cache_for

if TYPE_CHECKING:
    from .plan import Plan
    from .specialize import Active, Specialization

NATIVE_MODES = ("native", "library", "view", "folded")


@dataclass
class StepStat:
    index: int
    name: str                  # node name
    op: str                    # op, or tlc.Fused[kind]
    mode: str                  # native | library | view | reference | pending | folded
    reason: str                # what runs, or why reference / pending
    calls: int
    compile_ms: float | None = None
    cache_hit: bool | None = None
    notes: list[str] = field(default_factory=list)   # per specialization: what was chosen there

    @property
    def native(self) -> bool:
        return self.mode in NATIVE_MODES


@dataclass
class PlanStats:
    plan: str
    steps: list[StepStat]
    totals: dict[str, Any]
    specializations: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan, "steps": [asdict(s) for s in self.steps], "totals": dict(self.totals),
                "specializations": [dict(s) for s in self.specializations]}

    def by_mode(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.mode] = counts.get(s.mode, 0) + 1
        return dict(sorted(counts.items()))

    def reference_steps(self) -> list[StepStat]:
        return [s for s in self.steps if s.mode == "reference"]

    def __str__(self) -> str:
        width = max([len(s.op) for s in self.steps] + [8])
        lines = [f"plan {self.plan!r}: {len(self.steps)} steps, {self.totals['runs']} run(s)",
                 f"{'#':>4} {'op':<{width}} {'mode':<9} {'calls':>6} {'compile ms':>10} {'cache':>5}  how / why"]
        for s in self.steps:
            ms = "" if s.compile_ms is None else f"{s.compile_ms:.1f}"
            hit = "" if s.cache_hit is None else ("hit" if s.cache_hit else "miss")
            why = "; ".join(dict.fromkeys([s.reason] + [n for n in s.notes if n]))
            lines.append(f"{s.index:>4} {s.op:<{width}} {s.mode:<9} {s.calls:>6} {ms:>10} {hit:>5}  {why}")
        t = self.totals
        lines.append(f"totals: {t['native_steps']} native/library/view/folded, {t['reference_steps']} reference, "
                     f"{t['pending_steps']} pending; kernels {t['kernels_ready']}/{t['kernels']} ready, "
                     f"{t['kernels_failed']} failed, {t['cache_hits']} cache hit(s), compile {t['compile_ms']:.1f} ms")
        for sp in self.specializations:
            lines.append(f"shapes {sp['signature']}: arena {sp['arena_bytes'] / 2**20:.2f} MiB in {sp['slots']} "
                         f"buffer(s), {sp['inplace']} in-place step(s), {sp['folded']} step(s) folded"
                         + (f"; {sp['threads']}" if sp.get("threads") else ""))
        if t.get("blas_note"):
            lines.append(t["blas_note"])
        if t.get("panel_note"):
            lines.append(t["panel_note"])
        if t.get("cache_note"):
            lines.append(t["cache_note"])
        return "\n".join(lines)


def _row_of(a: Active, plan: Plan) -> tuple[str, str]:
    bound, job = a.bound, a.job
    if bound.request is None:
        return bound.mode, bound.note or a.step.impl.reason
    if job is None or job.status == "pending":
        why = (f"lazy JIT: compiles after {plan.options.hot_threshold} runs" if plan.options.jit == "lazy"
               else "kernel not compiled yet")
        return "pending", f"{why}; runs its fallback meanwhile"
    if job.status in ("queued", "compiling"):
        return "pending", "kernel compiling in the background; runs its fallback meanwhile"
    if job.status == "failed":
        return "reference", f"kernel failed to compile, runs its fallback: {job.reason}"
    return bound.mode, bound.note or a.step.impl.reason


def build_stats(plan: Plan, specs: list[Specialization]) -> PlanStats:
    runs = plan.runs
    program = plan.program
    rows = [StepStat(st.index, st.node.name, st.label, st.impl.mode, st.impl.reason, runs) for st in program.steps]
    for spec in specs:
        for step in spec.folded:
            rows[step.index].notes.append(f"folded for {spec.signature}")
        for a in spec.active:
            rows[a.step.index].notes.append(a.bound.note)
    if specs:
        latest = specs[-1]
        for step in latest.folded:
            rows[step.index].mode, rows[step.index].reason = "folded", "fixed by the input shapes"
        for a in latest.active:
            row = rows[a.step.index]
            row.mode, row.reason = _row_of(a, plan)
            if a.job is not None:
                row.compile_ms, row.cache_hit = a.job.compile_ms, a.job.cache_hit
    for row in rows:
        row.notes = list(dict.fromkeys(n for n in row.notes if n))
    jobs = plan.jobs
    totals = {
        "runs": runs,
        "steps": len(rows),
        "native_steps": sum(r.native for r in rows),
        "reference_steps": sum(r.mode == "reference" for r in rows),
        "pending_steps": sum(r.mode == "pending" for r in rows),
        "kernels": len(jobs),
        "kernels_ready": sum(j.status == "ready" for j in jobs),
        "kernels_failed": sum(j.status == "failed" for j in jobs),
        "cache_hits": sum(bool(j.cache_hit) for j in jobs),
        "compile_ms": sum(j.compile_ms or 0.0 for j in jobs),
        "timings_ms": dict(plan.timings),
        "threads": plan.options.threads,
        "blas_note": blas_note(),
        "panel_note": panel.REASON,   # why products on constant weights stay on BLAS, when the kernel is off
        "cache_note": cache_for(plan.options).problem,   # why compiled kernels are not kept on disk
    }
    specializations = [{"signature": spec.signature, "arena_bytes": spec.memory.arena_bytes,
                        "slots": len(spec.memory.slot_bytes), "inplace": len(spec.memory.inplace),
                        "folded": len(spec.folded), "threads": spec.threads_note} for spec in specs]
    return PlanStats(plan.name, rows, totals, specializations)
