"""``PassManager``: runs a pipeline of passes over its own copy of a graph, with instruments and a report.

NOTE: the caller's graph is never modified: ``run`` copies it once and the passes mutate that copy in place.
When a pass raises, the manager raises ``PassError`` naming the pass (and the node, when the pass said which)
and, when a reproducer directory is configured, writes the graph as it was before that pass there.
``StopPipeline`` (raised by an instrument to end the run) goes through as it is.

Steps: every pass run is one step, and so is every rule application inside a pass that rewrites by rules
(simplify, dce, layout): the manager hands the passes a ``PassOptions.step_hook`` that calls its instruments'
``run_after_rule`` after each one, so an instrument sees the graph after every step in one deterministic order.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import PassError, ValidationError
from ..ir.graph import Graph
from ..ir.text import save_text
from .base import Pass, PassOptions, PassResult, StopPipeline
from .instruments import PassInstrument, VerifyInstrument
from .pipeline import Stage, known_passes, level_pipeline, parse_pipeline, unknown_pass_error
from .report import PassRecord, PassReport, StageRecord

DEFAULT_MAX_ITERATIONS = 10


class PassManager:
    """Runs passes by opt level or by name.

    ``passes``: None (use ``opt_level``), a pipeline string (``"fold,dce,(simplify,cse)"``; a parenthesised
    group iterates to a fixed point) or a list of names / ``Pass`` objects / nested lists (fixed-point groups).
    ``opt_level``: 0-3 (default: ``options.opt_level``); it is also handed to the passes in their options.
    ``max_iterations``: bound on each fixed-point stage. ``skip``: pass names to leave out.
    ``verify_each``: verify the input and the graph after every pass. ``instruments``: ``PassInstrument``s.
    ``reproducer_dir``: where to write the graph as it was before a pass that failed.
    """

    def __init__(self, passes: str | Sequence[object] | None = None, opt_level: int | None = None,
                 options: PassOptions | None = None, *, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                 skip: Sequence[str] | str = (), verify_each: bool = False,
                 instruments: Sequence[PassInstrument] = (), reproducer_dir: str | os.PathLike | None = None):
        options = options or PassOptions()
        if opt_level is not None:
            options = dataclasses.replace(options, opt_level=opt_level)
        self._caller_hook = options.step_hook
        self.options = dataclasses.replace(options, step_hook=self._after_rule)
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise PassError(f"max_iterations must be a positive int, got {max_iterations!r}")
        self.max_iterations = max_iterations
        stages = level_pipeline(options.opt_level) if passes is None else parse_pipeline(passes)
        self.skip = _check_skip(skip)
        self.stages: tuple[Stage, ...] = _without(stages, self.skip)
        self.verify_each = verify_each
        self.instruments: list[PassInstrument] = list(instruments)
        if verify_each and not any(isinstance(i, VerifyInstrument) for i in self.instruments):
            self.instruments.append(VerifyInstrument())
        self.reproducer_dir = None if reproducer_dir is None else Path(reproducer_dir)

    def __str__(self) -> str:
        """The pipeline, e.g. ``(fold,dce,cse) fuse``; a parenthesised stage iterates to a fixed point."""
        return " ".join(str(s) for s in self.stages) or "(nothing)"

    @property
    def pass_names(self) -> list[str]:
        """Every pass the pipeline may run, in order of first appearance."""
        return list(dict.fromkeys(n for s in self.stages for n in s.names))

    # ---------------------------------------------------------------- running
    def run(self, graph: Graph) -> tuple[Graph, PassReport]:
        """Optimize a copy of ``graph``; returns it and the report. ``graph`` itself is left as it was."""
        start = time.perf_counter()
        work = graph.copy()
        report = PassReport()
        report.ops_before, report.params_before = PassReport.measure(work)
        if self.verify_each:
            try:
                work.verify()
            except ValidationError as exc:
                raise ValidationError(f"the input graph is invalid (before any pass ran): {exc}") from exc
        instances: dict[str, Pass] = {}
        self._notify("enter_pipeline", work)
        previous_changed = False
        for index, stage in enumerate(self.stages):
            record = StageRecord(str(stage))
            report.stages.append(record)
            if stage.after_change and not previous_changed:
                record.skipped = True
                continue
            passes = [self._instance(item, instances) for item in stage.passes]
            previous_changed = self._run_stage(stage, passes, work, report, index, record)
        report.ops_after, report.params_after = PassReport.measure(work)
        report.seconds = time.perf_counter() - start
        self._notify("exit_pipeline", work, report)
        return work, report

    def _run_stage(self, stage: Stage, passes: list[Pass], graph: Graph, report: PassReport, index: int,
                   record: StageRecord) -> bool:
        """Run one stage (to a fixed point when it asks); returns whether it changed the graph."""
        bound = self.max_iterations if stage.fixed_point else 1
        changed_any = False
        for iteration in range(1, bound + 1):
            record.iterations = iteration
            changed = False
            for p in passes:
                changed |= self._run_pass(p, graph, report, index, iteration).changed
            changed_any |= changed
            if not changed:
                break
        else:
            record.converged = not (stage.fixed_point and changed)
        return changed_any

    def _run_pass(self, p: Pass, graph: Graph, report: PassReport, stage: int, iteration: int) -> PassResult:
        snapshot = graph.copy() if self.reproducer_dir is not None else None
        nodes_before = len(graph)
        p.current_node = None
        self._notify("run_before_pass", p, graph)
        try:
            t0 = time.perf_counter()
            result = p.run(graph)
            seconds = time.perf_counter() - t0
            if not isinstance(result, PassResult):
                raise TypeError(f"run() returned {type(result).__name__}, expected a PassResult")
            self._notify("run_after_pass", p, graph, result)
        except StopPipeline:
            raise
        except Exception as exc:
            raise self._failure(p, exc, snapshot, len(report.records)) from exc
        report.records.append(PassRecord(p.name, stage, iteration, seconds, result.changed, dict(result.stats),
                                         nodes_before, len(graph)))
        return result

    def _instance(self, item: str | Pass, cache: dict[str, Pass]) -> Pass:
        if isinstance(item, Pass):
            return item
        if item not in cache:
            cache[item] = known_passes()[item](self.options)
        return cache[item]

    def _after_rule(self, graph: Graph, pass_name: str, rule: str, node: str) -> None:
        """The step hook the passes get: the caller's own hook, then each instrument's ``run_after_rule``."""
        if self._caller_hook is not None:
            self._caller_hook(graph, pass_name, rule, node)
        self._notify("run_after_rule", graph, pass_name, rule, node)

    def _notify(self, hook: str, *args: Any) -> None:
        for instrument in self.instruments:
            method = getattr(instrument, hook, None)
            if method is not None:
                method(*args)

    # ---------------------------------------------------------------- failures
    def _failure(self, p: Pass, exc: Exception, snapshot: Graph | None, run_index: int) -> PassError:
        node = (exc.node if isinstance(exc, PassError) else "") or p.current_node or ""
        if isinstance(exc, PassError) and exc.pass_name == p.name:
            message = str(exc) if str(exc).startswith(f"pass {p.name!r}") else f"pass {p.name!r}: {exc}"
        else:
            where = f" at node {node!r}" if node else ""
            message = f"pass {p.name!r} failed{where}: {type(exc).__name__}: {exc}"
        path = None
        if snapshot is not None:
            path, note = self._write_reproducer(p, snapshot, run_index)
            message += f"; {note}"
        return PassError(message, pass_name=p.name, node=node, reproducer=path)

    def _write_reproducer(self, p: Pass, snapshot: Graph, run_index: int) -> tuple[str | None, str]:
        """Write the graph as it was before ``p`` ran; returns the path (None if not written) and a note."""
        # NOTE: the file name is made of the pass name (from the registry) only, never of model names.
        path = self.reproducer_dir / f"{run_index:03d}-{p.name}.before.tlc"
        try:
            self.reproducer_dir.mkdir(parents=True, exist_ok=True)
            save_text(snapshot, path)
        except Exception as exc:  # the original failure matters more than a failed reproducer
            return None, f"could not write a reproducer to {str(path)!r}: {type(exc).__name__}: {exc}"
        return str(path), f"the graph before the pass was written to {path} (rerun: tlc-opt {path} --passes={p.name})"


def _check_skip(skip: Sequence[str] | str) -> frozenset[str]:
    names = [s for s in (skip.split(",") if isinstance(skip, str) else skip) if s.strip()]
    known = known_passes()
    for name in names:
        if name.strip() not in known:
            raise unknown_pass_error(name.strip(), "pass to skip")
    return frozenset(n.strip() for n in names)


def _without(stages: tuple[Stage, ...], skip: frozenset[str]) -> tuple[Stage, ...]:
    if not skip:
        return stages
    out = []
    for stage in stages:
        kept = tuple(p for p in stage.passes if (p if isinstance(p, str) else p.name) not in skip)
        if kept:
            out.append(dataclasses.replace(stage, passes=kept))
    return tuple(out)


_MANAGER_OPTIONS = ("max_iterations", "skip", "verify_each", "instruments", "reproducer_dir")


def optimize(graph: Graph, opt_level: int = 2, passes: str | Sequence[object] | None = None,
             **options: Any) -> tuple[Graph, PassReport]:
    """Optimize a copy of ``graph``: ``optimize(g, opt_level=2)`` or ``optimize(g, passes="fold,dce")``.

    ``options`` are ``PassOptions`` fields (``fast_math``, ``fold_size_limit``, ``target``) and PassManager
    settings (``max_iterations``, ``skip``, ``verify_each``, ``instruments``, ``reproducer_dir``).
    """
    return make_manager(opt_level, passes, **options).run(graph)


def make_manager(opt_level: int = 2, passes: str | Sequence[object] | None = None, **options: Any) -> PassManager:
    """The PassManager ``optimize`` runs, for the same arguments (``tlc.passes.bisect`` runs one step by step)."""
    fields = {f.name for f in dataclasses.fields(PassOptions)} - {"opt_level"}
    unknown = sorted(set(options) - fields - set(_MANAGER_OPTIONS))
    if unknown:
        raise TypeError(f"optimize() got unknown option(s) {', '.join(unknown)}; "
                        f"known: {', '.join(sorted(fields | set(_MANAGER_OPTIONS)))}")
    pass_options = PassOptions(opt_level=opt_level, **{k: v for k, v in options.items() if k in fields})
    return PassManager(passes, opt_level, pass_options, **{k: v for k, v in options.items() if k in _MANAGER_OPTIONS})
