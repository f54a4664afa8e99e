"""Pass instruments: objects the PassManager calls around every pass (timing, IR printing, verification, progress).

An instrument implements any of ``enter_pipeline(graph)``, ``run_before_pass(pass_, graph)``,
``run_after_rule(graph, pass_name, rule, node)`` (after every rule application of the rewrite engine),
``run_after_pass(pass_, graph, result)`` and ``exit_pipeline(graph, report)``; ``PassInstrument`` gives no-op
defaults. The CLI's debugging flags only install instruments; passes never print.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from ..errors import PassError, ValidationError
from ..ir.graph import Graph
from ..ir.text import print_graph
from .base import Pass, PassResult

if TYPE_CHECKING:
    from .report import PassReport


class PassInstrument:
    """Base class with no-op hooks; subclass and override the ones you need."""

    def enter_pipeline(self, graph: Graph) -> None:
        pass

    def run_before_pass(self, pass_: Pass, graph: Graph) -> None:
        pass

    def run_after_rule(self, graph: Graph, pass_name: str, rule: str, node: str) -> None:
        pass

    def run_after_pass(self, pass_: Pass, graph: Graph, result: PassResult) -> None:
        pass

    def exit_pipeline(self, graph: Graph, report: PassReport) -> None:
        pass


def graph_text(graph: Graph) -> str:
    """The graph in the textual IR."""
    return print_graph(graph)


class PrintIRInstrument(PassInstrument):
    """Print the IR after every pass (``--print-ir-after-all``) or only after passes that changed it
    (``--print-ir-after-change``), each dump under a ``# -----// IR after <pass> //----- #`` header."""

    def __init__(self, stream: TextIO | None = None, *, only_changed: bool = False, print_initial: bool = False):
        self.stream = stream
        self.only_changed = only_changed
        self.print_initial = print_initial

    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    def enter_pipeline(self, graph: Graph) -> None:
        if self.print_initial:
            self._dump("input", graph)

    def run_after_pass(self, pass_: Pass, graph: Graph, result: PassResult) -> None:
        if result.changed or not self.only_changed:
            self._dump(pass_.name + ("" if result.changed else " (unchanged)"), graph)

    def _dump(self, label: str, graph: Graph) -> None:
        out = self._out()
        out.write(f"# -----// IR after {label} //----- #\n")
        text = graph_text(graph)
        out.write(text if text.endswith("\n") else text + "\n")
        out.flush()


class VerifyInstrument(PassInstrument):
    """Run the verifier after every pass (``--verify-each``); a defect becomes a PassError naming the pass."""

    def run_after_pass(self, pass_: Pass, graph: Graph, result: PassResult) -> None:
        try:
            graph.verify()
        except ValidationError as exc:
            raise PassError(f"pass {pass_.name!r} left an invalid graph: {exc}", pass_name=pass_.name) from exc


class TimingInstrument(PassInstrument):
    """Wall time per pass name, summed over runs (and over pipelines, when one instrument serves several).

    ``stream``: print the table there when a pipeline ends (``--time-passes``).
    """

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream
        self.seconds: dict[str, float] = {}
        self.runs: dict[str, int] = {}
        self._start = 0.0

    def run_before_pass(self, pass_: Pass, graph: Graph) -> None:
        self._start = time.perf_counter()

    def run_after_pass(self, pass_: Pass, graph: Graph, result: PassResult) -> None:
        elapsed = time.perf_counter() - self._start
        self.seconds[pass_.name] = self.seconds.get(pass_.name, 0.0) + elapsed
        self.runs[pass_.name] = self.runs.get(pass_.name, 0) + 1

    def table(self) -> str:
        total = sum(self.seconds.values()) or 1e-12
        width = max((len(n) for n in self.seconds), default=4)
        lines = [f"{'pass'.ljust(width)}  runs   time ms      %"]
        for name, secs in sorted(self.seconds.items(), key=lambda kv: -kv[1]):
            lines.append(f"{name.ljust(width)}  {self.runs[name]:4d}  {secs * 1e3:8.2f}  {100 * secs / total:5.1f}")
        lines.append(f"{'total'.ljust(width)}  {sum(self.runs.values()):4d}  {total * 1e3:8.2f}  100.0")
        return "\n".join(lines)

    def exit_pipeline(self, graph: Graph, report: PassReport) -> None:
        if self.stream is not None:
            self.stream.write("===== pass timing =====\n" + self.table() + "\n")
            self.stream.flush()


class ProgressInstrument(PassInstrument):
    """Which pass is running and how many nodes the graph has, on ``stream`` (stderr by default).

    Silent for the first ``delay`` seconds of a pipeline, so small models print nothing. On a terminal the line
    is rewritten in place; elsewhere each update is its own line.
    """

    def __init__(self, stream: TextIO | None = None, *, delay: float = 0.5):
        self.stream = stream
        self.delay = delay
        self._start = 0.0
        self._runs = 0
        self._shown = False

    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    def enter_pipeline(self, graph: Graph) -> None:
        self._start, self._runs, self._shown = time.perf_counter(), 0, False

    def run_before_pass(self, pass_: Pass, graph: Graph) -> None:
        self._runs += 1
        if time.perf_counter() - self._start < self.delay:
            return
        out = self._out()
        line = f"tlc: pass {self._runs}: {pass_.name} on {len(graph):,} nodes"
        if _is_tty(out):
            out.write("\r\x1b[K" + line)
        else:
            out.write(line + "\n")
        out.flush()
        self._shown = True

    def exit_pipeline(self, graph: Graph, report: PassReport) -> None:
        if self._shown and _is_tty(self._out()):
            self._out().write("\r\x1b[K")
            self._out().flush()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
