"""Recurrent layers RNN, GRU, LSTM: ONNX backend cases, onnxruntime on random inputs (directions, sequence_lens,
initial states, peepholes, clip, activation lists, optional outputs, layout 1 against onnxruntime's layout 0),
inferred types with symbolic dims, errors, and a two-layer LSTM -> GRU model as torch.onnx exports it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from nn_helpers import check_backend_case, output_types, run_ort, run_tlc, single_node_model
from onnx import defs, helper

import tlc
from tests import onnx_cases
from tlc.io.onnx import from_onnx

RECURRENT_OPS = ("RNN", "GRU", "LSTM")
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
CASES = onnx_cases.quick_cases_for(*RECURRENT_OPS)


def test_every_recurrent_case_is_collected():
    assert len(CASES) == 18
    assert {c.model.graph.node[0].op_type for c in CASES} == set(RECURRENT_OPS)


@pytest.mark.parametrize("op", RECURRENT_OPS)
def test_schema_matches_onnx(op):
    schema = defs.get_schema(op, 21)
    opdef = tlc.ops.get(op)
    assert opdef.inputs == (schema.min_input, schema.max_input)
    assert opdef.outputs == schema.max_output
    assert set(opdef.attrs) == set(schema.attributes)
    for name, attr in schema.attributes.items():
        assert opdef.attrs[name].kind == onnx.AttributeProto.AttributeType.Name(attr.type).lower(), f"{op}.{name}"
        want = helper.get_attribute_value(attr.default_value) if attr.default_value.type else None
        want = [v.decode() for v in want] if isinstance(want, list) else want
        assert opdef.attrs[name].default == (want.decode() if isinstance(want, bytes) else want), f"{op}.{name}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.sweep   # CI: tests/runtime/test_recurrent_native.py compiles every cell against the reference
@pytest.mark.parametrize("name", ["test_lstm_with_peepholes", "test_gru_bidirectional"])
def test_backend_case_compiled(name):
    (case,) = [c for c in CASES if c.name == name]
    assert onnx_cases.run_case(case, onnx_cases.CompiledRunner(opt_level=2)) == (onnx_cases.PASS, "")


# ---------------------------------------------------------------------------- one node against onnxruntime
def recurrent_inputs(rng, op: str, *, directions: int = 1, seq: int = 5, batch: int = 3, size: int = 4,
                     hidden: int = 3, lens: Sequence[int] | None = None, initial: bool = False,
                     peepholes: bool = False, bias: bool = True) -> dict[str, np.ndarray | None]:
    """Random inputs of ``op`` in layout 0 (absent optional inputs are None)."""
    gh = GATES[op] * hidden

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.7).astype(np.float32)

    inputs = {"X": rand(seq, batch, size), "W": rand(directions, gh, size), "R": rand(directions, gh, hidden),
              "B": rand(directions, 2 * gh) if bias else None,
              "sequence_lens": None if lens is None else np.array(lens, np.int32),
              "initial_h": rand(directions, batch, hidden) if initial else None}
    if op == "LSTM":
        inputs["initial_c"] = rand(directions, batch, hidden) if initial else None
        inputs["P"] = rand(directions, 3 * hidden) if peepholes else None
    return inputs


def recurrent_model(op: str, inputs: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any],
                    outputs: Sequence[str], dims: Mapping[str, Sequence[Any]] | None = None) -> onnx.ModelProto:
    """One ``op`` node; "" in ``outputs`` is an absent optional output."""
    model = single_node_model(op, inputs, attrs, outputs, dims)
    kept = [vi for vi in model.graph.output if vi.name]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    return model


def all_outputs(op: str) -> list[str]:
    return ["y", "y_h", "y_c"] if op == "LSTM" else ["y", "y_h"]


def check_recurrent(op: str, inputs: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any],
                    outputs: Sequence[str] | None = None, dims: Mapping[str, Sequence[Any]] | None = None,
                    tol: float = 1e-5) -> tlc.Graph:
    """tlc's reference against onnxruntime on one node: every present output, and the inferred types."""
    model = recurrent_model(op, inputs, attrs, outputs or all_outputs(op), dims)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    want = run_ort(model, feeds)
    graph, got = run_tlc(model, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {i}: {g.dtype}{g.shape}, ort {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{op} output {i} differs from onnxruntime")
    for t, g in zip(output_types(graph), got):
        assert t.matches(g), f"inferred {t} does not fit result {g.shape}"
    return graph


ALPHA_LISTS = {  # activation lists with their alpha and beta values, consumed in the order of the activations
    "RNN": dict(activations=["Relu", "LeakyRelu"], activation_alpha=[0.2]),
    "GRU": dict(activations=["HardSigmoid", "ThresholdedRelu", "Sigmoid", "LeakyRelu"],
                activation_alpha=[0.3, 0.1, 0.2], activation_beta=[0.4]),
    "LSTM": dict(activations=["HardSigmoid", "Elu", "Softsign", "ScaledTanh", "Affine", "Softplus"],
                 activation_alpha=[0.3, 0.9, 0.7, 0.5], activation_beta=[0.4, 1.3, 0.2]),
}

CONFIGS = [  # (id, op, attrs, options of recurrent_inputs)
    ("rnn-bidirectional-lens-initial", "RNN", dict(direction="bidirectional"),
     dict(directions=2, lens=[5, 2, 4], initial=True)),
    ("rnn-reverse-clip", "RNN", dict(direction="reverse", clip=0.3), dict(lens=[3, 5, 1], initial=True)),
    ("rnn-activations", "RNN", dict(direction="bidirectional", **ALPHA_LISTS["RNN"]), dict(directions=2)),
    ("gru-bidirectional-linear-before-reset", "GRU", dict(direction="bidirectional", linear_before_reset=1),
     dict(directions=2, lens=[3, 5, 1], initial=True)),
    ("gru-reverse-lens-clip", "GRU", dict(direction="reverse", clip=0.7), dict(lens=[3, 5, 2], initial=True)),
    ("gru-activations", "GRU", dict(direction="bidirectional", linear_before_reset=1, **ALPHA_LISTS["GRU"]),
     dict(directions=2, initial=True)),
    ("lstm-bidirectional-peepholes-lens", "LSTM", dict(direction="bidirectional"),
     dict(directions=2, lens=[5, 2, 0], initial=True, peepholes=True)),
    ("lstm-forward-clip-peepholes", "LSTM", dict(clip=0.5), dict(initial=True, peepholes=True)),
    ("lstm-reverse-input-forget", "LSTM", dict(direction="reverse", input_forget=1),
     dict(lens=[3, 5, 1], initial=True, peepholes=True)),
    ("lstm-activations", "LSTM", dict(direction="bidirectional", **ALPHA_LISTS["LSTM"]),
     dict(directions=2, initial=True, peepholes=True)),
    ("lstm-no-bias-no-initial", "LSTM", dict(), dict(seq=1, batch=1, bias=False)),
]


@pytest.mark.parametrize("op,attrs,options", [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_recurrent_matches_onnxruntime(rng, op, attrs, options):
    inputs = recurrent_inputs(rng, op, **options)
    check_recurrent(op, inputs, dict(hidden_size=3, **attrs))


@pytest.mark.parametrize("op,outputs", [("LSTM", ["y"]), ("LSTM", ["", "y_h"]), ("LSTM", ["", "", "y_c"]),
                                        ("LSTM", ["y", "", "y_c"]), ("GRU", ["", "y_h"]), ("RNN", ["y"])])
def test_optional_outputs_match_onnxruntime(rng, op, outputs):
    inputs = recurrent_inputs(rng, op, directions=2, lens=[4, 5, 2], initial=True)
    g = check_recurrent(op, inputs, dict(hidden_size=3, direction="bidirectional"), outputs)
    assert len(g.outputs) == sum(1 for o in outputs if o)


@pytest.mark.parametrize("op", RECURRENT_OPS)
def test_symbolic_dims_carry_through(rng, op):
    inputs = recurrent_inputs(rng, op, directions=2, lens=[5, 3, 1], initial=True)
    dims = {"X": ("S", "N", 4), "sequence_lens": ("N",), "initial_h": (2, "N", 3), "initial_c": (2, "N", 3)}
    g = check_recurrent(op, inputs, dict(hidden_size=3, direction="bidirectional"), dims=dims)
    # without hidden_size (onnxruntime requires it; the spec does not) it is read from R
    g_without, _ = from_onnx(recurrent_model(op, inputs, dict(direction="bidirectional"), all_outputs(op), dims))
    for types in (output_types(g), output_types(g_without)):
        assert types[0].shape == ("S", 2, "N", 3)
        assert all(t.shape == (2, "N", 3) for t in types[1:])


def _batch_first(name: str, array: np.ndarray | None) -> np.ndarray | None:
    if array is None or name not in ("X", "initial_h", "initial_c"):
        return array
    return np.ascontiguousarray(array.transpose(1, 0, 2))


@pytest.mark.parametrize("op,attrs", [("RNN", {}), ("GRU", dict(linear_before_reset=1)),
                                      ("LSTM", dict(input_forget=1))])
def test_layout_1_matches_onnxruntime_layout_0(rng, op, attrs):
    """onnxruntime's CPU kernels refuse layout 1: the oracle is layout 0 on the transposed inputs."""
    inputs = recurrent_inputs(rng, op, directions=2, lens=[2, 5, 4], initial=True, peepholes=True)
    attrs = dict(hidden_size=3, direction="bidirectional", **attrs)
    outputs = all_outputs(op)
    want = run_ort(recurrent_model(op, inputs, attrs, outputs), {k: v for k, v in inputs.items() if v is not None})
    batch_first = {k: _batch_first(k, v) for k, v in inputs.items()}
    dims = {"X": ("N", "S", 4), "sequence_lens": ("N",), "initial_h": ("N", 2, 3), "initial_c": ("N", 2, 3)}
    model = recurrent_model(op, batch_first, dict(layout=1, **attrs), outputs, dims)
    graph, got = run_tlc(model, {k: v for k, v in batch_first.items() if v is not None})
    np.testing.assert_allclose(got[0], want[0].transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-5)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)
    types = output_types(graph)
    assert types[0].shape == ("N", "S", 2, 3)
    assert all(t.shape == ("N", 2, 3) for t in types[1:])


def test_float16_is_computed_in_float32(rng):
    inputs = recurrent_inputs(rng, "GRU", lens=[5, 3, 2], initial=True)
    half = [None if v is None else v.astype(np.float16) if v.dtype == np.float32 else v for v in inputs.values()]
    widened = [None if v is None else v.astype(np.float32) if v.dtype == np.float16 else v for v in half]
    gru = tlc.ops.get("GRU")
    attrs = dict(hidden_size=3, linear_before_reset=1)
    want = gru.run_reference(widened, attrs)
    got = gru.run_reference(half, attrs)
    for g, w in zip(got, want):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=2e-3, atol=2e-3)


def test_activation_defaults_follow_the_spec():
    """An activation without alpha takes the ONNX operator's default: ThresholdedRelu 1.0 and Affine (1, 0)
    (onnxruntime uses 0 for both, so the oracle is the spec): with W = R = 0 the state is f(Wb) at step 1."""
    rnn = tlc.ops.get("RNN")
    bias = np.array([[0.5, 1.5, -2.0, 0.0, 0.0, 0.0]], np.float32)
    inputs = [np.zeros((1, 1, 2), np.float32), np.zeros((1, 3, 2), np.float32), np.zeros((1, 3, 3), np.float32), bias]
    _, y_h = rnn.run_reference(inputs, dict(activations=["ThresholdedRelu"]))
    np.testing.assert_array_equal(y_h.ravel(), [0.0, 1.5, 0.0])
    _, y_h = rnn.run_reference(inputs, dict(activations=["Affine"]))
    np.testing.assert_array_equal(y_h.ravel(), [0.5, 1.5, -2.0])
    _, y_h = rnn.run_reference(inputs, dict(activations=["HardSigmoid"], activation_beta=[0.25]))
    np.testing.assert_allclose(y_h.ravel(), [0.35, 0.55, 0.0], rtol=1e-6)  # alpha 0.2 by default


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("op,attrs,message", [
    ("LSTM", dict(activations=["Sigmoid", "Gelu", "Tanh"]), "unknown activation 'Gelu'"),
    ("LSTM", dict(direction="bidirectional", activations=["Sigmoid", "Tanh", "Tanh"]), "expected 6 names"),
    ("RNN", dict(activations=["ScaledTanh"], activation_alpha=[1.0]), "ScaledTanh needs a value in activation_beta"),
    ("GRU", dict(direction="backward"), "direction 'backward': expected one of forward, reverse, bidirectional"),
    ("GRU", dict(layout=2), "layout 2: expected 0"),
    ("RNN", dict(hidden_size=5), "W is float32[1,3,4], expected shape [1,5,4]"),
    ("RNN", dict(clip=-1.0), "clip must be positive"),
])
def test_bad_attributes_are_named(rng, op, attrs, message):
    inputs = recurrent_inputs(rng, op)
    with pytest.raises(tlc.ShapeInferenceError, match=message.replace("[", r"\[")):
        from_onnx(recurrent_model(op, inputs, attrs, all_outputs(op)))


def test_bad_shapes_and_outputs_are_named(rng):
    inputs = recurrent_inputs(rng, "GRU", initial=True)
    inputs["W"] = inputs["W"][:, :6]
    with pytest.raises(tlc.ShapeInferenceError, match=r"W is float32\[1,6,4\], expected shape \[1,9,4\]"):
        from_onnx(recurrent_model("GRU", inputs, {}, ["y"]))
    inputs = recurrent_inputs(rng, "GRU", initial=True)
    inputs["initial_h"] = inputs["initial_h"][:, :2]
    with pytest.raises(tlc.ShapeInferenceError, match="initial_h .* expected shape"):
        from_onnx(recurrent_model("GRU", inputs, {}, ["y"]))
    with pytest.raises(tlc.ShapeInferenceError, match="3 outputs; GRU has at most 2"):
        from_onnx(recurrent_model("GRU", recurrent_inputs(rng, "GRU"), {}, ["y", "y_h", "y_c"]))


def test_sequence_lens_out_of_range_fails_when_run(rng):
    inputs = recurrent_inputs(rng, "RNN", lens=[6, 1, 2])
    model = recurrent_model("RNN", inputs, {}, ["y"])
    with pytest.raises(tlc.ExecutionError, match=r"sequence_lens \[6, 1, 2\]: expected 3 lengths in \[0, 5\]"):
        run_tlc(model, {k: v for k, v in inputs.items() if v is not None})


# ---------------------------------------------------------------------------- a model as torch.onnx exports it
@pytest.mark.sweep   # CI: tests/runtime/test_op_models.py runs this tagger at every opt level (concrete shapes)
def test_torch_style_lstm_gru_model_matches_onnxruntime(rng):
    """tools/models.py's LSTM -> GRU tagger with symbolic seq and batch: the dims carry through, and one plan runs
    two shapes as the reference and onnxruntime do."""
    model = onnx_cases.tools_models().lstm_gru_tagger(batch="batch", small=True, seq="seq")
    graph, _ = from_onnx(model)
    assert [graph.type_of(v).shape for v, _ in graph.outputs] == [("seq", "batch", 24), (2, "batch", 24),
                                                                  (2, "batch", 24), (1, "batch", 24)]
    plan = tlc.compile(graph, opt_level=2, jit="eager")
    assert not [job for job in plan.jobs if job.status == "failed"]
    for seq, batch in ((7, 3), (2, 1)):
        feeds = {"x": rng.standard_normal((seq, batch, 16)).astype(np.float32),
                 **{name: rng.standard_normal((n, batch, 24)).astype(np.float32)
                    for name, n in (("h0", 2), ("c0", 2), ("h1", 1))}}
        want = run_ort(model, feeds)
        reference = tlc.reference.run(graph, feeds)
        compiled = plan.run(feeds)
        for (_, name), w in zip(graph.outputs, want):
            np.testing.assert_allclose(reference[name], w, rtol=1e-5, atol=1e-5, err_msg=f"reference {name}")
            np.testing.assert_allclose(compiled[name], w, rtol=1e-5, atol=1e-5, err_msg=f"-O2 {name}")
