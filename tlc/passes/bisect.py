"""Self-driving bisection: run a pipeline one step at a time and name the first step that changes the outputs.

A step is a pass run or one rule application inside a pass that rewrites by rules (``simplify``, ``dce``,
``layout``): the PassManager reports both to its instruments in one deterministic order (``run_after_rule``,
``run_after_pass``). ``bisect`` installs an instrument that runs the reference executor on fixed feeds before
the pipeline and after every step, compares the outputs with the first run, and stops at the first step whose
outputs differ beyond tolerance, keeping the graph before and after that step (written as ``.tlc`` reproducers
when a directory is given). With ``check_each`` it goes on to the end and reports every step that changed the
outputs while they differed. A pass that raises is a finding too (its step: the pass, no rule).

Tolerance, per output: integers, booleans and strings must be equal bit for bit; floats may differ by
``max(rtol, 8 eps(dtype)) * scale``, where scale is the output's largest finite magnitude in the reference (1 for
an all-zero output); NaNs must stay NaNs and infinities keep their sign. Shapes and dtypes must match.

The differential fuzzer calls ``bisect(graph, feeds, opt_level)`` and blames ``result.first.step``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import reference
from ..errors import InputError, PassError, TlcError
from ..ir.feeds import random_feeds
from ..ir.graph import Graph
from ..ir.text import save_text
from .base import Pass, PassResult, StopPipeline
from .instruments import PassInstrument
from .manager import PassManager, make_manager

#: the default float tolerance, relative to each output's scale (``--bisect-rtol``)
DEFAULT_RTOL = 1e-4
#: symbolic and unknown dims of random feeds: small, so a reference run per step stays cheap
SYMBOL_SIZE = 2
#: the exit status of ``tlc-opt --bisect`` / ``--check-each`` when a step changed the outputs
EXIT_FOUND = 3


@dataclass(frozen=True)
class Step:
    """One step of a pipeline: the 1-based ``index`` in run order, the pass, and the rule and its root node when
    the step is a rule application (None for a pass's own work)."""

    index: int
    pass_name: str
    rule: str | None = None
    node: str | None = None

    def __str__(self) -> str:
        text = f"step {self.index}: pass {self.pass_name}"
        return text + (f", rule {self.rule} (node {self.node!r})" if self.rule else "")

    @property
    def label(self) -> str:
        """A file-name stem: ``step-0012-simplify-mul-one`` (names come from the registries, never models)."""
        return f"step-{self.index:04d}-{self.pass_name}" + (f"-{self.rule}" if self.rule else "")


@dataclass
class Finding:
    """A step whose result differs from the reference (``why``), with the graph before it and after it (None when
    the step raised) and, once written, the reproducer files."""

    step: Step
    why: str
    before: Graph
    after: Graph | None
    files: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.step}: {self.why}"


@dataclass
class BisectResult:
    """What ``bisect`` found: the steps run and checked, the findings in step order, the feeds and the reference
    outputs, and the optimized graph when the pipeline ran to its end (None when it stopped at a finding)."""

    steps: int
    findings: list[Finding]
    feeds: dict[str, Any]
    expected: dict[str, Any]
    graph: Graph | None

    @property
    def clean(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def summary(self) -> str:
        """One line per finding, or the clean verdict."""
        if self.clean:
            return f"{self.steps} steps checked: no step changed the outputs beyond tolerance"
        lines = [f"{self.steps} steps checked; " + ("first bad " if i == 0 else "also bad: ") + str(f)
                 for i, f in enumerate(self.findings)]
        for f in self.findings:
            if f.files:
                lines.append(f"  {f.step.label}: " + ", ".join(f.files)
                             + f" (rerun: tlc-opt {f.files[0]} --passes={f.step.pass_name})")
        return "\n".join(lines)


def bisect(graph: Graph, feeds: Mapping[str, Any] | None = None, opt_level: int = 2, *,
           passes: str | Sequence[object] | None = None, rtol: float = DEFAULT_RTOL, check_each: bool = False,
           reproducer_dir: str | os.PathLike | None = None, manager: PassManager | None = None,
           **options: Any) -> BisectResult:
    """Run the pipeline (``opt_level`` or ``passes``, or ``manager`` as configured) on a copy of ``graph``,
    checking the outputs on ``feeds`` (default: ``random_feeds``) after every step; see the module docstring.

    ``options`` are ``PassOptions`` fields (``fast_math``, ...). ``reproducer_dir``: write each finding's graph
    before and after its step there. ``graph`` itself is never modified.
    """
    if not (isinstance(rtol, (int, float)) and 0 <= rtol < 1):
        raise InputError(f"bisect rtol must be a number in [0, 1), got {rtol!r}")
    if manager is None:
        manager = make_manager(opt_level, passes, **options)
    feeds = dict(random_feeds(graph, symbol_size=SYMBOL_SIZE) if feeds is None else feeds)
    expected = _run(graph, feeds)
    if isinstance(expected, str):
        raise InputError(f"the reference executor cannot run the input graph on these feeds: {expected}")
    checker = _Checker(feeds, expected, rtol, check_each)
    manager.instruments.append(checker)
    optimized: Graph | None = None
    try:
        optimized, _ = manager.run(graph)
    except StopPipeline:
        pass
    except PassError as exc:
        checker.failed(exc)
    finally:
        manager.instruments.remove(checker)
    result = BisectResult(checker.steps, checker.findings, feeds, expected, optimized)
    if reproducer_dir is not None:
        write_reproducers(result, reproducer_dir)
    return result


def load_feeds(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Feeds from a ``.npz`` file (one array per input name; no pickled objects)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read feeds from {str(path)!r}: expected a .npz file of arrays by input name "
                         f"({type(exc).__name__}: {exc})") from exc


# ---------------------------------------------------------------------------- checking
class _Checker(PassInstrument):
    """Counts steps, runs the reference after each, and records the ones that change the outputs."""

    def __init__(self, feeds: dict[str, Any], expected: dict[str, Any], rtol: float, check_each: bool):
        self.feeds, self.expected, self.rtol, self.check_each = feeds, expected, rtol, check_each
        self.steps = 0
        self.findings: list[Finding] = []
        self.graph: Graph | None = None
        self.before: Graph | None = None
        self.previous: dict[str, Any] | str = expected

    def enter_pipeline(self, graph: Graph) -> None:
        self.graph = graph          # the manager's working copy: rules inside bodies report the body's graph
        self.before = graph.copy()

    def run_after_rule(self, graph: Graph, pass_name: str, rule: str, node: str) -> None:
        self._step(pass_name, rule, node)

    def run_after_pass(self, pass_: Pass, graph: Graph, result: PassResult) -> None:
        self._step(pass_.name, None, None)

    def failed(self, exc: PassError) -> None:
        """The pipeline raised: the failing pass is the next step's."""
        step = Step(self.steps + 1, exc.pass_name or "?", None, exc.node or None)
        self.findings.append(Finding(step, f"the pass raised: {exc}", self.before, None))

    def _step(self, pass_name: str, rule: str | None, node: str | None) -> None:
        self.steps += 1
        got = _run(self.graph, self.feeds)
        why = got if isinstance(got, str) else compare_outputs(self.expected, got, self.rtol)
        # with check_each, a step is reported when the outputs differ and this step changed them
        changed = why is not None and (isinstance(got, str) or isinstance(self.previous, str)
                                       or compare_outputs(self.previous, got, self.rtol) is not None)
        if why is not None and (changed or not self.findings):
            step = Step(self.steps, pass_name, rule, node)
            self.findings.append(Finding(step, why, self.before, self.graph.copy()))
            if not self.check_each:
                raise StopPipeline
        self.previous = got
        self.before = self.graph.copy()


def _run(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, Any] | str:
    """The reference outputs, or why the reference executor could not run the graph."""
    try:
        return reference.run(graph, feeds)
    except (TlcError, ArithmeticError, ValueError, TypeError, IndexError, KeyError) as exc:
        return f"the reference executor failed: {type(exc).__name__}: {exc}"


def compare_outputs(expected: Mapping[str, Any], got: Mapping[str, Any], rtol: float) -> str | None:
    """Why ``got`` differs from ``expected`` beyond tolerance (the first output that does), or None."""
    if list(got) != list(expected):
        return f"the outputs are {list(got)}, expected {list(expected)}"
    for name, want in expected.items():
        why = _compare_value(want, got[name], rtol)
        if why is not None:
            return f"output {name!r}: {why}"
    return None


def _compare_value(want: Any, got: Any, rtol: float) -> str | None:
    if want is None or got is None or isinstance(want, list) or isinstance(got, list):
        if type(want) is not type(got) or (isinstance(want, list) and len(want) != len(got)):
            return f"got {_kind(got)}, expected {_kind(want)}"
        for i, (w, g) in enumerate(zip(want or [], got or [])):
            why = _compare_value(w, g, rtol)
            if why is not None:
                return f"element {i}: {why}"
        return None
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype or want.shape != got.shape:
        return f"got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if not _is_float(want.dtype):
        if want.dtype == object:
            bad = np.array([a != b for a, b in zip(want.ravel(), got.ravel())], bool)
        else:  # bit for bit
            bytes_of = [np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1) for a in (want, got)]
            bad = (bytes_of[0] != bytes_of[1]).any(axis=1)
        return _describe(bad.reshape(want.shape), want, got, "differ (exact comparison)")
    w, g = want.astype(np.float64), got.astype(np.float64)
    finite = np.isfinite(w)
    scale = float(np.abs(w[finite]).max()) if finite.any() else 0.0
    tol = max(rtol, 8 * _eps(want.dtype)) * (scale or 1.0)
    with np.errstate(invalid="ignore"):
        bad = np.where(finite, ~(np.abs(g - w) <= tol), ~((np.isnan(w) & np.isnan(g)) | (w == g)))
    return _describe(bad, want, got, f"differ by more than {tol:.3g} ({max(rtol, 8 * _eps(want.dtype)):.3g} "
                                     f"of the output's scale {scale:.3g})")


def _describe(bad: np.ndarray, want: np.ndarray, got: np.ndarray, what: str) -> str | None:
    count = int(np.count_nonzero(bad))
    if not count:
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    return (f"{count} of {want.size} elements {what}; first at {list(where)}: got {np.asarray(got[where]).tolist()!r}, "
            f"expected {np.asarray(want[where]).tolist()!r}")


def _is_float(dtype: np.dtype) -> bool:
    if dtype.kind in "fc":
        return True
    return dtype.kind == "V" and dtype.name.startswith(("bfloat", "float"))  # the ml_dtypes floats


def _eps(dtype: np.dtype) -> float:
    try:
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)
    except (ImportError, ValueError, TypeError):
        return float(np.finfo(dtype).eps) if dtype.kind in "fc" else 0.0


def _kind(value: Any) -> str:
    return "None" if value is None else f"a sequence of {len(value)}" if isinstance(value, list) else "a tensor"


# ---------------------------------------------------------------------------- reproducers
def write_reproducers(result: BisectResult, directory: str | os.PathLike,
                      keep: str | os.PathLike | None = None) -> None:
    """Write each finding's graph before (and after) its step as ``<step label>.before.tlc`` (``.after.tlc``) in
    ``directory``; the paths go into ``finding.files``. Existing files of those names are replaced, except
    ``keep`` (the model being bisected): a path that is that file raises ``InputError`` before anything is written."""
    folder = Path(directory)
    plan = [(finding, folder / f"{finding.step.label}.{which}.tlc", graph) for finding in result.findings
            for which, graph in (("before", finding.before), ("after", finding.after)) if graph is not None]
    for _, path, _ in plan:
        if keep is not None and path.exists() and Path(keep).exists() and os.path.samefile(path, keep):
            raise InputError(f"a reproducer would overwrite the input {str(keep)!r}; choose another directory")
    folder.mkdir(parents=True, exist_ok=True)
    for finding in result.findings:
        finding.files = []
    for finding, path, graph in plan:
        save_text(graph, path)
        finding.files.append(str(path))


__all__ = ["DEFAULT_RTOL", "EXIT_FOUND", "BisectResult", "Finding", "Step", "bisect", "compare_outputs",
           "load_feeds", "random_feeds", "write_reproducers"]
