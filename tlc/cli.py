"""``tlc-opt``: read a model (.onnx or .tlc), run a pass pipeline over it, write the result.

    tlc-opt model.onnx -O2 -o model.opt.onnx --stats
    tlc-opt case.tlc --passes=cse --emit=tlc          # text IR on stdout (how the golden tests run it)
    tlc-opt model.onnx -O3 --bisect [--feeds feeds.npz]   # name the first pass/rule that changes the outputs
    tlc-opt model.onnx -O2 --run-inputs in.npz --run-outputs out.npz --batch-size 64   # score a dataset

The output format follows the output file's extension unless ``--emit`` names one; without ``-o`` only
``--emit tlc`` writes (to stdout). User errors (a missing file, an unknown pass, a bad value) print one line with
a hint and exit 1; argparse usage errors exit 2; ``--bisect`` / ``--check-each`` exit 3 when a step changed the
outputs (``tlc.passes.bisect.EXIT_FOUND``); an internal error (a bug) prints one line and exits 70.
Debugging flags only install pass instruments.

To add options: write an ``_add_<group>_options(parser)`` function and call it from ``build_parser``, then read
the new ``args`` fields in the step of ``run`` they belong to (load, optimize, write, report).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from . import io as tlc_io
from . import targets
from .errors import InvalidModelError, PassError, TlcError, UnsupportedOperatorError, ValidationError
from .ir.graph import Graph
from .ir.text import print_graph
from .passes import (
    PassInstrument,
    PassManager,
    PassOptions,
    PrintIRInstrument,
    ProgressInstrument,
    TimingInstrument,
    all_passes,
    describe_levels,
)
from .passes.bisect import DEFAULT_RTOL, EXIT_FOUND, bisect, load_feeds, write_reproducers
from .passes.pipeline import MAX_OPT_LEVEL
from .runtime.batches import DEFAULT_BATCH_SIZE, PROGRESS_EXTRA

PROG = "tlc-opt"
#: the exit status of an internal error (a bug of tlc's; BSD sysexits EX_SOFTWARE)
EXIT_INTERNAL = 70
INPUT_FORMATS = ("onnx", "tlc", "graphml")
LARGE_MODEL_BYTES = 32 * 2**20   # models from this size on take a noticeable time to load


class UsageError(TlcError):
    """A flag value or combination tlc-opt cannot use; ``hint`` says what to do instead."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


# ---------------------------------------------------------------------------- the parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Optimize an ONNX or .tlc model with tlc's pass pipeline.",
        epilog="Opt levels: " + "; ".join(describe_levels()) + ". See --list-passes.")
    _add_io_options(parser)
    _add_pipeline_options(parser)
    _add_debug_options(parser)
    _add_bisect_options(parser)
    _add_run_options(parser)
    _add_scoring_options(parser)
    return parser


def _add_bisect_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        f"bisection (exit status 0: no step changed the outputs; {EXIT_FOUND}: a step did; 1: an error)",
        "A step is one pass run or one rule application inside a pass. After every step the reference executor "
        "runs the graph on the feeds and its outputs are compared with the input graph's: integers bit for bit, "
        "floats within --bisect-rtol of each output's largest magnitude. The graph before and after a bad step "
        "is written as .tlc files to --reproducer DIR (default: OUTPUT's or INPUT's name + '.bisect', beside it).")
    group.add_argument("--bisect", action="store_true",
                       help="stop at the first step that changes the outputs beyond tolerance and name its pass, "
                            "rule and node")
    group.add_argument("--check-each", action="store_true",
                       help="check after every step like --bisect, but run to the end and report every step that "
                            "changed the outputs")
    group.add_argument("--feeds", metavar="FILE.npz",
                       help="inputs for the checks, one array per input name (default: fixed-seed random inputs, "
                            "symbolic dims of size 2)")
    group.add_argument("--bisect-rtol", type=float, metavar="X", default=None,
                       help=f"float tolerance relative to each output's scale (default {DEFAULT_RTOL})")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("running (compiles the optimized graph with tlc.compile)")
    group.add_argument("--bench", action="store_true",
                       help="compile the optimized graph, run it on random inputs and compare its speed and "
                            "outputs with the unoptimized reference executor (and onnxruntime when installed)")
    group.add_argument("--rounds", type=int, default=10, metavar="N",
                       help="interleaved timing rounds for --bench (default 10)")
    group.add_argument("--threads", type=int, default=None, metavar="N",
                       help="threads for the compiled plan and onnxruntime (default: all cores)")


def _add_scoring_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "scoring a dataset (compiles the optimized graph and streams rows through it)",
        "Rows are read a block at a time, run in batches (plan.run_batches) and written as they come, so memory "
        "stays bounded by the batch. Files: .npz (one array per input or output name, the batch axis first) or "
        ".npy (a model with one input, or one output). The last batch of a model with a static batch dim is "
        "padded; the output file appears only once complete. --progress (or a terminal) draws a bar of rows/s.")
    group.add_argument("--run-inputs", metavar="IN.npz", help="the rows to run: .npz by input name, or .npy")
    group.add_argument("--run-outputs", metavar="OUT.npz", help="where to write the outputs: .npz by output name, "
                                                                 "or .npy for a model with one output")
    group.add_argument("--batch-size", type=int, metavar="N", default=None,
                       help=f"rows per run (default {DEFAULT_BATCH_SIZE}, or the model's static batch dim)")


def _add_io_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("input and output")
    group.add_argument("input", nargs="?", metavar="INPUT", help="model to read: .onnx or .tlc")
    group.add_argument("-o", "--output", metavar="OUTPUT",
                       help="where to write the result; the format follows the extension unless --emit says")
    group.add_argument("--emit", metavar="FORMAT",
                       help=f"output format: {', '.join(tlc_io.FORMATS)} (without -o, only tlc: to stdout)")
    group.add_argument("--dump-dot", metavar="FILE", help="also write the optimized graph as Graphviz DOT")
    group.add_argument("--dump-graphml", metavar="FILE", help="also write the optimized graph as GraphML")


def _add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("pipeline")
    group.add_argument("--target", default="cpu", metavar="NAME",
                       help=f"the target the passes optimize for and --bench / --run-inputs compile for: "
                            f"{', '.join(targets.names())} (default cpu; tlc.targets)")
    which = group.add_mutually_exclusive_group()
    which.add_argument("-O", dest="opt_level", type=int, metavar="LEVEL",
                       help="optimization level 0-3 (-O0 nothing ... -O3 everything; default -O2)")
    which.add_argument("--passes", metavar="LIST",
                       help="named pipeline, e.g. fold,dce,cse; '(a,b)' iterates a group to a fixed point")
    group.add_argument("--skip", metavar="LIST", default="", help="comma-separated passes to leave out")
    group.add_argument("--max-iterations", type=int, metavar="N", default=None,
                       help="bound on fixed-point iteration of the cleanup passes")
    group.add_argument("--fold-size-limit", type=int, metavar="N", default=None,
                       help=f"elements above which a folded result must be a parameter (a weight read whole), "
                            f"not an input of elementwise ops (default {PassOptions.fold_size_limit})")
    group.add_argument("--fast-math", action="store_true",
                       help="allow rewrites that change floating-point rounding")
    group.add_argument("--list-passes", action="store_true", help="list the registered passes and exit")


def _add_debug_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("debugging and reports (on stderr)")
    printing = group.add_mutually_exclusive_group()
    printing.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass")
    printing.add_argument("--print-ir-after-change", action="store_true",
                          help="print the IR after every pass that changed it")
    group.add_argument("--time-passes", action="store_true", help="print a table of time per pass")
    group.add_argument("--stats", action="store_true",
                       help="print nodes per op type and parameters before/after, and pass counters")
    group.add_argument("--verify-each", action="store_true", help="verify the graph after every pass")
    group.add_argument("--reproducer", metavar="DIR",
                       help="when a pass fails, write the graph as it was before that pass into DIR")
    group.add_argument("--progress", action="store_true",
                       help="show progress even when stderr is not a terminal")


# ---------------------------------------------------------------------------- entry point
def main(argv: Sequence[str] | None = None) -> int:
    """Run tlc-opt with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        return int(exc.code or 0)
    try:
        return run(args, parser)
    except TlcError as exc:
        return _fail(exc, hint_for(exc, args))
    except OSError as exc:
        where = f" {exc.filename!r}" if exc.filename else ""
        return _fail(exc, "check the path and its permissions", f"cannot access{where}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of tlc's, not of the input: one line, no half-written output, exit 70
        if os.environ.get("TLC_TRACEBACK"):
            raise
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc} (a bug in tlc: please report it with the "
              f"model; TLC_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The steps of one invocation: check flags, load, optimize, write, report."""
    if args.list_passes:
        sys.stdout.write(list_passes())
        return 0
    if args.input is None:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: the following arguments are required: INPUT", file=sys.stderr)
        return 2
    check_target(args)
    out_format = check_outputs(args)
    check_bisect_flags(args)
    check_scoring_flags(args)
    scoring_bar = _scoring_progress(args, sys.stderr) if args.run_inputs else False
    manager = make_manager(args, sys.stderr)
    graph = load_input(args.input, progress=args.progress or _is_tty(sys.stderr))
    if args.bisect or args.check_each:
        return run_bisect(args, manager, graph, out_format, sys.stderr)
    optimized, report = manager.run(graph)
    write_outputs(args, optimized, out_format)
    if args.stats:
        sys.stderr.write(report.stats_table() + "\n")
    if args.run_inputs:
        score(args, optimized, scoring_bar, sys.stderr)
    if args.bench:
        bench(args, graph, optimized, sys.stderr)
    elif args.stats or args.run_inputs:
        pass
    elif out_format is None and not (args.time_passes or args.print_ir_after_all or args.print_ir_after_change):
        print(f"{PROG}: {report.nodes_before} -> {report.nodes_after} nodes ({manager}); nothing written "
              f"(use -o FILE or --emit tlc)", file=sys.stderr)
    return 0


def check_target(args: argparse.Namespace) -> None:
    """``--target`` names a registered target, one the runtime runs when the flags run the graph."""
    if args.target not in targets.names():
        raise UsageError(f"unknown target {args.target!r}", f"use one of {', '.join(targets.names())}")
    target = targets.get(args.target)
    running = [flag for flag, on in (("--bench", args.bench), ("--run-inputs", args.run_inputs)) if on]
    if running and not target.runs_plans:
        raise UsageError(f"{' and '.join(running)} cannot run on target {target.name!r}: the runtime does not run "
                         f"plans for it yet", f"drop {' and '.join(running)} to optimize for {target.name}, or "
                         f"use --target cpu")
    if running:
        try:
            target.require()
        except TlcError as exc:
            raise UsageError(f"{' and '.join(running)} cannot run on target {target.name!r} here: {exc}",
                             f"drop {' and '.join(running)} to optimize for {target.name}, or use --target cpu"
                             ) from None


def check_bisect_flags(args: argparse.Namespace) -> None:
    """The bisection flags go together and with nothing that times or compiles."""
    checking = args.bisect or args.check_each
    for flag, value in (("--feeds", args.feeds), ("--bisect-rtol", args.bisect_rtol)):
        if value is not None and not checking:
            raise UsageError(f"{flag} is used only with --bisect or --check-each", "add --bisect")
    if checking and args.bench:
        raise UsageError("--bench cannot be combined with --bisect or --check-each", "run them separately")
    if args.bisect_rtol is not None and not 0 <= args.bisect_rtol < 1:
        raise UsageError(f"--bisect-rtol {args.bisect_rtol} is out of range: expected a number in [0, 1)")


def check_scoring_flags(args: argparse.Namespace) -> None:
    """--run-inputs and --run-outputs go together, name .npz/.npy files, and never overwrite a file tlc-opt reads
    or writes otherwise; the outputs' folder and the inputs are checked before any work."""
    if args.run_inputs is None:
        for flag, value in (("--run-outputs", args.run_outputs), ("--batch-size", args.batch_size)):
            if value is not None:
                raise UsageError(f"{flag} is used only with --run-inputs", "add --run-inputs IN.npz")
        return
    if args.run_outputs is None:
        raise UsageError("--run-inputs needs --run-outputs: where to write the outputs", "add --run-outputs OUT.npz")
    if args.bisect or args.check_each:
        raise UsageError("--run-inputs cannot be combined with --bisect or --check-each", "run them separately")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size} is out of range: expected an integer >= 1")
    others = [("the input file", args.input), ("the --run-inputs file", args.run_inputs), ("-o", args.output),
              ("--dump-dot", args.dump_dot), ("--dump-graphml", args.dump_graphml)]
    for what, path in others:
        if path is not None and same_file(args.run_outputs, path):
            raise UsageError(f"--run-outputs {args.run_outputs!r} is {what}; tlc-opt does not overwrite it",
                             "write the outputs to another file")
    for flag, path in (("--run-inputs", args.run_inputs), ("--run-outputs", args.run_outputs)):
        if Path(path).suffix.lower() not in (".npz", ".npy"):
            raise UsageError(f"{flag} {path!r}: expected a .npz or .npy file",
                             "name an .npz file (arrays by name), or an .npy file for one array")
    if not Path(args.run_inputs).is_file():
        raise OSError(errno.ENOENT, "no such file", args.run_inputs)
    if not Path(args.run_outputs).parent.is_dir():
        raise OSError(errno.ENOENT, "no such folder", str(Path(args.run_outputs).parent))


def score(args: argparse.Namespace, optimized: Graph, progress: TextIO | bool, err: TextIO) -> None:
    """``--run-inputs``: compile the optimized graph and stream the file's rows through it
    (``tlc.runtime.batches.run_file``: ``plan.run_batches`` between a reader and a writer of row blocks), with a
    progress bar drawn on ``progress`` (False: none)."""
    import time

    from .runtime import compile as compile_plan
    from .runtime.batches import run_file

    plan = compile_plan(optimized, target=args.target, opt_level=0, jit="auto", num_threads=args.threads)
    start, runs = time.perf_counter(), plan.runs
    rows = run_file(plan, args.run_inputs, args.run_outputs, batch_size=args.batch_size, progress=progress)
    seconds = time.perf_counter() - start
    print(f"{PROG}: ran {rows} rows in {plan.runs - runs} run(s) ({seconds:.2f} s, {rows / max(seconds, 1e-9):,.0f} "
          f"rows/s); wrote {args.run_outputs}", file=err)


def _scoring_progress(args: argparse.Namespace, err: TextIO) -> TextIO | bool:
    """Where --run-inputs draws its bar: stderr with --progress or on a terminal, else nowhere (False);
    --progress without tqdm is an error, found before any work."""
    if not (args.progress or _is_tty(err)):
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:
        if args.progress:
            raise UsageError("--progress needs tqdm to draw the bar of --run-inputs, and it is not installed",
                             PROGRESS_EXTRA) from None
        return False
    return err


def run_bisect(args: argparse.Namespace, manager: PassManager, graph: Graph, out_format: str | None,
               err: TextIO) -> int:
    """``--bisect`` / ``--check-each``: the pipeline step by step against the reference; reproducers for bad steps.
    The optimized graph is written (as without the flags) when the pipeline ran to its end."""
    feeds = load_feeds(args.feeds) if args.feeds else None
    rtol = DEFAULT_RTOL if args.bisect_rtol is None else args.bisect_rtol
    result = bisect(graph, feeds, manager=manager, rtol=rtol, check_each=args.check_each)
    where = "the feeds of " + args.feeds if args.feeds else "fixed-seed random inputs"
    shapes = ", ".join(f"{k}{list(getattr(v, 'shape', []))}" for k, v in result.feeds.items())
    print(f"{PROG}: checked {result.steps} steps ({manager}) against the reference executor on {where} ({shapes})",
          file=err)
    if result.findings:
        write_reproducers(result, args.reproducer or default_reproducer_dir(args), keep=args.input)
    for line in result.summary().splitlines():
        print(f"{PROG}: {line.strip()}" if not line.startswith("  ") else f"{PROG}:   reproducer {line.strip()}",
              file=err)
    if result.graph is not None:
        write_outputs(args, result.graph, out_format)
    return EXIT_FOUND if result.findings else 0


def default_reproducer_dir(args: argparse.Namespace) -> Path:
    """``<output or input without its extension>.bisect``, beside that file."""
    base = Path(args.output if args.output is not None else args.input)
    return base.with_name(base.stem + ".bisect")


def bench(args: argparse.Namespace, original: Graph, optimized: Graph, err: TextIO) -> None:
    """``--bench``: the optimized graph compiled and timed against the reference executor and onnxruntime."""
    import time

    from .runtime import compile as compile_plan
    from .runtime.benchmark import (
        compare,
        format_table,
        onnxruntime_runner,
        plan_runner,
        random_feeds,
        reference_runner,
    )

    if args.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {args.rounds}")
    print(f"\n{PROG}: compiling the optimized graph ({len(optimized.ops())} ops) ...", file=err, flush=True)
    feeds = random_feeds(original)
    start = time.perf_counter()
    plan = compile_plan(optimized, target=args.target, opt_level=0, jit="auto", num_threads=args.threads)
    compiled = time.perf_counter()
    plan.run(feeds)
    first = time.perf_counter()
    plan.wait_for_jit()
    ready = time.perf_counter()
    totals = plan.stats().totals
    print(f"{PROG}: first call {(first - start) * 1e3:.1f} ms (compile {(compiled - start) * 1e3:.1f} ms + first run "
          f"{(first - compiled) * 1e3:.1f} ms, on fallbacks while kernels compile in the background); "
          f"{totals['kernels_ready']} of {totals['kernels']} native kernels ready after {ready - start:.2f} s "
          f"({totals['cache_hits']} from the kernel cache, {totals['kernels_failed']} failed to compile); "
          f"{totals['reference_steps']} reference step(s)", file=err)
    feeds = random_feeds(original)
    level = args.opt_level if args.opt_level is not None else "(pipeline)"
    contenders = {"tlc -O0 (reference)": reference_runner(original),
                  f"tlc -O{level} (compiled)": plan_runner(plan, optimized)}
    if Path(args.input).suffix.lower() == ".onnx":
        wanted = targets.get(args.target).provider
        found = onnxruntime_runner(Path(args.input).read_bytes(), args.threads, wanted)
        if found is not None:   # the target's provider where onnxruntime has it, and the table says which ran
            ort_run, provider = found
            name = "ORT_ENABLE_ALL" if provider == wanted == "CPUExecutionProvider" else provider
            contenders[f"onnxruntime ({name.removesuffix('ExecutionProvider')})"] = ort_run
    print(f"{PROG}: timing {', '.join(contenders)} on random inputs "
          f"({', '.join(f'{k}{list(v.shape)}' for k, v in feeds.items())}), {args.rounds} interleaved rounds",
          file=err, flush=True)
    err.write(format_table(compare(contenders, feeds, rounds=args.rounds)) + "\n")


def list_passes() -> str:
    """The ``--list-passes`` text, generated from the pass registry."""
    rows = [("pass", "level", "description")] + [
        (cls.name, f"-O{cls.min_level}", cls.description or "-") for cls in all_passes()]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2]}" for r in rows]
    return "\n".join(lines + ["", "pipelines (a parenthesised group iterates to a fixed point):"]
                     + [f"  {line}" for line in describe_levels()]) + "\n"


# ---------------------------------------------------------------------------- steps
def check_outputs(args: argparse.Namespace) -> str | None:
    """Validate output flags before any work; returns the output format (None: nothing to write)."""
    if args.output is not None:
        out_format = tlc_io.format_of(args.output, args.emit)
    elif args.emit is not None:
        out_format = tlc_io.format_of("-", args.emit)
        if out_format != "tlc":
            raise UsageError(f"--emit {out_format} needs an output file", f"add -o FILE.{out_format}")
    else:
        out_format = None
    suffix = Path(args.input).suffix.lstrip(".").lower()
    if suffix not in INPUT_FORMATS:
        raise UsageError(f"cannot read {args.input!r}: expected a .onnx or .tlc file, got "
                         f"{'.' + suffix if suffix else 'no extension'}", "convert the model to ONNX first")
    for flag, path in (("-o", args.output), ("--dump-dot", args.dump_dot), ("--dump-graphml", args.dump_graphml)):
        if path is not None and same_file(path, args.input):
            raise UsageError(f"{flag} {path!r} is the input file; tlc-opt does not overwrite its input",
                             "write to another file")
    return out_format


def make_manager(args: argparse.Namespace, err: TextIO) -> PassManager:
    """The PassManager the flags ask for, with their instruments installed."""
    for flag, value, low in (("-O", args.opt_level, 0), ("--max-iterations", args.max_iterations, 1),
                             ("--fold-size-limit", args.fold_size_limit, 0)):
        if value is not None and (value < low or (flag == "-O" and value > MAX_OPT_LEVEL)):
            allowed = f"0 to {MAX_OPT_LEVEL}" if flag == "-O" else f"an integer >= {low}"
            raise UsageError(f"{flag} {value} is out of range: expected {allowed}")
    options = PassOptions(fast_math=args.fast_math, target=args.target)
    if args.fold_size_limit is not None:
        options.fold_size_limit = args.fold_size_limit
    instruments: list[PassInstrument] = []
    if args.print_ir_after_all or args.print_ir_after_change:
        instruments.append(PrintIRInstrument(err, only_changed=args.print_ir_after_change))
    if args.time_passes:
        instruments.append(TimingInstrument(err))
    if args.progress or _is_tty(err):
        instruments.append(ProgressInstrument(err, delay=0.0 if args.progress else 0.5))
    kwargs = {} if args.max_iterations is None else {"max_iterations": args.max_iterations}
    return PassManager(args.passes, 2 if args.opt_level is None else args.opt_level, options, skip=args.skip,
                       verify_each=args.verify_each, instruments=instruments, reproducer_dir=args.reproducer,
                       **kwargs)


def load_input(path: str, *, progress: bool = False) -> Graph:
    """Read the model; with ``progress``, say so on stderr when the file is big enough to take a moment."""
    file = Path(path)
    if not file.exists():
        raise InvalidModelError(f"no such model file: {path!r}")
    if file.is_dir():
        raise InvalidModelError(f"{path!r} is a directory, not a model file")
    size = file.stat().st_size
    if progress and size >= LARGE_MODEL_BYTES:
        print(f"{PROG}: loading {path} ({size / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
    return tlc_io.load(path)


def write_outputs(args: argparse.Namespace, graph: Graph, out_format: str | None) -> None:
    """Write ``-o``, ``--dump-dot`` and ``--dump-graphml``, each atomically; every target's folder is checked first,
    so a dump whose folder is missing fails before anything is written. NOTE: not staged and moved together: a
    .tlc output writes its tensors to an .npz named after the file, which a staging name would orphan."""
    targets = [(path, fmt) for path, fmt in ((args.output, out_format), (args.dump_dot, "dot"),
                                              (args.dump_graphml, "graphml")) if path is not None]
    for path, _ in targets:
        folder = Path(path).parent
        if not folder.is_dir():
            raise OSError(errno.ENOENT, "no such folder", str(folder))
    if args.output is None and out_format == "tlc":
        text = print_graph(graph)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    for path, fmt in targets:
        _save(graph, path, fmt)


def _save(graph: Graph, path: str, fmt: str | None) -> None:
    try:
        tlc_io.save(graph, path, format=fmt)
    except ImportError as exc:
        raise UsageError(f"writing {fmt} files is not available in this build ({exc})",
                         "choose another output format") from exc


# ---------------------------------------------------------------------------- errors
def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` name the same file (after resolving links; hard links too, when both exist)."""
    pa, pb = Path(a), Path(b)
    if pa.resolve() == pb.resolve():
        return True
    try:
        return pa.exists() and pb.exists() and os.path.samefile(pa, pb)
    except OSError:
        return False


def hint_for(exc: TlcError, args: argparse.Namespace | None = None) -> str:
    """What the user can do about ``exc``."""
    text = str(exc)
    if isinstance(exc, UsageError):
        return exc.hint
    if isinstance(exc, PassError):
        if text.startswith("unknown pass") or text.startswith("bad pass pipeline"):
            return f"run {PROG} --list-passes"
        if exc.reproducer:
            return f"reproduce with: {PROG} {exc.reproducer} --passes={exc.pass_name}"
        if args is not None and not args.reproducer:
            return "rerun with --reproducer DIR to save the graph as it was before the failing pass"
        return "please report this with the model"
    if isinstance(exc, UnsupportedOperatorError):
        return "tlc does not implement these operators yet (tlc.ops.all_ops() lists those it does)"
    if isinstance(exc, InvalidModelError) and text.startswith("no such model file"):
        return "check the path"
    if isinstance(exc, ValidationError):
        return "the model is malformed; check it with onnx.checker or --verify-each"
    if text.startswith("cannot tell the format"):
        return f"use an extension or --emit with one of {', '.join(tlc_io.FORMATS)}"
    return ""


def _fail(exc: BaseException, hint: str, message: str | None = None) -> int:
    message = " ".join((message or str(exc)).split())
    print(f"{PROG}: error: {message}" + (f" (hint: {hint})" if hint else ""), file=sys.stderr)
    return 1


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
