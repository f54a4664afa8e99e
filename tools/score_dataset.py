"""Score a data set of 10^6 rows with ``tlc.dask``, chunk by chunk, with a progress bar.

    python tools/score_dataset.py                          # tools/models.py's mlp, 10^6 rows, threaded scheduler
    python tools/score_dataset.py --cluster 2              # on a LocalCluster of 2 workers x 1 thread
    python tools/score_dataset.py --model m.onnx --data rows.npy --out scores/ --chunk 50000

Streaming: no process holds the data set or the scores. Each task reads (``--data``: a .npy file, memory-mapped)
or makes (no ``--data``: rows of a fixed random block, tiled) its chunk's rows, scores them, writes the model's
first output for those rows to ``OUT/part-NNNNN.npy`` (when ``--out`` is given) and returns only the chunk's count
of each class (the output's argmax); Dask fuses these steps into one task per chunk. The progress bar is Dask's
``ProgressBar`` on the local schedulers and ``distributed.progress`` on a cluster. The model must have one input
with a symbolic batch axis (axis 0) and scores [rows, classes] as its first output.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
sys.path[:0] = [str(ROOT), str(TOOLS)]
# NOTE: Dask's worker processes import this module (score_dataset) for its block functions: give them the path
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TOOLS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])

import tlc  # noqa: E402, F401  (before numpy: tlc/_platform.py picks the BLAS kernels)

# isort: split
import numpy as np  # noqa: E402


def read_block(path: str, block_info=None) -> np.ndarray:
    """This chunk's rows of a .npy file, read through a memory map (only these rows are read)."""
    start, stop = block_info[None]["array-location"][0]
    return np.ascontiguousarray(np.load(path, mmap_mode="r")[start:stop])


def write_block(scores: np.ndarray, out: str, block_info=None) -> np.ndarray:
    """Write this chunk's scores [rows, classes] to OUT/part-NNNNN.npy (when ``out``) and return its count of rows
    per class (argmax), [1, classes]."""
    if out:
        np.save(Path(out) / f"part-{block_info[0]['chunk-location'][0]:05d}.npy", scores)
    return np.bincount(scores.argmax(axis=-1), minlength=scores.shape[-1])[None, :]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="an ONNX/.tlc model with a symbolic batch (default: tools/models.py's mlp)")
    ap.add_argument("--data", help="a .npy file of rows (default: synthetic rows)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows to score without --data")
    ap.add_argument("--chunk", type=int, default=20_000)
    ap.add_argument("--out", help="a folder for the scores, one .npy file a chunk")
    ap.add_argument("--cluster", type=int, default=0, help="score on a LocalCluster of this many workers")
    args = ap.parse_args(argv)

    import bench_dask
    import dask
    import dask.array as da
    import score_dataset as me  # NOTE: by module name, so that Dask's processes import the block functions

    import tlc.dask

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            model = str(Path(tmp) / "mlp.onnx")
            bench_dask.symbolic_batch_mlp(Path(model))
        graph = tlc.load(model)
        (name, ttype), = [(n.name, n.output_types[0]) for n in graph.inputs]
        if args.data:
            mm = np.load(args.data, mmap_mode="r")
            rows, features, dtype = mm.shape[0], mm.shape[1:], mm.dtype
            x = da.map_blocks(me.read_block, args.data, dtype=dtype,
                              chunks=(_chunks(rows, args.chunk),) + tuple((d,) for d in features))
        else:
            rows, features = args.rows, tuple(ttype.shape[1:])
            x = da.map_blocks(bench_dask.rows_block, features=features[0], dtype=np.float32,
                              chunks=(_chunks(rows, args.chunk), features))
        outs = tlc.dask.run(graph, {name: x})
        first, scores = next(iter(outs.items()))
        if scores.ndim != 2:
            raise SystemExit(f"the model's first output {first!r} is {scores.shape}; expected [rows, classes]")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
        counts = scores.map_blocks(me.write_block, args.out or "", dtype=np.int64,
                                   chunks=((1,) * scores.numblocks[0], scores.chunks[1])).sum(axis=0)
        print(f"scoring {rows:,} rows of {name}{list(features)} with {graph.name!r} in {x.numblocks[0]} chunks of "
              f"{args.chunk:,}" + (f" on a LocalCluster of {args.cluster} workers" if args.cluster else
                                   " on Dask's threaded scheduler"), flush=True)
        start = time.perf_counter()
        if args.cluster:
            from distributed import Client, LocalCluster, progress

            with LocalCluster(n_workers=args.cluster, threads_per_worker=1, dashboard_address=None,
                              silence_logs=40) as cluster, Client(cluster) as client:
                future = client.compute(counts)
                progress(future)
                total = future.result()
        else:
            from dask.diagnostics import ProgressBar

            with ProgressBar():
                (total,) = dask.compute(counts, scheduler="threads")
        seconds = time.perf_counter() - start
    print(f"\n{rows:,} rows in {seconds:.1f} s: {rows / seconds:,.0f} rows/s"
          + (f"; {first!r} written to {args.out}/part-*.npy" if args.out else ""))
    print(f"argmax of {first!r} per class: {total.tolist()}")
    return 0


def _chunks(rows: int, chunk: int) -> tuple[int, ...]:
    return (chunk,) * (rows // chunk) + ((rows % chunk,) if rows % chunk else ())


if __name__ == "__main__":
    sys.exit(main())
