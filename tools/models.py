"""Builders for the benchmark-suite models (see shared/bench/README.md), written with ``onnx.helper``.

Every model is float32 with fixed-seed weights and is emitted the way exporters emit it (opset 17, LayerNorm
decomposed, GELU written out), so the passes have real patterns to find. ``python tools/models.py OUT_DIR``
writes them all; ``tlc/examples/`` holds a small transformer block made by ``transformer_block(small=True)``.

The real-model suite (``REAL_MODELS``: MobileNetV2, ResNet-18 with BatchNormalization, a small ViT, a UNet, an
MLP-Mixer, a GPT-2 block, a dynamic-batch CNN, 800 tiny elementwise ops) and the tiny per-run-overhead graphs
(``TINY_MODELS``) are built by ``build(name, batch, small)`` the way ``torch.onnx.export`` emits such networks;
``python tools/models.py OUT_DIR --suite real --batch 1 8`` writes them.
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

    def scalar(self, value, dtype=np.float32) -> str:
        """A ``Constant`` node, the way exporters write scalars and small shape vectors (not an initializer)."""
        return self.op("Constant", value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def rename(self, value: str, new: str) -> str:
        """Rename a value everywhere (e.g. the last node's output to the graph output's name)."""
        for node in self.nodes:
            node.input[:] = [new if i == value else i for i in node.input]
            node.output[:] = [new if o == value else o for o in node.output]
        return new

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


# ---------------------------------------------------------------------------- the real-model suite
# Written the way ``torch.onnx.export`` (TorchScript exporter, opset 17, constant folding on) emits these
# networks: Linear as MatMul + Add(bias, .) with the weight stored transposed, a classifier as Gemm(transB=1),
# scalars and shape vectors as Constant nodes, flatten(2) as Shape/Slice/Concat/Reshape. ``small=True`` gives
# the same graph structure at test size (32x32 images, few channels and layers).

def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _ints(values) -> np.ndarray:
    return np.array(values, np.int64)


def conv(b: _Builder, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None,
         group: int = 1, bias: bool = True, gain: float = 2.0) -> str:
    """A Conv with He-scaled weights (``gain`` 2 before a ReLU, 1 before a linear use)."""
    pad = k // 2 if pad is None else pad
    fan_in = cin // group * k * k
    w = b.const((b.rng.standard_normal((cout, cin // group, k, k)) * math.sqrt(gain / fan_in)).astype(np.float32),
                "conv_w")
    inputs = [x, w] + ([b.const((0.05 * b.rng.standard_normal(cout)).astype(np.float32), "conv_b")] if bias else [])
    return b.op("Conv", *inputs, dilations=[1, 1], group=group, kernel_shape=[k, k], pads=[pad] * 4,
                strides=[stride, stride])


def batch_norm(b: _Builder, x: str, channels: int, gamma: float = 1.0) -> str:
    """BatchNormalization in inference form as exported with BN kept: five inputs, eval-mode attributes."""
    def vec(mean, spread):
        return b.const((mean + spread * b.rng.standard_normal(channels)).astype(np.float32), "bn")
    var = b.const(b.rng.uniform(0.5, 1.5, channels).astype(np.float32), "bn_var")
    return b.op("BatchNormalization", x, vec(gamma, 0.1 * gamma), vec(0.0, 0.1), vec(0.0, 0.1), var,
                epsilon=1e-5, momentum=0.9, training_mode=0)


def relu6(b: _Builder, x: str) -> str:
    """ReLU6 as opset 11+ writes it: Clip with min and max as (Constant) inputs."""
    return b.op("Clip", x, b.scalar(0.0), b.scalar(6.0))


def torch_linear(b: _Builder, x: str, fan_in: int, fan_out: int) -> str:
    """nn.Linear on a 3-d input: MatMul with the transposed weight, then Add(bias, product)."""
    product = b.op("MatMul", x, b.weight((fan_in, fan_out)))
    return b.op("Add", b.const((0.02 * b.rng.standard_normal(fan_out)).astype(np.float32), "bias"), product)


def classifier(b: _Builder, x: str, fan_in: int, classes: int) -> str:
    """nn.Linear on a 2-d input: Gemm(transB=1) with the weight as stored, [out, in]."""
    w = b.const((b.rng.standard_normal((classes, fan_in)) / math.sqrt(fan_in)).astype(np.float32), "fc_w")
    bias = b.const((0.02 * b.rng.standard_normal(classes)).astype(np.float32), "fc_b")
    return b.op("Gemm", x, w, bias, alpha=1.0, beta=1.0, transB=1)


def torch_layer_norm(b: _Builder, x: str, width: int, eps: float = 1e-5) -> str:
    gamma = b.const((1 + 0.1 * b.rng.standard_normal(width)).astype(np.float32), "ln_w")
    beta = b.const((0.1 * b.rng.standard_normal(width)).astype(np.float32), "ln_b")
    return b.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=eps)


def torch_gelu_erf(b: _Builder, x: str) -> str:
    """F.gelu as exported: x * (erf(x / sqrt 2) + 1) * 0.5, with Constant-node scalars."""
    erf = b.op("Erf", b.op("Div", x, b.scalar(math.sqrt(2.0))))
    return b.op("Mul", b.op("Mul", x, b.op("Add", erf, b.scalar(1.0))), b.scalar(0.5))


def flatten_tokens(b: _Builder, x: str) -> str:
    """``x.flatten(2).transpose(1, 2)`` on a [B, C, H, W] patch embedding, as exported."""
    head = b.op("Slice", b.op("Shape", x), b.scalar([0], np.int64), b.scalar([2], np.int64), b.scalar([0], np.int64))
    flat = b.op("Reshape", x, b.op("Concat", head, b.scalar([-1], np.int64), axis=0), allowzero=0)
    return b.op("Transpose", flat, perm=[0, 2, 1])


def mobilenetv2(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """MobileNetV2 1.0 at 224 (BN folded into the convs, ReLU6 as Clip); small: 32x32, width/4, 4 stages."""
    # (expansion t, channels c, repeats n, first stride s), as in the paper and torchvision
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    size, stem, last, classes = 224, 32, 1280, 1000
    if small:
        settings, size, stem, last, classes = [(1, 8, 1, 1), (6, 8, 2, 2), (6, 16, 2, 2)], 32, 8, 64, 10
    b = _Builder(seed=11)
    h = relu6(b, conv(b, "x", 3, stem, 3, stride=2))
    cin = stem
    for t, c, n, s in settings:
        for i in range(n):
            stride, hidden = (s if i == 0 else 1), cin * t
            y = h if t == 1 else relu6(b, conv(b, h, cin, hidden, 1))
            y = relu6(b, conv(b, y, hidden, hidden, 3, stride=stride, group=hidden))
            y = conv(b, y, hidden, c, 1, gain=1.0)
            h = b.op("Add", h, y) if stride == 1 and cin == c else y
            cin = c
    h = relu6(b, conv(b, h, cin, last, 1))
    flat = b.op("Flatten", b.op("GlobalAveragePool", h), axis=1)
    b.rename(classifier(b, flat, last, classes), "y")
    return b.model("mobilenetv2", [_vi("x", [batch, 3, size, size])], [_vi("y", [batch, classes])])


def resnet18(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """ResNet-18 at 224 with a BatchNormalization after every conv; small: 32x32, widths 8-64, one block each."""
    widths, blocks, size, classes = (64, 128, 256, 512), 2, 224, 1000
    if small:
        widths, blocks, size, classes = (8, 16, 32, 64), 1, 32, 10
    b = _Builder(seed=12)
    h = b.op("Relu", batch_norm(b, conv(b, "x", 3, widths[0], 7, stride=2, bias=False), widths[0]))
    h = b.op("MaxPool", h, ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    cin = widths[0]
    for stage, width in enumerate(widths):
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            y = b.op("Relu", batch_norm(b, conv(b, h, cin, width, 3, stride=stride, bias=False), width))
            # the last BN of a block starts small (as zero-init-residual training leaves it): bounded activations
            y = batch_norm(b, conv(b, y, width, width, 3, bias=False), width, gamma=0.5)
            if stride != 1 or cin != width:
                h = batch_norm(b, conv(b, h, cin, width, 1, stride=stride, pad=0, bias=False, gain=1.0), width)
            h = b.op("Relu", b.op("Add", y, h))
            cin = width
    flat = b.op("Flatten", b.op("GlobalAveragePool", h), axis=1)
    b.rename(classifier(b, flat, cin, classes), "y")
    return b.model("resnet18", [_vi("x", [batch, 3, size, size])], [_vi("y", [batch, classes])])


def vit(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """ViT-Tiny/16 at 224: hidden 192, 3 heads, 6 layers, MLP 768; small: 32x32, patch 8, hidden 32, 2 layers."""
    size, patch, hidden, heads, layers, ffn, classes = 224, 16, 192, 3, 6, 768, 1000
    if small:
        size, patch, hidden, heads, layers, ffn, classes = 32, 8, 32, 2, 2, 64, 10
    tokens, head = (size // patch) ** 2 + 1, hidden // heads
    b = _Builder(seed=13)
    x = flatten_tokens(b, conv(b, "x", 3, hidden, patch, stride=patch, pad=0, gain=1.0))
    # the class token: cls.expand(B, -1, -1), exported through ConstantOfShape/Equal/Where on the shape
    target = b.scalar([batch, -1, -1], np.int64)
    ones = b.op("ConstantOfShape", b.scalar([3], np.int64), value=numpy_helper.from_array(_ints([1])))
    shape = b.op("Where", b.op("Equal", target, b.op("Mul", ones, b.scalar(-1, np.int64))), ones, target)
    cls = b.op("Expand", b.const((0.02 * b.rng.standard_normal((1, 1, hidden))).astype(np.float32), "cls"), shape)
    pos = b.const((0.02 * b.rng.standard_normal((1, tokens, hidden))).astype(np.float32), "pos")
    x = b.op("Add", b.op("Concat", cls, x, axis=1), pos)
    for _ in range(layers):
        y = torch_linear(b, torch_layer_norm(b, x, hidden, 1e-6), hidden, 3 * hidden)
        y = b.op("Transpose", b.op("Reshape", y, b.scalar([batch, tokens, 3, heads, head], np.int64), allowzero=0),
                 perm=[2, 0, 3, 1, 4])
        q, k, v = (b.op("Squeeze", part, b.scalar([0], np.int64))
                   for part in b.op("Split", y, b.scalar([1, 1, 1], np.int64), axis=0, outputs=3))
        scores = b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2]))
        scores = b.op("Mul", scores, b.op("Pow", b.scalar(float(head)), b.scalar(-0.5)))
        ctx = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
        ctx = b.op("Reshape", b.op("Transpose", ctx, perm=[0, 2, 1, 3]),
                   b.scalar([batch, tokens, hidden], np.int64), allowzero=0)
        x = b.op("Add", x, torch_linear(b, ctx, hidden, hidden))
        y = torch_gelu_erf(b, torch_linear(b, torch_layer_norm(b, x, hidden, 1e-6), hidden, ffn))
        x = b.op("Add", x, torch_linear(b, y, ffn, hidden))
    cls_token = b.op("Gather", torch_layer_norm(b, x, hidden, 1e-6), b.scalar(0, np.int64), axis=1)
    b.rename(classifier(b, cls_token, hidden, classes), "y")
    return b.model("vit", [_vi("x", [batch, 3, size, size])], [_vi("y", [batch, classes])])


def unet(batch: int = 1, small: bool = False, size: int = 128) -> onnx.ModelProto:
    """A UNet: encoder 16-32-64 with MaxPool, bottleneck 128, decoder up by ConvTranspose (deepest level),
    Resize linear by scales, Resize nearest by sizes (taken from the skip tensor's shape); skips by Concat."""
    widths, classes = (16, 32, 64, 128), 2
    if small:
        widths, size = (4, 8, 16, 32), 32
    b = _Builder(seed=14)

    def double_conv(x: str, cin: int, cout: int) -> str:
        return b.op("Relu", conv(b, b.op("Relu", conv(b, x, cin, cout, 3)), cout, cout, 3))

    def pool(x: str) -> str:
        return b.op("MaxPool", x, ceil_mode=0, dilations=[1, 1], kernel_shape=[2, 2], pads=[0, 0, 0, 0],
                    strides=[2, 2])

    skips, h, cin = [], "x", 3
    for width in widths[:-1]:
        h = double_conv(h, cin, width)
        skips.append(h)
        h, cin = pool(h), width
    h = double_conv(h, cin, widths[-1])
    # deepest level: ConvTranspose 2x2 stride 2 (weights [in, out, kh, kw])
    w = b.const((b.rng.standard_normal((widths[3], widths[2], 2, 2)) / math.sqrt(widths[3])).astype(np.float32),
                "convT_w")
    up = b.op("ConvTranspose", h, w, b.const((0.05 * b.rng.standard_normal(widths[2])).astype(np.float32)),
              dilations=[1, 1], group=1, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2])
    h = double_conv(b.op("Concat", up, skips[2], axis=1), 2 * widths[2], widths[2])
    # middle level: F.interpolate(scale_factor=2, mode="bilinear") -> Resize(x, "", scales), linear, half_pixel
    up = b.op("Resize", h, "", b.scalar([1.0, 1.0, 2.0, 2.0]), coordinate_transformation_mode="half_pixel",
              cubic_coeff_a=-0.75, mode="linear", nearest_mode="floor")
    h = double_conv(b.op("Concat", up, skips[1], axis=1), widths[2] + widths[1], widths[1])
    # top level: F.interpolate(size=skip.shape[2:]) -> Resize(x, "", "", sizes), sizes = Shape(x)[0:2] ++ [H, W]
    head = b.op("Slice", b.op("Shape", h), b.scalar([0], np.int64), b.scalar([2], np.int64), b.scalar([0], np.int64))
    sizes = b.op("Concat", head, b.scalar([size, size], np.int64), axis=0)
    up = b.op("Resize", h, "", "", sizes, coordinate_transformation_mode="asymmetric", cubic_coeff_a=-0.75,
              mode="nearest", nearest_mode="floor")
    h = double_conv(b.op("Concat", up, skips[0], axis=1), widths[1] + widths[0], widths[0])
    b.rename(conv(b, h, widths[0], classes, 1, gain=1.0), "y")
    return b.model("unet", [_vi("x", [batch, 3, size, size])], [_vi("y", [batch, classes, size, size])])


def mlp_mixer(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """MLP-Mixer at 224, patch 16 (196 tokens), hidden 256, token MLP 128, channel MLP 1024, 8 layers;
    small: 32x32, patch 8, hidden 32, 2 layers."""
    size, patch, hidden, token_mlp, channel_mlp, layers, classes = 224, 16, 256, 128, 1024, 8, 1000
    if small:
        size, patch, hidden, token_mlp, channel_mlp, layers, classes = 32, 8, 32, 16, 64, 2, 10
    tokens = (size // patch) ** 2
    b = _Builder(seed=15)
    x = flatten_tokens(b, conv(b, "x", 3, hidden, patch, stride=patch, pad=0, gain=1.0))
    for _ in range(layers):
        y = b.op("Transpose", torch_layer_norm(b, x, hidden), perm=[0, 2, 1])            # [B, C, T]
        y = torch_linear(b, torch_gelu_erf(b, torch_linear(b, y, tokens, token_mlp)), token_mlp, tokens)
        x = b.op("Add", x, b.op("Transpose", y, perm=[0, 2, 1]))
        y = torch_gelu_erf(b, torch_linear(b, torch_layer_norm(b, x, hidden), hidden, channel_mlp))
        x = b.op("Add", x, torch_linear(b, y, channel_mlp, hidden))
    pooled = b.op("ReduceMean", torch_layer_norm(b, x, hidden), axes=[1], keepdims=0)
    b.rename(classifier(b, pooled, hidden, classes), "y")
    return b.model("mlp_mixer", [_vi("x", [batch, 3, size, size])], [_vi("y", [batch, classes])])


def gpt2_block(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """One GPT-2 block: hidden 768, 12 heads, 128 tokens, causal mask by Trilu + Where, tanh GELU written out;
    small: hidden 64, 4 heads, 16 tokens."""
    hidden, heads, seq = (64, 4, 16) if small else (768, 12, 128)
    head = hidden // heads
    b = _Builder(seed=16)
    qkv = torch_linear(b, torch_layer_norm(b, "x", hidden), hidden, 3 * hidden)
    q, k, v = b.op("Split", qkv, b.scalar([hidden] * 3, np.int64), axis=2, outputs=3)

    def heads_of(t: str, perm: list[int]) -> str:
        return b.op("Transpose", b.op("Reshape", t, b.scalar([batch, seq, heads, head], np.int64), allowzero=0),
                    perm=perm)

    q, v, k = heads_of(q, [0, 2, 1, 3]), heads_of(v, [0, 2, 1, 3]), heads_of(k, [0, 2, 3, 1])  # k already ^T
    scores = b.op("Mul", b.op("MatMul", q, k), b.scalar(1.0 / math.sqrt(head)))
    mask = b.op("Trilu", b.scalar(np.ones((seq, seq), bool), bool), b.scalar(0, np.int64), upper=0)
    scores = b.op("Where", mask, scores, b.scalar(np.finfo(np.float32).min))
    ctx = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
    ctx = b.op("Reshape", b.op("Transpose", ctx, perm=[0, 2, 1, 3]), b.scalar([batch, seq, hidden], np.int64),
               allowzero=0)
    x = b.op("Add", "x", torch_linear(b, ctx, hidden, hidden))
    h = torch_linear(b, torch_layer_norm(b, x, hidden), hidden, 4 * hidden)
    # 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3))), in the exporter's order
    inner = b.op("Add", h, b.op("Mul", b.op("Pow", h, b.scalar(3.0)), b.scalar(0.044715)))
    tanh = b.op("Tanh", b.op("Mul", inner, b.scalar(math.sqrt(2.0 / math.pi))))
    h = b.op("Mul", b.op("Mul", h, b.scalar(0.5)), b.op("Add", tanh, b.scalar(1.0)))
    b.rename(b.op("Add", x, torch_linear(b, h, 4 * hidden, hidden)), "y")
    return b.model("gpt2_block", [_vi("x", [batch, seq, hidden])], [_vi("y", [batch, seq, hidden])])


def dynamic_batch(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """A small CNN with a symbolic batch ``N`` (``batch`` is ignored: one file serves every batch), flattened by
    ``x.view(x.size(0), -1)``: Shape -> Gather(0) -> Unsqueeze -> Concat [-1] -> Reshape; then two Gemms.
    64x64 input, convs 32-64-64, Gemm 4096 -> 256 -> 10; small: 16x16, convs 4-8-8."""
    del batch
    size, widths, fc = (16, (4, 8, 8), 32) if small else (64, (32, 64, 64), 256)
    b = _Builder(seed=17)
    h, cin = "x", 3
    for width in widths:
        h = b.op("Relu", conv(b, h, cin, width, 3))
        h = b.op("MaxPool", h, ceil_mode=0, dilations=[1, 1], kernel_shape=[2, 2], pads=[0, 0, 0, 0],
                 strides=[2, 2])
        cin = width
    n = b.op("Unsqueeze", b.op("Gather", b.op("Shape", h), b.scalar(0, np.int64), axis=0), b.scalar([0], np.int64))
    flat = b.op("Reshape", h, b.op("Concat", n, b.scalar([-1], np.int64), axis=0), allowzero=0)
    features = cin * (size // 2 ** len(widths)) ** 2
    h = b.op("Relu", classifier(b, flat, features, fc))
    b.rename(classifier(b, h, fc, 10), "y")
    return b.model("dynamic_batch", [_vi("x", ["N", 3, size, size])], [_vi("y", ["N", 10])])


#: the ops of ``tiny_ops_800``'s chains, in turn: (op, needs a broadcast constant)
_TINY_CHAIN = [("Mul", True), ("Add", True), ("Tanh", False), ("Sub", True), ("Relu", False), ("Mul", True),
               ("Sigmoid", False), ("Add", True)]


def tiny_ops_800(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """800 tiny elementwise ops on [B, 64]: 100 chains of 8 (Mul/Add/Tanh/Sub/Relu/Mul/Sigmoid/Add with [64]
    constants) from one input; 50 chains end in a Sum, which is concatenated with the other 50.
    small: 10 chains on [B, 16]."""
    chains, width = (10, 16) if small else (100, 64)
    b = _Builder(seed=18)
    ends = []
    for _ in range(chains):
        h = "x"
        for op, const in _TINY_CHAIN:
            h = b.op(op, h, b.const((1 + 0.1 * b.rng.standard_normal(width)).astype(np.float32))) if const else \
                b.op(op, h)
        ends.append(h)
    total = b.op("Sum", *ends[: chains // 2])
    b.rename(b.op("Concat", total, *ends[chains // 2:], axis=1), "y")
    return b.model("tiny_ops_800", [_vi("x", [batch, width])], [_vi("y", [batch, width * (chains // 2 + 1)])])


# ---------------------------------------------------------------------------- tiny per-run-overhead graphs
def relu16(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """One Relu on 16 floats."""
    b = _Builder(seed=21)
    b.rename(b.op("Relu", "x"), "y")
    return b.model("relu16", [_vi("x", [batch, 16])], [_vi("y", [batch, 16])])


def branches50(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """Fifty independent MatMul(1x16 @ 16x8) + Add + Relu branches of one input, then a Concat."""
    b = _Builder(seed=22)
    ends = [b.op("Relu", b.op("Add", b.op("MatMul", "x", b.weight((16, 8))),
                             b.const((0.1 * b.rng.standard_normal(8)).astype(np.float32), "bias")))
            for _ in range(50)]
    b.rename(b.op("Concat", *ends, axis=1), "y")
    return b.model("branches50", [_vi("x", [batch, 16])], [_vi("y", [batch, 400])])


def small_convnet(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """Eight 3x3 convs on 8x16x16 with Relu, a depthwise conv, MaxPool, GlobalAveragePool, Flatten, Gemm."""
    b = _Builder(seed=23)
    h = "x"
    for _ in range(8):
        h = b.op("Relu", conv(b, h, 8, 8, 3))
    h = b.op("Relu", conv(b, h, 8, 8, 3, group=8))
    h = b.op("MaxPool", h, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2])
    flat = b.op("Flatten", b.op("GlobalAveragePool", h), axis=1)
    b.rename(classifier(b, flat, 8, 10), "y")
    return b.model("small_convnet", [_vi("x", [batch, 8, 16, 16])], [_vi("y", [batch, 10])])


def chain100(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """A chain of 100 tiny elementwise ops on (1, 64)."""
    b = _Builder(seed=24)
    h = "x"
    for i in range(100):
        op, const = _TINY_CHAIN[i % len(_TINY_CHAIN)]
        h = b.op(op, h, b.const((1 + 0.1 * b.rng.standard_normal(64)).astype(np.float32))) if const else b.op(op, h)
    b.rename(h, "y")
    return b.model("chain100", [_vi("x", [batch, 64])], [_vi("y", [batch, 64])])


def _qdq(b: _Builder, x: str, scale: float, zero: int) -> str:
    """QuantizeLinear -> DequantizeLinear of an activation to uint8 with a fixed per-tensor scale and zero point
    (initializers named as onnxruntime's quantizer names them); returns the DequantizeLinear's output."""
    s = b.const(_f32(scale), f"{x}_scale")
    z = b.const(np.array(zero, np.uint8), f"{x}_zero_point")
    return b.op("DequantizeLinear", b.op("QuantizeLinear", x, s, z), s, z)


def _qdq_weight(b: _Builder, w: np.ndarray, axis: int) -> tuple[str, np.ndarray]:
    """A float weight quantized per channel along ``axis`` to symmetric int8 (scale max|w| / 127, zero point 0,
    onnxruntime's default for weights) as an initializer behind a DequantizeLinear; returns its output and the
    scales."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    scale = (np.abs(w).max(axis=other) / 127).astype(np.float32)
    shaped = scale.reshape([-1 if i == axis else 1 for i in range(w.ndim)])
    q = np.clip(np.rint(w / shaped), -127, 127).astype(np.int8)
    out = b.op("DequantizeLinear", b.const(q, "w_quantized"), b.const(scale, "w_scale"),
               b.const(np.zeros(scale.shape, np.int8), "w_zero_point"), axis=axis)
    return out, scale


def qdq_convnet(batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """A small conv net (3x3 convs, a strided one, a depthwise and a pointwise conv, global pooling, a linear
    classifier) quantized in QDQ form as onnxruntime's static quantizer writes it: weights per output channel to
    int8 (symmetric), biases to int32 with scale x_scale * w_scale, activations to uint8 with fixed scales. The
    first conv keeps its Relu before the QuantizeLinear; the others have it folded into their output's range
    (zero point 0), as the quantizer removes a Relu that follows a conv."""
    b = _Builder(seed=31)
    size = 16 if small else 32
    h, in_scale = _qdq(b, "x", 8 / 255, 128), 8 / 255
    layers = ((3, 16, 3, 1, 1, True), (16, 32, 3, 2, 1, False), (32, 32, 3, 1, 32, False), (32, 64, 1, 1, 1, False))
    for cin, cout, k, stride, group, keep_relu in layers:
        fan_in = cin // group * k * k
        w = (b.rng.standard_normal((cout, cin // group, k, k)) * math.sqrt(2 / fan_in)).astype(np.float32)
        wq, w_scale = _qdq_weight(b, w, axis=0)
        bias_scale = (np.float32(in_scale) * w_scale).astype(np.float32)
        bias = np.rint(0.05 * b.rng.standard_normal(cout) / bias_scale).astype(np.int32)
        bq = b.op("DequantizeLinear", b.const(bias, "b_quantized"), b.const(bias_scale, "b_scale"),
                  b.const(np.zeros(cout, np.int32), "b_zero_point"), axis=0)
        y = b.op("Conv", h, wq, bq, dilations=[1, 1], group=group, kernel_shape=[k, k], pads=[k // 2] * 4,
                 strides=[stride, stride])
        if keep_relu:
            y = b.op("Relu", y)
        h, in_scale = _qdq(b, y, 6 / 255, 0), 6 / 255
    flat = b.op("Flatten", b.op("GlobalAveragePool", h), axis=1)
    w = (b.rng.standard_normal((64, 10)) / 8).astype(np.float32)
    logits = b.op("MatMul", _qdq(b, flat, 4 / 255, 0), _qdq_weight(b, w, axis=1)[0])
    bias = b.const((0.02 * b.rng.standard_normal(10)).astype(np.float32), "fc_b")
    b.rename(b.op("Add", _qdq(b, logits, 16 / 255, 128), bias), "y")
    return b.model("qdq_convnet", [_vi("x", [batch, 3, size, size])], [_vi("y", [batch, 10])])


def lstm_gru_tagger(batch: int | str = 1, small: bool = False, *, seq: int | str | None = None) -> onnx.ModelProto:
    """A 2-layer tagger as torch.onnx exports it (opset 17): nn.LSTM(64, 128, bidirectional=True), its two
    directions merged by Transpose + Reshape, then nn.GRU(256, 128) (linear_before_reset), 50 steps; PyTorch's
    init (uniform in +-1/sqrt(hidden)); initial states are inputs. small: 8 steps, 16 in, 24 hidden; ``seq``
    sets the steps; a str batch or seq is a symbolic dim (tools/bench_recurrent.py)."""
    steps, size, h = (8, 16, 24) if small else (50, 64, 128)
    seq = seq or steps
    rng = np.random.default_rng(21)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.uniform(-1 / math.sqrt(h), 1 / math.sqrt(h), shape).astype(np.float32),
                                       name)

    inits = [weight("lstm_w", 2, 4 * h, size), weight("lstm_r", 2, 4 * h, h), weight("lstm_b", 2, 8 * h),
             weight("gru_w", 1, 3 * h, 2 * h), weight("gru_r", 1, 3 * h, h), weight("gru_b", 1, 6 * h),
             numpy_helper.from_array(np.array([0, 0, -1], np.int64), "merge_directions"),
             numpy_helper.from_array(np.array([1], np.int64), "direction_axis")]
    nodes = [
        helper.make_node("LSTM", ["x", "lstm_w", "lstm_r", "lstm_b", "", "h0", "c0"], ["lstm_y", "h_n", "c_n"],
                         name="LSTM_0", hidden_size=h, direction="bidirectional"),
        helper.make_node("Transpose", ["lstm_y"], ["lstm_t"], name="Transpose_1", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["lstm_t", "merge_directions"], ["lstm_out"], name="Reshape_2"),
        helper.make_node("GRU", ["lstm_out", "gru_w", "gru_r", "gru_b", "", "h1"], ["gru_y", "gru_h_n"],
                         name="GRU_3", hidden_size=h, linear_before_reset=1),
        helper.make_node("Squeeze", ["gru_y", "direction_axis"], ["y"], name="Squeeze_4"),
    ]
    graph = helper.make_graph(
        nodes, "lstm_gru_tagger",
        [_vi("x", [seq, batch, size]), _vi("h0", [2, batch, h]), _vi("c0", [2, batch, h]), _vi("h1", [1, batch, h])],
        [_vi("y", [seq, batch, h]), _vi("h_n", [2, batch, h]), _vi("c_n", [2, batch, h]),
         _vi("gru_h_n", [1, batch, h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch")
    model.ir_version = IR_VERSION
    return model


def rnn_loop(batch: int | str = 1, small: bool = False, *, seq: int | None = None,
             hidden: int | None = None) -> onnx.ModelProto:
    """An RNN written as a Loop (opset 17), with an If in its body: h_t = tanh(x[t] @ W + h @ R + b), and where
    a row of the state passes an L2 norm limit the If rescales the state by limit / norm per row (clipping: 13
    of the 100 steps at batch 1 on random feeds, 77 at batch 8); the Loop's scan output stacks every h_t. The
    body reads W, R, b, the limit and x from the outer graph (captures).
    100 steps of hidden 256; small: 6 steps of 12; ``seq`` and ``hidden`` set them (tools/bench_control.py)."""
    seq, hidden = seq or (6 if small else 100), hidden or (12 if small else 256)
    rng = np.random.default_rng(22)
    f, i64, flag = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    scale = 1 / math.sqrt(hidden)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.uniform(-2 * scale, 2 * scale, shape).astype(np.float32), name)

    clip = helper.make_graph(
        [helper.make_node("Div", ["limit", "norm"], ["ratio"]), helper.make_node("Mul", ["h_new", "ratio"], ["h_c"])],
        "clip", [], [helper.make_tensor_value_info("h_c", f, [batch, hidden])])
    keep = helper.make_graph([helper.make_node("Identity", ["h_new"], ["h_k"])], "keep", [],
                             [helper.make_tensor_value_info("h_k", f, [batch, hidden])])
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["x_t"], axis=0),
         helper.make_node("MatMul", ["x_t", "w"], ["xw"]),
         helper.make_node("MatMul", ["h", "r"], ["hr"]),
         helper.make_node("Add", ["xw", "hr"], ["s"]),
         helper.make_node("Add", ["s", "bias"], ["s_b"]),
         helper.make_node("Tanh", ["s_b"], ["h_new"]),
         helper.make_node("ReduceL2", ["h_new"], ["norm"], axes=[1], keepdims=1),
         helper.make_node("ReduceMax", ["norm"], ["worst"], keepdims=0),
         helper.make_node("Greater", ["worst", "limit"], ["too_big"]),
         helper.make_node("If", ["too_big"], ["h_out"], then_branch=clip, else_branch=keep),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "rnn_body",
        [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond_in", flag, []),
         helper.make_tensor_value_info("h", f, [batch, hidden])],
        [helper.make_tensor_value_info("cond_out", flag, []),
         helper.make_tensor_value_info("h_out", f, [batch, hidden]),
         helper.make_tensor_value_info("h_scan", f, [batch, hidden])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["steps", "", "h0"], ["h_last", "hs"], name="Loop_0", body=body)], "rnn_loop",
        [_vi("x", [seq, batch, hidden]), _vi("h0", [batch, hidden])],
        [_vi("h_last", [batch, hidden]), _vi("hs", [seq, batch, hidden])],
        [weight("w", hidden, hidden), weight("r", hidden, hidden), weight("bias", hidden),
         numpy_helper.from_array(np.array(seq, np.int64), "steps"),
         numpy_helper.from_array(np.array(0.74 * math.sqrt(hidden), np.float32), "limit")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


REAL_BUILDERS = {"mobilenetv2": mobilenetv2, "resnet18": resnet18, "vit": vit, "unet": unet,
                 "mlp_mixer": mlp_mixer, "gpt2_block": gpt2_block, "dynamic_batch": dynamic_batch,
                 "tiny_ops_800": tiny_ops_800}
TINY_BUILDERS = {"relu16": relu16, "branches50": branches50, "small_convnet": small_convnet, "chain100": chain100}
#: models of the operators beyond the real suite's: recurrent layers, control flow, quantized arithmetic
OPS_BUILDERS = {"lstm_gru_tagger": lstm_gru_tagger, "rnn_loop": rnn_loop, "qdq_convnet": qdq_convnet}
REAL_MODELS = list(REAL_BUILDERS)
TINY_MODELS = list(TINY_BUILDERS)
OPS_MODELS = list(OPS_BUILDERS)
#: models with a symbolic batch: one file, fed every batch size
DYNAMIC_MODELS = {"dynamic_batch"}


def build(name: str, batch: int = 1, small: bool = False) -> onnx.ModelProto:
    """A real-suite, tiny or ops-suite model by name (see ``REAL_MODELS``, ``TINY_MODELS``, ``OPS_MODELS``)."""
    builders = {**REAL_BUILDERS, **TINY_BUILDERS, **OPS_BUILDERS}
    if name not in builders:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(builders)}")
    return builders[name](batch=batch, small=small)


def random_feeds(model: onnx.ModelProto, batch: int = 1) -> dict[str, np.ndarray]:
    """Fixed-seed float32 feeds for ``model``'s inputs; a symbolic dimension (the batch) gets ``batch``."""
    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


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
    parser.add_argument("--suite", choices=["classic", "real", "tiny", "all"], default="classic",
                        help="classic: the five benchmark models; real: REAL_MODELS; tiny: TINY_MODELS")
    parser.add_argument("--batch", nargs="+", type=int, default=[1], help="batch sizes of the real suite")
    parser.add_argument("--small", action="store_true", help="the real suite at test size")
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    models: dict = {}
    if args.example:
        models["transformer_small"] = lambda: transformer_block(small=True)
    else:
        if args.suite in ("classic", "all"):
            models.update(BUILDERS)
        for suite, names in (("real", REAL_MODELS), ("tiny", TINY_MODELS)):
            if args.suite not in (suite, "all"):
                continue
            for name in names:
                batches = [1] if name in TINY_MODELS or name in DYNAMIC_MODELS else args.batch
                for batch in batches:
                    key = name if name in DYNAMIC_MODELS or name in TINY_MODELS else f"{name}_b{batch}"
                    models[key] = (lambda n, bt: lambda: build(n, bt, args.small))(name, batch)
    for name, make in models.items():
        model = make()
        path = os.path.join(args.out_dir, f"{name}.onnx")
        onnx.save(model, path)
        print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB, {len(model.graph.node)} nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
