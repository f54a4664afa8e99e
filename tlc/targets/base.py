"""``Target``: what one target is and can do, declared in one object; the registry of targets by name.

A target declares data that passes, lowering and the session read (the dtypes its kernels compute in, the
``tlc.Fused`` kinds it runs, the layout cost model's constants, its onnxruntime provider, where its arrays live)
and hooks that the layers above it resolve when they ask: its ``Kernel`` class and renderer (asked by
``tlc.kernels.compile_group``), the ``Library`` its generated code calls, the runtime's op table (asked by
lowering; a target without one cannot run plans) and a check that its kernels can run here. A hook is a dotted
``"module:attribute"`` name (or the object itself), imported on first use, so this layer imports nothing above
``tlc.ops``: a pass asks ``target.dtypes`` without importing a code generator.

Callers pass names (``tlc.compile(g, target="cpu")``); options resolve them once with ``get``. Targets are
singletons: they compare by identity and pickle as their name.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import BackendError, TlcError

#: a hook: ``"package.module:attribute"``, the object itself, or None (the target has none)
Hook = Any


@dataclass(frozen=True)
class TargetCosts:
    """Measured constants of one target's kernels, for the layout pass's cost model (ns unless named otherwise;
    ``tlc.passes.layout_cost`` says how they are used, ``tools/layout_bench.py --fit`` measures them)."""

    elem_ns: float           # per element of a contiguous copy (numpy copyto of a view)
    run_ns: float            # per contiguous run of such a copy (numpy's inner-loop call)
    strided_elem_ns: float   # per element when the inner axis is strided (stride-2 windows, 1x1/2 subsampling)
    ufunc_elem_ns: float     # per element of a two-operand ufunc pass (depthwise and pool taps)
    gemm_gflops: float       # BLAS rate (float32); the same in both layouts, it sets the relative margin
    dw_direct_ns: float      # per multiply-add of the direct Numba depthwise kernel (NCHW)
    to_nhwc_ns: float        # per element of Transpose NCHW -> NHWC
    to_nchw_ns: float        # per element of Transpose NHWC -> NCHW
    min_gain_us: float       # a region switches only when it saves at least this much ...
    rel_margin: float        # ... and this fraction of its predicted NCHW time


@dataclass(frozen=True, eq=False)
class Target:
    """One target: a CPU, a GPU backend, a variant of either. Register it with ``register`` to make its name
    known to ``tlc.compile``, ``InferenceSession`` and the passes."""

    name: str
    description: str
    #: dtypes its kernels compute in: fusion groups only values of these (and bool, see ``internal_dtypes``), and
    #: a lone elementwise op gets a kernel only in them (integer arithmetic keeps numpy's semantics)
    dtypes: frozenset[str]
    #: ``tlc.Fused`` kinds it runs natively; the fuse pass forms groups of these kinds only
    group_kinds: tuple[str, ...]
    #: kinds ``compile_group`` renders as one kernel; a kind it runs but does not render is composed by the runtime
    #: (an epilogue: a library contraction driving an elementwise kernel)
    rendered_kinds: tuple[str, ...]
    provider: str            # onnxruntime's execution provider name ("CPUExecutionProvider")
    device: str              # onnx's backend ``DeviceType`` name ("CPU", "CUDA")
    #: where its kernels' arrays live: "host" (numpy arrays) or "device" (a device's memory: plans keep their
    #: arrays there through ``arrays``; a kernel called on host arrays copies them over and back per launch)
    memory: str = "host"
    costs: TargetCosts | None = None   # the layout pass's cost model; None: the pass changes no layout for it
    kernel: Hook = None      # the ``tlc.kernels.Kernel`` class compile_group builds; None: no generated kernels
    renderer: Hook = None    # ``render(plan, variant) -> str``: the Python source of one kernel module
    library: Hook = None     # the ``tlc.kernels.render.Library`` its generated code calls
    ops: Hook = None         # the runtime's op table (qualified op -> factory); None: the runtime cannot run it
    check: Hook = None       # ``check()`` raises a named error (CompileError) when its kernels cannot run here
    #: ``cache_salt()`` -> str: what its compiled code depends on beyond the kernel's source and the host (a GPU's
    #: compute capability and toolkit version); part of every kernel cache key of the target
    cache_salt: Hook = None
    #: the ``tlc.runtime.device.Memory`` its plans keep their arrays in (a device's: feeds copied in once a run,
    #: outputs copied out once); None: host numpy arrays
    arrays: Hook = None

    def __post_init__(self) -> None:
        if self.memory not in ("host", "device"):
            raise ValueError(f"target {self.name!r}: memory must be 'host' or 'device', got {self.memory!r}")
        if not set(self.rendered_kinds) <= set(self.group_kinds):
            raise ValueError(f"target {self.name!r}: renders kinds it does not run: "
                             f"{sorted(set(self.rendered_kinds) - set(self.group_kinds))}")
        object.__setattr__(self, "dtypes", frozenset(self.dtypes))

    def __repr__(self) -> str:
        return f"Target({self.name!r})"

    def __reduce__(self):
        return get, (self.name,)

    # ------------------------------------------------------------------ questions passes and lowering ask
    @functools.cached_property
    def internal_dtypes(self) -> frozenset[str]:
        """``dtypes`` and bool: what a kernel may hold between its ops (comparisons, masks) and write out."""
        return self.dtypes | {"bool"}

    def fuses(self, kind: str) -> bool:
        """Whether the fuse pass may form a group of ``kind`` for this target (it runs such groups natively)."""
        return kind in self.group_kinds

    def renders(self, kind: str) -> bool:
        """Whether ``compile_group`` renders a group of ``kind`` as one kernel of this target."""
        return kind in self.rendered_kinds

    @property
    def runs_plans(self) -> bool:
        """Whether ``tlc.compile`` can lower a graph to a plan for this target (the runtime has its op table)."""
        return self.ops is not None

    # ------------------------------------------------------------------ hooks, resolved on first use
    def resolve(self, hook: str) -> Any:
        """The object behind hook ``hook`` ("kernel", "renderer", "library", "ops", "check", "cache_salt",
        "arrays"), or None."""
        value = getattr(self, hook)
        return _load(value) if isinstance(value, str) else value

    def render(self, plan: Any, variant: Any) -> str:
        """The source of one kernel module of ``plan`` under ``variant``, by this target's renderer."""
        return self.resolve("renderer")(plan, variant)

    def op_table(self) -> dict[str, Any]:
        """The runtime's op table for this target (``tlc.runtime.ops``)."""
        table = self.resolve("ops")
        if table is None:
            raise BackendError(f"target {self.name!r} is not supported by the runtime yet; use target='cpu'")
        return table

    def cache_key_salt(self) -> str:
        """The target's part of its kernels' cache keys: its name and what ``cache_salt`` says (a GPU's compute
        capability and toolkit version), so that entries of one device never serve another; "" for a target
        without the hook (the CPU: its sources and the host are in every key already)."""
        salt = self.resolve("cache_salt")
        return "" if salt is None else f"target={self.name};{salt()}"

    def require(self) -> None:
        """Raise the target's named error (a ``CompileError`` saying what is missing) when its kernels cannot run
        here; return when they can."""
        check = self.resolve("check")
        if check is not None:
            check()

    def available(self) -> bool:
        """Whether ``require`` passes."""
        try:
            self.require()
        except TlcError:
            return False
        return True


@functools.cache
def _load(path: str) -> Any:
    module, sep, attribute = path.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"a target hook is 'package.module:attribute', got {path!r}")
    return getattr(importlib.import_module(module), attribute)


# ---------------------------------------------------------------------------- the registry
_TARGETS: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Make ``target`` known by its name; returns it (``CPU = register(Target(...))``)."""
    if not target.name or target.name in _TARGETS:
        raise ValueError(f"target name {target.name!r} is empty or registered twice")
    _TARGETS[target.name] = target
    return target


def unregister(name: str) -> None:
    """Forget the target called ``name`` (tests that register targets of their own)."""
    _TARGETS.pop(name, None)


def find(name: str) -> Target | None:
    """The registered target called ``name``, or None."""
    return _TARGETS.get(name)


def get(target: str | Target) -> Target:
    """The ``Target`` a caller means: a registered name, or a ``Target`` (returned as it is); a ``BackendError``
    naming the known targets otherwise."""
    if isinstance(target, Target):
        return target
    found = _TARGETS.get(target) if isinstance(target, str) else None
    if found is None:
        raise BackendError(f"unknown target {target!r}; expected one of {', '.join(names())}")
    return found


def names() -> tuple[str, ...]:
    """Registered target names, in registration order."""
    return tuple(_TARGETS)


def all_targets() -> tuple[Target, ...]:
    """Registered targets, in registration order."""
    return tuple(_TARGETS.values())
