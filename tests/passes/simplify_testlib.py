"""Helpers for the rewrite/simplify tests: run a pass on a copy, compare numbers before and after.

TEMPORARY: ``temporary_ops`` registers minimal ONNX-semantics versions of ops another engineer is adding to
``tlc/ops`` (Gemm, Conv, BatchNormalization, LayerNormalization, ReduceMean, ReduceMax, Transpose, Squeeze,
Unsqueeze, Concat, Slice, Expand), only those not registered yet, and removes them again after the tests.
Once they land on main this shim registers nothing; delete it then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

import tlc
from tlc.ir.types import TensorType
from tlc.ops import registry
from tlc.ops.infer import broadcast_shapes, normalize_axes
from tlc.ops.registry import Attr, OpDef, Trait
from tlc.passes.base import PassOptions
from tlc.passes.rewrite import Tracer
from tlc.passes.simplify import SimplifyPass

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


def _reduce(fn):
    def ref(x, axes=None, *, keepdims, noop_with_empty_axes):
        ax = tuple(range(x.ndim)) if axes is None else tuple(int(a) for a in axes.ravel())
        return np.asarray(fn(x, axis=ax, keepdims=bool(keepdims))).astype(x.dtype)
    return ref


def _reduce_infer(ctx):
    t, axes = ctx.type(0), ctx.const(1)
    if axes is None:
        return [TensorType(t.dtype, (1,) * t.rank)]
    ax = normalize_axes(axes.ravel().tolist(), t.rank)
    return [TensorType(t.dtype, tuple(1 if i in ax else d for i, d in enumerate(t.shape)))]


def _transpose_infer(ctx):
    t = ctx.type(0)
    perm = ctx.attrs["perm"] or list(reversed(range(t.rank)))
    return [TensorType(t.dtype, tuple(t.shape[p] for p in perm))]


def _unsqueeze_infer(ctx):
    t = ctx.type(0)
    rank = t.rank + ctx.const(1).size
    axes = normalize_axes(ctx.const(1).ravel().tolist(), rank)
    dims = iter(t.shape)
    return [TensorType(t.dtype, tuple(1 if i in axes else next(dims) for i in range(rank)))]


def _squeeze_infer(ctx):
    t = ctx.type(0)
    axes = normalize_axes(ctx.const(1).ravel().tolist(), t.rank)
    return [TensorType(t.dtype, tuple(d for i, d in enumerate(t.shape) if i not in axes))]


def _concat_infer(ctx):
    ts = [ctx.type(i) for i in range(ctx.num_inputs)]
    axis = ctx.attrs["axis"] % ts[0].rank
    dims = [t.shape[axis] for t in ts]
    total = sum(dims) if all(isinstance(d, int) for d in dims) else None
    return [TensorType(ts[0].dtype, tuple(total if i == axis else d for i, d in enumerate(ts[0].shape)))]


def _slice(x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[int(a)] = slice(int(s), int(e), int(st))
    return x[tuple(index)]


def _slice_infer(ctx):
    t = ctx.type(0)
    if not t.is_static or any(ctx.const(i) is None for i in range(1, ctx.num_inputs)):
        return [TensorType(t.dtype, (None,) * t.rank)]
    consts = [ctx.const(i) for i in range(1, ctx.num_inputs)]
    return [TensorType(t.dtype, _slice(np.zeros(t.shape), *consts).shape)]


def _expand_infer(ctx):
    t, shape = ctx.type(0), ctx.const(1)
    return [TensorType(t.dtype, broadcast_shapes(t.shape, tuple(int(d) for d in shape)))]


def _gemm(a, b, c=None, *, alpha, beta, transA, transB):
    a, b = (a.T if transA else a), (b.T if transB else b)
    y = np.asarray(alpha, a.dtype) * (a @ b)
    return y if c is None else (y + np.asarray(beta, a.dtype) * c).astype(a.dtype)


def _gemm_infer(ctx):
    a, b = ctx.shape(0), ctx.shape(1)
    m = a[1] if ctx.attrs["transA"] else a[0]
    n = b[0] if ctx.attrs["transB"] else b[1]
    return [TensorType(ctx.type(0).dtype, (m, n))]


def _conv(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """2-D convolution (NCHW), group and stride supported, no padding or dilation (tests only)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    sh, sw = strides or (1, 1)
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    out = np.zeros((n, m, oh, ow), np.float64)
    per = m // group
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        ws = w[g * per:(g + 1) * per].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]
                out[:, g * per:(g + 1) * per] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out.astype(x.dtype)


def _conv_infer(ctx):
    (n, _, h, w), (m, _, kh, kw) = ctx.shape(0), ctx.shape(1)
    sh, sw = ctx.attrs["strides"] or (1, 1)
    return [TensorType(ctx.type(0).dtype, (n, m, (h - kh) // sh + 1, (w - kw) // sw + 1))]


def _bn(x, scale, bias, mean, var, *, epsilon, momentum, training_mode):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    r = lambda a: a.reshape(shape)
    return ((x - r(mean)) / np.sqrt(r(var) + np.asarray(epsilon, x.dtype)) * r(scale) + r(bias)).astype(x.dtype)


def _layernorm(x, scale, bias=None, *, axis, epsilon, stash_type):
    axes = tuple(range(axis % x.ndim, x.ndim))
    xf = x.astype(np.float32) if x.dtype != np.float64 else x
    mean = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (xf - mean) / np.sqrt(var + epsilon) * scale
    return (y if bias is None else y + bias).astype(x.dtype)


def _same(ctx):
    return [ctx.type(0)]


_TEMPORARY = [
    OpDef("ReduceMean", _reduce_infer, _reduce(np.mean), inputs=(1, 2),
          attrs={"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)},
          traits=PURE | {Trait.REDUCTION}),
    OpDef("ReduceMax", _reduce_infer, _reduce(np.max), inputs=(1, 2),
          attrs={"keepdims": Attr("int", 1), "noop_with_empty_axes": Attr("int", 0)},
          traits=PURE | {Trait.REDUCTION}),
    OpDef("Transpose", _transpose_infer, lambda x, *, perm: np.transpose(x, perm), attrs={"perm": Attr("ints")}),
    OpDef("Unsqueeze", _unsqueeze_infer, lambda x, axes: np.expand_dims(x, tuple(int(a) for a in axes)),
          inputs=(2, 2)),
    OpDef("Squeeze", _squeeze_infer, lambda x, axes: np.squeeze(x, tuple(int(a) for a in axes)), inputs=(2, 2)),
    OpDef("Concat", _concat_infer, lambda *xs, axis: np.concatenate(xs, axis), inputs=(1, None),
          attrs={"axis": Attr("int", registry.REQUIRED)}),
    OpDef("Slice", _slice_infer, _slice, inputs=(3, 5)),
    OpDef("Expand", _expand_infer, lambda x, s: x * np.ones(tuple(int(d) for d in s), x.dtype), inputs=(2, 2)),
    OpDef("Gemm", _gemm_infer, _gemm, inputs=(2, 3),
          attrs={"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0), "transA": Attr("int", 0),
                 "transB": Attr("int", 0)}),
    OpDef("Conv", _conv_infer, _conv, inputs=(2, 3),
          attrs={"auto_pad": Attr("string", "NOTSET"), "dilations": Attr("ints"), "group": Attr("int", 1),
                 "kernel_shape": Attr("ints"), "pads": Attr("ints"), "strides": Attr("ints")}),
    OpDef("BatchNormalization", _same, _bn, inputs=(5, 5),
          attrs={"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9), "training_mode": Attr("int", 0)}),
    OpDef("LayerNormalization", _same, _layernorm, inputs=(2, 3),
          attrs={"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5), "stash_type": Attr("int", 1)}),
]


@contextlib.contextmanager
def temporary_ops() -> Iterator[list[str]]:
    """Register the temporary ops that are still missing; remove them again on exit."""
    added = []
    for opdef in _TEMPORARY:
        if not registry.is_registered(opdef.name):
            registry.register(opdef)
            added.append(opdef.name)
    try:
        yield added
    finally:
        for name in added:
            del registry._REGISTRY[("", name)]


def simplify(graph: tlc.Graph, *, opt_level: int = 2, fast_math: bool = False,
             tracer: Tracer | None = None) -> tuple[tlc.Graph, dict[str, int]]:
    """Run ``simplify`` on a copy; returns (the new graph, the pass's stats). Verifies the result."""
    out = graph.copy()
    result = SimplifyPass(PassOptions(opt_level=opt_level, fast_math=fast_math), tracer=tracer).run(out)
    out.verify()
    assert result.changed == any(k not in ("nodes_removed", "unconverged") for k in result.stats)
    return out, result.stats


def ops(graph: tlc.Graph) -> list[str]:
    """The computing ops in topological order (no Input/Constant)."""
    return [n.op for n in graph.ops()]


def random_feeds(graph: tlc.Graph, rng: np.random.Generator, sizes: dict[str, int] | None = None,
                 specials: bool = False) -> dict[str, np.ndarray]:
    """Random inputs (normal floats, with ``specials`` some nan, ±inf, ±0 mixed in; small ints; bools False);
    symbolic dims take ``sizes``."""
    sizes = {"N": 3, **(sizes or {})}
    feeds = {}
    for node in graph.inputs:
        t = node.output_types[0]
        shape = tuple(d if isinstance(d, int) else sizes.get(d, 2) for d in t.shape)
        if t.dtype.startswith("float"):
            a = rng.standard_normal(shape).astype(t.dtype)
            if specials and a.size >= 6:
                flat = a.reshape(-1)
                flat[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30]
        elif t.dtype == "bool":
            a = np.zeros(shape, bool)   # flags such as Dropout's training_mode: off
        else:
            a = rng.integers(-5, 6, shape).astype(t.dtype)
        feeds[node.name] = a
    return feeds


def assert_same_numbers(before: tlc.Graph, after: tlc.Graph, feeds: dict[str, np.ndarray], *, exact: bool = True,
                        rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Run both graphs with the reference executor; bitwise equal (nan == nan, -0 != +0) or within tolerance."""
    want = tlc.reference.run(before, feeds)
    got = tlc.reference.run(after, feeds)
    assert list(want) == list(got)
    for name in want:
        w, g = want[name], got[name]
        assert w.dtype == g.dtype and w.shape == g.shape, (name, w.dtype, w.shape, g.dtype, g.shape)
        if exact:
            assert w.tobytes() == g.tobytes(), f"{name}: not bit-identical\n{w}\n{g}"
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=name)


def check_rewrite(graph: tlc.Graph, rule: str, expected_ops: list[str], rng: np.random.Generator, *,
                  fires: bool = True, exact: bool = True, opt_level: int = 2, fast_math: bool = False,
                  specials: bool = True, rtol: float = 1e-5, atol: float = 1e-6) -> tlc.Graph:
    """Simplify a copy of ``graph``; check that ``rule`` fired (or not), the ops left, and the numbers."""
    after, stats = simplify(graph, opt_level=opt_level, fast_math=fast_math)
    assert ops(after) == expected_ops, (ops(after), stats)
    if fires:
        assert stats.get(rule, 0) >= 1, stats
    else:
        assert rule not in stats, stats
    feeds = random_feeds(graph, rng, specials=specials)
    assert_same_numbers(graph, after, feeds, exact=exact, rtol=rtol, atol=atol)
    return after
