"""``tlc.compile``: optimize a graph with the pass pipeline and lower it to a ``Plan`` (which compiles its kernels)."""

from __future__ import annotations

import os
import time

from ..errors import BackendError
from ..ir.graph import Graph
from ..passes.manager import optimize as run_pipeline
from ..passes.report import PassReport
from ..targets import Target
from .options import CompileOptions
from .plan import Plan


def compile(graph: Graph | str | os.PathLike, target: str | Target = "cpu", opt_level: int = 2, jit: str = "auto",
            num_threads: int | None = None, passes: str | list[str] | None = None, fast_math: bool = False,
            hot_threshold: int = 5, cache_dir: str | None = None, **options: object) -> Plan:
    """Compile ``graph`` (or a model file) for ``target`` (a name, "cpu", or a ``tlc.targets.Target`` whose runtime
    op table exists); the caller's graph is never changed.

    ``jit``: "auto" compiles native kernels on a background thread while the plan runs their fallbacks, "eager"
    compiles every kernel now, "lazy" once the plan has run ``hot_threshold`` times, "off" never (numpy and
    reference steps only). ``num_threads`` (None: every core) is the size of the pool that runs parallel steps.
    ``cache_dir`` (default: $TLC_CACHE_DIR or the kernel cache's own) is where compiled kernels are kept.
    Further keywords are ``CompileOptions`` fields.
    """
    opts = CompileOptions.from_env(target=target, opt_level=opt_level, jit=jit, num_threads=num_threads,
                                   passes=passes, fast_math=fast_math, hot_threshold=hot_threshold,
                                   cache_dir=cache_dir, **options)
    if not isinstance(graph, Graph):
        from ..io import load

        graph = load(graph)
    return compile_with_options(graph, opts)


def compile_with_options(graph: Graph, options: CompileOptions) -> Plan:
    """``compile`` with the options already gathered in one object."""
    if not options.target.runs_plans:
        raise BackendError(f"target {options.target.name!r} is not supported by the runtime yet; use target='cpu'")
    options.target.require()   # its named error (what is missing: a package, a device) before any work
    start = time.perf_counter()
    optimized, report = optimize(graph, options)
    passes_ms = (time.perf_counter() - start) * 1e3
    plan = Plan(optimized, options, {"passes_ms": passes_ms})
    plan.pass_report = report
    return plan


def optimize(graph: Graph, options: CompileOptions) -> tuple[Graph, PassReport]:
    """The pass pipeline (``tlc.passes.optimize``) on a copy, and its report; the caller's graph is kept."""
    return run_pipeline(graph, opt_level=options.opt_level, passes=options.passes, fast_math=options.fast_math,
                        target=options.target)
