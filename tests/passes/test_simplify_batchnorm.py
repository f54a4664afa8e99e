"""simplify, rule set ``batchnorm``: Conv + BatchNormalization folded into the Conv, BatchNormalization alone
into Mul + Add; not for non-constant parameters, training mode, or a Conv whose output is used elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

import tlc

try:
    from .simplify_testlib import check_rewrite, temporary_ops
except ImportError:
    from simplify_testlib import check_rewrite, temporary_ops

TOL = {"exact": False, "rtol": 1e-5, "atol": 1e-5, "specials": False}


@pytest.fixture(autouse=True, scope="module")
def _ops():
    with temporary_ops():
        yield


def bn_params(g, rng, c, var_input=False):
    scale = g.constant(rng.uniform(0.5, 2, c).astype(np.float32), name="scale")
    bias = g.constant(rng.standard_normal(c).astype(np.float32), name="bias")
    mean = g.constant(rng.standard_normal(c).astype(np.float32), name="mean")
    var = g.input("var", "float32", (c,)) if var_input else g.constant(rng.uniform(0.1, 3, c).astype(np.float32),
                                                                        name="var")
    return [scale, bias, mean, var]


def conv_bn(rng, conv_bias=True, group=1, conv_used_elsewhere=False, strides=None, var_input=False):
    g = tlc.Graph("convbn")
    x = g.input("x", "float32", (2, 4, 7, 7))
    w = g.constant(rng.standard_normal((6, 4 // group, 3, 3)).astype(np.float32), name="w")
    ins = [x, w] + ([g.constant(rng.standard_normal(6).astype(np.float32), name="b")] if conv_bias else [])
    attrs = {"group": group} if group != 1 else {}
    if strides:
        attrs["strides"] = strides
    conv = g.add_node("Conv", ins, **attrs)
    g.output(g.add_node("BatchNormalization", [conv] + bn_params(g, rng, 6, var_input), epsilon=1e-3), "y")
    if conv_used_elsewhere:
        g.output(conv, "features")
    return g


@pytest.mark.parametrize("conv_bias, group, strides", [(True, 1, None), (False, 1, [2, 2]), (True, 2, None)])
def test_conv_bn_folds_into_conv(conv_bias, group, strides, rng):
    g = conv_bn(rng, conv_bias, group, strides=strides)
    after = check_rewrite(g, "conv-bn", ["Conv"], rng, **TOL)
    conv = after.ops()[0]
    assert conv.attrs == g.ops()[0].attrs, "the Conv keeps its attributes"
    assert after.num_uses(g.input_value("x")) == 1 and len(after.inputs_of(conv)) == 3


def test_conv_used_elsewhere_keeps_conv_and_bn_becomes_mul_add(rng):
    g = conv_bn(rng, conv_used_elsewhere=True)
    check_rewrite(g, "bn-to-mul-add", ["Conv", "Mul", "Add"], rng, **TOL)


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")  # random variances go negative
def test_conv_bn_with_non_constant_variance_stays(rng):
    check_rewrite(conv_bn(rng, var_input=True), "conv-bn", ["Conv", "BatchNormalization"], rng, fires=False,
                  **TOL)


@pytest.mark.parametrize("shape", [("N", 3, 5, 5), ("N", 3), (2, 3, 4)])
def test_batchnorm_alone_becomes_mul_add(shape, rng):
    g = tlc.Graph("bn")
    x = g.input("x", "float32", shape)
    g.output(g.add_node("BatchNormalization", [x] + bn_params(g, rng, 3)), "y")
    after = check_rewrite(g, "bn-to-mul-add", ["Mul", "Add"], rng, **TOL)
    mul = after.ops()[0]
    assert after.const_value(after.inputs_of(mul)[1]).shape == (3,) + (1,) * (len(shape) - 2)


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")  # random variances go negative
def test_batchnorm_with_non_constant_variance_stays(rng):
    g = tlc.Graph("bn")
    x = g.input("x", "float32", ("N", 3, 5, 5))
    g.output(g.add_node("BatchNormalization", [x] + bn_params(g, rng, 3, var_input=True)), "y")
    check_rewrite(g, "bn-to-mul-add", ["BatchNormalization"], rng, fires=False, **TOL)
