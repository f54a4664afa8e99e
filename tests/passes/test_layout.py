"""The layout pass: the cost model's decisions, forced channels-last rewrites, and the transpose rules.

Every rewrite runs the reference executor before and after on random inputs (random weights too: see
layout_graphs.py). The twins' references are their ONNX ops on contiguous NCHW copies and the transpose rules
move data only, so numbers are bit-identical; only an op outside a region that reduces a transposed view (a
Softmax after a Transpose) sums in another order and agrees to float32 rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
from layout_graphs import CnnBuilder, conv_stack, lone_pointwise, small_cnn
from pass_testing import assert_same_outputs, ops, random_feeds

import tlc
from tlc.ops.layout_ops import NCHW_TO_NHWC, NHWC_TO_NCHW
from tlc.passes import PassOptions
from tlc.passes.layout import LayoutPass, predicted_regions
from tlc.passes.layout_cost import ConvShape, conv_ns, pool_ns
from tlc.targets import CPU

CLEANUP = ["fold", "simplify", "dce", "cse"]


def run_layout(graph: tlc.Graph, rng: np.random.Generator, prefer: str = "auto", exact: bool = False,
               **options) -> tuple[tlc.Graph, dict[str, int]]:
    """The pass on a copy (verified), with the reference executor's outputs compared before and after."""
    out = graph.copy()
    result = LayoutPass(PassOptions(opt_level=3, **options), prefer=prefer).run(out)
    out.verify()
    feeds = random_feeds(graph, rng)
    if exact:
        assert_same_outputs(graph, out, feeds)
    else:
        want, got = tlc.reference.run(graph, feeds), tlc.reference.run(out, feeds)
        assert list(got) == list(want)
        for name in want:
            assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert result.changed == any(v for k, v in result.stats.items() if k not in _NOTES)
    return out, result.stats


_NOTES = {"regions_kept_nchw", "boundary_transposes", "predicted_gain_us"}


# ---------------------------------------------------------------------------- decisions
def test_model_leaves_a_graph_alone_when_nhwc_would_not_win(rng):
    g = lone_pointwise(rng)
    (region,) = predicted_regions(g)
    assert region.nchw_ns == region.nhwc_ns and region.gain_ns < 0   # same GEMM, plus two transposes
    out, stats = run_layout(g, rng, exact=True)
    assert stats == {"regions_kept_nchw": 1}
    assert out.structural_hash() == g.structural_hash() and str(out) == str(g)


def test_model_switches_a_region_that_wins(rng):
    g = conv_stack(rng)
    (region,) = predicted_regions(g)
    assert region.anchors == 6 and region.wins(CPU.costs)
    out, stats = run_layout(g, rng, exact=True)
    assert stats["regions_nhwc"] == 1 and stats["nodes_nhwc"] == 12 and stats["boundary_transposes"] == 2
    assert ops(out) == ["Transpose"] + ["tlc.ConvNhwc", "Relu"] * 6 + ["Transpose"]
    first, last = out.ops()[0], out.ops()[-1]
    assert first.attrs["perm"] == list(NCHW_TO_NHWC) and last.attrs["perm"] == list(NHWC_TO_NCHW)
    assert out.outputs[0][1] == "y" and out.value_name(out.outputs[0][0]) == "y"   # the output keeps its name
    assert out.type_of(out.outputs[0][0]) == g.type_of(g.outputs[0][0])
    w = out.const_value(out.inputs_of(out.ops()[1])[1])
    assert w.shape == (256, 3, 3, 256)                                             # OHWI, folded at compile time


def test_prefer_nchw_and_targets_without_a_model_change_nothing(rng):
    g = conv_stack(rng, c=64)
    for out, stats in (run_layout(g, rng, prefer="nchw", exact=True), run_layout(g, rng, target="cuda", exact=True)):
        assert stats == {} and str(out) == str(g)
    with pytest.raises(ValueError, match="prefer must be one of auto, nchw, nhwc"):
        LayoutPass(prefer="nchwc")


def test_cost_model_prefers_nhwc_where_im2col_rows_are_short():
    t = CPU.costs

    def saving(shape: ConvShape) -> float:
        nchw, nhwc = conv_ns(t, shape)
        return (nchw - nhwc) / nchw

    late = ConvShape(1, 512, 7, 7, 512, 3, 3, 7, 7, 1, 1, 1, 1, True)        # NCHW im2col copies runs of 7
    early = ConvShape(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, True)     # ... runs of 56
    stem = ConvShape(1, 3, 224, 224, 64, 7, 7, 112, 112, 1, 2, 2, 1, True)   # NHWC copies runs of 7 * 3
    pointwise = ConvShape(1, 256, 14, 14, 1024, 1, 1, 14, 14, 1, 1, 1, 1, False)
    strided = ConvShape(1, 256, 56, 56, 512, 1, 1, 28, 28, 1, 2, 2, 1, False)
    assert saving(late) > 0.05 and 0 < saving(early) < saving(late)
    assert saving(stem) < 0 and saving(pointwise) == 0 and saving(strided) > 0
    nchw, nhwc = pool_ns(t, ConvShape(1, 64, 112, 112, 64, 3, 3, 56, 56, 1, 2, 2, 1, True))
    assert nhwc < nchw


# ---------------------------------------------------------------------------- forced rewrites
def test_forced_nhwc_rewrites_every_op_kind_and_keeps_numbers(rng):
    g = small_cnn(rng)
    out, stats = run_layout(g, rng, prefer="nhwc", exact=True)
    assert stats["regions_nhwc"] == 1 and stats["nodes_nhwc"] == 18
    counts = out.op_counts()
    for op in ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool"):
        assert op not in counts and counts[f"tlc.{op}Nhwc"] == g.op_counts()[op]
    # one transpose in (the image); the one out moves only unit axes ([2,1,1,16]) and became a Reshape
    assert counts["Transpose"] == 1 and counts["Reshape"] == 1
    concats = [n for n in out.ops() if n.op == "Concat"]
    assert [n.attrs["axis"] for n in concats] == [3, 3]
    mul = next(n for n in out.ops() if n.op == "Mul")
    assert out.const_value(out.inputs_of(mul)[1]).shape == (1, 1, 1, 8)     # the [C,1,1] scale, channels-last


def test_values_leaving_a_region_are_transposed_back_once(rng):
    b = CnnBuilder(rng)
    h = b.relu(b.conv(b.input((1, 4, 6, 6)), 8, 3))
    b.g.output(h, "mid")                                   # leaves as a graph output ...
    b.g.output(b.op("Softmax", h, axis=1), "a")            # ... and to an op with no channels-last form
    b.g.output(b.conv(h, 8, 1), "y")
    out, stats = run_layout(b.g, rng, prefer="nhwc")       # Softmax sums a view's values in another order
    assert [n for _, n in out.outputs] == ["mid", "a", "y"]
    backs = [n for n in out.ops() if n.op == "Transpose" and n.attrs["perm"] == list(NHWC_TO_NCHW)]
    assert len(backs) == 2 and out.value_name(backs[0].output(0)) == "mid"  # 'mid': one for Softmax and output
    softmax = next(n for n in out.ops() if n.op == "Softmax")
    assert out.inputs_of(softmax)[0] == backs[0].output(0) and softmax.attrs["axis"] == 1


def test_non_constant_weight_is_transposed_in_the_graph(rng):
    b = CnnBuilder(rng)
    w = b.g.input("w", "float32", (6, 4, 3, 3))
    b.g.output(b.conv(b.input((1, 4, 5, 5)), 6, 3, weight=w), "y")
    (region,) = predicted_regions(b.g)
    assert region.boundary_ns > 0
    out, _ = run_layout(b.g, rng, prefer="nhwc", exact=True)
    conv = next(n for n in out.ops() if n.op == "ConvNhwc")
    w_in = out.producer(out.inputs_of(conv)[1])
    assert w_in.op == "Transpose" and out.inputs_of(w_in)[0] == out.input_value("w")


def test_splat_weights_are_free_to_transpose(rng):
    b = CnnBuilder(rng)
    shape = b.g.constant(np.array([16, 16, 3, 3], np.int64), "shape")
    w = b.g.add_node("ConstantOfShape", [shape], value=np.array([0.01], np.float32))
    b.g.output(b.conv(b.input((1, 16, 7, 7)), 16, 3, weight=w), "y")
    out, stats = run_layout(b.g, rng, prefer="nhwc", exact=True)
    splat = out.producer(out.inputs_of(next(n for n in out.ops() if n.op == "ConvNhwc"))[1])
    assert splat.op == "ConstantOfShape" and stats["transposes_folded"] == 1
    assert list(out.const_value(out.inputs_of(splat)[0])) == [16, 3, 3, 16]


def test_ops_without_a_channels_last_form_split_regions(rng):
    b = CnnBuilder(rng)
    h = b.relu(b.conv(b.input((1, 8, 6, 6)), 8, 3))
    h = b.op("LRN", h, size=3)                         # layout-sensitive, no twin: a region boundary
    b.g.output(b.conv(h, 8, 3), "y")
    assert len(predicted_regions(b.g)) == 2
    out, stats = run_layout(b.g, rng, prefer="nhwc", exact=True)
    assert stats["regions_nhwc"] == 2 and out.op_counts()["Transpose"] == 4 and "LRN" in out.op_counts()


def test_pipeline_o3_matches_the_reference_and_runs(rng):
    g = small_cnn(rng)
    feeds = random_feeds(g, rng)
    want = tlc.reference.run(g, feeds)
    unfused, _ = tlc.optimize(g, passes=[CLEANUP, LayoutPass(prefer="nhwc"), CLEANUP])
    fused, _ = tlc.optimize(unfused, passes=["fuse"])
    for graph in (tlc.optimize(g, opt_level=3)[0], unfused, fused):
        got = tlc.reference.run(graph, feeds)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)
    plan = tlc.compile(unfused, opt_level=0, jit="off")
    np.testing.assert_allclose(plan.run(feeds)["y"], want["y"], rtol=1e-4, atol=1e-5)
    nhwc = [s for s in plan.stats().steps if s.op.endswith("Nhwc")]
    assert len(nhwc) == 9 and all(s.mode == "library" for s in nhwc)        # native NHWC kernels, no reference
    assert {n for s in nhwc if s.op == "tlc.ConvNhwc" for n in s.notes} == {"nhwc im2col", "nhwc gemm1x1",
                                                                            "nhwc depthwise"}
    plan = tlc.compile(fused, opt_level=0, jit="eager")    # conv epilogues: NHWC conv, then the generated kernel
    np.testing.assert_allclose(plan.run(feeds)["y"], want["y"], rtol=1e-4, atol=1e-5)
    epilogues = [s for s in plan.stats().steps if s.op == "tlc.Fused[epilogue]"]
    assert epilogues and all(s.mode == "native" and s.notes[0].startswith("nhwc") for s in epilogues)


# ---------------------------------------------------------------------------- transpose rules
def _transposes(graph: tlc.Graph) -> list[list[int]]:
    return [n.attrs["perm"] for n in graph.ops() if n.op == "Transpose"]


def test_inverse_transposes_cancel_and_others_compose(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 3, 4, 5))
    a = g.add_node("Transpose", [g.add_node("Transpose", [x], perm=[0, 2, 3, 1])], perm=[0, 3, 1, 2])
    b = g.add_node("Transpose", [g.add_node("Transpose", [x], perm=[1, 0, 2, 3])], perm=[0, 1, 3, 2])
    g.output(g.add_node("Relu", [a]), "a")
    g.output(b, "b")
    out, stats = run_layout(g, rng, exact=True)
    assert stats == {"transposes_cancelled": 1, "transposes_composed": 1}   # a pair that cancels is one step
    assert _transposes(out) == [[1, 0, 3, 2]] and out.value_name(out.outputs[1][0]) == "b"


def test_transposes_of_constants_fold_and_unit_axes_become_reshapes(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (2, 1, 1, 6))
    c = g.add_node("Transpose", [g.constant(np.arange(6, dtype=np.float32).reshape(1, 6, 1, 1))], perm=[0, 2, 3, 1])
    g.output(g.add_node("Transpose", [g.add_node("Add", [x, c])], perm=[0, 3, 1, 2]), "y")
    out, stats = run_layout(g, rng, exact=True)
    assert stats == {"transposes_folded": 1, "transposes_to_reshape": 1}
    assert ops(out) == ["Add", "Reshape"] and out.value_name(out.outputs[0][0]) == "y"


def test_transposes_sink_through_elementwise_chains_to_cancel(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (1, 3, 4, 5))
    t = g.add_node("Transpose", [x], perm=[0, 2, 3, 1])
    h = g.add_node("Mul", [g.add_node("Relu", [t]), g.constant(np.array([1.0, 2.0, 3.0], np.float32))])
    h = g.add_node("Add", [h, g.constant(np.float32(0.5))])
    g.output(g.add_node("Transpose", [h], perm=[0, 3, 1, 2]), "y")
    out, stats = run_layout(g, rng, exact=True)
    assert stats["transposes_sunk"] == 3 and _transposes(out) == []
    mul = next(n for n in out.ops() if n.op == "Mul")
    assert out.const_value(out.inputs_of(mul)[1]).shape == (1, 3, 1, 1)   # the channel vector, back in NCHW


def test_sinking_merges_sibling_transposes(rng):
    g = tlc.Graph()
    x, y = g.input("x", "float32", (2, 3, 4)), g.input("y", "float32", (2, 3, 4))
    s = g.add_node("Add", [g.add_node("Transpose", [x], perm=[2, 0, 1]), g.add_node("Transpose", [y], perm=[2, 0, 1])])
    g.output(g.add_node("Exp", [s]), "z")
    out, stats = run_layout(g, rng, exact=True)
    assert stats == {"transposes_sunk": 1} and ops(out) == ["Add", "Transpose", "Exp"]


def test_transposes_that_would_not_cancel_stay(rng):
    g = tlc.Graph()
    x = g.input("x", "float32", (1, 3, 4, 5))
    t = g.add_node("Transpose", [x], perm=[0, 2, 3, 1])
    g.output(g.add_node("Relu", [t]), "a")                        # nothing to meet below
    g.output(g.add_node("Tanh", [g.add_node("Transpose", [x], perm=[0, 1, 3, 2])]), "b")
    out, stats = run_layout(g, rng, exact=True)
    assert stats == {} and str(out) == str(g)


# ---------------------------------------------------------------------------- decisions on real models (slow)
@pytest.mark.slow
def test_o3_equals_o2_on_the_benchmark_suite_and_switches_inception():
    """Pins the decisions that tools/layout_bench.py --e2e measured (see layout_cost.py): on resnet50_light
    channels-last saves 4.9% of the conv time by the model and 0-4% end to end on one thread (not measurable on
    two threads on the shared machine), under the 6% margin, so -O3 keeps the -O2 graph for every suite model;
    Inception v1 (model: 19.7%, measured: -O3 11% faster) switches. Re-measure before changing these."""
    import os
    import sys
    import tempfile

    import onnx

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
    import models

    for name in ("mlp", "transformer_block", "elementwise_chain", "layernorm_softmax", "resnet50_light"):
        path = os.path.join(tempfile.mkdtemp(), f"{name}.onnx")
        onnx.save(models.bench_model(name), path)
        graph = tlc.load(path)
        o2, _ = tlc.optimize(graph, opt_level=2)
        o3, _ = tlc.optimize(graph, opt_level=3)
        assert o3.structural_hash() == o2.structural_hash(), name
    inception = tlc.load(str(models.light_model_path("inception_v1")))
    o3, report = tlc.optimize(inception, opt_level=3)
    stats = next(r.stats for r in report.records if r.name == "layout")
    assert stats["regions_nhwc"] == 1 and stats["regions_kept_nchw"] == 2 and "Conv" not in o3.op_counts()
