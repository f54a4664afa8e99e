"""The kernel cache: racing processes, a later process loads without compiling, damaged entries, settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from kernel_helpers import check_against_reference, compile_for, random_array

from tlc.ir import Graph
from tlc.kernels import KernelCache, default_cache_dir

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys, numpy as np
from tlc.ir import Graph, TensorType
from tlc.kernels import compile_group
g = Graph("cached")
x = g.input("x", "float32", ("N",))
g.output(g.add_node("Exp", [g.add_node("Add", [x, g.constant(np.float32(1.5))])]), "y")
kernel = compile_group(g, "elementwise", [TensorType("float32", ("N",))])
a = np.linspace(-3, 3, 101, dtype=np.float32)
out = np.empty_like(a)
kernel([a], [out])
err = float(np.max(np.abs(out - np.exp(a + np.float32(1.5))) / np.exp(a + np.float32(1.5))))
print(json.dumps({"hit": kernel.cache_hit, "seconds": kernel.compile_seconds, "err": err}))
"""


def body() -> Graph:
    g = Graph("cached")
    x = g.input("x", "float32", ("N",))
    g.output(g.add_node("Exp", [g.add_node("Add", [x, g.constant(np.float32(1.5))])]), "y")
    return g


def _env(cache_dir: Path) -> dict:
    env = dict(os.environ, TLC_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("XDG_CACHE_HOME", None)
    return env


def _start(cache_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=_env(cache_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["err"] < 1e-6
    return result


def test_racing_processes_both_succeed_and_a_later_one_loads_from_disk_without_compiling(cache_with_ir_kernels):
    """Two processes compile the same key at once into an empty cache directory, then a third loads it without
    compiling. The IR kernels' machine code (``tlc.kernels.irjit``: per machine, not what they race on) is copied
    in first (``cache_with_ir_kernels``): ``import tlc`` on a folder without it compiles it, ~4 s a process."""
    tmp_path = cache_with_ir_kernels
    racing = [_finish(p) for p in [_start(tmp_path), _start(tmp_path)]]
    assert not all(r["hit"] for r in racing)   # at least one of them compiled
    later = _finish(_start(tmp_path))
    assert later["hit"] is True  # Numba found the compiled code: no compilation happened
    assert sorted(p.suffix for p in tmp_path.glob("*.py")) == [".py"]
    print(f"compile {max(r['seconds'] for r in racing):.3f} s, load in a new process {later['seconds']:.3f} s")


def test_damaged_source_is_detected_and_rebuilt(tmp_path):
    g = body()
    kernel = compile_for(g, "elementwise", KernelCache(tmp_path))
    (source_file,) = tmp_path.glob("*.py")
    good = source_file.read_text()
    source_file.write_text(good[: len(good) // 2])  # truncated
    again = compile_for(g, "elementwise", KernelCache(tmp_path))
    assert source_file.read_text() == good == again.source
    check_against_reference(again, g, [random_array(np.random.default_rng(0), (40,), "float32")])
    source_file.write_bytes(b"\xff\xfe garbage \x00")
    again = compile_for(g, "elementwise", KernelCache(tmp_path))
    assert source_file.read_text() == good and kernel.name == again.name


def test_damaged_numba_files_are_detected_and_rebuilt(tmp_path):
    g = body()
    compile_for(g, "elementwise", KernelCache(tmp_path))
    numba_files = sorted((tmp_path / "__pycache__").glob("*.nb*"))
    assert {f.suffix for f in numba_files} == {".nbi", ".nbc"}
    for f in numba_files:
        f.write_bytes(f.read_bytes()[:10] + b"garbage")
    again = compile_for(g, "elementwise", KernelCache(tmp_path))
    assert again.cache_hit is False
    check_against_reference(again, g, [random_array(np.random.default_rng(1), (40,), "float32")])
    assert compile_for(g, "elementwise", KernelCache(tmp_path)).cache_hit is True  # rebuilt entry loads


def test_memory_cache_returns_the_loaded_module(tmp_path):
    cache = KernelCache(tmp_path)
    first = compile_for(body(), "elementwise", cache)
    second = compile_for(body(), "elementwise", cache)
    assert second.cache_hit and second.name == first.name
    assert next(iter(first._variants.values())) is next(iter(second._variants.values()))


def test_default_cache_dir_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("TLC_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("TLC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "tlc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tlc"
