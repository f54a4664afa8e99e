"""tlc against ONNX's backend node cases and light models; writes docs/conformance.md.

    python tools/conformance.py                       # all 1884 node cases + 9 light models
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
from collections.abc import Callable, Iterable
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
def run_cases(cases: list, progress: Callable[[str], None] | None = None) -> list[CaseResult]:
    """Run every case through tlc; ``progress`` gets a line now and then."""
    under_test = ops_under_test(c for c in cases if getattr(c, "kind", "node") != "model")
    results: list[CaseResult] = []
    start = time.perf_counter()
    for i, case in enumerate(cases, 1):
        kind = "model" if getattr(case, "kind", "node") == "model" else "node"
        ops = sorted({_qualified(n.domain, n.op_type) for n in case.model.graph.node})
        t0 = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            status, reason = onnx_cases.run_case(case)
        # NOTE: a case tlc imported has only registered ops after opset conversion (Upsample -> Resize).
        registered = status != UNSUPPORTED or all(map(_registered, ops))
        results.append(CaseResult(case.name, kind, under_test.get(case.name, case.name.removeprefix("test_")), ops,
                                  registered, status, reason, time.perf_counter() - t0))
        if progress and (kind == "model" or i % 200 == 0 or i == len(cases)):
            counts = Counter(r.status for r in results)
            progress(f"[{i:4d}/{len(cases)}] {time.perf_counter() - start:6.1f}s  pass {counts[PASS]}  "
                     f"fail {counts[FAIL]}  unsupported {counts[UNSUPPORTED]}"
                     + (f"  ({case.name}: {status}, {results[-1].seconds:.1f}s)" if kind == "model" else ""))
    return results


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
    }


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
        rows.append({"op": op, "registered": _registered(op), "cases": len(mine),
                     "pass": counts[PASS], "fail": counts[FAIL], "unsupported": counts[UNSUPPORTED],
                     "reason": reason})
    return rows


def missing_ops(results: list[CaseResult]) -> list[tuple[str, int]]:
    """Unregistered ops by the number of cases they block."""
    blocked = Counter(op for r in results for op in r.ops if not _registered(op))
    return sorted(blocked.items(), key=lambda kv: (-kv[1], kv[0]))


# ---------------------------------------------------------------------------- writing
def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_markdown(results: list[CaseResult]) -> str:
    s = summarize(results)
    lines = [
        "# ONNX conformance",
        "",
        "Generated by `python tools/conformance.py`; do not edit by hand. Every node case of",
        f"`onnx.backend.test.case.node.collect_testcases()` (onnx {onnx.__version__}) and every light model of",
        "`onnx/backend/test/data/light` is imported with `tlc.io.onnx`, run with the reference executor and compared",
        "with the expected outputs under the case's rtol/atol. *Unsupported*: tlc refuses the case by name (an op",
        "that is not registered, an element type it does not hold such as bfloat16, a sequence or optional value).",
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
        "",
        f"**Pass rate over registered-op cases tlc accepts: {_pct(s['pass_rate'])}** (pass / (pass + fail); target",
        f">= {_pct(TARGET_RATE)}). Strict rate, refused types counted as failures: {_pct(s['strict_pass_rate'])}.",
        f"Over all {s['cases']} cases: {s['all_pass']} pass ({_pct(s['all_pass'] / max(s['cases'], 1))}).",
        "",
    ]
    models = [r for r in results if r.kind == "model"]
    if models:
        lines += ["## Light models", "", "| model | status | reason |", "|---|---|---|"]
        lines += [f"| {r.op} | {r.status} | {short_reason(r.reason)} |" for r in models]
        lines.append("")
    lines += ["## Per op", "",
              "Cases are grouped under the op they test (an `_expanded` case under the op it expands). The reason",
              "is the most common failure (a case name and the first mismatch), else the most common refusal.", "",
              "| op | registered | cases | pass | fail | unsupported | reason |", "|---|:-:|---:|---:|---:|---:|---|"]
    for row in op_rows(results):
        lines.append(f"| {row['op']} | {'yes' if row['registered'] else 'no'} | {row['cases']} | {row['pass']} | "
                     f"{row['fail']} | {row['unsupported']} | {row['reason']} |")
    missing = missing_ops(results)
    if missing:
        lines += ["", "## Ops not registered, by the cases they block", "",
                  ", ".join(f"{op} ({n})" for op, n in missing)]
    return "\n".join(lines) + "\n"


def to_json(results: list[CaseResult]) -> dict:
    return {"summary": summarize(results), "ops": op_rows(results), "missing_ops": missing_ops(results),
            "cases": [dataclasses.asdict(r) for r in results]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "conformance.md"), help="markdown report to write")
    parser.add_argument("--json", help="also write every result as JSON here")
    parser.add_argument("--only", help="run only the cases whose name matches this regular expression")
    parser.add_argument("--no-models", action="store_true", help="skip the light models")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases() + ([] if args.no_models else light_cases())
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    log(f"running {len(cases)} cases")
    results = run_cases(cases, log)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(render_markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(results), indent=1))
    s = summarize(results)
    log(f"done in {time.perf_counter() - start:.0f}s: {s['pass']} pass, {s['fail']} fail over "
        f"{s['registered_op_cases']} registered-op cases; pass rate {_pct(s['pass_rate'])} "
        f"(strict {_pct(s['strict_pass_rate'])}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
