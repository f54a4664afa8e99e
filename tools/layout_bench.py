"""What channels-last layout buys with tlc's kernels: NCHW vs NHWC conv (and pool) on the light models' shapes.

    PYTHONPATH=. python tools/layout_bench.py                        # every model, 1 and 2 threads
    PYTHONPATH=. python tools/layout_bench.py --models resnet50 --threads 2 --rounds 21

Per conv shape of each model (batch 1, every distinct shape once, counted as often as the model has it):
the NCHW kernel ``lib_conv.choose_algorithm`` picks (direct Numba for depthwise), the NHWC kernel
``lib_conv_nhwc.choose_algorithm`` picks, and the two transposes a lone NHWC conv would need (input to
NHWC, output back). Contenders run interleaved, each call preceded by an untimed one (warm data); medians of
``--rounds`` rounds. Prints one markdown table per model and thread count and the model totals, the data behind
``tlc/passes/layout_cost.py``. Not a test: nothing is asserted on time; outputs are checked to agree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402  (tools/ is not a package)

import tlc  # noqa: E402
from tlc.kernels import lib_conv, lib_conv_nhwc, lib_pool  # noqa: E402
from tlc.passes.layout_cost import ConvShape, conv_ns  # noqa: E402
from tlc.runtime import threads  # noqa: E402
from tlc.runtime.impl import spatial_window  # noqa: E402
from tlc.targets import CPU  # noqa: E402

MODELS = ["resnet50", "shufflenet", "squeezenet", "inception_v1", "inception_v2"]


def conv_shapes(name: str) -> dict[tuple, int]:
    """(x shape, w shape, strides, pads begin, dilations, group) -> how many convs of the model have it."""
    graph, _ = tlc.optimize(tlc.load(str(models.light_model_path(name))), opt_level=1)
    found: dict[tuple, int] = {}
    for node in graph.ops():
        if node.op != "Conv":
            continue
        x, w = (tuple(graph.type_of(v).shape) for v in graph.inputs_of(node)[:2])
        window, begin, _ = spatial_window(node.attrs, w[2:], x[2:])
        key = (x, w, window.strides, tuple(begin), window.dilations, int(node.attrs.get("group", 1)))
        found[key] = found.get(key, 0) + 1
    return found


def transpose_into(dst: np.ndarray, src: np.ndarray, perm: tuple[int, ...]) -> np.ndarray:
    np.copyto(dst, src.transpose(perm))
    return dst


def contenders(key: tuple, rng: np.random.Generator) -> tuple[dict, np.ndarray, np.ndarray]:
    """The calls to time for one shape, and the NCHW and NHWC outputs (to check they agree)."""
    xs, ws, strides, begin, dilations, group = key
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32) / np.sqrt(ws[1] * ws[2] * ws[3])
    b = rng.standard_normal(ws[0], dtype=np.float32)
    ho = (xs[2] + 2 * begin[0] - (ws[2] - 1) * dilations[0] - 1) // strides[0] + 1
    wo = (xs[3] + 2 * begin[1] - (ws[3] - 1) * dilations[1] - 1) // strides[1] + 1
    geo = lib_conv.geometry(xs, ws, (xs[0], ws[0], ho, wo), strides, begin, dilations, group)
    algo = lib_conv.choose_algorithm(geo)
    y = np.empty((xs[0], ws[0], ho, wo), np.float32)
    work = [np.empty(s, np.float32) for s in lib_conv.workspace(geo, algo)]
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    w_ohwi = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    geo_t = lib_conv_nhwc.geometry(x_nhwc.shape, w_ohwi.shape, (xs[0], ho, wo, ws[0]), strides, begin, dilations,
                                   group)
    algo_t = lib_conv_nhwc.choose_algorithm(geo_t)
    y_t = np.empty((xs[0], ho, wo, ws[0]), np.float32)
    work_t = [np.empty(s, np.float32) for s in lib_conv_nhwc.workspace(geo_t, algo_t)]
    x_back, y_back = np.empty_like(x_nhwc), np.empty_like(y)
    calls = {
        f"nchw:{algo}": lambda: lib_conv.run(algo, x, w, b, y, geo, work),
        f"nhwc:{algo_t}": lambda: lib_conv_nhwc.run(algo_t, x_nhwc, w_ohwi, b, y_t, geo_t, work_t),
        "t_in": lambda: transpose_into(x_back, x, (0, 2, 3, 1)),
        "t_out": lambda: transpose_into(y_back, y_t, (0, 3, 1, 2)),
    }
    return calls, y, y_t


def time_calls(calls: dict, rounds: int) -> dict[str, float]:
    """Median ms of each call over interleaved rounds; each timed call follows an untimed one."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    for fn in calls.values():
        fn()
    for _ in range(rounds):
        for key, fn in calls.items():
            fn()
            start = time.perf_counter()
            fn()
            times[key].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def model_shape(key: tuple) -> ConvShape:
    xs, ws, strides, begin, dilations, group = key
    ho = (xs[2] + 2 * begin[0] - (ws[2] - 1) * dilations[0] - 1) // strides[0] + 1
    wo = (xs[3] + 2 * begin[1] - (ws[3] - 1) * dilations[1] - 1) // strides[1] + 1
    return ConvShape(xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], ho, wo, group, strides[0], strides[1],
                     dilations[1], any(begin))


def describe(key: tuple) -> str:
    xs, ws, strides, _, _, group = key
    kind = "dw " if group == xs[1] == ws[0] and group > 1 else (f"g{group} " if group > 1 else "")
    return f"{kind}{ws[2]}x{ws[3]}/{strides[0]} {xs[1]}->{ws[0]} @{xs[2]}"


def pool_rows(rounds: int, rng: np.random.Generator) -> list[str]:
    """Max pool 3x3/2 pad 1 on ResNet-50's stem output, NCHW taps vs NHWC taps."""
    x = rng.standard_normal((1, 64, 112, 112), dtype=np.float32)
    geo = lib_pool.PoolGeometry(1, 64, 112, 112, 3, 3, 56, 56, 2, 2, 1, 1, 1, 1, 1, 1)
    out = np.empty((1, 64, 56, 56), np.float32)
    work = [np.empty(s, np.float32) for s in lib_pool.workspace(geo)]
    x_t, out_t = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.empty((1, 56, 56, 64), np.float32)
    work_t = [np.empty((1, 114, 114, 64), np.float32)] if work else []
    from tlc.kernels import lib_pool_nhwc

    med = time_calls({"nchw": lambda: lib_pool.max_pool(x, out, geo, work),
                      "nhwc": lambda: lib_pool_nhwc.max_pool(x_t, out_t, geo, work_t)}, rounds)
    np.testing.assert_array_equal(out_t.transpose(0, 3, 1, 2), out)
    return [f"| maxpool 3x3/2 64 @112 | 1 | {med['nchw']:.3f} | {med['nhwc']:.3f} | | |"]


# ---------------------------------------------------------------------------- fitting the cost model
def _median_ns(fn, rounds: int, per: float) -> float:
    """Median ns per unit (``per`` units per call) over interleaved-free repeated calls (each after a warm one)."""
    return time_calls({"f": fn}, rounds)["f"] * 1e6 / per


def _fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b * x."""
    b, a = np.polyfit(np.asarray(xs), np.asarray(ys), 1)
    return float(a), float(b)


def fit(rounds: int) -> dict[str, float]:
    """The constants of ``tlc.targets.TargetCosts`` measured on this machine (ns); the CPU target's are in
    ``tlc/targets/cpu.py``."""
    rng = np.random.default_rng(0)
    n = 1 << 20
    src = rng.standard_normal(2 * n, dtype=np.float32)
    dst = np.empty(n, np.float32)
    inv_runs, per_elem = [], []
    for run in (4, 7, 14, 28, 56, 112, 448, 1792):
        rows = n // run
        view = src[: rows * (run + 1)].reshape(rows, run + 1)[:, :run]   # runs of ``run`` contiguous values
        out = dst[: rows * run].reshape(rows, run)
        inv_runs.append(1.0 / run)
        per_elem.append(_median_ns(lambda v=view, o=out: np.copyto(o, v), rounds, rows * run))
    elem_ns, run_ns = _fit_line(inv_runs, per_elem)
    rows = n // 64
    strided = src[: rows * 128].reshape(rows, 128)[:, ::2]                 # runs of 64, every other value
    strided_ns = _median_ns(lambda: np.copyto(dst[: rows * 64].reshape(rows, 64), strided), rounds, rows * 64) \
        - run_ns / 64
    a = rng.standard_normal((64, 64, 256), dtype=np.float32)
    wv = rng.standard_normal(256, dtype=np.float32)
    o = np.empty_like(a)
    ufunc_ns = _median_ns(lambda: np.multiply(a[:, ::2], wv, out=o[:, ::2]), rounds, a.size / 2) - run_ns / 256
    x = rng.standard_normal((2304, 196), dtype=np.float32)
    w = rng.standard_normal((256, 2304), dtype=np.float32)
    y = np.empty((256, 196), np.float32)
    gflops = 2 * 256 * 2304 * 196 / (time_calls({"g": lambda: np.matmul(w, x, out=y)}, rounds)["g"] * 1e6)
    key = ((1, 136, 28, 28), (136, 1, 3, 3), (1, 1), (1, 1), (1, 1), 136)
    calls, _, _ = contenders(key, rng)
    dw_ns = time_calls({"d": calls["nchw:direct"]}, rounds)["d"] * 1e6 / (136 * 28 * 28 * 9)
    t_in, t_out = [], []
    for c, hw in ((64, 56), (256, 14), (1024, 7)):
        xs = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
        xt = np.empty((1, hw, hw, c), np.float32)
        t_in.append(_median_ns(lambda v=xs, o=xt: transpose_into(o, v, (0, 2, 3, 1)), rounds, xs.size))
        t_out.append(_median_ns(lambda v=xt, o=xs: transpose_into(o, v, (0, 3, 1, 2)), rounds, xs.size))
    return {"elem_ns": elem_ns, "run_ns": run_ns, "strided_elem_ns": strided_ns, "ufunc_elem_ns": ufunc_ns,
            "gemm_gflops": gflops, "dw_direct_ns": dw_ns, "to_nhwc_ns": max(t_in), "to_nchw_ns": max(t_out)}


# ---------------------------------------------------------------------------- end to end: -O2 vs -O3
SUITE = ["mlp", "transformer_block", "elementwise_chain", "layernorm_softmax", "resnet50_light"]


def load_model(name: str) -> tlc.Graph:
    """A suite model (tools/models.py) or a light model of the onnx package (``inception_v1``, ...)."""
    import tempfile

    import onnx

    if name in SUITE:
        path = Path(tempfile.mkdtemp()) / f"{name}.onnx"
        onnx.save(models.bench_model(name), str(path))
        return tlc.load(str(path))
    return tlc.load(str(models.light_model_path(name)))


def end_to_end(name: str, n_threads: int, rounds: int, forced: bool) -> str:
    """One markdown row: -O2, -O3 (and channels-last forced) compiled with eager JIT, run interleaved."""
    from tlc.passes.layout import LayoutPass

    graph = load_model(name)
    rng = np.random.default_rng(0)
    feeds = {n.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in n.output_types[0].shape])
             .astype(n.output_types[0].dtype) for n in graph.inputs}
    cleanup = ("fold", "simplify", "dce", "cse")
    plans = {"-O2": tlc.compile(graph, opt_level=2, jit="eager", num_threads=n_threads),
             "-O3": tlc.compile(graph, opt_level=3, jit="eager", num_threads=n_threads)}
    if forced:
        plans["NHWC"] = tlc.compile(graph, passes=(cleanup, LayoutPass(prefer="nhwc"), cleanup, "fuse"),
                                    jit="eager", num_threads=n_threads)
    same = plans["-O2"].program.graph.structural_hash() == plans["-O3"].program.graph.structural_hash()
    wall: dict[str, list[float]] = {k: [] for k in plans}
    cpu: dict[str, list[float]] = {k: [] for k in plans}
    keys = list(plans)
    for r in range(rounds):
        for key in keys if r % 2 == 0 else keys[::-1]:
            plans[key].run(feeds)
            c0, t0 = time.process_time(), time.perf_counter()
            plans[key].run(feeds)
            wall[key].append((time.perf_counter() - t0) * 1e3)
            cpu[key].append((time.process_time() - c0) * 1e3)
    cells = [f"{statistics.median(wall[k]):.2f} / {min(wall[k]):.2f} / {statistics.median(cpu[k]):.2f}" for k in keys]
    ratio = statistics.median(wall["-O3"]) / statistics.median(wall["-O2"])
    return f"| {name} | {n_threads} | {' | '.join(cells)} | {ratio:.3f} | {'identical' if same else 'channels-last'} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--fit", action="store_true", help="measure the cost model's constants and exit")
    parser.add_argument("--e2e", nargs="*", metavar="MODEL",
                        help="time whole models at -O2 and -O3 (default: the benchmark suite) and exit")
    parser.add_argument("--forced", action="store_true", help="with --e2e: also time channels-last forced")
    args = parser.parse_args(argv)
    lib_conv.direct_kernel()
    if args.e2e is not None:
        extra = " | NHWC forced" if args.forced else ""
        print(f"| model | threads | -O2 | -O3{extra} | -O3 / -O2 | -O3 graph |  (ms: median / min wall / median CPU)")
        print("|---|---|---|---|" + ("---|" if args.forced else "") + "---|---|")
        for name in args.e2e or SUITE:
            for n_threads in args.threads:
                print(end_to_end(name, n_threads, args.rounds, args.forced), flush=True)
        return 0
    if args.fit:
        for n_threads in args.threads:
            threads.apply(n_threads)
            found = fit(args.rounds)
            print(f"{n_threads} thread(s): " + ", ".join(f"{k}={v:.3g}" for k, v in found.items()))
        return 0
    shapes = {name: conv_shapes(name) for name in args.models}
    for n_threads in args.threads:
        threads.apply(n_threads)
        rng = np.random.default_rng(0)
        for name, found in shapes.items():
            print(f"\n### {name}, {n_threads} thread(s), medians of {args.rounds} (ms)\n")
            print("| conv | count | NCHW | NHWC | model NCHW | model NHWC | transposes in+out | algorithms |")
            print("|---|---|---|---|---|---|---|---|")
            total = {"nchw": 0.0, "nhwc": 0.0, "t": 0.0, "model_nchw": 0.0, "model_nhwc": 0.0}
            for key, count in sorted(found.items(), key=lambda kv: (-kv[0][0][2], kv[0][1])):
                calls, y, y_t = contenders(key, rng)
                med = time_calls(calls, args.rounds)
                np.testing.assert_allclose(y_t.transpose(0, 3, 1, 2), y, rtol=1e-3, atol=1e-3)
                (nchw, nhwc) = [k for k in med if k.startswith(("nchw", "nhwc"))]
                total["nchw"] += count * med[nchw]
                total["nhwc"] += count * med[nhwc]
                total["t"] += count * (med["t_in"] + med["t_out"])
                m_nchw, m_nhwc = (v / 1e6 for v in conv_ns(CPU.costs, model_shape(key)))
                total["model_nchw"] += count * m_nchw
                total["model_nhwc"] += count * m_nhwc
                print(f"| {describe(key)} | {count} | {med[nchw]:.3f} | {med[nhwc]:.3f} | {m_nchw:.3f} | "
                      f"{m_nhwc:.3f} | {med['t_in']:.3f}+{med['t_out']:.3f} | {nchw[5:]} / {nhwc[5:]} |")
            print(f"| **total** | {sum(found.values())} | **{total['nchw']:.2f}** | **{total['nhwc']:.2f}** | "
                  f"{total['model_nchw']:.2f} | {total['model_nhwc']:.2f} | {total['t']:.2f} | |")
        if "resnet50" in args.models:
            print("\n" + "\n".join(pool_rows(args.rounds, rng)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
