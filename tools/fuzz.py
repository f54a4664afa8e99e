"""Differential fuzzing campaigns: random graphs over the whole op registry through every oracle.

    python tools/fuzz.py --minutes 10                  # a campaign; report in fuzz-out/report.md (+ .json)
    python tools/fuzz.py --graphs 200 --seed 1000      # a fixed sample (what CI's bounded sample replays)
    python tools/fuzz.py --graphs 50 --rotate-plans    # one plan variant per opt level per graph (faster)

Graph ``i`` is ``tlc.testing.generate(seed + i)``, so any graph of a report can be rebuilt from its seed. Ops
are drawn with weights that favour the ones exercised least so far, so a campaign covers the registry evenly.
A disagreement is shrunk (greedy node deletion keeping it) and written as a reproducer into ``<out>/repro/``
(``.tlc``, ``.onnx``, feeds ``.npz`` and ``.json``); disagreements that shrink to the same oracle and ops are
counted once. A compiled plan's disagreement is blamed on the first pass step that changes the reference's
outputs (``tlc.passes.bisect``), or else on the kernels and runtime. A progress line goes to stderr; the report
counts graphs, nodes, ops exercised, op-pair coverage (producer -> consumer), outcomes per oracle, unstable
outputs, and the generator's own findings (an op whose shape inference and reference disagree). A process keeps
every kernel it compiled (~2.5 MB a graph with every oracle), so a campaign longer than ``--chunk`` graphs runs
as child processes, each handing its counts on to the next of its chain in ``<out>/state-<j>.json``; ``--jobs``
chains run side by side. Ctrl-C reports the graphs checked so far.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from tlc.testing import fuzzable_ops, generate
from tlc.testing.oracles import ORACLES, PLAN_ORACLES, check_case, plan_oracles
from tlc.testing.shrink import disagrees, save_reproducer, shrink


def blame_step(graph, feeds, oracle: str) -> str:
    """For a compiled plan's disagreement: the first pass step that changes the reference's outputs
    (``tlc.passes.bisect``), else the kernels and runtime (the passes kept the outputs)."""
    if not oracle.startswith("O"):
        return ""
    try:
        from tlc.passes.bisect import bisect

        result = bisect(graph, feeds, opt_level=int(oracle.split("-")[0][1:]))
    except Exception as exc:  # bisect is a diagnosis: never let it stop a campaign
        return f"bisect failed: {type(exc).__name__}: {exc}"
    if result.first is not None:
        return f"pass {result.first}"
    return "kernels or runtime: no pass step changes the reference's outputs"


class Campaign:
    """Counts of one campaign, and its reproducers."""

    def __init__(self, out: Path, do_shrink: bool = True):
        self.out = out
        self.do_shrink = do_shrink
        self.specs = fuzzable_ops()
        self.graphs = 0
        self.nodes = 0
        self.ops: Counter = Counter()
        self.pairs: Counter = Counter()
        self.outcomes: dict[str, Counter] = defaultdict(Counter)
        self.not_applicable: Counter = Counter()
        self.disagreements: list[dict] = []
        self.signatures: Counter = Counter()
        self.findings: dict[str, int] = {}
        self.nondeterministic: Counter = Counter()
        self.unstable = 0
        self.jit_fallbacks = 0
        self.refused = 0
        self.start = time.monotonic()

    def weights(self) -> list[float]:
        return [1.0 / np.sqrt(1.0 + self.ops[s.name]) for s in self.specs]

    def run_one(self, seed: int, oracles: tuple[str, ...]) -> None:
        case = generate(seed, weights=self.weights())
        g = case.graph
        self.graphs += 1
        self.refused += case.refused
        for node in g.ops():
            if node.op in ("Constant",):
                continue
            self.nodes += 1
            self.ops[node.qualified_op] += 1
            for v in node.outputs:
                for user, _ in g.users(v):
                    self.pairs[(node.qualified_op, user.qualified_op)] += 1
        for finding in case.findings:
            self.findings.setdefault(finding, seed)
        for op in case.nondeterministic:
            self.nondeterministic[op.split(" ")[0]] += 1
        report = check_case(case, oracles)
        self.unstable += bool(report.unstable)
        self.jit_fallbacks += report.jit_fallbacks
        for outcome in report.outcomes:
            key = outcome.oracle if not outcome.oracle.startswith("O") else outcome.oracle
            self.outcomes[key][outcome.status] += 1
            if outcome.status in ("n/a", "invalid", "refused", "arbitrated"):
                self.not_applicable[f"{outcome.status} {outcome.oracle}: {outcome.detail[:160]}"] += 1
        for outcome in report.disagreements:
            self.record(seed, case, outcome)

    def record(self, seed: int, case, outcome) -> None:
        graph, feeds = case.graph, case.feeds
        if self.do_shrink:
            graph, feeds = shrink(graph, feeds, disagrees(outcome.oracle))
        ops = sorted({n.qualified_op for n in graph.ops() if n.op != "Constant"})
        family = outcome.oracle.split("-")[0] if outcome.oracle.startswith("O") else outcome.oracle
        signature = f"{family}: {' '.join(ops)}"
        self.signatures[signature] += 1
        if self.signatures[signature] > 1:
            return
        ident = f"fuzz-{seed}-{outcome.oracle}"
        blame = blame_step(graph, feeds, outcome.oracle)
        repro = save_reproducer(self.out / "repro", ident, graph, feeds, outcome, seed, ops=ops, blame=blame)
        self.disagreements.append({"id": ident, "oracle": outcome.oracle, "seed": seed, "ops": ops,
                                   "max_error": repro.max_error, "detail": str(outcome)[:600],
                                   "signature": signature, "blame": blame})

    # ------------------------------------------------------------------ state (campaigns run in chunks)
    def save_state(self, path: Path) -> None:
        """Everything counted so far, as JSON: a campaign in chunks hands it from one child process to the next."""
        state = {"graphs": self.graphs, "nodes": self.nodes, "ops": dict(self.ops),
                 "pairs": [[a, b, n] for (a, b), n in self.pairs.items()],
                 "outcomes": {k: dict(v) for k, v in self.outcomes.items()},
                 "not_applicable": dict(self.not_applicable), "disagreements": self.disagreements,
                 "signatures": dict(self.signatures), "findings": self.findings,
                 "nondeterministic": dict(self.nondeterministic), "unstable": self.unstable,
                 "jit_fallbacks": self.jit_fallbacks, "refused": self.refused,
                 "seconds": time.monotonic() - self.start}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)

    def load_state(self, path: Path) -> None:
        """Add the counts a chunk saved in ``path`` to this campaign's (chains of chunks run side by side merge
        so: disagreements already seen under the same signature are counted, not listed again)."""
        state = json.loads(path.read_text())
        self.graphs += state["graphs"]
        self.nodes += state["nodes"]
        self.ops.update(state["ops"])
        self.pairs.update({(a, b): n for a, b, n in state["pairs"]})
        for oracle, counts in state["outcomes"].items():
            self.outcomes[oracle].update(counts)
        self.not_applicable.update(state["not_applicable"])
        for d in state["disagreements"]:
            if d["signature"] not in self.signatures:
                self.disagreements.append(d)
        self.signatures.update(state["signatures"])
        for finding, seed in state["findings"].items():
            self.findings.setdefault(finding, seed)
        self.nondeterministic.update(state["nondeterministic"])
        self.unstable += state["unstable"]
        self.jit_fallbacks += state["jit_fallbacks"]
        self.refused += state["refused"]
        self.start = min(self.start, time.monotonic() - state["seconds"])

    # ------------------------------------------------------------------ output
    def progress(self) -> str:
        minutes, seconds = divmod(int(time.monotonic() - self.start), 60)
        disagree = sum(c["disagree"] for c in self.outcomes.values())
        return (f"[{minutes:02d}:{seconds:02d}] graphs {self.graphs}  nodes {self.nodes}  "
                f"ops {len(self.ops)}/{len(self.specs)}  pairs {len(self.pairs)}  "
                f"disagreements {disagree} ({len(self.signatures)} unique)  findings {len(self.findings)}")

    def summary(self) -> dict:
        return {
            "graphs": self.graphs, "nodes": self.nodes, "seconds": round(time.monotonic() - self.start, 1),
            "fuzzable_ops": len(self.specs), "ops_exercised": len(self.ops),
            "ops_not_exercised": sorted({s.name for s in self.specs} - set(self.ops)),
            "op_pairs": len(self.pairs), "candidates_refused": self.refused,
            "graphs_with_unstable_outputs": self.unstable, "jit_fallbacks": self.jit_fallbacks,
            "outcomes": {k: dict(v) for k, v in sorted(self.outcomes.items())},
            "not_applicable": dict(self.not_applicable.most_common()),
            "disagreements": self.disagreements, "disagreement_signatures": dict(self.signatures),
            "generator_findings": [{"finding": f, "seed": s} for f, s in self.findings.items()],
            "nondeterministic_candidates": dict(self.nondeterministic),
            "op_counts": dict(self.ops.most_common()),
        }

    def markdown(self, summary: dict) -> str:
        lines = ["# Fuzzing campaign", "",
                 f"{summary['graphs']} graphs, {summary['nodes']} nodes in {summary['seconds']} s; "
                 f"{summary['ops_exercised']} of {summary['fuzzable_ops']} fuzzable ops exercised, "
                 f"{summary['op_pairs']} op pairs (producer -> consumer); "
                 f"{summary['graphs_with_unstable_outputs']} graphs with outputs unstable under rounding; "
                 f"{summary['jit_fallbacks']} kernels that fell back.", "",
                 "| oracle | ok | disagree | n/a | invalid | refused | arbitrated |", "|---|---|---|---|---|---|---|"]
        for oracle, counts in summary["outcomes"].items():
            lines.append(f"| {oracle} | {counts.get('ok', 0)} | {counts.get('disagree', 0)} | "
                         f"{counts.get('n/a', 0)} | {counts.get('invalid', 0)} | {counts.get('refused', 0)} | "
                         f"{counts.get('arbitrated', 0)} |")
        lines += ["", f"## Disagreements ({len(self.disagreements)} unique)", ""]
        for d in self.disagreements:
            lines.append(f"- `{d['id']}` ({self.signatures[d['signature']]}x) {d['signature']}: "
                         f"{d['detail'].splitlines()[-1].strip()[:200]}" + (f" [{d['blame']}]" if d["blame"] else ""))
        lines += ["", f"## Generator findings: inference and reference disagree ({len(self.findings)})", ""]
        lines += [f"- seed {s}: {f[:300]}" for f, s in self.findings.items()]
        lines += ["", "## Pure ops whose reference was nondeterministic (candidates refused)", ""]
        lines += [f"- {op}: {n}" for op, n in self.nondeterministic.most_common()] or ["none"]
        lines += ["", "## Not applicable, invalid, refused, arbitrated (most common)", ""]
        lines += [f"- {n}x {k}" for k, n in list(summary["not_applicable"].items())[:40]]
        lines += ["", "## Ops not exercised", "", ", ".join(summary["ops_not_exercised"]) or "none", ""]
        return "\n".join(lines)

    def write(self) -> dict:
        summary = self.summary()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "report.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        (self.out / "report.md").write_text(self.markdown(summary))
        return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None, help="run for this long")
    parser.add_argument("--graphs", type=int, default=None, help="run this many graphs (default 100 without "
                                                                 "--minutes)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first graph (graph i: seed + i)")
    parser.add_argument("--out", default="fuzz-out", help="directory of the report and reproducers")
    parser.add_argument("--oracles", default=None, help=f"comma-separated subset of {', '.join(ORACLES)}")
    parser.add_argument("--rotate-plans", action="store_true",
                        help="one plan variant (jit, threads) per opt level per graph, round robin")
    parser.add_argument("--no-shrink", action="store_true", help="save disagreements as generated")
    parser.add_argument("--chunk", type=int, default=500,
                        help="graphs per child process (0: all in this one); a process keeps every kernel it "
                             "compiled, ~2.5 MB a graph, so long campaigns run in chunks")
    parser.add_argument("--jobs", type=int, default=1, help="chains of chunks run side by side (processes)")
    parser.add_argument("--state", default=None, help=argparse.SUPPRESS)   # a chunk's hand-over file
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    limit = args.graphs if args.graphs is not None else (None if args.minutes else 100)
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    chosen = tuple(args.oracles.split(",")) if args.oracles else ORACLES
    unknown = set(chosen) - set(ORACLES)
    if unknown:
        parser.error(f"unknown oracle(s) {', '.join(sorted(unknown))}; known: {', '.join(ORACLES)}")
    if args.chunk and (limit is None or limit > args.chunk or args.jobs > 1):
        return run_in_chunks(args, argv if argv is not None else sys.argv[1:], limit, deadline)
    campaign = Campaign(Path(args.out), do_shrink=not args.no_shrink)
    state = Path(args.state) if args.state else None
    if state is not None and state.exists():
        campaign.load_state(state)
    tty = sys.stderr.isatty()
    i = 0
    try:
        while (limit is None or i < limit) and (deadline is None or time.monotonic() < deadline):
            oracles = chosen
            if args.rotate_plans:
                keep = set(plan_oracles(rotate=i))
                oracles = tuple(o for o in chosen if o not in PLAN_ORACLES or o in keep)
            campaign.run_one(args.seed + i, oracles)
            i += 1
            if tty:
                print("\r" + campaign.progress(), end="", file=sys.stderr, flush=True)
            elif i % 25 == 0:
                print(campaign.progress(), file=sys.stderr, flush=True)
    except KeyboardInterrupt:   # Ctrl-C ends a campaign early: the graphs checked so far are still reported
        print(f"\ninterrupted at seed {args.seed + i}: reporting the graphs checked so far", file=sys.stderr)
        if state is not None:
            campaign.save_state(state)
            raise
    if state is not None:       # a chunk: the parent reports
        campaign.save_state(state)
        return 0
    summary = campaign.write()
    print(("\n" if tty else "") + campaign.progress(), file=sys.stderr)
    print(f"report: {Path(args.out) / 'report.md'}; {len(campaign.disagreements)} unique disagreements, "
          f"{len(campaign.findings)} generator findings", file=sys.stderr)
    return 1 if summary["disagreements"] or summary["generator_findings"] else 0


def run_in_chunks(args, argv: list[str], limit: int | None, deadline: float | None) -> int:
    """The campaign as child processes of ``--chunk`` graphs each: chunk c takes the seeds from seed + c * chunk;
    ``--jobs`` chains of chunks run side by side (chain j the chunks j, j + jobs, ...), each child taking its
    chain's counts from a state file and handing them on; then the chains' counts merged into one report."""
    import subprocess
    import threading

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, args.jobs)
    states = [out / f"state-{j}.json" for j in range(jobs)]
    for state in states:
        state.unlink(missing_ok=True)
    chunks = None if limit is None else -(-limit // args.chunk)
    base = _without(argv, ("--graphs", "--seed", "--minutes", "--chunk", "--jobs"))

    def chain(j: int) -> None:
        c = j
        while (chunks is None or c < chunks) and (deadline is None or time.monotonic() < deadline):
            n = args.chunk if limit is None else min(args.chunk, limit - c * args.chunk)
            child = [sys.executable, __file__, *base, "--graphs", str(n), "--seed", str(args.seed + c * args.chunk),
                     "--chunk", "0", "--state", str(states[j])]
            if deadline is not None:
                child += ["--minutes", f"{max(0.0, deadline - time.monotonic()) / 60:.4f}"]
            status = subprocess.run(child).returncode
            if status != 0:
                print(f"chunk at seed {args.seed + c * args.chunk} exited {status}: its chain stops; reporting "
                      f"what it handed on", file=sys.stderr)
                return
            c += jobs

    threads = [threading.Thread(target=chain, args=(j,), daemon=True) for j in range(jobs)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
    except KeyboardInterrupt:   # the children got the signal too: each saves its chain's counts and exits
        print("\ninterrupted: reporting the graphs checked so far", file=sys.stderr)
        for t in threads:
            t.join()
    campaign = Campaign(out, do_shrink=not args.no_shrink)
    for state in states:
        if state.exists():
            campaign.load_state(state)
    summary = campaign.write()
    print(campaign.progress(), file=sys.stderr)
    print(f"report: {out / 'report.md'}; {len(campaign.disagreements)} unique disagreements, "
          f"{len(campaign.findings)} generator findings", file=sys.stderr)
    return 1 if summary["disagreements"] or summary["generator_findings"] else 0


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` less the given options and their values (``--opt value`` or ``--opt=value``)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in options)):
            kept.append(arg)
    return kept


if __name__ == "__main__":
    sys.exit(main())
