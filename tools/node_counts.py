"""Node counts of the light and benchmark models: original, tlc -O1/-O2/-O3, onnxruntime's optimized graph.

    python tools/node_counts.py                      # all models, markdown table on stdout
    python tools/node_counts.py --models vgg19 mlp --repeat 5 -o counts.md

A count is of operations: graph inputs, initializers and Constant nodes are not counted; a ``tlc.Fused`` group
counts as one node, as onnxruntime's fused nodes (FusedConv, Gelu, SkipLayerNormalization...) do. The
onnxruntime column is the graph it saves with ORT_ENABLE_ALL (``optimized_model_filepath``), on the CPU provider.
The last column is the time ``tlc.optimize`` takes at -O2 (median of ``--repeat`` runs, ms): noisy on a shared
machine, compare figures taken in one run only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402  (tools/ is not a package)

LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512")
#: resnet50_light of the benchmark suite is the light resnet50 above: counted once.
BENCH_MODELS = tuple(models.BUILDERS)
COLUMNS = ("original", "tlc -O1", "tlc -O2", "tlc -O3", "ORT all", "-O2 passes ms")


def load_model(name: str) -> onnx.ModelProto:
    return onnx.load(str(models.light_model_path(name))) if name in LIGHT_MODELS else models.bench_model(name)


def onnx_ops(graph: onnx.GraphProto) -> int:
    return sum(1 for node in graph.node if node.op_type != "Constant")


def ort_optimized_ops(model: onnx.ModelProto) -> int:
    """Operations in the graph onnxruntime saves after ORT_ENABLE_ALL optimization."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        so.intra_op_num_threads = 1
        so.log_severity_level = 3  # its warning that NCHWc graphs are machine-specific: known, and not our output
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        optimized = onnx.load(so.optimized_model_filepath, load_external_data=False)
    return onnx_ops(optimized.graph)


def count_model(name: str, repeat: int) -> dict[str, float]:
    """One table row: op counts per column and the -O2 pass time."""
    import tlc
    from tlc.io.onnx import from_onnx

    model = load_model(name)
    graph, _ = from_onnx(model)
    row: dict[str, float] = {"original": onnx_ops(model.graph)}
    for level in (1, 2, 3):
        optimized, _ = tlc.optimize(graph, opt_level=level)
        row[f"tlc -O{level}"] = len(optimized.ops())   # NOTE: ops() excludes Input/Constant; a group is one op
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        tlc.optimize(graph, opt_level=2)
        times.append(time.perf_counter() - start)
    row["-O2 passes ms"] = statistics.median(times) * 1000
    row["ORT all"] = ort_optimized_ops(model)
    return row


def markdown(rows: dict[str, dict[str, float]]) -> str:
    lines = ["| model | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for name, row in rows.items():
        cells = [f"{row[c]:.0f}" for c in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(LIGHT_MODELS + BENCH_MODELS),
                        choices=LIGHT_MODELS + BENCH_MODELS, metavar="MODEL",
                        help=f"models to count (default: all of {', '.join(LIGHT_MODELS + BENCH_MODELS)})")
    parser.add_argument("--repeat", type=int, default=3, help="runs of -O2 to time (median; default 3)")
    parser.add_argument("-o", "--output", help="also write the markdown table to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    rows = {}
    for name in args.models:
        print(f"counting {name}...", file=sys.stderr, flush=True)
        rows[name] = count_model(name, args.repeat)
    table = markdown(rows)
    sys.stdout.write(table)
    if args.output:
        Path(args.output).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
