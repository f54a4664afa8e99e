"""``plan.stats()``: per step, how it runs (native, library, view or reference, and why), calls, compile record.

Every run executes every step once, so a step's calls are the plan's runs; a fused group also counts the calls
it made on the reference path (before a lazy JIT swap, or for good after a failed compile).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plan import Plan, Specialization

NATIVE_MODES = ("native", "library", "view")


@dataclass
class StepStat:
    index: int
    name: str                  # node name
    op: str                    # op, or tlc.Fused[kind]
    mode: str                  # native | library | view | reference
    reason: str                # why reference, or what the kernel is
    calls: int
    reference_calls: int | None = None    # fused groups: calls made on the reference path
    compile_ms: float | None = None
    cache_hit: bool | None = None
    notes: list[str] = field(default_factory=list)   # per specialization: algorithm chosen, or why reference

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

    def __str__(self) -> str:
        width = max([len(s.op) for s in self.steps] + [8])
        lines = [f"plan {self.plan!r}: {len(self.steps)} steps, {self.totals['runs']} run(s)",
                 f"{'#':>4} {'op':<{width}} {'mode':<9} {'calls':>6} {'compile ms':>10} {'cache':>5}  how / why"]
        for s in self.steps:
            ms = "" if s.compile_ms is None else f"{s.compile_ms:.1f}"
            hit = "" if s.cache_hit is None else ("hit" if s.cache_hit else "miss")
            why = "; ".join([s.reason] + [n for n in s.notes if n])
            lines.append(f"{s.index:>4} {s.op:<{width}} {s.mode:<9} {s.calls:>6} {ms:>10} {hit:>5}  {why}")
        t = self.totals
        lines.append(f"totals: {t['native_steps']} native/library/view, {t['reference_steps']} reference; "
                     f"groups {t['groups_native']}/{t['groups']} compiled, {t['groups_failed']} failed, "
                     f"{t['cache_hits']} cache hit(s), compile {t['compile_ms']:.1f} ms")
        for sp in self.specializations:
            lines.append(f"shapes {sp['signature']}: arena {sp['arena_bytes'] / 2**20:.2f} MiB in "
                         f"{sp['slots']} buffer(s), {sp['inplace']} in-place step(s)")
        lines += [t[k] for k in ("blas_note", "thread_note") if t.get(k)]
        return "\n".join(lines)


def build_stats(plan: Plan, specs: list[Specialization]) -> PlanStats:
    runs = plan.runs
    rows = []
    for step in plan.program.steps:
        state = getattr(step.impl, "state", None)
        row = StepStat(step.index, step.node.name, step.label, step.impl.mode, step.impl.reason, runs)
        if state is not None:
            row.reference_calls = state.calls.value
            row.compile_ms = state.compile_ms
            row.cache_hit = state.cache_hit
        row.notes = sorted({spec.steps[step.index].note for spec in specs} - {""})
        rows.append(row)
    groups = plan.program.groups
    totals = {
        "runs": runs,
        "steps": len(rows),
        "native_steps": sum(r.native for r in rows),
        "reference_steps": sum(not r.native for r in rows),
        "groups": len(groups),
        "groups_native": sum(g.status == "native" for g in groups),
        "groups_failed": sum(g.status == "failed" for g in groups),
        "cache_hits": sum(bool(g.cache_hit) for g in groups),
        "compile_ms": sum(g.compile_ms or 0.0 for g in groups),
        "timings_ms": dict(plan.timings),
        "blas_note": plan.blas_note,
        "thread_note": plan.thread_note,
    }
    specializations = [{"signature": _signature(plan, spec), "arena_bytes": spec.memory.arena_bytes,
                        "slots": len(spec.memory.slot_bytes), "inplace": len(spec.memory.inplace)}
                       for spec in specs]
    return PlanStats(plan.name, rows, totals, specializations)


def _signature(plan: Plan, spec: Specialization) -> str:
    parts = [f"{name}{list(spec.types[v].shape)}" for name, v, _ in plan.program.feeds
             if spec.types[v] is not None and spec.types[v].shape is not None]
    return ", ".join(parts) or "(no inputs)"
