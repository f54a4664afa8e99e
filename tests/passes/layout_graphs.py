"""Small CNN graphs for the layout tests, with random weights (the light models' weights are all equal)."""

from __future__ import annotations

import math

import numpy as np

import tlc
from tlc.ir.graph import Value


class CnnBuilder:
    """``b.conv(x, 32, 3)`` adds a Conv with random weights and bias; every helper returns the output value."""

    def __init__(self, rng: np.random.Generator, name: str = "cnn"):
        self.g = tlc.Graph(name)
        self.rng = rng

    def input(self, shape: tuple[int, ...], name: str = "x") -> Value:
        return self.g.input(name, "float32", shape)

    def weight(self, shape: tuple[int, ...]) -> Value:
        fan_in = math.prod(shape[1:])
        return self.g.constant((self.rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32), "w")

    def conv(self, x: Value, m: int, k: int, stride: int = 1, group: int = 1, pad: int | None = None,
             weight: Value | None = None) -> Value:
        c = self.g.type_of(x).shape[1]
        pad = k // 2 if pad is None else pad
        w = weight if weight is not None else self.weight((m, c // group, k, k))
        b = self.g.constant((0.1 * self.rng.standard_normal(m)).astype(np.float32), "b")
        return self.g.add_node("Conv", [x, w, b], strides=[stride, stride], pads=[pad] * 4, group=group)

    def relu(self, x: Value) -> Value:
        return self.g.add_node("Relu", [x])

    def op(self, op: str, *inputs: Value, **attrs) -> Value:
        return self.g.add_node(op, list(inputs), **attrs)

    def const(self, array) -> Value:
        return self.g.constant(np.asarray(array, np.float32), "c")


def small_cnn(rng: np.random.Generator, c: int = 8, hw: int = 12) -> tlc.Graph:
    """Stem, max pool, a bottleneck with a residual add, a depthwise conv, a channel concat, average pools, a
    per-channel scale (a [C,1,1] constant), and a Gemm head: every op kind the layout pass handles."""
    b = CnnBuilder(rng)
    x = b.input((2, 3, hw, hw))
    h = b.relu(b.conv(x, c, 3))
    h = b.op("MaxPool", h, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    r = b.relu(b.conv(h, c, 1))
    r = b.relu(b.conv(r, c, 3))
    r = b.conv(r, c, 1)
    h = b.relu(b.op("Add", r, h))
    d = b.conv(h, c, 3, group=c)
    s = b.op("Mul", b.conv(h, c, 1, stride=2, pad=0),
             b.const(1 + 0.1 * rng.standard_normal((c, 1, 1))))
    h = b.op("Concat", d, h, axis=1)
    h = b.op("AveragePool", h, kernel_shape=[2, 2], strides=[2, 2])
    h = b.op("Add", h, b.op("Concat", s, s, axis=-3))
    p = b.op("GlobalAveragePool", h)
    f = b.op("Flatten", p, axis=1)
    w = b.g.constant((rng.standard_normal((2 * c, 5)) / 4).astype(np.float32), "fc")
    b.g.output(b.op("Gemm", f, w), "y")
    return b.g


def conv_stack(rng: np.random.Generator, c: int = 256, hw: int = 7, depth: int = 6) -> tlc.Graph:
    """3x3 convs at a small spatial size (ResNet-50's last stage): where channels-last im2col pays."""
    b = CnnBuilder(rng, "conv_stack")
    h = b.input((1, c, hw, hw))
    for _ in range(depth):
        h = b.relu(b.conv(h, c, 3))
    b.g.output(h, "y")
    return b.g


def lone_pointwise(rng: np.random.Generator) -> tlc.Graph:
    """One 1x1 conv: the same GEMM in both layouts, so switching would only add transposes."""
    b = CnnBuilder(rng, "pointwise")
    b.g.output(b.relu(b.conv(b.input((1, 64, 28, 28)), 64, 1)), "y")
    return b.g
