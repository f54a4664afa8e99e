"""``PassReport``: what a pipeline did, as data (``to_dict``) and as readable tables (``table``, ``stats_table``).

One ``PassRecord`` per pass run: wall time, changed flag, the pass's counters and node counts before and after.
The report also holds whole-graph figures taken before and after the pipeline: nodes per op type and parameters
(elements held in constants).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..ir.graph import TLC_DOMAIN, Graph

FUSED_OP = f"{TLC_DOMAIN}.Fused"


@dataclass
class PassRecord:
    """One run of one pass."""

    name: str
    stage: int
    iteration: int
    seconds: float
    changed: bool
    stats: dict[str, int]
    nodes_before: int
    nodes_after: int


@dataclass
class StageRecord:
    """How a stage went: ``iterations`` run and whether a fixed-point stage ``converged`` within the bound."""

    passes: str
    iterations: int = 0
    converged: bool = True
    skipped: bool = False


@dataclass
class PassReport:
    records: list[PassRecord] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    params_before: int = 0
    params_after: int = 0
    seconds: float = 0.0

    # ---------------------------------------------------------------- figures
    @staticmethod
    def measure(graph: Graph) -> tuple[dict[str, int], int]:
        """Nodes per op type and parameters (elements in constants) of ``graph``."""
        params = sum(int(getattr(n.attrs.get("value"), "size", 0)) for n in graph.nodes()
                     if n.op == "Constant" and n.domain == "")
        return graph.op_counts(), params

    @property
    def nodes_before(self) -> int:
        return sum(self.ops_before.values())

    @property
    def nodes_after(self) -> int:
        return sum(self.ops_after.values())

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.records)

    @property
    def iterations(self) -> int:
        """The most iterations any stage ran."""
        return max((s.iterations for s in self.stages), default=0)

    @property
    def converged(self) -> bool:
        return all(s.converged for s in self.stages)

    def counters(self) -> dict[str, int]:
        """Every counter summed over all pass runs (``folded``, ``nodes_removed``, ...)."""
        total: dict[str, int] = {}
        for r in self.records:
            for k, v in r.stats.items():
                total[k] = total.get(k, 0) + v
        return dict(sorted(total.items()))

    def per_pass(self) -> dict[str, dict[str, Any]]:
        """Runs aggregated by pass name, in order of first run: runs, changes, seconds, counters."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.records:
            agg = out.setdefault(r.name, {"runs": 0, "changed": 0, "seconds": 0.0, "counters": {}})
            agg["runs"] += 1
            agg["changed"] += int(r.changed)
            agg["seconds"] += r.seconds
            for k, v in r.stats.items():
                agg["counters"][k] = agg["counters"].get(k, 0) + v
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(nodes_before=self.nodes_before, nodes_after=self.nodes_after, changed=self.changed,
                    iterations=self.iterations, converged=self.converged, counters=self.counters())
        return data

    # ---------------------------------------------------------------- tables
    def table(self) -> str:
        """Per pass: runs, how many changed the graph, time, node counts and counters."""
        first_nodes: dict[str, int] = {}
        last_nodes: dict[str, int] = {}
        for r in self.records:
            first_nodes.setdefault(r.name, r.nodes_before)
            last_nodes[r.name] = r.nodes_after
        rows = [("pass", "runs", "changed", "time ms", "nodes", "counters")]
        for name, agg in self.per_pass().items():
            counters = " ".join(f"{k}={v}" for k, v in sorted(agg["counters"].items()))
            rows.append((name, str(agg["runs"]), str(agg["changed"]), f"{agg['seconds'] * 1e3:.1f}",
                         f"{first_nodes[name]} -> {last_nodes[name]}", counters))
        lines = _format_rows(rows, right=(1, 2, 3))
        note = "" if self.converged else " (a fixed-point stage hit the iteration bound)"
        lines.append(f"total: {self.nodes_before} -> {self.nodes_after} nodes, {len(self.records)} pass runs, "
                     f"{self.iterations} iteration(s), {self.seconds * 1e3:.1f} ms{note}")
        return "\n".join(lines)

    def stats_table(self) -> str:
        """``--stats``: nodes per op type before/after, parameters, folded constants, fused groups, counters."""
        rows = [("op", "before", "after")]
        for op in sorted(set(self.ops_before) | set(self.ops_after)):
            rows.append((op, str(self.ops_before.get(op, 0)), str(self.ops_after.get(op, 0))))
        rows.append(("total nodes", str(self.nodes_before), str(self.nodes_after)))
        rows.append(("parameters", f"{self.params_before:,}", f"{self.params_after:,}"))
        lines = _format_rows(rows, right=(1, 2))
        counters = self.counters()
        lines.append(f"folded constants: {counters.get('folded', 0)}")
        lines.append(f"fused groups: {self.ops_after.get(FUSED_OP, 0)}")
        lines.append("per-pass counters:")
        per_pass = self.per_pass()
        for name, agg in per_pass.items():
            text = " ".join(f"{k}={v}" for k, v in sorted(agg["counters"].items())) or "-"
            lines.append(f"  {name}: {text}")
        if not per_pass:
            lines.append("  (no passes ran)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _format_rows(rows: list[tuple[str, ...]], right: tuple[int, ...] = ()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines
