"""Streaming a data set larger than memory through ``plan.run_batches``: rows/s and the process's RSS over the run.

    python tools/stream_memory.py --gigabytes 32            # more input than this 24 GiB machine has
    python tools/stream_memory.py --gigabytes 2 --rows 512  # a quick look

The input is a generator of input dicts (``--rows`` rows of the MLP's 784 float32 features each, made as they are
asked for), so no one holds the data set; each output dict is reduced to a checksum and dropped. RSS is read from
/proc/self/statm every ``--every`` dicts; the figure to look at is its growth after the first tenth of the run
(the plan's arena, the kernels and the first chunks' buffers are in by then): flat means memory bounded by the
batch, whatever the input's size. Exits 1 when RSS grew by more than ``--limit-mb`` after that point.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (tools/ is not a package)

import tlc  # noqa: E402
from tlc.io.onnx import from_onnx  # noqa: E402

FEATURES = 784


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def dicts(count: int, rows: int):
    """``count`` input dicts of ``rows`` fresh rows each (a counter's value in every feature: cheap to make)."""
    for i in range(count):
        yield {"x": np.full((rows, FEATURES), (i % 97) / 97, np.float32)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=2.0, help="input to stream (float32 features)")
    parser.add_argument("--rows", type=int, default=1000, help="rows per input dict")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--every", type=int, default=200, help="dicts between RSS samples")
    parser.add_argument("--limit-mb", type=float, default=64.0)
    args = parser.parse_args()

    plan = tlc.compile(from_onnx(models.mlp(batch="N"))[0], opt_level=2, jit="eager")
    count = max(10, int(args.gigabytes * 2**30 / (args.rows * FEATURES * 4)))
    total_rows = count * args.rows
    print(f"streaming {count} dicts x {args.rows} rows = {total_rows} rows, "
          f"{total_rows * FEATURES * 4 / 2**30:.1f} GiB of input, batch {args.batch_size}")
    samples: list[tuple[int, float]] = [(0, rss_mb())]
    checksum = 0.0
    start = time.perf_counter()
    for i, out in enumerate(plan.run_batches(dicts(count, args.rows), batch_size=args.batch_size), 1):
        checksum += float(out["y"][0, 0])
        if i % args.every == 0 or i == count:
            samples.append((i, rss_mb()))
    seconds = time.perf_counter() - start
    settled = [mb for i, mb in samples if i >= count // 10]
    growth = max(settled) - min(settled)
    print(f"{total_rows / seconds:,.0f} rows/s ({seconds:.1f} s); RSS MB: start {samples[0][1]:.0f}, "
          f"after a tenth {settled[0]:.0f}, max {max(mb for _, mb in samples):.0f}, end {samples[-1][1]:.0f}; "
          f"growth after the first tenth {growth:.1f} MB (checksum {checksum:.3f})")
    return 0 if growth <= args.limit_mb else 1


if __name__ == "__main__":
    sys.exit(main())
