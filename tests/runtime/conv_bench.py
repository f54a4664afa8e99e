"""Measure the conv kernels on ResNet-50 (and one depthwise) shapes: the data behind ``choose_algorithm``.

Run: ``PYTHONPATH=. python tests/runtime/conv_bench.py [repeats]``. Prints, per shape, the median and best ms of
each algorithm that applies (interleaved rounds after a warm-up, a pause before each call) and marks the one
``choose_algorithm`` picks. Not a test: timings are never asserted.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from tlc.kernels import lib_conv

PAUSE_S = 0.15      # OpenBLAS threads spin ~0.13 s after a call and would slow the next contender (FACTS.md)

# name: (x shape, w shape, stride, pad, group)
SHAPES = {
    "conv1 7x7/2 3->64 @224": ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    "3x3 64->64 @56": ((1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
    "3x3 128->128 @28": ((1, 128, 28, 28), (128, 128, 3, 3), 1, 1, 1),
    "3x3 256->256 @14": ((1, 256, 14, 14), (256, 256, 3, 3), 1, 1, 1),
    "3x3 512->512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), 1, 1, 1),
    "1x1 64->256 @56": ((1, 64, 56, 56), (256, 64, 1, 1), 1, 0, 1),
    "1x1 1024->256 @14": ((1, 1024, 14, 14), (256, 1024, 1, 1), 1, 0, 1),
    "1x1/2 256->512 @56": ((1, 256, 56, 56), (512, 256, 1, 1), 2, 0, 1),
    "dw 3x3 256 @28": ((1, 256, 28, 28), (256, 1, 3, 3), 1, 1, 256),
}


def applicable(geo: lib_conv.ConvGeometry) -> list[str]:
    algos = ["im2col", "direct"]
    if geo.is_pointwise:
        algos.insert(0, "gemm1x1")
    if geo.is_depthwise:
        algos.append("depthwise_taps")
    return algos


def main(repeats: int = 20) -> None:
    rng = np.random.default_rng(0)
    lib_conv.direct_kernel()
    print(f"{'shape':<26} {'algorithm':<15} {'median ms':>10} {'min ms':>8}  chosen")
    for name, (xs, ws, s, p, group) in SHAPES.items():
        x = rng.standard_normal(xs, dtype=np.float32)
        w = rng.standard_normal(ws, dtype=np.float32)
        b = rng.standard_normal(ws[0], dtype=np.float32)
        ho = (xs[2] + 2 * p - ws[2]) // s + 1
        wo = (xs[3] + 2 * p - ws[3]) // s + 1
        geo = lib_conv.geometry(xs, ws, (1, ws[0], ho, wo), (s, s), (p, p), (1, 1), group)
        algos = applicable(geo)
        outs = {a: np.empty((1, ws[0], ho, wo), np.float32) for a in algos}
        works = {a: [np.empty(sh, np.float32) for sh in lib_conv.workspace(geo, a)] for a in algos}
        times: dict[str, list[float]] = {a: [] for a in algos}
        for a in algos:                                  # warm-up (and the Numba compile)
            lib_conv.run(a, x, w, b, outs[a], geo, works[a])
        for _ in range(repeats):
            for a in algos:
                time.sleep(PAUSE_S)                      # let OpenBLAS's spinning threads go idle first
                start = time.perf_counter()
                lib_conv.run(a, x, w, b, outs[a], geo, works[a])
                times[a].append((time.perf_counter() - start) * 1e3)
        for a in algos[1:]:
            np.testing.assert_allclose(outs[a], outs[algos[0]], rtol=2e-3, atol=2e-3)
        chosen = lib_conv.choose_algorithm(geo)
        for a in algos:
            print(f"{name:<26} {a:<15} {statistics.median(times[a]):>10.3f} {min(times[a]):>8.3f}  "
                  f"{'<-' if a == chosen else ''}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
