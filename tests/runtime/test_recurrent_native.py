"""RNN, GRU and LSTM as native steps of compiled plans (``runtime.library.RecurrentImpl``, the loops of
``tlc.kernels.recurrent``) against the registry's reference and onnxruntime, on random inputs: directions,
sequence_lens (0 included), initial states, clip, peepholes, input_forget, linear_before_reset, layout 1,
optional outputs, Relu among the activations, weights that are graph inputs (BLAS on R instead of panels), odd
sizes, float64; and what runs the reference instead, with its reason in ``plan.stats()``.

Every plan runs on one thread, so one kernel per cell and dtype is compiled (the parallel drivers are the
bench's to check): the cases share them.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import tlc
from tlc.io.onnx import from_onnx

ort = pytest.importorskip("onnxruntime")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
STATE_INPUTS = ("X", "initial_h", "initial_c")


def make_inputs(rng, op: str, *, dtype=np.float32, directions: int = 1, seq: int = 5, batch: int = 3,
                size: int = 4, hidden: int = 3, lens=None, initial: bool = False, peepholes: bool = False,
                bias: bool = True) -> dict[str, np.ndarray | None]:
    """Random inputs of ``op`` in layout 0 (None: an absent optional input)."""
    gh = GATES[op] * hidden

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.7).astype(dtype)

    inputs = {"X": rand(seq, batch, size), "W": rand(directions, gh, size), "R": rand(directions, gh, hidden),
              "B": rand(directions, 2 * gh) if bias else None,
              "sequence_lens": None if lens is None else np.array(lens, np.int32),
              "initial_h": rand(directions, batch, hidden) if initial else None}
    if op == "LSTM":
        inputs["initial_c"] = rand(directions, batch, hidden) if initial else None
        inputs["P"] = rand(directions, 3 * hidden) if peepholes else None
    return inputs


def make_model(op: str, inputs: dict, attrs: dict, outputs: list[str], feeds: tuple[str, ...]) -> onnx.ModelProto:
    """One ``op`` node; inputs named in ``feeds`` are graph inputs, the others initializers ("" in ``outputs``:
    an absent optional output)."""
    names = [name if a is not None else "" for name, a in inputs.items()]
    while not names[-1]:
        names.pop()
    node = helper.make_node(op, names, outputs, name="cell", **attrs)
    code = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, code(a.dtype), a.shape) for n, a in inputs.items()
         if a is not None and n in feeds],
        [helper.make_tensor_value_info(o, code(inputs["X"].dtype), None) for o in outputs if o],
        [numpy_helper.from_array(a, n) for n, a in inputs.items() if a is not None and n not in feeds])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def batch_first(inputs: dict) -> dict:
    return {k: (np.ascontiguousarray(v.transpose(1, 0, 2)) if v is not None and k in STATE_INPUTS else v)
            for k, v in inputs.items()}


def layout0(results: list[np.ndarray]) -> list[np.ndarray]:
    """Layout-1 results as layout 0 has them: Y [B, S, D, H] -> [S, D, B, H], states [B, D, H] -> [D, B, H]."""
    return [r.transpose(1, 2, 0, 3) if r.ndim == 4 else r.transpose(1, 0, 2) for r in results]


def compiled(model: onnx.ModelProto, feeds: dict) -> tuple[list[np.ndarray], tlc.runtime.stats.StepStat]:
    graph = from_onnx(model)[0]
    plan = tlc.compile(graph, opt_level=2, jit="eager", num_threads=1)
    first, second = plan.run(feeds), plan.run(feeds)   # the second run reuses dirty scratch
    names = [name for _, name in graph.outputs]
    for name in names:
        np.testing.assert_array_equal(first[name], second[name])
    reference = tlc.reference.run(graph, feeds)
    want = [reference[n] for n in names]
    got = [second[n] for n in names]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        tol = 1e-5 if g.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg="compiled vs reference")
    (step,) = [s for s in plan.stats().steps if s.op == model.graph.node[0].op_type]
    return got, step


def check(op: str, inputs: dict, attrs: dict, outputs: list[str] | None = None, feeds=("X",), layout: int = 0,
          with_ort: bool = True) -> tlc.runtime.stats.StepStat:
    """The compiled plan against the reference (in ``compiled``) and onnxruntime (layout 1: against onnxruntime's
    layout 0 on the same data, transposed); returns the step's stats."""
    outputs = outputs or (["y", "y_h", "y_c"] if op == "LSTM" else ["y", "y_h"])
    feeds = tuple(feeds) + ("sequence_lens", "initial_h", "initial_c")
    given = batch_first(inputs) if layout else inputs
    model = make_model(op, given, dict(attrs, layout=layout), outputs, feeds)
    got, step = compiled(model, {k: v for k, v in given.items() if v is not None and k in feeds})
    assert step.mode == "native", (step.mode, step.reason)
    if with_ort:
        model0 = make_model(op, inputs, attrs, outputs, feeds)
        session = ort.InferenceSession(model0.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, {k: v for k, v in inputs.items() if v is not None and k in feeds})
        for g, w in zip(layout0(got) if layout else got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg="compiled vs onnxruntime")
    return step


CASES = [  # (id, op, attrs, options of make_inputs)
    ("rnn-bidirectional-lens-initial", "RNN", dict(direction="bidirectional"),
     dict(directions=2, lens=[5, 2, 4], initial=True)),
    ("rnn-reverse-clip-relu", "RNN", dict(direction="reverse", clip=0.3, activations=["Relu"]),
     dict(lens=[3, 5, 0], initial=True)),
    ("gru-bidirectional-linear-before-reset", "GRU", dict(direction="bidirectional", linear_before_reset=1),
     dict(directions=2, lens=[3, 5, 1], initial=True)),
    ("gru-reverse-lens-clip", "GRU", dict(direction="reverse", clip=0.7), dict(lens=[3, 5, 0], initial=True)),
    ("gru-relu-candidate", "GRU", dict(direction="bidirectional", activations=["Sigmoid", "Relu"] * 2),
     dict(directions=2)),
    ("gru-odd-sizes", "GRU", {}, dict(batch=7, hidden=37, size=9, seq=4, initial=True)),
    ("lstm-bidirectional-peepholes-lens", "LSTM", dict(direction="bidirectional"),
     dict(directions=2, lens=[5, 2, 0], initial=True, peepholes=True)),
    ("lstm-forward-clip-peepholes", "LSTM", dict(clip=0.5), dict(initial=True, peepholes=True)),
    ("lstm-reverse-input-forget", "LSTM", dict(direction="reverse", input_forget=1),
     dict(lens=[3, 5, 1], initial=True, peepholes=True)),
    ("lstm-relu-output", "LSTM", dict(direction="bidirectional", activations=["Sigmoid", "Tanh", "Relu"] * 2),
     dict(directions=2, initial=True)),
    ("lstm-no-bias-no-initial", "LSTM", {}, dict(seq=1, batch=1, bias=False)),
    ("lstm-odd-sizes", "LSTM", dict(direction="bidirectional"), dict(directions=2, batch=8, hidden=33, size=20)),
]


@pytest.mark.parametrize("op,attrs,options", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_native_matches_reference_and_onnxruntime(rng, op, attrs, options):
    step = check(op, make_inputs(rng, op, **options), dict(hidden_size=options.get("hidden", 3), **attrs))
    assert "h @ R^T by panels" in step.reason   # a constant float32 R: packed once


@pytest.mark.parametrize("op,attrs", [("RNN", {}), ("GRU", dict(linear_before_reset=1)), ("GRU", {}),
                                      ("LSTM", dict(input_forget=1))])
def test_layout_1(rng, op, attrs):
    inputs = make_inputs(rng, op, directions=2, lens=[2, 5, 4], initial=True, peepholes=True)
    check(op, inputs, dict(hidden_size=3, direction="bidirectional", **attrs), layout=1)


@pytest.mark.parametrize("op,outputs", [("LSTM", ["y"]), ("LSTM", ["", "y_h"]), ("LSTM", ["", "", "y_c"]),
                                        ("LSTM", ["y", "", "y_c"]), ("GRU", ["", "y_h"]), ("RNN", ["y"])])
def test_optional_outputs(rng, op, outputs):
    inputs = make_inputs(rng, op, directions=2, lens=[4, 5, 2], initial=True)
    check(op, inputs, dict(hidden_size=3, direction="bidirectional"), outputs)


#: each of these compiles its own kernels (BLAS on R, float64): sweeps (CI's 10 minutes); CI compiles the float32
#: panel path of every cell
SWEEP = pytest.mark.sweep


@pytest.mark.parametrize("op,attrs", [pytest.param("LSTM", dict(direction="bidirectional"), marks=SWEEP),
                                      pytest.param("GRU", {}, marks=SWEEP),
                                      pytest.param("RNN", dict(direction="reverse"), marks=SWEEP)])
def test_weights_as_graph_inputs(rng, op, attrs):
    """Weights the plan cannot see: prepared every run, R read by BLAS where it is."""
    inputs = make_inputs(rng, op, directions=2 if attrs.get("direction") == "bidirectional" else 1,
                         lens=[5, 3, 4], initial=True, peepholes=True, batch=3, hidden=5)
    step = check(op, inputs, dict(hidden_size=5, **attrs), feeds=("X", "W", "R", "B", "P"))
    assert "h @ R^T by BLAS" in step.reason


@pytest.mark.parametrize("op,attrs", [pytest.param("LSTM", dict(direction="bidirectional", input_forget=1),
                                                   marks=SWEEP),
                                      pytest.param("GRU", dict(direction="reverse"), marks=SWEEP),
                                      pytest.param("RNN", dict(direction="bidirectional", clip=0.8), marks=SWEEP)])
def test_float64(rng, op, attrs):
    inputs = make_inputs(rng, op, dtype=np.float64, directions=2 if "bi" in attrs["direction"] else 1,
                         lens=[5, 0, 3], initial=True, peepholes=True)
    step = check(op, inputs, dict(hidden_size=3, **attrs), layout=1, with_ort=False)
    assert "h @ R^T by BLAS" in step.reason


def test_what_runs_the_reference_says_why(rng):
    inputs = make_inputs(rng, "RNN", lens=[5, 3, 4])
    model = make_model("RNN", inputs, dict(hidden_size=3, activations=["LeakyRelu"]), ["y", "y_h"],
                       ("X", "sequence_lens"))
    _, step = compiled(model, {"X": inputs["X"], "sequence_lens": inputs["sequence_lens"]})
    assert step.mode == "reference" and "activation leakyrelu is not native" in step.reason, step
    half = {k: (v.astype(np.float16) if v is not None and v.dtype == np.float32 else v) for k, v in inputs.items()}
    model = make_model("RNN", half, dict(hidden_size=3), ["y", "y_h"], ("X",))
    _, step = compiled(model, {"X": half["X"]})
    assert step.mode == "reference" and "float16 runs the reference" in step.reason, step


def test_sequence_lens_out_of_range_fails_as_the_reference_does(rng):
    inputs = make_inputs(rng, "GRU", lens=[5, 1, 2])
    model = make_model("GRU", inputs, dict(hidden_size=3), ["y"], ("X", "sequence_lens"))
    plan = tlc.compile(from_onnx(model)[0], opt_level=2, jit="eager", num_threads=1)
    plan.run({"X": inputs["X"], "sequence_lens": inputs["sequence_lens"]})
    with pytest.raises(tlc.ExecutionError, match=r"sequence_lens \[6, 1, 2\]: expected 3 lengths in \[0, 5\]"):
        plan.run({"X": inputs["X"], "sequence_lens": np.array([6, 1, 2], np.int32)})
