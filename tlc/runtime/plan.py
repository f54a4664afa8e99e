"""``Plan``: a lowered program, specialised per input-shape signature, each specialization run by its generated
runner (``runner.py``).

``run`` checks the feeds against the signature (a fast path of identity checks when they match, the full check
with its named errors when they do not), takes an arena from the specialization's pool (so concurrent runs
never share a buffer), and calls the runner: one Python function that makes the steps' calls in order. Kernels
arrive from the JIT thread as they are compiled (``jit.py``); the runner is regenerated when one does.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import sys
import threading
import time
import warnings
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping
from typing import TextIO

import numpy as np

from ..errors import ExecutionError, TlcError
from ..ir.feeds import check_feeds
from ..ir.graph import Graph
from ..ir.types import TensorType, ValueType, np_dtype
from ..reference import Interpreter
from . import batches, threads
from .device import memory_of
from .jit import Job
from .lower import Program, lower
from .native import cache_for
from .options import CompileOptions
from .profiler import Profile
from .runner import Arena, Runner, generate
from .specialize import Specialization, bound_types
from .stats import PlanStats, build_stats

POOL_SIZE = 8   # arenas kept per specialization (one per concurrent run)


class Counter:
    """A thread-safe counter (runs come from several threads) that costs no lock: ``itertools.count``'s
    ``next`` is atomic in CPython."""

    def __init__(self) -> None:
        self._count = itertools.count(1)
        self._last = 0

    def incr(self) -> int:
        self._last = n = next(self._count)
        return n

    @property
    def value(self) -> int:
        return self._count.__reduce__()[1][0] - 1


#: runs a specialization at several threads times at each thread count (a block at all cores, then one at one
#: thread) before it settles
PROBE_RUNS = 5
#: ... or this many when the last probe was decisive (one arm at least ``DECISIVE`` times the other): the losing
#: arm's runs are what a probe costs (MobileNetV2 b1 at 2 threads in tools/bench.py's pattern: 3 of its 36 timed
#: runs were a reprobe's one-thread runs at 8.5-9.5 ms against 4.8-5.2), and a clear verdict needs fewer to hold
REPROBE_SHORT_RUNS = 3
DECISIVE = 1.3
#: ... and a probe settles after this many runs of the one-thread arm where each of them is ``DECISIVE`` apart
#: from the all-cores median: a big model's one-thread runs are what its probes cost (the light ResNet-50 at 2
#: threads in tools/bench.py's pattern: five of its 36 timed runs at one thread, 73 ms among 38-48)
EARLY_RUNS = 2
#: one thread is kept when its median run takes at most this fraction of the median at all cores: as long, since
#: the nineteenth session (0.9 before: plans whose second thread bought nothing stayed at all cores, and timed
#: interleaved against a plan at one thread in tools/bench.py's 2-thread pass they were slower: the LSTM/GRU
#: tagger b1 x0.88 (its probe 0.698 ms at one, 0.751 at all), the QDQ conv net b1 x0.84 (0.096 / 0.097), the small
#: conv net x0.95 (0.087 / 0.090)). Arms that far apart are the small and loop models; a big model's differ ~1.8x
PROBE_MARGIN = 1.0
#: runs after which a settled specialization first times both again: what runs beside a plan changes (an
#: application that calls onnxruntime and tlc back to back at 2 threads, onnxruntime's idle threads spinning into
#: tlc's run, made ResNet-18 at batch 1 settle at one thread: 30.6 ms there against 36.9 at all cores; run alone
#: afterwards it stayed at one thread, 29 ms, where all cores take 17); each probe that keeps the count doubles the
#: interval, up to ``REPROBE_RUNS``, and one that changes it starts again from here
REPROBE_FIRST = 20
#: ... or this many after a verdict of one thread: it is then the all-cores arm that a reprobe runs as its loser,
#: which costs little, and such a verdict often comes from something that passes (GPT-2's block at batch 1 and 2
#: threads, warmed up run for run with an onnxruntime session whose idle threads spin: 20 runs at one thread, 18
#: ms, before the reprobe found 9.4 at all cores)
REPROBE_ONE_FIRST = 5
#: the longest interval (runs) between probes of a settled specialization (slow spells come and go)
REPROBE_RUNS = 1000
#: a specialization whose runs at all cores take less than this (s), and whose one-thread arm (a serial run of
#: its own parts) came within ``ONE_SPEC_REACH`` of them, probes again at once on a second specialization bound
#: at one thread: run in turn on one thread, its parts for two threads cost the dynamic-batch CNN 0.33 ms against
#: 0.29 bound at one (its few-tile Winograd convs' ROWS read the shared transform once a part), and in a bench's
#: pattern (pauses, five runs) its serial arm timed 0.34-0.51 ms against 0.37-0.45 at all cores in one spell. A
#: second specialization cost 42 ms and 9 MiB for that CNN (157 ms / 17 MiB MobileNetV2, 0.7 s / 62 MiB
#: ResNet-18), and bound on the JIT thread it takes the GIL in turns with the runs (runs of 3-7 ms in a bench of
#: 0.05-0.4 ms ones when every small plan built one)
ONE_SPEC_S = 1e-3
ONE_SPEC_REACH = 1.25
#: ... and at least this long: below it the timings are too fine to tell the arms apart, and a one-thread
#: specialization beside a tiny plan slowed its runs in a bench's pattern (0.15 s pauses, five runs): relu16 at
#: 2 threads 3.8-4.1 -> 4.4-5.2 us, 50 tiny branches 7.2-8.4 -> 8.9-9.0 (the cause not found)
ONE_SPEC_MIN_S = 1e-4


class SpecState:
    """A specialization as the plan runs it: its current runner (regenerated as kernels arrive) and arenas.

    A specialization at several threads times its runs at all cores and then at one thread (``PROBE_RUNS`` each,
    ``REPROBE_SHORT_RUNS`` after a decisive verdict, once its kernels are compiled), keeps one thread when that
    is no slower (``PROBE_MARGIN``), and times both again ``REPROBE_FIRST`` runs later (``REPROBE_ONE_FIRST``
    after a verdict of one thread), then at intervals
    that double while the count holds (up to ``REPROBE_RUNS``) and start again when it changes. A loop's body
    runs many small serial steps that gain nothing from a second thread, while a parallel step before the loop
    needs every CPU free: tools/models.rnn_loop at 2 threads (its projection batched before the loop by
    ``loopbatch``) took 0.79 ms alone but 2.0 run back to back with an onnxruntime session whose idle threads
    spin, against 0.86 at one thread. And in this VM's slow spells
    (a cache line one core wrote costs the other ~1.5x, for seconds to minutes) a small model's two parts lose
    more to what they exchange than the second core gives: the dynamic-batch CNN at batch 1 0.20 ms at 2 threads
    in the fast state, 0.35 in a spell, 0.30 at one thread in either."""

    def __init__(self, spec: Specialization, governors: dict, single: dict):
        """``governors``: the plan's governors at its thread count, ``single``: at one thread (by ``uses_blas``)."""
        self.spec = spec
        self.runs = Counter()
        self._runners: dict[bool, Runner] = {}
        self._pool: deque[list] = deque()    # [arena, runner, bound run function]; append/pop are atomic
        self._lock = threading.Lock()
        self.one_thread = False
        self.all_cores, self.single = governors, single
        self.governors = governors   # what the runs use (once settled)
        #: seconds of the probing runs at (all cores, one thread); None once settled or when not probing
        self.probe: tuple[list[float], list[float]] | None = ([], []) if spec.probe_threads else None
        #: the plan's run count at which a settled specialization probes again
        self.next_probe = REPROBE_RUNS if spec.probe_threads else 2**62
        #: runs from one settled probe to the next (None before the first settles)
        self.interval: int | None = None
        #: runs per arm of the probe under way (``PROBE_RUNS``, or ``REPROBE_SHORT_RUNS`` after a clear verdict)
        self.probe_runs = PROBE_RUNS
        #: the specialization bound at one thread that small plans' one-thread runs take (``ONE_SPEC_S``), and
        #: the job that binds it on the JIT thread
        self.one: SpecState | None = None
        self.one_job: Job | None = None
        self.want_one = False
        #: the state settled runs take: this one, or ``one``
        self.settled: SpecState = self

    def probing_arm(self) -> int | None:
        """The thread count this run is timed at (0: all cores, 1: one thread), or None: not a probing run."""
        probe = self.probe
        if probe is None or not all(job.done for job in self.spec.jobs()):   # (it would time a fallback)
            return None
        if not self.runner().uses_pool:   # nothing to share out: one thread, no probe, no thread governance
            self._settle_serial()
            return None
        # NOTE: in blocks, all cores first: a one-thread run right after an all-cores run still has the pool's
        # workers spinning beside it (the medians drop that first run of each block)
        if len(probe[0]) < self.probe_runs:
            return 0
        job = self.one_job
        if job is not None and self.one is None:   # binding the one-thread arm's specialization
            if not job.done:
                return None
            self.one = job.result   # (None where it failed: the serial arm)
        return 1

    def wants_one(self) -> bool:
        """Whether the one-thread arm should run on a specialization bound at one thread, not asked for yet."""
        return self.want_one and self.one_job is None

    def arm(self, arm: int | None) -> SpecState:
        """The state that runs a probing run of ``arm`` (None: not timed): this one, or at one thread ``one``."""
        return self.one if arm == 1 and self.one is not None else self

    def record(self, arm: int, seconds: float, runs: int = 0) -> None:
        """Time a probing run of ``arm`` (``runs``: the plan's run count, from which the next probe counts)."""
        probe = self.probe
        if probe is None:
            return
        probe[arm].append(seconds)
        if len(probe[0]) >= self.probe_runs and (len(probe[1]) >= self.probe_runs or self._decided_early(probe)):
            all_cores, one = statistics.median(probe[0]), statistics.median(probe[1])
            decisive = max(one, all_cores) >= DECISIVE * min(one, all_cores)
            self.probe_runs = REPROBE_SHORT_RUNS if decisive else PROBE_RUNS
            one_thread = one <= PROBE_MARGIN * all_cores
            held = self.interval is not None and one_thread == self.one_thread
            first = REPROBE_ONE_FIRST if one_thread else REPROBE_FIRST
            self.interval = min(2 * self.interval, REPROBE_RUNS) if held else first
            self.next_probe = runs + self.interval
            if self.one_job is None and ONE_SPEC_MIN_S <= all_cores < ONE_SPEC_S and one <= ONE_SPEC_REACH * all_cores:
                self.want_one = True   # within reach: probe again at once, the one-thread arm bound at one
                self.next_probe = runs
            self.one_thread = one_thread
            self.governors = self.single if self.one_thread else self.all_cores
            bound = " (bound at one thread)" if self.one is not None else ""
            self.spec.threads_note = (f"runs at {'one thread' if self.one_thread else 'all its threads'} "
                                      f"(timed: {one * 1e3:.3f} ms at one{bound}, {all_cores * 1e3:.3f} at all)")
            self.settled = self.one if self.one_thread and self.one is not None else self
            self.probe = None

    @staticmethod
    def _decided_early(probe: tuple[list[float], list[float]]) -> bool:
        """Whether the one-thread arm's first ``EARLY_RUNS`` runs already tell the arms apart: every one of them
        at least ``DECISIVE`` times the all-cores median, or every one under it by that factor."""
        one = probe[1]
        if len(one) < EARLY_RUNS:
            return False
        all_cores = statistics.median(probe[0])
        return min(one) >= DECISIVE * all_cores or max(one) * DECISIVE <= all_cores

    def _settle_serial(self) -> None:
        """Settle at one thread for good: no call of the specialization runs on the pool (``Runner.uses_pool``),
        so a second thread cannot help, and its governance cost a one-op plan ~0.5 us a run (relu16 at 2
        threads 4.24 against 3.81 us at 1, back to back)."""
        self.probe = None
        self.one_thread = True
        self.governors = self.single
        self.next_probe = 2**62
        self.spec.threads_note = "runs at one thread (no step uses the thread pool)"

    def reprobe(self) -> None:
        """Time both thread counts again (``Plan.run`` calls it at ``next_probe`` runs; ``record`` sets the next)."""
        self.probe = ([], [])

    def runner(self, profile: bool = False) -> Runner:
        runner = self._runners.get(profile)
        if runner is None or runner.generation != self.spec.generation:
            with self._lock:
                runner = self._runners.get(profile)
                if runner is None or runner.generation != self.spec.generation:
                    runner = self._runners[profile] = generate(self.spec, profile)
        return runner

    def take(self, runner: Runner) -> list:
        try:
            slot = self._pool.pop()
        except IndexError:
            arena = Arena(self.spec)
            return [arena, runner, runner.bind(arena)]
        if slot[1] is not runner:
            slot[1], slot[2] = runner, runner.bind(slot[0])
        return slot

    def give(self, slot: list) -> None:
        if len(self._pool) < POOL_SIZE:
            self._pool.append(slot)


class Plan:
    """A compiled graph: ``run(feeds) -> {name: array}``, ``run_batches(iterable of feeds)``, ``stats()``,
    ``profile()``, ``wait_for_jit()``."""

    def __init__(self, graph: Graph, options: CompileOptions, timings: dict[str, float] | None = None):
        """Lower ``graph`` (already optimized; it is not changed) for ``options``."""
        start = time.perf_counter()
        self.options = options
        self._lazy = options.jit == "lazy"
        self.timings = dict(timings or {})
        self.pass_report: object | None = None     # the pass manager's report, when the pipeline ran
        self.name = graph.name
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()
        threads.configure_openmp()
        self._governors = {flag: threads.Governor(options.threads, flag) for flag in (False, True)}
        self._single = {flag: threads.Governor(1, flag) for flag in (False, True)}   # see SpecState
        self.program: Program = lower(graph, options)
        self._memory = memory_of(options.target)      # host numpy, or a device's (feeds in, outputs out)
        self._on_device = self._memory.device
        self._run_node = Interpreter(self.program.graph).run_node
        program = self.program
        self._feed_specs = [(name, t) for name, _, t in program.feeds]
        # NOTE: sequence and optional feeds are not part of the shape signature; the steps reading them run
        # their references, which take any length and element shapes
        self._tensor_feeds = {name for name, _, t in program.feeds if isinstance(t, TensorType)}
        self._dynamic = [name for name, _, t in program.feeds if name in self._tensor_feeds and not t.is_static]
        self._out_names = [name for name, _ in program.outputs]
        self._specs: OrderedDict[tuple, SpecState] = OrderedDict()
        self._specs_lock = threading.Lock()
        self._runs = Counter()
        self._jobs: list[Job] = []
        self._jobs_lock = threading.Lock()
        self._profile = Profile(self)
        self._static_feeds = None
        if not self._dynamic:
            if len(self._tensor_feeds) == len(self._feed_specs):
                self._static_feeds = [(name, np_dtype(t.dtype), tuple(t.shape)) for name, t in self._feed_specs]
            self._specs[()] = self._specialize({})
        self.timings["lower_ms"] = (time.perf_counter() - start) * 1e3

    # ------------------------------------------------------------------ interface
    @property
    def inputs(self) -> list[tuple[str, ValueType]]:
        return list(self._feed_specs)

    @property
    def outputs(self) -> list[tuple[str, ValueType | None]]:
        return [(name, self.program.value_types[v]) for name, v in self.program.outputs]

    def run(self, feeds: Mapping[str, object], *, profile: bool = False,
            device_outputs: bool = False) -> dict[str, np.ndarray]:
        """Run on ``feeds`` (input name -> array); returns output name -> a new array owned by the caller.

        On a device target (``target="cuda"``) a feed may be a device array (CuPy, or any object with the CUDA
        Array Interface: it is read where it lies, not copied), and ``device_outputs=True`` returns the outputs
        as device arrays (CuPy) instead of copying them to the host."""
        arrays = self._fast_feeds(feeds)
        if arrays is not None:
            state = self._specs[()]
        else:
            state, arrays = self._checked(feeds)
        if state.probe is not None:
            outputs = self._probed(state, arrays, profile)
        else:
            target = state.settled
            governor = state.governors[target.spec.uses_blas]
            token = governor.enter()
            try:
                outputs = self._execute(target, arrays, profile)
            finally:
                governor.exit(token)
        runs = self._runs.incr()
        if runs >= state.next_probe and state.probe is None:
            state.reprobe()
        if self._on_device and not device_outputs:   # one copy back per output, owned by the caller
            outputs = [self._memory.host(o) for o in outputs]
        return dict(zip(self._out_names, outputs))

    def _probed(self, state: SpecState, arrays: list, profile: bool) -> tuple:
        """A run of a specialization that is still choosing its thread count (``SpecState``), timed."""
        arm = state.probing_arm()
        if arm == 1 and self.options.jit != "off" and state.wants_one():
            # bound on the JIT thread (tens of ms for a small plan): this run and those until it is ready run
            # at all cores, untimed
            one_thread = dataclasses.replace(self.options, num_threads=1)
            spec = state.spec
            state.one_job = Job(f"one-thread specialization {spec.signature}",
                                lambda: self._bind(spec.types, spec.signature, one_thread, self._single))
            state.one_job.submit()
            arm = None
        target = state.arm(arm)
        governor = (state.single if arm else state.governors)[target.spec.uses_blas]
        token = governor.enter()
        start = time.perf_counter()
        try:
            outputs = self._execute(target, arrays, profile)
        finally:
            governor.exit(token)
        if arm is not None:
            state.record(arm, time.perf_counter() - start, self._runs.value)
        return outputs

    def run_batches(self, feeds: Iterable[Mapping[str, object]], *, batch_size: int | None = None,
                    progress: bool | TextIO = False) -> Iterator[dict[str, np.ndarray]]:
        """Run over an iterable of input dicts in chunks of ``batch_size`` rows along the leading (batch) axis; a
        generator of one output dict per input dict, in order, each with the rows that dict gave. Memory stays
        bounded by the batch; the last chunk runs at its own size (a symbolic batch dim: one specialization more)
        or padded (a static batch). ``progress``: True or a text stream for a tqdm bar of rows and rows/s.
        Details in ``tlc/runtime/batches.py``."""
        return batches.run_batches(self, feeds, batch_size=batch_size, progress=progress)

    def _fast_feeds(self, feeds: Mapping[str, object]) -> list[np.ndarray] | None:
        """The feeds in order when they match the static signature exactly (C-contiguous arrays); else None."""
        static = self._static_feeds
        if static is None or type(feeds) is not dict or len(feeds) != len(static):
            return None
        arrays = []
        for name, dtype, shape in static:
            a = feeds.get(name)
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                return None
            arrays.append(a)
        return arrays

    def _checked(self, feeds: Mapping[str, object]) -> tuple[SpecState, list[np.ndarray]]:
        checked, _ = check_feeds(self._feed_specs, feeds)
        contiguous = self._memory.xp.ascontiguousarray if self._on_device else None
        arrays = [checked[name] if name not in self._tensor_feeds
                  else contiguous(checked[name]) if contiguous and hasattr(checked[name], "__cuda_array_interface__")
                  else np.asarray(checked[name], order="C") for name, _ in self._feed_specs]
        key = tuple(checked[name].shape for name in self._dynamic)
        state = self._specs.get(key)
        if state is None:
            state = self._new_spec(key, {name: checked[name].shape for name in self._dynamic})
        else:
            self._specs.move_to_end(key)
        return state, arrays

    def _execute(self, state: SpecState, arrays: list[np.ndarray], profile: bool) -> tuple:
        if self._lazy and state.runs.incr() == self.options.hot_threshold:
            self._submit(state.spec)
        runner = state.runner(profile)
        slot = state.take(runner)
        try:
            if profile:
                events: list[tuple[int, int, int]] = []
                start = time.perf_counter_ns()
                outputs = slot[2](*arrays, events.append)
                self._profile.record(start, time.perf_counter_ns() - start, events)
                return outputs
            return slot[2](*arrays)
        except TlcError:
            raise
        except Exception as exc:  # a step failed: say which node, op and shapes
            raise self._failure(runner, state.spec, exc) from exc
        finally:
            state.give(slot)

    def _failure(self, runner: Runner, spec: Specialization, exc: Exception) -> ExecutionError:
        step = None
        tb = sys.exc_info()[2]
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == runner.filename:
                step = runner.line_steps.get(tb.tb_lineno, step)
            tb = tb.tb_next
        if step is None:
            return ExecutionError(f"plan {self.name!r} failed: {type(exc).__name__}: {exc}")
        st = self.program.steps[step]
        shapes = ", ".join("-" if i >= len(spec.types) or spec.types[i] is None else str(spec.types[i])
                           for i in st.inputs)
        return ExecutionError(f"node {st.node.name!r} ({st.label}) failed on inputs ({shapes}): "
                              f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ specializations
    def _new_spec(self, key: tuple, shapes: dict[str, tuple[int, ...]]) -> SpecState:
        state = self._specialize(shapes)
        with self._specs_lock:
            state = self._specs.setdefault(key, state)
            while len(self._specs) > self.options.max_specializations:
                self._specs.popitem(last=False)
        return state

    def _specialize(self, shapes: dict[str, tuple[int, ...]]) -> SpecState:
        program = self.program
        types = program.value_types if not shapes else bound_types(program, shapes)
        signature = ", ".join(f"{name}{list(types[v].shape)}" for name, v, _ in program.feeds
                              if isinstance(types[v], TensorType) and types[v].shape is not None) or "(no inputs)"
        return self._bind(types, signature, self.options, self._governors)

    def _bind(self, types: list, signature: str, options: CompileOptions, governors: dict) -> SpecState:
        spec = Specialization(self.program, types, options, self._run_node, signature)
        jobs = spec.make_jobs(self._job_done)
        if options is not self.options:   # a one-thread arm's (``SpecState.one``), bound on the JIT thread:
            for job in jobs:               # its kernels come from the cache, built here too; nothing lists them
                job.run()
            return SpecState(spec, governors, self._single)
        with self._jobs_lock:
            self._jobs += jobs
        jit = self.options.jit
        if jit == "eager":
            start = time.perf_counter()
            for job in jobs:
                job.run()
            self.timings["jit_ms"] = self.timings.get("jit_ms", 0.0) + (time.perf_counter() - start) * 1e3
        elif jit == "auto":
            for job in jobs:
                job.submit()
        return SpecState(spec, governors, self._single)

    def _submit(self, spec: Specialization) -> None:
        for job in spec.jobs():
            job.submit()

    def _job_done(self, job: Job) -> None:
        problem = cache_for(self.options).problem
        if problem:   # kernels still compile, but nothing is kept for the next process: say so once
            self.warn_once("cache", problem)
        if job.status == "failed":
            failed = sum(j.status == "failed" for j in self._jobs)
            self.warn_once("compile", f"{job.name} could not be compiled and runs its fallback: {job.reason}"
                                      + (f" ({failed} failed so far; see plan.stats())" if failed > 1 else ""))

    # ------------------------------------------------------------------ JIT, stats, profile
    @property
    def jobs(self) -> list[Job]:
        with self._jobs_lock:
            return list(self._jobs)

    def compile_groups(self) -> None:
        """Compile every native kernel of the specializations made so far, now (what ``jit="eager"`` does)."""
        start = time.perf_counter()
        for job in self.jobs:
            job.run() if job.status == "pending" else job.wait()
        self.timings["jit_ms"] = (time.perf_counter() - start) * 1e3

    def wait_for_jit(self, timeout: float | None = None) -> bool:
        """Wait for the kernels being compiled (submitting lazy ones now); True when none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for job in self.jobs:
            if job.status == "pending":
                job.submit()
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not job.wait(left):
                return False
        return True

    def warn_once(self, key: str, message: str) -> None:
        with self._warn_lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(f"plan {self.name!r}: {message}", RuntimeWarning, stacklevel=3)

    def compile_report(self) -> dict[str, float]:
        """Compile time split into passes, lowering (with the first specialization) and JIT, in seconds."""
        return {f"{key[:-3]}_s": ms / 1e3 for key, ms in self.timings.items()}

    @property
    def runs(self) -> int:
        return self._runs.value

    def specializations(self) -> list[Specialization]:
        with self._specs_lock:
            return [s.spec for s in self._specs.values()]

    def runner_source(self, profile: bool = False) -> str:
        """The generated runner of the most recent specialization (for inspection)."""
        with self._specs_lock:
            state = next(reversed(self._specs.values()), None)
        return "" if state is None else state.runner(profile).source

    def stats(self) -> PlanStats:
        return build_stats(self, self.specializations())

    def profile(self, reset: bool = False) -> Profile:
        """Step timings of the runs made with ``profile=True`` (``reset`` starts a new record after this one)."""
        return self._profile.snapshot(reset=reset)

    def __repr__(self) -> str:
        return f"<Plan {self.name!r}: {len(self.program.steps)} steps, jit={self.options.jit}>"
