"""Epilogue steps (a contraction and the elementwise work after it) against onnxruntime: the contraction's bias
moved into the elementwise kernel (Conv's per-channel B, Gemm's broadcast C with beta), in place and not."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tlc
from tlc.io.onnx import from_onnx
from tlc.kernels import panel, split_epilogue

ort = pytest.importorskip("onnxruntime")


def model(nodes, inputs: dict[str, tuple], output_shape, inits: dict[str, np.ndarray]):
    graph = helper.make_graph(
        nodes, "epilogues",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def compare(onnx_model, feeds: dict[str, np.ndarray], rtol=1e-4, atol=1e-4) -> tlc.runtime.Plan:
    sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    graph, _ = from_onnx(onnx_model)
    plan = tlc.compile(graph, opt_level=2, jit="eager")
    for _ in range(2):   # a second run reuses the arena: nothing may depend on fresh buffers
        np.testing.assert_allclose(plan.run(feeds)["y"], want, rtol=rtol, atol=atol)
    return plan


def epilogue_steps(plan) -> list:
    """Per native epilogue step: (its contraction body, its elementwise body), as the runtime cut them."""
    stats = plan.stats().steps
    steps = [st for st in plan.program.steps if st.label == "tlc.Fused[epilogue]"]
    assert all(stats[st.index].mode == "native" for st in steps), [stats[st.index].reason for st in steps]
    return [split_epilogue(st.node.attrs["body"]) for st in steps]


def contraction_arity(split) -> int:
    contraction, _ = split
    return len(contraction.inputs_of(contraction.ops()[0]))


@pytest.mark.parametrize("residual", [False, True])
def test_conv_bias_relu_moves_the_bias_into_the_kernel(rng, residual):
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32) * 3   # distinct per channel: a wrong axis shows
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    inputs = {"x": (2, 4, 7, 5)}
    if residual:
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        inputs["r"] = (2, 6, 7, 5)
    nodes.append(helper.make_node("Relu", ["s" if residual else "c"], ["y"]))
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
    plan = compare(model(nodes, inputs, (2, 6, 7, 5), {"w": w, "b": b}), feeds)
    (split,) = epilogue_steps(plan)
    assert contraction_arity(split) == 2   # Conv(x, w): the bias moved
    assert [n.op for n in split[1].ops()][:1] == ["Add"]


@pytest.mark.parametrize("group", [1, 6])
def test_channels_last_conv_bias_moves_into_the_kernel(rng, monkeypatch, group):
    """-O3 with the layout pass made to pick NHWC: tlc.ConvNhwc's bias (OpDef.bias: the last axis) moves too."""
    from tlc.passes import layout

    monkeypatch.setattr(layout.Region, "wins", lambda self, costs: True)
    w = rng.standard_normal((6, 6 // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32) * 3
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    inputs = {"x": (2, 6, 7, 5), "r": (2, 6, 7, 5)}
    onnx_model = model(nodes, inputs, (2, 6, 7, 5), {"w": w, "b": b})
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
    (want,) = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    plan = tlc.compile(from_onnx(onnx_model)[0], opt_level=3, jit="eager")
    for _ in range(2):
        np.testing.assert_allclose(plan.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
    (split,) = epilogue_steps(plan)
    assert split[0].ops()[0].qualified_op == "tlc.ConvNhwc" and contraction_arity(split) == 2
    assert [n.op for n in split[1].ops()][:1] == ["Add"] and split[1].inputs[1].output_types[0].shape == (6,)


@pytest.mark.parametrize("c_shape", [(5,), (3, 1), (3, 5), ()], ids=str)
def test_gemm_c_with_beta_moves_into_the_kernel(rng, c_shape):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    c = np.asarray(rng.standard_normal(c_shape)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "a", "c"], ["g"], alpha=0.5, beta=2.0, transA=1),
             helper.make_node("Sigmoid", ["g"], ["y"])]
    plan = compare(model(nodes, {"x": (4, 3)}, (3, 5), {"a": rng.standard_normal((4, 5)).astype(np.float32),
                                                         "c": c}),
                   {"x": a})
    (split,) = epilogue_steps(plan)
    assert contraction_arity(split) == 2


def test_gemm_with_zero_beta_keeps_c_out(rng):
    """beta = 0: C is ignored by Gemm (even an inf in it), so it is not moved into a product with 0."""
    c = np.array([np.inf, 1, 2], np.float32)
    nodes = [helper.make_node("Gemm", ["x", "b", "c"], ["g"], beta=0.0), helper.make_node("Relu", ["g"], ["y"])]
    plan = compare(model(nodes, {"x": (2, 4)}, (2, 3), {"b": rng.standard_normal((4, 3)).astype(np.float32),
                                                        "c": c}),
                   {"x": rng.standard_normal((2, 4)).astype(np.float32)})
    (split,) = epilogue_steps(plan)
    assert contraction_arity(split) == 3


def attention_scores(extra_reader: str | None = None):
    """softmax(Q @ K^T) @ V with Q, K, V per-head transposes of one projection (as BERT exporters write it)."""
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q0"]), helper.make_node("MatMul", ["x", "wk"], ["k0"]),
             helper.make_node("Tanh", ["x"], ["v0"]),           # a kernel-written buffer seen through a view
             helper.make_node("Reshape", ["q0", "shape"], ["q1"]), helper.make_node("Reshape", ["k0", "shape"], ["k1"]),
             helper.make_node("Reshape", ["v0", "shape"], ["v1"]),
             helper.make_node("Transpose", ["q1"], ["q"], name="Transpose_q", perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["k1"], ["kt"], name="Transpose_kt", perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["v1"], ["v"], name="Transpose_v", perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Sin", ["x"], ["late"]),          # may reuse a buffer if a view's source were freed
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    nodes.append(helper.make_node("Transpose", ["o"], ["ot"], name="Transpose_ot", perm=[0, 2, 1, 3]))
    nodes.append(helper.make_node("Reshape", ["ot", "flat"], ["o2"]))
    last = "o2"
    if extra_reader == "elementwise":   # a reader that needs contiguous data: the transpose stays a copy
        nodes.append(helper.make_node("Add", ["v", "v"], ["vv"]))
        nodes.append(helper.make_node("ReduceSum", ["vv"], ["vs"], keepdims=0))
        nodes.append(helper.make_node("Add", [last, "vs"], ["o3"]))
        last = "o3"
    nodes.append(helper.make_node("Add", [last, "late"], ["y"]))
    return nodes


@pytest.mark.parametrize("extra_reader", [None, "elementwise"])
def test_transposes_that_feed_matmuls_only_become_views(rng, extra_reader):
    seq, heads, dim = 16, 2, 4   # 16 positions: the scores product is wide enough for the panel kernel
    inits = {"wq": rng.standard_normal((8, 8)).astype(np.float32), "wk": rng.standard_normal((8, 8)).astype(np.float32),
             "shape": np.array([1, seq, heads, dim], np.int64), "flat": np.array([1, seq, 8], np.int64)}
    onnx_model = model(attention_scores(extra_reader), {"x": (1, seq, 8)}, None, inits)
    plan = compare(onnx_model, {"x": rng.standard_normal((1, seq, 8)).astype(np.float32)})
    modes = {s.name: s.mode for s in plan.stats().steps if s.op == "Transpose"}
    views = sorted(name for name, mode in modes.items() if mode == "view")
    # K^T moves the last axis into the scores product's B: copied where the panel product then reads B in place
    in_panels = panel.fast()
    expected = ["Transpose_q"] + ([] if in_panels else ["Transpose_kt"]) + ([] if extra_reader else ["Transpose_v"])
    assert views == sorted(expected), modes
    assert modes["Transpose_ot"] in ("library", "native")   # read by a Reshape: a view of it would be copied anyway
    if in_panels:
        scores = [s for s in plan.stats().steps if s.op == "MatMul" and s.mode == "native"]
        assert any("panels in place" in s.reason for s in scores), [s.reason for s in scores]


def test_eager_jit_compiles_the_in_place_variant_the_plan_runs(rng):
    """An elementwise group that the memory plan runs in place (its input's buffer dies there) is compiled in
    that variant up front, and runs it: no second compile on the first run."""
    nodes = [helper.make_node("Concat", ["x", "x"], ["h"], axis=1), helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Mul", ["t", "two"], ["u"]), helper.make_node("MatMul", ["u", "w"], ["y"])]
    inits = {"w": rng.standard_normal((16, 8)).astype(np.float32), "two": np.array(2.0, np.float32)}
    onnx_model = model(nodes, {"x": (4, 8)}, (4, 8), inits)
    graph, _ = from_onnx(onnx_model)
    plan = tlc.compile(graph, opt_level=2, jit="eager")
    (spec,) = plan.specializations()
    (group,) = [a for a in spec.active if a.step.label == "tlc.Fused[elementwise]"]
    assert [spec.active[t].step for t, _, _ in spec.memory.inplace] == [group.step]
    kernel = group.job.result
    assert [v.alias for v in kernel._variants] == [(0,)]
    compare(onnx_model, {"x": rng.standard_normal((4, 8)).astype(np.float32)})
    x = rng.standard_normal((4, 8)).astype(np.float32)
    want = np.tanh(np.concatenate([x, x], axis=1)) * 2 @ inits["w"]
    np.testing.assert_allclose(plan.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
    assert [v.alias for v in kernel._variants] == [(0,)]


def chain_model(rng, batch: int, cin: int, cexp: int, size: int, stride: int, first: str, second: str,
                extra_reader: bool = False):
    """x -> 1x1 conv (+ bias) -> ``first`` -> 3x3 depthwise conv (+ bias) -> ``second`` -> y (+ the expanded
    tensor read a second time where ``extra_reader``): MobileNetV2's expansion and depthwise convs. An epilogue
    group needs an op after the conv (``none``: a conv alone, no group)."""
    w1 = (rng.standard_normal((cexp, cin, 1, 1)) * 0.5).astype(np.float32)
    wd = rng.standard_normal((cexp, 1, 3, 3)).astype(np.float32)
    inits = {"w1": w1, "b1": rng.standard_normal(cexp).astype(np.float32), "wd": wd,
             "bd": rng.standard_normal(cexp).astype(np.float32), "lo": np.float32(-0.5), "hi": np.float32(1.5)}
    acts = {"relu": lambda i, o: helper.make_node("Relu", [i], [o]),
            "clip": lambda i, o: helper.make_node("Clip", [i, "lo", "hi"], [o]),
            "none": lambda i, o: helper.make_node("Identity", [i], [o])}
    out = (size - 1) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["e"]), acts[first]("e", "a"),
             helper.make_node("Conv", ["a", "wd", "bd"], ["d"], group=cexp, pads=[1, 1, 1, 1],
                              strides=[stride, stride]), acts[second]("d", "z" if extra_reader else "y")]
    if extra_reader:   # the expanded tensor read elsewhere too: no chain
        nodes += [helper.make_node("ReduceMean", ["a"], ["m"], axes=[2, 3], keepdims=1),
                  helper.make_node("Add", ["z", "m"], ["y"])] if stride == 1 else []
    feeds = {"x": rng.standard_normal((batch, cin, size, size)).astype(np.float32)}
    return model(nodes, {"x": (batch, cin, size, size)}, (batch, cexp, out, out), inits), feeds


# (batch, cin, cexp, size, stride, first, second): rows of 17 and 19 outputs (masked vectors), odd and even sizes
CHAINS = [(1, 4, 24, 34, 2, "clip", "clip"), (2, 3, 16, 19, 1, "relu", "clip"), (1, 5, 8, 17, 1, "clip", "relu"),
          (3, 4, 12, 20, 2, "relu", "relu")]


@pytest.mark.parametrize("banded", [True, False])
def test_expansion_and_depthwise_convs_run_as_one_chain_step(rng, monkeypatch, banded):
    """A 1x1 conv's epilogue group that only the 3x3 depthwise conv's group reads becomes one ``chain`` step:
    banded (``tlc.kernels.chain``, forced here by a 0-byte threshold and small bands) or the two groups in turn
    (the expanded tensor below the threshold); both as onnxruntime computes. Read by anything else, no chain."""
    from tlc.kernels import chain
    from tlc.runtime import native

    monkeypatch.setattr(native, "CHAIN_MIN_BYTES", 0 if banded else 1 << 60)
    monkeypatch.setattr(chain, "SCRATCH_BYTES", 16 << 10)   # several bands a part, rows shared between them
    for case in CHAINS:
        onnx_model, feeds = chain_model(rng, *case)
        plan = compare(onnx_model, feeds)
        steps = [(st, plan.stats().steps[st.index]) for st in plan.program.steps if st.label == "tlc.Fused[chain]"]
        assert len(steps) == 1, (case, [st.label for st in plan.program.steps])
        (_, stat), = steps
        assert stat.mode == "native"
        assert ("in bands" in stat.notes[0]) == (banded and panel.fast()), (case, stat.notes)
    onnx_model, feeds = chain_model(rng, 1, 4, 8, 12, 1, "relu", "relu", extra_reader=True)
    plan = compare(onnx_model, feeds)
    assert not any(st.label == "tlc.Fused[chain]" for st in plan.program.steps)


@pytest.mark.parametrize("act", [None, "Relu"])
def test_a_residual_add_is_taken_by_the_conv_as_it_stores(rng, act):
    """A 1x1 conv's epilogue that adds a residual (then maybe a Relu) runs as one PANEL conv that adds its product
    to the residual's values: in place where the residual dies there (MobileNetV2's projections; also where the
    conv's own input, as many channels in as out, dies there too: only the residual's port may donate), copied
    into the output first where it does not (a feed); as onnxruntime computes."""
    n, c, h, w = 2, 8, 20, 13
    for feed, mid in ((False, 12), (True, 12), (False, c)):
        inits = {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in
                 {"w0": (c, 4, 1, 1), "b0": (c,), "wa": (mid, c, 1, 1), "wb": (c, mid, 1, 1), "bb": (c,),
                  "wc": (3, c, 1, 1)}.items()}
        nodes = [] if feed else [helper.make_node("Conv", ["x", "w0", "b0"], ["r0"]),
                                 helper.make_node("Relu", ["r0"], ["r"])]
        nodes += [helper.make_node("Conv", ["r", "wa"], ["a0"]), helper.make_node("Relu", ["a0"], ["a"]),
                  helper.make_node("Conv", ["a", "wb", "bb"], ["cb"]),
                  helper.make_node("Add", ["cb", "r"], ["s" if act else "z"])]
        if act:
            nodes.append(helper.make_node(act, ["s"], ["z"]))
        nodes.append(helper.make_node("Conv", ["z", "wc"], ["y"]))   # the residual's sum is no graph output
        inputs = {"r": (n, c, h, w)} if feed else {"x": (n, 4, h, w)}
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in inputs.items()}
        plan = compare(model(nodes, inputs, (n, 3, h, w), inits), feeds)
        notes = [st.notes[0] for st in plan.stats().steps if st.notes and "the residual" in st.notes[0]]
        if not panel.fast():   # (no PANEL kernel: the epilogue runs after the conv, as before)
            assert not notes
            continue
        assert len(notes) == 1, [st.notes for st in plan.stats().steps]
        (state,) = plan._specs.values()
        # (with as many channels in as out, the conv's input dies there too: given its slot, the output would be
        # written while the kernel reads it, and ``compare`` above would see it)
        assert bool(state.spec.memory.inplace) == (not feed)


def test_a_strided_1x1_conv_adds_its_residual_as_it_stores(rng):
    """ResNet's downsampling blocks: the projection, a deep 1x1 conv with stride 2 (its gathered matrix's rows
    are positions, a pointwise conv's input: positions in the kernel's lanes), adds the main path's output as it
    stores, in place where that dies there; as onnxruntime computes."""
    n, c, mid, h, w = 1, 80, 72, 14, 14
    inits = {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in
             {"wa": (mid, c, 1, 1), "wb": (c, mid, 1, 1), "bb": (c,), "wp": (c, c, 1, 1), "bp": (c,),
              "wc": (3, c, 1, 1)}.items()}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a0"]), helper.make_node("Relu", ["a0"], ["a"]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["cb"], strides=[2, 2]),
             helper.make_node("Conv", ["x", "wp", "bp"], ["p"], strides=[2, 2]),
             helper.make_node("Add", ["p", "cb"], ["s"]), helper.make_node("Relu", ["s"], ["z"]),
             helper.make_node("Conv", ["z", "wc"], ["y"])]   # the residual's sum is no graph output
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}
    plan = compare(model(nodes, {"x": (n, c, h, w)}, (n, 3, h // 2, w // 2), inits), feeds)
    notes = [st.notes[0] for st in plan.stats().steps if st.notes and "the residual" in st.notes[0]]
    assert len(notes) == (1 if panel.fast() else 0), [st.notes for st in plan.stats().steps]
    (state,) = plan._specs.values()
    assert bool(state.spec.memory.inplace) == panel.fast()
