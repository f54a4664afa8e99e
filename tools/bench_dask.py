"""Scoring throughput (rows/s) against workers: tlc's plan in one process, tlc.dask on Dask's threaded and
processes schedulers and on a two-worker LocalCluster, and onnxruntime run the same ways.

    python tools/bench_dask.py                              # mlp, 100,000 rows in chunks of 5,000, 5 repeats
    python tools/bench_dask.py --rows 200000 --chunk 10000 --repeats 7

The model is tools/models.py's ``mlp`` (784 -> 1024 -> 1024 -> 10, Gemm + Relu, Softmax) with its batch made
symbolic. Every contender makes the same rows the same way, chunk by chunk (a fixed random block of rows tiled,
made inside the task that scores them, so that no contender ships rows between processes), and scores them:

- tlc, 1 process: ``plan.run`` over the chunks in a loop, at 1 and at 2 threads (the plan's own pool);
- tlc.dask: ``tlc.dask.run`` computed on the threaded scheduler (2 threads), the processes scheduler (2 processes,
  one pool kept across repeats) and a ``LocalCluster`` of 2 workers x 1 thread; each plan at the threads
  ``tlc.dask`` picks (cores over tasks at once: 1 here);
- onnxruntime (ORT_ENABLE_ALL), the same five ways: a session per process, at 1 intra-op thread under Dask.

Repeats run round-robin (each contender once per round) after a warm-up round; the table gives the median
rows/s, the min-max, the ratio to tlc's one process at 1 thread, the first (cold: process start, compile or
session) call's seconds, and whether the outputs equal bit for bit (else their largest difference) tlc's plan
run in one process over the same chunks, and one ``plan.run`` over all the rows at once. (The mlp's last
product, 1024 -> 10, runs on OpenBLAS, whose sgemm rounds a row differently once a call has more than ~5,000
rows: numpy's own ``x @ w`` does too. So chunks of 5,000 rows match one run over 10^5 rows only to ~1e-7; the
same chunks in one process or on any number of workers match bit for bit.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
sys.path[:0] = [str(ROOT), str(TOOLS)]
# NOTE: Dask's worker processes import this module (bench_dask) for its block functions: give them the path
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TOOLS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])

# NOTE: tlc before numpy: it picks OpenBLAS's faster kernels on AMD only then (tlc/_platform.py)
import tlc  # noqa: E402

# isort: split
import numpy as np  # noqa: E402

BASE_ROWS = 257          # the distinct rows tiled into the data set
_sessions: dict = {}     # onnxruntime sessions of this process, by (model path, threads)


def make_rows(start: int, stop: int, features: int, seed: int = 0) -> np.ndarray:
    """Rows [start, stop) of the data set: a fixed random block of BASE_ROWS rows, tiled (cheap to make anywhere)."""
    base = np.random.default_rng(seed).standard_normal((BASE_ROWS, features), dtype=np.float32)
    return base[np.arange(start, stop) % BASE_ROWS]


def rows_block(block_info=None, features: int = 0) -> np.ndarray:
    start, stop = block_info[None]["array-location"][0]
    return make_rows(start, stop, features)


def ort_block(x: np.ndarray, path: str, threads: int) -> np.ndarray:
    """One chunk through this process's onnxruntime session (made on first use; sessions run from any thread)."""
    session = _sessions.get((path, threads))
    if session is None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = _sessions[(path, threads)] = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def symbolic_batch_mlp(path: Path) -> tuple[int, int]:
    """Write tools/models.py's mlp with its batch dim named "N" to ``path``; returns (features, classes)."""
    import models

    model = models.mlp(batch=1)
    for vi in (model.graph.input[0], model.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    path.write_bytes(model.SerializeToString())
    dims = [[d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in (model.graph.input[0],
                                                                             model.graph.output[0])]
    return dims[0][1], dims[1][1]


def contenders(path: str, rows: int, chunk: int, features: int, classes: int, client, pool) -> dict:
    """Label -> a function that scores every row and returns the output."""
    import bench_dask as me  # NOTE: by module name, so that Dask's processes import the block functions
    import dask
    import dask.array as da

    import tlc.dask

    bounds = list(range(0, rows, chunk)) + [rows]
    plans = {t: tlc.compile(path, jit="eager", num_threads=t) for t in (1, 2)}

    def x_dask():
        return da.map_blocks(me.rows_block, features=features, dtype=np.float32,
                             chunks=(tuple(np.diff(bounds)), (features,)))

    def tlc_loop(threads):
        plan = plans[threads]
        return lambda: np.concatenate([plan.run({"x": me.make_rows(a, b, features)})["y"]
                                       for a, b in zip(bounds, bounds[1:])])

    def ort_loop(threads):
        return lambda: np.concatenate([me.ort_block(me.make_rows(a, b, features), path, threads)
                                       for a, b in zip(bounds, bounds[1:])])

    def tlc_dask(**kw):
        return lambda: tlc.dask.run(path, {"x": x_dask()})["y"].compute(**kw)

    def ort_dask(**kw):
        return lambda: x_dask().map_blocks(me.ort_block, path, 1, dtype=np.float32,
                                           chunks=(tuple(np.diff(bounds)), (classes,))).compute(**kw)

    def with_pool(run):
        def go():
            with dask.config.set(pool=pool):
                return run()
        return go

    return {
        "tlc, 1 process, 1 thread": tlc_loop(1),
        "tlc, 1 process, 2 threads": tlc_loop(2),
        "tlc.dask, threads (2)": tlc_dask(scheduler="threads"),
        "tlc.dask, processes (2 x 1)": with_pool(tlc_dask(scheduler="processes")),
        "tlc.dask, LocalCluster (2 x 1)": tlc_dask(scheduler=client),
        "onnxruntime, 1 process, 1 thread": ort_loop(1),
        "onnxruntime, 1 process, 2 threads": ort_loop(2),
        "onnxruntime + dask, threads (2)": ort_dask(scheduler="threads"),
        "onnxruntime + dask, processes (2 x 1)": with_pool(ort_dask(scheduler="processes")),
        "onnxruntime + dask, LocalCluster (2 x 1)": ort_dask(scheduler=client),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=5_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from distributed import Client, LocalCluster

    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp_n.onnx"
        features, classes = symbolic_batch_mlp(path)
        print(f"mlp ({features} -> 1024 -> 1024 -> {classes}), {args.rows} rows in chunks of {args.chunk}, "
              f"{args.repeats} repeats, {os.cpu_count()} CPUs", flush=True)
        whole = tlc.compile(str(path), jit="eager", num_threads=1).run({"x": make_rows(0, args.rows, features)})["y"]
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=40) as cluster, Client(cluster) as client:
            runs = contenders(str(path), args.rows, args.chunk, features, classes, client, pool)
            first, samples, outputs = {}, {k: [] for k in runs}, {}
            for label, fn in runs.items():           # the warm-up round: cold processes, compiles, sessions
                t0 = time.perf_counter()
                outputs[label] = fn()
                first[label] = time.perf_counter() - t0
                print(f"  first call {label}: {first[label]:.2f} s", flush=True)
            for r in range(args.repeats):
                for label, fn in runs.items():
                    time.sleep(0.2)
                    t0 = time.perf_counter()
                    fn()
                    samples[label].append(args.rows / (time.perf_counter() - t0))
                print(f"  round {r + 1}/{args.repeats} done", flush=True)
        pool.shutdown()
    base = statistics.median(samples["tlc, 1 process, 1 thread"])
    chunked = outputs["tlc, 1 process, 1 thread"]
    print(f"\nload average before: {load[0]:.2f}, after: {os.getloadavg()[0]:.2f}")
    print("\n| contender | rows/s (median) | min-max | vs tlc 1 process 1 thread | first call s | "
          "vs tlc 1 process, same chunks | vs one plan.run over all rows |")
    print("|---|---:|---:|---:|---:|---|---|")
    for label, xs in samples.items():
        med = statistics.median(xs)
        got = outputs[label]
        print(f"| {label} | {med:,.0f} | {min(xs):,.0f}-{max(xs):,.0f} | {med / base:.2f} | {first[label]:.2f} | "
              f"{_same(got, chunked)} | {_same(got, whole)} |")
    return 0


def _same(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}"
    return "bit for bit" if np.array_equal(got, want) else f"max diff {np.abs(got - want).max():.1e}"


if __name__ == "__main__":
    sys.exit(main())
