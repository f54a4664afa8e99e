"""The tlc benchmark suite (shared/bench/README.md): tlc against onnxruntime on the same machine, in one run.

    python tools/bench.py                       # the classic five, all cores and 1 thread, writes bench-results/
    python tools/bench.py --models mlp elementwise_chain --threads 2 --rounds 20
    python tools/bench.py --suite real --batch 1 8 --threads 2 --quick --models resnet18 vit

Suites: ``classic`` (the five models of shared/bench/README.md), ``real`` (tools/models.py's REAL_MODELS at each
``--batch``, named ``resnet18_b8``; ``dynamic_batch`` is one file with a symbolic batch, fed each batch size),
``tiny`` (TINY_MODELS, per-run overhead graphs, at their own batch), ``ops`` (OPS_MODELS at each ``--batch``: a
PyTorch-style LSTM -> GRU tagger, an RNN written as a Loop with an If in its body, a QDQ-quantized conv net) and
``all``. The real, tiny and ops suites race tlc -O2 against onnxruntime ORT_ENABLE_ALL only.

Contenders of the classic suite, interleaved round-robin so drift hits all alike: tlc -O0 (the reference
executor), tlc -O2 and -O3 (eager JIT), onnxruntime with ORT_ENABLE_ALL and ORT_DISABLE_ALL, all at the same
intra-op thread count. Reports medians with min/max, ratios to onnxruntime and their geometric mean per suite and
thread count, the reference steps and the planned arena bytes of the tlc -O2 plan (``plan.stats()``), peak RSS of
tlc -O2 and of onnxruntime each in a fresh process (load, three calls), the memory-bandwidth bound of the
memory-bound models, first-call latency with a cold and a warm kernel cache, compile time split into passes /
lowering / JIT, node counts (original, tlc -O1/-O2/-O3, onnxruntime's optimized graph), and output agreement.
Output: a markdown table on stdout and in OUT/results.md, OUT/results.json, OUT/ratios.png.

The machine may be shared: the load average is recorded before and after each model's timing (in the table),
and ``--profile`` adds the step profile of tlc -O2 (``plan.profile().table()``) for every model where it is
slower than onnxruntime, so the report can say why.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# NOTE: the tlc of this checkout, not whichever one is installed (an editable install may point at another
# worktree); the fresh processes get it through PYTHONPATH
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

# NOTE: tlc before numpy: it picks OpenBLAS's Haswell kernels on AMD only then (tlc/_platform.py)
import tlc  # noqa: E402

# isort: split
import numpy as np  # noqa: E402

# isort: split
import models  # noqa: E402  (tools/ is not a package)

ALL_MODELS = ["mlp", "transformer_block", "elementwise_chain", "layernorm_softmax", "resnet50_light"]
SUITES = {"classic": ALL_MODELS, "real": models.REAL_MODELS, "tiny": models.TINY_MODELS, "ops": models.OPS_MODELS}
FULL_CONTENDERS = ("tlc -O0", "tlc -O2", "tlc -O3", "ORT all", "ORT none")
LEAN_CONTENDERS = ("tlc -O2", "ORT all")      # the real and tiny suites
#: a plan at one thread, timed in the pass at the most threads beside the plan at all of them: whether a second
#: thread helps, told in one interleaved run (passes minutes apart differed as much as the thread counts did on
#: this machine: identical one-thread plans 0.92-1.00x). Not part of any ratio to onnxruntime
ONE_THREAD = "tlc -O2 at 1 thread"
QUICK_ROUNDS = 3
MEMORY_BOUND = {"elementwise_chain", "layernorm_softmax"}
PAUSE_S = 0.15          # OpenBLAS threads spin ~0.13 s after a call (FACTS.md): let them settle
WARM_CALLS = 2          # data untouched for ~0.1 s is slow for the next two passes (FACTS.md)
TIMED_CALLS = 3
#: the most rounds ``time_interleaved`` adds for ``--min-wall``, as a multiple of ``--rounds``
MAX_ROUND_FACTOR = 4


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

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "tlc": tlc.__version__,
            "tlc_path": str(Path(tlc.__file__).parent),
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


# ---------------------------------------------------------------------------- what is benchmarked
@dataclass(frozen=True)
class Case:
    """One row of the report: a model of a suite, built at ``batch`` (and fed it where the batch is symbolic)."""

    key: str          # the row's name: resnet18_b8, relu16, mlp
    model: str        # the builder's name
    suite: str
    batch: int = 1

    def build(self):
        if self.suite == "classic":
            return models.bench_model(self.model)
        return models.build(self.model, batch=self.batch)


def suite_of(name: str) -> str:
    return next(suite for suite, names in SUITES.items() if name in names)


def cases(names: list[str], batches: list[int]) -> list[Case]:
    """The rows for ``names``: real models once per batch size, the others at their own batch."""
    rows = []
    for name in names:
        suite = suite_of(name)
        if suite not in ("real", "ops"):
            rows.append(Case(name, name, suite))
            continue
        # NOTE: a symbolic-batch model (dynamic_batch) builds one file whatever the batch; it is fed batch B
        rows += [Case(f"{name}_b{batch}", name, suite, batch) for batch in batches]
    return rows


# ---------------------------------------------------------------------------- contenders
def model_inputs(model, batch: int = 1) -> dict[str, np.ndarray]:
    """Fixed-seed float32 feeds; a symbolic dimension (the batch) gets ``batch``."""
    return models.random_feeds(model, batch)


def ort_session(model, threads: int, level: str, optimized_path: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def make_contenders(model, threads: int, labels: tuple[str, ...]) -> tuple[dict, dict, dict]:
    """Callables feeds -> outputs (list) per contender of ``labels``, compile facts and the tlc plans."""
    from tlc.io.onnx import from_onnx

    graph, _ = from_onnx(model)
    out_names = [n for _, n in graph.outputs]
    contenders = {}
    facts = {}
    def ordered(run):
        """``run``'s outputs in the model's order, from one call (a comprehension over ``run(f)[n]`` would run
        the model once per output: multi-output models timed N times over)."""
        def call(f):
            out = run(f)
            return [out[n] for n in out_names]
        return call

    if "tlc -O0" in labels:
        contenders["tlc -O0"] = ordered(lambda f: tlc.reference.run(graph, f))
    plans = {}
    for label, level, count in (("tlc -O2", 2, threads), ("tlc -O3", 3, threads), (ONE_THREAD, 2, 1)):
        if label not in labels:
            continue
        start = time.perf_counter()
        plan = tlc.compile(graph, target="cpu", opt_level=level, jit="eager", num_threads=count)
        facts[label] = {"compile_s": time.perf_counter() - start, **compile_split(plan)}
        contenders[label] = ordered(plan.run)
        plans[label] = plan
    for level, label in (("ORT_ENABLE_ALL", "ORT all"), ("ORT_DISABLE_ALL", "ORT none")):
        if label not in labels:
            continue
        sess = ort_session(model, threads, level)
        contenders[label] = (lambda s: lambda f: s.run(None, f))(sess)
    return contenders, facts, plans


def plan_facts(plan) -> dict:
    """What ``plan.stats()`` says of a plan that has run: reference steps (and why), the planned arena and the
    thread count its probe settled on (after the timed runs)."""
    stats = plan.stats()
    latest = stats.specializations[-1] if stats.specializations else {}
    return {"reference_steps": stats.totals["reference_steps"],
            "reference_ops": sorted({f"{s.op}: {s.reason}" for s in stats.reference_steps()}),
            "arena_bytes": latest.get("arena_bytes"), "by_mode": stats.by_mode(), "threads": latest.get("threads")}


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


def time_interleaved(contenders: dict, feeds: dict, rounds: int, budget_s: float,
                     min_wall_s: float = 0.0) -> dict[str, list[float]]:
    """Round-robin timing; each contender gets WARM_CALLS untimed then TIMED_CALLS timed calls per round. At
    least ``rounds`` rounds, and more (up to ``MAX_ROUND_FACTOR`` times as many) until the rounds have taken
    ``min_wall_s``: a fast model's rounds span a few seconds, and this machine's slow phases last about as long
    (a 0.1 ms model's medians moved 1.3x between runs of 10 rounds)."""
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    spent = {k: 0.0 for k in contenders}
    start = time.perf_counter()
    r = 0
    while r < rounds or (r < rounds * MAX_ROUND_FACTOR and time.perf_counter() - start < min_wall_s):
        for label, fn in contenders.items():
            if r > 2 and spent[label] > budget_s:
                continue  # slow contenders (the reference executor on resnet) get fewer rounds
            time.sleep(PAUSE_S)
            for _ in range(WARM_CALLS):
                fn(feeds)
            for _ in range(TIMED_CALLS):
                begin = time.perf_counter()
                fn(feeds)
                elapsed = time.perf_counter() - begin
                samples[label].append(elapsed * 1000)
                spent[label] += elapsed * (1 + WARM_CALLS / TIMED_CALLS)
        r += 1
    return samples


def summarize(samples: list[float]) -> dict:
    return {"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples),
            "runs": len(samples)}


# ---------------------------------------------------------------------------- one-off measurements
def node_counts(model) -> dict:
    import onnx

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


#: a fresh process: load, compile (or create the session), run: the first call timed, then RSS_CALLS - 1 more, then
#: the peak resident memory of the process
RSS_CALLS = 3
FIRST_CALL_SCRIPT = r"""
import json, resource, sys, time
t0 = time.perf_counter()
if sys.argv[2] != "ort":
    import tlc  # before numpy (OpenBLAS's kernel choice)
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
    call = lambda: s.run(None, feeds)
else:
    graph = tlc.load(sys.argv[1])
    t15 = time.perf_counter()
    plan = tlc.compile(graph, target="cpu", opt_level=2, jit="eager", num_threads=threads)
    t2 = time.perf_counter()
    split = dict(plan.compile_report(), import_and_load_s=t15 - t1)
    t1 = t15
    plan.run(feeds)
    call = lambda: plan.run(feeds)
t3 = time.perf_counter()
for _ in range(int(sys.argv[5]) - 1):
    call()
# NOTE: ru_maxrss survives exec (it counted the benchmark process this one was forked from); VmHWM is this image's
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
peak = int(hwm[0]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t1, "compile_s": t2 - t1, "first_run_s": t3 - t2,
                  "split": split, "peak_rss_mb": peak}))
"""


def first_call(model_path: str, feeds_path: str, kind: str, threads: int, cache_dir: str | None = None) -> dict:
    """Run FIRST_CALL_SCRIPT in a fresh process (``kind`` tlc: -O2, or ort); ``cache_dir`` None keeps this
    process's kernel cache (warm for plans it compiled)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if cache_dir is not None:
        env["TLC_CACHE_DIR"] = cache_dir
    argv = [sys.executable, "-c", FIRST_CALL_SCRIPT, model_path, kind, str(threads), feeds_path, str(RSS_CALLS)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- the run
def bench_model(case: Case, threads_list: list[int], rounds: int, budget_s: float, bandwidth: float,
                tmp: str, profile: bool = False, include_o0: bool = True, min_wall_s: float = 0.0) -> dict:
    import onnx

    name = case.key
    model = case.build()
    feeds = model_inputs(model, case.batch)
    model_path = os.path.join(tmp, f"{name}.onnx")
    onnx.save(model, model_path)
    feeds_path = os.path.join(tmp, f"{name}.npz")
    np.savez(feeds_path, **feeds)
    labels = FULL_CONTENDERS if case.suite == "classic" else LEAN_CONTENDERS
    labels = tuple(label for label in labels if include_o0 or label != "tlc -O0")
    result: dict = {"model": name, "suite": case.suite, "batch": case.batch, "nodes": node_counts(model),
                    "threads": {}, "load": {}, "plan": {}, "peak_rss_mb": {}, "profile_o2": {}}
    if case.model in MEMORY_BOUND:
        out_bytes = sum(a.nbytes for a in feeds.values())  # outputs have the input's size in these models
        min_bytes = sum(a.nbytes for a in feeds.values()) + out_bytes
        result["bandwidth_bound_ms"] = min_bytes / (bandwidth * 1e9) * 1000
    for threads in threads_list:
        log(f"[{name}] threads={threads}: compiling contenders")
        scaling = threads == max(threads_list) > 1 and 1 in threads_list
        contenders, facts, plans = make_contenders(model, threads, labels + ((ONE_THREAD,) if scaling else ()))
        expected = contenders["ORT all"](feeds)
        errors = {k: max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                         for a, b in zip(fn(feeds), expected)) for k, fn in contenders.items()}
        log(f"[{name}] threads={threads}: timing {', '.join(contenders)}")
        load_before = os.getloadavg()[0]
        samples = time_interleaved(contenders, feeds, rounds, budget_s, min_wall_s)
        stats = {k: summarize(v) for k, v in samples.items()}
        ort_median = stats["ORT all"]["median_ms"]
        for k in stats:
            stats[k]["ratio_to_ort"] = stats[k]["median_ms"] / ort_median
            stats[k]["max_abs_err_vs_ort"] = errors[k]
            stats[k].update(facts.get(k, {}))
        result["load"][threads] = {"before": load_before, "after": os.getloadavg()[0]}
        result["plan"][threads] = plan_facts(plans["tlc -O2"])
        if profile and stats["tlc -O2"]["ratio_to_ort"] > 1.0:
            log(f"[{name}] threads={threads}: profiling tlc -O2")
            result["profile_o2"][threads] = profile_plan(plans["tlc -O2"], feeds)
        result["threads"][threads] = stats
        del contenders, plans
        # NOTE: this process's kernel cache now holds the -O2 plan's kernels: the fresh tlc process is warm
        log(f"[{name}] threads={threads}: peak RSS of tlc -O2 and onnxruntime in fresh processes")
        result["peak_rss_mb"][threads] = {
            label: first_call(model_path, feeds_path, kind, threads).get("peak_rss_mb")
            for label, kind in (("tlc -O2", "tlc"), ("ORT all", "ort"))}
    with tempfile.TemporaryDirectory() as cache:
        result["first_call"] = {
            "tlc cold cache": first_call(model_path, feeds_path, "tlc", threads_list[0], cache),
            "tlc warm cache": first_call(model_path, feeds_path, "tlc", threads_list[0], cache),
            "ORT all": first_call(model_path, feeds_path, "ort", threads_list[0], cache),
        }
    return result


def _ms(v: float) -> str:
    """Three significant digits at most, no exponent: the tiny graphs run in tens of microseconds."""
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}" if v >= 1 else f"{v:.3g}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _cell(s: dict | None, ratio: bool = True) -> str:
    if s is None:
        return "-"
    text = f"{_ms(s['median_ms'])} [{_ms(s['min_ms'])}-{_ms(s['max_ms'])}]"
    return text + f" x{s['ratio_to_ort']:.2f}" if ratio else text


def _secs(d: dict, key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:.2f}"


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def geomean_ratios(results: list[dict]) -> list[dict]:
    """Per suite and thread count: the geometric mean over the models of each contender's ratio to ORT all."""
    rows = []
    for suite in SUITES:
        in_suite = [r for r in results if r["suite"] == suite]
        for threads in sorted({t for r in in_suite for t in r["threads"]}):
            stats = [r["threads"][threads] for r in in_suite if threads in r["threads"]]
            means = {}
            for label in FULL_CONTENDERS:
                ratios = [st[label]["ratio_to_ort"] for st in stats if label in st]
                if ratios and label != "ORT all":
                    means[label] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            rows.append({"suite": suite, "threads": threads, "models": len(stats), "geomean": means})
    return rows


def _reference_cell(facts: dict) -> str:
    ops = sorted({line.split(":", 1)[0] for line in facts.get("reference_ops", [])})
    count = facts.get("reference_steps", "-")
    return f"{count} ({', '.join(ops)})" if ops else str(count)


#: the ratio to onnxruntime above which a model misses issue 9's bar
RATIO_BAR = 1.2


def checks_table(results: list[dict]) -> list[str]:
    """Issue 9's per-model bars in one place: models above ``RATIO_BAR`` x onnxruntime at a thread count, and
    each model's speed-up from one thread to the most (tlc -O2 and onnxruntime), those slower at the most
    threads marked."""
    lines = ["## Per-model checks", ""]
    for threads in sorted({t for r in results for t in r["threads"]}):
        over = [f"{r['model']} x{r['threads'][threads]['tlc -O2']['ratio_to_ort']:.2f}" for r in results
                if threads in r["threads"] and r["threads"][threads]["tlc -O2"]["ratio_to_ort"] > RATIO_BAR]
        lines.append(f"- above x{RATIO_BAR} onnxruntime at {threads} thread(s): {', '.join(over) or 'none'}")
    scaled = [r for r in results if len(r["threads"]) > 1 and 1 in r["threads"]]
    if not scaled:
        return lines + [""]
    most = max(t for r in scaled for t in r["threads"])
    slower = []
    rows = ["", f"Speed-up from 1 to {most} threads (median at 1 / median at {most}; '<' marks tlc slower at "
            f"{most}): tlc -O2 in one run (a plan at one thread timed interleaved with the plan at {most} in the "
            f"{most}-thread pass; the check), and across the two passes, onnxruntime across its two passes; and the "
            f"thread count tlc's plan at {most} settled on:", "",
            "| model | tlc -O2 in one run | tlc -O2 across passes | ORT all across passes | tlc -O2's threads |",
            "|---|---|---|---|---|"]
    for r in scaled:
        if most not in r["threads"]:
            continue
        one, many = r["threads"][1], r["threads"][most]
        across = one["tlc -O2"]["median_ms"] / many["tlc -O2"]["median_ms"]
        inter = many.get(ONE_THREAD)
        tlc_up = across if inter is None else inter["median_ms"] / many["tlc -O2"]["median_ms"]
        ort_up = one["ORT all"]["median_ms"] / many["ORT all"]["median_ms"]
        slow = round(tlc_up, 2) < 1   # (as shown: x1.00 is not slower)
        if slow:
            slower.append(r["model"])
        verdict = r.get("plan", {}).get(most, {}).get("threads") or "-"
        shown = "-" if inter is None else f"x{tlc_up:.2f}{' <' if slow else ''}"
        rows.append(f"| {r['model']} | {shown} | x{across:.2f} | x{ort_up:.2f} | {verdict} |")
    lines.append(f"- slower at {most} threads than at 1: {', '.join(slower) or 'none'}")
    return lines + rows + [""]


def latency_table(results: list[dict], suite: str, threads: int) -> list[str]:
    """The steady-state table of one suite at one thread count, with the -O2 plan's facts and peak RSS."""
    rows = [r for r in results if r["suite"] == suite and threads in r["threads"]]
    labels = [label for label in FULL_CONTENDERS if any(label in r["threads"][threads] for r in rows)]
    bound = suite == "classic"
    head = (["model", "runs"] + labels + ["-O2 / ORT", "ref steps -O2", "arena -O2", "peak RSS MB tlc / ORT"] +
            (["bound ms (-O2 / bound)"] if bound else []) + ["max err -O2", "load"])
    lines = [f"## {suite} suite, {threads} thread(s): median ms [min-max], ratio to ORT all", "",
             "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        stats = r["threads"][threads]
        o2 = stats["tlc -O2"]
        facts = r.get("plan", {}).get(threads, {})
        rss = r.get("peak_rss_mb", {}).get(threads, {})
        load = r.get("load", {}).get(threads, {})
        cells = [r["model"], str(o2.get("runs", "-"))]
        cells += [_cell(stats.get(label), ratio=label not in ("tlc -O2", "ORT all")) for label in labels]
        cells += [f"x{o2['ratio_to_ort']:.2f}", _reference_cell(facts),
                  _bytes(facts.get("arena_bytes")),
                  f"{_mb(rss.get('tlc -O2'))} / {_mb(rss.get('ORT all'))}"]
        if bound:
            b = r.get("bandwidth_bound_ms")
            cells.append("-" if b is None else f"{b:.2f} (x{o2['median_ms'] / b:.1f})")
        cells += [f"{o2['max_abs_err_vs_ort']:.1e}",
                  f"{load.get('before', float('nan')):.1f}-{load.get('after', float('nan')):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def markdown(results: list[dict], info: dict, bandwidth: float) -> str:
    lines = [f"# tlc benchmark ({info['date']})", "",
             f"{info['cpu']}, {info['cores']} cores; numpy {info['numpy']}, numba {info['numba']}, "
             f"onnxruntime {info['onnxruntime']}; copy bandwidth {bandwidth:.1f} GB/s", "",
             "Peak RSS: each contender alone in a fresh process (load, compile or create the session, "
             f"{RSS_CALLS} calls; tlc with a warm kernel cache).", "",
             "## Geometric mean of the latency ratios to ORT all (lower is better)", ""]
    geomeans = geomean_ratios(results)
    shown = [c for c in FULL_CONTENDERS if any(c in row["geomean"] for row in geomeans)]
    lines += ["| suite | threads | models | " + " | ".join(shown) + " |", "|---" * (len(shown) + 3) + "|"]
    for row in geomeans:
        means = row["geomean"]
        lines.append(f"| {row['suite']} | {row['threads']} | {row['models']} | " +
                     " | ".join("-" if c not in means else f"x{means[c]:.2f}" for c in shown) + " |")
    lines.append("")
    lines += checks_table(results)
    for suite in SUITES:
        for threads in sorted({t for r in results if r["suite"] == suite for t in r["threads"]}):
            lines += latency_table(results, suite, threads)
    lines += ["## Compile time and first call (fresh processes, -O2, s)", "",
              "compile = `tlc.compile()` of the loaded model (ORT: session creation); first call = compile + first "
              "run; both after `import tlc` and loading. In-process: the benchmark's own compile (kernels already in "
              "memory for -O3).", "",
              "| model | compile cold | compile warm (passes / lower / jit) | first run cold / warm "
              "| first call cold | warm | ORT first call | in-process -O2 / -O3 | peak RSS MB tlc cold / ORT |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        stats = r["threads"][min(r["threads"], key=list(r["threads"]).index)]  # the first thread count run
        cold, warm, ort = (r["first_call"][k] for k in ("tlc cold cache", "tlc warm cache", "ORT all"))
        split = warm.get("split", {})
        parts = " / ".join(_secs(split, k) for k in ("passes_s", "lower_s", "jit_s"))
        lines.append(f"| {r['model']} | {_secs(cold, 'compile_s')} | {_secs(warm, 'compile_s')} ({parts}) | "
                     f"{_secs(cold, 'first_run_s')} / {_secs(warm, 'first_run_s')} | {_secs(cold, 'first_call_s')} | "
                     f"{_secs(warm, 'first_call_s')} | {_secs(ort, 'first_call_s')} | "
                     f"{_secs(stats['tlc -O2'], 'compile_s')} / {_secs(stats.get('tlc -O3', {}), 'compile_s')} | "
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
    rows = [r["threads"][threads] for r in results if threads in r["threads"]]
    labels = [label for label in ("tlc -O2", "tlc -O3", "ORT none") if any(label in st for st in rows)]
    names = [r["model"] for r in results if threads in r["threads"]]
    fig, ax = plt.subplots(figsize=(max(9, 0.6 * len(names)), 4))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        ratios = [st[label]["ratio_to_ort"] if label in st else np.nan for st in rows]
        ax.bar(np.arange(len(names)) + i * width, ratios, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(names)) + width * (len(labels) - 1) / 2, names, rotation=30, ha="right")
    ax.set_ylabel("latency / onnxruntime (ORT_ENABLE_ALL)")
    ax.set_yscale("log")
    ax.set_title(f"tlc vs onnxruntime, {threads} thread(s), medians (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=[*SUITES, "all"], default=None,
                        help="classic (default), real, tiny or all; --models picks within it")
    parser.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                        choices=[n for names in SUITES.values() for n in names],
                        help="models to run (default: the whole suite): %(choices)s")
    parser.add_argument("--batch", nargs="+", type=int, default=[1],
                        help="batch sizes of the real suite (tiny models run at their own batch)")
    parser.add_argument("--threads", nargs="+", type=int, default=None,
                        help="intra-op thread counts (default: all cores, then 1)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (x3 timed calls each)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK_ROUNDS} rounds")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds a slow contender may take per model")
    parser.add_argument("--min-wall", type=float, default=8.0, metavar="S",
                        help=f"more rounds (up to {MAX_ROUND_FACTOR} times --rounds) until a model's rounds have "
                             "taken S seconds: fast models' medians otherwise rest on a few seconds of a noisy "
                             "machine (default %(default)s; 0 with --quick)")
    parser.add_argument("--out", default="bench-results", help="folder for results.md/.json and ratios.png")
    parser.add_argument("--profile", action="store_true",
                        help="profile tlc -O2 (20 runs) where it is slower than onnxruntime; tables in the report")
    parser.add_argument("--no-o0", action="store_true", help="leave out tlc -O0 (the reference executor)")
    args = parser.parse_args(argv)
    suites = list(SUITES) if args.suite == "all" else [args.suite or "classic"]
    names = [n for suite in suites for n in SUITES[suite]]
    if args.models:
        outside = [n for n in args.models if n not in names]
        if outside and args.suite:
            parser.error(f"not in the {args.suite} suite: {', '.join(outside)}")
        names = args.models
    rounds = QUICK_ROUNDS if args.quick else args.rounds
    threads = args.threads or sorted({os.cpu_count() or 1, 1}, reverse=True)
    os.makedirs(args.out, exist_ok=True)
    info = machine_info()
    bandwidth = copy_bandwidth()
    log(f"copy bandwidth {bandwidth:.1f} GB/s")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(names, args.batch):
            results.append(bench_model(case, threads, rounds, args.budget, bandwidth, tmp,
                                       profile=args.profile, include_o0=not args.no_o0,
                                       min_wall_s=0.0 if args.quick else args.min_wall))
    text = markdown(results, info, bandwidth)
    print(text)
    Path(args.out, "results.md").write_text(text)
    Path(args.out, "results.json").write_text(json.dumps({"machine": info, "copy_bandwidth_gbs": bandwidth,
                                                          "geomean_ratios": geomean_ratios(results),
                                                          "results": results}, indent=1, default=str))
    chart(results, os.path.join(args.out, "ratios.png"))
    log(f"wrote {args.out}/results.md, results.json, ratios.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
