"""``compile_group`` and ``Kernel``: the public face of tlc.kernels for the runtime.

A Kernel owns one plan and compiles variants of it on demand: the layout ``input_types`` imply (compiled in
``compile_group``), a layout for arrays that do not fit it (a symbolic dim that is 1 at run time), and an
in-place variant when an output is the very array of an input (so the loop reads and writes one pointer and
LLVM needs no aliasing checks to vectorize it). Each variant is a cached module with a serial function and a
step that Numba's pool runs in parts (``tlc.kernels.parts``); the step runs when the work is large enough, and
each is compiled the first time it is used.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
from numba.core.errors import NumbaError

from ..errors import CompileError, DTypeMismatchError, ShapeMismatchError
from ..ir.graph import Graph
from ..ir.types import TensorType
from ..targets import CPU, Target, find, names
from . import parts
from .cache import KernelCache, default_cache
from .common import Variant, kernel_types
from .cpu import task_count
from .layout import Layout, concrete_layout, make_layout
from .plan import KernelPlan, ScalarOp, build_plan, typed_body

PARALLEL_MIN_ELEMENTS = 1 << 16  # below this, thread start-up costs more than it saves


@dataclass(frozen=True)
class KernelOptions:
    fast_math: bool = False  # LLVM fast-math flags on the kernel (mathlib keeps its own strict flags)
    parallel: bool = True  # allow the prange variant for large inputs
    num_threads: int | None = None  # threads for the parallel variant (default: Numba's)


class Kernel:
    """A compiled fused group: ``kernel(inputs, outputs)`` writes every output in place.

    The CPU's kernel class (a subclass overrides the target's part: compiling and launching a module); the
    source of each variant comes from ``target``'s renderer."""

    def __init__(
        self,
        plan: KernelPlan,
        options: KernelOptions,
        cache: KernelCache,
        target: Target = CPU,
        alias: tuple[int, ...] | None = None,
    ):
        """Compile the variant the caller will run first: in place per ``alias`` (output m written into input
        ``alias[m]``, -1: its own array), the parallel function when the body's static shape is large enough.
        A target whose kernels cannot run here raises its named error first (``Target.require``)."""
        target.require()
        self.plan = plan
        self.kind = plan.kind
        self.target = target
        self.options = options
        self._cache = cache
        self._variants: dict[Variant, object] = {}
        self._lock = threading.Lock()
        self._shapes: dict[tuple, tuple] = {}  # input shapes -> (layout, dims, elements, output shapes)
        self._constant_arrays = [plan.constants[i] for i in sorted(plan.constants)]
        self._num_inputs = len(plan.operands) - len(plan.constants)
        self._operand_dtypes = [np.dtype(op.dtype) for op in plan.operands]
        self._output_dtypes = [np.dtype(o.dtype) for o in plan.outputs]
        full = plan.full_shape
        self.layout = make_layout(full, [op.shape for op in plan.operands], row=plan.kind == "reduction")
        static = all(isinstance(d, int) for d in full)
        self._parallel_first = static and self._parallel_wanted(math.prod(full))
        first = tuple(alias) if alias is not None and plan.kind == "elementwise" else (-1,) * len(plan.outputs)
        start = time.perf_counter()
        module, self.cache_hit = self._compile(self._variant(first))
        self.compile_seconds = time.perf_counter() - start
        self.source: str = module.__tlc_source__
        self.name = f"{self.kind}_{module.__tlc_key__[:12]}"

    def __repr__(self) -> str:
        return (f"<Kernel {self.name} ({self.target.name}, {len(self._variants)} variant(s), "
                f"cache_hit={self.cache_hit})>")

    # ------------------------------------------------------------------ compilation
    def _compile(self, variant: Variant):
        source = self._render(variant)
        key = self._cache.key(source, self.target.cache_key_salt())
        hit = self._cache.cached(key) is not None
        for attempt in range(2):
            module = self._cache.load(key, source)
            try:
                hit = self._build(module, variant) or hit
                break
            except NumbaError as exc:
                raise CompileError(
                    f"Numba failed to compile {self.plan.kind} kernel {key[:12]}: {type(exc).__name__}: {exc}"
                ) from exc
            except OSError as exc:  # Numba could not save to the cache (read-only, full): compile it elsewhere
                if attempt:
                    raise CompileError(f"{self.plan.kind} kernel {key[:12]} cannot be cached: {exc}") from exc
                self._cache.unwritable(exc)
                self._cache.forget(key)
            except Exception as exc:  # a damaged Numba cache entry: rebuild it once, then give up
                if attempt:
                    raise CompileError(
                        f"Numba failed to compile {self.plan.kind} kernel {key[:12]}: {type(exc).__name__}: {exc}"
                    ) from exc
                self._cache.purge(key)
        module.__tlc_source__ = source
        module.__tlc_key__ = key
        self._variants[variant] = module
        return module, hit

    # the target's part: source of a variant, compiling its module, running it -----------------------
    def _variant(self, alias: tuple[int, ...]) -> Variant:
        return Variant(self.layout, self.options.fast_math, alias)

    def _render(self, variant: Variant) -> str:
        return self.target.render(self.plan, variant)

    def _build(self, module, variant: Variant) -> bool:
        """Compile the function the static size picks (the other one on first use); True when Numba's cache
        had it."""
        if self._parallel_first:
            return bool(self._step(module, variant.fast_math).cache_hits)
        fn = module.kernel_serial
        fn.compile(self._signature(variant))
        return bool(sum(fn.stats.cache_hits.values()))

    @staticmethod
    def _step(module, fast_math: bool):
        """The module's ``step`` compiled as a C function (``tlc.kernels.parts``), once per module."""
        step = getattr(module, "__tlc_step__", None)
        if step is None:
            step = module.__tlc_step__ = parts.compile_step(module.step, fast_math)
        return step

    def _parallel_function(self, module, fast_math: bool, dims: np.ndarray):
        """``fn(dims, *flat_inputs, *flat_constants, *flat_outputs)`` running the module's tasks for ``dims`` on
        Numba's pool, one part a task."""
        step = self._step(module, fast_math)
        return functools.partial(module.run, parts.driver(True), step.address, 0, task_count(self.kind, dims), 0)

    def _compile_parallel(self, module, variant: Variant) -> None:
        """Compile the module's ``run`` for this variant's arguments, so that the first call finds it."""
        module.run.compile((numba.types.int64,) * 5 + self._signature(variant))

    def _launch(self, module, dims: np.ndarray, total: int, flat_in: list, flat_out: list) -> None:
        if self._parallel_wanted(total) and numba.get_num_threads() > 1:
            fn = self._parallel_function(module, self.options.fast_math, dims)
            self._run_parallel(fn, (dims, *flat_in, *flat_out))
        else:
            module.kernel_serial(dims, *flat_in, *flat_out)

    def _signature(self, variant: Variant) -> tuple:
        return kernel_types(self.plan, variant)

    def _module(self, variant: Variant):
        module = self._variants.get(variant)
        if module is None:
            with self._lock:
                module = self._variants.get(variant) or self._compile(variant)[0]
        return module

    # ------------------------------------------------------------------ calling
    def __call__(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        arrays = [np.asarray(x) for x in inputs]
        arrays += self._constant_arrays
        shapes = self._shapes.get(tuple(a.shape for a in arrays))
        if shapes is None or len(inputs) != self._num_inputs or len(outputs) != len(self.plan.outputs):
            shapes = self._prepare(len(inputs), [a.shape for a in arrays], len(outputs))
        layout, dims, total, allowed = shapes
        for i, (a, dtype) in enumerate(zip(arrays, self._operand_dtypes, strict=True)):
            if a.dtype != dtype:
                raise DTypeMismatchError(f"kernel {self.name}: input {i} is {a.dtype}, expected {dtype}")
        for m, (o, dtype) in enumerate(zip(outputs, self._output_dtypes, strict=True)):
            if not isinstance(o, np.ndarray) or not o.flags.c_contiguous or not o.flags.writeable:
                raise ShapeMismatchError(f"kernel {self.name}: output {m} must be a writeable C-contiguous array")
            if o.dtype != dtype:
                raise DTypeMismatchError(f"kernel {self.name}: output {m} is {o.dtype}, expected {dtype}")
            if o.shape not in allowed:
                raise ShapeMismatchError(
                    f"kernel {self.name}: output {m} has shape {o.shape}, expected {' or '.join(map(str, allowed))}"
                )
        alias, arrays = self._aliasing(arrays, outputs, layout)
        module = self._module(Variant(layout, self.options.fast_math, alias))
        flat_in = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
        flat_out = [o.reshape(-1) for m, o in enumerate(outputs) if alias[m] < 0]
        self._launch(module, dims, total, flat_in, flat_out)

    def _prepare(self, num_inputs: int, in_shapes: list[tuple[int, ...]], num_outputs: int) -> tuple:
        """Layout, collapsed sizes and the accepted output shapes for these input shapes (memoized)."""
        plan = self.plan
        if num_inputs != self._num_inputs or num_outputs != len(plan.outputs):
            raise ShapeMismatchError(
                f"kernel {self.name} takes {self._num_inputs} inputs and {len(plan.outputs)} outputs, "
                f"got {num_inputs} and {num_outputs}"
            )
        try:
            full = np.broadcast_shapes(*in_shapes)
        except ValueError as exc:
            raise ShapeMismatchError(f"kernel {self.name}: input shapes do not broadcast: {exc}") from None
        full = (1,) * (len(plan.full_shape) - len(full)) + full
        allowed = (full, full[:-1] + (1,)) if self.plan.kind == "reduction" and full else (full,)
        layout = self.layout
        dims = layout.dims(full, in_shapes)
        if dims is None:  # the arrays do not fit the compiled pattern (a symbolic dim is 1): another variant
            layout = concrete_layout(full, in_shapes, row=self.plan.kind == "reduction")
            dims = layout.dims(full, in_shapes)
        entry = (layout, np.asarray(dims, dtype=np.int64), math.prod(dims), allowed)
        if len(self._shapes) < 64:
            self._shapes[tuple(in_shapes)] = entry
        return entry

    def launcher(
        self, input_shapes: Sequence[tuple[int, ...]], output_shapes: Sequence[tuple[int, ...]], serial: bool = False
    ) -> Launcher:
        """A caller bound to these shapes: everything ``__call__`` checks per call is checked here, once.

        For callers that own their buffers (the runtime): see ``Launcher`` for what they must guarantee.
        ``serial``: never the parallel function (the caller runs this on one of its own threads).
        """
        in_shapes = [tuple(s) for s in input_shapes] + [a.shape for a in self._constant_arrays]
        layout, dims, total, allowed = self._prepare(len(input_shapes), in_shapes, len(output_shapes))
        for m, shape in enumerate(output_shapes):
            if tuple(shape) not in allowed:
                raise ShapeMismatchError(
                    f"kernel {self.name}: output {m} has shape {tuple(shape)}, expected "
                    f"{' or '.join(map(str, allowed))}"
                )
        in_place = [
            k
            for k, s in enumerate(in_shapes[: self._num_inputs])
            if self.plan.kind == "elementwise" and all(layout.flags[k]) and any(s == tuple(o) for o in output_shapes)
        ]
        return Launcher(self, layout, dims, not serial and self._parallel_wanted(total), in_place)

    def entry(
        self,
        input_shapes: Sequence[tuple[int, ...]],
        output_shapes: Sequence[tuple[int, ...]],
        alias: tuple[int, ...],
    ) -> tuple[object, np.ndarray]:
        """The compiled function a caller that owns its buffers runs for these shapes, and its ``dims`` argument.

        It takes ``(dims, *flat_inputs, *flat_constants, *flat_outputs)``, outputs ``m`` with ``alias[m] >= 0``
        left out (computed into input ``alias[m]``); all arrays 1-D and C-contiguous. Compiled here if needed,
        so the caller's first run pays nothing."""
        launcher = self.launcher(input_shapes, output_shapes)
        fn = launcher._function(tuple(alias))
        variant = Variant(launcher.layout, self.options.fast_math, tuple(alias))
        if launcher.parallel:
            self._compile_parallel(self._module(variant), variant)
        elif not fn.signatures:
            fn.compile(self._signature(variant))
        return fn, launcher.dims

    @property
    def constant_arrays(self) -> list[np.ndarray]:
        """The flat constant operands ``entry``'s function takes after the inputs."""
        return [a.reshape(-1) for a in self._constant_arrays]

    def _parallel_wanted(self, total: int) -> bool:
        threads = self.options.num_threads or numba.config.NUMBA_NUM_THREADS
        return self.options.parallel and threads > 1 and total >= parallel_threshold(self.plan)

    def _run_parallel(self, fn, args) -> None:
        wanted = self.options.num_threads
        if not wanted:
            fn(*args)
            return
        previous = numba.get_num_threads()
        numba.set_num_threads(max(1, min(wanted, numba.config.NUMBA_NUM_THREADS)))
        try:
            fn(*args)
        finally:
            numba.set_num_threads(previous)

    def _aliasing(
        self, arrays: list[np.ndarray], outputs: Sequence[np.ndarray], layout: Layout
    ) -> tuple[tuple[int, ...], list[np.ndarray]]:
        """Which outputs are inputs (in-place); inputs that merely overlap an output are copied first."""
        alias = [-1] * len(outputs)
        arrays = list(arrays)
        for m, o in enumerate(outputs):
            for k, a in enumerate(arrays):
                if not np.may_share_memory(a, o):
                    continue
                same = (
                    self.plan.kind == "elementwise"
                    and a.shape == o.shape
                    and a.dtype == o.dtype
                    and a.flags.c_contiguous
                    and a.ctypes.data == o.ctypes.data
                    and all(layout.flags[k])
                    and alias[m] < 0
                    and k not in alias
                )
                if same:
                    alias[m] = k
                else:
                    arrays[k] = a.copy()
        return tuple(alias), arrays


class Launcher:
    """A ``Kernel`` bound to fixed shapes: ``launcher(inputs, outputs)`` with no per-call checks but aliasing.

    The caller guarantees what ``Kernel.__call__`` would check: C-contiguous arrays of the bound shapes and
    dtypes, outputs that are writeable, and outputs that either are an input (the same array object: computed
    in place) or share no memory with any input. Numba's thread count is the caller's (the runtime sets it per
    run); the parallel function runs when the work is large enough (``parallel_threshold``).
    """

    __slots__ = ("kernel", "layout", "dims", "parallel", "in_place", "constants", "_functions")

    def __init__(self, kernel: Kernel, layout: Layout, dims: np.ndarray, parallel: bool, in_place: list[int]):
        self.kernel = kernel
        self.layout = layout
        self.dims = dims
        self.parallel = parallel
        self.in_place = in_place  # inputs that may be passed as an output too
        self.constants = [a.reshape(-1) for a in kernel._constant_arrays]
        self._functions: dict[tuple[int, ...], object] = {}

    def _function(self, alias: tuple[int, ...]):
        fn = self._functions.get(alias)
        if fn is None:
            fast_math = self.kernel.options.fast_math
            module = self.kernel._module(Variant(self.layout, fast_math, alias))
            fn = self.kernel._parallel_function(module, fast_math, self.dims) if self.parallel else module.kernel_serial
            self._functions[alias] = fn
        return fn

    def __call__(
        self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], alias: tuple[int, ...] | None = None
    ) -> None:
        """Run; ``alias`` (output m computed into input ``alias[m]``) when the caller knows it, else an output
        that is the very object of an input is taken to be computed in place."""
        if alias is None:
            alias = tuple(next((k for k in self.in_place if inputs[k] is o), -1) for o in outputs)
        fn = self._function(alias)
        args = [a.reshape(-1) for a in inputs]
        args += self.constants
        args += [o.reshape(-1) for m, o in enumerate(outputs) if alias[m] < 0]
        fn(self.dims, *args)


#: scalar primitives that cost many simple ones (polynomials, divisions): they make an element expensive
COSTLY_PRIMITIVES = frozenset({"exp", "log", "tanh", "erf", "pow", "sin", "cos", "sqrt", "div", "tan", "atan", "asin",
                               "acos", "sinh", "cosh", "asinh", "acosh", "atanh"})


def parallel_threshold(plan: KernelPlan) -> int:
    """Elements from which the parallel function beats the serial one: fewer for costlier elements."""
    costly = sum(_costly(step.expr) for step in plan.steps if isinstance(step, ScalarOp))
    return max(PARALLEL_MIN_ELEMENTS // (1 + 4 * costly), PARALLEL_MIN_ELEMENTS // 16)


def _costly(e) -> int:
    """How many costly primitives a scalar expression calls."""
    return (e.fn in COSTLY_PRIMITIVES) + sum(_costly(a) for a in e.args)


def compile_group(
    body: Graph,
    kind: str,
    input_types: Sequence[TensorType],
    *,
    target: str | Target = "cpu",
    options: KernelOptions | None = None,
    cache: KernelCache | None = None,
    alias: tuple[int, ...] | None = None,
) -> Kernel:
    """Compile a ``tlc.Fused`` group's body for ``input_types`` (CompileError with a reason if it cannot).

    ``target`` (a name or a ``tlc.targets.Target``) gives the kernel class and renderer, and says which kinds it
    renders. ``alias`` (elementwise groups): the in-place pattern the caller will run first (see ``Kernel``), so
    that is the variant compiled now."""
    options = options or KernelOptions()
    found = find(target) if isinstance(target, str) else target
    if found is None or found.kernel is None:
        supported = ", ".join(repr(n) for n in names() if find(n).kernel is not None)
        raise CompileError(f"target {target!r} is not supported by compile_group (supported: {supported})")
    target = found
    if len(input_types) != len(body.inputs):
        raise CompileError(f"the body has {len(body.inputs)} inputs but {len(input_types)} input types were given")
    cache = cache or default_cache()
    if kind == "epilogue" and target.fuses(kind) and not target.renders(kind):
        raise CompileError(
            "an epilogue group is compiled from its parts: split_epilogue(body), then an EpilogueKernel of the "
            "elementwise part driving a library contraction (the runtime does this per input shape)"
        )
    if not target.renders(kind):
        raise CompileError(f"the {target.name} target compiles {' and '.join(target.rendered_kinds)} groups only, "
                           f"not groups of kind {kind!r}")
    typed = typed_body(body, list(input_types))
    return target.resolve("kernel")(build_plan(typed, kind), options, cache, target=target, alias=alias)
