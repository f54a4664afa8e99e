"""Indicative timings: compiled plans against the reference executor (median of interleaved runs, ms).

Run: ``PYTHONPATH=. python tests/runtime/plan_bench.py [rounds] [threads]`` (threads: BLAS and Numba, for every
contender). Not a test (nothing is asserted on time); the official benchmark is tools/bench.py.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import tlc
from tlc.io.onnx import from_onnx
from tlc.runtime import compile

PAUSE_S = 0.15      # OpenBLAS threads spin ~0.13 s after a call (FACTS.md): let them settle between contenders


def mlp(batch: int = 64) -> tlc.Graph:
    """784 -> 1024 -> 1024 -> 10 with MatMul + Add + Relu and a Softmax (the suite's mlp without Gemm)."""
    rng = np.random.default_rng(0)
    g = tlc.Graph("mlp")
    h = g.input("x", "float32", (batch, 784))
    for i, (fan_in, fan_out) in enumerate([(784, 1024), (1024, 1024), (1024, 10)]):
        w = g.constant((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32), f"w{i}")
        b = g.constant(rng.standard_normal(fan_out).astype(np.float32) * 0.1, f"b{i}")
        h = g.add_node("Add", [g.add_node("MatMul", [h, w]), b])
        if i < 2:
            h = g.add_node("Relu", [h])
    g.output(g.add_node("Softmax", [h], axis=-1), "y")
    return g


def elementwise_chain() -> tlc.Graph:
    sys.path.insert(0, "tools")
    import models

    return from_onnx(models.elementwise_chain())[0]


def bench(name: str, graph: tlc.Graph, rounds: int, threads: int | None) -> None:
    feeds = {n.name: np.random.default_rng(1).standard_normal(n.output_types[0].shape).astype(np.float32)
             for n in graph.inputs}
    contenders = {"reference": lambda: tlc.reference.run(graph, feeds)}
    for level in (0, 2):
        plan = compile(graph, opt_level=level, jit="eager", num_threads=threads)
        contenders[f"plan -O{level}"] = (lambda p: lambda: p.run(feeds))(plan)
        print(plan.stats(), "\n")
    want = contenders["reference"]()
    for label, fn in contenders.items():
        for _ in range(3):                                  # warm-up
            got = fn()
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=label)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for label, fn in contenders.items():
            time.sleep(PAUSE_S)
            start = time.perf_counter()
            fn()
            times[label].append((time.perf_counter() - start) * 1e3)
    ref = statistics.median(times["reference"])
    for label, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<18} {label:<16} median {med:9.3f} ms  min {min(ts):9.3f}  max {max(ts):9.3f}  "
              f"x{ref / med:5.2f} vs reference")


def main(rounds: int = 20, threads: int | None = None) -> None:
    bench("mlp", mlp(), rounds, threads)
    bench("elementwise_chain", elementwise_chain(), rounds, threads)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, int(sys.argv[2]) if len(sys.argv) > 2 else None)
