"""Special values through every path a compiled plan takes: NaN, +-inf, -0.0, subnormals, huge values, integer
overflow and division by zero, at -O1, -O2 and -O3 against the reference executor (-O0), and against onnxruntime
where it runs the model.

What must match the reference exactly: where NaN is, the sign of every infinity, subnormal results (never flushed
to zero without ``fast_math=True``), integer results bit for bit. Finite values within a few float32 ulps (the
math library's stated bounds, sums in another order). Where IEEE 754 or ONNX allow either answer, a test says so
beside the case rather than loosening the whole comparison:
- the sign of a zero computed by a sum (+0.0 + -0.0, a reduction or a product over signed zeros) is not
  compared, and onnxruntime's Relu(-0.0) is -0.0 (max(x, 0) may return either zero);
- Winograd convolutions mix the inputs of a tile before the products, so an infinite input may come out NaN
  where the direct sum gives +-inf (``test_winograd_conv_keeps_nan_and_may_turn_inf_into_nan``);
- onnxruntime's Sigmoid flushes tiny results to 0 and its Where picked +0.0 for -0.0 (its approximations, not
  ours), and casts of out-of-range floats to integers are undefined in ONNX (numpy's x86 answer is INT_MIN);
- onnxruntime's MaxPool with a NaN in a window returned NaN for a window without one and a smaller value for
  another, and its GlobalMaxPool drops NaN (seen here): its max pools are not compared; numpy's rule holds.
One compiled plan per level and family; each plan runs many cases at once (every pair of special values).
"""

from __future__ import annotations

import os
import warnings

import ml_dtypes
import numpy as np
import pytest

import tlc
from tlc.io.onnx import to_onnx
from tlc.ir.types import TensorType
from tlc.kernels import compile_group

LEVELS = (1, 2, 3)
SPECIAL_F32 = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 3e38, -3e38, 1.0, -1.0, 0.5, 88.8, -104.5,
               20.0, -20.0]
#: for sums of products (convolutions): values near float32's max overflow or not depending on the order of the
#: sum (IEEE-correct either way), so huge values there are 1e30
SPECIAL_SUMS = [1e30 if v == 3e38 else -1e30 if v == -3e38 else v for v in SPECIAL_F32]
SPECIAL = {
    "float32": SPECIAL_F32,
    "float64": SPECIAL_F32[:5] + [1e-310, -1e-310, 1e308, -1e308, 1.0, -1.0, 0.5, 709.9, -745.5, 20.0, -20.0],
    "float16": SPECIAL_F32[:5] + [1e-6, -1e-6, 65504, -65504, 1.0, -1.0, 0.5, 11.1, -17.5, 20.0, -20.0],
    "bfloat16": SPECIAL_F32,
}
ONNX_TYPE = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7, "bool": 9, "float16": 10, "float64": 11,
             "bfloat16": 16}


def np_type(dtype: str):
    return ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)


def reference(graph: tlc.Graph, feeds: dict) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # numpy's overflow / invalid warnings are the point here
        return tlc.reference.run(graph, feeds)


def compiled(graph: tlc.Graph, feeds: dict, levels=LEVELS, **options) -> dict[int, dict]:
    """Outputs of ``graph`` compiled (every kernel ready before the run) at each level."""
    results = {}
    for level in levels:
        plan = tlc.compile(graph, opt_level=level, jit="eager", **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results[level] = plan.run(feeds)
    return results


def onnxruntime(graph: tlc.Graph, feeds: dict) -> dict:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def assert_special_equal(got, want, where: str, rtol: float = 4e-7, atol: float = 0.0, zero_sign: bool = True,
                         inf_may_be_nan: bool = False) -> None:
    """``got`` against ``want``: same dtype and shape; NaN exactly where ``want`` has NaN; infinities of the same
    sign; subnormal results kept (never flushed); finite values within ``rtol``/``atol``; the sign of a zero
    unless ``zero_sign`` is off; integers and bools bit for bit. ``inf_may_be_nan``: a NaN may stand for an
    infinity (a fast algorithm's documented difference)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (where, got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "iub":
        bad = got != want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        info = ml_dtypes.finfo(want.dtype)
        with np.errstate(all="ignore"):
            finite = np.isfinite(w)
            # a subnormal result carries fewer bits: a few of its steps are within any rounding
            slack = atol + 4 * float(info.smallest_subnormal)
            close = (g == w) | (np.abs(g - w) <= rtol * np.abs(w) + slack)
            tiny = finite & (w != 0) & (np.abs(w) < float(info.tiny))
        nan_ok = np.isnan(g) == np.isnan(w)
        if inf_may_be_nan:
            nan_ok |= np.isinf(w) & np.isnan(g)
        bad = ~nan_ok | (np.isinf(w) & ~np.isnan(g) & (g != w)) | (finite & ~close) | (tiny & (g == 0))
        if zero_sign:
            bad |= (w == 0) & (g == 0) & (np.signbit(g) != np.signbit(w))
    if bad.any():
        idx = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:6]]
        raise AssertionError(f"{where}: {int(bad.sum())} of {bad.size} differ, e.g. "
                             + ", ".join(f"{i}: got {got[i]!r}, want {want[i]!r}" for i in idx))


def all_pairs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    s = np.array(SPECIAL[dtype], np.float64).astype(np_type(dtype))
    a, b = np.meshgrid(s, s, indexing="ij")
    return np.ascontiguousarray(a.reshape(-1)), np.ascontiguousarray(b.reshape(-1))


def elementwise_graph(dtype: str) -> tlc.Graph:
    """Every op the brief names, alone (a one-op kernel at -O1) and in chains (one fused kernel at -O2)."""
    t = np_type(dtype)
    g = tlc.Graph(f"edges_{dtype}")
    a, b = g.input("a", dtype, ("N",)), g.input("b", dtype, ("N",))

    def const(v):
        return g.constant(np.array(v, np.float64).astype(t))

    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        g.output(g.add_node(op, [a, b]), op)
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Erf", "Sqrt", "Abs", "Neg"):
        g.output(g.add_node(op, [a]), op)
    g.output(g.add_node("Clip", [a, const(-1.0), const(1.0)]), "clip")
    g.output(g.add_node("Where", [g.add_node("Greater", [a, b]), a, b]), "where")
    g.output(g.add_node("Mul", [a, const(0.0)]), "x_times_0")          # NaN * 0 and inf * 0 stay NaN
    g.output(g.add_node("Add", [a, const(-0.0)]), "x_plus_minus_0")   # keeps -0.0; must not fold to x
    g.output(g.add_node("Max", [a, a]), "max_self")
    g.output(g.add_node("Min", [g.add_node("Relu", [a]), b]), "min_relu")
    h = g.add_node("Relu", [g.add_node("Add", [g.add_node("Mul", [a, b]), a])])
    g.output(g.add_node("Erf", [g.add_node("Tanh", [g.add_node("Sub", [h, b])])]), "chain")
    q = g.add_node("Sigmoid", [g.add_node("Div", [a, b])])
    g.output(g.add_node("Max", [q, g.add_node("Exp", [g.add_node("Neg", [b])])]), "chain_max")
    g.output(g.add_node("Clip", [g.add_node("Sqrt", [g.add_node("Abs", [g.add_node("Log", [a])])]),
                                 const(0.0), const(6.0)]), "chain_clip")
    return g


#: onnxruntime's own approximations and choices (see the module docstring): not compared with it
ORT_DIFFERS = {"Relu", "Sigmoid", "where", "min_relu", "chain", "chain_max"}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_elementwise_special_values(dtype):
    g = elementwise_graph(dtype)
    a, b = all_pairs(dtype)
    want = reference(g, {"a": a, "b": b})
    rtol = 4e-7 if dtype == "float32" else 1e-15
    # float64 at -O2 only in CI: -O1's one-op kernels come from the same generator float32 covers at every level
    levels = LEVELS if dtype == "float32" or os.environ.get("TLC_TESTS_FULL") else (2,)
    for level, got in compiled(g, {"a": a, "b": b}, levels=levels).items():
        for name in want:
            assert_special_equal(got[name], want[name], f"{name} at -O{level}", rtol=rtol)
    if dtype == "float32":   # the parallel kernels too (a second specialization: the chains, whose fused groups
        # hold every op above; each output of its own cost ~0.5 s of compiling in CI)
        big_a, big_b = np.tile(a, 512), np.tile(b, 512)
        chains = g.copy()
        chains.outputs = [(v, name) for v, name in chains.outputs if name.startswith("chain") or name == "x_times_0"]
        chains.remove_unused()
        got = compiled(chains, {"a": big_a, "b": big_b}, levels=(2,))[2]
        for name, w in reference(chains, {"a": big_a, "b": big_b}).items():
            assert_special_equal(got[name], w, f"{name} at -O2 on {big_a.size} elements", rtol=rtol)
        ort = onnxruntime(g, {"a": a, "b": b})
        for name in sorted(set(want) - ORT_DIFFERS):
            # its approximations round subnormal results less well (tanh(1e-40) = 9.994e-41): an absolute slack
            assert_special_equal(ort[name], want[name], f"onnxruntime {name}", rtol=4e-6, atol=1e-38)


def test_subnormals_kept_and_fast_math_opt_in():
    """Subnormal inputs and results survive every default kernel; fast-math is off unless asked for."""
    g = tlc.Graph("subnormal")
    x = g.input("x", "float32", (64,))
    y = g.add_node("Mul", [g.add_node("Add", [x, g.constant(np.float32(0.0))]), g.constant(np.float32(0.5))])
    g.output(g.add_node("Max", [y, g.add_node("Neg", [y])]), "y")
    feeds = {"x": (np.arange(64, dtype=np.float32) - 32) * np.float32(1e-40)}
    want = reference(g, feeds)["y"]
    assert np.count_nonzero(want) == 63 and np.all(np.abs(want) < np.finfo(np.float32).tiny)
    for level, got in compiled(g, feeds).items():
        np.testing.assert_array_equal(got["y"], want, err_msg=f"-O{level} flushed subnormals")
    assert tlc.runtime.CompileOptions().fast_math is False
    assert tlc.compile(g, jit="off").options.fast_math is False


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_floats_special_values(dtype):
    """16-bit floats run the reference by design (kernels never compute in them; stats says so); the plan must
    still give the reference's values, and the reference onnxruntime's where it runs the ops."""
    g = elementwise_graph(dtype)
    a, b = all_pairs(dtype)
    want = reference(g, {"a": a, "b": b})
    plan = tlc.compile(g, opt_level=2, jit="eager")
    got = plan.run({"a": a, "b": b})
    for name in want:
        assert_special_equal(got[name], want[name], f"{name} ({dtype})", rtol=0.0)
    reasons = {s.reason for s in plan.stats().steps if s.mode == "reference"}
    assert any(dtype in r for r in reasons), reasons
    if dtype == "float16":   # onnxruntime has no bfloat16 arithmetic on the CPU
        ort = onnxruntime(g, {"a": a, "b": b})
        for name in sorted(set(want) - ORT_DIFFERS):
            assert_special_equal(ort[name], want[name], f"onnxruntime {name} (float16)", rtol=2e-3)


def test_row_kernels_special_values(rng):
    """Reductions, softmax, log-softmax and layer norm over rows holding each special value once, or only it."""
    rows = []
    for s in SPECIAL_F32:
        r = rng.standard_normal(8).astype(np.float32)
        r[3] = s
        rows += [r, np.full(8, s, np.float32)]
    rows += [np.array([np.inf, -np.inf] + [1] * 6, np.float32), np.array([3e38] * 8, np.float32)]
    x = np.stack(rows)
    g = tlc.Graph("rows")
    xi = g.input("x", "float32", x.shape)
    axis = g.constant(np.array([-1], np.int64))
    scaled = g.add_node("Mul", [xi, g.constant(np.float32(1.0))])   # an elementwise producer fused into the row
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"):
        g.output(g.add_node(op, [scaled, axis], keepdims=1), op)
    g.output(g.add_node("Softmax", [xi], axis=-1), "softmax")
    g.output(g.add_node("LogSoftmax", [xi], axis=-1), "log_softmax")
    g.output(g.add_node("LayerNormalization", [xi, g.constant(np.ones(8, np.float32)),
                                               g.constant(np.zeros(8, np.float32))], axis=-1), "layer_norm")
    e = g.add_node("Exp", [g.add_node("Sub", [xi, g.add_node("ReduceMax", [xi, axis], keepdims=1)])])
    g.output(g.add_node("Div", [e, g.add_node("ReduceSum", [e, axis], keepdims=1)]), "softmax_written_out")
    want = reference(g, {"x": x})
    for level, got in compiled(g, {"x": x}).items():
        for name in want:   # sums in another order: a zero's sign and the last bits may differ
            assert_special_equal(got[name], want[name], f"{name} at -O{level}", rtol=2e-5, atol=1e-6,
                                 zero_sign=False)


def test_products_special_values(rng):
    """MatMul + bias + Relu (an epilogue), Gemm with transB, alpha = 0 and beta = 0: NaN * 0 and inf * 0 must not
    vanish because BLAS was told to skip a term."""
    a = rng.standard_normal((24, 16)).astype(np.float32)
    for i, s in enumerate(SPECIAL_F32):
        a[i, i % 16] = s
    w = rng.standard_normal((16, 40)).astype(np.float32)
    w[3, :] = 0.0
    bias = rng.standard_normal(40).astype(np.float32)
    bias[7:10] = [np.nan, np.inf, -0.0]
    g = tlc.Graph("products")
    x = g.input("x", "float32", a.shape)
    mm = g.add_node("Add", [g.add_node("MatMul", [x, g.constant(w)]), g.constant(bias)])
    g.output(g.add_node("Relu", [mm]), "matmul_bias_relu")
    g.output(g.add_node("Gemm", [x, g.constant(np.ascontiguousarray(w.T)), g.constant(bias)], transB=1), "gemm")
    g.output(g.add_node("Gemm", [x, g.constant(w), g.constant(bias)], alpha=0.0), "gemm_alpha_0")
    g.output(g.add_node("Gemm", [x, g.constant(w), g.constant(bias)], beta=0.0), "gemm_beta_0")
    want = reference(g, {"x": a})
    for level, got in compiled(g, {"x": a}).items():
        for name in want:
            assert_special_equal(got[name], want[name], f"{name} at -O{level}", rtol=2e-5, atol=2e-5,
                                 zero_sign=False)
    ort = onnxruntime(g, {"x": a})
    for name in want:
        assert_special_equal(ort[name], want[name], f"onnxruntime {name}", rtol=2e-5, atol=2e-5, zero_sign=False)


def _seeded_image(rng, shape, copies: int) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, len(SPECIAL_SUMS) * copies, replace=False)] = np.tile(SPECIAL_SUMS, copies)
    return x


def test_conv_and_pool_special_values(rng):
    """A direct 3x3 conv + Relu, a 1x1 conv (BLAS), max / average / global pools over images holding every
    special value: NaN and infinities reach exactly the windows that hold them."""
    x = _seeded_image(rng, (2, 8, 12, 12), 3)
    x[0, 0, :2, :2] = -0.0
    g = tlc.Graph("conv_pool")
    xi = g.input("x", "float32", x.shape)
    for name, (m, k) in {"conv3x3": (8, 3), "conv1x1": (16, 1)}.items():
        w = g.constant(rng.standard_normal((m, 8, k, k)).astype(np.float32))
        conv = g.add_node("Conv", [xi, w, g.constant(rng.standard_normal(m).astype(np.float32))], pads=[k // 2] * 4)
        g.output(g.add_node("Relu", [conv]), name)
    g.output(g.add_node("MaxPool", [xi], kernel_shape=[2, 2], strides=[2, 2]), "max_2x2")
    g.output(g.add_node("MaxPool", [xi], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), "max_3x3")
    g.output(g.add_node("AveragePool", [xi], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), "avg_3x3")
    g.output(g.add_node("GlobalMaxPool", [xi]), "global_max")
    g.output(g.add_node("GlobalAveragePool", [xi]), "global_avg")
    want = reference(g, {"x": x})
    for level, got in compiled(g, {"x": x}).items():
        for name in want:
            assert_special_equal(got[name], want[name], f"{name} at -O{level}", rtol=1e-5, atol=1e-5,
                                 zero_sign=name.startswith("max"))
    ort = onnxruntime(g, {"x": x})
    for name in sorted(set(want) - {"max_2x2", "max_3x3", "global_max"}):   # its zeros' signs: its own way
        assert_special_equal(ort[name], want[name], f"onnxruntime {name}", rtol=1e-5, atol=1e-5,
                             zero_sign=False)


def test_winograd_conv_keeps_nan_and_may_turn_inf_into_nan(rng):
    """A 3x3 64 -> 64 conv at 16x16 runs Winograd F(2x2, 3x3) (``winograd="2x2"``), whose input transform
    subtracts inputs of a tile: an infinite input gives inf - inf = NaN in outputs where the direct sum gives
    +-inf. Documented, not fixed (a finiteness check per part would cost a pass over the input). Everything else
    must hold: NaN where the reference has NaN, finite values close, no infinity of the wrong sign. F(4x4, 3x3)
    does not hold the last part on this input: the rounding of a 1e27 input spreads over its 6x6 tile's 16
    outputs (1e21 where -21 was due), which is why ``winograd="2x2"`` and ``"off"`` exist."""
    x = _seeded_image(rng, (1, 64, 16, 16), 2)
    g = tlc.Graph("winograd")
    xi = g.input("x", "float32", x.shape)
    w = g.constant(rng.standard_normal((64, 64, 3, 3)).astype(np.float32))
    g.output(g.add_node("Conv", [xi, w], pads=[1, 1, 1, 1]), "y")
    plan = tlc.compile(g, jit="eager", winograd="2x2")
    assert "winograd F(2x2, 3x3)" in plan.stats().steps[0].reason
    got, want = plan.run({"x": x})["y"], reference(g, {"x": x})["y"]
    # 576 products a sum, some of them ~1e27: the transforms' rounding shows at ~1e-4 relative
    assert_special_equal(got, want, "winograd conv", rtol=3e-4, atol=1e-4, zero_sign=False, inf_may_be_nan=True)
    assert np.isinf(want).any() and np.isnan(want).any()   # the case does exercise both


def test_cast_special_values():
    """Cast between float32, float16, bfloat16, float64, int32, int64, int8, uint8 and bool: overflow to inf, NaN
    kept, rounding to nearest even, integers wrapped as numpy wraps them; onnxruntime where ONNX defines it."""
    vals = np.array(SPECIAL_F32 + [65504, 65520, 70000, -70000, 2.5, -2.5, 3.5, 2**31, -2**31, 2**31 - 128, 1e10,
                                   -1e10, 6e-8, 1e-8], np.float32)
    ints = np.array([2**40 + 5, -2**40, 2**31, 2**31 - 1, -2**31 - 1, 0, -1, 255, 256, -129], np.int64)
    feeds = {"x": vals, "i": ints}
    g = _cast_graph(("float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8", "bool"))
    want = reference(g, feeds)
    for level, got in compiled(g, feeds).items():
        for name in want:
            assert_special_equal(got[name], want[name], f"{name} at -O{level}", rtol=0.0)
    # onnxruntime's Python API returns no bfloat16 arrays; float -> integer is defined in range only
    ort = onnxruntime(_cast_graph(("float16", "float64", "int32", "int64", "int8", "uint8", "bool")), feeds)
    defined = np.isfinite(vals) & (np.abs(vals) < 127)
    for name in (n for n in ort if not n.endswith("_back")):   # it cancels the cast pair around a float16 op
        keep = defined if name.startswith("f32_to_") and name[7:] in ("int32", "int64", "int8", "uint8") else \
            slice(None)
        assert_special_equal(ort[name][keep], want[name][keep], f"onnxruntime {name}", rtol=0.0)


def _cast_graph(targets: tuple[str, ...]) -> tlc.Graph:
    g = tlc.Graph("casts")
    x, i = g.input("x", "float32", ("N",)), g.input("i", "int64", ("M",))
    for to in targets:
        cast = g.add_node("Cast", [x], to=ONNX_TYPE[to])
        g.output(cast, f"f32_to_{to}")
        if to in ("float16", "bfloat16", "float64"):   # and back (through a kernel where onnxruntime has one)
            back = cast if to == "bfloat16" else g.add_node("Abs", [cast])
            g.output(g.add_node("Cast", [back], to=ONNX_TYPE["float32"]), f"{to}_back")
    for to in ("int32", "float32", "float16", "bool", "uint8", "int8"):
        g.output(g.add_node("Cast", [i], to=ONNX_TYPE[to]), f"i64_to_{to}")
    return g


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_overflow_and_division(dtype):
    """Add/Sub/Mul wrap; Div truncates toward zero, exactly past 2**53; a zero divisor gives 0 and MIN / -1
    wraps to MIN, as the reference does (C leaves both undefined; onnxruntime traps, so it is not asked)."""
    info = np.iinfo(dtype)
    vals = np.array([info.min, info.min + 1, -7, -1, 0, 1, 7, info.max - 1, info.max], dtype)
    a, b = (np.ascontiguousarray(v.reshape(-1)) for v in np.meshgrid(vals, vals, indexing="ij"))
    g = tlc.Graph(f"ints_{dtype}")
    x, y = g.input("a", dtype, ("N",)), g.input("b", dtype, ("N",))
    for op in ("Add", "Sub", "Mul", "Div"):
        g.output(g.add_node(op, [x, y]), op)
    g.output(g.add_node("Mod", [x, y], fmod=1), "fmod")
    g.output(g.add_node("Neg", [x]), "neg")
    g.output(g.add_node("Abs", [x]), "abs")
    feeds = {"a": a, "b": b}
    want = reference(g, feeds)
    assert want["Div"][(a == -7) & (b == 0)] == 0 and want["Add"][(a == info.max) & (b == 1)] == info.min
    assert want["Div"][(a == info.max - 1) & (b == 7)] == (int(info.max) - 1) // 7   # exact past 2**53
    for level, got in compiled(g, feeds).items():
        for name in want:
            assert_special_equal(got[name], want[name], f"{name} at -O{level}")
    defined = (b != 0) & ~((a == info.min) & (b == -1))
    ort = onnxruntime(g, {"a": a[defined], "b": b[defined]})
    for name in ("Add", "Sub", "Mul", "Div", "neg", "abs"):
        assert_special_equal(ort[name], want[name][defined], f"onnxruntime {name}")
    # the same semantics in a generated integer kernel (plans run integers in numpy; compile_group takes them)
    body = tlc.Graph("int_div")
    p, q = body.input("p", dtype, ("N",)), body.input("q", dtype, ("N",))
    body.output(body.add_node("Div", [p, q]), "div")
    body.output(body.add_node("Mod", [p, q], fmod=1), "fmod")
    kernel = compile_group(body, "elementwise", [TensorType(dtype, ("N",))] * 2)
    outs = [np.empty_like(a), np.empty_like(a)]
    kernel([a, b], outs)
    assert_special_equal(outs[0], want["Div"], "integer kernel Div")
    assert_special_equal(outs[1], want["fmod"], "integer kernel fmod")
