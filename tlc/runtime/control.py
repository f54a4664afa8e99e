"""If, Loop and Scan with their bodies compiled: each body is a plan of its own, run per branch or iteration.

A body is compiled when the step first binds, with the enclosing plan's options (opt level, JIT mode, threads,
kernel cache): ``BodyPlan`` holds that ``Plan``. Captured values that are constants where the step binds (a
layer's weights) become constants of the body before it is compiled, so the body plan folds them and prepares
them once as any plan does its constants (packed panels for a product); ``Body`` keeps a few such variants.
Like any plan a body plan specialises per input-shape signature and keeps at most ``max_specializations`` of
them (LRU): a carried value that grows every iteration costs a specialization per shape, never unbounded memory.
The body's inputs follow ``tlc.ops.control``'s capture convention: positional, formal inputs first, captures last.

The step calls the body's generated runner directly, not ``Plan.run``, which would check the feeds, take an
arena and set the thread governance on every iteration (the enclosing run already governs the threads, and the
feeds' types are fixed by the enclosing signature). ``BodyRun`` checks the feeds once per shape signature
(``Plan._checked``, which also makes the specialization), then holds that signature's runner and arena while the
shapes stay: an iteration costs a comparison of its feeds' shapes and one call. Measured on the 2-core VM, one
thread, a body of one Add on 8 floats: 3.2 us a call through ``Plan.run``, 1.35 us through ``BodyRun``, 1.9 us
a whole Loop iteration (the reference interpreter: 20.6 us).

Values are handed over, not copied: a body's outputs are fresh arrays each run (graph outputs never alias a
plan's buffers), so a Loop's carried values and a Scan's states feed the next iteration as they are. Scan
outputs are written row by row where they end (``Rows``): into the enclosing plan's planned output where the
step's outputs have static shapes (a Scan, a Loop with a constant trip count), else into an array allocated at
the first row when the length is known; the final states are copied once. Where the outputs' shapes depend on
the data (a Loop that can exit early, a carried value that grows) the step returns arrays of its own
(``StepImpl.shapes_from_data``).

JIT: the body plans compile their kernels as plans do (their jobs, on the JIT thread or now); the step's own
``KernelRequest`` waits for the jobs its binding made, so the enclosing plan's ``wait_for_jit``, ``jobs`` and
``stats()`` account for the bodies' kernels (a failed body kernel fails the step's job, with its reason).

A body that makes sequence or optional values stays on the reference interpreter, and ``plan.stats()`` says so
(``NotNative``; steps that read or make them outside bodies run their reference already, ``lower.py``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..errors import CompileError, ExecutionError, TlcError
from ..ir.graph import Graph, Node
from ..ir.types import TensorType, is_tensor
from ..ops.control import num_captures
from .bound import Bound, Call, KernelRequest, NotNative, V
from .device import memory_of
from .impl import BindContext, StepImpl
from .jit import Job
from .options import CompileOptions

#: feed-shape tuples whose check a ``BodyPlan`` remembers (cleared when more: a growing value makes one a step)
SEEN_MAX = 64
#: compiled variants of a body kept (one per set of constant captures, i.e. per place and signature it binds at)
VARIANTS = 4
#: a scan output of a Loop whose length is known (M) but that may exit early is allocated whole up to this size
ALLOCATE_MAX = 64 << 20


class BodyKernels(NamedTuple):
    """What a step's job gives when the body plans' kernels are ready (``Job`` reads ``name`` and ``cache_hit``)."""

    name: str
    cache_hit: bool


def _tensor_body(body: Graph, what: str) -> None:
    for node in body.nodes():
        for t in node.output_types:
            if not is_tensor(t):
                raise NotNative(f"{what} carries {t} values ({node.name!r}); bodies with sequence or optional "
                                f"values run on the reference interpreter")


class Body:
    """A body graph and its compiled plans, one per set of captured values that are constants where the step binds
    (inlined as constants, so the body plan folds them and prepares weights once, as any plan does its
    constants); the ``VARIANTS`` most recent are kept."""

    def __init__(self, graph: Graph, options: CompileOptions, what: str):
        _tensor_body(graph, what)
        self.graph = graph
        self.options = options
        self.what = what
        self.names = [node.name for node in graph.inputs]
        self.declared = [node.output_types[0] for node in graph.inputs]
        self._plans: OrderedDict[tuple, tuple[BodyPlan, list]] = OrderedDict()
        self._lock = threading.Lock()

    def plan_for(self, constants: dict[int, np.ndarray]) -> BodyPlan:
        """The body compiled with the inputs at the positions of ``constants`` bound to those values."""
        key = tuple(sorted((p, id(a)) for p, a in constants.items()))
        with self._lock:
            entry = self._plans.get(key)
            if entry is not None:
                self._plans.move_to_end(key)
                return entry[0]
        try:
            plan = BodyPlan(self._with_constants(constants), self.names, self.options, self.what)
        except NotNative:
            raise
        except TlcError as exc:   # the step then runs its reference, and stats() gives this reason
            raise NotNative(f"{self.what} could not be compiled: {type(exc).__name__}: {exc}") from None
        with self._lock:
            # NOTE: the entry keeps the arrays alive, so no other array can take their ids while it is cached
            self._plans[key] = (plan, list(constants.values()))
            while len(self._plans) > VARIANTS:
                self._plans.popitem(last=False)
        return plan

    def _with_constants(self, constants: dict[int, np.ndarray]) -> Graph:
        if not constants:
            return self.graph
        g = self.graph.copy()
        by_name = {node.name: node for node in g.inputs}
        try:
            for p, value in sorted(constants.items()):
                node = by_name[self.names[p]]
                g.replace_all_uses(node.output(0), g.constant(value, name=f"{node.name}_const"))
                g.erase(node)
            g.infer_types()
        except TlcError:   # a value that does not fit the body's declared type: the body as it is then
            return self.graph
        return g


class BodyPlan:
    """A body compiled as a plan, run positionally (the body's inputs in its order, its outputs in order; inputs
    that were bound to constants are not fed)."""

    def __init__(self, graph: Graph, names: list[str], options: CompileOptions, what: str):
        from .compiler import compile_with_options  # NOTE: here: compiler -> plan -> lower -> ops -> this module

        self.what = what
        self.plan = compile_with_options(graph, options)
        positions = {name: p for p, name in enumerate(names)}
        self.names = [name for name, _, _ in self.plan.program.feeds]
        try:
            self.order = tuple(positions[name] for name in self.names)
        except KeyError as exc:
            raise NotNative(f"{what}: the compiled body reads an input {exc} the body does not have") from None
        self.identity = self.order == tuple(range(len(positions)))
        dynamic = set(self.plan._dynamic)
        self.dynamic = [i for i, name in enumerate(self.names) if name in dynamic]   # in the plan's key order
        self.steps = len(self.plan.program.steps)
        self.lazy = options.jit == "lazy"
        self.hot = options.hot_threshold
        self._seen: dict[tuple, tuple] = {}     # feed shapes -> the plan's signature key, once checked

    def feeds(self, inputs: list) -> list:
        """The plan's feeds from the body's positional inputs."""
        return inputs if self.identity else [inputs[p] for p in self.order]

    def state(self, feeds: list, shapes: tuple):
        """The plan's specialization for ``feeds`` (checked the first time these shapes come; made if need be)."""
        plan = self.plan
        key = self._seen.get(shapes)
        state = None if key is None else plan._specs.get(key)
        if state is None:
            state, _ = plan._checked(dict(zip(self.names, feeds)))
            if len(self._seen) >= SEEN_MAX:
                self._seen.clear()
            self._seen[shapes] = tuple(shapes[i] for i in self.dynamic)
        if self.lazy and state.runs.incr() == self.hot:
            plan._submit(state.spec)
        return state

    def prepare(self, types: list) -> bool:
        """Make the specialization for the body inputs' ``types`` now (so an eager JIT compiles it in
        ``compile()`` and its jobs are known when the step binds); False when a shape is not known."""
        plan = self.plan
        by_name = {}
        for name, p in zip(self.names, self.order):
            t = types[p]
            if not isinstance(t, TensorType) or not t.is_static:
                return False
            by_name[name] = tuple(t.shape)
        key = tuple(by_name[name] for name in plan._dynamic)
        if key in plan._specs:
            return True
        try:
            plan._new_spec(key, {name: by_name[name] for name in plan._dynamic})
        except TlcError:   # the shapes do not fit the body: the first run says so, with the feeds' names
            return False
        return True

    def uses_blas(self) -> bool:
        specs = self.plan.specializations()
        return not specs or any(s.uses_blas for s in specs)

    def reference_steps(self) -> int:
        specs = self.plan.specializations()
        return 0 if not specs else sum(a.bound.mode == "reference" for a in specs[-1].active)

    def call(self, inputs: list) -> tuple:
        """One run of the body (an If's branch)."""
        run = BodyRun(self)
        try:
            return run(inputs)
        finally:
            run.close()


class BodyRun:
    """Runs of one body within one execution of a step: the runner and arena of the shapes last seen are held
    until they change (or ``close``), so an iteration costs a shape comparison and the runner's call."""

    __slots__ = ("body", "shapes", "state", "slot")

    def __init__(self, body: BodyPlan):
        self.body = body
        self.shapes: tuple | None = None
        self.state = None
        self.slot: list | None = None

    def __call__(self, inputs: list) -> tuple:
        feeds = self.body.feeds(inputs)
        shapes = tuple([a.shape for a in feeds])
        if shapes != self.shapes:
            self._switch(feeds, shapes)
        return self._run(feeds)

    def held(self, inputs: list) -> tuple:
        """A run of a body called once per execution of its step (an If's branch) by a run kept from call to
        call: as ``__call__``, and each call counts towards the lazy JIT and takes the newest runner (kernels
        that arrived since the last call)."""
        feeds = self.body.feeds(inputs)
        shapes = tuple([a.shape for a in feeds])
        if shapes != self.shapes:
            self._switch(feeds, shapes)
        else:
            state, slot = self.state, self.slot
            if self.body.lazy and state.runs.incr() == self.body.hot:
                self.body.plan._submit(state.spec)
            runner = state.runner(False)
            if slot[1] is not runner:
                slot[1], slot[2] = runner, runner.bind(slot[0])
        return self._run(feeds)

    def _run(self, feeds: list) -> tuple:
        try:
            return self.slot[2](*feeds)
        except TlcError:
            raise
        except Exception as exc:  # say which node of the body failed, as Plan.run would
            raise self.body.plan._failure(self.slot[1], self.state.spec, exc) from exc

    def _switch(self, feeds: list, shapes: tuple) -> None:
        self.close()
        self.state = self.body.state(feeds, shapes)
        self.slot = self.state.take(self.state.runner(False))
        self.shapes = shapes

    def close(self) -> None:
        if self.slot is not None:
            self.state.give(self.slot)
            self.slot = None
            self.shapes = None


def _contiguous(a, xp=np):
    """``a`` C-contiguous, in the array module of the plan (numpy, or CuPy for a device plan)."""
    return a if a is None or a.flags.c_contiguous else xp.ascontiguousarray(a)


def _fail(node: Node, exc: Exception) -> ExecutionError:
    """A body's failure, or the step's own, named after the step's node."""
    return ExecutionError(f"node {node.name!r} ({node.op}): {exc}")


def _request(node: Node, bodies: list[BodyPlan], options: CompileOptions, calls: list[Call]) -> KernelRequest | None:
    """A job that is done when the kernels the bodies' plans asked for so far are (see the module docstring)."""
    if not options.jit_enabled:
        return None
    jobs: list[Job] = [job for b in bodies for job in b.plan.jobs]
    if not jobs:
        return None

    def build(alias):
        for job in jobs:
            # NOTE: run a job not started yet here (on this thread): waiting for one queued behind this job on
            # the one JIT thread would never end
            job.run() if job.status in ("pending", "queued") else job.wait()
        failed = [job for job in jobs if job.status == "failed"]
        if failed:
            raise CompileError(f"body kernel {failed[0].name}: {failed[0].reason}"
                               + (f" (+{len(failed) - 1} other)" if len(failed) > 1 else ""))
        return BodyKernels(f"{node.op} bodies ({len(jobs)} kernels)", all(bool(j.cache_hit) for j in jobs))

    return KernelRequest(f"{node.op} bodies", build, lambda kernel, alias: calls)


def _bound(ctx: BindContext, bodies: list[BodyPlan], fn: Callable, writes: bool, note: str) -> Bound:
    ins = tuple(V(i) for i in ctx.inputs)
    if writes:
        calls = [Call(fn, ins + tuple(V(o) for o in ctx.outputs))]
    else:
        calls = [Call(fn, ins, result=ctx.outputs, unpack=True)]
    refs = sum(b.reference_steps() for b in bodies)
    if refs:
        note += f"; {refs} body step(s) on the reference"
    return Bound(calls, mode="native", note=note, writes_outputs=writes, blas=any(b.uses_blas() for b in bodies),
                 request=_request(ctx.node, bodies, ctx.options, calls))


def _static_outputs(ctx: BindContext) -> bool:
    return all(isinstance(t, TensorType) and t.is_static for t in ctx.out_types)


def _scalar_shape(t) -> tuple[int, ...]:
    """The shape a body declares for its iteration number or condition: () unless a static one-element shape."""
    if isinstance(t, TensorType) and t.is_static and int(np.prod(t.shape)) == 1:
        return tuple(t.shape)
    return ()


class Rows:
    """One scan output built row by row: each row written in place into the output, laid out with its scan axis
    at ``axis`` (the planned output ``planned``, else an array allocated at the first row when ``length`` is
    known), at ``length - 1 - t`` where ``reverse``; rows collected and stacked at the end when the length is
    not known (a Loop without M) or the array would be large for a loop that may exit early."""

    __slots__ = ("full", "rows", "owned", "length", "axis", "reverse", "items", "what", "xp")

    def __init__(self, planned: np.ndarray | None, axis: int, length: int | None, reverse: bool, what: str,
                 xp=np):
        self.xp = xp     # the plan's array module: numpy, or CuPy where the rows live on a device
        self.full, self.owned = planned, planned is None
        self.rows = None if planned is None else xp.moveaxis(planned, axis % planned.ndim, 0)
        self.length, self.axis, self.reverse, self.what = length, axis, reverse, what
        self.items: list[np.ndarray] | None = None

    def put(self, t: int, y: np.ndarray) -> None:
        rows = self.rows
        if rows is None:
            if self.items is not None or self.length is None or self.length * y.nbytes > ALLOCATE_MAX:
                if self.items is None:
                    self.items = []
                self.items.append(y)
                return
            shape = list(y.shape)
            shape.insert(self.axis % (y.ndim + 1), self.length)
            self.full = self.xp.empty(shape, y.dtype)
            rows = self.rows = self.xp.moveaxis(self.full, self.axis % (y.ndim + 1), 0)
        if y.shape != rows.shape[1:]:
            raise ExecutionError(f"{self.what} has shape {list(y.shape)} in iteration {t}, "
                                 f"{list(rows.shape[1:])} before")
        rows[self.length - 1 - t if self.reverse else t] = y

    def result(self, count: int, declared: TensorType | None) -> np.ndarray:
        """The stacked output after ``count`` rows (the body's declared row type shapes an empty one)."""
        if self.items is not None:
            items = self.items[::-1] if self.reverse else self.items
            return self.xp.stack(items, axis=self.axis % (items[0].ndim + 1))
        if self.full is None:
            inner = list(declared.shape) if isinstance(declared, TensorType) and declared.is_static else []
            inner.insert(self.axis if self.axis >= 0 else len(inner) + 1 + self.axis, 0)
            return self.xp.zeros(inner, np.dtype(declared.dtype) if isinstance(declared, TensorType) else np.float32)
        if count == self.length:
            return self.full
        if self.owned and not self.reverse and self.axis % self.full.ndim == 0:
            return self.full[:count].copy()   # a Loop that exited early
        raise ExecutionError(f"{self.what}: {count} rows, {self.length} planned")


def _constants(ctx: BindContext, first_port: int, first_position: int) -> dict[int, np.ndarray]:
    """Body input position -> value, for the captures (node inputs from ``first_port`` on, body inputs from
    ``first_position`` on) whose values are fixed where the step binds."""
    found = {}
    for j, port in enumerate(range(first_port, len(ctx.inputs))):
        value = ctx.const(port)
        if value is not None:
            found[first_position + j] = value
    return found


def _iterations(node: Node, body, kind: str, iterate, rows: list, scan_types: list, outs: tuple | None, xp=np):
    """Run a Loop's or Scan's ``iterate(run) -> (carried values, iterations)`` on one ``BodyRun`` of ``body``,
    then stack the scan outputs ``rows``; the carried values go into the planned ``outs`` (returns None) or are
    returned with the scans (``outs`` None). A body's error names the node."""
    run = BodyRun(body)
    try:
        carried, count = iterate(run)
        scans = [r.result(count, scan_types[j]) for j, r in enumerate(rows)]
    except TlcError as exc:
        raise _fail(node, exc) from exc
    finally:
        run.close()
    if outs is not None:
        _finish(outs, carried, kind, xp)
        return None
    return carried + scans


def _finish(outs: tuple, values: list, what: str, xp=np) -> None:
    for out, value in zip(outs, values):
        if out.shape != value.shape:
            raise ExecutionError(f"{what}: a final value has shape {list(value.shape)}, planned {list(out.shape)}")
        xp.copyto(out, value)


# ---------------------------------------------------------------------------- If
class IfImpl(StepImpl):
    """If: the branch the condition picks runs as its compiled plan; its outputs are handed over as they are."""

    mode = "native"
    shapes_from_data = True

    def __init__(self, attrs: dict, node: Node, options: CompileOptions):
        self.branches = (Body(attrs["then_branch"], options, "then_branch"),
                         Body(attrs["else_branch"], options, "else_branch"))
        self.reason = "If: 2 compiled branches"

    def bind(self, ctx: BindContext) -> Bound:
        constants = _constants(ctx, 1, 0)
        then_b, else_b = plans = [branch.plan_for(constants) for branch in self.branches]
        for plan in plans:
            plan.prepare(ctx.in_types[1:])
        node = ctx.node
        # NOTE: each calling thread keeps a run of each branch, with its runner and arena, from one call to the
        # next (a branch's outputs are fresh arrays, never its arena's): an If in a Loop's body took ~3 us an
        # iteration to look its branch's specialization up and take and give back an arena
        local = threading.local()
        xp = memory_of(ctx.options.target).xp

        def run_if(cond, *captures):
            if cond is None or cond.size != 1:
                raise ExecutionError(f"node {node.name!r} (If): the condition must hold one element, got "
                                     f"{None if cond is None else list(cond.shape)}")
            runs = getattr(local, "runs", None)
            if runs is None:
                runs = local.runs = (BodyRun(then_b), BodyRun(else_b))
            run = runs[0] if cond.reshape(-1)[0] else runs[1]
            try:
                return run.held([_contiguous(c, xp) for c in captures])
            except TlcError as exc:
                raise _fail(node, exc) from exc

        run_if.held = local   # for inspection: the runs this thread keeps
        return _bound(ctx, plans, run_if, False, self.reason)


# ---------------------------------------------------------------------------- Loop
class LoopImpl(StepImpl):
    """Loop: the body plan runs while i < M and cond; carried values handed over, scan outputs stacked."""

    mode = "native"
    shapes_from_data = True

    def __init__(self, attrs: dict, node: Node, options: CompileOptions):
        body: Graph = attrs["body"]
        self.body = Body(body, options, "the body")
        self.captures = num_captures(node)
        self.carried = max(0, node.num_inputs - 2 - self.captures)   # NOTE: Loop(M) may have M alone
        self.scans = len(body.outputs) - 1 - self.carried
        self.scan_types = [body.type_of(v) for v, _ in body.outputs[1 + self.carried:]]
        self.reason = "Loop: compiled body"

    def bind(self, ctx: BindContext) -> Bound:
        n, k_scan = self.carried, self.scans
        body = self.body.plan_for(_constants(ctx, 2 + n, 2 + n))
        declared = self.body.declared
        iter_shape, cond_shape = _scalar_shape(declared[0]), _scalar_shape(declared[1])
        types = [TensorType("int64", iter_shape), TensorType("bool", cond_shape), *ctx.in_types[2:]]
        body.prepare(types)
        writes = _static_outputs(ctx)
        scan_types, node, num_in = self.scan_types, ctx.node, len(ctx.inputs)
        xp = memory_of(ctx.options.target).xp

        def run_loop(*arrays):
            m, cond = (arrays[:num_in] + (None, None))[:2]
            carried = [_contiguous(c, xp) for c in arrays[2:2 + n]]
            captures = [_contiguous(c, xp) for c in arrays[2 + n:num_in]]
            outs = arrays[num_in:]
            trip = None if m is None else int(m.reshape(-1)[0])
            keep = True if cond is None else bool(cond.reshape(-1)[0])
            # NOTE: one array for the iteration number, set in place: a body's outputs never alias its feeds
            it, true = np.zeros(iter_shape, np.int64), np.ones(cond_shape, bool)
            rows = [Rows(outs[n + j] if writes else None, 0, trip, False, f"scan output {j}", xp)
                    for j in range(k_scan)]

            def iterate(run: BodyRun) -> tuple[list, int]:
                state, go, i = carried, keep, 0
                while go and (trip is None or i < trip):
                    it[...] = i
                    results = run([it, true, *state, *captures])
                    go = bool(results[0])
                    state = list(results[1:1 + n])
                    for j in range(k_scan):
                        rows[j].put(i, results[1 + n + j])
                    i += 1
                return state, i

            return _iterations(node, body, "Loop", iterate, rows, scan_types, outs[:n] if writes else None, xp)

        return _bound(ctx, [body], run_loop, writes, f"Loop: compiled body ({body.steps} steps)")


# ---------------------------------------------------------------------------- Scan
class ScanImpl(StepImpl):
    """Scan: the body plan runs once per slice of the scan inputs; scan outputs written slice by slice."""

    mode = "native"
    shapes_from_data = True

    def __init__(self, attrs: dict, node: Node, options: CompileOptions):
        body: Graph = attrs["body"]
        self.body = Body(body, options, "the body")
        self.m = int(attrs["num_scan_inputs"])
        self.k = num_captures(node)
        self.n = node.num_inputs - self.m - self.k
        self.k_out = len(body.outputs) - self.n

        def axes(name: str, count: int) -> list[int]:
            values = list(attrs.get(name) or [])
            return values + [0] * (count - len(values))

        self.in_axes, self.in_dirs = axes("scan_input_axes", self.m), axes("scan_input_directions", self.m)
        self.out_axes, self.out_dirs = axes("scan_output_axes", self.k_out), axes("scan_output_directions", self.k_out)
        self.out_types = [body.type_of(v) for v, _ in body.outputs[self.n:]]
        self.reason = "Scan: compiled body"

    def bind(self, ctx: BindContext) -> Bound:
        n, m, k_out = self.n, self.m, self.k_out
        body = self.body.plan_for(_constants(ctx, n + m, n + m))
        types = list(ctx.in_types)
        for j in range(m):
            t = types[n + j]
            if isinstance(t, TensorType) and t.shape is not None and len(t.shape) > 0:
                shape = list(t.shape)
                del shape[self.in_axes[j] % len(shape)]
                types[n + j] = t.with_shape(tuple(shape))
        body.prepare(types)
        writes = _static_outputs(ctx)
        in_axes, in_dirs, out_axes, out_dirs = self.in_axes, self.in_dirs, self.out_axes, self.out_dirs
        out_types, node, num_in = self.out_types, ctx.node, len(ctx.inputs)
        xp = memory_of(ctx.options.target).xp

        def run_scan(*arrays):
            inputs, outs = arrays[:num_in], arrays[num_in:]
            states = [_contiguous(s, xp) for s in inputs[:n]]
            captures = [_contiguous(c, xp) for c in inputs[n + m:]]
            # NOTE: the scan axis moved first once, so each iteration's slice is a contiguous view
            xs = [xp.ascontiguousarray(xp.moveaxis(x, a % x.ndim, 0)) for x, a in zip(inputs[n:n + m], in_axes)]
            lengths = {x.shape[0] for x in xs}
            if len(lengths) != 1:
                raise _fail(node, ExecutionError(f"the scan inputs have different lengths {sorted(lengths)}"))
            (steps,) = lengths
            rows = [Rows(outs[n + j] if writes else None, out_axes[j], steps, bool(out_dirs[j]),
                         f"scan output {j}", xp) for j in range(k_out)]

            def iterate(run: BodyRun) -> tuple[list, int]:
                state = states
                for t in range(steps):
                    slices = [x[steps - 1 - t if d else t, ...] for x, d in zip(xs, in_dirs)]   # 0-d: an array
                    results = run([*state, *slices, *captures])
                    state = list(results[:n])
                    for j in range(k_out):
                        rows[j].put(t, results[n + j])
                return state, steps

            return _iterations(node, body, "Scan", iterate, rows, out_types, outs[:n] if writes else None, xp)

        return _bound(ctx, [body], run_scan, writes, f"Scan: compiled body ({body.steps} steps)")
