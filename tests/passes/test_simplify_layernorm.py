"""simplify, rule set ``layernorm``: decomposed LayerNorm (as exporters write it) -> LayerNormalization, with
and without gamma/beta, Pow or Mul for the square; and the near misses that must stay decomposed."""

from __future__ import annotations

import numpy as np
import pytest

import tlc
from tlc.passes.rewrite import Tracer

try:
    from .simplify_testlib import check_rewrite, simplify, temporary_ops
except ImportError:
    from simplify_testlib import check_rewrite, simplify, temporary_ops

TOL = {"exact": False, "rtol": 1e-4, "atol": 1e-5, "specials": False}
D = 16


@pytest.fixture(autouse=True, scope="module")
def _ops():
    with temporary_ops():
        yield


def decomposed_layernorm(g, x, rng, *, gamma="const", beta="const", square="pow", sqrt="sqrt", eps=1e-5,
                         axes=(-1,), axes2=None, other_x=None, gamma_first=False, norm_shape=(D,)):
    """The ops torch.onnx (opset < 17) and hand-written models produce for nn.LayerNorm."""
    def i64(v):
        return g.constant(np.asarray(v, np.int64))
    mean = g.add_node("ReduceMean", [x, i64(list(axes))], name="mean")
    d = g.add_node("Sub", [other_x or x, mean], name="sub")
    sq = g.add_node("Pow", [d, g.constant(np.float32(2.0))]) if square == "pow" else g.add_node("Mul", [d, d])
    var = g.add_node("ReduceMean", [sq, i64(list(axes2 or axes))], name="var")
    eps_v = g.input("eps", "float32", ()) if eps == "input" else g.constant(np.float32(eps), name="eps")
    ve = g.add_node("Add", [var, eps_v])
    std = g.add_node("Sqrt", [ve]) if sqrt == "sqrt" else g.add_node("Pow", [ve, g.constant(np.float32(0.5))])
    y = g.add_node("Div", [d, std], name="norm")
    if gamma:
        gv = g.constant(rng.uniform(0.5, 1.5, norm_shape).astype(np.float32), name="gamma") if gamma == "const" \
            else g.input("gamma", "float32", norm_shape)
        y = g.add_node("Mul", [gv, y] if gamma_first else [y, gv])
    if beta:
        y = g.add_node("Add", [y, g.constant(rng.standard_normal(norm_shape).astype(np.float32), name="beta")])
    return y


def ln_graph(rng, shape=("N", 5, D), **kwargs):
    g = tlc.Graph("ln")
    x = g.input("x", "float32", shape)
    if kwargs.get("other_x") == "input":
        kwargs["other_x"] = g.input("x2", "float32", shape)
    g.output(decomposed_layernorm(g, x, rng, **kwargs), "y")
    return g


@pytest.mark.parametrize("kwargs, rule", [
    ({}, "layernorm-affine"),
    ({"square": "mul", "gamma_first": True}, "layernorm-affine"),
    ({"sqrt": "pow"}, "layernorm-affine"),
    ({"gamma": "input"}, "layernorm-affine"),
    ({"beta": None}, "layernorm-scale"),
    ({"gamma": None, "beta": None}, "layernorm"),
])
def test_decomposed_layernorm_is_recognized(kwargs, rule, rng):
    g = ln_graph(rng, **kwargs)
    after = check_rewrite(g, rule, ["LayerNormalization"], rng, **TOL)
    ln = after.ops()[0]
    assert ln.attrs["axis"] == -1 and ln.attrs["epsilon"] == pytest.approx(1e-5)
    assert len(after.inputs_of(ln)) == (3 if kwargs.get("beta", "const") else 2)
    assert after.value_name(after.outputs[0][0]) == "y"


def test_two_trailing_axes_and_broadcast_gamma(rng):
    g = ln_graph(rng, shape=("N", 4, 8), axes=(-2, 2), norm_shape=(1, 8))
    after = check_rewrite(g, "layernorm-affine", ["LayerNormalization"], rng, **TOL)
    ln = after.ops()[0]
    assert ln.attrs["axis"] == -2
    assert after.const_value(after.inputs_of(ln)[1]).shape == (4, 8), "gamma expanded to the normalized shape"


@pytest.mark.parametrize("kwargs, reason", [
    ({"axes": (1,)}, "axes [1] are not the trailing axes"),
    ({"axes2": (-2,)}, "the two ReduceMeans reduce different axes"),
    ({"eps": "input"}, "expected a constant"),
    ({"other_x": "input"}, "'x' is bound to 'x2' but here it would be 'x'"),
])
def test_near_misses_stay_decomposed(kwargs, reason, rng):
    g = ln_graph(rng, **kwargs)
    tracer = Tracer()
    after, stats = simplify(g, tracer=tracer)
    assert "LayerNormalization" not in after.op_counts() and not any(k.startswith("layernorm") for k in stats)
    assert any(m.rule == "layernorm-affine" and reason in m.reason for m in tracer.near_misses), tracer.report()


def test_intermediate_used_elsewhere_stays(rng):
    g = ln_graph(rng)
    g.output(g.value("mean"), "mean_out")
    tracer = Tracer()
    after, stats = simplify(g, tracer=tracer)
    assert "LayerNormalization" not in after.op_counts()
    assert any("ReduceMean 'mean' is also used by 'a graph output'" in m.reason for m in tracer.near_misses)


def test_gamma_that_broadcasts_x_stays(rng):
    g = ln_graph(rng, gamma="input", norm_shape=(2, 1, D), beta=None)
    after, _ = simplify(g)
    assert [n.op for n in after.ops()] == ["LayerNormalization", "Mul"], "LN without gamma; the Mul stays"
