"""The pass pipeline on random graphs (hypothesis): outputs preserved after every pass, at every opt level.

A graph is a random DAG over one or two float32 inputs (sometimes with a symbolic batch dim) built from:
elementwise unary and binary ops (with scalar, row and full constants, some of them the neutral 0 and 1 the
algebraic rules look for), MatMul with a constant weight (and a bias, the Gemm pattern), reductions over the
last or another axis, Reshape and Transpose (including pairs that cancel), Softmax, decomposed LayerNorm and
GELU (erf and tanh forms, as exporters write them), Pow with constant exponents, subexpressions of constants
only (for fold), repeated subexpressions (for CSE), Identity, Dropout and dead branches (for DCE).

Each graph runs through every opt level and every pass alone, with the reference executor run after each pass
that changed it (``OutputCheck`` of test_pipeline_models): bit for bit for the exact passes, within float32
rounding (relative to the output's scale, at least ``ATOL``) for the rewrites; -O2 with fast-math too. Graphs whose
outputs are not finite or huge are discarded (``assume``): the rewrites are compared on well-conditioned values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_pipeline_models import check_model, check_pipeline

import tlc
from tlc.ir.graph import Value
from tlc.passes import PassOptions

SYMBOL = "N"
SYMBOL_SIZE = 3
UNARY = ("Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Erf", "Softplus", "LeakyRelu", "Exp", "Identity")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")
REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceMax")
LIMIT = 1e4  # outputs beyond this are discarded: exp and products can blow up
#: absolute tolerance floor for the rewrites (~8 ulp of 1.0): intermediates are O(1) (normal inputs, bounded
#: constants), so an output that cancels to ~0 (the mean of a normalised row) carries their rounding.
ATOL = 1e-6


class RandomGraph:
    """A graph being built, its values with their shapes, and the draws that decide what comes next."""

    def __init__(self, draw, rng: np.random.Generator):
        self.draw = draw
        self.rng = rng
        self.g = tlc.Graph("random")
        self.values: list[Value] = []

    # ------------------------------------------------------------------ helpers
    def shape(self, v: Value) -> tuple:
        return tuple(self.g.shape_of(v))

    def add(self, op: str, *inputs: Value, **attrs) -> Value:
        out = self.g.add_node(op, list(inputs), **attrs)
        out = out if isinstance(out, Value) else out[0]
        self.values.append(out)
        return out

    def pick(self, pred=lambda shape: True) -> Value | None:
        fits = [v for v in self.values if pred(self.shape(v))]
        return self.draw(st.sampled_from(fits)) if fits else None

    def static_last(self, shape: tuple) -> bool:
        return len(shape) >= 1 and isinstance(shape[-1], int)

    def const(self, shape: tuple, kind: str = "random") -> Value:
        """A float32 constant: random in [0.5, 1.5) * sign, or one the algebraic rules look for (0, -0, 1, 4)."""
        special = {"zero": 0.0, "minus_zero": -0.0, "one": 1.0, "four": 4.0}
        if kind in special:
            return self.g.constant(np.full(shape, special[kind], np.float32))
        signs = np.where(self.rng.random(shape) < 0.5, -1.0, 1.0)
        return self.g.constant((self.rng.uniform(0.5, 1.5, shape) * signs).astype(np.float32))

    def operand_for(self, a: Value) -> Value:
        """A second operand for ``a``: another value of its shape, or a broadcasting or full constant."""
        shape = self.shape(a)
        same = [v for v in self.values if self.shape(v) == shape and v != a]
        choice = self.draw(st.sampled_from(["value", "scalar", "row", "full", "zero", "minus_zero", "one"]))
        if choice == "value" and same:
            return self.draw(st.sampled_from(same))
        if choice in ("zero", "minus_zero", "one"):
            return self.const((), choice)
        if choice == "row" and self.static_last(shape):
            return self.const((shape[-1],))
        if choice == "full" and all(isinstance(d, int) for d in shape):
            return self.const(shape)
        return self.const(())

    # ------------------------------------------------------------------ steps
    def unary(self) -> None:
        op = self.draw(st.sampled_from(UNARY))
        x = self.pick()
        if op == "Exp":
            x = self.add("Tanh", x)  # bounded first: exp of anything else may overflow
        self.add(op, x)

    def binary(self) -> None:
        a = self.pick()
        b = self.operand_for(a)
        op = self.draw(st.sampled_from(BINARY + ("Div",)))
        if op == "Div":  # by a constant only: dividing by a computed value near zero is ill-conditioned
            kind = self.draw(st.sampled_from(["random", "one", "four"]))
            row = self.static_last(self.shape(a)) and self.draw(st.booleans())
            b = self.const(self.shape(a)[-1:] if row else (), kind)
        first, second = (a, b) if self.draw(st.booleans()) or op == "Div" else (b, a)
        self.add(op, first, second)

    def matmul(self) -> None:
        x = self.pick(self.static_last)
        k = self.shape(x)[-1]
        m = self.draw(st.sampled_from([2, 4, 5]))
        w = self.g.constant((self.rng.standard_normal((k, m)) / math.sqrt(k)).astype(np.float32))
        y = self.add("MatMul", x, w)
        if self.draw(st.booleans()):
            self.add("Add", y, self.const((m,)))

    def reduce(self) -> None:
        x = self.pick(lambda s: len(s) >= 1)
        rank = len(self.shape(x))
        op = self.draw(st.sampled_from(REDUCTIONS))
        axis = self.draw(st.sampled_from([-1, self.draw(st.integers(0, rank - 1))]))
        keep = self.draw(st.sampled_from([0, 1])) if rank > 1 else 1
        self.add(op, x, self.g.constant(np.array([axis], np.int64)), keepdims=keep)

    def softmax(self) -> None:
        """Softmax, or written out: Exp(x - ReduceMax) / ReduceSum (or, unstable, without the max)."""
        x = self.pick(lambda s: len(s) >= 1)
        axis = self.draw(st.sampled_from([-1, 0]))
        form = self.draw(st.sampled_from(["op", "stable", "unstable"]))
        if form == "op":
            self.add("Softmax", x, axis=axis)
            return
        axes = self.g.constant(np.array([axis], np.int64))
        if form == "stable":
            x = self.g.add_node("Sub", [x, self.g.add_node("ReduceMax", [x, axes], keepdims=1)])
        else:
            x = self.g.add_node("Tanh", [x])
        e = self.g.add_node("Exp", [x])
        self.add("Div", e, self.g.add_node("ReduceSum", [e, axes], keepdims=1))

    def transpose(self) -> None:
        x = self.pick(lambda s: len(s) >= 2)
        rank = len(self.shape(x))
        perm = self.draw(st.permutations(range(rank)))
        y = self.add("Transpose", x, perm=list(perm))
        if self.draw(st.booleans()):  # the inverse: the pair cancels
            self.add("Transpose", y, perm=[int(i) for i in np.argsort(perm)])

    def reshape(self) -> None:
        x = self.pick(lambda s: len(s) >= 1 and self.static_last(s))
        shape = self.shape(x)
        last = shape[-1]
        if len(shape) >= 2 and isinstance(shape[-2], int) and self.draw(st.booleans()):
            target = [0] * (len(shape) - 2) + [-1]                      # merge the last two dims
        elif last % 2 == 0:
            target = [0] * (len(shape) - 1) + [2, last // 2]            # split the last dim
        else:
            target = [0] * (len(shape) - 1) + [last, 1]
        y = self.add("Reshape", x, self.g.constant(np.array(target, np.int64)))
        if self.draw(st.booleans()):  # and back, through a second Reshape
            back = [0 if isinstance(d, str) else d for d in shape]
            self.add("Reshape", y, self.g.constant(np.array(back, np.int64)))

    def layer_norm(self) -> None:
        x = self.pick(self.static_last)
        width = self.shape(x)[-1]
        axes = self.g.constant(np.array([-1], np.int64))
        mean = self.g.add_node("ReduceMean", [x, axes], keepdims=1)
        centered = self.g.add_node("Sub", [x, mean])
        square = self.g.add_node("Pow", [centered, self.g.constant(np.float32(2.0))])
        var = self.g.add_node("ReduceMean", [square, axes], keepdims=1)
        std = self.g.add_node("Sqrt", [self.g.add_node("Add", [var, self.g.constant(np.float32(1e-5))])])
        normed = self.add("Div", centered, std)
        if self.draw(st.booleans()):
            self.add("Add", self.add("Mul", normed, self.const((width,))), self.const((width,)))

    def gelu(self) -> None:
        x = self.pick()
        half = self.g.constant(np.float32(0.5))
        one = self.g.constant(np.float32(1.0))
        if self.draw(st.booleans()):
            erf = self.g.add_node("Erf", [self.g.add_node("Div", [x, self.g.constant(np.float32(math.sqrt(2)))])])
            self.add("Mul", self.g.add_node("Mul", [x, self.g.add_node("Add", [erf, one])]), half)
        else:
            cube = self.g.add_node("Pow", [x, self.g.constant(np.float32(3.0))])
            inner = self.g.add_node("Add", [x, self.g.add_node("Mul", [cube, self.g.constant(np.float32(0.044715))])])
            inner = self.g.add_node("Mul", [inner, self.g.constant(np.float32(math.sqrt(2 / math.pi)))])
            tanh = self.g.add_node("Tanh", [inner])
            self.add("Mul", self.g.add_node("Mul", [x, half]), self.g.add_node("Add", [tanh, one]))

    def power(self) -> None:
        x = self.add("Tanh", self.pick())
        exponent = self.draw(st.sampled_from([0.5, 1.0, 2.0, 3.0, -1.0]))
        if exponent in (0.5, -1.0):
            x = self.add("Add", self.add("Abs", x), self.g.constant(np.float32(0.5)))
        self.add("Pow", x, self.g.constant(np.float32(exponent)))

    def constant_chain(self) -> None:
        """A subexpression of constants only, used by a value: fold's work."""
        x = self.pick(self.static_last)
        width = self.shape(x)[-1]
        c = self.g.add_node("Mul", [self.const((width,)), self.const(())])
        c = self.g.add_node(self.draw(st.sampled_from(["Exp", "Neg", "Abs"])), [c])
        self.add("Add", x, self.g.add_node("Reshape", [c, self.g.constant(np.array([1, width], np.int64))])
                 if len(self.shape(x)) >= 2 else c)

    def repeat(self) -> None:
        """The same computation twice (CSE's work), combined so that both copies are used."""
        x = self.pick()
        op = self.draw(st.sampled_from(["Relu", "Tanh", "Sigmoid"]))
        self.add("Sub", self.g.add_node(op, [x]), self.g.add_node(op, [x]))

    def passthrough(self) -> None:
        """Ops that change nothing: Identity, inference Dropout, Neg(Neg), a Cast to float32."""
        x = self.pick()
        op = self.draw(st.sampled_from(["Identity", "Dropout", "NegNeg", "Cast"]))
        if op == "NegNeg":
            self.add("Neg", self.add("Neg", x))
        elif op == "Cast":
            self.add("Cast", x, to=1)
        else:
            self.add(op, x)

    def shape_noops(self) -> None:
        """Layout ops that may or may not change anything: Unsqueeze/Squeeze pairs (same or other axes), a Slice
        of everything or of a part, Concat of one or two values, Expand to the own or a bigger shape."""
        x = self.pick(lambda s: len(s) >= 1)
        shape = self.shape(x)
        rank = len(shape)
        op = self.draw(st.sampled_from(["unsqueeze", "squeeze", "slice", "concat", "expand"]))
        if op == "unsqueeze":
            axis = self.draw(st.integers(-rank - 1, rank))
            other = self.draw(st.sampled_from([axis, 0]))
            up = self.add("Unsqueeze", x, self.g.constant(np.array([axis], np.int64)))
            if (other % (rank + 1)) == (axis % (rank + 1)) or self.draw(st.booleans()):
                self.add("Squeeze", up, self.g.constant(np.array([axis], np.int64)))
        elif op == "squeeze" and 1 in shape:
            axis = shape.index(1)
            down = self.add("Squeeze", x, self.g.constant(np.array([axis], np.int64)))
            self.add("Unsqueeze", down, self.g.constant(np.array([axis], np.int64)))
        elif op == "slice" and self.static_last(shape):
            end = self.draw(st.sampled_from([shape[-1], 2**31 - 1, max(1, shape[-1] - 1)]))
            self.add("Slice", x, self.g.constant(np.array([0], np.int64)), self.g.constant(np.array([end], np.int64)),
                     self.g.constant(np.array([-1], np.int64)))
        elif op == "concat":
            inputs = [x] if self.draw(st.booleans()) else [x, x]
            self.add("Concat", *inputs, axis=-1)
        elif op == "expand" and all(isinstance(d, int) for d in shape):
            target = shape if self.draw(st.booleans()) else (2,) + shape
            source = x if self.draw(st.booleans()) else self.const(shape[-1:])
            self.add("Expand", source, self.g.constant(np.array(target, np.int64)))
        else:
            self.add("Identity", x)

    def dead(self) -> None:
        """A branch no output needs."""
        self.g.add_node("Relu", [self.pick()])

    STEPS = ("unary", "binary", "matmul", "reduce", "softmax", "transpose", "reshape", "layer_norm", "gelu",
             "power", "constant_chain", "repeat", "passthrough", "shape_noops", "dead")


class Drawn:
    """The graph hypothesis shows when a case fails: the text IR."""

    def __init__(self, graph: tlc.Graph, feeds: dict[str, np.ndarray]):
        self.graph = graph
        self.feeds = feeds

    def __repr__(self) -> str:
        return f"\n{self.graph}"


@st.composite
def random_graphs(draw) -> Drawn:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    r = RandomGraph(draw, rng)
    rows = draw(st.sampled_from([1, 3, SYMBOL]))
    shape = draw(st.sampled_from([(rows, 4), (rows, 2, 6), (rows, 8)]))
    feeds = {}
    for name in ["x", "y"][: draw(st.integers(1, 2))]:
        r.values.append(r.g.input(name, "float32", shape))
        concrete = tuple(SYMBOL_SIZE if d == SYMBOL else d for d in shape)
        feeds[name] = rng.standard_normal(concrete).astype(np.float32)
    for _ in range(draw(st.integers(1, 12))):
        getattr(r, draw(st.sampled_from(RandomGraph.STEPS)))()
    computed = [v for v in r.values if r.g.producer(v).op != "Input"]
    assume(computed)
    outputs = [computed[-1]] + draw(st.lists(st.sampled_from(computed), max_size=2))
    for i, v in enumerate(dict.fromkeys(outputs)):
        r.g.output(v, f"out{i}")
    r.g.verify()
    return Drawn(r.g, feeds)


def well_conditioned(drawn: Drawn) -> bool:
    outputs = tlc.reference.run(drawn.graph, drawn.feeds).values()
    return all(np.isfinite(a).all() and np.abs(a).max(initial=0) < LIMIT for a in outputs)


def check_random(drawn: Drawn) -> None:
    """Every level and every pass alone; then -O2 with fast-math (its rewrites change rounding only)."""
    assume(well_conditioned(drawn))
    check_model(drawn.graph, drawn.feeds, "random graph", expect_change=False, atol=ATOL)
    want = tlc.reference.run(drawn.graph, drawn.feeds)
    check_pipeline(drawn.graph, drawn.feeds, want, "random graph -O2 fast-math", opt_level=2, atol=ATOL,
                   options=PassOptions(fast_math=True))


COMMON = dict(deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


@settings(max_examples=30, **COMMON)
@given(random_graphs())
def test_random_graphs_keep_their_outputs(drawn):
    check_random(drawn)


@pytest.mark.slow
@settings(max_examples=250, **COMMON)
@given(random_graphs())
def test_many_random_graphs_keep_their_outputs(drawn):
    check_random(drawn)
