"""Control flow with compiled bodies: an RNN written as an ONNX Loop, tlc -O2 against its reference step and
onnxruntime.

    python tools/bench_control.py                           # seq 100, hidden 256, batch 8, 1 thread
    python tools/bench_control.py --seq 100 --hidden 256 --batch 8 --threads 1 --rounds 10

The model is tools/models.py's ``rnn_loop`` (batch symbolic here): X [seq, batch, hidden] and h0 [batch, hidden]
in; a Loop of ``seq`` iterations whose body gathers x_t = X[i] (X captured from the outer graph), computes
h = Tanh(x_t @ W + h @ R + b), clips rows whose norm passes a limit through an If, and returns h as its carried
value and as a scan output; outputs the last h and the stacked hs. Contenders: tlc -O2 with the
Loop's body compiled (``tlc.runtime.control``), tlc -O2 with the Loop as a reference step (the body on the
reference interpreter every iteration, as before), and onnxruntime (ORT_ENABLE_ALL). They are timed round-robin,
a short pause before each one's calls (warm calls first, then timed ones); medians, min-max spread, and the
outputs checked against onnxruntime.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

# NOTE: tlc before numpy: it picks OpenBLAS's faster kernels on AMD only then (tlc/_platform.py)
import tlc  # noqa: E402

# isort: split
import bench  # noqa: E402  (tools/bench.py: the interleaved timing)
import models  # noqa: E402  (tools/models.py)
import numpy as np  # noqa: E402
import onnx  # noqa: E402

from tlc.io.onnx import from_onnx  # noqa: E402
from tlc.runtime import ops as runtime_ops  # noqa: E402


def feeds_for(seq: int, batch: int, hidden: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((seq, batch, hidden), dtype=np.float32),
            "h0": rng.standard_normal((batch, hidden), dtype=np.float32) * 0.1}


@contextlib.contextmanager
def loop_as_reference():
    """Lowering without the runtime's Loop entry: the Loop runs as a reference step (the body interpreted)."""
    saved = runtime_ops.CPU_OPS.pop("Loop")
    try:
        yield
    finally:
        runtime_ops.CPU_OPS["Loop"] = saved


def contenders(model: onnx.ModelProto, threads: int) -> tuple[dict, tlc.Plan]:
    session = bench.ort_session(model, threads, "ORT_ENABLE_ALL")
    graph = from_onnx(model)[0]
    compiled = tlc.compile(graph, opt_level=2, jit="eager", num_threads=threads)
    with loop_as_reference():
        reference = tlc.compile(graph, opt_level=2, jit="eager", num_threads=threads)
    names = [o.name for o in model.graph.output]

    def of(plan):
        def run(feeds):
            out = plan.run(feeds)
            return [out[n] for n in names]

        return run

    fns = {"tlc compiled body": of(compiled), "tlc reference step": of(reference),
           "onnxruntime": lambda feeds: session.run(names, feeds)}
    return fns, compiled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (x3 timed calls each)")
    args = parser.parse_args(argv)
    model = models.rnn_loop(batch="batch", seq=args.seq, hidden=args.hidden)
    feeds = feeds_for(args.seq, args.batch, args.hidden)
    fns, plan = contenders(model, args.threads)
    want = fns["onnxruntime"](feeds)
    for label, fn in fns.items():
        for g, w in zip(fn(feeds), want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=label)
    print(f"RNN as a Loop: seq {args.seq}, hidden {args.hidden}, batch {args.batch}, {args.threads} thread(s); "
          f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    samples = bench.time_interleaved(fns, feeds, args.rounds, budget_s=math.inf)
    ort_ms = statistics.median(samples["onnxruntime"])
    print("| contender | median ms (min-max) | per iteration us | / onnxruntime |")
    print("|---|---:|---:|---:|")
    for label, values in samples.items():
        med = statistics.median(values)
        print(f"| {label} | {med:.2f} ({min(values):.2f}-{max(values):.2f}) | {med * 1e3 / args.seq:.1f} | "
              f"{med / ort_ms:.2f} |")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    loop = next(s for s in plan.stats().steps if s.op == "Loop")
    print(f"Loop step: {loop.mode}: {'; '.join(dict.fromkeys([loop.reason, *loop.notes]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
