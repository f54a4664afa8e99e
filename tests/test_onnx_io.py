"""ONNX import: named errors for bad files, unknown ops and types; opsets; constants; external data; report.

Numbers are checked against onnxruntime.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tlc
from tlc.io.onnx import from_onnx, import_onnx, to_onnx

vi = helper.make_tensor_value_info


def make_model(nodes, inputs, outputs, *, opset: int = 21, initializers=(), ir_version: int = 10,
               **kwargs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, kwargs.pop("name", "g"), inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)
    model.ir_version = ir_version
    return model


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


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
    np.testing.assert_allclose(ort_run(model, {"x": x})[0], tlc.reference.run(g, {"x": x})["y"], rtol=1e-6)
    back, report = from_onnx(model)
    assert back.op_counts() == g.op_counts()
    assert report.parameters == 24


# ---------------------------------------------------------------------------- bad models
def test_malformed_file_is_invalid_model(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"not a protobuf \x00\x01\x02")
    with pytest.raises(tlc.InvalidModelError, match="not a valid ONNX model"):
        tlc.io.load(path)


def test_unknown_ops_are_listed_with_counts():
    nodes = [helper.make_node("FooOp", ["x"], ["a"]), helper.make_node("FooOp", ["a"], ["b"]),
             helper.make_node("BarOp", ["b"], ["y"], domain="com.example")]
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(tlc.UnsupportedOperatorError) as info:
        from_onnx(model)
    assert info.value.ops == {("", "FooOp"): 2, ("com.example", "BarOp"): 1}
    assert "FooOp x2" in str(info.value)


def test_cycle_and_dangling_input_are_named():
    io = ([vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])])
    cyc = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
           helper.make_node("Relu", ["a"], ["y"], name="n3")]
    with pytest.raises(tlc.InvalidModelError, match="a cycle"):
        from_onnx(make_model(cyc, *io))
    dangling = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")]
    with pytest.raises(tlc.InvalidModelError, match="dangling input.*'adder'.*'nowhere'"):
        from_onnx(make_model(dangling, *io))


def test_value_produced_twice_is_invalid():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    with pytest.raises(tlc.InvalidModelError, match="produced twice"):
        from_onnx(make_model(nodes, [vi("x", 1, [2])], [vi("y", 1, [2])]))


# ---------------------------------------------------------------------------- unsupported types
def test_unsupported_element_types_are_named_with_the_ops():
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.COMPLEX64),
             helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("FooOp", ["f"], ["y"])]
    model = make_model(nodes, [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])])
    with pytest.raises(tlc.UnsupportedOperatorError, match=r"complex64 \('h'\)") as info:
        from_onnx(model)
    assert info.value.ops == {("", "FooOp"): 1}
    assert "FooOp x1" in str(info.value)


@pytest.mark.parametrize("code", [TensorProto.COMPLEX64, TensorProto.COMPLEX128])
def test_unsupported_input_element_type_is_named(code):
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", code, [4])], [vi("y", code, [4])])
    name = TensorProto.DataType.Name(code).lower()
    with pytest.raises(tlc.UnsupportedOperatorError, match=f"{name} \\('x', 'y'\\)"):
        from_onnx(model)


def test_unsupported_initializer_type_is_named():
    init = numpy_helper.from_array(np.array([1 + 2j, 3 - 4j], np.complex64), "w")
    model = make_model([helper.make_node("Identity", ["w"], ["y"])], [], [vi("y", TensorProto.COMPLEX64, [2])],
                       initializers=[init])
    with pytest.raises(tlc.UnsupportedOperatorError, match="complex64"):
        from_onnx(model)


def test_sequence_and_optional_values_import_and_other_kinds_are_named():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    model = make_model([helper.make_node("Identity", ["s"], ["y"])], [seq],
                       [helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, [2])])
    g, _ = from_onnx(model)
    assert str(g.type_of(g.value("y"))) == "seq<float32[2]>"
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    model = make_model([helper.make_node("Identity", ["o"], ["y"])], [helper.make_value_info("o", opt_type)],
                       [helper.make_value_info("y", opt_type)])
    g, _ = from_onnx(model)
    assert str(g.type_of(g.input_value("o"))) == "opt<float32[2]>"
    seq_seq = helper.make_sequence_type_proto(helper.make_sequence_type_proto(helper.make_tensor_type_proto(1, [2])))
    model = make_model([helper.make_node("Identity", ["s"], ["y"])], [helper.make_value_info("s", seq_seq)],
                       [helper.make_value_info("y", seq_seq)])
    with pytest.raises(tlc.UnsupportedOperatorError, match=r"sequence of sequence \('s', 'y'\)"):
        from_onnx(model)
    map_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(1, []))
    model = make_model([helper.make_node("Identity", ["m"], ["y"])], [helper.make_value_info("m", map_type)],
                       [helper.make_value_info("y", map_type)])
    with pytest.raises(tlc.UnsupportedOperatorError, match="map"):
        from_onnx(model)


# ---------------------------------------------------------------------------- opsets
def test_newer_opset_with_type_only_changes_is_read(rng):
    model = make_model([helper.make_node("Sin", ["x"], ["s"]), helper.make_node("Round", ["s"], ["y"])],
                       [vi("x", 1, [5])], [vi("y", 1, [5])], opset=23, ir_version=11)
    g, report = from_onnx(model)
    assert report.source_opset == 23 and report.opset == 21
    assert any("newer than tlc's 21" in w for w in report.warnings)
    x = rng.standard_normal(5).astype(np.float32) * 4
    np.testing.assert_allclose(tlc.reference.run(g, {"x": x})["y"], ort_run(model, {"x": x})[0])


def test_newer_opset_attribute_that_changes_meaning_is_refused():
    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16, round_mode="down")
    model = make_model([cast], [vi("x", 1, [2])], [vi("y", TensorProto.FLOAT16, [2])], opset=24, ir_version=11)
    with pytest.raises(tlc.UnsupportedOperatorError, match="Cast x1: attribute.*round_mode") as info:
        from_onnx(model)
    assert info.value.ops == {("", "Cast"): 1}
    x = np.array([1.0, 2.5], np.float32)
    for attrs in ({}, {"round_mode": "up"}):  # absent, or the new attribute at its default: opset-21 meaning
        plain = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16, **attrs)],
                           [vi("x", 1, [2])], [vi("y", TensorProto.FLOAT16, [2])], opset=24, ir_version=11)
        g, _ = from_onnx(plain)
        np.testing.assert_array_equal(tlc.reference.run(g, {"x": x})["y"], x.astype(np.float16))
        np.testing.assert_array_equal(tlc.reference.run(g, {"x": x})["y"], ort_run(plain, {"x": x})[0])


def test_opset_1_model_is_converted():
    model = make_model([helper.make_node("Not", ["x"], ["y"])], [vi("x", TensorProto.BOOL, [3])],
                       [vi("y", TensorProto.BOOL, [3])], opset=1, ir_version=3)
    g, report = from_onnx(model)
    assert report.source_opset == 1 and any("best-effort" in w for w in report.warnings)
    x = np.array([True, False, True])
    np.testing.assert_array_equal(tlc.reference.run(g, {"x": x})["y"], ~x)


def test_old_opset_softmax_semantics_are_converted(rng):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    model = make_model([node], [vi("x", TensorProto.FLOAT, [2, 3, 4])], [vi("y", TensorProto.FLOAT, [2, 3, 4])],
                       opset=9, ir_version=7)
    g, report = from_onnx(model)
    assert report.source_opset == 9
    x = rng.random((2, 3, 4), dtype=np.float32)
    np.testing.assert_allclose(tlc.reference.run(g, {"x": x})["y"], ort_run(model, {"x": x})[0], rtol=1e-5)


def test_old_opset_weights_go_around_the_converter(rng, monkeypatch):
    """The opset converter gets the model without its large initializers' data (it copies the whole model
    several times); each is put back by name: the conversion is byte for byte the converter's own, and a weight
    the converter would leave without its data makes the whole model go through it."""
    from onnx import version_converter

    from tlc.io import onnx_opset

    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")      # 1152 B: in
    w2 = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w2")   # 4608 B: around
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Split", ["b"], ["c", "d"], axis=1, split=[10, 6]),
             helper.make_node("ReduceSum", ["c"], ["e"], axes=[2, 3], keepdims=0),
             helper.make_node("Reshape", ["d", "shape"], ["y"])]
    model = make_model(nodes, [vi("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                       [vi("e", TensorProto.FLOAT, [1, 10]), vi("y", TensorProto.FLOAT, [1, 150])],
                       opset=12, ir_version=7, initializers=[w, w2, shape])
    want = version_converter.convert_version(model, 21)
    seen = []
    convert = version_converter.convert_version
    monkeypatch.setattr(version_converter, "convert_version",
                        lambda m, v: seen.append([len(t.raw_data) for t in m.graph.initializer]) or convert(m, v))
    assert onnx_opset._convert_without_weights(model).SerializeToString() == want.SerializeToString()
    assert seen == [[len(w.raw_data), 0, len(shape.raw_data)]]

    def renaming(m, v):   # a converter that moves a weight under another name: then the model goes in whole
        out = convert(m, v)
        if not out.graph.initializer[1].raw_data:
            out.graph.initializer[1].name = "moved"
        return out

    monkeypatch.setattr(version_converter, "convert_version", renaming)
    assert onnx_opset._convert_without_weights(model).SerializeToString() == want.SerializeToString()
    g, report = from_onnx(model)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    got = tlc.reference.run(g, {"x": x})
    for name, expect in zip(("e", "y"), ort_run(model, {"x": x}), strict=True):
        np.testing.assert_allclose(got[name], expect, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- constants and initializers
CONSTANT_FORMS = [
    ("value", numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3), "v"), TensorProto.INT32),
    ("value_float", 1.5, TensorProto.FLOAT),
    ("value_floats", [1.0, -2.5], TensorProto.FLOAT),
    ("value_int", 7, TensorProto.INT64),
    ("value_ints", [1, 2, 3], TensorProto.INT64),
    ("value_string", "hello", TensorProto.STRING),
    ("value_strings", ["a", "bc"], TensorProto.STRING),
]


@pytest.mark.parametrize(("key", "value", "code"), CONSTANT_FORMS, ids=[c[0] for c in CONSTANT_FORMS])
def test_every_constant_attribute_form(key, value, code):
    model = make_model([helper.make_node("Constant", [], ["y"], **{key: value})], [], [vi("y", code, None)])
    g, _ = from_onnx(model)
    got = tlc.reference.run(g, {})["y"]
    want = ort_run(model, {})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("indices", [np.array([1, 5]), np.array([[0, 1], [1, 2]])], ids=["linear", "coords"])
def test_sparse_constant(indices):
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5, 2.5], np.float32), "v"),
                                       numpy_helper.from_array(indices.astype(np.int64), "i"), [2, 3])
    model = make_model([helper.make_node("Constant", [], ["c"], sparse_value=sparse),
                        helper.make_node("Add", ["c", "x"], ["y"])], [vi("x", 1, [2, 3])], [vi("y", 1, [2, 3])])
    g, _ = from_onnx(model)
    x = np.zeros((2, 3), np.float32)
    got = tlc.reference.run(g, {"x": x})["y"]
    np.testing.assert_array_equal(got, [[0, 1.5, 0], [0, 0, 2.5]])
    np.testing.assert_array_equal(got, ort_run(model, {"x": x})[0])


def test_initializer_listed_as_input_is_a_constant(rng):
    w = rng.random((3,), dtype=np.float32)
    model = make_model([helper.make_node("Mul", ["x", "w"], ["y"])], [vi("x", 1, [2, 3]), vi("w", 1, [3])],
                       [vi("y", 1, [2, 3])], initializers=[numpy_helper.from_array(w, "w")])
    g, report = from_onnx(model)
    assert [n.name for n in g.inputs] == ["x"]
    np.testing.assert_array_equal(g.const_value(g.value("w")), w)
    assert report.initializers == 1 and report.parameters == 3
    assert any("overridable default" in m for m in report.warnings)
    x = rng.random((2, 3), dtype=np.float32)
    np.testing.assert_allclose(tlc.reference.run(g, {"x": x})["y"], ort_run(model, {"x": x})[0])
    model.ir_version = 3  # before IR 4 every initializer had to be listed as an input: nothing to warn about
    assert not from_onnx(model)[1].warnings


# ---------------------------------------------------------------------------- external data
def _external_model(tmp_path, location: str, offset: str = "0", length: str | None = "16") -> str:
    tensor = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            tensor.external_data.add(key=key, value=value)
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", 1, [4])], [vi("y", 1, [4])],
                       initializers=[tensor])
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_external_data_inside_the_folder_loads(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    (tmp_path / "model" / "weights.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    g, report = import_onnx(path)
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(tlc.reference.run(g, {"x": x})["y"], x + np.arange(4))
    assert report.parameters == 4
    np.testing.assert_array_equal(tlc.reference.run(g, {"x": x})["y"], ort_run(onnx.load(path), {"x": x})[0])


@pytest.mark.parametrize("where", ["../secret.bin", "absolute", "sub/../../secret.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, where):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = _external_model(tmp_path, str(secret) if where == "absolute" else where)
    with pytest.raises(tlc.InvalidModelError, match="outside the model's folder"):
        import_onnx(path)


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = _external_model(tmp_path, "link.bin")
    (tmp_path / "model" / "link.bin").symlink_to(secret)
    with pytest.raises(tlc.InvalidModelError, match="outside the model's folder"):
        import_onnx(path)


def test_truncated_external_data_and_unresolved_proto_are_refused(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    (tmp_path / "model" / "weights.bin").write_bytes(b"\x00" * 8)
    with pytest.raises(tlc.InvalidModelError, match="has 8 bytes at offset 0, expected 16"):
        import_onnx(path)
    # a ModelProto handed over directly must not resolve external files against the working directory
    with pytest.raises(tlc.InvalidModelError, match="external file"):
        from_onnx(onnx.load(path, load_external_data=False))


@pytest.mark.parametrize("location, offset, length, what", [
    ("weights.bin", "17", "16", "has 0 bytes at offset 17, expected 16"),                  # past the end
    ("weights.bin", "8", None, "declares shape [4] (4 elements of float) but its data"),   # the rest: 8 bytes
    ("weights.bin", "0", str(10**12), "has 16 bytes at offset 0, expected 1000000000000"),  # never allocated
    ("weights.bin", str(2**70), "16", f"at offset {2**70}, expected 16"),                  # past any seek
    ("weights.bin", "-4", "16", "negative external data offset/length"),
    ("weights.bin", "0x10", "16", "bad external data offset/length"),
    ("w\x00.bin", "0", "16", "embedded null byte"),
    ("x" * 5000, "0", "16", "cannot read external data"),                                  # name too long
    ("fifo", "0", "16", "not found (or not a regular file)"),                              # would block
    ("loop", "0", "16", "cannot read external data 'loop'"),                               # a symlink loop
    (".", "0", "16", "outside the model's folder"),                                        # the folder itself
    ("", "0", "16", "outside the model's folder"),
])
def test_external_data_ranges_and_odd_paths_are_refused(tmp_path, location, offset, length, what):
    """Offsets and lengths are checked against the file's size before anything is read or allocated; a path that
    cannot be opened, or is no regular file, is refused by name."""
    path = _external_model(tmp_path, location, offset, length)
    folder = tmp_path / "model"
    (folder / "weights.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    os.mkfifo(folder / "fifo")
    (folder / "loop").symlink_to(folder / "loop")
    with pytest.raises(tlc.InvalidModelError) as info:
        import_onnx(path)
    assert what in str(info.value)


# ---------------------------------------------------------------------------- local functions
def test_foreign_local_function_is_inlined(rng):
    fn = helper.make_function("com.example", "AddRelu", ["a", "b"], ["c"],
                              [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["c"])],
                              opset_imports=[helper.make_opsetid("", 21)])
    graph = helper.make_graph([helper.make_node("AddRelu", ["x", "x"], ["y"], domain="com.example")], "g",
                              [vi("x", 1, [4])], [vi("y", 1, [4])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 21),
                                                                    helper.make_opsetid("com.example", 1)])
    model.ir_version = 10
    g, report = from_onnx(model)
    assert g.op_counts() == {"Add": 1, "Input": 1, "Relu": 1}
    assert any("inlined 1" in w for w in report.warnings)
    x = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(tlc.reference.run(g, {"x": x})["y"], ort_run(model, {"x": x})[0])


# ---------------------------------------------------------------------------- report and metadata
def test_import_report_counts_and_reads_well():
    g0 = small_graph()
    model = to_onnx(g0)
    model.producer_name, model.producer_version = "pytorch", "2.3"
    g, report = from_onnx(model, path="mlp.onnx")
    assert (report.nodes, report.initializers, report.parameters) == (2, 1, 24)
    assert report.ops == {"MatMul": 1, "Softmax": 1}
    assert report.seconds > 0 and report.ir_version == 10
    text = str(report)
    assert text.splitlines()[0] == "imported mlp.onnx (from pytorch 2.3)"
    assert "2 nodes: MatMul 1, Softmax 1" in text and "1 initializers, 24 parameters" in text


def test_metadata_survives_import_and_export():
    node = helper.make_node("Relu", ["x"], ["y"], name="act", doc_string="the activation")
    model = make_model([node], [vi("x", 1, [2])], [vi("y", 1, [2])], name="net", producer_name="maker",
                       producer_version="1.2", doc_string="a model")
    model.graph.doc_string = "the graph"
    helper.set_model_props(model, {"author": "me", "license": "MIT"})
    g, _ = from_onnx(model)
    again = to_onnx(from_onnx(to_onnx(g))[0])
    assert (again.graph.name, again.graph.doc_string, again.doc_string) == ("net", "the graph", "a model")
    assert (again.producer_name, again.producer_version) == ("maker", "1.2")
    assert {p.key: p.value for p in again.metadata_props} == {"author": "me", "license": "MIT"}
    (relu,) = [n for n in again.graph.node if n.op_type == "Relu"]
    assert (relu.name, relu.doc_string) == ("act", "the activation")
