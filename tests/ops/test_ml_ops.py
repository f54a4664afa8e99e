"""ai.onnx.ml and ai.onnx.preview.training operators: ONNX backend cases, onnxruntime on random inputs (the ml
ops; onnxruntime has no training ops), inferred types and named errors."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from nn_helpers import IR_VERSION, OPSET, check_backend_case, run_ort, run_tlc
from onnx import helper, numpy_helper

import tlc
from tests import onnx_cases
from tlc.ir.types import ONNX_TYPE_CODES, dtype_name
from tlc.ops.mlops import ML, TRAINING

ML_MODULES = ("array_feature_extractor", "binarizer", "label_encoder", "tree_ensemble")
TRAINING_MODULES = ("adagrad", "adam", "momentum")
DOMAIN_VERSIONS = {ML: 5, TRAINING: 1}


def ml_cases() -> list:
    """The node cases of the ml and training ops (15); importing onnx's case modules records them."""
    from onnx.backend.test.case import node  # noqa: PLC0415 - building the cases is slow; only when collecting

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in [f"ai_onnx_ml.{m}" for m in ML_MODULES] + list(TRAINING_MODULES):
            importlib.import_module(f"{node.__name__}.{module}")
    # NOTE: _NodeTestCases is where onnx's ``expect`` records every case it builds
    return [c for c in node._NodeTestCases if c.model.graph.node[0].domain in (ML, TRAINING)]


CASES = ml_cases()


def domain_model(op: str, inputs: dict[str, np.ndarray], attrs: dict, domain: str = ML, outputs: int = 1,
                 dims: dict | None = None):
    """A model with one ``domain`` node (the domain's opset imported beside the default one)."""
    dims = dims or {}
    node = helper.make_node(op, list(inputs), [f"y{i}" for i in range(outputs)], domain=domain, name="ml_node", **attrs)
    declared = [helper.make_tensor_value_info(k, ONNX_TYPE_CODES[dtype_name(v.dtype)], list(dims.get(k, v.shape)))
                for k, v in inputs.items()]
    graph = helper.make_graph([node], op, declared, [helper.make_empty_tensor_value_info(f"y{i}")
                                                     for i in range(outputs)])
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(domain, DOMAIN_VERSIONS[domain])]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model


def check_ml_against_ort(op: str, inputs: dict, attrs: dict, rtol: float = 1e-6, atol: float = 1e-6,
                         ort_attrs: dict | None = None) -> tlc.Graph:
    """One node in onnxruntime (with ``ort_attrs`` changed, where it departs from the spec) and in tlc."""
    model = domain_model(op, inputs, attrs)
    (want,) = run_ort(domain_model(op, inputs, {**attrs, **(ort_attrs or {})}), inputs)
    graph, (got,) = run_tlc(model, inputs)
    assert got.dtype == want.dtype and got.shape == want.shape, f"{got.dtype}{got.shape}, ort {want.dtype}{want.shape}"
    if got.dtype == object:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    assert graph.type_of(graph.outputs[0][0]).matches(got)
    return graph


def test_every_ml_case_is_collected():
    assert len(CASES) == 15
    assert {op for c in CASES for op in onnx_cases.case_ops(c)} == {
        f"{ML}.{op}" for op in ("ArrayFeatureExtractor", "Binarizer", "LabelEncoder", "TreeEnsemble")} | {
        f"{TRAINING}.{op}" for op in ("Adagrad", "Adam", "Momentum")}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.parametrize("name", ["test_ai_onnx_ml_binarizer", "test_ai_onnx_ml_tree_ensemble_set_membership",
                                  "test_adam_multiple"])
def test_backend_case_compiled(name):
    (case,) = [c for c in CASES if c.name == name]
    assert onnx_cases.run_case(case, onnx_cases.CompiledRunner(opt_level=2)) == (onnx_cases.PASS, "")


# ---------------------------------------------------------------------------- LabelEncoder
def _tensor(values, dtype) -> object:
    return numpy_helper.from_array(np.array(values, dtype=dtype))


LABEL_ENCODERS = [
    ("int64 -> string", np.array([3, 1, 7, 3, 0]),
     {"keys_int64s": [1, 3], "values_strings": ["one", "three"], "default_string": "?"}),
    ("float -> float, NaN key", np.array([0.5, np.nan, 2.0, -0.0], np.float32),
     {"keys_floats": [0.5, float("nan"), 0.0], "values_floats": [5.0, 9.0, 1.5]}),
    ("string -> float, default", np.array(["a", "b", "zz"], object),
     {"keys_strings": ["a", "b"], "values_floats": [0.25, -1.0], "default_float": 7.5}),
    ("int64 tensor -> double tensor", np.array([[4, 2], [9, 4]], np.int64),
     {"keys_tensor": _tensor([2, 4], np.int64), "values_tensor": _tensor([0.5, 4.5], np.float64),
      "default_tensor": _tensor([-2.0], np.float64)}),
    ("double tensor -> string tensor, typed default", np.array([1.0, 5.0], np.float64),
     {"keys_tensor": _tensor([1.0], np.float64), "values_tensor": _tensor(["x"], object)}),
    ("string -> int16 tensor, typed default", np.array(["b", "c"], object),
     {"keys_strings": ["b"], "values_tensor": _tensor([3], np.int16)}),
]


@pytest.mark.parametrize("x,attrs", [c[1:] for c in LABEL_ENCODERS], ids=[c[0] for c in LABEL_ENCODERS])
def test_label_encoder_matches_onnxruntime(x, attrs):
    check_ml_against_ort("LabelEncoder", {"x": x}, attrs)


def test_label_encoder_last_repeated_key_wins_and_narrow_types():
    """The spec: a repeated key takes its last value (onnxruntime keeps the first). onnxruntime lacks the int16 and
    int32 mappings the spec allows."""
    op = tlc.ops.get("LabelEncoder", ML)
    (y,) = op.run_reference([np.array([1, 3])], {"keys_int64s": [1, 3, 1], "values_strings": ["a", "b", "c"]})
    assert y.tolist() == ["c", "b"]
    (z,) = op.run_reference([np.array([[4, 2]], np.int16)], {"keys_tensor": np.array([2], np.int16),
                                                            "values_tensor": np.array([7], np.int32)})
    assert z.dtype == np.int32 and z.tolist() == [[-1, 7]]


def test_label_encoder_opset1_classes_strings():
    op = tlc.ops.get("LabelEncoder", ML)
    (ids,) = op.run_reference([np.array(["b", "q", "a"], object)], {"classes_strings": ["a", "b"]})
    (names,) = op.run_reference([np.array([1, 5])], {"classes_strings": ["a", "b"], "default_string": "-"})
    assert ids.tolist() == [1, -1, 0] and names.tolist() == ["b", "-"]


@pytest.mark.parametrize("attrs,match", [
    ({"keys_strings": ["a"], "values_int64s": [1, 2]}, "1 keys but 2 values"),
    ({"keys_int64s": [1], "values_int64s": [1]}, "X has dtype string; the keys are int64"),
    ({"keys_strings": ["a"], "keys_int64s": [1], "values_int64s": [1]}, "exactly one keys_"),
    ({"keys_strings": ["a"], "values_int64s": [1], "default_tensor": _tensor([1.0], np.float32)}, "one int64 value"),
])
def test_label_encoder_bad_attributes_are_named(attrs, match):
    x = np.array(["a"], object)
    with pytest.raises(tlc.ShapeInferenceError, match=f"ml_node.*{match}"):
        run_tlc(domain_model("LabelEncoder", {"x": x}, attrs), {"x": x})


# ---------------------------------------------------------------------------- Binarizer, ArrayFeatureExtractor
def test_binarizer_matches_onnxruntime(rng):
    x = (rng.standard_normal((4, 5)) * 3).astype(np.float32)
    check_ml_against_ort("Binarizer", {"x": x}, {"threshold": -0.5})


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_binarizer_other_types_compare_as_float(dtype):
    """onnxruntime has float32 only; for ints the threshold is compared as a float (-1 > -1.5)."""
    x = np.array([-2, -1, 0, 3], dtype)
    (y,) = tlc.ops.get("Binarizer", ML).run_reference([x], {"threshold": -1.5})
    assert y.dtype == dtype and y.tolist() == [0, 1, 1, 1]


@pytest.mark.parametrize("shape,indices", [((6,), [5, 0, 5]), ((3, 4), [[2], [1]]), ((2, 3, 5), [4, 0, 1, 2])])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, object])
def test_array_feature_extractor_matches_onnxruntime(rng, shape, indices, dtype):
    x = rng.integers(0, 100, shape).astype(dtype if dtype is not object else np.int64)
    x = x.astype(str).astype(object) if dtype is object else x
    check_ml_against_ort("ArrayFeatureExtractor", {"x": x, "y": np.array(indices, np.int64)}, {})


def test_array_feature_extractor_index_out_of_range_names_the_node():
    x, y = np.zeros((2, 3), np.float32), np.array([3], np.int64)
    model = domain_model("ArrayFeatureExtractor", {"x": x, "y": y}, {})
    with pytest.raises(tlc.ExecutionError, match=r"'ml_node'.*index 3 is out of range for the last axis of size 3"):
        run_tlc(model, {"x": x, "y": y})


# ---------------------------------------------------------------------------- TreeEnsemble
GRID = np.array([-1.5, -0.5, 0.0, 0.5, 1.0, 2.0])


def random_forest(rng, trees: int, depth: int, features: int, targets: int, dtype) -> dict:
    """TreeEnsemble attributes for random trees: every mode, thresholds and sets on GRID (so EQ/NEQ/MEMBER hit)."""
    a = {k: [] for k in ("modes", "feats", "splits", "true", "trueleaf", "false", "falseleaf", "tracks")}
    leaf_targets, leaf_weights, members = [], [], []

    def build(level: int) -> tuple[int, int]:
        if level == depth or (level > 0 and rng.random() < 0.25):
            leaf_targets.append(int(rng.integers(targets)))
            leaf_weights.append(float(rng.normal()))
            return 1, len(leaf_targets) - 1
        at = len(a["modes"])
        mode = int(rng.integers(7))
        a["modes"].append(mode)
        a["feats"].append(int(rng.integers(features)))
        a["splits"].append(np.nan if mode == 6 else float(rng.choice(GRID)))
        # NOTE: onnxruntime's BRANCH_NEQ sends NaN to the true branch whatever the node tracks (the spec: to the
        # branch it tracks): only nodes that track true compare alike
        a["tracks"].append(1 if mode == 5 else int(rng.integers(2)))
        if mode == 6:  # NOTE: onnxruntime takes integer members only
            members.extend(list(rng.choice(GRID[GRID == np.round(GRID)], 2, replace=False)) + [np.nan])
        for side in ("true", "false"):
            a[side].append(0)
            a[side + "leaf"].append(0)
        for side in ("true", "false"):
            a[side + "leaf"][at], a[side][at] = build(level + 1)
        return 0, at

    roots = [build(0)[1] for _ in range(trees)]
    attrs = {"tree_roots": roots, "nodes_modes": _tensor(a["modes"], np.uint8), "nodes_featureids": a["feats"],
             "nodes_splits": _tensor(a["splits"], dtype), "nodes_truenodeids": a["true"],
             "nodes_trueleafs": a["trueleaf"], "nodes_falsenodeids": a["false"], "nodes_falseleafs": a["falseleaf"],
             "nodes_missing_value_tracks_true": a["tracks"], "leaf_targetids": leaf_targets,
             "leaf_weights": _tensor(leaf_weights, dtype), "n_targets": targets}
    if members:
        attrs["membership_values"] = _tensor(members, dtype)
    return attrs


#: onnxruntime 1.32 reads TreeEnsemble's post_transform 1 as LOGISTIC and 2 as SOFTMAX (the spec: 1 SOFTMAX,
#: 2 LOGISTIC, as TreeEnsembleRegressor's strings were): the spec's meaning is asked of it by the other number
ORT_POST_TRANSFORM = {0: 0, 1: 2, 2: 1, 3: 3, 4: 4}


@pytest.mark.parametrize("aggregate,post_transform,targets,dtype", [
    (0, 0, 3, np.float32), (1, 1, 3, np.float64), (2, 2, 2, np.float32), (3, 3, 4, np.float64),
    (1, 3, 2, np.float32), (2, 0, 3, np.float64), (3, 1, 2, np.float32), (0, 2, 4, np.float64)])
def test_tree_ensemble_matches_onnxruntime(rng, aggregate, post_transform, targets, dtype):
    attrs = random_forest(rng, trees=4, depth=4, features=3, targets=targets, dtype=dtype)
    attrs.update(aggregate_function=aggregate, post_transform=post_transform)
    x = rng.choice(np.append(GRID, [np.nan, 0.25]), (16, 3)).astype(dtype)
    graph = check_ml_against_ort("TreeEnsemble", {"x": x}, attrs, rtol=1e-5, atol=1e-6,
                                 ort_attrs={"post_transform": ORT_POST_TRANSFORM[post_transform]})
    assert graph.type_of(graph.outputs[0][0]).shape == (16, targets)


def test_tree_ensemble_nan_takes_the_tracked_branch_at_every_mode():
    """The spec: a NaN feature goes where nodes_missing_value_tracks_true says, BRANCH_NEQ included (onnxruntime
    sends it true there); SOFTMAX (1) and LOGISTIC (2) as the spec numbers them."""
    op = tlc.ops.get("TreeEnsemble", ML)
    attrs = {"tree_roots": [0], "nodes_modes": np.array([5], np.uint8), "nodes_featureids": [0],
             "nodes_splits": np.array([0.5]), "nodes_truenodeids": [0], "nodes_trueleafs": [1],
             "nodes_falsenodeids": [1], "nodes_falseleafs": [1], "leaf_targetids": [0, 1],
             "leaf_weights": np.array([1.0, 2.0]), "n_targets": 2}
    x = np.array([[np.nan], [0.0]])
    for tracks, post, want in [(0, 0, [[0, 2], [1, 0]]), (1, 0, [[1, 0], [1, 0]]),
                               (0, 2, [[0.5, 1 / (1 + np.exp(-2))], [1 / (1 + np.exp(-1)), 0.5]]),
                               (0, 1, [[1 / (1 + np.exp(2)), 1 / (1 + np.exp(-2))], [1 / (1 + np.exp(-1)),
                                                                                      1 / (1 + np.exp(1))]])]:
        (y,) = op.run_reference([x], {**attrs, "nodes_missing_value_tracks_true": [tracks], "post_transform": post})
        np.testing.assert_allclose(y, want, rtol=1e-12)


def test_tree_ensemble_probit(rng):
    attrs = random_forest(rng, trees=3, depth=3, features=2, targets=1, dtype=np.float32)
    attrs.update(aggregate_function=0, post_transform=4, leaf_weights=_tensor(rng.uniform(0.05, 0.95, 99)[
        :numpy_helper.to_array(attrs["leaf_weights"]).size], np.float32))
    x = rng.choice(GRID, (8, 2)).astype(np.float32)
    check_ml_against_ort("TreeEnsemble", {"x": x}, attrs, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("change,match", [
    ({"nodes_featureids": [0, 5, 0]}, r"nodes_featureids \[0, 5, 0\] must lie in \[0, 1\)"),
    ({"nodes_truenodeids": [1, 9, 1]}, "nodes_truenodeids .* point outside"),
    ({"leaf_targetids": [0, 1, 4, 3]}, r"leaf_targetids .* \[0, n_targets=4\)"),
    ({"membership_values": _tensor([1.0, np.nan], np.float32)}, "2 BRANCH_MEMBER nodes but 1"),
    ({"aggregate_function": 7}, "aggregate_function 7"),
])
def test_tree_ensemble_bad_attributes_are_named(change, match):
    (case,) = [c for c in CASES if c.name == "test_ai_onnx_ml_tree_ensemble_set_membership"]
    attrs = {a.name: helper.get_attribute_value(a) for a in case.model.graph.node[0].attribute}
    x = np.zeros((2, 1), np.float32)
    with pytest.raises(tlc.ShapeInferenceError, match=f"ml_node.*{match}"):
        run_tlc(domain_model("TreeEnsemble", {"x": x}, {**attrs, **change}), {"x": x})


# ---------------------------------------------------------------------------- Adagrad, Adam, Momentum
def _step(op: str, r: float, t: int, tensors: list[np.ndarray], **attrs) -> list[np.ndarray]:
    return tlc.ops.get(op, TRAINING).run_reference([np.float32(r), np.int64(t), *tensors], attrs)


def test_adam_first_step_moves_by_the_learning_rate_times_the_sign(rng):
    """From zero averages at T=1 the bias corrections cancel: X moves by R * sign(G) (for |G| >> epsilon)."""
    x, g = rng.standard_normal(6), rng.standard_normal(6) + np.sign(rng.standard_normal(6))
    zeros = np.zeros(6)
    x_new, v_new, h_new = _step("Adam", 0.01, 1, [x, g, zeros, zeros], alpha=0.9, beta=0.999, epsilon=1e-12,
                                norm_coefficient=0.0, norm_coefficient_post=0.0)
    np.testing.assert_allclose(x_new, x - 0.01 * np.sign(g), rtol=1e-6)
    np.testing.assert_allclose(v_new, 0.1 * g)
    np.testing.assert_allclose(h_new, 0.001 * g * g)


@pytest.mark.parametrize("t,scale", [(0, 1.0), (4, 0.5)])
def test_momentum_scales_the_gradient_after_the_first_step(t, scale):
    x, g, v = np.array([1.0, 2.0]), np.array([0.5, -1.0]), np.array([2.0, 0.0])
    x_new, v_new = _step("Momentum", 0.1, t, [x, g, v], alpha=0.5, beta=0.5, mode="standard", norm_coefficient=0.0)
    np.testing.assert_allclose(v_new, 0.5 * v + scale * g)
    np.testing.assert_allclose(x_new, x - 0.1 * (0.5 * v + scale * g))


def test_adagrad_decays_the_rate_and_keeps_dtypes():
    x, g, h = np.array([1.0], np.float32), np.array([2.0], np.float32), np.array([5.0], np.float32)
    x_new, h_new = _step("Adagrad", 0.3, 2, [x, g, h], norm_coefficient=0.0, decay_factor=0.5, epsilon=0.0)
    assert (x_new.dtype, h_new.dtype) == (np.float32, np.float32)
    np.testing.assert_allclose(h_new, [9.0])
    np.testing.assert_allclose(x_new, [1.0 - 0.15 * 2 / 3], rtol=1e-6)


def test_optimizer_types_follow_each_tensor():
    g = tlc.Graph(opset={"": OPSET, TRAINING: 1})
    r, t = g.input("R", "float32", ()), g.input("T", "int64", ())
    xs = [g.input(f"x{i}", "float64", shape) for i, shape in enumerate([("N", 3), (4,)])]
    grads = [g.input(f"g{i}", "float64", shape) for i, shape in enumerate([("N", 3), (4,)])]
    state = [g.input(f"s{i}", "float64", shape) for i, shape in enumerate([("N", 3), (4,)])]
    outs = g.add_node("Momentum", [r, t, *xs, *grads, *state], domain=TRAINING, alpha=0.9, beta=1.0,
                      mode="nesterov", norm_coefficient=0.0)
    assert [g.type_of(v).shape for v in outs] == [("N", 3), (4,), ("N", 3), (4,)]


@pytest.mark.parametrize("op,count,attrs,match", [
    ("Adam", 5, {}, "7 inputs; expected R, T and 4 tensors per optimized tensor"),
    ("Momentum", 3, {"alpha": 0.9, "beta": 1.0, "mode": "heavy", "norm_coefficient": 0.0}, "mode 'heavy'"),
])
def test_optimizer_bad_input_is_named(op, count, attrs, match):
    inputs = {"R": np.array(0.1, np.float32), "T": np.array(0, np.int64),
              **{f"t{i}": np.ones(2, np.float32) for i in range(count)}}
    model = domain_model(op, inputs, attrs, domain=TRAINING, outputs=2)
    with pytest.raises(tlc.ShapeInferenceError, match=f"ml_node.*{match}"):
        run_tlc(model, inputs)
