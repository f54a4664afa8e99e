"""Recurrent layers, tlc -O2 against onnxruntime: a two-layer tagger as torch.onnx exports it.

    python tools/bench_recurrent.py                         # seq 50 and 200, batch 1 and 8, 1 and 2 threads
    python tools/bench_recurrent.py --seq 200 --batch 8 --threads 2 --rounds 20

The model (built with onnx.helper, no embedding): X [seq, batch, 64] -> bidirectional LSTM (hidden 128) ->
Transpose + Reshape to [seq, batch, 256] -> GRU (hidden 128, linear_before_reset=1, PyTorch's formula) ->
Squeeze of the direction axis, with h0 / c0 as inputs, the way torch.onnx writes nn.LSTM and nn.GRU (opset 17).
Contenders are timed round-robin, a short pause before each one's calls (warm calls first, then timed ones), so
drift on a shared machine hits both alike. Reports medians, min-max spread and the ratio tlc / onnxruntime per
shape and thread count, the machine's load average before and after, and checks that the outputs agree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

# NOTE: tlc before numpy: it picks OpenBLAS's faster kernels on AMD only then (tlc/_platform.py)
import tlc  # noqa: E402

# isort: split
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from tlc.io.onnx import from_onnx  # noqa: E402

INPUT, HIDDEN = 64, 128
PAUSE_S = 0.05
WARM_CALLS, TIMED_CALLS = 2, 3


def tagger(seed: int = 0) -> onnx.ModelProto:
    """nn.LSTM(64, 128, bidirectional=True) then nn.GRU(256, 128) as torch.onnx exports them (opset 17)."""
    rng = np.random.default_rng(seed)
    h, size = HIDDEN, INPUT

    def weight(name, *shape):
        scale = 1 / np.sqrt(h)   # PyTorch's init: uniform in +-1/sqrt(hidden)
        return numpy_helper.from_array(rng.uniform(-scale, scale, shape).astype(np.float32), name)

    inits = [weight("lstm_w", 2, 4 * h, size), weight("lstm_r", 2, 4 * h, h), weight("lstm_b", 2, 8 * h),
             weight("gru_w", 1, 3 * h, 2 * h), weight("gru_r", 1, 3 * h, h), weight("gru_b", 1, 6 * h),
             numpy_helper.from_array(np.array([0, 0, -1], np.int64), "merge_directions"),
             numpy_helper.from_array(np.array([1], np.int64), "direction_axis")]
    nodes = [
        helper.make_node("LSTM", ["x", "lstm_w", "lstm_r", "lstm_b", "", "h0", "c0"], ["lstm_y", "h_n", "c_n"],
                         name="LSTM_0", hidden_size=h, direction="bidirectional"),
        helper.make_node("Transpose", ["lstm_y"], ["lstm_t"], name="Transpose_1", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["lstm_t", "merge_directions"], ["lstm_out"], name="Reshape_2"),
        helper.make_node("GRU", ["lstm_out", "gru_w", "gru_r", "gru_b", "", "h1"], ["gru_y", "gru_h_n"],
                         name="GRU_3", hidden_size=h, linear_before_reset=1),
        helper.make_node("Squeeze", ["gru_y", "direction_axis"], ["output"], name="Squeeze_4"),
    ]
    f = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "tagger",
        [helper.make_tensor_value_info("x", f, ["seq", "batch", size]),
         helper.make_tensor_value_info("h0", f, [2, "batch", h]),
         helper.make_tensor_value_info("c0", f, [2, "batch", h]),
         helper.make_tensor_value_info("h1", f, [1, "batch", h])],
        [helper.make_tensor_value_info("output", f, ["seq", "batch", h]),
         helper.make_tensor_value_info("h_n", f, [2, "batch", h]),
         helper.make_tensor_value_info("c_n", f, [2, "batch", h]),
         helper.make_tensor_value_info("gru_h_n", f, [1, "batch", h])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def feeds_for(seq: int, batch: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((seq, batch, INPUT), dtype=np.float32),
            "h0": rng.standard_normal((2, batch, HIDDEN), dtype=np.float32) * 0.1,
            "c0": rng.standard_normal((2, batch, HIDDEN), dtype=np.float32) * 0.1,
            "h1": rng.standard_normal((1, batch, HIDDEN), dtype=np.float32) * 0.1}


def contenders(model: onnx.ModelProto, threads: int) -> dict:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    plan = tlc.compile(from_onnx(model)[0], opt_level=2, jit="eager", num_threads=threads)
    names = [o.name for o in model.graph.output]

    def run_tlc(feeds):
        out = plan.run(feeds)
        return [out[n] for n in names]

    return {"tlc -O2": run_tlc, "onnxruntime": lambda feeds: session.run(names, feeds)}, plan


def time_interleaved(fns: dict, feeds: dict, rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            time.sleep(PAUSE_S)
            for _ in range(WARM_CALLS):
                fn(feeds)
            for _ in range(TIMED_CALLS):
                start = time.perf_counter()
                fn(feeds)
                samples[label].append((time.perf_counter() - start) * 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (x3 timed calls each)")
    args = parser.parse_args(argv)
    model = tagger()
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
                samples = time_interleaved(fns, feeds, args.rounds)
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
