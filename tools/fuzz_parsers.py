"""Fuzz tlc's readers of untrusted files: the ONNX importer and the textual-IR parser.

    python tools/fuzz_parsers.py --minutes 10                 # both readers, half the time each
    python tools/fuzz_parsers.py --minutes 5 --target text --engine hypothesis

Each input goes the way a user's file does: ONNX bytes through ``parse_model`` and ``from_onnx`` (which verifies);
text through ``parse_graph``, typing and ``verify``. What loads is then optimized at -O1, verified and printed as
text (and the text parsed back), so a reader that accepts a graph the rest of tlc cannot hold is found too.

A finding is any exception that is not a ``tlc.TlcError`` (tlc's promise, SECURITY.md), an input that runs longer
than ``--hang-seconds`` (default 5), or a crash of the process. Findings are written to ``--findings`` (the input
and its traceback), one per distinct place, and fuzzing goes on after each.

Engines: ``atheris`` (libFuzzer, coverage-guided over tlc's Python code; ``pip install atheris``) when it imports,
else ``hypothesis`` (random mutations of the seeds: bit flips, truncation, splices and inserted tokens, drawn by
hypothesis). The work runs in a child process so that a crash or a hang is counted and fuzzing restarts after it;
the parent sums the children's counts and prints one line per target.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("onnx", "text")
#: tokens of the text IR that random byte mutations would rarely spell (libFuzzer's -dict; hypothesis inserts them)
TEXT_TOKENS = ["graph", "return", "opset", "producer", "metadata", "doc", "name", "as", "dense<", "seq<", "opt<",
               "Input", "Constant", "If", "Loop", "Scan", "tlc.Fused", "body", "then_branch", "else_branch", "%x",
               "@g", "float32[", "int64[", "bool[", "string[", "int4[", "[*]", "?", "_", "...", "{", "}", "(", ")",
               "[", "]", "<", ">", ",", "=", ":", "\"\\u0000\"", "\"\\ud800\"", "nan", "-inf", "1e999",
               "-9223372036854775809", "18446744073709551616", "1000000000000"]


# ---------------------------------------------------------------------------- seeds
def onnx_seeds() -> list[bytes]:
    """Small valid models that together use what the importer handles: initializers, attributes of each kind,
    a Constant of strings, an If with a body that reads an outer value, a Loop, symbolic dims, an older opset."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    vi = helper.make_tensor_value_info

    def model(nodes, inputs, outputs, inits=(), opset=21):
        graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10
        return m.SerializeToString()

    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    b = numpy_helper.from_array(np.ones(3, np.float32), "b")
    mlp = model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
                 helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1),
                 helper.make_node("Transpose", ["y"], ["t"], perm=[1, 0]),
                 helper.make_node("LeakyRelu", ["t"], ["z"], alpha=0.1)],
                [vi("x", T.FLOAT, ["N", 4])], [vi("y", T.FLOAT, ["N", 3]), vi("z", T.FLOAT, [3, "N"])], [w, b])
    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["m"])], "then", [], [vi("m", T.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "else", [], [vi("n", T.FLOAT, [2])])
    branch = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
                    helper.make_node("Constant", [], ["s"], value_strings=["a", "b"]),
                    helper.make_node("Identity", ["s"], ["t"])],
                   [vi("c", T.BOOL, []), vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2]), vi("t", T.STRING, [2])])
    body = helper.make_graph([helper.make_node("Add", ["v", "x"], ["v2"]), helper.make_node("Identity", ["c"], ["c2"])],
                             "body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [2])],
                             [vi("c2", T.BOOL, []), vi("v2", T.FLOAT, [2])])
    loop = model([helper.make_node("Constant", [], ["n"], value_int=3),
                  helper.make_node("Constant", [], ["go"], value=numpy_helper.from_array(np.array(True))),
                  helper.make_node("Loop", ["n", "go", "x"], ["y"], body=body),
                  helper.make_node("Cast", ["y"], ["z"], to=T.INT64),
                  helper.make_node("ReduceSum", ["z"], ["s"], keepdims=0)],
                 [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2]), vi("s", T.INT64, [])])
    # opset 13: through onnx's version converter (C++), with Softmax's and ReduceSum's older forms
    old = model([helper.make_node("Softmax", ["x"], ["s"], axis=1), helper.make_node("Split", ["s"], ["a", "b"]),
                 helper.make_node("ReduceSum", ["a", "axes"], ["y"], keepdims=1),
                 helper.make_node("Relu", ["b"], ["z"])],
                [vi("x", T.FLOAT, ["N", 4])], [vi("y", T.FLOAT, ["N", 1]), vi("z", T.FLOAT, ["N", 2])],
                [numpy_helper.from_array(np.array([1], np.int64), "axes")], opset=13)
    return [mlp, branch, loop, old]


def text_seeds() -> list[bytes]:
    """The ONNX seeds printed as text, and the golden pass tests (one graph per ``// -----`` case)."""
    from tlc.io.onnx import from_onnx, parse_model
    from tlc.ir.text import print_graph

    seeds = [print_graph(from_onnx(parse_model(data))[0], tensors=None, inline_limit=64).encode()
             for data in onnx_seeds()]
    for path in sorted((ROOT / "tests" / "passes").glob("*.tlc")):
        for case in path.read_text(encoding="utf-8").split("// -----"):
            if "graph @" in case:
                seeds.append(case.encode())
    return seeds


# ---------------------------------------------------------------------------- what one input does
def run_onnx(data: bytes) -> bool:
    """Import ``data`` as an ONNX model; when it loads, optimize and print it. True when it loaded."""
    from tlc.io.onnx import from_onnx, parse_model

    graph, _ = from_onnx(parse_model(data))
    _exercise(graph)
    return True


def run_text(data: bytes) -> bool:
    """Parse ``data`` as text IR (as ``load_text`` reads a file: UTF-8 or refused); type, verify, optimize."""
    from tlc.errors import InvalidModelError
    from tlc.ir.text import parse_graph

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidModelError(f"not UTF-8: {exc}") from None
    graph = parse_graph(text, source="<fuzz>")
    graph.infer_missing_types()
    graph.verify()
    _exercise(graph)
    return True


def _exercise(graph) -> None:
    """What a loaded graph must survive: -O1, the verifier, printing as text and parsing that back."""
    import tlc
    from tlc.ir.text import parse_graph, print_graph

    optimized, _ = tlc.optimize(graph, opt_level=1)
    optimized.verify()
    tensors: dict = {}
    parse_graph(print_graph(optimized, tensors=tensors), tensors=tensors)


RUNNERS = {"onnx": run_onnx, "text": run_text}


# ---------------------------------------------------------------------------- the worker (child process)
class Hang(Exception):
    """Raised by the alarm when one input runs past the hang limit."""


class Worker:
    """Runs inputs, counts them and records findings; its counts go to ``stats_path`` every second."""

    def __init__(self, target: str, findings: Path, stats_path: Path, hang_seconds: float):
        from tlc.errors import TlcError

        self.tlc_error = TlcError
        self.run = RUNNERS[target]
        self.target, self.findings, self.stats_path = target, findings, stats_path
        self.hang_seconds = hang_seconds
        self.counts = {"executions": 0, "refused": 0, "loaded": 0, "findings": 0}
        self.seen: set[str] = {p.stem.split("-", 1)[1] for p in findings.glob(f"{target}-*.txt")}
        self.last_flush = 0.0
        signal.signal(signal.SIGALRM, self._alarm)

    def _alarm(self, *_):
        raise Hang(f"one input ran longer than {self.hang_seconds} s")

    def __call__(self, data: bytes) -> None:
        self.counts["executions"] += 1
        signal.setitimer(signal.ITIMER_REAL, self.hang_seconds)
        try:
            self.run(data)
            self.counts["loaded"] += 1
        except self.tlc_error:
            self.counts["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - the point: anything else is a finding
            self.record(exc, data)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        now = time.monotonic()
        if now - self.last_flush > 1.0:
            self.flush()
            self.last_flush = now

    def record(self, exc: BaseException, data: bytes) -> None:
        """Keep one input per distinct (exception type, innermost tlc frame)."""
        frames = traceback.extract_tb(exc.__traceback__)
        inner = [f for f in frames if "/tlc/" in f.filename] or frames
        place = f"{type(exc).__name__}@{Path(inner[-1].filename).name}:{inner[-1].lineno}" if inner else type(
            exc).__name__
        key = hashlib.sha1(place.encode()).hexdigest()[:12]
        if key in self.seen:
            return
        self.seen.add(key)
        self.counts["findings"] += 1
        stem = self.findings / f"{self.target}-{key}"
        stem.with_suffix(".bin").write_bytes(data)
        stem.with_suffix(".txt").write_text(f"{place}\n\n" + "".join(traceback.format_exception(exc)))
        self.flush()

    def flush(self) -> None:
        self.stats_path.write_text(json.dumps(self.counts))


def work_atheris(worker: Worker, seconds: int, corpus: Path, seeds: list[bytes], target: str) -> None:
    import atheris

    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i}").write_bytes(seed)
    # NOTE: no -timeout: the worker's own alarm (SIGALRM, which libFuzzer's timeout would also use) counts hangs
    argv = [sys.argv[0], str(corpus), f"-max_total_time={seconds}", "-rss_limit_mb=4096",
            f"-artifact_prefix={worker.findings}/{target}-libfuzzer-", "-print_final_stats=1", "-max_len=65536"]
    if target == "text":
        tokens = corpus.parent / "text.dict"
        tokens.write_text("".join(json.dumps(t) + "\n" for t in TEXT_TOKENS))
        argv.append(f"-dict={tokens}")
    atheris.Setup(argv, worker)
    atheris.Fuzz()


def work_hypothesis(worker: Worker, seconds: int, seeds: list[bytes]) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    tokens = [t.encode() for t in TEXT_TOKENS]

    @st.composite
    def mutated(draw) -> bytes:
        data = bytearray(draw(st.sampled_from(seeds)))
        for _ in range(draw(st.integers(1, 8))):
            kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "token", "splice", "byte"]))
            at = draw(st.integers(0, max(len(data) - 1, 0)))
            if kind == "flip" and data:
                data[at] ^= 1 << draw(st.integers(0, 7))
            elif kind == "byte" and data:
                data[at] = draw(st.integers(0, 255))
            elif kind == "truncate":
                del data[at:]
            elif kind == "insert":
                data[at:at] = draw(st.binary(min_size=1, max_size=16))
            elif kind == "delete":
                del data[at:at + draw(st.integers(1, 64))]
            elif kind == "token":
                data[at:at] = draw(st.sampled_from(tokens))
            elif kind == "splice":
                other = draw(st.sampled_from(seeds))
                start = draw(st.integers(0, len(other)))
                data[at:at] = other[start:start + draw(st.integers(1, 256))]
        return bytes(data)

    deadline = time.monotonic() + seconds

    @settings(max_examples=500, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(mutated())
    def batch(data: bytes) -> None:
        if time.monotonic() < deadline:
            worker(data)

    while time.monotonic() < deadline:
        batch()
    worker.flush()


def worker_main(args: argparse.Namespace) -> None:
    if args.engine == "atheris":
        import atheris

        # NOTE: before anything imports tlc: only modules imported inside this block report coverage
        with atheris.instrument_imports(include=["tlc"]):
            import tlc  # noqa: F401
            import tlc.io.onnx  # noqa: F401
            import tlc.ir.text  # noqa: F401
    seeds = onnx_seeds() if args.worker == "onnx" else text_seeds()
    worker = Worker(args.worker, Path(args.findings), Path(args.stats), args.hang_seconds)
    if args.engine == "atheris":
        work_atheris(worker, args.seconds, Path(args.corpus), seeds, args.worker)
    else:
        work_hypothesis(worker, args.seconds, seeds)


# ---------------------------------------------------------------------------- the parent
def default_engine() -> str:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "hypothesis"
    return "atheris"


def fuzz_target(target: str, seconds: float, args: argparse.Namespace, work: Path) -> dict[str, int]:
    """Run workers for ``target`` until ``seconds`` are spent; restart after each crash or hang."""
    totals = {"executions": 0, "refused": 0, "loaded": 0, "findings": 0, "crashes": 0, "restarts": 0}
    corpus = work / f"corpus-{target}"
    corpus.mkdir(exist_ok=True)
    end = time.monotonic() + seconds
    while (left := int(end - time.monotonic())) >= 5:
        stats = work / f"stats-{target}.json"
        stats.write_text("{}")
        cmd = [sys.executable, __file__, "--worker", target, "--engine", args.engine, "--seconds", str(left),
               "--findings", str(args.findings), "--stats", str(stats), "--corpus", str(corpus),
               "--hang-seconds", str(args.hang_seconds)]
        log = Path(args.findings) / f"worker-{target}.log"
        with open(log, "ab") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=left + 120)
        counts = json.loads(stats.read_text() or "{}")
        for key, value in counts.items():
            totals[key] += value
        if proc.returncode != 0:
            totals["crashes"] += 1
            totals["restarts"] += 1
            note = Path(args.findings) / f"{target}-crash-{totals['crashes']}.txt"
            note.write_text(f"worker exited with {proc.returncode}; see {log} (libFuzzer writes the input as "
                            f"{target}-libfuzzer-*)\n")
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0, help="total fuzzing time, split over the targets")
    parser.add_argument("--target", choices=TARGETS + ("all",), default="all")
    parser.add_argument("--engine", choices=("atheris", "hypothesis"), default=None,
                        help="default: atheris when it imports, else hypothesis")
    parser.add_argument("--findings", default="fuzz-findings", help="folder for the inputs that found something")
    parser.add_argument("--hang-seconds", type=float, default=5.0)
    # the worker's own flags (the parent passes them)
    parser.add_argument("--worker", choices=TARGETS, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stats", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    args.engine = args.engine or default_engine()
    if args.worker:
        worker_main(args)
        return 0
    Path(args.findings).mkdir(parents=True, exist_ok=True)
    targets = TARGETS if args.target == "all" else (args.target,)
    print(f"fuzzing {', '.join(targets)} with {args.engine} for {args.minutes:g} min; findings in {args.findings}/",
          flush=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="tlc-fuzz-") as tmp:
        for target in targets:
            start = time.monotonic()
            totals = fuzz_target(target, args.minutes * 60 / len(targets), args, Path(tmp))
            spent = time.monotonic() - start
            failed += totals["findings"] + totals["crashes"]
            print(f"{target:5s} {spent:7.0f} s  {totals['executions']:9,d} executions "
                  f"({totals['executions'] / max(spent, 1):,.0f}/s)  {totals['refused']:9,d} refused by a TlcError  "
                  f"{totals['loaded']:7,d} loaded  {totals['findings']} findings (non-TlcError or hang)  "
                  f"{totals['crashes']} crashes", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
