"""Differential oracles: one graph run many ways, each compared with the reference executor (-O0).

- ``O<n>-<jit>-t<k>``: ``tlc.compile`` at -O1/-O2/-O3, ``jit`` eager or lazy, 1 or 2 threads (lazy: the run on
  fallbacks before the kernels, and the native run after them); within tolerance.
- ``ort``, ``ort-O2``: the exported ONNX of the graph, and of its -O2 graph (fused groups as functions), in
  onnxruntime; within tolerance.
- ``text``, ``graphml``: the reference on the graph (and on its -O2 graph) after a round trip through the text IR
  or GraphML; bit for bit.
- ``tlc-opt``: ``tlc-opt -O2`` on the saved ``.tlc`` file, its output read back and run by the reference; bit for
  bit with the -O2 graph optimized in process.

Tolerances are ``tlc.testing.compare``'s: dtype-aware, widened for outputs the graph itself makes unstable.
onnxruntime not implementing an op or type (NOT_IMPLEMENTED) makes its oracle "n/a", not a disagreement; so does
an op the exporter refuses by name (``UnsupportedOperatorError``). onnxruntime refusing the exported graph
otherwise is "invalid" when ONNX's strict shape inference refuses it too (tlc accepted what the spec forbids),
else "refused" (for triage: a value the spec leaves undefined, or an export defect). When onnxruntime's numbers
differ but ONNX's reference evaluator (``onnx.reference``) computes tlc's, or onnxruntime's output shape differs
from the one ONNX's shape inference gives the model and tlc's agrees with it, the outcome is "arbitrated"
(onnxruntime computing 0/0 where the ONNX function gives 0, or pooling to a 3 x 1 plane for a 3 x 3 one). Any
other exception is a disagreement: the graph ran on the reference, so every other way of running it must run
too (unless rounding noise makes the reference fail as well: "n/a"); so is onnxruntime refusing the -O2 export
of a graph whose own export it runs. Inputs on which ONNX leaves an op's result undefined (``OpDef.undefined_at``)
are never generated.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TlcError, UnsupportedOperatorError
from ..ir.graph import Graph
from .compare import RTOL, Mismatch, compare, input_scale, precision_floor, reference_outputs, sensitivity

LEVELS = (1, 2, 3)
JITS = ("eager", "lazy")
THREADS = (1, 2)
PLAN_ORACLES = tuple(f"O{level}-{jit}-t{threads}" for level in LEVELS for jit in JITS for threads in THREADS)
OTHER_ORACLES = ("ort", "ort-O2", "text", "graphml", "tlc-opt")
ORACLES = PLAN_ORACLES + OTHER_ORACLES
#: oracles that must reproduce the reference bit for bit
EXACT = frozenset({"text", "graphml", "tlc-opt"})


#: onnxruntime's NaNs where tlc computes a number, triaged as onnxruntime's (tests/fuzz_regressions keeps each
#: reproducer): the ``ort`` oracles call such a disagreement "arbitrated" when the graph holds the op and the NaNs
#: are all that differs
KNOWN_ONNXRUNTIME_NANS = {
    "MeanVarianceNormalization": "onnxruntime's MeanVarianceNormalization takes the variance as E[x^2] - E[x]^2, "
                                 "which cancels below 0 over a slice equal up to its last bits, and gives NaN; "
                                 "tlc's variance is E[(x - E[x])^2] >= 0 (ONNX's reference evaluator gives tlc's 0 "
                                 "on float32 and cannot run float16)",
    "LRN": "onnxruntime's LRN gives NaN next to a NaN channel whose window does not reach it (its running sum of "
           "squares keeps the NaN); tlc's window sums are NaN exactly where a window holds one",
}


@dataclass
class Outcome:
    """What one oracle said about one graph: "ok", "disagree", "n/a" (with why), "invalid" (onnxruntime and
    ONNX's own checks refuse the exported graph: ``_OutsideOnnx``), "refused" (onnxruntime alone: ``_Refused``) or
    "arbitrated" (onnxruntime computes something else, ONNX's reference evaluator what tlc computes)."""

    oracle: str
    status: str
    mismatches: list[Mismatch] = field(default_factory=list)
    detail: str = ""

    @property
    def max_error(self) -> float:
        return max((m.max_error for m in self.mismatches), default=0.0)

    def __str__(self) -> str:
        text = f"{self.oracle}: {self.status}"
        if self.detail:
            text += f" ({self.detail})"
        return text + "".join(f"\n    {m}" for m in self.mismatches)


def plan_oracles(rotate: int | None = None) -> tuple[str, ...]:
    """Every plan variant, or (``rotate``) one per opt level, chosen round robin by ``rotate``."""
    if rotate is None:
        return PLAN_ORACLES
    per_level = len(JITS) * len(THREADS)
    return tuple(PLAN_ORACLES[i * per_level + (rotate + i) % per_level] for i in range(len(LEVELS)))


class Checker:
    """Runs oracles on one graph and its feeds; the reference outputs, their sensitivity and the optimized graphs
    are computed once and shared by the oracles."""

    def __init__(self, graph: Graph, feeds: Mapping[str, np.ndarray]):
        self.graph = graph
        self.feeds = dict(feeds)
        self.want = reference_outputs(graph, self.feeds)
        self.scale = input_scale(self.feeds)
        self.floor = precision_floor(graph)
        self._spread: dict[str, float] | None = None
        self._optimized: dict[int, Graph] = {}
        self.jit_fallbacks = 0

    @property
    def spread(self) -> dict[str, float]:
        if self._spread is None:
            self._spread = sensitivity(self.graph, self.feeds, self.want)
        return self._spread

    @property
    def unstable(self) -> list[str]:
        return [name for name, s in self.spread.items() if s]

    def optimized(self, level: int) -> Graph:
        if level not in self._optimized:
            from ..passes.manager import optimize

            self._optimized[level], _ = optimize(self.graph, opt_level=level)
        return self._optimized[level]

    # ------------------------------------------------------------------ running
    def check(self, oracle: str) -> Outcome:
        """Run one oracle; any exception it raises (other than "not applicable") is a disagreement."""
        try:
            if oracle.startswith("O"):
                return self._plan(oracle)
            return getattr(self, "_" + oracle.replace("-", "_"))(oracle)
        except _NotApplicable as exc:
            return Outcome(oracle, "n/a", detail=str(exc))
        except _OutsideOnnx as exc:
            return Outcome(oracle, "invalid", detail=str(exc))
        except _Refused as exc:
            return Outcome(oracle, "refused", detail=str(exc))
        except Exception as exc:
            if isinstance(exc, TlcError) and self.spread and all(np.isinf(s) for s in self.spread.values()):
                # the reference fails too, or changes every output's shape, under rounding noise: MVN's +-1
                # truncated to a shape of 0 or -1
                return Outcome(oracle, "n/a", detail=f"raised {type(exc).__name__} on a graph that rounding noise "
                                                     f"makes fail in the reference too: {_first_line(exc)}")
            return Outcome(oracle, "disagree", [Mismatch("*", np.inf, 0.0, f"raised {type(exc).__name__}: "
                                                                             f"{_first_line(exc)}")])

    def check_all(self, oracles: Sequence[str] = ORACLES) -> list[Outcome]:
        return [self.check(name) for name in oracles]

    def _judge(self, oracle: str, got: Mapping[str, np.ndarray], *, want: Mapping[str, np.ndarray] | None = None,
               exact: bool = False, note: str = "", min_rtol: float = 0.0) -> Outcome:
        if exact:
            mismatches = compare(got, self.want if want is None else want, exact=True, scale=self.scale)
        else:
            floor = {name: max(min_rtol, f) for name, f in self.floor.items()}
            mismatches = compare(got, self.want, scale=self.scale, min_rtol=floor)
            if mismatches:  # only now pay for the sensitivity runs: most graphs agree within plain tolerance
                mismatches = compare(got, self.want, spread=self.spread, scale=self.scale, min_rtol=floor)
        for m in mismatches:
            m.detail = f"{note}{m.detail}"
        return Outcome(oracle, "disagree" if mismatches else "ok", mismatches)

    def _plan(self, oracle: str) -> Outcome:
        from ..runtime.compiler import compile as tlc_compile

        level, jit, threads = oracle.split("-")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = tlc_compile(self.graph, opt_level=int(level[1:]), jit=jit, num_threads=int(threads[1:]),
                               hot_threshold=2)
            with np.errstate(all="ignore"):
                first = plan.run(self.feeds)
                if jit == "lazy":
                    plan.run(self.feeds)
                    plan.wait_for_jit()
                    last = plan.run(self.feeds)
        self.jit_fallbacks += sum("could not be compiled" in str(w.message) for w in caught)
        outcome = self._judge(oracle, first, note="fallback run: " if jit == "lazy" else "")
        if jit == "lazy" and outcome.status == "ok":
            outcome = self._judge(oracle, last, note="native run: ")
        return outcome

    def _ort(self, oracle: str) -> Outcome:
        graph = self.optimized(2) if oracle == "ort-O2" else self.graph
        try:
            got, model = run_onnxruntime(graph, self.feeds, source=self.graph)
        except (_Refused, _OutsideOnnx) as exc:
            if oracle != "ort-O2":
                raise
            try:  # onnxruntime refusing the -O2 export of a graph it runs is an export or optimization defect
                run_onnxruntime(self.graph, self.feeds)
            except Exception:
                raise exc from None
            return Outcome(oracle, "disagree", [Mismatch("*", np.inf, 0.0, f"onnxruntime runs the graph but "
                                                                             f"refuses its -O2 export: {exc}")])
        # NOTE: ONNX stores float attributes as float32 (epsilon, Shrink's bias), and onnxruntime computes some
        # float64 ops in float32 (the window functions): float64 outputs are compared at float32's tolerance
        outcome = self._judge(oracle, got, min_rtol=RTOL["float32"])
        if outcome.status == "disagree" and (self._onnx_reference_agrees(graph, outcome)
                                             or shapes_agree_with_onnx_inference(model, self.want, got)):
            differs = "; ".join(map(str, outcome.mismatches))
            return Outcome(oracle, "arbitrated", detail="onnxruntime differs from ONNX's reference evaluator or its "
                                                        f"shape inference, which agree with tlc: {differs}")
        known = self._known_onnxruntime_nans(graph, outcome, got) if outcome.status == "disagree" else None
        if known:
            return Outcome(oracle, "arbitrated", detail=f"a known onnxruntime deviation: {known}")
        return outcome

    def _known_onnxruntime_nans(self, graph: Graph, outcome: Outcome, got: Mapping[str, np.ndarray]) -> str | None:
        """Why onnxruntime's NaNs are a deviation of its own (``KNOWN_ONNXRUNTIME_NANS``, for a graph holding such
        an op), when NaN where tlc has a number is all that differs; None otherwise."""
        why = [KNOWN_ONNXRUNTIME_NANS[n.op] for n in graph.ops() if n.op in KNOWN_ONNXRUNTIME_NANS]
        if not why:
            return None
        for m in outcome.mismatches:
            if m.output == "*":
                return None
            theirs, mine = np.asarray(got[m.output]), self.want[m.output]
            if theirs.shape != mine.shape or theirs.dtype != mine.dtype or mine.dtype.kind != "f":
                return None
            extra = np.isnan(theirs) & ~np.isnan(mine)
            if not extra.any() or (np.isnan(mine) & ~np.isnan(theirs)).any():
                return None
            rest = ~extra
            if compare({"x": theirs[rest]}, {"x": mine[rest]}, scale=self.scale, min_rtol=RTOL["float32"]):
                return None
        return why[0]

    _ort_O2 = _ort

    def _onnx_reference_agrees(self, graph: Graph, outcome: Outcome) -> bool:
        """ONNX's reference evaluator on the outputs that differ (alone: it may not run the rest) computes tlc's."""
        from ..io.onnx_export import to_onnx

        names = {m.output for m in outcome.mismatches}
        if "*" in names:
            return False
        sub = graph.copy()
        sub.outputs = [(v, name) for v, name in sub.outputs if name in names]
        sub.remove_unused()
        feeds = {n.name: self.feeds[n.name] for n in sub.inputs if n.name in self.feeds}
        want = {name: self.want[name] for _, name in sub.outputs}
        try:
            model = to_onnx(sub)
        except Exception:
            return False
        # the evaluator computes in the graph's own types (float16 where tlc widens to float32): compare at the
        # narrowest float type's tolerance (a float16 training BatchNorm's running variance; fuzz seed 806455)
        return agrees_with_onnx_reference(model, feeds, want, min_rtol=max(self.floor[name] for name in names))

    def _text(self, oracle: str) -> Outcome:
        from ..ir.text import parse_graph, print_graph

        def round_trip(g: Graph) -> Graph:
            tensors: dict[str, np.ndarray] = {}
            return parse_graph(print_graph(g, tensors=tensors), tensors=tensors)

        return self._round_trip(oracle, round_trip)

    def _graphml(self, oracle: str) -> Outcome:
        from ..io.dumps import read_graphml, write_graphml

        def round_trip(g: Graph) -> Graph:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "g.graphml"
                write_graphml(g, path)
                return read_graphml(path)

        return self._round_trip(oracle, round_trip)

    def _round_trip(self, oracle: str, round_trip) -> Outcome:
        """The graph, then its -O2 graph, through ``round_trip``: verified, and the same outputs bit for bit."""
        for label, g, want in (("", self.graph, self.want), ("-O2 graph: ", self.optimized(2), None)):
            back = round_trip(g)
            back.verify()
            if want is None:
                want = reference_outputs(g, self.feeds)
            outcome = self._judge(oracle, reference_outputs(back, self.feeds), want=want, exact=True, note=label)
            if outcome.status != "ok":
                return outcome
        return outcome

    def _tlc_opt(self, oracle: str) -> Outcome:
        from ..cli import main
        from ..ir.text import load_text, save_text

        with tempfile.TemporaryDirectory() as tmp:
            source, target = Path(tmp) / "in.tlc", Path(tmp) / "out.tlc"
            save_text(self.graph, source)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                status = main([str(source), "-O2", "-o", str(target)])
            if status != 0:
                return Outcome(oracle, "disagree", [Mismatch("*", np.inf, 0.0, f"tlc-opt exited {status}: "
                                                                                 f"{err.getvalue().strip()}")])
            back = load_text(target)
        want = reference_outputs(self.optimized(2), self.feeds)
        return self._judge(oracle, reference_outputs(back, self.feeds), want=want, exact=True)


class _NotApplicable(Exception):
    """The oracle cannot run this graph, and that is no bug (onnxruntime lacks the op or type)."""


class _Refused(Exception):
    """onnxruntime refused the exported model (at load or run time) though ONNX's checks pass: an input value the
    spec leaves undefined that tlc computes anyway (Pad "reflect" over a length-1 axis, an even LRN size), or an
    export defect. Counted apart, with onnxruntime's message, for triage."""


class _OutsideOnnx(Exception):
    """onnxruntime refused the exported model and so does ONNX's own strict shape inference: tlc accepted a graph
    the ONNX spec does not allow (an input of a shape or rank the spec forbids). Counted apart: tlc is lenient
    there, which is a finding about validation, not a wrong result."""


#: onnxruntime messages that mean "not implemented", whatever exception class carries them
_ORT_NOT_IMPLEMENTED = ("NOT_IMPLEMENTED", "Could not find an implementation", "not implemented",
                        "is not a registered function/op")


def agrees_with_onnx_reference(model, feeds: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                               min_rtol: float = 0.0) -> bool:
    """Whether ONNX's own reference evaluator computes ``want`` on ``model`` (within tolerance, at least
    ``min_rtol``): the tie-break when onnxruntime and tlc differ. False when it cannot run the model."""
    from onnx.reference import ReferenceEvaluator

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = ReferenceEvaluator(model).run(None, dict(feeds))
    except Exception:
        return False
    got = {name: np.asarray(r) for name, r in zip(want, results)}
    for name, r in got.items():   # the evaluator keeps X's float16 where the spec's type is float32 (BatchNorm's stats)
        if r.dtype.kind == "f" and want[name].dtype.kind == "f" and r.dtype != want[name].dtype:
            got[name] = r.astype(want[name].dtype)
    return len(results) == len(want) and not compare(got, want, scale=input_scale(feeds), min_rtol=min_rtol)


def shapes_agree_with_onnx_inference(model, want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> bool:
    """Whether every output onnxruntime gave another shape than tlc has the shape ONNX's own shape inference
    gives the model, and that is tlc's (onnxruntime's pooling with SAME padding and dilations makes a 3 x 1 plane
    of a 3 x 3 one; it warns that the shape differs from the model's)."""
    import onnx.shape_inference

    differ = [name for name in want if name in got and np.shape(got[name]) != np.shape(want[name])]
    if not differ:
        return False
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output
    except Exception:
        return False
    shapes = {}
    for out in inferred:
        dims = out.type.tensor_type.shape.dim
        shapes[out.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)

    def agrees(name: str) -> bool:
        # a symbolic dimension (a batch ``N``) matches any size; the ones onnxruntime got wrong must be known
        shape, mine, theirs = shapes.get(name), np.shape(want[name]), np.shape(got[name])
        if shape is None or len(shape) != len(mine):
            return False
        if len(theirs) != len(mine):
            return all(s == m for s, m in zip(shape, mine))
        return all(s == m if t != m else s in (None, m) for s, m, t in zip(shape, mine, theirs))

    return all(agrees(name) for name in differ)


def run_onnxruntime(graph: Graph, feeds: Mapping[str, np.ndarray], source: Graph | None = None):
    """The graph exported to ONNX and run in onnxruntime (one thread): (outputs, model). ``_NotApplicable`` when
    onnxruntime or the exporter does not implement something in it. Whether a graph onnxruntime refuses is
    outside ONNX is asked of ``source`` (the unoptimized graph, default ``graph``): an optimized graph that
    fails ONNX's checks where its source passes is an export defect, a disagreement."""
    import onnx.shape_inference
    import onnxruntime as ort

    from ..io.onnx_export import to_onnx

    try:
        model = to_onnx(graph)
    except UnsupportedOperatorError as exc:
        raise _NotApplicable(f"export: {_first_line(exc)}") from None
    ort.set_default_logger_severity(4)  # its kernels' refusals come back as exceptions; no log lines too
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        results = session.run(names, dict(feeds))
    except Exception as exc:
        text = str(exc)
        if type(exc).__name__ == "NotImplemented" or any(s in text for s in _ORT_NOT_IMPLEMENTED):
            raise _NotApplicable(f"onnxruntime: {_first_line(exc)}") from None
        try:
            checked = model if source is None or source is graph else to_onnx(source)
            onnx.shape_inference.infer_shapes(checked, check_type=True, strict_mode=True)
        except Exception as invalid:
            raise _OutsideOnnx(f"onnx: {_first_line(invalid)}") from None
        raise _Refused(f"onnxruntime: {_first_line(exc)}") from None
    return {name: np.asarray(r) for name, r in zip(names, results)}, model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


@dataclass
class CaseReport:
    """Every oracle's outcome on one case."""

    outcomes: list[Outcome]
    unstable: list[str]
    jit_fallbacks: int = 0

    @property
    def disagreements(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "disagree"]


def check_case(case, oracles: Sequence[str] = ORACLES) -> CaseReport:
    """Run ``oracles`` (default: all of them) on a generated ``Case``."""
    checker = Checker(case.graph, case.feeds)
    outcomes = checker.check_all(oracles)
    unstable = checker.unstable if checker._spread is not None else []
    return CaseReport(outcomes, unstable, checker.jit_fallbacks)
