"""The tlc benchmark suite (shared/bench/README.md): tlc against onnxruntime on the same machine, in one run.

    python tools/bench.py                       # every model, 2 threads and 1 thread, writes bench-results/
    python tools/bench.py --models mlp elementwise_chain --threads 2 --rounds 20

Contenders, interleaved round-robin so drift hits all alike: tlc -O0 (the reference executor), tlc -O2 and -O3
(eager JIT), onnxruntime with ORT_ENABLE_ALL and ORT_DISABLE_ALL, all at the same intra-op thread count.
Reports medians with min/max, ratios to onnxruntime, the memory-bandwidth bound of the memory-bound models,
first-call latency with a cold and a warm kernel cache, compile time split into passes / lowering / JIT,
node counts (original, tlc -O1/-O2/-O3, onnxruntime's optimized graph), peak RSS, and output agreement.
Output: a markdown table on stdout and in OUT/results.md, OUT/results.json, OUT/ratios.png.

The machine may be shared: the load average is recorded before and after each model's timing (in the table),
and ``--profile`` adds the step profile of tlc -O2 (``plan.profile().table()``) for every model where it is
slower than onnxruntime, so the report can say why.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402  (tools/ is not a package)

ALL_MODELS = ["mlp", "transformer_block", "elementwise_chain", "layernorm_softmax", "resnet50_light"]
MEMORY_BOUND = {"elementwise_chain", "layernorm_softmax"}
PAUSE_S = 0.15          # OpenBLAS threads spin ~0.13 s after a call (FACTS.md): let them settle
WARM_CALLS = 2          # data untouched for ~0.1 s is slow for the next two passes (FACTS.md)
TIMED_CALLS = 3


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- machine facts
def machine_info() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    import onnx
    import onnxruntime

    import tlc

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "tlc": tlc.__version__,
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


def copy_bandwidth(megabytes: int = 256, repeats: int = 7) -> float:
    """Measured copy bandwidth in GB/s (bytes read + bytes written), the best of ``repeats`` (the machine's, as
    far as a shared machine lets it show)."""
    src = np.ones(megabytes * (1 << 20) // 4, np.float32)
    dst = np.empty_like(src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return 2 * src.nbytes / min(times) / 1e9


# ---------------------------------------------------------------------------- contenders
def model_inputs(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def ort_session(model, threads: int, level: str, optimized_path: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def make_contenders(name: str, model, threads: int, include_o0: bool) -> tuple[dict, dict]:
    """Callables feeds -> outputs (list) per contender, and compile facts of the tlc plans."""
    import tlc
    from tlc.io.onnx import from_onnx

    graph, _ = from_onnx(model)
    out_names = [n for _, n in graph.outputs]
    contenders = {}
    facts = {}
    if include_o0:
        contenders["tlc -O0"] = lambda f: [tlc.reference.run(graph, f)[n] for n in out_names]
    plans = {}
    for level in (2, 3):
        start = time.perf_counter()
        plan = tlc.compile(graph, target="cpu", opt_level=level, jit="eager", num_threads=threads)
        facts[f"tlc -O{level}"] = {"compile_s": time.perf_counter() - start, **compile_split(plan)}
        contenders[f"tlc -O{level}"] = (lambda p: lambda f: [p.run(f)[n] for n in out_names])(plan)
        plans[f"tlc -O{level}"] = plan
    for level, label in (("ORT_ENABLE_ALL", "ORT all"), ("ORT_DISABLE_ALL", "ORT none")):
        sess = ort_session(model, threads, level)
        contenders[label] = (lambda s: lambda f: s.run(None, f))(sess)
    return contenders, facts, plans


def profile_plan(plan, feeds: dict, runs: int = 20) -> str:
    """The step profile of ``runs`` runs (after two unprofiled ones), as ``Profile.table()`` prints it."""
    for _ in range(2):
        plan.run(feeds)
    plan.profile(reset=True)
    for _ in range(runs):
        time.sleep(0.02)
        plan.run(feeds, profile=True)
    return plan.profile(reset=True).table()


def compile_split(plan) -> dict:
    """Compile time of a plan split into passes, lowering and JIT, as the plan reports it."""
    report = getattr(plan, "compile_report", None)
    if report is None:
        return {}
    data = report() if callable(report) else report
    return {k: v for k, v in dict(data).items() if isinstance(v, (int, float))}


def time_interleaved(contenders: dict, feeds: dict, rounds: int, budget_s: float) -> dict[str, list[float]]:
    """Round-robin timing; each contender gets WARM_CALLS untimed then TIMED_CALLS timed calls per round."""
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    spent = {k: 0.0 for k in contenders}
    for r in range(rounds):
        for label, fn in contenders.items():
            if r > 2 and spent[label] > budget_s:
                continue  # slow contenders (the reference executor on resnet) get fewer rounds
            time.sleep(PAUSE_S)
            for _ in range(WARM_CALLS):
                fn(feeds)
            for _ in range(TIMED_CALLS):
                start = time.perf_counter()
                fn(feeds)
                elapsed = time.perf_counter() - start
                samples[label].append(elapsed * 1000)
                spent[label] += elapsed * (1 + WARM_CALLS / TIMED_CALLS)
    return samples


def summarize(samples: list[float]) -> dict:
    return {"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples),
            "runs": len(samples)}


# ---------------------------------------------------------------------------- one-off measurements
def node_counts(model) -> dict:
    import onnx

    import tlc
    from tlc.io.onnx import from_onnx

    graph, _ = from_onnx(model)
    counts = {"original": len(model.graph.node)}
    for level in (1, 2, 3):
        optimized, _ = tlc.optimize(graph, opt_level=level)
        counts[f"tlc -O{level}"] = len(optimized.ops())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ort.onnx")
        ort_session(model, 1, "ORT_ENABLE_ALL", optimized_path=path)
        counts["ORT all"] = len(onnx.load(path).graph.node)
    return counts


FIRST_CALL_SCRIPT = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import numpy as np, onnx
model = onnx.load(sys.argv[1]); kind = sys.argv[2]; threads = int(sys.argv[3])
feeds = {k: np.load(sys.argv[4])[k] for k in np.load(sys.argv[4]).files}
t1 = time.perf_counter()
split = {}
if kind == "ort":
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = threads
    s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
    t2 = time.perf_counter()
    s.run(None, feeds)
else:
    import tlc
    graph = tlc.load(sys.argv[1])
    t15 = time.perf_counter()
    plan = tlc.compile(graph, target="cpu", opt_level=2, jit="eager", num_threads=threads)
    t2 = time.perf_counter()
    split = dict(plan.compile_report(), import_and_load_s=t15 - t1)
    t1 = t15
    plan.run(feeds)
t3 = time.perf_counter()
# NOTE: ru_maxrss survives exec (it counted the benchmark process this one was forked from); VmHWM is this image's
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
peak = int(hwm[0]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t1, "compile_s": t2 - t1, "first_run_s": t3 - t2,
                  "split": split, "peak_rss_mb": peak}))
"""


def first_call(model_path: str, feeds_path: str, kind: str, threads: int, cache_dir: str) -> dict:
    env = dict(os.environ, TLC_CACHE_DIR=cache_dir)
    proc = subprocess.run([sys.executable, "-c", FIRST_CALL_SCRIPT, model_path, kind, str(threads), feeds_path],
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- the run
def bench_model(name: str, threads_list: list[int], rounds: int, budget_s: float, bandwidth: float,
                tmp: str, profile: bool = False, include_o0: bool = True) -> dict:
    model = models.bench_model(name)
    feeds = model_inputs(model)
    import onnx

    model_path = os.path.join(tmp, f"{name}.onnx")
    onnx.save(model, model_path)
    feeds_path = os.path.join(tmp, f"{name}.npz")
    np.savez(feeds_path, **feeds)
    result: dict = {"model": name, "nodes": node_counts(model), "threads": {}, "load": {}, "profile_o2": {}}
    if name in MEMORY_BOUND:
        out_bytes = sum(a.nbytes for a in feeds.values())  # outputs have the input's size in these models
        min_bytes = sum(a.nbytes for a in feeds.values()) + out_bytes
        result["bandwidth_bound_ms"] = min_bytes / (bandwidth * 1e9) * 1000
    for threads in threads_list:
        log(f"[{name}] threads={threads}: compiling contenders")
        contenders, facts, plans = make_contenders(name, model, threads, include_o0=include_o0)
        expected = contenders["ORT all"](feeds)
        errors = {k: max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                         for a, b in zip(fn(feeds), expected)) for k, fn in contenders.items()}
        log(f"[{name}] threads={threads}: timing {', '.join(contenders)}")
        load_before = os.getloadavg()[0]
        samples = time_interleaved(contenders, feeds, rounds, budget_s)
        stats = {k: summarize(v) for k, v in samples.items()}
        ort_median = stats["ORT all"]["median_ms"]
        for k in stats:
            stats[k]["ratio_to_ort"] = stats[k]["median_ms"] / ort_median
            stats[k]["max_abs_err_vs_ort"] = errors[k]
            stats[k].update(facts.get(k, {}))
        result["load"][threads] = {"before": load_before, "after": os.getloadavg()[0]}
        if profile and stats["tlc -O2"]["ratio_to_ort"] > 1.0:
            log(f"[{name}] threads={threads}: profiling tlc -O2")
            result["profile_o2"][threads] = profile_plan(plans["tlc -O2"], feeds)
        result["threads"][threads] = stats
    with tempfile.TemporaryDirectory() as cache:
        result["first_call"] = {
            "tlc cold cache": first_call(model_path, feeds_path, "tlc", threads_list[0], cache),
            "tlc warm cache": first_call(model_path, feeds_path, "tlc", threads_list[0], cache),
            "ORT all": first_call(model_path, feeds_path, "ort", threads_list[0], cache),
        }
    return result


def _cell(s: dict | None) -> str:
    return "-" if s is None else f"{s['median_ms']:.2f} [{s['min_ms']:.2f}-{s['max_ms']:.2f}] x{s['ratio_to_ort']:.2f}"


def _secs(d: dict, key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:.2f}"


def markdown(results: list[dict], info: dict, bandwidth: float) -> str:
    lines = [f"# tlc benchmark ({info['date']})", "",
             f"{info['cpu']}, {info['cores']} cores; numpy {info['numpy']}, numba {info['numba']}, "
             f"onnxruntime {info['onnxruntime']}; copy bandwidth {bandwidth:.1f} GB/s", ""]
    threads_all = sorted({t for r in results for t in r["threads"]})
    labels = ["tlc -O0", "tlc -O2", "tlc -O3", "ORT all", "ORT none"]
    for threads in threads_all:
        lines += [f"## Steady-state latency, {threads} thread(s): median ms [min-max], ratio to ORT all", "",
                  "| model | " + " | ".join(labels) + " | bound ms (-O2 / bound) | max err -O2 | load |",
                  "|---" * (len(labels) + 4) + "|"]
        for r in results:
            stats = r["threads"].get(threads)
            if not stats:
                continue
            bound = r.get("bandwidth_bound_ms")
            bound_text = "-" if bound is None else f"{bound:.2f} (x{stats['tlc -O2']['median_ms'] / bound:.1f})"
            load = r.get("load", {}).get(threads, {})
            lines.append(f"| {r['model']} | " + " | ".join(_cell(stats.get(label)) for label in labels) +
                         f" | {bound_text} | {stats['tlc -O2']['max_abs_err_vs_ort']:.1e} | "
                         f"{load.get('before', float('nan')):.1f}-{load.get('after', float('nan')):.1f} |")
        lines.append("")
    lines += ["## Compile time and first call (fresh processes, -O2, s)", "",
              "compile = `tlc.compile()` of the loaded model (ORT: session creation); first call = compile + first "
              "run; both after `import tlc` and loading. In-process: the benchmark's own compile (kernels already in "
              "memory for -O3).", "",
              "| model | compile cold | compile warm (passes / lower / jit) | first run cold / warm "
              "| first call cold | warm | ORT first call | in-process -O2 / -O3 | peak RSS MB tlc / ORT |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        stats = r["threads"][threads_all[0]]
        cold, warm, ort = (r["first_call"][k] for k in ("tlc cold cache", "tlc warm cache", "ORT all"))
        split = warm.get("split", {})
        parts = " / ".join(_secs(split, k) for k in ("passes_s", "lower_s", "jit_s"))
        lines.append(f"| {r['model']} | {_secs(cold, 'compile_s')} | {_secs(warm, 'compile_s')} ({parts}) | "
                     f"{_secs(cold, 'first_run_s')} / {_secs(warm, 'first_run_s')} | {_secs(cold, 'first_call_s')} | "
                     f"{_secs(warm, 'first_call_s')} | {_secs(ort, 'first_call_s')} | "
                     f"{_secs(stats['tlc -O2'], 'compile_s')} / {_secs(stats['tlc -O3'], 'compile_s')} | "
                     f"{cold.get('peak_rss_mb', float('nan')):.0f} / {ort.get('peak_rss_mb', float('nan')):.0f} |")
    lines += ["", "## Node counts", "", "| model | original | tlc -O1 | tlc -O2 | tlc -O3 | ORT all |",
              "|---|---|---|---|---|---|"]
    for r in results:
        n = r["nodes"]
        lines.append(f"| {r['model']} | {n['original']} | {n['tlc -O1']} | {n['tlc -O2']} | {n['tlc -O3']} | "
                     f"{n['ORT all']} |")
    profiles = [(r["model"], t, text) for r in results for t, text in sorted(r.get("profile_o2", {}).items())]
    if profiles:
        lines += ["", "## Profiles of tlc -O2 where it is slower than onnxruntime", ""]
        for model, threads, text in profiles:
            lines += [f"### {model}, {threads} thread(s)", "", "```", text, "```", ""]
    return "\n".join(lines) + "\n"


def chart(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    threads = sorted({t for r in results for t in r["threads"]})[-1]
    labels = ["tlc -O2", "tlc -O3", "ORT none"]
    names = [r["model"] for r in results if threads in r["threads"]]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        ratios = [r["threads"][threads][label]["ratio_to_ort"] for r in results if threads in r["threads"]]
        ax.bar(np.arange(len(names)) + i * width, ratios, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(names)) + width * (len(labels) - 1) / 2, names, rotation=15)
    ax.set_ylabel("latency / onnxruntime (ORT_ENABLE_ALL)")
    ax.set_yscale("log")
    ax.set_title(f"tlc vs onnxruntime, {threads} thread(s), medians (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=ALL_MODELS, choices=ALL_MODELS)
    parser.add_argument("--threads", nargs="+", type=int, default=None,
                        help="intra-op thread counts (default: all cores, then 1)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (x3 timed calls each)")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds a slow contender may take per model")
    parser.add_argument("--out", default="bench-results", help="folder for results.md/.json and ratios.png")
    parser.add_argument("--profile", action="store_true",
                        help="profile tlc -O2 (20 runs) where it is slower than onnxruntime; tables in the report")
    parser.add_argument("--no-o0", action="store_true", help="leave out tlc -O0 (the reference executor)")
    args = parser.parse_args(argv)
    threads = args.threads or sorted({os.cpu_count() or 1, 1}, reverse=True)
    os.makedirs(args.out, exist_ok=True)
    info = machine_info()
    bandwidth = copy_bandwidth()
    log(f"copy bandwidth {bandwidth:.1f} GB/s")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            results.append(bench_model(name, threads, args.rounds, args.budget, bandwidth, tmp,
                                       profile=args.profile, include_o0=not args.no_o0))
    text = markdown(results, info, bandwidth)
    print(text)
    Path(args.out, "results.md").write_text(text)
    Path(args.out, "results.json").write_text(json.dumps({"machine": info, "copy_bandwidth_gbs": bandwidth,
                                                          "results": results}, indent=1, default=str))
    chart(results, os.path.join(args.out, "ratios.png"))
    log(f"wrote {args.out}/results.md, results.json, ratios.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
