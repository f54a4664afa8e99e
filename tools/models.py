"""Builders for the benchmark-suite models (see shared/bench/README.md), written with ``onnx.helper``.

Every model is float32 with fixed-seed weights and is emitted the way exporters emit it (opset 17, LayerNorm
decomposed, GELU written out), so the passes have real patterns to find. ``python tools/models.py OUT_DIR``
writes them all; ``tlc/examples/`` holds a small transformer block made by ``transformer_block(small=True)``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # what exporters commonly emit; tlc converts on import
IR_VERSION = 8


class _Builder:
    """A tiny helper to write ONNX graphs readably: ``b.op("Add", x, y)`` returns the output name."""

    def __init__(self, seed: int = 0):
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, array: np.ndarray, base: str = "c") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape: tuple[int, ...], base: str = "w", scale: float | None = None) -> str:
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), base)

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs) -> str | list[str]:
        name = self.name(op_type)
        outs = [f"{name}_out{i}" if outputs > 1 else name for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs if outputs > 1 else outs[0]

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tlc-tools")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def _f32(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)


def layer_norm(b: _Builder, x: str, width: int, eps: float = 1e-5) -> str:
    """LayerNorm over the last axis, decomposed as PyTorch's exporter writes it."""
    mean = b.op("ReduceMean", x, axes=[-1], keepdims=1)
    centered = b.op("Sub", x, mean)
    var = b.op("ReduceMean", b.op("Pow", centered, b.const(_f32(2.0))), axes=[-1], keepdims=1)
    std = b.op("Sqrt", b.op("Add", var, b.const(_f32(eps))))
    normed = b.op("Div", centered, std)
    gamma = b.const((1 + 0.1 * b.rng.standard_normal(width)).astype(np.float32), "gamma")
    beta = b.const((0.1 * b.rng.standard_normal(width)).astype(np.float32), "beta")
    return b.op("Add", b.op("Mul", normed, gamma), beta)


def gelu_erf(b: _Builder, x: str) -> str:
    erf = b.op("Erf", b.op("Div", x, b.const(_f32(math.sqrt(2.0)))))
    return b.op("Mul", b.op("Mul", x, b.op("Add", erf, b.const(_f32(1.0)))), b.const(_f32(0.5)))


def gelu_tanh(b: _Builder, x: str) -> str:
    cube = b.op("Pow", x, b.const(_f32(3.0)))
    inner = b.op("Mul", b.op("Add", x, b.op("Mul", cube, b.const(_f32(0.044715)))),
                 b.const(_f32(math.sqrt(2 / math.pi))))
    return b.op("Mul", b.op("Mul", x, b.const(_f32(0.5))), b.op("Add", b.op("Tanh", inner), b.const(_f32(1.0))))


def linear(b: _Builder, x: str, fan_in: int, fan_out: int) -> str:
    return b.op("Add", b.op("MatMul", x, b.weight((fan_in, fan_out))),
                b.const((0.02 * b.rng.standard_normal(fan_out)).astype(np.float32), "bias"))


def mlp(batch: int = 64) -> onnx.ModelProto:
    """784 -> 1024 -> 1024 -> 10 with Gemm+Relu and a Softmax head."""
    b = _Builder(seed=1)
    h = "x"
    for fan_in, fan_out in ((784, 1024), (1024, 1024)):
        h = b.op("Relu", b.op("Gemm", h, b.weight((fan_in, fan_out)),
                             b.const(np.zeros(fan_out, np.float32) + 0.01, "bias")))
    logits = b.op("Gemm", h, b.weight((1024, 10)), b.const(np.zeros(10, np.float32), "bias"))
    y = b.op("Softmax", logits, axis=-1)
    b.nodes[-1].output[0] = "y"
    del y
    return b.model("mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 784])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])])


def transformer_block(small: bool = False) -> onnx.ModelProto:
    """One BERT-style encoder layer (hidden 768, 12 heads, FFN 3072; small: 192, 4 heads, 768)."""
    hidden, heads, ffn, seq = (192, 4, 768, 64) if small else (768, 12, 3072, 128)
    head = hidden // heads
    b = _Builder(seed=2)
    x = "x"

    def split_heads(t: str) -> str:
        r = b.op("Reshape", t, b.const(np.array([1, seq, heads, head], np.int64), "shape"))
        return b.op("Transpose", r, perm=[0, 2, 1, 3])

    q, k, v = (split_heads(linear(b, x, hidden, hidden)) for _ in range(3))
    scores = b.op("Div", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])), b.const(_f32(math.sqrt(head))))
    probs = b.op("Softmax", scores, axis=-1)
    ctx = b.op("Transpose", b.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", ctx, b.const(np.array([1, seq, hidden], np.int64), "shape"))
    h1 = layer_norm(b, b.op("Add", linear(b, ctx, hidden, hidden), x), hidden)
    ff = linear(b, gelu_erf(b, linear(b, h1, hidden, ffn)), ffn, hidden)
    out = layer_norm(b, b.op("Add", ff, h1), hidden)
    b.nodes.append(helper.make_node("Identity", [out], ["y"], name="output"))
    name = "transformer_small" if small else "transformer_block"
    return b.model(name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])])


def elementwise_chain(rows: int = 4096, cols: int = 1024) -> onnx.ModelProto:
    """x*a+b, tanh-GELU written out, SiLU via Sigmoid, residual add: memory-bound, fusion is the whole game."""
    b = _Builder(seed=3)
    a = b.const((1 + 0.1 * b.rng.standard_normal(cols)).astype(np.float32), "scale")
    c = b.const((0.1 * b.rng.standard_normal(cols)).astype(np.float32), "shift")
    y = b.op("Add", b.op("Mul", "x", a), c)
    g = gelu_tanh(b, y)
    s = b.op("Mul", g, b.op("Sigmoid", g))
    b.nodes.append(helper.make_node("Add", [s, "x"], ["y"], name="residual"))
    return b.model("elementwise_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])])


def layernorm_softmax(rows: int = 8192, cols: int = 768) -> onnx.ModelProto:
    """Decomposed LayerNorm then Softmax over the last axis: reduction fusion, one pass per row."""
    b = _Builder(seed=4)
    ln = layer_norm(b, "x", cols)
    b.nodes.append(helper.make_node("Softmax", [ln], ["y"], name="softmax", axis=-1))
    return b.model("layernorm_softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])])


def light_model_path(name: str) -> Path:
    """Path of one of the ONNX package's light models, e.g. ``resnet50`` -> light_resnet50.onnx."""
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


BUILDERS = {
    "mlp": mlp,
    "transformer_block": transformer_block,
    "elementwise_chain": elementwise_chain,
    "layernorm_softmax": layernorm_softmax,
}


def bench_model(name: str) -> onnx.ModelProto:
    """A benchmark model by name (the four built here, or ``resnet50_light`` from the onnx package)."""
    if name == "resnet50_light":
        return onnx.load(str(light_model_path("resnet50")))
    return BUILDERS[name]()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="folder to write the .onnx files into")
    parser.add_argument("--example", action="store_true", help="write only the small bundled example model")
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    models = {"transformer_small": transformer_block(small=True)} if args.example else {
        name: build() for name, build in BUILDERS.items()}
    for name, model in models.items():
        path = os.path.join(args.out_dir, f"{name}.onnx")
        onnx.save(model, path)
        print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB, {len(model.graph.node)} nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
