"""Per-shape timings of the convolution family (tlc.kernels.conv) against onnxruntime's Conv on the same shape.

    python tools/conv_shapes.py                      # MobileNetV2's depthwise and 1x1 shapes, 1 and 2 threads
    python tools/conv_shapes.py --shapes dw3:960@7/1 3x3:64-64@56/1 --threads 1

A shape is ``dwK:C@H/S`` (depthwise KxK over C channels of HxH, stride S) or ``KxK:C-M@H/S`` (C -> M channels).
tlc runs the algorithm its cost model picks (``conv_run``: the kernel alone, no plan around it) and onnxruntime a
one-node model (ORT_ENABLE_ALL, its NCHWc kernels), interleaved in rounds on the same input; the table gives
medians with [min-max] in microseconds and the ratio tlc / onnxruntime. The input stays in cache between calls,
so in a model, where it comes from the step before, both are slower; ``--cold`` reads 64 MB before each timed call
(outside the timing), so that input, output, scratch and weights all start out of the caches, as a model's first
steps find them.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MOBILENETV2 = ["dw3:32@112/1", "dw3:96@112/2", "dw3:144@56/1", "dw3:144@56/2", "dw3:192@28/1", "dw3:192@28/2",
               "dw3:384@14/1", "dw3:576@14/1", "dw3:576@14/2", "dw3:960@7/1",
               "1x1:16-96@112/1", "1x1:144-24@56/1", "1x1:192-64@14/1", "1x1:960-320@7/1", "1x1:320-1280@7/1",
               "3x3:3-32@224/2"]


def parse(shape: str) -> tuple[int, int, int, int, int, int]:
    """(C, M, H, K, stride, group) of a shape string."""
    dw = re.fullmatch(r"dw(\d+):(\d+)@(\d+)/(\d+)", shape)
    if dw:
        k, c, h, s = map(int, dw.groups())
        return c, c, h, k, s, c
    full = re.fullmatch(r"(\d+)x\1:(\d+)-(\d+)@(\d+)/(\d+)", shape)
    if not full:
        raise SystemExit(f"bad shape {shape!r}: expected dwK:C@H/S or KxK:C-M@H/S")
    k, c, m, h, s = map(int, full.groups())
    return c, m, h, k, s, 1


def ort_session(x, w, b, k, s, group, threads):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], pads=[k // 2] * 4,
                            strides=[s, s], group=group)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


#: ``--algo`` choices: tlc.kernels.conv's algorithms, PANEL in either orientation
K_ALGOS = ("gemm", "direct", "depthwise", "winograd", "panel", "panel-positions", "panel-channels", "panel-phases")

#: seconds between contenders' blocks: onnxruntime's and Numba's pools spin ~0.13 s after a call
PAUSE_S = 0.2


#: what ``--cold`` reads before each timed call: twice the L3 of the 2-core machine
FLUSH_BYTES = 64 << 20


def interleaved(contenders: dict, rounds: int, cold: bool = False) -> dict:
    """Microseconds per call of each contender, interleaved: ``rounds`` rounds of 10 calls each, a pause and two
    calls left out before each block; ``cold``: the caches flushed before each timed call."""
    junk = np.ones(FLUSH_BYTES // 4 if cold else 1, np.float32)   # (touched: not the zero page)
    for fn in contenders.values():
        fn()
    times: dict = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            time.sleep(PAUSE_S)   # the other contender's spinning threads go idle (shared/FACTS.md)
            fn()                  # the first two calls after the pause are left out: data untouched for
            fn()                  # ~0.1 s is slow for two passes on this VM (shared/FACTS.md)
            for _ in range(10):
                if cold:
                    junk.sum()   # read, not written: no dirty lines left to write back during the call
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e6)
    return {name: np.asarray(t) for name, t in times.items()}


def row(shape: str, threads: int, batch: int, rounds: int, algo: str | None = None,
        blas_products: bool = False, cold: bool = False) -> str:
    """One table row: the shape's conv in tlc's kernel (``algo``: the cost model's unless named) and in
    onnxruntime at ``threads`` threads."""
    import numba

    from tlc.kernels import conv as K
    c, m, h, k, s, group = parse(shape)
    ho = (h + 2 * (k // 2) - k) // s + 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((m, c // group, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    numba.set_num_threads(threads)
    geo = K.conv_geometry(x.shape, w.shape, (batch, m, ho, ho), (s, s), (k // 2, k // 2), (1, 1), group)
    lanes = None
    if algo and algo.startswith("panel-"):
        algo, lanes = "panel", {"panel-positions": K.LANES_POSITIONS, "panel-channels": K.LANES_CHANNELS,
                                "panel-phases": K.LANES_PHASES}[algo]
    if algo is None:   # the plan's choice (runtime/native.py): PANEL among the candidates on hosts that run it
        from tlc.kernels import panel
        pick = K.choose(geo, panels=panel.fast())
    else:
        pick = K.ALGO_NAMES.index(algo)
    col_size, nparts, nprep = K.plan_conv(geo, threads, algo=pick, lanes=lanes)
    vector = K.use_vector_depthwise(geo, np.float32)    # as the plan does (runtime/native.py)
    in_panels = K.use_panel_products(geo, np.float32)
    if in_panels and blas_products:   # Winograd's or the column tiles' products in BLAS after all, to compare
        geo[K.KIND], in_panels = K.PRODUCTS_BLAS, False
    packed = K.pack_weights(w, geo)
    out = np.empty((batch, m, ho, ho), np.float32)
    col = np.empty(max(1, col_size), np.float32)
    session = ort_session(x, w, b, k, s, group, threads)
    times = interleaved({"tlc": lambda: K.conv_run(x, packed, b, geo, out, col, nparts, nprep),
                         "ort": lambda: session.run(None, {"x": x})}, rounds, cold)
    err = float(np.abs(out - session.run(None, {"x": x})[0]).max())
    t, o = times["tlc"], times["ort"]
    algo = K.ALGO_NAMES[geo[K.ALGO]] + (" (vector)" if vector else "") + (" (panel products)" if in_panels else "") + \
        (f" ({('positions', 'channels', 'phases')[geo[K.KIND]]})" if geo[K.ALGO] == K.PANEL else "")
    return (f"| {shape} | {threads} | {algo}, {nparts} | {np.median(t):.0f} "
            f"[{t.min():.0f}-{t.max():.0f}] | {np.median(o):.0f} [{o.min():.0f}-{o.max():.0f}] | "
            f"x{np.median(t) / np.median(o):.2f} | {err:.1e} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=MOBILENETV2, help="shapes (default: MobileNetV2's)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of 10 calls each")
    parser.add_argument("--blas-products", action="store_true",
                        help="Winograd's and the column tiles' products in BLAS, not the panel kernel")
    parser.add_argument("--algo", nargs="+", default=["auto"], choices=["auto", *K_ALGOS],
                        help="algorithms to time (auto: the cost model's choice)")
    parser.add_argument("--cold", action="store_true", help="flush the caches before each timed call")
    args = parser.parse_args(argv)
    from tlc.kernels import blas
    blas.set_threads(1)
    print("| shape | threads | algorithm, parts | tlc us | onnxruntime us | tlc / ort | max err |")
    print("|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        parse(shape)
        for threads in args.threads:
            for algo in args.algo:
                print(row(shape, threads, args.batch, args.rounds, None if algo == "auto" else algo,
                          args.blas_products, args.cold), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
