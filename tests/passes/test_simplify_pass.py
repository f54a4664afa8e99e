"""The ``simplify`` pass: rules by opt level and fast_math, stats, introspection, and a transformer block built the
way torch.onnx exports it (opset 14: decomposed LayerNorm, erf GELU) turned into LayerNormalization and Gelu,
checked against onnxruntime running the original model."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tlc
from tlc.io.onnx import from_onnx, to_onnx
from tlc.passes.base import PassOptions, get_pass
from tlc.passes.simplify import SimplifyPass, list_rules, rules_table

try:
    from .simplify_testlib import ops, simplify, temporary_ops
except ImportError:
    from simplify_testlib import ops, simplify, temporary_ops

D, HIDDEN = 16, 32


@pytest.fixture(autouse=True, scope="module")
def _ops():
    with temporary_ops():
        yield


class _Builder:
    """Emits ONNX nodes and initializers the way torch.onnx names them (``/ln/ReduceMean``, ``onnx::Add_12``)."""

    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def init(self, array) -> str:
        self.n += 1
        name = f"onnx::Const_{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def op(self, op, *inputs, **attrs) -> str:
        self.n += 1
        out = f"/{op}_{self.n}_output_0"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"/{op}_{self.n}", **attrs))
        return out

    def layernorm(self, x, eps=1e-5) -> str:
        mean = self.op("ReduceMean", x, axes=[-1])
        d = self.op("Sub", x, mean)
        var = self.op("ReduceMean", self.op("Pow", d, self.init(2.0)), axes=[-1])
        y = self.op("Div", d, self.op("Sqrt", self.op("Add", var, self.init(eps))))
        gamma, beta = self.rng.uniform(0.5, 1.5, D), self.rng.standard_normal(D)
        return self.op("Add", self.op("Mul", y, self.init(gamma)), self.init(beta))

    def linear(self, x, k, n) -> str:
        w = self.init(self.rng.standard_normal((k, n)) / math.sqrt(k))
        return self.op("Add", self.init(self.rng.standard_normal(n) * 0.1), self.op("MatMul", x, w))

    def gelu(self, x) -> str:   # torch.onnx's symbolic for nn.GELU (opset < 20)
        erf = self.op("Erf", self.op("Div", x, self.init(1.4142135381698608)))
        return self.op("Mul", self.op("Mul", x, self.op("Add", erf, self.init(1.0))), self.init(0.5))


def transformer_mlp_block(rng, batch_dims=("batch", "seq")):
    """x + fc2(gelu(fc1(ln1(x)))), then ln2: the MLP half of a pre-LN transformer block, as an ONNX model."""
    b = _Builder(rng)
    h = b.gelu(b.linear(b.layernorm("x"), D, HIDDEN))
    b.layernorm(b.op("Add", "x", b.linear(h, HIDDEN, D)))  # its last node writes the graph output y:
    b.nodes[-1].output[0] = "y"
    shape = [*batch_dims, D]
    graph = helper.make_graph(b.nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


@pytest.mark.parametrize("batch_dims, expected", [
    (("batch", "seq"), ["LayerNormalization", "MatMul", "Add", "Gelu", "MatMul", "Add", "Add",
                        "LayerNormalization"]),
    (("tokens",), ["LayerNormalization", "Gemm", "Gelu", "Gemm", "Add", "LayerNormalization"]),
])
def test_exported_transformer_block(batch_dims, expected, rng):
    model = transformer_mlp_block(rng, batch_dims)
    g, _ = from_onnx(model)
    after, stats = simplify(g)
    assert ops(after) == expected, ops(after)
    assert stats["layernorm-affine"] == 2 and stats["gelu-erf"] == 1
    assert stats.get("matmul-add-to-gemm", 0) == (2 if len(batch_dims) == 1 else 0)
    x = rng.standard_normal((2, 5, D) if len(batch_dims) == 2 else (7, D)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(tlc.reference.run(g, {"x": x})["y"], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tlc.reference.run(after, {"x": x})["y"], want, rtol=1e-4, atol=1e-5)
    assert after.outputs[0][1] == "y" and after.value_name(after.outputs[0][0]) == "y"
    exported = to_onnx(after)   # the simplified graph is valid ONNX and onnxruntime computes the same
    assert [n.op_type for n in exported.graph.node] == expected
    got = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)


def test_levels_select_rules(rng):
    g, _ = from_onnx(transformer_mlp_block(rng))
    at_o1, stats = simplify(g, opt_level=1)
    assert stats == {"pow-two": 2, "nodes_removed": 2}, "at -O1 only the exact Pow(d, 2) -> d*d; no recognition"
    assert "LayerNormalization" not in at_o1.op_counts()
    names = {level: {r.name for r in SimplifyPass(PassOptions(opt_level=level)).active_rules()} for level in range(4)}
    assert names[0] == set() and "mul-one" in names[1] and "gelu-erf" not in names[1]
    assert names[1] < names[2] == names[3] and "gelu-erf" in names[2]
    fast = {r.name for r in SimplifyPass(PassOptions(opt_level=2, fast_math=True)).active_rules()}
    assert fast - names[2] == {r.name for r in list_rules() if r.fast_math}


def test_second_run_changes_nothing(rng):
    g, _ = from_onnx(transformer_mlp_block(rng))
    once, _ = simplify(g)
    twice, stats = simplify(once)
    assert stats == {} and ops(twice) == ops(once)


def test_registered_and_introspectable():
    assert get_pass("simplify") is SimplifyPass
    rows = list_rules()
    assert len({r.name for r in rows}) == len(rows)
    assert all(r.description and r.rule_set and r.min_level in (1, 2) for r in rows)
    assert {r.rule_set for r in rows} == {"algebraic", "power", "batchnorm", "qdq", "gemm", "layernorm", "gelu",
                                          "softmax", "transformer", "arith"}
    table = rules_table().splitlines()
    assert len(table) == len(rows) and table[0].split()[:3] == ["identity", "algebraic", "-O1"]


def test_tracer_sees_the_same_rewrites_and_explains_the_rest(rng):
    from tlc.passes.rewrite import Tracer

    g, _ = from_onnx(transformer_mlp_block(rng))
    tracer = Tracer()
    traced, traced_stats = simplify(g, tracer=tracer)
    plain, plain_stats = simplify(g)
    assert traced_stats == plain_stats and ops(traced) == ops(plain)
    assert sorted(r for r, _ in tracer.applied) == sorted(
        r for r, n in plain_stats.items() if r != "nodes_removed" for _ in range(n))
    reasons = {m.rule: m.reason for m in tracer.near_misses}
    assert "kept as MatMul + Add" in reasons["matmul-add-to-gemm"]


def test_untyped_text_graph_is_typed_then_simplified(rng):
    from tlc.ir.text import parse_graph

    g = parse_graph("""graph @t {
      %x = Input : float32[N,4]
      %one = Constant {value = dense<float32[]> [1.0]}
      %a = Mul(%x, %one)
      %y = Relu(%a)
      return %y
    }""")
    assert g.type_of(g.value("a")) is None
    after, stats = simplify(g)
    assert stats["mul-one"] == 1 and ops(after) == ["Relu"] and str(after.type_of(after.value("y"))) == "float32[N,4]"
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(tlc.reference.run(after, {"x": x})["y"], np.maximum(x, 0))
