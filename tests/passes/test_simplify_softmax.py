"""simplify, rule set ``softmax``: Exp(x - max) / sum -> Softmax(axis); the unstable form only with fast_math."""

from __future__ import annotations

import numpy as np
import pytest

import tlc

try:
    from .simplify_testlib import check_rewrite, temporary_ops
except ImportError:
    from simplify_testlib import check_rewrite, temporary_ops

TOL = {"exact": False, "rtol": 1e-6, "atol": 1e-7, "specials": False}
STABLE = ["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"]


@pytest.fixture(autouse=True, scope="module")
def _ops():
    with temporary_ops():
        yield


def softmax_graph(axis=-1, max_axes=None, stable=True, max_of=None, shape=("N", 3, 6), exp_used=False):
    g = tlc.Graph("softmax")
    x = g.input("x", "float32", shape)
    other = g.input("x2", "float32", shape) if max_of == "other" else x
    axes = g.constant(np.asarray(axis if isinstance(axis, list) else [axis], np.int64))
    if stable:
        m = g.add_node("ReduceMax", [other, g.constant(np.asarray(max_axes or [axis], np.int64))])
        e = g.add_node("Exp", [g.add_node("Sub", [x, m])], name="exp")
    else:
        e = g.add_node("Exp", [x], name="exp")
    g.output(g.add_node("Div", [e, g.add_node("ReduceSum", [e, axes])]), "y")
    if exp_used:
        g.output(e, "e")
    return g


@pytest.mark.parametrize("axis, want", [(-1, -1), (1, -2), (2, -1)])
def test_stable_softmax_is_recognized(axis, want, rng):
    after = check_rewrite(softmax_graph(axis), "softmax", ["Softmax"], rng, **TOL)
    assert after.ops()[0].attrs == {"axis": want}


@pytest.mark.parametrize("kwargs", [{"max_axes": [1]}, {"axis": [1, 2]}, {"max_of": "other"}, {"exp_used": True}])
def test_near_misses_stay(kwargs, rng):
    check_rewrite(softmax_graph(**kwargs), "softmax", STABLE, rng, fires=False, **TOL)


def test_unstable_softmax_needs_fast_math(rng):
    g = softmax_graph(stable=False)
    check_rewrite(g, "softmax-unstable", ["Exp", "ReduceSum", "Div"], rng, fires=False, **TOL)
    check_rewrite(g, "softmax-unstable", ["Softmax"], rng, fast_math=True, **TOL)
