"""tlc against ONNX's backend node cases and light models; writes docs/conformance.md.

    python tools/conformance.py --compiled            # all 1884 node cases + 9 light models, also compiled
    python tools/conformance.py                       # the reference executor only
    python tools/conformance.py --json conformance.json --only 'relu|softmax' --no-models

Every case of ``onnx.backend.test.case.node.collect_testcases()`` and every model of
``onnx/backend/test/data/light`` is imported with ``tlc.io.onnx`` and run with the reference executor, and its
outputs are compared with the expected ones under the case's rtol/atol (``tests/onnx_cases.run_case``, the same
runner the tests use). A case is *unsupported* when tlc refuses it by name (UnsupportedOperatorError: an op that is
not registered, an element type such as bfloat16, a sequence or optional value); otherwise it passes or fails.

The headline pass rate is over the cases whose ops are all registered and that tlc does not refuse by design
(types it does not hold): pass / (pass + fail). The strict rate, pass / all registered-op cases, is shown beside
it. Per-op rows group a case under the op it tests (an ``_expanded`` case under the op it expands). Progress goes
to stderr; the report is deterministic (no times), so it only changes when results do.

``--compiled`` also runs every case that passes in the reference executor through ``tlc.compile(graph,
opt_level=2, jit="eager")`` and at ``opt_level=3`` (``--levels``), compared with the same expected outputs. A
fused group that fails to compile fails the case (``onnx_cases.CompiledRunner``'s ``strict_jit``). Kernels go to
the kernel cache (``--cache-dir``, default $TLC_CACHE_DIR): a second run with the same cache compiles nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import onnx_cases  # noqa: E402  (tests/onnx_cases.py: the shared case runner)
from onnx_cases import FAIL, PASS, UNSUPPORTED  # noqa: E402

from tlc.io.onnx import read_model  # noqa: E402
from tlc.ops import is_registered  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
TARGET_RATE = 0.95


@dataclasses.dataclass
class CaseResult:
    name: str
    kind: str              # "node" or "model"
    op: str                # the op under test (qualified); the model name for light models
    ops: list[str]         # every op the case's model uses
    registered: bool       # all of them are registered in tlc (or the case ran: conversion made them so)
    status: str            # pass / fail / unsupported
    reason: str = ""
    seconds: float = 0.0
    # compiled plans, by label ("-O2"): {"status", "reason", "seconds"}; only for cases that pass in the reference
    compiled: dict[str, dict] = dataclasses.field(default_factory=dict)


# ---------------------------------------------------------------------------- collecting cases
def _qualified(domain: str, op: str) -> str:
    return op if domain in ("", "ai.onnx") else f"{domain}.{op}"


def _split(qualified: str) -> tuple[str, str]:
    domain, _, op = qualified.rpartition(".")
    return domain, op


def _registered(qualified: str) -> bool:
    domain, op = _split(qualified)
    return is_registered(op, domain)


def node_cases() -> list:
    return list(onnx_cases.all_cases())


def light_cases() -> list:
    """The light models as cases: ONNX's runner inputs (np.arange(n).reshape(shape) / n) and shipped outputs."""
    from onnx.backend.test.case.model import collect_testcases

    tolerances = {c.model_name: (c.rtol, c.atol) for c in collect_testcases() if c.kind == "real"}
    cases = []
    for path in sorted(glob.glob(str(LIGHT_DIR / "light_*.onnx"))):
        name = Path(path).stem.removeprefix("light_")
        model = read_model(path)
        feeds = []
        for vi in (v for v in model.graph.input if v.name in onnx_cases.input_names(model)):
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            feeds.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        expected = [onnx.load_tensor(f"{path[:-5]}_output_{i}.pb") for i in range(len(model.graph.output))]
        rtol, atol = tolerances.get(name, (1e-3, 1e-7))
        cases.append(SimpleNamespace(name=f"test_{name}", model=model, data_sets=[(feeds, expected)],
                                     rtol=rtol, atol=atol, kind="model"))
    return cases


def ops_under_test(cases: Iterable) -> dict[str, str]:
    """Case name -> the op it tests: its first non-Constant node's op; an expanded case takes its base case's."""
    def first_op(case) -> str:
        nodes = [n for n in case.model.graph.node if n.op_type != "Constant"] or list(case.model.graph.node)
        return _qualified(nodes[0].domain, nodes[0].op_type) if nodes else "(empty)"

    cases = list(cases)
    direct = {c.name: first_op(c) for c in cases}
    result = {}
    for case in cases:
        base = case.name.split("_expanded", 1)[0]
        result[case.name] = direct.get(base, direct[case.name]) if "_expanded" in case.name else direct[case.name]
    return result


# ---------------------------------------------------------------------------- running
def _run_one(case, runner: onnx_cases.Runner = onnx_cases.reference_runner) -> tuple[str, str, float]:
    t0 = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        status, reason = onnx_cases.run_case(case, runner)
    return status, reason, time.perf_counter() - t0


def compiled_runners(levels: Iterable[int] = (2, 3), cache_dir: str | None = None) -> dict[str, Callable]:
    """Label -> runner: compiled plans at each opt level with eager JIT."""
    runners = [onnx_cases.CompiledRunner(opt_level=level, jit="eager", cache_dir=cache_dir) for level in levels]
    return {r.label: r for r in runners}


def run_cases(cases: list, progress: Callable[[str], None] | None = None,
              compiled: Mapping[str, onnx_cases.Runner] | None = None) -> list[CaseResult]:
    """Run every case through tlc; ``progress`` gets a line now and then.

    ``compiled`` (label -> runner, see ``compiled_runners``): each case that passes in the reference executor
    also runs through each of these, its results under ``CaseResult.compiled[label]``.
    """
    compiled = dict(compiled or {})
    under_test = ops_under_test(c for c in cases if getattr(c, "kind", "node") != "model")
    results: list[CaseResult] = []
    start = time.perf_counter()
    for i, case in enumerate(cases, 1):
        kind = "model" if getattr(case, "kind", "node") == "model" else "node"
        ops = sorted({_qualified(n.domain, n.op_type) for n in case.model.graph.node})
        status, reason, seconds = _run_one(case)
        # NOTE: a case tlc imported has only registered ops after opset conversion (Upsample -> Resize).
        registered = status != UNSUPPORTED or all(map(_registered, ops))
        result = CaseResult(case.name, kind, under_test.get(case.name, case.name.removeprefix("test_")), ops,
                            registered, status, reason, seconds)
        if status == PASS:
            for label, runner in compiled.items():
                c_status, c_reason, c_seconds = _run_one(case, runner)
                result.compiled[label] = {"status": c_status, "reason": c_reason, "seconds": c_seconds}
        results.append(result)
        if progress and (kind == "model" or i % 200 == 0 or i == len(cases)):
            progress(_progress_line(i, len(cases), time.perf_counter() - start, results, compiled))
    return results


def _progress_line(i: int, n: int, seconds: float, results: list[CaseResult], compiled: Mapping) -> str:
    counts = Counter(r.status for r in results)
    line = (f"[{i:4d}/{n}] {seconds:6.1f}s  pass {counts[PASS]}  fail {counts[FAIL]}  "
            f"unsupported {counts[UNSUPPORTED]}")
    for label in compiled:
        ok = sum(r.compiled.get(label, {}).get("status") == PASS for r in results)
        line += f"  {label} {ok}/{counts[PASS]}"
    last = results[-1]
    if last.kind == "model":
        line += f"  ({last.name}: {last.status}, {last.seconds:.1f}s" + "".join(
            f"; {label} {c['status']}, {c['seconds']:.1f}s" for label, c in last.compiled.items()) + ")"
    return line


# ---------------------------------------------------------------------------- summarizing
def summarize(results: list[CaseResult]) -> dict:
    registered = [r for r in results if r.registered]
    counts = Counter(r.status for r in registered)
    decided = counts[PASS] + counts[FAIL]
    return {
        "cases": len(results),
        "node_cases": sum(r.kind == "node" for r in results),
        "model_cases": sum(r.kind == "model" for r in results),
        "registered_op_cases": len(registered),
        "pass": counts[PASS],
        "fail": counts[FAIL],
        "unsupported": sum(r.status == UNSUPPORTED for r in results),
        "unsupported_registered": counts[UNSUPPORTED],
        "pass_rate": counts[PASS] / decided if decided else 0.0,
        "strict_pass_rate": counts[PASS] / len(registered) if registered else 0.0,
        "all_pass": sum(r.status == PASS for r in results),
        "compiled": {label: _compiled_counts(results, label) for label in compiled_labels(results)},
    }


def compiled_labels(results: list[CaseResult]) -> list[str]:
    """The compiled configurations the results hold ("-O2", "-O3"), in the order they ran."""
    return list(dict.fromkeys(label for r in results for label in r.compiled))


def _compiled_counts(results: list[CaseResult], label: str) -> dict:
    ran = [r.compiled[label] for r in results if label in r.compiled]
    passed = sum(c["status"] == PASS for c in ran)
    return {"ran": len(ran), "pass": passed, "fail": len(ran) - passed,
            "pass_rate": passed / len(ran) if ran else 0.0, "seconds": sum(c["seconds"] for c in ran)}


def compiled_failures(results: list[CaseResult]) -> list[tuple[str, str, str]]:
    """(case, label, reason) of every case that passes in the reference executor but not compiled."""
    return [(r.name, label, c["reason"]) for r in results for label, c in r.compiled.items()
            if c["status"] != PASS]


def short_reason(reason: str, limit: int = 110) -> str:
    """One line of a failure or refusal, with markdown-breaking characters and long numbers tamed."""
    text = re.sub(r"\s+", " ", reason).replace("|", "/").strip()
    text = re.sub(r"the model uses \d+ operator\(s\) tlc does not support: ", "needs ", text)
    text = re.sub(r"the model uses \d+ value type\(s\) tlc does not support: ", "types: ", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def op_rows(results: list[CaseResult]) -> list[dict]:
    """One row per op under test: counts and the most common failure (or refusal) reason."""
    rows = []
    for op in sorted({r.op for r in results if r.kind == "node"}, key=str.lower):
        mine = [r for r in results if r.kind == "node" and r.op == op]
        counts = Counter(r.status for r in mine)
        fails = Counter(short_reason(r.reason) for r in mine if r.status == FAIL)
        refusals = Counter(re.sub(r" x\d+\b", "", short_reason(r.reason, 70)) for r in mine if r.status == UNSUPPORTED)
        reason = ""
        if fails:
            text, n = fails.most_common(1)[0]
            example = next(r.name for r in mine if r.status == FAIL and short_reason(r.reason) == text)
            reason = f"{example}: {text}" + (f" (+{counts[FAIL] - n} other)" if counts[FAIL] > n else "")
        elif refusals:
            reason = refusals.most_common(1)[0][0]
        row = {"op": op, "registered": _registered(op), "cases": len(mine), "pass": counts[PASS],
               "fail": counts[FAIL], "unsupported": counts[UNSUPPORTED], "reason": reason}
        for label in compiled_labels(results):
            row[label] = sum(r.compiled.get(label, {}).get("status") == PASS for r in mine)
            bad = [r for r in mine if r.compiled.get(label, {}).get("status", PASS) != PASS]
            if bad and not row["reason"]:
                row["reason"] = f"{label} {bad[0].name}: {short_reason(bad[0].compiled[label]['reason'])}" + (
                    f" (+{len(bad) - 1} other)" if len(bad) > 1 else "")
        rows.append(row)
    return rows


def missing_ops(results: list[CaseResult]) -> list[tuple[str, int]]:
    """Unregistered ops by the number of cases they block."""
    blocked = Counter(op for r in results for op in r.ops if not _registered(op))
    return sorted(blocked.items(), key=lambda kv: (-kv[1], kv[0]))


# ---------------------------------------------------------------------------- writing
#: why a case does not pass, by a regular expression on its name (the first that matches): stated in the report's
#: "Cases that do not pass" section; a failing case no pattern explains is listed there as "not explained"
WHY_NOT = (
    (r"test_attention_.*bf16_expanded", "Attention's function body on bfloat16: ONNX's expected outputs round every "
     "intermediate to bfloat16; tlc computes each op on bfloat16 in float32 and rounds its output once (1 ulp "
     "apart)"),
    (r"test_bernoulli", "random draws: tlc draws with numpy's generator (seeded by `seed`), the case's outputs come "
     "from another generator; only the distribution can agree (tests/ops/test_random_ops.py checks it)"),
    (r"test_maxunpool_export_with_output_shape", "the case indexes its output as if it had the default shape; "
     "the spec (indices into the output_shape tensor) and onnxruntime agree with tlc"),
    (r"test_scan_sum$", "Scan in its opset-8 form (a batch axis and sequence_lens) is refused by name; Scan from "
     "opset 9 on is supported"),
    (r"test_spacetodepth_crd_mode", "SpaceToDepth's `mode` attribute is new in opset 28 and tlc reads opset-21 "
     "semantics: refused by name"),
)


def why_not(name: str) -> str:
    return next((why for pattern, why in WHY_NOT if re.match(pattern, name)), "not explained")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_markdown(results: list[CaseResult]) -> str:
    s = summarize(results)
    labels = compiled_labels(results)
    lines = [
        "# ONNX conformance",
        "",
        f"Generated by `python tools/conformance.py{' --compiled' if labels else ''}`; do not edit by hand. Every "
        "node case of",
        f"`onnx.backend.test.case.node.collect_testcases()` (onnx {onnx.__version__}) and every light model of",
        "`onnx/backend/test/data/light` is imported with `tlc.io.onnx`, run with the reference executor and compared",
        "with the expected outputs under the case's rtol/atol. *Unsupported*: tlc refuses the case by name (an op",
        "that is not registered, an element type it does not hold such as complex64, an op form it does not read).",
    ]
    if labels:
        lines += [
            f"Every case that passes in the reference executor also runs as a compiled plan ({', '.join(labels)}:",
            "`tlc.compile(graph, opt_level=N, jit=\"eager\")`, then `Plan.run`) against the same expected outputs; a",
            "fused group that fails to compile (and would fall back to the reference path) fails the case.",
        ]
    lines += [
        "",
        "## Summary",
        "",
        "| | cases |",
        "|---|---:|",
        f"| total (node cases + light models) | {s['cases']} ({s['node_cases']} + {s['model_cases']}) |",
        f"| registered-op cases (every op of the case is registered) | {s['registered_op_cases']} |",
        f"| pass | {s['pass']} |",
        f"| fail | {s['fail']} |",
        f"| unsupported among registered-op cases (element types, sequences, ...) | {s['unsupported_registered']} |",
        f"| unsupported in all (ops not registered or types) | {s['unsupported']} |",
    ]
    lines += [f"| compiled {label}: pass / fail of the reference passes | {c['pass']} / {c['fail']} |"
              for label, c in s["compiled"].items()]
    lines += [
        "",
        f"**Pass rate over registered-op cases tlc accepts: {_pct(s['pass_rate'])}** (pass / (pass + fail); target",
        f">= {_pct(TARGET_RATE)}). Strict rate, refused types counted as failures: {_pct(s['strict_pass_rate'])}.",
        f"Over all {s['cases']} cases: {s['all_pass']} pass ({_pct(s['all_pass'] / max(s['cases'], 1))}).",
    ]
    if labels:
        lines.append("Compiled plans, over the cases that pass in the reference executor: " + ", ".join(
            f"**{label} {_pct(c['pass_rate'])}** ({c['pass']} of {c['ran']})" for label, c in s["compiled"].items())
            + ".")
    lines.append("")
    lines += (_models_section(results, labels) + _not_passing_section(results) + _ops_section(results, labels)
              + _failures_section(results))
    missing = missing_ops(results)
    if missing:
        lines += ["", "## Ops not registered, by the cases they block", "",
                  ", ".join(f"{op} ({n})" for op, n in missing)]
    return "\n".join(lines) + "\n"


def _models_section(results: list[CaseResult], labels: list[str]) -> list[str]:
    models = [r for r in results if r.kind == "model"]
    if not models:
        return []
    lines = ["## Light models", "", "| model | status | " + "".join(f"{label} | " for label in labels) + "reason |",
             "|---|---|" + "---|" * len(labels) + "---|"]
    for r in models:
        cells = "".join(f"{r.compiled[label]['status'] if label in r.compiled else '-'} | " for label in labels)
        reason = r.reason or next((f"{label}: {c['reason']}" for label, c in r.compiled.items()
                                   if c["status"] != PASS), "")
        lines.append(f"| {r.op} | {r.status} | {cells}{short_reason(reason)} |")
    return lines + [""]


def _ops_section(results: list[CaseResult], labels: list[str]) -> list[str]:
    lines = ["## Per op", "",
             "Cases are grouped under the op they test (an `_expanded` case under the op it expands). The reason",
             "is the most common failure (a case name and the first mismatch), else the most common refusal."]
    if labels:
        lines += [f"The {' and '.join(labels)} columns count the cases that pass as compiled plans (of those that pass",
                  "in the reference); the reason then names a compiled failure when the reference has none."]
    lines += ["", "| op | registered | cases | pass | fail | unsupported | " + "".join(f"{lb} | " for lb in labels)
              + "reason |", "|---|:-:|---:|---:|---:|---:|" + "---:|" * len(labels) + "---|"]
    for row in op_rows(results):
        cells = "".join(f"{row[label]} | " for label in labels)
        lines.append(f"| {row['op']} | {'yes' if row['registered'] else 'no'} | {row['cases']} | {row['pass']} | "
                     f"{row['fail']} | {row['unsupported']} | {cells}{row['reason']} |")
    return lines


def _not_passing_section(results: list[CaseResult]) -> list[str]:
    rows = [r for r in results if r.status != PASS]
    if not rows:
        return []
    lines = ["## Cases that do not pass, and why", "", "| case | status | why | first mismatch or refusal |",
             "|---|---|---|---|"]
    return lines + [f"| {r.name} | {r.status} | {why_not(r.name)} | {short_reason(r.reason, 90)} |"
                    for r in rows] + [""]


def _failures_section(results: list[CaseResult]) -> list[str]:
    failures = compiled_failures(results)
    if not failures:
        return []
    lines = ["", "## Compiled failures", "", "Cases that pass in the reference executor but not as compiled plans.",
             "", "| case | plan | reason |", "|---|---|---|"]
    return lines + [f"| {name} | {label} | {short_reason(reason, 200)} |" for name, label, reason in failures]


def to_json(results: list[CaseResult]) -> dict:
    return {"summary": summarize(results), "ops": op_rows(results), "missing_ops": missing_ops(results),
            "cases": [dataclasses.asdict(r) for r in results]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "conformance.md"), help="markdown report to write")
    parser.add_argument("--json", help="also write every result as JSON here")
    parser.add_argument("--only", help="run only the cases whose name matches this regular expression")
    parser.add_argument("--no-models", action="store_true", help="skip the light models")
    parser.add_argument("--compiled", action="store_true",
                        help="also run the cases that pass in the reference executor as compiled plans")
    parser.add_argument("--levels", default="2,3", help="opt levels of the compiled plans (default: 2,3)")
    parser.add_argument("--cache-dir", help="kernel cache directory (default: $TLC_CACHE_DIR or tlc's default)")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases() + ([] if args.no_models else light_cases())
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        parser.error(f"--levels takes opt levels separated by commas, e.g. 2,3; got {args.levels!r}")
    runners = compiled_runners(levels, args.cache_dir) if args.compiled else {}
    log(f"running {len(cases)} cases" + (f", compiled at {', '.join(runners)}" if runners else ""))
    results = run_cases(cases, log, runners)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(render_markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(results), indent=1))
    s = summarize(results)
    log(f"done in {time.perf_counter() - start:.0f}s: {s['pass']} pass, {s['fail']} fail over "
        f"{s['registered_op_cases']} registered-op cases; pass rate {_pct(s['pass_rate'])} "
        f"(strict {_pct(s['strict_pass_rate'])}); wrote {args.out}")
    log(f"reference: {sum(r.seconds for r in results):.0f}s" + "".join(
        f"; {label}: {c['pass']}/{c['ran']} pass ({_pct(c['pass_rate'])}) in {c['seconds']:.0f}s"
        for label, c in s["compiled"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
