"""Recurrent layers, tlc -O2 against onnxruntime: a two-layer tagger as torch.onnx exports it.

    python tools/bench_recurrent.py                         # seq 50 and 200, batch 1 and 8, 1 and 2 threads
    python tools/bench_recurrent.py --seq 200 --batch 8 --threads 2 --rounds 20

The model (tools/models.py's ``lstm_gru_tagger``, seq and batch symbolic here, no embedding): X [seq, batch, 64]
-> bidirectional LSTM (hidden 128) ->
Transpose + Reshape to [seq, batch, 256] -> GRU (hidden 128, linear_before_reset=1, PyTorch's formula) ->
Squeeze of the direction axis, with h0 / c0 as inputs, the way torch.onnx writes nn.LSTM and nn.GRU (opset 17).
Contenders are timed round-robin, a short pause before each one's calls (warm calls first, then timed ones), so
drift on a shared machine hits both alike. Reports medians, min-max spread and the ratio tlc / onnxruntime per
shape and thread count, the machine's load average before and after, and checks that the outputs agree.
"""

from __future__ import annotations

import argparse
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

INPUT, HIDDEN = 64, 128


def feeds_for(seq: int, batch: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((seq, batch, INPUT), dtype=np.float32),
            "h0": rng.standard_normal((2, batch, HIDDEN), dtype=np.float32) * 0.1,
            "c0": rng.standard_normal((2, batch, HIDDEN), dtype=np.float32) * 0.1,
            "h1": rng.standard_normal((1, batch, HIDDEN), dtype=np.float32) * 0.1}


def contenders(model: onnx.ModelProto, threads: int) -> dict:
    session = bench.ort_session(model, threads, "ORT_ENABLE_ALL")
    plan = tlc.compile(from_onnx(model)[0], opt_level=2, jit="eager", num_threads=threads)
    names = [o.name for o in model.graph.output]

    def run_tlc(feeds):
        out = plan.run(feeds)
        return [out[n] for n in names]

    return {"tlc -O2": run_tlc, "onnxruntime": lambda feeds: session.run(names, feeds)}, plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (x3 timed calls each)")
    args = parser.parse_args(argv)
    model = models.lstm_gru_tagger(batch="batch", seq="seq")   # symbolic: one plan for every shape
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| threads | seq | batch | tlc -O2 ms (min-max) | onnxruntime ms (min-max) | tlc / ort |")
    print("|---:|---:|---:|---:|---:|---:|")
    ratios, plans = [], []
    for threads in args.threads:
        fns, plan = contenders(model, threads)
        plans.append((threads, plan))
        for seq in args.seq:
            for batch in args.batch:
                feeds = feeds_for(seq, batch)
                got, want = fns["tlc -O2"](feeds), fns["onnxruntime"](feeds)
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
                samples = bench.time_interleaved(fns, feeds, args.rounds, budget_s=math.inf)
                med = {k: statistics.median(v) for k, v in samples.items()}
                ratio = med["tlc -O2"] / med["onnxruntime"]
                ratios.append(ratio)
                cells = [f"{med[k]:.2f} ({min(v):.2f}-{max(v):.2f})" for k, v in samples.items()]
                print(f"| {threads} | {seq} | {batch} | {cells[0]} | {cells[1]} | {ratio:.2f} |", flush=True)
    geomean = float(np.exp(np.mean(np.log(ratios))))
    print(f"\ngeomean tlc / onnxruntime: {geomean:.2f} (worst {max(ratios):.2f}); load average after: "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for threads, plan in plans:
        steps = [s for s in plan.stats().steps if s.op in ("LSTM", "GRU")]
        for s in steps:
            print(f"{threads} thread(s): {s.op} {s.mode}: {'; '.join(dict.fromkeys([s.reason, *s.notes]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
