"""Row (reduction) kernels against the reference executor: layer norm and softmax decomposed and whole,
last-axis reductions, NaN and infinities, empty and single rows, views, parallel rows, and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import check_against_reference, compile_for, random_array, stand_in_ops, vectorized

from tlc.errors import CompileError
from tlc.ir import Graph, TensorType
from tlc.kernels.schedule import schedule_rows
from tlc.ops import expr as E
from tlc.ops.rowform import row_input


@pytest.fixture(scope="module", autouse=True)
def _stand_ins():
    with stand_in_ops():
        yield


def axes(g: Graph):
    return g.constant(np.array([-1], np.int64))


def decomposed_layer_norm(dtype: str, shape, with_pow: bool) -> Graph:
    """x - mean, squared, mean, + eps, sqrt, divide, * gamma + beta; outputs y and the mean."""
    g = Graph("ln")
    x = g.input("x", dtype, shape)
    gamma, beta = g.input("gamma", dtype, shape[-1:]), g.input("beta", dtype, shape[-1:])
    mean = g.add_node("ReduceMean", [x, axes(g)])
    d = g.add_node("Sub", [x, mean])
    sq = g.add_node("Pow", [d, g.constant(np.array(2, dtype))]) if with_pow else g.add_node("Mul", [d, d])
    var = g.add_node("ReduceMean", [sq, axes(g)])
    den = g.add_node("Sqrt", [g.add_node("Add", [var, g.constant(np.array(1e-5, dtype))])])
    y = g.add_node("Add", [g.add_node("Mul", [g.add_node("Div", [d, den]), gamma]), beta])
    g.output(y, "y")
    g.output(mean, "mean")
    return g


def inputs_for(body: Graph, shapes, rng, dtype="float32"):
    return [random_array(rng, s, dtype) for s in shapes]


@pytest.mark.parametrize("dtype,with_pow", [("float32", True), ("float64", False)])
def test_decomposed_layer_norm(kcache, dtype, with_pow):
    body = decomposed_layer_norm(dtype, ("B", "T", 96), with_pow)
    kernel = compile_for(body, "reduction", kcache)
    rng = np.random.default_rng(0)
    for b, t in [(2, 5), (1, 1), (0, 3), (3, 0)]:
        x = random_array(rng, (b, t, 96), dtype) * 3 + 1
        check_against_reference(
            kernel,
            body,
            [x, random_array(rng, (96,), dtype), random_array(rng, (96,), dtype)],
            tolerance=(1e-4, 1e-5) if dtype == "float32" else (1e-11, 1e-12),
        )
    sched = schedule_rows(kernel.plan, kernel.layout)
    assert sched.npasses == 3  # sum x | sum (x - mean)^2 | write
    assert "ml.pow_f32" not in kernel.source  # Pow(d, 2) is d * d
    # the variance's sum recomputes (x - mean)^2 from the kept x - mean: no scratch row of its own
    assert "ss_" not in kernel.source and "sc_" in kernel.source
    ir = "\n".join(next(iter(kernel._variants.values())).kernel_serial.inspect_llvm().values())
    assert vectorized(ir, dtype)


def test_softmax_and_log_softmax_are_stable_and_handle_inf_and_nan(kcache):
    g = Graph("sm")
    x = g.input("x", "float32", ("N", 50))
    g.output(g.add_node("Softmax", [x], axis=-1), "p")
    g.output(g.add_node("LogSoftmax", [x], axis=1), "logp")
    kernel = compile_for(g, "reduction", kcache)
    rng = np.random.default_rng(1)
    x = random_array(rng, (6, 50), "float32") * 30
    x[0] += 1000.0  # large values: shifted by the row max
    x[1, :10] = -np.inf  # masked entries
    x[2, 7] = np.nan  # a NaN row stays NaN
    x[3, :] = -np.inf  # all masked: NaN like numpy
    with np.errstate(invalid="ignore"):
        check_against_reference(kernel, g, [x], tolerance=(1e-5, 1e-6))
    sched = schedule_rows(kernel.plan, kernel.layout)
    assert sched.npasses == 3 and sched.materialized  # exp(x - max) is kept, not recomputed
    assert kernel.source.count("ml.exp_f32") == 2  # once per function (serial, parallel)
    assert "ss_" not in kernel.source  # the sum of the exps reads the kept exps back


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceSumSquare", "ReduceL2",
                                "ReduceL1", "ReduceLogSum", "ReduceLogSumExp"])
def test_last_axis_reductions_with_nan(kcache, op):
    g = Graph(op)
    x = g.input("x", "float64", ("N", "L"))
    g.output(g.add_node(op, [x, g.constant(np.array([1], np.int64))]), "r")
    kernel = compile_for(g, "reduction", kcache)
    rng = np.random.default_rng(2)
    x = random_array(rng, (7, 33), "float64")
    x[2, 5] = np.nan
    x[3, 1] = -np.inf
    x[4, :] = -0.0
    check_against_reference(kernel, g, [x])


def test_integer_reductions_and_row_broadcast_inputs(kcache):
    g = Graph("ints")
    x = g.input("x", "int32", ("N", 16))
    m = g.input("m", "int32", ("N", 1))
    d = g.add_node("Sub", [x, m])  # m is per row: loaded once per row
    g.output(g.add_node("ReduceSum", [d, axes(g)]), "s")
    g.output(g.add_node("ReduceMax", [d, axes(g)]), "mx")
    g.output(g.add_node("ReduceMin", [x, axes(g)]), "mn")
    g.output(d, "d")
    kernel = compile_for(g, "reduction", kcache)
    rng = np.random.default_rng(3)
    check_against_reference(
        kernel,
        g,
        [rng.integers(-100, 100, (9, 16)).astype(np.int32), rng.integers(-5, 5, (9, 1)).astype(np.int32)],
    )


def test_layer_norm_op_with_mean_and_inv_std_outputs_in_parallel(kcache):
    import numba

    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))   # (a one-thread plan's run left it at 1)
    g = Graph("lnop")
    x = g.input("x", "float32", ("N", 384))
    scale, bias = g.input("s", "float32", (384,)), g.input("b", "float32", (384,))
    y, mean, inv = g.add_node("LayerNormalization", [x, scale, bias], num_outputs=3, epsilon=1e-3)
    g.output(y, "y")
    g.output(mean, "mean")
    g.output(inv, "inv")
    kernel = compile_for(g, "reduction", kcache)
    rng = np.random.default_rng(4)
    big = random_array(rng, (256, 384), "float32")  # 98k elements: the parallel variant
    check_against_reference(
        kernel,
        g,
        [big[:, ::1], random_array(rng, (384,), "float32"), random_array(rng, (384,), "float32")],
        tolerance=(1e-4, 1e-5),
    )
    assert next(iter(kernel._variants.values())).__tlc_step__   # the parallel driver's step
    view = random_array(rng, (384, 8), "float32").T  # a non-contiguous view is copied first
    check_against_reference(
        kernel,
        g,
        [view, random_array(rng, (384,), "float32"), random_array(rng, (384,), "float32")],
        tolerance=(1e-4, 1e-5),
    )


#: what LLVM names the run-time check of how far apart a loop's arrays lie (before its vector code)
_ALIAS_CHECKS = ("vector.memcheck", "diff.check", "found.conflict")


def _placed_results(kernel, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> set[bytes]:
    """The outputs' bytes from ``kernel`` run with its arrays laid one after another in one buffer, a few
    elements apart (rows of 24 floats: closer than LLVM's vector step, so its run-time check can fail)."""
    buf = np.empty(4096, inputs[0].dtype)
    results = set()
    for gap in (0, 1, 2, 3, 5, 8, 13, 21, 34, 1024):
        for start in (0, 3, 8):
            views = []
            for a in inputs + outputs:
                views.append(buf[start:start + a.size].reshape(a.shape))
                start += a.size + gap
            for view, a in zip(views, inputs, strict=False):
                view[...] = a
            kernel(views[:len(inputs)], views[len(inputs):])
            results.add(b"".join(v.tobytes() for v in views[len(inputs):]))
    return results


def test_row_sums_add_in_one_order_wherever_the_arrays_lie(kcache):
    """A float sum shares its pass's loop only where that loop stores to scratch rows alone, which LLVM tells
    apart from every array (no run-time check, whose scalar copy would add in another order): Softmax's loops
    hold no check, its rows give the same bits from the serial and the parallel function and with the input and
    the output anywhere in one buffer. A sum in a pass that stores an output (y = x * w next to mean(y)) keeps a
    loop of its own: the same bits wherever the arrays lie (fused into the output's loop, they differed)."""
    rng = np.random.default_rng(7)
    g = Graph("sm_placed")
    g.output(g.add_node("Softmax", [g.input("x", "float32", ("N", "C"))], axis=-1), "p")
    softmax = compile_for(g, "reduction", kcache)
    module = next(iter(softmax._variants.values()))
    for x in (random_array(rng, (64, 128), "float32") * 4, random_array(rng, (2, 24), "float32") * 4):
        (want,) = check_against_reference(softmax, g, [x])
        dims = np.array(x.shape, np.int64)
        for fn in (module.kernel_serial, softmax._parallel_function(module, False, dims)):  # 128 columns: every
            got = np.empty_like(want)                                                       # partial sum of the loop
            fn(dims, x.ravel(), got.ravel())
            assert got.tobytes() == want.tobytes()
    assert _placed_results(softmax, [x], [want]) == {want.tobytes()}
    for ir in ("\n".join(module.kernel_serial.inspect_llvm().values()), module.__tlc_step__.inspect_llvm()):
        assert vectorized(ir, "float32") and not any(check in ir for check in _ALIAS_CHECKS)

    g = Graph("mean_placed")
    y = g.add_node("Mul", [g.input("x", "float32", ("N", 24)), g.input("w", "float32", ("N", 24))])
    g.output(y, "y")
    g.output(g.add_node("ReduceMean", [y, axes(g)]), "mean")
    scaled = compile_for(g, "reduction", kcache)
    for rows in (1, 2):
        arrays = [random_array(rng, (rows, 24), "float32") for _ in range(2)]
        want = check_against_reference(scaled, g, arrays)
        assert len(_placed_results(scaled, arrays, want)) == 1


def _single(op: str, **attrs) -> Graph:
    g = Graph("bad")
    x = g.input("x", "float32", (4, 5))
    ins = [x, g.constant(np.array(attrs.pop("axes"), np.int64))] if "axes" in attrs else [x]
    g.output(g.add_node(op, ins, **attrs), "y")
    return g


@pytest.mark.parametrize(
    "body,reason",
    [
        (lambda: _single("ReduceSum", axes=[0]), "last axis"),
        (lambda: _single("ReduceSum", axes=[-1], keepdims=0), "keepdims"),
        (lambda: _single("Softmax", axis=0), "last axis"),
        (lambda: _single("MatMul"), "MatMul"),
    ],
)
def test_unsupported_reductions_raise_compile_error(kcache, body, reason):
    g = body() if reason != "MatMul" else _matmul()
    with pytest.raises(CompileError, match=reason):
        compile_for(g, "reduction", kcache)


def _matmul() -> Graph:
    g = Graph("mm")
    x = g.input("x", "float32", (4, 4))
    g.output(g.add_node("MatMul", [x, x]), "y")
    return g


def test_every_row_reducible_op_has_a_row_form():
    """The fuse pass groups ops by Trait.ROW_REDUCIBLE; each must have a row form, or its groups would fall back
    to the reference path (``register`` refuses one without the other)."""
    from tlc.ops import Trait, all_ops

    declared = {(op.domain, op.name) for op in all_ops() if op.has(Trait.ROW_REDUCIBLE)}
    assert declared and declared == {(op.domain, op.name) for op in all_ops() if op.row_form is not None}
    assert all(op.has(Trait.REDUCTION) for op in all_ops() if op.has(Trait.ROW_REDUCIBLE))


def _row_peak_twice(b, node, attrs):
    """2 * max over the row, written through the builder alone (as a row form in tlc.ops must be)."""
    x, dtype, _ = row_input(b, node, float_only=True)
    peak = b.add_reduce(x, "max")
    return [b.add_op(E.arg(0) + E.arg(0), [peak], dtype)]


def _row_peak_infer(ctx):
    t = ctx.type(0)
    return [TensorType(t.dtype, t.shape[:-1] + (1,))]


def test_a_newly_registered_row_form_is_compiled_with_no_other_table(kcache, monkeypatch):
    from tlc.ops import OpDef, Trait, registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # restored after the test
    registry.register(OpDef(
        name="RowPeakTwice", domain="test.rowform", infer=_row_peak_infer,
        reference=lambda x: 2 * np.max(x, axis=-1, keepdims=True),
        traits=frozenset({Trait.PURE, Trait.REDUCTION, Trait.ROW_REDUCIBLE}), row_form=_row_peak_twice))
    g = Graph("peak")
    x = g.input("x", "float32", ("N", 33))
    g.output(g.add_node("Exp", [g.add_node("RowPeakTwice", [x], domain="test.rowform")]), "y")
    kernel = compile_for(g, "reduction", kcache)
    check_against_reference(kernel, g, [random_array(np.random.default_rng(5), (6, 33), "float32")])

    hardmax = Graph("hardmax")  # an op without a row form: the refusal lists the registry's, the new one too
    h = hardmax.input("x", "float32", (4, 8))
    hardmax.output(hardmax.add_node("Hardmax", [h]), "y")
    with pytest.raises(CompileError, match=r"no row form .*Softmax.*test\.rowform\.RowPeakTwice"):
        compile_for(hardmax, "reduction", kcache)


def test_register_refuses_a_row_trait_without_a_row_form(monkeypatch):
    from tlc.ops import OpDef, Trait, registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    traits = frozenset({Trait.PURE, Trait.REDUCTION, Trait.ROW_REDUCIBLE})
    with pytest.raises(ValueError, match="ROW_REDUCIBLE and a row_form"):
        registry.register(OpDef(name="NoForm", domain="test.rowform", infer=_row_peak_infer, reference=np.max,
                                traits=traits))
    with pytest.raises(ValueError, match="ROW_REDUCIBLE and a row_form"):
        registry.register(OpDef(name="NoTrait", domain="test.rowform", infer=_row_peak_infer, reference=np.max,
                                row_form=_row_peak_twice))
