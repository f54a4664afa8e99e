"""The generated runner: one straight-line Python function per specialization, the way TorchInductor's wrapper
and onnxruntime's sequential executor with memory patterns run a model.

For a specialization, ``generate`` writes::

    def make(arena):                      # bound once per arena: planned buffers as closure variables
        v12, f12, w3_0 = arena
        v13 = k8(v12, c12)                # a view of a planned buffer: the same array every run, made once
        def run(v0):                      # the feeds, already checked against the signature
            v5 = k0(v0, c1)               # a view step (of a feed: every run)
            k2(c3, f5, c4, f12)           # a generated kernel: dims, flat inputs, constants, flat outputs
            v9 = np_empty(c5, c6)         # a graph output: a fresh array every run
            k7(v12, c8, v9, c9, c10, c11) # a product in parts into it
            return (v9,)
        return run

Every name in the source is generated here (``v``/``f`` values N-D and flat, ``w``/``fw`` scratch, ``k``
callables, ``c`` constants); callables and constants live in the namespace the source runs in, so nothing taken
from a model is ever pasted into source. A profiling variant times each step. Source lines map back to steps, so
a failure names its node at no cost to runs that do not fail.
"""

from __future__ import annotations

import itertools
import linecache
import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba.core.dispatcher import Dispatcher

from ..ir.types import TensorType
from ..reference import copy_value
from .bound import Call, Ref
from .device import memory_of
from .specialize import Specialization

_COUNTER = itertools.count()


def np_dtype_of(name: str) -> np.dtype:
    return np.dtype(bool) if name == "bool" else np.dtype(name)


class Arena:
    """One run's buffers: the memory plan's slots, viewed per planned value (N-D and flat) and scratch array."""

    def __init__(self, spec: Specialization):
        memory = spec.memory
        where = memory_of(spec.options.target)      # host numpy, or a device's buffers
        buffers = [where.empty(n) for n in memory.slot_bytes]
        self.arrays: dict[tuple, np.ndarray] = {}
        for v, s in memory.placement.items():
            t = spec.types[v]
            offset = memory.within[v][1] if v in memory.within else 0   # a joined input: its range of the output
            flat = _view(buffers[s][offset:], int(np.prod(t.shape, dtype=np.int64)), np_dtype_of(t.dtype))
            self.arrays[("v", v)] = flat.reshape(tuple(t.shape))
            self.arrays[("f", v)] = flat
        for _, out, donor in memory.inplace:   # NOTE: one array object, so a kernel sees it runs in place
            self.arrays[("v", out)] = self.arrays[("v", donor)]
            self.arrays[("f", out)] = self.arrays[("f", donor)]
        for t, work in enumerate(memory.work):
            for k, (slot, shape, dtype) in enumerate(work):
                flat = _view(buffers[slot], int(np.prod(shape, dtype=np.int64)), np.dtype(dtype))
                self.arrays[("w", t, k)] = flat.reshape(shape)
                self.arrays[("fw", t, k)] = flat


def _view(buffer: np.ndarray, count: int, dtype: np.dtype) -> np.ndarray:
    return buffer[:count * dtype.itemsize].view(dtype)


class Runner:
    """A generated run function's maker for one specialization, and what it was generated from."""

    def __init__(self, make: Callable[[Arena], Callable], keys: list[tuple], source: str, filename: str,
                 line_steps: dict[int, int], modes: list[str], generation: int, uses_pool: bool = True):
        self._make = make
        #: whether any call may run on Numba's thread pool (``_pooled``); a plan none of whose calls do runs
        #: at one thread (``plan.SpecState``)
        self.uses_pool = uses_pool
        self.keys = keys
        self.source = source
        self.filename = filename
        self.line_steps = line_steps
        self.modes = modes
        self.generation = generation

    def bind(self, arena: Arena) -> Callable:
        return self._make(tuple(arena.arrays[k] for k in self.keys))


class _Writer:
    def __init__(self, spec: Specialization) -> None:
        self.spec = spec
        self.memory = memory_of(spec.options.target)
        self.device = self.memory.device
        self.namespace: dict[str, Any] = {"np_empty": self.memory.xp.empty if self.device else np.empty,
                                          "np_copy": self.memory.copy if self.device else np.array,
                                          "copy_value": copy_value,
                                          "clock": time.perf_counter_ns, "to_dev": self.memory.to_device,
                                          "to_host": self.memory.to_host}
        self._uploaded: dict[int, Any] = {}   # id of a known host value -> its device copy
        self._names: dict[int, str] = {}
        self._keep: list[Any] = []           # keeps objects named by id alive
        self.arena_keys: dict[str, tuple] = {}
        self.flat_of: set[int] = set()        # values whose flat view the runner must make itself

    def const(self, obj: Any, prefix: str = "c") -> str:
        name = self._names.get(id(obj))
        if name is None:
            name = self._names[id(obj)] = f"{prefix}{len(self._names)}"
            self.namespace[name] = obj
            self._keep.append(obj)
        return name

    def ref(self, r: Ref, t: int) -> str:
        spec = self.spec
        if r.kind in ("w", "fw"):
            name = f"{r.kind}{t}_{r.index}"
            self.arena_keys[name] = (r.kind, t, r.index)
            return name
        if r.index >= len(spec.types):   # an absent optional input
            return "None"
        flat = r.kind == "f"
        if flat and spec.types[r.index] is not None and len(spec.types[r.index].shape or ()) == 1:
            r = Ref("v", r.index)        # a vector is its own flat view
        if r.index in spec.known:
            value = spec.known[r.index]
            return self.const(self._device(self._flat(value) if flat else value))
        name = f"{r.kind}{r.index}"
        if r.index in spec.memory.placement:
            self.arena_keys[name] = (r.kind, r.index)
        elif r.kind == "f":
            self.flat_of.add(r.index)
        return name

    def _device(self, value: np.ndarray):
        """A known value as the steps read it: itself on the host, a copy uploaded once on a device."""
        if not self.device:
            return value
        found = self._uploaded.get(id(value))
        if found is None:
            found = self._uploaded[id(value)] = self.memory.to_device(np.array(value, order="C"))   # a 0-d stays 0-d
            self._keep.append(value)
        return found

    def _flat(self, value: np.ndarray) -> np.ndarray:
        # NOTE: writeable, as kernels are compiled for (Numba types a read-only array as another type)
        flat = (np.ascontiguousarray(value) if value.flags.writeable else np.array(value, order="C")).reshape(-1)
        self._keep.append(flat)
        return flat

    def call(self, call: Call, t: int) -> str:
        fn = self.const(self._entry(call, t), "k")
        args = [self.arg(a, t) for a in call.args]
        args += [f"{_keyword(k)}={self.arg(v, t)}" for k, v in (call.kwargs or {}).items()]
        text = f"{fn}({', '.join(args)})"
        if not call.result:
            return text
        targets = ", ".join(f"v{v}" for v in call.result)
        return f"{targets}{',' if call.unpack and len(call.result) == 1 else ''} = {text}"

    def _entry(self, call: Call, t: int) -> Any:
        """A compiled function's entry point for exactly these argument types, where the call is to a Numba
        dispatcher that has them compiled: it skips the dispatcher's type resolution (half of a call's cost
        for a kernel of a dozen arguments). Anything else, or an argument whose type is not known here, keeps
        the dispatcher, which resolves (and if need be compiles) per call."""
        fn = call.fn
        if not isinstance(fn, Dispatcher) or call.kwargs:
            return fn
        types = []
        for a in call.args:
            ty = self._type(a, t)
            if ty is None:
                return fn
            types.append(ty)
        compiled = fn.overloads.get(tuple(types))
        return fn if compiled is None else compiled.entry_point

    def _type(self, a: Any, t: int):
        """Numba's type of a call argument as the runner will pass it, or None when not known here."""
        if not isinstance(a, Ref):
            try:
                return numba.typeof(a)
            except (ValueError, TypeError):
                return None
        spec = self.spec
        if a.kind in ("w", "fw"):
            shape, dtype = spec.memory.work[t][a.index][1:]
            return numba.types.Array(numba.from_dtype(np.dtype(dtype)), 1 if a.kind == "fw" else len(shape), "C")
        if a.index >= len(spec.types):
            return numba.types.none
        if a.index in spec.known:
            value = spec.known[a.index]
            return numba.typeof(value if a.kind == "v" else self._flat(value))
        tv = spec.types[a.index]
        if tv is None or tv.shape is None or a.index in spec.unknown_layout:
            return None
        dtype = numba.from_dtype(np_dtype_of(tv.dtype))
        if a.kind == "f" and len(tv.shape) != 1:
            return numba.types.Array(dtype, 1, "C")
        strides = spec.strides.get(a.index)
        if strides is None:
            return numba.types.Array(dtype, len(tv.shape), "C")
        probe = np.lib.stride_tricks.as_strided(np.empty(1, np_dtype_of(tv.dtype)), tuple(tv.shape), strides)
        return numba.typeof(probe)

    def arg(self, a: Any, t: int) -> str:
        return self.ref(a, t) if isinstance(a, Ref) else self.const(a)


def generate(spec: Specialization, profile: bool = False) -> Runner:
    """The runner of ``spec`` as its kernels stand now (steps whose kernel is not ready run their fallback)."""
    generation = spec.generation
    program = spec.program
    w = _Writer(spec)
    feeds = {v for _, v, _ in program.feeds}
    body: list[tuple[int, str, tuple[int, ...]]] = []      # (step index or -1, line, values it defines)
    once: list[tuple[int, str, tuple[int, ...]]] = []      # lines run once per arena (``_once``), as body's
    fixed = set(spec.memory.placement) | set(spec.known)   # values whose array is the same every run
    modes = []
    uses_pool = False
    for t, a in enumerate(spec.active):
        calls, mode = spec.calls_of(a)
        modes.append(mode)
        uses_pool = uses_pool or any(_pooled(call.fn) for call in calls)
        if _once(spec, w, mode, calls, fixed):
            for call in calls:
                once.append((a.step.index, w.call(call, t), call.result))
                fixed.update(call.result)
            if profile:   # the step took no time in the run: a zero event keeps its count of calls
                body.append((-1, f"ev_append(({a.step.index}, clock(), 0))", ()))
            continue
        for v in a.step.outputs:
            if v in spec.memory.fresh:
                tv = spec.types[v]
                body.append((a.step.index, f"v{v} = np_empty({w.const(tuple(tv.shape))}, "
                                           f"{w.const(np_dtype_of(tv.dtype))})", (v,)))
        if profile:
            body.append((-1, "_t = clock()", ()))
        for call in calls:
            body.append((a.step.index, w.call(call, t), call.result))
        if profile:
            body.append((-1, f"ev_append(({a.step.index}, _t, clock() - _t))", ()))
    returns, seen = [], set()
    for _, v in program.outputs:
        if v in spec.known:
            returns.append(f"np_copy({w.const(w._device(spec.known[v]))})")
        elif v in spec.memory.fresh and v not in seen:
            returns.append(f"v{v}")
        elif spec.types[v] is not None and not isinstance(spec.types[v], TensorType):
            returns.append(f"copy_value(v{v})")    # a sequence (a list of arrays) or an optional (None)
        else:
            returns.append(f"np_copy(v{v})")
        seen.add(v)
    lines: list[tuple[int, str]] = []
    if w.device:   # the feeds are copied to the device once, at the start of the run
        lines += [(-1, f"v{v} = to_dev(v{v})") for _, v, t in program.feeds if isinstance(t, TensorType)]
    lines += [(-1, f"f{v} = v{v}.reshape(-1)") for v in sorted(w.flat_of & feeds)]
    for step, line, defines in body:
        lines.append((step, line))
        lines += [(step, f"f{v} = v{v}.reshape(-1)") for v in defines if v in w.flat_of]
    keys = sorted(w.arena_keys)
    params = [f"v{v}" for _, v, _ in program.feeds] + (["ev_append"] if profile else [])
    source = ["def make(arena):"]
    if keys:
        source.append(f"    {', '.join(keys)}, = arena")
    line_steps = {}
    for step, line, defines in once:
        for text in [line] + [f"f{v} = v{v}.reshape(-1)" for v in defines if v in w.flat_of]:
            source.append(f"    {text}")
            line_steps[len(source)] = step
    source.append(f"    def run({', '.join(params)}):")
    for step, line in lines:
        source.append(f"        {line}")
        if step >= 0:
            line_steps[len(source)] = step
    source.append(f"        return ({', '.join(returns)}{',' if len(returns) == 1 else ''})")
    source.append("    return run")
    text = "\n".join(source) + "\n"
    filename = f"<tlc-runner-{next(_COUNTER)}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    exec(compile(text, filename, "exec"), w.namespace)
    return Runner(w.namespace["make"], [w.arena_keys[k] for k in keys], text, filename, line_steps, modes,
                  generation, uses_pool)


def _pooled(fn: Any) -> bool:
    """Whether a call may run on Numba's thread pool: a Numba function compiled ``parallel``, or anything not
    known to run on the calling thread only (Python functions unless marked ``bound.serial``, compiled entry
    points); numpy's own functions and ufuncs do not."""
    if isinstance(fn, Dispatcher):
        return bool(fn.targetoptions.get("parallel"))
    if getattr(fn, "tlc_serial", False) or isinstance(fn, np.ufunc):
        return False
    return not (getattr(fn, "__module__", None) or "").startswith("numpy")


def _once(spec: Specialization, w: _Writer, mode: str, calls: list[Call], fixed: set[int]) -> bool:
    """Whether a step's calls run once, when the run function is bound to its arena, instead of every run: a
    view step (Reshape, Squeeze, a Split into views, a Transpose as a strided view) of values whose arrays are
    the same every run (planned buffers, constants, views made once), on the host. Such a view is the same
    array every run; made in the run, its few Python lines cost far more than alone (ViT's Split into three
    views ~19 us in the model, its interpreter's lines and data evicted by the products between)."""
    if mode != "view" or not calls or w.device:
        return False
    for call in calls:
        if call.kwargs or not call.result:
            return False
        for a in call.args:
            if isinstance(a, Ref) and a.kind in ("v", "f") and a.index < len(spec.types) and a.index not in fixed:
                return False
    return True


def _keyword(name: str) -> str:
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"not a keyword argument name of tlc's own: {name!r}")
    return name
