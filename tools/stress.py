"""The runtime under stress: threads on one plan, processes on one kernel cache, damaged and unwritable caches,
memory over many runs. Prints a summary table; exits 1 when any check fails.

    python tools/stress.py --threads 8 --minutes 2      # 8 threads calling run on one plan vs serial, bitwise
    python tools/stress.py --processes 4                 # 4 processes compiling one model into one fresh cache
    python tools/stress.py --cache-faults                # corrupt, truncated, foreign, read-only, full caches
    python tools/stress.py --runs 100000                 # RSS and tracemalloc before/after 10^5 runs
    python tools/stress.py --all                         # all four (2 minutes of threads, 4 processes, 10^5 runs)

Every check runs the same small model (``small_model``): a product with a bias epilogue, a fused elementwise
group with transcendentals, and a softmax row kernel, so a plan holds the three kinds of generated kernels.
``tests/test_stress.py`` runs bounded versions of each.

A read-only or full cache folder is simulated (``deny_writes``): writes under it raise EROFS or ENOSPC. chmod
does not stop root, and filling a real filesystem is not something a test should do.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import errno
import gc
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tlc  # noqa: E402

SHAPE = (8, 32)


def small_model() -> tlc.Graph:
    """x[8, 32] -> MatMul + bias -> Relu (an epilogue) -> tanh(h) * sigmoid(h) + erf (elementwise) -> Softmax."""
    rng = np.random.default_rng(7)
    g = tlc.Graph("stress")
    x = g.input("x", "float32", SHAPE)
    w = g.constant(rng.standard_normal((32, 32)).astype(np.float32) / 4, name="w")
    b = g.constant(rng.standard_normal(32).astype(np.float32), name="b")
    h = g.add_node("Relu", [g.add_node("Add", [g.add_node("MatMul", [x, w]), b])])
    e = g.add_node("Add", [g.add_node("Mul", [g.add_node("Tanh", [h]), g.add_node("Sigmoid", [x])]),
                           g.add_node("Erf", [x])])
    g.output(g.add_node("Softmax", [e], axis=-1), "y")
    g.output(e, "e")
    return g


def tiny_model() -> tlc.Graph:
    """x[8, 32] -> relu(x * 3 + 1) - x: one elementwise kernel without transcendentals (compiles in ~0.3 s), for
    the checks that must compile into fresh cache folders within a test budget."""
    g = tlc.Graph("tiny")
    x = g.input("x", "float32", SHAPE)
    y = g.add_node("Add", [g.add_node("Mul", [x, g.constant(np.float32(3.0))]), g.constant(np.float32(1.0))])
    g.output(g.add_node("Sub", [g.add_node("Relu", [y]), x]), "y")
    return g


MODELS = {"small": small_model, "tiny": tiny_model}


def feeds(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``n`` different feeds (some with NaN and infinities in them, so special values cross threads too)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = rng.standard_normal(SHAPE).astype(np.float32) * (1 + i % 5)
        if i % 7 == 3:
            x[i % SHAPE[0], i % SHAPE[1]] = (np.nan, np.inf, -np.inf)[i % 3]
        out.append({"x": x})
    return out


def bitwise_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
                                        and a[k].tobytes() == b[k].tobytes() for k in a)


def close_to_reference(graph: tlc.Graph, feed: dict, got: dict) -> bool:
    """The plan's outputs against the reference executor: NaN where it has NaN, values within float32 noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = tlc.reference.run(graph, feed)
    return all(np.allclose(got[k], want[k], rtol=1e-5, atol=1e-6, equal_nan=True) for k in want)


# ---------------------------------------------------------------------------------------------- threads
def stress_threads(threads: int, seconds: float = 0.0, runs_per_thread: int = 0, plan=None) -> dict:
    """``threads`` threads calling ``plan.run`` on different feeds until ``seconds`` pass (or each has made
    ``runs_per_thread`` calls); every result compared bitwise with the serial result of the same feed."""
    plan = plan or tlc.compile(small_model(), jit="eager")
    cases = feeds(64, seed=1)
    serial = [plan.run(f) for f in cases]
    assert all(bitwise_equal(plan.run(f), s) for f, s in zip(cases, serial)), "serial runs are not repeatable"
    calls = [0] * threads
    mismatches = [0] * threads
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)
    deadline = [0.0]

    def worker(t: int) -> None:
        try:
            barrier.wait()
            i = t * 7
            while (runs_per_thread and calls[t] < runs_per_thread) or (not runs_per_thread
                                                                      and time.monotonic() < deadline[0]):
                k = i % len(cases)
                if not bitwise_equal(plan.run(cases[k]), serial[k]):
                    mismatches[t] += 1
                calls[t] += 1
                i += 1
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    deadline[0] = time.monotonic() + seconds
    start = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    wall = time.perf_counter() - start
    return {"check": "threads", "threads": threads, "calls": sum(calls), "mismatches": sum(mismatches),
            "errors": [repr(e) for e in errors], "seconds": round(wall, 1),
            "ok": not errors and not any(mismatches) and sum(calls) > 0}


# ---------------------------------------------------------------------------------------------- processes
CHILD = """
import json, sys, time, warnings
sys.path.insert(0, {tools!r})
import stress
start_at = float(sys.argv[1])
while time.time() < start_at:
    time.sleep(0.001)
print(json.dumps(stress.child_run(sys.argv[2], sys.argv[3], sys.argv[4])))
"""


def _spawn(cache_dir: Path, scenario: str = "plain", start_at: float = 0.0, model: str = "small") -> subprocess.Popen:
    env = dict(os.environ, TLC_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("XDG_CACHE_HOME", None)
    code = CHILD.format(tools=str(ROOT / "tools"))
    return subprocess.Popen([sys.executable, "-c", code, str(start_at), scenario, str(cache_dir), model], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, timeout: float = 600) -> dict:
    out, err = proc.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"ok": False, "rc": proc.returncode, "stderr": err[-2000:]}
    return json.loads(lines[-1])


def child_run(scenario: str, cache_dir: str, model: str = "small") -> dict:
    """In a fresh process: compile ``model`` (eagerly) under ``scenario`` ("plain", "readonly", "full"), run it
    on a few feeds and report: outputs' digest, agreement with the reference, kernels, warnings."""
    graph = MODELS[model]()
    denied = {"readonly": errno.EROFS, "full": errno.ENOSPC}.get(scenario)
    with contextlib.ExitStack() as stack:
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        if denied is not None:
            stack.enter_context(deny_writes(Path(cache_dir), denied))
        start = time.perf_counter()
        plan = tlc.compile(graph, jit="eager")
        compile_s = time.perf_counter() - start
        cases = feeds(16, seed=2)
        results = [plan.run(f) for f in cases]
        stats = plan.stats()
    digest = hashlib.sha256(b"".join(r[k].tobytes() for r in results for k in sorted(r))).hexdigest()
    return {"ok": all(close_to_reference(graph, f, r) for f, r in zip(cases, results)), "digest": digest,
            "kernels": stats.totals["kernels"], "ready": stats.totals["kernels_ready"],
            "failed": stats.totals["kernels_failed"], "cache_hits": stats.totals["cache_hits"],
            "reference_steps": stats.totals["reference_steps"], "cache_note": stats.totals.get("cache_note"),
            "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
                         and "plan" in str(w.message)],
            "compile_s": round(compile_s, 2)}


def stress_processes(processes: int, cache_dir: Path | None = None, model: str = "small") -> dict:
    """``processes`` processes started at the same instant, compiling ``model`` into one fresh cache folder;
    each runs it and reports its outputs' digest. Then one more process must load every kernel."""
    with tempfile.TemporaryDirectory(prefix="tlc-stress-") as tmp:
        folder = Path(cache_dir or tmp)
        start_at = time.time() + 2.0 + 0.3 * processes   # every child imported and waiting by then
        procs = [_spawn(folder, "plain", start_at, model) for _ in range(processes)]
        results = [_result(p) for p in procs]
        after = _result(_spawn(folder, model=model))
        digests = {r.get("digest") for r in results + [after]}
        ok = all(r.get("ok") and r.get("failed") == 0 for r in results + [after])
        return {"check": "processes", "processes": processes, "calls": 16 * (processes + 1),
                "mismatches": len(digests) - 1 + sum(not r.get("ok") for r in results + [after]),
                "compile_s": [r.get("compile_s") for r in results], "warm_hits": f"{after.get('cache_hits')}/"
                f"{after.get('kernels')}", "ok": ok and len(digests) == 1 and after.get("cache_hits") == after.get(
                    "kernels"), "errors": [r.get("stderr", "") for r in results + [after] if not r.get("ok")]}


# ---------------------------------------------------------------------------------------------- cache faults
@contextlib.contextmanager
def deny_writes(folder: Path, code: int):
    """Within the block, creating, writing, renaming or making folders under ``folder`` raises
    ``OSError(code)`` (EROFS: a read-only folder; ENOSPC: a full filesystem). Reads still work."""
    root = os.path.realpath(folder)

    def inside(path) -> bool:
        try:
            p = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return p == root or p.startswith(root + os.sep)

    def refuse(path):
        raise OSError(code, os.strerror(code), os.fsdecode(path))

    real = {"open": builtins.open, "os_open": os.open, "replace": os.replace, "rename": os.rename,
            "mkdir": os.mkdir}
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+") and inside(file):
            refuse(file)
        return real["open"](file, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & write_flags and inside(path):
            refuse(path)
        return real["os_open"](path, flags, *args, **kwargs)

    def two(name):
        def fn(src, dst, *args, **kwargs):
            if inside(dst):
                refuse(dst)
            return real[name](src, dst, *args, **kwargs)
        return fn

    def mkdir(path, *args, **kwargs):
        if inside(path) and not os.path.isdir(path):
            refuse(path)
        return real["mkdir"](path, *args, **kwargs)

    patches = [(builtins, "open", open_), (io, "open", open_), (os, "open", os_open),
               (os, "replace", two("replace")), (os, "rename", two("rename")), (os, "mkdir", mkdir)]
    for mod, name, fn in patches:
        setattr(mod, name, fn)
    try:
        yield
    finally:
        for (mod, name, _), original in zip(patches, (real["open"], real["open"], real["os_open"], real["replace"],
                                                      real["rename"], real["mkdir"])):
            setattr(mod, name, original)


def damage(folder: Path, how: str) -> int:
    """Damage every kernel entry of a warm cache ``folder``: "corrupt" (garbage bytes in the middle),
    "truncated" (cut in half), "foreign" (Numba's index from another Numba version, each data file swapped with
    another kernel's, machine code of the IR kernels replaced). Returns how many files were changed."""
    files = sorted(folder.glob("*.py")) + sorted((folder / "__pycache__").glob("*.nb*")) + sorted(folder.glob("*.o"))
    changed = 0
    if how == "foreign":
        data = sorted(f for f in files if f.suffix == ".nbc")
        for a, b in zip(data, data[1:] + data[:1]):   # each kernel's code replaced by its neighbour's
            if a != b:
                a.write_bytes(b.read_bytes() if b.exists() else b"")
                changed += 1
        for f in files:
            if f.suffix == ".nbi":   # the same index, stamped by a Numba that is not this one
                raw = f.read_bytes()
                stream = io.BytesIO(raw)
                pickle.load(stream)
                f.write_bytes(pickle.dumps("0.0.0-foreign", protocol=-1) + raw[stream.tell():])
                changed += 1
            elif f.suffix == ".o":
                f.write_bytes(b"\x7fELF" + os.urandom(512))
                changed += 1
        return changed
    for f in files:
        raw = f.read_bytes()
        if how == "truncated":
            f.write_bytes(raw[: len(raw) // 2])
        else:
            mid = len(raw) // 2
            f.write_bytes(raw[:mid] + os.urandom(64) + raw[mid + 64:])
        changed += 1
    return changed


FAULTS = ("corrupt", "truncated", "foreign", "readonly", "full")


def stress_cache_faults(faults: tuple[str, ...] = FAULTS) -> list[dict]:
    """Each fault on its own fresh cache folder, each process fresh: the plan must run natively with the
    reference's results; a damaged entry must be rebuilt (the next process loads it); a read-only or full
    folder must give a warning and a ``stats()`` note, and still compile its kernels."""
    rows = []
    for fault in faults:
        with tempfile.TemporaryDirectory(prefix=f"tlc-{fault}-") as tmp:
            folder = Path(tmp)
            row: dict = {"check": f"cache {fault}", "calls": 16}
            if fault in ("readonly", "full"):
                res = _result(_spawn(folder, fault))
                stored = list(folder.rglob("*.py")) + list(folder.rglob("*.nb*"))
                row.update(ok=bool(res.get("ok")) and res.get("failed") == 0 and res.get("ready") == res.get(
                    "kernels") and bool(res.get("cache_note")) and any("cannot be written" in w for w in res.get(
                        "warnings", [])) and not stored, note=res.get("cache_note") or res.get("stderr", "")[-300:],
                    native=f"{res.get('ready')}/{res.get('kernels')}")
            else:
                warm = _result(_spawn(folder))
                changed = damage(folder, fault)
                res = _result(_spawn(folder))
                again = _result(_spawn(folder))
                row.update(ok=bool(warm.get("ok") and res.get("ok") and again.get("ok")) and res.get("failed") == 0
                           and again.get("cache_hits") == again.get("kernels")
                           and res.get("digest") == warm.get("digest") == again.get("digest"),
                           note=f"{changed} files damaged; rebuilt: hits {res.get('cache_hits')}/{res.get('kernels')}"
                                f", next process {again.get('cache_hits')}/{again.get('kernels')}"
                                + (f"; {res.get('stderr', '')[-300:]}" if not res.get("ok") else ""),
                           native=f"{res.get('ready')}/{res.get('kernels')}")
            row["mismatches"] = 0 if row["ok"] else 1
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- memory
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def stress_memory(runs: int, plan=None, warmup: int = 500, windows: int = 3) -> dict:
    """RSS over ``windows`` windows of ``runs`` runs of the small model (the growth is the least of the windows': a
    leak grows in every one, while something else in the process - another plan's kernels compiling on the JIT
    thread - may grow one: in CI a single window once read 4 MB), then Python allocations (tracemalloc) over
    ``runs`` more."""
    plan = plan or tlc.compile(small_model(), jit="eager")
    cases = feeds(16, seed=3)
    for i in range(warmup):
        plan.run(cases[i % 16])
    growths = []
    run_s = 0.0
    for _ in range(windows):
        gc.collect()
        rss0 = rss_bytes()
        start = time.perf_counter()
        for i in range(runs):
            plan.run(cases[i % 16])
        run_s += time.perf_counter() - start
        gc.collect()
        growths.append(rss_bytes() - rss0)
    tracemalloc.start()
    for i in range(warmup):
        plan.run(cases[i % 16])
    gc.collect()
    traced0 = tracemalloc.get_traced_memory()[0]
    for i in range(runs):
        plan.run(cases[i % 16])
    gc.collect()
    traced1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    growth = min(growths)
    return {"check": "memory", "calls": (windows + 1) * runs, "threads": 1, "mismatches": 0, "rss_growth": growth,
            "rss_growths": growths, "traced_growth": traced1 - traced0,
            "us_per_run": round(run_s / (windows * runs) * 1e6, 1),
            "ok": growth < 4 << 20 and traced1 - traced0 < 64 << 10}


# ---------------------------------------------------------------------------------------------- report
def table(rows: list[dict]) -> str:
    lines = [f"{'check':<16} {'threads':>7} {'procs':>5} {'calls':>9} {'mismatch':>8}  {'result':<6} details",
             "-" * 100]
    for r in rows:
        details = {k: v for k, v in r.items() if k not in ("check", "threads", "processes", "calls", "mismatches",
                                                           "ok", "errors") and v not in (None, [], "")}
        if r.get("errors"):
            details["errors"] = r["errors"][:2]
        lines.append(f"{r['check']:<16} {r.get('threads', ''):>7} {r.get('processes', ''):>5} {r['calls']:>9} "
                     f"{r['mismatches']:>8}  {'ok' if r['ok'] else 'FAIL':<6} "
                     + ", ".join(f"{k}={v}" for k, v in details.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="threads calling run on one plan")
    ap.add_argument("--minutes", type=float, default=2.0, help="how long the threads run")
    ap.add_argument("--processes", type=int, default=0, help="processes compiling into one fresh cache")
    ap.add_argument("--cache-faults", action="store_true", help="damaged, foreign, read-only and full caches")
    ap.add_argument("--runs", type=int, default=0, help="runs for the memory check")
    ap.add_argument("--all", action="store_true", help="8 threads x --minutes, 4 processes, faults, 10^5 runs")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    if args.all:
        args.threads, args.processes, args.cache_faults = args.threads or 8, args.processes or 4, True
        args.runs = args.runs or 100_000
    rows: list[dict] = []
    if args.threads:
        rows.append(stress_threads(args.threads, seconds=args.minutes * 60))
        print(table(rows[-1:]), flush=True)
    if args.processes:
        rows.append(stress_processes(args.processes))
        print(table(rows[-1:]), flush=True)
    if args.cache_faults:
        rows += stress_cache_faults()
        print(table(rows[-len(FAULTS):]), flush=True)
    if args.runs:
        rows.append(stress_memory(args.runs))
        print(table(rows[-1:]), flush=True)
    if not rows:
        ap.error("nothing to do: give --threads, --processes, --cache-faults, --runs or --all")
    print("\nsummary\n" + table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
