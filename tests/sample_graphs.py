"""Graphs that exercise every feature a saved graph must keep, for the text and GraphML round-trip tests.

``kitchen_sink()`` is hand-built: every dtype, every attribute kind, odd names, multiple and missing
outputs/inputs, fused bodies (nested). ``elementwise_graphs()`` is a hypothesis strategy drawing random
graphs from the registered elementwise ops (asked of the registry, not listed here).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tlc  # noqa: F401  (registers the ops)
from tlc.ir.graph import TLC_DOMAIN, Graph
from tlc.ir.types import DTYPES, ML_DTYPES, ML_FLOAT_DTYPES, TensorType, np_dtype
from tlc.ops import Trait, all_ops

#: A name no format may trust: quotes, escapes, newlines, code, controls, non-ASCII, lone surrogates (also two
#: that JSON would merge into one character).
WEIRD = "we\"ird\n\tname \\ __import__('os').system(\"echo pwned\") #x é ✓ \u2028\x00\x01\x7f\r\ud800 \ud83d\ude00 end "


def small_arrays() -> list[np.ndarray]:
    """One array per dtype, special values, 0-d, empty, and some large enough to be stored outside."""
    arrays = [np.arange(6).astype(np_dtype(d)).reshape(2, 3) if d not in ("bool", "string") else None
              for d in DTYPES]
    arrays = [a for a in arrays if a is not None]
    arrays += [
        np.array([True, False, True]),
        np.array(["a", "", WEIRD, "ü"], dtype=object),
        np.array([0.1, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1.7976931348623157e308], np.float64),
        np.array([0.1, -0.0, np.inf, np.nan, 1e-45, 3.4028235e38], np.float32),
        np.array([0.1, 65504, -0.0, np.nan, 6e-8], np.float16),
        np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64),
        np.array([np.iinfo(np.uint64).max], np.uint64),
        np.array(2.5, np.float32),                       # 0-d
        np.array("scalar", dtype=object),                # 0-d string
        np.zeros((0, 3), np.float32),                    # empty
        np.zeros((2, 0), dtype=object),                  # empty string
        np.linspace(-1, 1, 60, dtype=np.float32).reshape(3, 4, 5),   # large: external
        np.arange(40, dtype=np.int64),                  # large: external
        np.arange(20) % 3 == 0,                          # large bool
        np.array([f"s{i}" for i in range(30)], dtype=object),  # large string: always inline
    ]
    return arrays


def fused_body(depth: int = 0) -> Graph:
    body = Graph("body" if depth == 0 else f"inner {depth}")
    a = body.input("a", "float32", ("N", 4))
    b = body.input("b", "float32", (4,))
    s = body.add_node("Add", [a, b])
    if depth == 0:
        inner = fused_body(depth + 1)
        s = body.add_node("Fused", [s, b], domain=TLC_DOMAIN, body=inner, kind="elementwise")[1]
    r = body.add_node("Relu", [s])
    body.output(r, "r")
    body.output(s, "s")
    return body


def kitchen_sink() -> Graph:
    g = Graph(WEIRD, opset={"": 21, "tlc": 1, "ai.onnx.ml": 3, "com.microsoft": 1})
    g.doc = 'graph doc with "quotes"\nand two lines'
    g.producer_name, g.producer_version = "pytorch", "2.3.0"
    g.metadata = {"author": "ü", "": "empty key", "k with space": "v\n", WEIRD: WEIRD}
    x = g.input("x", "float32", ("N", 4))
    odd = g.input("conv1/7x7_s2:0", "float16", None)              # unknown rank, quoted name
    dims = g.input(WEIRD, "string", ("batch size", None, "?", 0, "N"))  # quoted symbols, unknown dim
    g.input("flag", "bool", ())
    consts = [g.constant(a, name=f"c{i}") for i, a in enumerate(small_arrays())]
    b = g.constant(np.ones(4, np.float32), name="b")
    twice = g.add_node("Add", [x, x], name="add twice", doc="same value on both ports")
    clip = g.add_node("Clip", [twice, None, g.constant(np.float32(6), name="six")])
    fused = g.add_node("Fused", [clip, b], domain=TLC_DOMAIN, body=fused_body(), kind="elementwise")
    top = g.add_node("TopK", [odd, consts[6]], domain="custom", output_names=["values", "indices"],
                     infer=False)
    g.set_type(top[0], TensorType("float16", None))                    # one typed, one untyped output
    sparse = g.add_node("Sparse", [x, None, None], domain="custom", num_outputs=1, infer=False)
    g.producer(sparse).num_inputs = 3                                  # trailing missing inputs kept
    g.add_node("Print", [dims], domain="custom", num_outputs=0, infer=False, name="printer")  # no outputs
    for op, domain in [("return", ""), ("name", ""), ("weird op", "my domain"), ("Op.v2", "x"),
                       ("LabelEncoder", "ai.onnx.ml"), ("", "")]:
        g.add_node(op, [x], domain=domain, name=f"{domain}:{op}", output_names=[f"{domain}/{op}"],
                   infer=False)
    g.add_node("Identity", [x], output_names=[""], name="empty value name", infer=False)
    everything = g.add_node(
        "Everything", [x, fused[0], None, top[1]], domain="custom", infer=False, name=WEIRD + "node",
        output_names=[WEIRD + "out"], doc=WEIRD)
    g.producer(everything).attrs = {
        "i": -7, "big": 2**62, "f": 0.1, "neg0": -0.0, "inf": float("inf"), "ninf": float("-inf"),
        "nan": float("nan"), "tiny": 5e-324, "f_as_int": 3, "s": WEIRD, "empty_s": "", "ints": [1, -2, 3],
        "empty": [], "floats": [1.5, -0.0, float("inf"), float("nan")], "mixed": [1, 2.5],
        "strings": ["a", "", WEIRD], "t": np.array([[1, 2], [3, 4]], np.int32),
        "big_t": np.arange(100, dtype=np.float64), "tensors": [np.array(1.5, np.float32), np.array([True])],
        "g": fused_body(1), "graphs": [fused_body(1), fused_body(0)], "flag": True, "weird key!": 1,
        WEIRD: WEIRD, "nested": [[1, 2], ["a"], []]}
    g.set_type(everything, TensorType("float32", ("N", None)))
    g.output(fused[0], "relu out")
    g.output(x, "x as output")                    # an Input as output: the value keeps its name
    g.output(fused[1], "s")
    g.output(fused[1], "s again")                 # one value output twice
    g.output(everything)
    g.output(top[0], WEIRD)
    return g


# ---------------------------------------------------------------------------- hypothesis
_names = st.text(st.characters(codec="utf-8"), max_size=6)
_dims = st.one_of(st.integers(0, 7), st.sampled_from(["N", "B", "seq_len", "a b", "?", "é"]), st.none())
_types = st.one_of(st.none(), st.builds(TensorType, st.sampled_from(DTYPES),
                                        st.one_of(st.none(), st.lists(_dims, max_size=3).map(tuple))))
_ELEMENTWISE = [op for op in all_ops() if op.has(Trait.ELEMENTWISE)]


def _attr_values(kind: str):
    scalar = {"int": st.integers(-2**63, 2**63 - 1),
              "float": st.one_of(st.floats(), st.floats(width=32), st.integers(-5, 5)),
              "string": _names}
    if kind in scalar:
        return scalar[kind]
    if kind.endswith("s") and kind[:-1] in scalar:
        return st.lists(scalar[kind[:-1]], max_size=4)
    raise AssertionError(f"no strategy for attribute kind {kind}")


def _string_lists(n: int):
    return st.lists(_names, min_size=n, max_size=n)


def _arrays():
    def arrays_of(dtype: str):
        shape = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
        if dtype == "string":
            return shape.flatmap(lambda s: _string_lists(int(np.prod(s)))
                                 .map(lambda xs, s=s: np.array(xs, dtype=object).reshape(s)))
        if dtype in ML_DTYPES:  # hypothesis draws numpy's own types: drawn as float32 / int8, then converted
            base = np.float32 if dtype in ML_FLOAT_DTYPES else np.int8
            return hnp.arrays(base, shape).map(lambda a, d=dtype: a.astype(np_dtype(d)))
        return hnp.arrays(np.dtype(dtype), shape)

    return st.sampled_from(DTYPES).flatmap(arrays_of)


@st.composite
def elementwise_graphs(draw) -> Graph:
    """A random graph of registered elementwise ops and constants, with random names, attributes and types."""
    g = Graph(draw(_names))
    counter = iter(range(10**6))

    def fresh() -> str:
        return draw(st.one_of(st.just(f"v{next(counter)}"), _names.map(lambda s: f"{s}#{next(counter)}")))

    values = [g.input(fresh(), draw(st.sampled_from(DTYPES)), draw(st.lists(_dims, max_size=3)))
              for _ in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(0, 2))):
        values.append(g.constant(draw(_arrays()), name=fresh()))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(_ELEMENTWISE))
        lo, hi = op.inputs
        count = draw(st.integers(lo, lo + 2 if hi is None else hi))
        ins = [draw(st.sampled_from(values)) for _ in range(count)]
        ins = [None if i >= lo and draw(st.booleans()) else v for i, v in enumerate(ins)]
        attrs = {k: draw(_attr_values(a.kind))
                 for k, a in op.attrs.items() if a.required or draw(st.booleans())}
        out = g.add_node(op.name, ins, domain=op.domain, infer=False, output_names=[fresh()],
                         name=draw(st.one_of(st.none(), _names)), doc=draw(st.one_of(st.just(""), _names)),
                         **attrs)
        g.set_type(out, draw(_types))
        values.append(out)
    for v in draw(st.lists(st.sampled_from(values), min_size=1, max_size=3)):
        name = draw(st.one_of(st.none(), _names.map(lambda s: f"out:{s}#{next(counter)}")))
        if (name or g.value_name(v)) not in [n for _, n in g.outputs]:
            g.output(v, name)
    return g
