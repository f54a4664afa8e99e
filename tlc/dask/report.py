"""``Report``: what the workers of a ``tlc.dask`` run recorded, merged: one table (per-worker rows, per-step totals
summed over the workers) and one Chrome trace (a process per worker, a track per thread, an event per chunk and,
when profiled, per run and step).

Each chunk's task returns a record (``worker.snapshot``): where it ran, its timing, the plan's stats as they stood
in that process, and the profiled runs not handed out before. Stats are cumulative per process, so a worker's
latest record (most runs) speaks for it; profiled runs are handed out once, so they are summed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any


class Report:
    """The merged record of a run's chunks (``outputs.report``, computed with the outputs)."""

    def __init__(self, records: Iterable[dict[str, Any] | None]):
        self.records = sorted((r for r in records if r), key=lambda r: (r["start_ns"], r["chunk"]))
        self.model = self.records[0]["model"] if self.records else ""
        self._workers: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for r in self.records:
            self._workers.setdefault((r["worker"], r["pid"]), []).append(r)

    # ------------------------------------------------------------------ tables
    def workers(self) -> list[dict[str, Any]]:
        """One row per worker process: chunks, rows, busy ms (its chunks' time), and its plan's stats."""
        rows = []
        for (name, pid), recs in sorted(self._workers.items()):
            latest = max(recs, key=lambda r: r["stats"]["totals"]["runs"])["stats"]["totals"]
            rows.append({"worker": name, "pid": pid, "threads": recs[0]["threads"], "chunks": len(recs),
                         "rows": sum(r["rows"] for r in recs),
                         "busy_ms": sum(r["duration_ns"] for r in recs) / 1e6,
                         "runs": latest["runs"], "kernels": latest["kernels"],
                         "kernels_ready": latest["kernels_ready"], "cache_hits": latest["cache_hits"],
                         "compile_ms": latest["compile_ms"]})
        return rows

    def steps(self) -> list[dict[str, Any]]:
        """One row per plan step: op, mode (each worker's, when they differ), calls and profiled ms summed over
        the workers (calls from the stats when nothing was profiled)."""
        rows: dict[int, dict[str, Any]] = {}
        profiled = any(r["runs"] for r in self.records)
        for recs in self._workers.values():
            latest = max(recs, key=lambda r: r["stats"]["totals"]["runs"])["stats"]
            for s in latest["steps"]:
                row = rows.setdefault(s["index"], {"step": s["index"], "name": s["name"], "op": s["op"],
                                                   "modes": [], "calls": 0, "total_ms": 0.0})
                if s["mode"] not in row["modes"]:
                    row["modes"].append(s["mode"])
                if not profiled:
                    row["calls"] += s["calls"]
        for r in self.records:
            for _, _, _, _, events in r["runs"]:
                for t, _, dur in events:
                    if t in rows:
                        rows[t]["calls"] += 1
                        rows[t]["total_ms"] += dur / 1e6
        out = [rows[k] for k in sorted(rows)]
        for row in out:
            row["mode"] = "/".join(row.pop("modes"))
        return out

    def table(self) -> str:
        workers = self.workers()
        lines = [f"tlc.dask report for {self.model!r}: {len(workers)} worker(s), {len(self.records)} chunk(s), "
                 f"{sum(w['rows'] for w in workers)} rows"]
        width = max([len(w["worker"]) for w in workers] + [6])
        lines.append(f"{'worker':<{width}} {'pid':>7} {'threads':>7} {'chunks':>6} {'rows':>9} {'busy ms':>10} "
                     f"{'runs':>6} {'kernels':>8} {'cache':>5} {'compile ms':>10}")
        for w in workers:
            lines.append(f"{w['worker']:<{width}} {w['pid']:>7} {w['threads']:>7} {w['chunks']:>6} {w['rows']:>9} "
                         f"{w['busy_ms']:>10.1f} {w['runs']:>6} {w['kernels_ready']:>3}/{w['kernels']:<4} "
                         f"{w['cache_hits']:>5} {w['compile_ms']:>10.1f}")
        steps = self.steps()
        profiled = any(r["runs"] for r in self.records)
        if steps:
            op_width = max([len(s["op"]) for s in steps] + [8])
            lines.append(f"{'#':>4} {'op':<{op_width}} {'mode':<9} {'calls':>7} {'total ms':>10}   (all workers"
                         + ("" if profiled else "; run with profile=True for times") + ")")
            for s in steps:
                ms = f"{s['total_ms']:>10.3f}" if profiled else f"{'-':>10}"
                lines.append(f"{s['step']:>4} {s['op']:<{op_width}} {s['mode']:<9} {s['calls']:>7} {ms}")
        return "\n".join(lines)

    __str__ = table

    # ------------------------------------------------------------------ trace
    def chrome_trace(self) -> dict[str, Any]:
        """The Chrome trace-event document: a process (pid) per worker, a track (tid) per thread, an "X" event per
        chunk and, for profiled runs, per run and per step; times from one origin (the workers' wall clocks)."""
        starts = [r["start_ns"] for r in self.records] + [run[2] for r in self.records for run in r["runs"]]
        origin = min(starts, default=0)
        events: list[dict[str, Any]] = []
        tids: dict[tuple[int, int], int] = {}

        def track(pid: int, thread_id: int, thread_name: str) -> int:
            if (pid, thread_id) not in tids:
                tids[(pid, thread_id)] = tid = sum(p == pid for p, _ in tids) + 1
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                               "args": {"name": thread_name}})
            return tids[(pid, thread_id)]

        for pid, ((name, os_pid), recs) in enumerate(sorted(self._workers.items()), start=1):
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": f"{name} (pid {os_pid})"}})
            labels = {s["index"]: (s["op"], s["mode"], s["name"])
                      for s in max(recs, key=lambda r: r["stats"]["totals"]["runs"])["stats"]["steps"]}
            for r in recs:
                tid = track(pid, r["thread_id"], r["thread"])
                events.append({"name": f"chunk {r['chunk']}", "cat": "chunk", "ph": "X", "pid": pid, "tid": tid,
                               "ts": (r["start_ns"] - origin) / 1e3, "dur": r["duration_ns"] / 1e3,
                               "args": {"rows": r["rows"]}})
                for thread_id, thread_name, start, dur, steps in r["runs"]:
                    tid = track(pid, thread_id, thread_name)
                    events.append({"name": f"run {self.model}", "cat": "plan", "ph": "X", "pid": pid, "tid": tid,
                                   "ts": (start - origin) / 1e3, "dur": dur / 1e3})
                    for t, s, d in steps:
                        op, mode, node = labels.get(t, ("?", "?", "?"))
                        events.append({"name": op, "cat": mode, "ph": "X", "pid": pid, "tid": tid,
                                       "ts": (s - origin) / 1e3, "dur": d / 1e3, "args": {"node": node, "step": t}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def to_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write the Chrome trace JSON (open it in Perfetto or chrome://tracing); atomically."""
        from ..io import atomic_write

        text = json.dumps(self.chrome_trace())
        atomic_write(path, lambda tmp: _write_text(tmp, text))


def merge(records: list[dict[str, Any] | None]) -> Report:
    """The reduce task of ``outputs.report``."""
    return Report(records)


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
