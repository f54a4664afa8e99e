"""Quantized products, tlc against onnxruntime: one QLinearConv or QLinearMatMul node per shape (uint8
activations with a zero point, int8 weights with per-channel scales, a uint8 output), 1 thread each.

    python tools/bench_quantized.py [--repeats 9] [--calls 20] [--only conv64]

Per shape both contenders run interleaved: ``repeats`` rounds, each a pause, then ``calls`` runs of one
contender, a pause, ``calls`` runs of the other (the first two calls of each round discarded: data untouched
for ~0.1 s is slow on this VM); a round's time is the median call, the figure the median of the rounds. The
outputs are compared first (tlc must equal the numpy reference bit for bit; onnxruntime may differ by one step).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: name -> (op, input shape, weight shape, attributes); a MatMul's input is A [M, K], its weight B [K, N]
SHAPES = {
    "conv64": ("QLinearConv", (1, 64, 56, 56), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv128": ("QLinearConv", (1, 128, 28, 28), (128, 128, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv1x1": ("QLinearConv", (1, 256, 56, 56), (64, 256, 1, 1), {}),
    "mm128": ("QLinearMatMul", (128, 768), (768, 768), {}),
    "mm1": ("QLinearMatMul", (1, 768), (768, 3072), {}),
    "mm512": ("QLinearMatMul", (512, 1024), (1024, 1024), {}),
    "dw144": ("QLinearConv", (1, 144, 56, 56), (144, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=144)),
    "dw144_s2": ("QLinearConv", (1, 144, 56, 56), (144, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=144, strides=[2, 2])),
    # the layers of tools/models.py's qdq_convnet (small planes: per-call costs and narrow outputs)
    "q_stem": ("QLinearConv", (1, 3, 32, 32), (16, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    "q_s2": ("QLinearConv", (1, 16, 32, 32), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "q_dw": ("QLinearConv", (1, 32, 16, 16), (32, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=32)),
    "q_pw": ("QLinearConv", (1, 32, 16, 16), (64, 32, 1, 1), {}),
}


def model(op: str, x_shape: tuple, w_shape: tuple, attrs: dict, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, x_shape, dtype=np.uint8)
    w = rng.integers(-127, 128, w_shape, dtype=np.int8)
    channels = w_shape[0] if op == "QLinearConv" else w_shape[1]
    w_scale = (rng.random(channels) * 2e-3 + 1e-3).astype(np.float32)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": w, "ws": w_scale, "wz": np.zeros(channels, np.int8),
             "ys": np.float32(0.05 * np.sqrt(np.prod(w_shape[1:]) if op == "QLinearConv" else w_shape[0])),
             "yz": np.uint8(120)}
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if op == "QLinearConv":
        inits["b"] = rng.integers(-5000, 5000, channels).astype(np.int32)
        inputs.append("b")
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), {"x": x}


def timed(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.2)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    import onnxruntime as ort

    import tlc
    from tlc.io.onnx import from_onnx

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    print(f"load {os.getloadavg()[0]:.2f}; ms, medians of {args.repeats} interleaved rounds of {args.calls} calls")
    print(f"{'shape':<9} {'tlc':>8} {'ort':>8} {'tlc/ort':>8}  note")
    for name, (op, x_shape, w_shape, attrs) in SHAPES.items():
        if args.only and name not in args.only:
            continue
        onnx_model, feeds = model(op, x_shape, w_shape, attrs)
        graph = from_onnx(onnx_model)[0]
        plan = tlc.compile(graph, opt_level=0, jit="eager", num_threads=1)
        session = ort.InferenceSession(onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        ours, theirs = plan.run(feeds)["y"], session.run(None, feeds)[0]
        np.testing.assert_array_equal(ours, tlc.reference.run(graph, feeds)["y"])
        off = int(np.abs(ours.astype(np.int32) - theirs.astype(np.int32)).max())
        note = next((line.strip() for line in str(plan.stats()).splitlines() if "integer product" in line), "")
        rounds = {"tlc": [], "ort": []}
        contenders = (("tlc", functools.partial(plan.run, feeds)), ("ort", functools.partial(session.run, None, feeds)))
        for _ in range(args.repeats):
            for who, fn in contenders:
                time.sleep(args.pause)
                rounds[who].append(timed(fn, args.calls))
        t, o = statistics.median(rounds["tlc"]), statistics.median(rounds["ort"])
        how = note.split("integer product, ")[-1][:90]
        print(f"{name:<9} {t:8.3f} {o:8.3f} {t / o:8.2f}  (max |tlc - ort| {off}) {how}", flush=True)


if __name__ == "__main__":
    main()
