"""Resize and ConvTranspose as library steps (``runtime.library.ResizeImpl``, ``ConvTransposeImpl``): many nodes
per plan against the reference executor and onnxruntime, and every ONNX backend node case of the two ops that
the reference passes, run as compiled plans."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx_cases import PASS, CompiledRunner, as_array, quick_cases_for, reference_runner, run_case

import tlc
from tlc.io.onnx import from_onnx
from tlc.kernels import resample
from tlc.ops import resize as resize_ops

ort = pytest.importorskip("onnxruntime")


def f32(*values) -> np.ndarray:
    return np.array(values, np.float32)


def i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def build(op: str, feeds: dict[str, np.ndarray], cases: dict[str, tuple[str, list, dict]],
          opset: int = 19) -> onnx.ModelProto:
    """One model, one ``op`` node per case: ``name: (data input, [constant inputs or None], attributes)``;
    constant inputs become initializers, an entry that is a str names a graph input."""
    nodes, inits = [], []
    for name, (data, consts, attrs) in cases.items():
        names = [data]
        for k, c in enumerate(consts):
            if c is None or isinstance(c, str):
                names.append(c or "")
            else:
                inits.append(numpy_helper.from_array(c, f"{name}_c{k}"))
                names.append(f"{name}_c{k}")
        nodes.append(helper.make_node(op, names, [name], name=name, **attrs))
    graph = helper.make_graph(
        nodes, op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()
         if any(n in node.input for node in nodes)],
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[c[0]].dtype), None)
         for n, c in cases.items()],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def check_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray], with_ort=True, rtol=1e-5, atol=1e-6,
                jit: str = "off") -> dict:
    """The compiled plan (every step a library step, or with the JIT a native one) against the reference
    executor and onnxruntime (which has no float64 Resize or ConvTranspose); returns the steps' notes."""
    feeds = {vi.name: feeds[vi.name] for vi in model.graph.input}
    graph = from_onnx(model)[0]
    plan = tlc.compile(graph, opt_level=0, jit=jit)
    first, have = plan.run(feeds), plan.run(feeds)   # the second run reuses dirty scratch
    modes = {s.name: (s.mode, s.reason) for s in plan.stats().steps}
    assert all(mode == "library" or (jit != "off" and mode == "native") for mode, _ in modes.values()), modes
    want = tlc.reference.run(graph, feeds)
    names = [o.name for o in model.graph.output]
    if with_ort:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        from_ort = dict(zip(names, sess.run(None, feeds)))
    for name in names:
        np.testing.assert_array_equal(first[name], have[name])
        assert have[name].dtype == want[name].dtype, name
        np.testing.assert_allclose(have[name], want[name], rtol=rtol, atol=atol, err_msg=f"{name} vs reference")
        if with_ort:
            np.testing.assert_allclose(have[name], from_ort[name], rtol=1e-4, atol=1e-5, err_msg=f"{name} vs ort")
    return {s.name: s.reason for s in plan.stats().steps}


def test_resize_modes_match_reference_and_onnxruntime(rng):
    feeds = {"x": rng.standard_normal((2, 3, 6, 7), dtype=np.float32),
             "wide": rng.standard_normal((1, 2, 3, 130), dtype=np.float32),     # long axes: tap by tap
             "tall": rng.standard_normal((1, 2, 120, 5), dtype=np.float32),
             "big": rng.standard_normal((1, 2, 40, 100), dtype=np.float32),     # two passes tap by tap
             "mixed": rng.standard_normal((1, 2, 40, 50), dtype=np.float32),    # taps, then a dense product
             "x64": rng.standard_normal((1, 2, 5, 4)),
             "u8": rng.integers(0, 255, (1, 2, 5, 4), dtype=np.uint8)}
    near, lin, cub = {"mode": "nearest"}, {"mode": "linear"}, {"mode": "cubic"}
    cases = {
        "nearest_floor_asymmetric": ("x", [None, f32(1, 1, 2, 2)],
                                     {**near, "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"}),
        "nearest_prefer_floor_half_pixel": ("x", [None, f32(1, 1, 1.5, 2.5)], near),
        "nearest_ceil_align_corners_sizes": ("x", [None, None, i64(2, 3, 9, 4)],
                                             {**near, "nearest_mode": "ceil",
                                              "coordinate_transformation_mode": "align_corners"}),
        "nearest_down": ("x", [None, f32(1, 1, 0.5, 0.6)], {**near, "nearest_mode": "round_prefer_ceil"}),
        "linear_half_pixel": ("x", [None, f32(1, 1, 2, 2)], lin),
        "linear_align_corners_sizes": ("x", [None, None, i64(2, 3, 11, 5)],
                                       {**lin, "coordinate_transformation_mode": "align_corners"}),
        "linear_pytorch_half_pixel": ("x", [None, f32(1, 1, 0.5, 1.75)],
                                      {**lin, "coordinate_transformation_mode": "pytorch_half_pixel"}),
        "linear_channels_too": ("x", [None, f32(1, 1.5, 2, 1)], lin),
        "cubic_half_pixel": ("x", [None, f32(1, 1, 2, 1.5)], cub),
        "cubic_exclude_outside_sizes": ("x", [None, None, i64(2, 3, 10, 9)],
                                        {**cub, "cubic_coeff_a": -0.5, "exclude_outside": 1,
                                         "coordinate_transformation_mode": "asymmetric"}),
        "linear_antialias_down": ("x", [None, f32(1, 1, 0.5, 0.4)], {**lin, "antialias": 1}),
        "cubic_antialias_sizes": ("x", [None, None, i64(4, 3)], {**cub, "antialias": 1, "axes": [2, 3]}),
        "linear_axes_not_larger": ("x", [None, None, i64(9, 9)],
                                   {**lin, "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}),
        "linear_tf_crop_and_resize": ("x", [f32(0, 0, 0.2, -0.3, 1, 1, 0.9, 1.2), None, i64(2, 3, 5, 8)],
                                      {**lin, "coordinate_transformation_mode": "tf_crop_and_resize",
                                       "extrapolation_value": 2.5}),
        "wide_linear": ("wide", [None, f32(1, 1, 1, 1.5)], lin),
        "wide_cubic_down": ("wide", [None, f32(1, 1, 1, 0.75)], cub),
        "tall_linear": ("tall", [None, f32(1, 1, 1.7, 1)], {**lin, "coordinate_transformation_mode": "align_corners"}),
        "big_linear": ("big", [None, f32(1, 1, 2, 1.2)], lin),
        "big_cubic_down": ("big", [None, None, i64(20, 50)], {**cub, "axes": [2, 3]}),
        "mixed_linear": ("mixed", [None, f32(1, 1, 1.5, 2)], lin),
        "uint8_nearest": ("u8", [None, f32(1, 1, 2, 1.5)], near),
        # 2x upsamplings: the plane kernel's doubled rows (``resample.pairs``), their ends gathered
        "linear_2x": ("big", [None, f32(1, 1, 2, 2)], lin),
        "linear_2x_align_corners": ("mixed", [None, f32(1, 1, 2, 2)],
                                    {**lin, "coordinate_transformation_mode": "align_corners"}),
        "linear_2x_pytorch_half_pixel": ("mixed", [None, f32(1, 1, 2, 2)],
                                         {**lin, "coordinate_transformation_mode": "pytorch_half_pixel"}),
        "cubic_2x": ("mixed", [None, f32(1, 1, 2, 2)], cub),
        "nearest_2x_sizes": ("big", [None, None, i64(1, 2, 80, 200)],
                             {**near, "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"}),
        "nearest_2x_half_pixel": ("mixed", [None, f32(1, 1, 2, 2)], near),
    }
    doubles = {"double_linear": ("x64", [None, f32(1, 1, 2.2, 1.5)], lin),
               "double_cubic": ("x64", [None, f32(1, 1, 0.6, 1.5)], {**cub, "antialias": 1}),
               "double_nearest": ("x64", [None, f32(1, 1, 2, 3)], near),
               "double_linear_2x": ("x64", [None, f32(1, 1, 2, 2)], lin)}
    check_model(build("Resize", feeds, cases), feeds)
    check_model(build("Resize", feeds, doubles), feeds, with_ort=False, rtol=1e-12, atol=1e-12)
    # with the JIT: the plane kernel (``tlc.kernels.resample``) for the float cases that resize H and W only
    notes = check_model(build("Resize", feeds, cases), feeds, jit="eager")
    planes = {name for name, note in notes.items() if note.startswith("plane kernel")}
    assert planes == set(cases) - {"linear_channels_too", "linear_tf_crop_and_resize", "uint8_nearest"}, notes
    notes = check_model(build("Resize", feeds, doubles), feeds, with_ort=False, rtol=1e-12, atol=1e-12, jit="eager")
    assert all(note.startswith("plane kernel") for note in notes.values()), notes


def test_doubled_rows_take_their_interior_at_fixed_offsets():
    """``resample.pairs`` finds the 2x form of a row's taps where it holds, and only there."""
    def taps(attrs, in_len, out_len):
        attrs = {"nearest_mode": "round_prefer_floor", "cubic_coeff_a": -0.75, "antialias": 0,
                 "exclude_outside": 0, "coordinate_transformation_mode": "half_pixel", **attrs}
        coords, _ = resize_ops.source_coords(attrs["coordinate_transformation_mode"], out_len, in_len,
                                             out_len / in_len, (0.0, 1.0))
        idx, weights = resize_ops.taps(coords, in_len, out_len / in_len, attrs)
        return resample.pairs(idx.astype(np.int64), weights.astype(np.float32), in_len)

    pair, weights = taps({"mode": "linear"}, 9, 18)   # half_pixel: the first and last columns clamp
    assert pair.tolist() == [1, 8, -1, 0, 0, 1] and weights.tolist() == [0.25, 0.75, 0.75, 0.25]
    pair, weights = taps({"mode": "nearest", "nearest_mode": "floor",
                          "coordinate_transformation_mode": "asymmetric"}, 9, 18)
    assert pair.tolist() == [0, 9, 0, 0, 0, 0] and weights.tolist() == [1, 0, 1, 0]
    assert taps({"mode": "linear"}, 9, 17)[0][:2].tolist() == [0, 0]       # not doubled
    assert taps({"mode": "cubic"}, 9, 18)[0][:2].tolist() == [0, 0]        # four taps
    j0, j1 = taps({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 9, 18)[0][:2]
    assert j1 - j0 == 1                                                     # no fixed offsets: the middle only


def test_convtranspose_matches_reference_and_onnxruntime(rng):
    x = rng.standard_normal((2, 4, 5, 6), dtype=np.float32)
    weight = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)

    def w(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    feeds = {"x": x, "weight": weight, "x64": rng.standard_normal((1, 2, 3, 4))}
    cases = {
        "k2s2_bias": ("x", [w(4, 3, 2, 2), w(3)], {"strides": [2, 2]}),
        "k2s2": ("x", [w(4, 3, 2, 2)], {"strides": [2, 2]}),
        "k3s2_pads_output_padding": ("x", [w(4, 3, 3, 3)], {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                            "output_padding": [1, 1]}),
        "k3s2_pads_output_padding_bias": ("x", [w(4, 3, 3, 3), w(3)],
                                          {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
        "group2_bias": ("x", [w(4, 2, 3, 3), w(4)], {"group": 2, "pads": [1, 1, 1, 1]}),
        "group2": ("x", [w(4, 3, 2, 3)], {"group": 2, "strides": [1, 2]}),
        "dilation2_bias": ("x", [w(4, 3, 3, 3), w(3)], {"dilations": [2, 2]}),
        "dilation2_stride3": ("x", [w(4, 2, 2, 3)], {"dilations": [2, 1], "strides": [3, 2], "pads": [0, 1, 1, 0]}),
        "sparse_k1s3": ("x", [w(4, 3, 1, 1), w(3)], {"strides": [3, 3]}),    # taps leave gaps: bias fill
        "same_upper": ("x", [w(4, 3, 3, 3)], {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        "output_shape": ("x", [w(4, 3, 3, 3), w(3)], {"strides": [2, 2], "output_shape": [12, 14]}),
        "weight_input": ("x", ["weight", None], {"strides": [2, 1], "pads": [1, 0, 0, 1]}),
        # the kernel is the stride: every output element one tap's (``interleave_taps``), unless pads shift it
        "k3s3_bias": ("x", [w(4, 3, 3, 3), w(3)], {"strides": [3, 3]}),
        "k2s2_group2_bias": ("x", [w(4, 2, 2, 2), w(4)], {"strides": [2, 2], "group": 2}),
        "k2s2_pads": ("x", [w(4, 3, 2, 2), w(3)], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    }
    check_model(build("ConvTranspose", feeds, cases, opset=17), feeds, rtol=1e-5, atol=1e-5)
    # with the JIT: the product through tlc.kernels.gemm where the weight is a constant
    notes = check_model(build("ConvTranspose", feeds, cases, opset=17), feeds, rtol=1e-5, atol=1e-5, jit="eager")
    on_pool = {name for name, note in notes.items() if " part(s), " in note}
    assert on_pool == set(cases) - {"weight_input"}, notes
    interleaved = {name for name, note in notes.items() if note.endswith("taps interleaved")}
    assert interleaved == {"k2s2_bias", "k2s2", "k3s3_bias", "k2s2_group2_bias"}, notes
    double = {"double": ("x64", [w(2, 3, 2, 2).astype(np.float64), w(3).astype(np.float64)], {"strides": [2, 2]})}
    check_model(build("ConvTranspose", feeds, double, opset=17), feeds, with_ort=False, rtol=1e-12)


def frozen(case):
    """``case`` with every input but the first an initializer (scales, sizes, roi, weights: constants in real
    models, the form library steps specialise on); ``run_case`` then feeds only the first."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    (inputs, _), = case.data_sets
    graph_inputs = list(model.graph.input)
    for vi, value in zip(graph_inputs[1:], inputs[1:]):
        model.graph.initializer.append(numpy_helper.from_array(as_array(value), vi.name))
        model.graph.input.remove(vi)
    return dataclasses.replace(case, model=model)


def test_onnx_backend_cases_pass_as_compiled_plans():
    """The outside oracle: every Resize/ConvTranspose node case the reference passes also passes as a compiled
    plan, its inputs but the first fed (as the case does) and frozen as constants (the library step's form);
    the frozen ones run as library steps, but for the 1-D and 3-D ConvTranspose cases."""
    modes: dict[str, str] = {}
    runner = CompiledRunner(opt_level=0, jit="off", on_plan=lambda plan: modes.update(
        {s.op: s.mode for s in plan.stats().steps}))
    failures, reference_steps = [], []
    cases = quick_cases_for("Resize", "ConvTranspose")
    assert len(cases) >= 45
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in cases:
            if run_case(case, reference_runner)[0] != PASS:
                continue
            for variant in (case, frozen(case)):
                modes.clear()
                status, reason = run_case(variant, runner)
                if status != PASS:
                    failures.append(f"{case.name}{'' if variant is case else ' (frozen)'}: {reason}")
            if "library" not in modes.values():
                reference_steps.append(case.name)
    assert not failures, "\n".join(failures)
    assert sorted(reference_steps) == ["test_convtranspose_1d", "test_convtranspose_3d"]


def test_onnx_backend_resize_cases_pass_with_the_plane_kernel():
    """The same oracle with the JIT on: the float cases that resize H and W run ``tlc.kernels.resample``."""
    notes: list[str] = []
    runner = CompiledRunner(opt_level=0, jit="eager", on_plan=lambda plan: notes.extend(
        s.reason for s in plan.stats().steps))
    failures = []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in quick_cases_for("Resize"):
            if run_case(case, reference_runner)[0] != PASS:
                continue
            for variant in (case, frozen(case)):
                status, reason = run_case(variant, runner)
                if status != PASS:
                    failures.append(f"{case.name}{'' if variant is case else ' (frozen)'}: {reason}")
    assert not failures, "\n".join(failures)
    assert sum(note.startswith("plane kernel") for note in notes) >= 20, notes
