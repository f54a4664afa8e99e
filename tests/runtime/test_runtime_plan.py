"""Compiled plans against the reference executor: shapes, aliasing, buffer reuse, threads, feeds, stats."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_graphs import fused_graph, run_in_threads

import tlc
from tlc.runtime import CompileOptions, compile


def assert_same(plan, graph, feeds):
    got = plan.run(feeds)
    want = tlc.reference.run(graph, feeds)
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert_close(got[name], want[name], name)
    return got


def assert_close(got, want, name=""):
    """float32 sums in another order (a kernel's, BLAS's): an absolute error relative to the output's scale (the
    MLP's products reach ~50)."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale, err_msg=name)


def mlp(batch="N") -> tlc.Graph:
    rng = np.random.default_rng(3)
    g = tlc.Graph("mlp")
    x = g.input("x", "float32", (batch, 16))
    w1 = g.constant(rng.standard_normal((16, 32)).astype(np.float32), name="w1")
    b1 = g.constant(rng.standard_normal(32).astype(np.float32), name="b1")
    w2 = g.constant(rng.standard_normal((32, 8)).astype(np.float32), name="w2")
    h = g.add_node("Relu", [g.add_node("Add", [g.add_node("MatMul", [x, w1]), b1])])
    s = g.add_node("Sigmoid", [h])                       # no ufunc: a one-op kernel (numpy without JIT)
    logits = g.add_node("MatMul", [g.add_node("Mul", [h, s]), w2])
    flat = g.add_node("Reshape", [logits, g.constant(np.array([-1], np.int64), name="flat")])
    g.output(g.add_node("Softmax", [logits], axis=-1), "probs")
    g.output(flat, "flat")
    return g


def many_temporaries() -> tlc.Graph:
    """Twelve [64, 64] temporaries with overlapping lifetimes: slots must be reused without clobbering."""
    g = tlc.Graph("temps")
    x = g.input("x", "float32", (64, 64))
    y = g.input("y", "float32", (64, 64))
    vals = [x, y]
    for i in range(12):
        a, b = vals[-1], vals[-3] if len(vals) >= 3 else vals[0]
        op = ("Add", "Mul", "Sub", "Max")[i % 4]
        vals.append(g.add_node(op, [a, b]))
    g.output(g.add_node("Add", [vals[-1], vals[4]]), "out")
    g.output(vals[7], "mid")
    return g


@pytest.mark.parametrize("jit", ["eager", "off"])
def test_mlp_symbolic_batch_two_sizes(jit, rng):
    g = mlp()
    plan = compile(g, jit=jit)
    for batch in (3, 17, 3):
        assert_same(plan, g, {"x": rng.standard_normal((batch, 16), dtype=np.float32)})
    sigs = [s["signature"] for s in plan.stats().specializations]
    assert sorted(sigs) == ["x[17, 16]", "x[3, 16]"]          # one specialization per batch size


def test_static_graph_is_planned_at_compile_time(rng):
    g = mlp(batch=4)
    plan = compile(g)
    assert [s["signature"] for s in plan.stats().specializations] == ["x[4, 16]"]
    assert_same(plan, g, {"x": rng.standard_normal((4, 16), dtype=np.float32)})


def test_buffer_reuse_never_corrupts(rng):
    g = many_temporaries()
    plan = compile(g, opt_level=0)                          # unfused: every temporary is a buffer
    feeds = {"x": rng.standard_normal((64, 64), dtype=np.float32), "y": rng.standard_normal((64, 64),
                                                                                             dtype=np.float32)}
    for _ in range(3):
        assert_same(plan, g, feeds)
    (spec,) = plan.stats().specializations
    planned = 12 - 1                                         # temporaries not returned (vals[7] is an output)
    assert spec["slots"] < planned and spec["inplace"] >= 1
    assert spec["arena_bytes"] <= spec["slots"] * 64 * 64 * 4


def test_outputs_never_alias_inputs_constants_or_each_other(rng):
    g = tlc.Graph("alias")
    x = g.input("x", "float32", (2, 3))
    c = g.constant(np.arange(6, dtype=np.float32).reshape(2, 3), name="c")
    r = g.add_node("Relu", [x])
    g.output(x, "x_out")                                   # an input as output
    g.output(c, "c_out")                                   # a constant as output
    g.output(r, "r")
    g.output(r, "r_again")                                 # the same value under a second name
    g.output(g.add_node("Identity", [r]), "r_view")        # a view of another output
    g.output(g.add_node("Reshape", [x, g.constant(np.array([6], np.int64))]), "x_view")
    plan = compile(g)
    x0 = rng.standard_normal((2, 3), dtype=np.float32)
    feeds = {"x": x0.copy()}
    out = plan.run(feeds)
    arrays = list(out.values()) + [feeds["x"], g.const_value(c)]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)
    for a in out.values():
        a[...] = 99.0                                      # the caller owns what it got
    again = plan.run({"x": x0})
    np.testing.assert_array_equal(again["x_out"], x0)
    np.testing.assert_array_equal(again["c_out"], np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(again["r_view"], np.maximum(x0, 0))
    np.testing.assert_array_equal(feeds["x"], x0)          # the feed was neither returned nor written


def test_feed_is_never_written(rng):
    g = many_temporaries()
    plan = compile(g)
    x = rng.standard_normal((64, 64), dtype=np.float32)
    y = rng.standard_normal((64, 64), dtype=np.float32)
    xc, yc = x.copy(), y.copy()
    plan.run({"x": x, "y": y})
    np.testing.assert_array_equal(x, xc)
    np.testing.assert_array_equal(y, yc)


def test_concurrent_runs_from_eight_threads(rng):
    g = mlp()
    plan = compile(g)
    inputs = [rng.standard_normal((1 + i % 3, 16), dtype=np.float32) for i in range(8)]
    wants = [tlc.reference.run(g, {"x": x}) for x in inputs]

    def worker(i):
        for _ in range(25):
            got = plan.run({"x": inputs[i]})
            for name, want in wants[i].items():
                assert_close(got[name], want, name)

    run_in_threads(worker)
    assert plan.runs == 200


def test_feed_errors_are_named(rng):
    plan = compile(mlp())
    x = rng.standard_normal((2, 16), dtype=np.float32)
    with pytest.raises(tlc.InputError, match="unknown input name.*'y'"):
        plan.run({"x": x, "y": x})
    with pytest.raises(tlc.InputError, match="missing input"):
        plan.run({})
    with pytest.raises(tlc.ShapeMismatchError, match="dim 1 should be 16"):
        plan.run({"x": x[:, :8]})
    with pytest.raises(tlc.ShapeMismatchError, match="rank"):
        plan.run({"x": x[0]})
    with pytest.raises(tlc.DTypeMismatchError, match="expected dtype float32, got float64"):
        plan.run({"x": x.astype(np.float64)})

def test_big_endian_feeds_are_their_values(rng):
    """'>f4' is float32 too: the values reach the kernels, not the swapped bytes (a Relu kernel once read them)."""
    g = tlc.Graph("relu")
    g.output(g.add_node("Relu", [g.input("x", "float32", ("N", 64))]), "y")
    plan = compile(g, jit="eager")
    x = rng.standard_normal((3, 64), dtype=np.float32)
    np.testing.assert_array_equal(plan.run({"x": x.astype(">f4")})["y"], np.maximum(x, 0))


def test_multi_output_fused_group_on_the_reference_path(rng):
    g = fused_graph(n_outputs=2)
    plan = compile(g, opt_level=0, jit="off")
    x = rng.standard_normal((5, 4), dtype=np.float32)
    assert_same(plan, g, {"x": x})


def test_stats_content(rng):
    g = mlp()
    plan = compile(g, opt_level=0, jit="off")
    plan.run({"x": rng.standard_normal((2, 16), dtype=np.float32)})
    st = plan.stats()
    by_op = {s.op: s for s in st.steps}
    assert by_op["MatMul"].mode == "library" and by_op["MatMul"].reason == "numpy matmul (jit='off')"
    assert by_op["Sigmoid"].mode == "library" and "scalar expression" in by_op["Sigmoid"].reason
    assert by_op["Reshape"].mode == "view"
    assert all(s.calls == 1 for s in st.steps)
    assert st.totals["steps"] == len(st.steps) == 8
    assert st.totals["reference_steps"] == 0 and st.reference_steps() == []
    text = str(st)
    assert "Sigmoid" in text and "library" in text and "totals:" in text and "x[2, 16]" in text
    eager = compile(g, opt_level=0, jit="eager")
    eager.run({"x": rng.standard_normal((2, 16), dtype=np.float32)})   # a symbolic batch: kernels per shape
    by_op = {s.op: s for s in eager.stats().steps}
    assert by_op["MatMul"].mode == by_op["Sigmoid"].mode == "native" and by_op["Sigmoid"].compile_ms is not None
    assert st.to_dict()["totals"]["runs"] == 1
    assert set(plan.compile_report()) == {"passes_s", "lower_s"}
    assert set(eager.compile_report()) == {"passes_s", "lower_s", "jit_s"}


def test_options_are_validated():
    with pytest.raises(tlc.TlcError, match="jit must be one of"):
        CompileOptions(jit="sometimes")
    with pytest.raises(tlc.TlcError, match="num_threads"):
        CompileOptions(num_threads=0)
    with pytest.raises(TypeError, match="unknown compile option"):
        compile(mlp(), nonsense=1)
    opts = CompileOptions.from_env({"TLC_NUM_THREADS": "1", "TLC_CACHE_DIR": "/tmp/k"}, jit="lazy")
    assert (opts.num_threads, opts.cache_dir, opts.jit) == (1, "/tmp/k", "lazy")
    assert CompileOptions.from_env({"TLC_NUM_THREADS": "1"}, num_threads=2).num_threads == 2


def test_compile_does_not_change_the_callers_graph(rng):
    g = mlp()
    before = str(g.op_counts()), g.structural_hash()
    compile(g).run({"x": rng.standard_normal((2, 16), dtype=np.float32)})
    assert (str(g.op_counts()), g.structural_hash()) == before


def test_split_into_contiguous_runs_gives_views_that_in_place_kernels_do_not_clobber(rng):
    """A Split along an axis with only unit axes before it hands out views of its input (no copies); the
    elementwise kernels after it, which may write in place, must not write into a part another step still
    reads, and graph outputs that are views come back as copies of their own. A split along a later axis, or of
    a strided input, still copies (blocks of rows, ``tlc.kernels.transpose.copy_block``)."""
    g = tlc.Graph("split")
    x = g.input("x", "float32", (1, 6, 5))
    h = g.add_node("Relu", [x])
    a, b, c = g.add_node("Split", [h, g.constant(np.array([2, 3, 1], np.int64))], axis=1, num_outputs=3)
    g.output(g.add_node("Add", [a, g.constant(np.float32(1.0))]), "a1")
    g.output(g.add_node("Mul", [b, g.constant(np.float32(2.0))]), "b2")
    g.output(c, "c")
    g.output(g.add_node("Sub", [b, g.constant(np.float32(3.0))]), "b3")
    d, e = g.add_node("Split", [h], axis=2, attrs={"num_outputs": 2})
    g.output(g.add_node("Neg", [d]), "d")
    g.output(e, "e")
    plan = compile(g, jit="eager", opt_level=0)
    feeds = {"x": rng.standard_normal((1, 6, 5), dtype=np.float32)}
    for _ in range(2):   # the second run reuses the arena the first left behind
        assert_same(plan, g, feeds)
    modes = [s.mode for s in plan.stats().steps if s.op == "Split"]
    assert modes == ["view", "native"]


def test_views_of_planned_buffers_are_made_once_per_arena(rng):
    """A view step whose input is a planned buffer (the same array every run) runs once, when the run function
    is bound to its arena; a view of a feed still runs every run. Each run with new feeds reads the new values
    through both."""
    g = tlc.Graph("views")
    x = g.input("x", "float32", (4, 6))
    flat_x = g.add_node("Reshape", [x, g.constant(np.array([24], np.int64))])
    h = g.add_node("Relu", [x])
    cube = g.add_node("Reshape", [h, g.constant(np.array([2, 3, 4], np.int64))])
    g.output(g.add_node("Mul", [cube, g.constant(np.float32(2.0))]), "cube2")
    g.output(g.add_node("Neg", [flat_x]), "neg")
    plan = compile(g, jit="eager", opt_level=0)
    for _ in range(3):
        assert_same(plan, g, {"x": rng.standard_normal((4, 6), dtype=np.float32)})
    make, run = plan.runner_source().split("def run")
    assert len([line for line in make.splitlines() if "= k" in line]) == 1     # the view of h
    assert len([line for line in run.splitlines() if "= k" in line]) == 1      # the view of x
