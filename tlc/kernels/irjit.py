"""Kernels written in LLVM IR (``panel.py``, ``qpanel.py``): compiled once per machine with MCJIT and their
machine code kept in the kernel cache, so a warm process loads it in milliseconds without generating or parsing
the IR.

``engine_for(name, module_files, source, symbols)``: the engine holding the machine code of ``source()`` (the
IR text), cached as ``<name>-<key>.o`` with the key a hash of the bytes of ``module_files`` (the modules the IR
is a function of), the CPU, its features and llvmlite's version; ``symbols`` are registered with
LLVM so compiled code (Numba's included) links them by name. The engine owns the machine code: keep it for the
life of the process.

The file ends with the SHA-256 of the object before it, checked before LLVM sees the bytes: LLVM aborts the
whole process (a fatal error, not an exception) on a truncated or foreign object file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from .cache import default_cache_dir


def engine_for(name: str, module_files: Sequence[str], source: Callable[[], str], symbols: Sequence[str]):
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    code = hashlib.sha256(b"".join(Path(f).read_bytes() for f in module_files)).hexdigest()
    key = hashlib.sha256(f"{FORMAT}|{code}|{cpu}|{features}|{llvmlite.__version__}".encode()).hexdigest()[:24]
    path = default_cache_dir() / f"{name}-{key}.o"
    machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu=cpu, features=features, opt=3)
    try:
        obj = _checked(path.read_bytes())
        if obj is not None:
            engine = _engine(machine, path, source, obj)
            if all(engine.get_function_address(symbol) for symbol in symbols):
                return _registered(engine, symbols)
    except (OSError, RuntimeError):
        pass   # no cached machine code, or one LLVM cannot load: compile it
    return _registered(_engine(machine, path, source, None), symbols)


FORMAT = 2   # of the cached file (part of its key): 2 = the object, then its SHA-256
_DIGEST = 32


def _checked(stored: bytes) -> bytes | None:
    """The object in a cached file, or None when the file is not whole (cut short, overwritten, foreign)."""
    obj, digest = stored[:-_DIGEST], stored[-_DIGEST:]
    return obj if len(stored) > _DIGEST and hashlib.sha256(obj).digest() == digest else None


def _engine(machine, path: Path, source: Callable[[], str], obj: bytes | None):
    """An engine over the cached object ``obj`` (a module with no code stands for it), or over the IR compiled
    now (and saved to ``path``)."""
    parsed = llvm.parse_assembly(source() if obj is None else f'target triple = "{llvm.get_process_triple()}"')
    parsed.verify()
    engine = llvm.create_mcjit_compiler(parsed, machine)
    optimize = getattr(llvm, "create_pass_builder", None)   # llvmlite >= 0.44; else codegen's own opt=3

    def saved(module, buffer) -> None:   # the machine code LLVM made: into the cache for the next process
        if obj is not None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(bytes(buffer) + hashlib.sha256(buffer).digest())
            os.replace(tmp, path)
        except OSError:
            pass   # a read-only cache only costs the next process the compile

    def cached(module):
        if obj is None and optimize is not None:
            builder = optimize(machine, llvm.create_pipeline_tuning_options(3))
            builder.getModulePassManager().run(parsed, builder)
        return obj

    engine.set_object_cache(saved, cached)
    engine.finalize_object()
    return engine


def _registered(engine, symbols: Sequence[str]):
    for symbol in symbols:
        llvm.add_symbol(symbol, engine.get_function_address(symbol))
    return engine
