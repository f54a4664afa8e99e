"""Elementwise kernels against the reference executor: broadcast patterns, ranks, dtypes, sizes, views,
in-place outputs, every expression primitive, and the safety of generated source."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import check_against_reference, compile_for, random_array, vectorized

from tlc.errors import CompileError, ShapeMismatchError
from tlc.ir import Graph, TensorType
from tlc.kernels import KernelOptions, compile_group
from tlc.kernels.render import RENDERED
from tlc.ops import all_ops
from tlc.ops.expr import PRIMITIVES


def affine_tanh(dtype: str, x_shape, b_shape, name: str = "b") -> Graph:
    """tanh(x + b) * 0.5 - x: the body most tests use (one compile per dtype and pattern)."""
    g = Graph(name)
    x = g.input("x", dtype, x_shape)
    b = g.input("b", dtype, b_shape)
    t = g.add_node("Tanh", [g.add_node("Add", [x, b])])
    g.output(g.add_node("Sub", [g.add_node("Mul", [t, g.constant(np.array(0.5, dtype))]), x]), "y")
    return g


PATTERNS = [  # (x shape, b shape, concrete x, concrete b)
    (("N", 64), (64,), (37, 64), (64,)),  # row bias
    (("N", "C", "H"), ("C", 1), (2, 3, 5), (3, 1)),  # per-channel, middle dim
    ((4, 1, 6), (1, 5, 1), (4, 1, 6), (1, 5, 1)),  # outer product: output [4, 5, 6]
    (("N", 8), ("N", 8), (9, 8), (9, 8)),  # same shape: one flat loop
    ((), (), (), ()),  # scalars
    ((2, 3, 4, 5), (1,), (2, 3, 4, 5), (1,)),  # rank 4 with a scalar-like input
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: "x".join(map(str, p[2])) + "+" + "x".join(map(str, p[3])))
def test_broadcast_patterns_match_reference(kcache, dtype, pattern):
    x_shape, b_shape, xc, bc = pattern
    body = affine_tanh(dtype, x_shape, b_shape)
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(0)
    check_against_reference(kernel, body, [random_array(rng, xc, dtype), random_array(rng, bc, dtype)])


def test_one_kernel_serves_every_size_including_empty_and_single(kcache):
    body = affine_tanh("float32", ("N", 64), (64,))
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(1)
    for n in (0, 1, 3, 200):
        check_against_reference(
            kernel, body, [random_array(rng, (n, 64), "float32"), random_array(rng, (64,), "float32")]
        )
    assert len(kernel._variants) == 1  # no recompilation for new sizes
    one = affine_tanh("float32", (1, 1), (1,))
    check_against_reference(
        compile_for(one, "elementwise", kcache),
        one,
        [np.array([[0.25]], np.float32), np.array([2.0], np.float32)],
    )


def test_symbolic_dim_that_broadcasts_at_run_time_gets_its_own_variant(kcache):
    body = affine_tanh("float32", ("N", 64), ("M", 64))
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(2)
    check_against_reference(
        kernel, body, [random_array(rng, (5, 64), "float32"), random_array(rng, (1, 64), "float32")]
    )
    assert len(kernel._variants) == 2


def test_non_contiguous_inputs(kcache):
    body = affine_tanh("float32", ("N", 64), (64,))
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(3)
    x = random_array(rng, (64, 40), "float32").T  # transposed view
    b = random_array(rng, (128,), "float32")[::2]  # strided view
    assert not x.flags.c_contiguous and not b.flags.c_contiguous
    check_against_reference(kernel, body, [x, b])


def test_in_place_output_is_an_input(kcache):
    body = affine_tanh("float32", ("N", 64), (64,))
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(4)
    x, b = random_array(rng, (300, 64), "float32"), random_array(rng, (64,), "float32")
    from tlc.reference import run_graph

    want = run_graph(body, [x, b])[0]
    kernel([x, b], [x])  # y written over x
    np.testing.assert_allclose(x, want, rtol=2e-5, atol=2e-6)
    in_place = next(m for v, m in kernel._variants.items() if v.alias == (0,))
    # one array read and written at one index: vectorized without a dependence check
    assert vectorized("\n".join(in_place.kernel_serial.inspect_llvm().values()), "float32")
    # an output overlapping an input without being it: the input is copied first
    buf = random_array(rng, (301, 64), "float32")
    xin = buf[1:]
    want = run_graph(body, [xin.copy(), b])[0]
    kernel([xin, b], [buf[:-1]])
    np.testing.assert_allclose(buf[:-1], want, rtol=2e-5, atol=2e-6)


def test_large_input_runs_the_parallel_variant(kcache):
    import numba

    # the parallel variant runs where the calling thread's count allows it (a plan's run of 1 thread earlier in
    # this process leaves its count at 1: plans' kernels follow the count the plan's run set)
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    body = affine_tanh("float32", ("N", 64), (64,))
    kernel = compile_group(
        body,
        "elementwise",
        [TensorType("float32", ("N", 64)), TensorType("float32", (64,))],
        cache=kcache,
        options=KernelOptions(num_threads=2),
    )
    rng = np.random.default_rng(5)
    check_against_reference(
        kernel, body, [random_array(rng, (2048, 64), "float32"), random_array(rng, (64,), "float32")]
    )
    module = next(iter(kernel._variants.values()))
    step = module.__tlc_step__  # the parallel driver's step, compiled on first use
    ir = step.inspect_llvm()
    assert vectorized(ir, "float32")


def test_fast_math_option_reaches_the_decorator(kcache):
    body = affine_tanh("float32", ("N", 64), (64,))
    kernel = compile_for(body, "elementwise", kcache, options=KernelOptions(fast_math=True, parallel=False))
    assert "fastmath=True" in kernel.source and "fastmath=False" not in kernel.source
    rng = np.random.default_rng(6)
    check_against_reference(
        kernel,
        body,
        [random_array(rng, (10, 64), "float32"), random_array(rng, (64,), "float32")],
        tolerance=(1e-4, 1e-5),
    )


def test_inner_loop_vectorizes(kcache):
    body = affine_tanh("float32", ("N", 64), (64,))
    kernel = compile_for(body, "elementwise", kcache)
    module = next(iter(kernel._variants.values()))
    ir = "\n".join(module.kernel_serial.inspect_llvm().values())
    assert vectorized(ir, "float32")


# ---------------------------------------------------------------------------- every op and primitive
def unary_ops() -> list[str]:
    """Registered elementwise ops with one required input and no input-dependent output dtype."""
    return [
        op.name
        for op in all_ops()
        if op.is_elementwise
        and op.domain == ""
        and op.inputs[0] == 1
        and op.inputs[1] is not None
        and op.name not in ("Cast", "Not", "IsNaN", "IsInf", "BitwiseNot")
    ]


def all_ops_body(dtype: str) -> Graph:
    """One body computing every registered float elementwise op side by side (one compile per dtype)."""
    g = Graph(f"all_{dtype}")
    x = g.input("x", dtype, ("N",))
    y = g.input("y", dtype, ("N",))
    for op in unary_ops():
        g.output(g.add_node(op, [x]), f"o_{op}")
    for op in ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu"):
        g.output(g.add_node(op, [x, y]), f"o_{op}")
    g.output(g.add_node("Mod", [x, y], fmod=1), "o_fmod")
    g.output(g.add_node("Mod", [x, y]), "o_mod")
    g.output(g.add_node("Pow", [x, g.constant(np.array(3, dtype))]), "o_cube")
    g.output(g.add_node("Pow", [x, g.constant(np.array(-2, dtype))]), "o_inverse_square")
    g.output(g.add_node("Clip", [x, g.constant(np.array(-0.5, dtype)), g.constant(np.array(0.7, dtype))]), "o_clip")
    g.output(g.add_node("Gelu", [x], approximate="tanh"), "o_gelu_tanh")
    less = g.add_node("Less", [x, y])
    g.output(g.add_node("Where", [less, x, y]), "o_where")
    for op in ("Equal", "Greater", "GreaterOrEqual", "LessOrEqual"):
        g.output(g.add_node(op, [x, y]), f"o_{op}")
    g.output(g.add_node("IsNaN", [g.add_node("Log", [x])]), "o_isnan")
    g.output(g.add_node("IsInf", [g.add_node("Div", [x, y])]), "o_isinf")
    g.output(g.add_node("Cast", [x], to=6), "o_cast_int32")
    return g


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_float_op_matches_reference(kcache, dtype):
    body = all_ops_body(dtype)
    kernel = compile_for(body, "elementwise", kcache)
    rng = np.random.default_rng(7)
    x = random_array(rng, (257,), dtype)
    y = random_array(rng, (257,), dtype)
    x[:4] = [0.0, -0.0, 2.5, -3.0]
    y[:4] = [0.0, 2.0, 0.0, 0.5]  # division by zero, pow of a negative base
    tol = (2e-5, 2e-6) if dtype == "float32" else (1e-12, 1e-13)
    check_against_reference(kernel, body, [x, y], tolerance=tol)
    assert "ml.sigmoid_" in kernel.source  # 1 / (1 + exp(-x)) is drawn with the stable sigmoid
    assert ("ml.pow_f32" in kernel.source) == (dtype == "float32")


def test_integer_and_bool_ops_match_reference(kcache):
    g = Graph("ints")
    a = g.input("a", "int32", ("N",))
    b = g.input("b", "int32", ("N",))
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater"):
        g.output(g.add_node(op, [a, b]), f"o_{op}")
    g.output(g.add_node("Mod", [a, b]), "o_mod")
    g.output(g.add_node("Mod", [a, b], fmod=1), "o_fmod")
    g.output(g.add_node("Pow", [a, g.constant(np.array(3, np.int32))]), "o_pow3")
    for op in ("Abs", "Neg", "Sign", "Relu"):
        g.output(g.add_node(op, [a]), f"o_{op}")
    lt, gt = g.add_node("Less", [a, b]), g.add_node("Greater", [a, g.constant(np.array(0, np.int32))])
    for op in ("And", "Or", "Xor"):
        g.output(g.add_node(op, [lt, gt]), f"o_{op}")
    g.output(g.add_node("Not", [lt]), "o_not")
    g.output(g.add_node("Where", [gt, a, b]), "o_where")
    g.output(g.add_node("Cast", [a], to=1), "o_float")
    g.output(g.add_node("Cast", [lt], to=7), "o_bool_to_int64")
    big = g.add_node("Mul", [a, g.constant(np.array(70000, np.int32))])
    g.output(g.add_node("Mul", [big, big]), "o_wraps")  # int32 overflow wraps like numpy
    kernel = compile_for(g, "elementwise", kcache)
    rng = np.random.default_rng(8)
    x = rng.integers(-40, 40, 300).astype(np.int32)
    y = rng.integers(1, 9, 300).astype(np.int32) * rng.choice([-1, 1], 300).astype(np.int32)
    check_against_reference(kernel, g, [x, y])


def test_renderer_covers_every_primitive():
    assert set(PRIMITIVES) <= RENDERED
    assert "Sigmoid" in unary_ops() and "Erf" in unary_ops() and "Round" in unary_ops()


def test_mixed_dtypes_and_bool_inputs(kcache):
    g = Graph("mixed")
    c = g.input("c", "bool", ("N",))
    x = g.input("x", "float64", ("N",))
    i = g.input("i", "int64", ("N",))
    as_float = g.add_node("Cast", [i], to=11)
    g.output(g.add_node("Where", [c, x, as_float]), "w")
    g.output(g.add_node("Cast", [x], to=9), "nonzero")
    kernel = compile_for(g, "elementwise", kcache)
    rng = np.random.default_rng(9)
    xs = random_array(rng, (50,), "float64")
    xs[::7] = 0.0
    check_against_reference(kernel, g, [rng.random(50) < 0.5, xs, rng.integers(-9, 9, 50)])


# ---------------------------------------------------------------------------- safety and errors
EVIL = "x'\"\n)); __import__('os').system('echo pwned') #"


def test_model_names_never_reach_the_source(kcache):
    g = Graph(EVIL + "graph")
    x = g.input(EVIL + "in", "float32", ("N",))
    b = g.input("b\n'''\"\"\"", "float32", (1,))
    t = g.add_node("Add", [x, b], name=EVIL + "node")
    t = g.add_node("Gelu", [t], name="n2" + EVIL, approximate="none')) or __import__('os')  #")
    g.output(t, EVIL + "out")
    kernel = compile_for(g, "elementwise", kcache)
    for needle in ("pwned", "__import__", "system", "'''", EVIL[:3]):
        assert needle not in kernel.source
    rng = np.random.default_rng(10)
    check_against_reference(kernel, g, [random_array(rng, (33,), "float32"), random_array(rng, (1,), "float32")])


def test_compile_errors_say_why(kcache):
    g = Graph("mm")
    a = g.input("a", "float32", (4, 4))
    g.output(g.add_node("MatMul", [a, a]), "y")
    with pytest.raises(CompileError, match="MatMul"):
        compile_for(g, "elementwise", kcache)
    half = affine_tanh("float16", (4,), (4,))
    with pytest.raises(CompileError, match="float16"):
        compile_for(half, "elementwise", kcache)
    with pytest.raises(CompileError, match="kind"):
        compile_for(affine_tanh("float32", (4,), (4,)), "scan", kcache)
    g = Graph("reduce")
    x = g.input("x", "float32", (4, 4))
    g.output(g.add_node("ReduceSum", [x, g.constant(np.array([-1]))]), "s")
    with pytest.raises(CompileError, match="ReduceSum"):
        compile_for(g, "elementwise", kcache)
    with pytest.raises(CompileError, match="tpu"):
        compile_group(
            affine_tanh("float32", (4,), (4,)),
            "elementwise",
            [TensorType("float32", (4,))] * 2,
            target="tpu",
        )


def test_call_checks_outputs(kcache):
    body = affine_tanh("float32", ("N", 64), (64,))
    kernel = compile_for(body, "elementwise", kcache)
    x, b = np.zeros((3, 64), np.float32), np.zeros(64, np.float32)
    with pytest.raises(ShapeMismatchError):
        kernel([x, b], [np.empty((4, 64), np.float32)])
    with pytest.raises(ShapeMismatchError):
        kernel([x, b], [np.empty((64, 3), np.float32).T])


def test_special_constants_render_as_typed_numbers(kcache):
    g = Graph("consts")
    x = g.input("x", "float32", ("N",))
    for i, value in enumerate([np.inf, -np.inf, np.nan, 0.1, -0.0, 3.4028235e38]):
        g.output(g.add_node("Add", [x, g.constant(np.array(value, np.float32))]), f"o{i}")
    g.output(g.add_node("Max", [x, g.constant(np.array(np.nan, np.float32))]), "max_nan")
    kernel = compile_for(g, "elementwise", kcache)
    assert "np.float32(math.inf)" in kernel.source and "np.float32(-math.inf)" in kernel.source
    assert "np.float32(math.nan)" in kernel.source and "np.float32(0.10000000149011612)" in kernel.source
    check_against_reference(kernel, g, [np.array([1.0, -2.0, np.inf, 3e38], np.float32)])


@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint64"])
def test_other_integer_widths_wrap_and_divide_like_numpy(kcache, dtype):
    g = Graph("widths")
    a = g.input("a", dtype, ("N",))
    b = g.input("b", dtype, ("N",))
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Greater"):
        g.output(g.add_node(op, [a, b]), f"o_{op}")
    g.output(g.add_node("Mod", [a, b], fmod=1), "o_fmod")
    kernel = compile_for(g, "elementwise", kcache)
    rng = np.random.default_rng(11)
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -100), min(info.max, 250), 64).astype(dtype)
    y = rng.integers(1, 50, 64).astype(dtype)
    with np.errstate(over="ignore"):
        check_against_reference(kernel, g, [x, y])
