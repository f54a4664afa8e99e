"""The CUDA renderer on a real device: an elementwise group (GELU-like tanh chain with a broadcast bias) compiled
for ``target="cuda"`` and for the CPU, checked against each other and timed, median and spread of ``--calls``.

A CUDA call copies its inputs to the device and its outputs back (``CudaKernel``: host arrays in and out), so
the figure is end to end; the time of those copies alone (x and b to the device, y back) is printed beside
it, to show how much of it the transfers are. Needs numba-cuda and a GPU (or
``NUMBA_ENABLE_CUDASIM=1``, which is far too slow to time: use ``--sizes 4096``).

    python tools/cuda_bench.py --sizes 1048576 16777216
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlc.ir import Graph, TensorType  # noqa: E402
from tlc.kernels import compile_group  # noqa: E402


def body(dtype: str) -> Graph:
    """y = 0.5 * h * (1 + tanh(0.79788 * (h + 0.044715 * h^3))), h = x + b (b broadcast over rows)."""
    g = Graph("gelu_bias")
    x = g.input("x", dtype, ("N", 1024))
    b = g.input("b", dtype, (1024,))
    h = g.add_node("Add", [x, b])
    c = lambda v: g.constant(np.array(v, dtype))  # noqa: E731
    cube = g.add_node("Mul", [g.add_node("Mul", [h, h]), h])
    inner = g.add_node("Mul", [c(0.7978845608), g.add_node("Add", [h, g.add_node("Mul", [c(0.044715), cube])])])
    half = g.add_node("Mul", [c(0.5), h])
    g.output(g.add_node("Mul", [half, g.add_node("Add", [c(1.0), g.add_node("Tanh", [inner])])]), "y")
    return g


def timed(fn, calls: int) -> tuple[float, float, float]:
    fn()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3, min(ts) * 1e3, max(ts) * 1e3


def measure(g: Graph, rows: int, calls: int, cuda) -> str:
    """One table row: ``g`` on [rows, 1024] on the CPU and on the device."""
    types = [TensorType("float32", (rows, 1024)), TensorType("float32", (1024,))]
    cpu = compile_group(g, "elementwise", types, target="cpu")
    gpu = compile_group(g, "elementwise", types, target="cuda")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 1024), dtype=np.float32)
    b = rng.standard_normal(1024, dtype=np.float32)
    y_cpu, y_gpu = np.empty_like(x), np.empty_like(x)
    t_cpu = timed(lambda: cpu([x, b], [y_cpu]), calls)
    t_gpu = timed(lambda: gpu([x, b], [y_gpu]), calls)
    diff = float(np.abs(y_cpu - y_gpu).max())
    d_y = cuda.device_array(y_gpu.shape, y_gpu.dtype)
    t_copy = timed(lambda: (cuda.to_device(x), cuda.to_device(b), d_y.copy_to_host(y_gpu)), calls)
    return (f"| {rows * 1024} | {t_cpu[0]:.3f} [{t_cpu[1]:.3f}-{t_cpu[2]:.3f}] | "
            f"{t_gpu[0]:.3f} [{t_gpu[1]:.3f}-{t_gpu[2]:.3f}] | {t_copy[0]:.3f} | {diff:.1e} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 1 << 24], help="elements of x")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args(argv)
    from numba import cuda

    if not cuda.is_available():
        print("no CUDA device (and no simulator): nothing to measure", file=sys.stderr)
        return 1
    try:
        name = cuda.get_current_device().name
    except AttributeError:   # the simulator
        name = "Numba's CUDA simulator"
    print(f"device: {name if isinstance(name, str) else name.decode()}")
    print("| elements | cpu ms (median [min-max]) | cuda ms, with copies | the copies alone ms | max abs diff |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        print(measure(body("float32"), max(1, size // 1024), args.calls, cuda))
    return 0


if __name__ == "__main__":
    sys.exit(main())
