"""The cuda target on a real device: whole plans of the model suites, and one elementwise kernel.

``--plans MODEL...`` (names of tools/models.py's suites and the classic benchmark's): each model at each
``--batch``, compiled for ``target="cuda"`` (device-resident: feeds in once, outputs out once) and for the CPU,
checked against each other, and timed end to end (host arrays in, host arrays out) in interleaved rounds against
the CPU plan and onnxruntime (its CPU provider on every core, and its CUDAExecutionProvider when the installed
onnxruntime has one); first call (compile and run) of the cuda plan; the steps that ran on the host.

    python tools/cuda_bench.py --plans resnet18 mobilenetv2 vit gpt2_block --batch 1 8

Without ``--plans``: the CUDA renderer alone, an elementwise group (GELU-like tanh chain with a broadcast bias)
compiled for ``target="cuda"`` and for the CPU, checked against each other and timed, median and spread of
``--calls``.

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


#: a pause before each contender's block: onnxruntime's and OpenBLAS's idle threads spin for tens of milliseconds
#: after their runs and take the CPUs the next contender's threads need (docs/architecture.md, Threads)
PAUSE_S = 0.15


def _model(name: str, batch: int):
    import models

    if name in models.BUILDERS or name == "resnet50_light":
        return models.bench_model(name)
    return models.build(name, batch=batch)


def plan_row(name: str, batch: int, rounds: int, calls: int) -> str:
    """One table row: ``name`` at ``batch`` as a cuda plan, a CPU plan and onnxruntime's sessions."""
    import models
    import onnxruntime as ort

    import tlc
    from tlc.io.onnx import from_onnx

    proto = _model(name, batch)
    feeds = models.random_feeds(proto, batch)
    graph = from_onnx(proto)[0]
    start = time.perf_counter()
    cuda_plan = tlc.compile(graph, target="cuda", jit="eager")
    got = cuda_plan.run(feeds)
    first = time.perf_counter() - start
    cpu_plan = tlc.compile(graph, target="cpu", jit="eager")
    want = cpu_plan.run(feeds)
    err = max((float(np.max(np.abs(got[k] - want[k]) / (1 + np.abs(want[k])))) if want[k].size else 0.0)
              for k in want)
    host = [s.op for s in cuda_plan.stats().steps if s.mode == "reference"]
    contenders = {"tlc cuda": lambda: cuda_plan.run(feeds), "tlc cpu": lambda: cpu_plan.run(feeds)}
    data = proto.SerializeToString()
    for provider in ("CPUExecutionProvider", "CUDAExecutionProvider"):
        if provider in ort.get_available_providers():
            sess = ort.InferenceSession(data, providers=[provider])
            contenders[f"ort {provider[:-17].lower()}"] = lambda s=sess: s.run(None, feeds)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for fn in contenders.values():
        fn()
    for _ in range(rounds):          # interleaved: drift hits every contender alike
        for key, fn in contenders.items():
            time.sleep(PAUSE_S)
            fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[key].append((time.perf_counter() - t0) / calls * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    cells = " | ".join(f"{med[k]:.3f} [{min(v):.3f}-{max(v):.3f}]" for k, v in times.items())
    ort_best = min(v for k, v in med.items() if k.startswith("ort"))
    return (f"| {name} | {batch} | {cells} | {med['tlc cuda'] / ort_best:.2f} | {len(host)} "
            f"{'(' + ', '.join(sorted(set(host))) + ')' if host else ''} | {first:.2f} | {err:.1e} |")


def plans(names: list[str], batches: list[int], rounds: int, calls: int) -> None:
    import onnxruntime as ort

    ort_cols = [p[:-17].lower() for p in ("CPUExecutionProvider", "CUDAExecutionProvider")
                if p in ort.get_available_providers()]
    heads = ["tlc cuda", "tlc cpu"] + [f"ort {c}" for c in ort_cols]
    print(f"onnxruntime {ort.__version__}, providers {ort.get_available_providers()}; ms per run, median [min-max] "
          f"of {rounds} interleaved rounds of {calls} runs; host arrays in and out")
    print("| model | batch | " + " | ".join(f"{h} ms" for h in heads)
          + " | cuda / best ort | host steps | first call s | max rel diff to cpu |")
    print("|---|---|" + "---|" * (len(heads) + 4))
    for name in names:
        for batch in batches:
            try:
                print(plan_row(name, batch, rounds, calls), flush=True)
            except Exception as exc:   # noqa: BLE001 - one model's failure is a row of the table
                print(f"| {name} | {batch} | failed: {type(exc).__name__}: {str(exc)[:300]} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 1 << 24], help="elements of x")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--plans", nargs="+", metavar="MODEL", help="time whole plans of these models instead")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    if args.plans:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        plans(args.plans, args.batch, args.rounds, max(1, args.calls // 4))
        return 0
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
