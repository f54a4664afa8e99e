"""Golden tests, MLIR lit/FileCheck style: ``tests/passes/<pass>.tlc``.

A file starts with a RUN line, e.g. ``# RUN: tlc-opt %s --passes=cse --emit=tlc``, then holds cases separated by
``// -----`` or ``# -----`` lines: a graph in the text IR followed by ``# CHECK:`` / ``# CHECK-NEXT:`` /
``# CHECK-NOT:`` lines. Each case is one pytest test: it is written to a file on its own (``%s``), tlc-opt runs
in-process (``tlc.cli.main``) and its stdout is checked with the ``filecheck`` package against the case's CHECK
lines. A RUN line may start with ``not`` (tlc-opt must fail) and end with ``2>&1`` (check stderr too) and
``| filecheck %s`` (optionally ``--check-prefix=P``: the RUN line then applies to the cases with ``P:`` lines,
so one file can also test a pass under other flags). Line numbers in failures are the ``.tlc`` file's.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from filecheck.matcher import Matcher
from filecheck.options import Options

from tlc.cli import main

HERE = Path(__file__).parent
SEPARATOR = re.compile(r"^\s*(?://|#)\s*-----\s*$")
RUN_LINE = re.compile(r"^\s*(?://|#)\s*RUN:\s*(.*?)\s*$")


@dataclass
class Case:
    file: Path
    index: int
    first_line: int          # 1-based line of the case's first line in the file
    lines: list[str]         # the case's lines
    total_lines: int         # lines in the whole file

    def padded(self) -> str:
        """The case with blank lines around it, so line numbers match the file's."""
        before = [""] * (self.first_line - 1)
        after = [""] * (self.total_lines - self.first_line - len(self.lines) + 1)
        return "\n".join(before + self.lines + after) + "\n"

    def has_body(self) -> bool:
        return any(line.strip() and not line.lstrip().startswith(("#", "//")) for line in self.lines)


@dataclass
class RunLine:
    argv: list[str]
    expect_failure: bool = False
    with_stderr: bool = False
    check_prefix: str = "CHECK"


def split_cases(path: Path) -> list[Case]:
    """The file's cases: the text between separator lines (the first one includes the RUN line)."""
    lines = path.read_text().splitlines()
    cases, start = [], 0
    for i, line in enumerate(lines + ["// -----"]):
        if SEPARATOR.match(line):
            cases.append(Case(path, len(cases), start + 1, lines[start:i], len(lines)))
            start = i + 1
    return cases


def parse_run_lines(path: Path) -> list[RunLine]:
    runs = []
    for line in path.read_text().splitlines():
        m = RUN_LINE.match(line)
        if not m:
            continue
        words = shlex.split(m.group(1))
        run = RunLine([])
        if words[:1] == ["not"]:
            run.expect_failure, words = True, words[1:]
        if "|" in words:
            pipe = words.index("|")
            checker, words = words[pipe + 1:], words[:pipe]
            if [w.lower() for w in checker[:1]] != ["filecheck"] or "%s" not in checker:
                raise ValueError(f"{path}: RUN line must pipe into 'filecheck %s', got {checker}")
            for w in checker:
                if w.startswith("--check-prefix="):
                    run.check_prefix = w.split("=", 1)[1]
        if words[-1:] == ["2>&1"]:
            run.with_stderr, words = True, words[:-1]
        if words[:1] != ["tlc-opt"] or "%s" not in words:
            raise ValueError(f"{path}: RUN line must be 'tlc-opt %s ...', got {m.group(1)!r}")
        run.argv = words[1:]
        runs.append(run)
    if not runs:
        raise ValueError(f"{path}: no RUN line")
    return runs


def run_case(case: Case, run: RunLine, tmp_path: Path) -> tuple[bool, str]:
    """Run tlc-opt on the case and FileCheck its output; returns (passed, what went wrong)."""
    source = tmp_path / f"{case.file.stem}-{case.index}.tlc"
    source.write_text(case.padded())
    argv = [str(source) if a == "%s" else a for a in run.argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if (code != 0) != run.expect_failure:
        return False, f"tlc-opt {' '.join(argv)} exited {code}:\n{err.getvalue()}"
    produced = out.getvalue() + (err.getvalue() if run.with_stderr else "")
    result = tmp_path / f"{case.file.stem}-{case.index}.out"
    result.write_text(produced)
    checks = tmp_path / f"{case.file.name}"
    checks.write_text(case.padded())
    report = io.StringIO()
    with contextlib.redirect_stderr(report):
        opts = Options(match_filename=str(checks), input_file=str(result), check_prefixes=run.check_prefix)
        status = Matcher.from_opts(opts).run()
    if status != 0:
        return False, f"FileCheck failed for {case.file.name} case {case.index}:\n{report.getvalue()}\n" \
                      f"--- tlc-opt output ---\n{produced}"
    return True, ""


def uses_prefix(case: Case, prefix: str) -> bool:
    """Whether the case has check lines for ``prefix`` (a RUN line whose prefix a case never uses skips it)."""
    pattern = re.compile(rf"(?://|#)\s*{re.escape(prefix)}(?:-[A-Z]+)?:")
    return any(pattern.search(line) for line in case.lines)


def collect() -> list:
    params = []
    for path in sorted(HERE.glob("*.tlc")):
        for case in split_cases(path):
            if case.has_body():
                params.append(pytest.param(case, id=f"{path.stem}-{case.index}"))
    return params


@pytest.mark.parametrize("case", collect())
def test_golden(case: Case, tmp_path):
    runs = [r for r in parse_run_lines(case.file) if uses_prefix(case, r.check_prefix)]
    assert runs, f"{case.file.name} case {case.index} (line {case.first_line}): no RUN line's prefix is checked"
    for run in runs:
        ok, message = run_case(case, run, tmp_path)
        assert ok, message


def test_every_pass_has_a_golden_file():
    from tlc.passes import all_passes

    missing = [cls.name for cls in all_passes() if cls.name in ("fold", "dce", "cse")
               and not (HERE / f"{cls.name}.tlc").exists()]
    assert not missing, f"no golden test file for {missing}"


# ---------------------------------------------------------------------------- the runner itself
def test_split_and_run_lines(tmp_path):
    f = tmp_path / "demo.tlc"
    f.write_text("# RUN: not tlc-opt %s --passes=cse --emit=tlc 2>&1 | filecheck %s --check-prefix=ERR\n"
                 "graph a\n# CHECK: a\n// -----\ngraph b\n#   -----  \n# only a comment\n")
    cases = split_cases(f)
    assert [(c.first_line, c.lines) for c in cases] == [
        (1, f.read_text().splitlines()[:3]), (5, ["graph b"]), (7, ["# only a comment"])]
    assert [c.has_body() for c in cases] == [True, True, False]
    assert cases[1].padded().splitlines()[4] == "graph b" and len(cases[1].padded().splitlines()) == 7
    (run,) = parse_run_lines(f)
    assert run == RunLine(["%s", "--passes=cse", "--emit=tlc"], True, True, "ERR")
    f.write_text("# RUN: python %s\n")
    with pytest.raises(ValueError, match="must be 'tlc-opt %s"):
        parse_run_lines(f)


def test_runner_checks_output_and_failures(tmp_path):
    f = tmp_path / "demo.tlc"
    f.write_text("# RUN: tlc-opt %s --passes=dce --emit=tlc\n"
                 "# RUN: not tlc-opt %s --passes=nope 2>&1 | filecheck %s --check-prefix=ERR\n"
                 "graph @g {\n  %x = Input : float32[2]\n  %n = Neg(%x)\n  return %x\n}\n"
                 "# CHECK: %x = Input\n# CHECK-NOT: Neg\n# ERR: unknown pass 'nope'\n")
    (case,) = split_cases(f)
    work = tmp_path / "work"
    work.mkdir()
    results = [run_case(case, run, work) for run in parse_run_lines(f)]
    assert results == [(True, ""), (True, "")]
    f.write_text(f.read_text().replace("# CHECK-NOT: Neg", "# CHECK-NEXT: return %n"))
    (case,) = split_cases(f)
    ok, message = run_case(case, parse_run_lines(f)[0], work)
    assert not ok and "demo.tlc:9: error" in message and "--- tlc-opt output ---" in message
