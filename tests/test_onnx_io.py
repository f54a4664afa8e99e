"""ONNX import/export: round trip through onnxruntime, named errors for bad files and unknown ops."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tlc
from tlc.io.onnx import from_onnx, to_onnx


def small_graph() -> tlc.Graph:
    g = tlc.Graph("mlp")
    x = g.input("x", "float32", ("N", 8))
    w = g.constant(np.random.default_rng(0).random((8, 3), dtype=np.float32), name="w")
    g.output(g.add_node("Softmax", [g.add_node("MatMul", [x, w])], axis=-1), "y")
    return g


def test_export_runs_in_onnxruntime_and_reimports(rng):
    g = small_graph()
    model = to_onnx(g)
    onnx.checker.check_model(model)
    x = rng.random((2, 8), dtype=np.float32)
    got = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, tlc.reference.run(g, {"x": x})["y"], rtol=1e-6)
    back, report = from_onnx(model)
    assert back.op_counts() == g.op_counts()
    assert report.parameters == 24


def test_malformed_file_is_invalid_model(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"not a protobuf \x00\x01\x02")
    with pytest.raises(tlc.InvalidModelError, match="not a valid ONNX model"):
        tlc.io.load(path)


def test_unknown_ops_are_listed_with_counts():
    nodes = [helper.make_node("FooOp", ["x"], ["a"]), helper.make_node("FooOp", ["a"], ["b"]),
             helper.make_node("BarOp", ["b"], ["y"], domain="com.example")]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(tlc.UnsupportedOperatorError) as info:
        from_onnx(model)
    assert info.value.ops == {("", "FooOp"): 2, ("com.example", "BarOp"): 1}
    assert "FooOp x2" in str(info.value)


def test_cycle_and_dangling_input_are_named():
    vi = helper.make_tensor_value_info
    io = ([vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])])
    cyc = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
           helper.make_node("Relu", ["a"], ["y"], name="n3")]
    with pytest.raises(tlc.InvalidModelError, match="a cycle"):
        from_onnx(helper.make_model(helper.make_graph(cyc, "g", *io), opset_imports=[helper.make_opsetid("", 17)]))
    dangling = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")]
    with pytest.raises(tlc.InvalidModelError, match="dangling input.*'adder'.*'nowhere'"):
        from_onnx(helper.make_model(helper.make_graph(dangling, "g", *io), opset_imports=[helper.make_opsetid("", 17)]))


def test_old_opset_softmax_semantics_are_converted(rng):
    vi = helper.make_tensor_value_info
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    graph = helper.make_graph([node], "g", [vi("x", TensorProto.FLOAT, [2, 3, 4])],
                              [vi("y", TensorProto.FLOAT, [2, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 7
    g, report = from_onnx(model)
    assert report.source_opset == 9
    x = rng.random((2, 3, 4), dtype=np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(tlc.reference.run(g, {"x": x})["y"], want, rtol=1e-5)
