"""Hostile and malformed inputs end in a named ``tlc`` error: never a bare Python exception, a hang or a crash.

Issue 11, part 4; SECURITY.md lists the guarantees these tests back. Most cases are rows of ``CASES``: an input
(an ONNX model, an .onnx file's bytes, text IR, GraphML), the entry point a user calls with it, and the named error
and message fragment it must end in. Every file row (and a few models, serialized) also goes through ``tlc-opt``,
which must exit 1 with one line, write nothing and leave its input as it was. Huge declared shapes are read under
``tracemalloc``: refused or kept symbolic, never allocated. Depth and size: subgraphs nested 200 deep are refused
by name at ``MAX_BODY_DEPTH`` (and that depth itself loads, optimizes and prints); a long chain of nodes imports,
verifies, optimizes and prints without recursion (10,000 nodes here, 100,000 in the sweep). Names crafted to break
out of generated source are tests/test_security.py's; external data escaping the folder is tests/test_onnx_io.py's.
"""

from __future__ import annotations

import io
import os
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import tlc
from tlc.cli import main as tlc_opt
from tlc.io.dumps import read_graphml, to_networkx
from tlc.io.onnx import MAX_BODY_DEPTH, from_onnx, parse_model
from tlc.io.onnx_export import FUSED_PREFIX
from tlc.ir.text import parse_graph, print_graph

vi = helper.make_tensor_value_info
#: what reading a hostile input may cost at most (the 10^12-element cases would need terabytes)
PEAK_BYTES = 64 * 2**20
SECONDS = 5.0


# ---------------------------------------------------------------------------- building hostile inputs
def model(nodes, inputs=None, outputs=None, inits=(), opset: int = 21) -> onnx.ModelProto:
    inputs = [vi("x", T.FLOAT, [2, 3])] if inputs is None else inputs
    outputs = [vi("y", T.FLOAT, None)] if outputs is None else outputs
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def node(op: str, inputs=("x",), outputs=("y",), **attrs) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


def raw_tensor(name: str, dims, data: bytes = b"", dtype: int = T.FLOAT) -> onnx.TensorProto:
    """A tensor proto exactly as given: onnx.helper refuses dims that disagree with the data, a file need not."""
    t = onnx.TensorProto(name=name, data_type=dtype, dims=list(dims))
    t.raw_data = data
    return t


def with_attr(n: onnx.NodeProto, name: str, kind: int, **fields) -> onnx.NodeProto:
    """``n`` with an attribute of any type, whatever its schema says (a file can hold anything)."""
    attr = n.attribute.add(name=name, type=kind)
    for key, value in fields.items():
        if key == "t":
            attr.t.CopyFrom(value)
        else:
            setattr(attr, key, value)
    return n


def sparse(dims, nnz: int = 2) -> onnx.NodeProto:
    values = numpy_helper.from_array(np.ones(nnz, np.float32), "v")
    indices = numpy_helper.from_array(np.arange(nnz, dtype=np.int64), "i")
    return node("Constant", (), ("c",), sparse_value=helper.make_sparse_tensor(values, indices, list(dims)))


def bad_utf8_name() -> bytes:
    """A model whose node name holds a byte that is not UTF-8 (proto2 strings are not checked when parsed)."""
    data = model([node("Relu", name="NAMEX")]).SerializeToString()
    return data.replace(b"NAMEX", b"NAM\xffX")


def self_calling_fused() -> onnx.ModelProto:
    """A tlc Fused function (kept as a function on import, not inlined) whose body calls itself."""
    name = FUSED_PREFIX + "0"
    fn = helper.make_function("tlc", name, ["a"], ["b"], [node(name, ("a",), ("b",), domain="tlc")],
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("tlc", 1)])
    m = model([node(name, domain="tlc")])
    m.opset_import.append(helper.make_opsetid("tlc", 1))
    m.functions.append(fn)
    return m


def scan(num_scan_inputs: int) -> onnx.ModelProto:
    """A running sum written as Scan, with the given count of scanned inputs (1 is right)."""
    body = helper.make_graph([node("Add", ("s", "xi"), ("s2",)), node("Identity", ("s2",), ("o",))], "body",
                             [vi("s", T.FLOAT, [2]), vi("xi", T.FLOAT, [2])],
                             [vi("s2", T.FLOAT, [2]), vi("o", T.FLOAT, [2])])
    return model([node("Scan", ("s0", "x"), ("y", "ys"), body=body, num_scan_inputs=num_scan_inputs)],
                 inputs=[vi("s0", T.FLOAT, [2]), vi("x", T.FLOAT, [3, 2])])


def nested_if(depth: int) -> onnx.ModelProto:
    """``depth`` If nodes each in the then-branch of the one above, the innermost reading the outer ``x``. Built in
    place: onnx.helper copies each body through protobuf, which refuses messages past 100 levels."""
    m = model([], inputs=[vi("c", T.BOOL, []), vi("x", T.FLOAT, [2])], outputs=[vi("y0", T.FLOAT, [2])])
    graph = m.graph
    for level in range(depth):
        n = graph.node.add(op_type="If", input=["c"], output=[f"y{level}"], name=f"if{level}")
        then = n.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH)
        other = n.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH)
        other.g.CopyFrom(helper.make_graph([node("Neg", ("x",), (f"n{level}",))], f"else{level}", [],
                                           [vi(f"n{level}", T.FLOAT, [2])]))
        graph = then.g
        graph.name = f"then{level}"
        graph.output.append(vi(f"y{level + 1}", T.FLOAT, [2]))
    graph.node.append(node("Relu", ("x",), (f"y{depth}",)))
    return m


def nested_text(depth: int) -> str:
    """Text IR whose graphs nest ``depth`` deep through If branches."""
    opening = "".join(f"graph @g{i} {{\n%c{i} = Input : bool[]\n%y{i} = If(%c{i}) {{then_branch = "
                      for i in range(depth))
    leaf = "graph @leaf {\n%z = Input : float32[2]\nreturn %z\n}"
    closing = "".join(f"}} : float32[2]\nreturn %y{i}\n}}" for i in reversed(range(depth)))
    return opening + leaf + closing


def chain(n: int) -> onnx.ModelProto:
    """x -> Relu -> Neg -> Abs -> Sigmoid -> Relu ... ``n`` nodes, built in place (make_graph copies each node)."""
    m = model([], inputs=[vi("x", T.FLOAT, ["N", 4])], outputs=[])
    ops, previous = ("Relu", "Neg", "Abs", "Sigmoid"), "x"
    for i in range(n):
        m.graph.node.add(op_type=ops[i % 4], input=[previous], output=[f"v{i}"])
        previous = f"v{i}"
    m.graph.output.append(vi(previous, T.FLOAT, ["N", 4]))
    return m


def graphml_text(edit: Callable[[nx.MultiDiGraph], None]) -> str:
    """A tlc GraphML file of a small graph, edited the way a hostile file may be."""
    g = tlc.Graph("g")
    x = g.input("x", "float32", (2,))
    g.output(g.add_node("Transpose", [g.add_node("Relu", [x])], perm=[0]), "y")
    G = to_networkx(g)
    edit(G)
    return "\n".join(nx.generate_graphml(G))


ENTITY_BOMB = ('<?xml version="1.0"?><!DOCTYPE b [<!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">'
               + "".join(f'<!ENTITY a{i} "{("&a;" if i == 0 else f"&a{i - 1};") * 10}">' for i in range(9))
               + '<!ENTITY z "&a8;">]><graphml xmlns="http://graphml.graphdrawing.org/xmlns"><key id="d0" '
               'for="graph" attr.name="format" attr.type="string"/><graph edgedefault="directed">'
               '<data key="d0">&z;</data></graph></graphml>')
EXTERNAL_ENTITY = ('<?xml version="1.0"?><!DOCTYPE b [<!ENTITY e SYSTEM "file:///etc/passwd">]><graphml '
                   'xmlns="http://graphml.graphdrawing.org/xmlns"><key id="d0" for="graph" attr.name="format" '
                   'attr.type="string"/><graph edgedefault="directed"><data key="d0">&e;</data></graph></graphml>')
SMALL_TEXT = "graph @g {\n  %x = Input : float32[2]\n  %y = Relu(%x) : float32[2]\n  return %y\n}\n"
#: a graph without types (as golden pass tests are written): reading it types it by inference
UNTYPED_TEXT = "graph @g {{\n  %x = Input : float32[2]\n  {}\n  %y = Add(%x, %c)\n  return %y\n}}\n"


# ---------------------------------------------------------------------------- the table
@dataclass
class Case:
    id: str
    kind: str                 # onnx (a ModelProto), bytes (an .onnx file's bytes), text (.tlc), graphml
    make: Callable[[], Any]
    error: type[tlc.TlcError]
    fragment: str
    bounded: bool = False     # declares a huge size: must be refused within PEAK_BYTES of memory


def M(nodes, **kw) -> Callable[[], onnx.ModelProto]:  # noqa: N802 - reads as the model it builds
    return lambda: model(nodes() if callable(nodes) else nodes, **kw)


INPUT_1E12 = [vi("x", T.FLOAT, [10**6, 10**6])]
CASES = [
    # -- truncated and corrupt files (the seeded sample of mutations is test_mutated_models_...)
    Case("not-protobuf", "bytes", lambda: b"\x00\x01 not a protobuf", tlc.InvalidModelError, "not a valid ONNX"),
    Case("truncated", "bytes", lambda: model([node("Relu")]).SerializeToString()[:-9], tlc.InvalidModelError,
         "not a valid ONNX"),
    Case("not-utf8-name", "bytes", bad_utf8_name, tlc.InvalidModelError, "which is not UTF-8"),
    Case("nested-past-protobuf", "bytes", lambda: nested_if(200).SerializeToString(), tlc.InvalidModelError,
         "not a valid ONNX"),
    # -- wrong attribute types
    Case("axis-string", "onnx", M([node("Softmax", axis="1")]), tlc.ValidationError,
         "attribute 'axis' should be int, got str '1'"),
    Case("axis-tensor", "onnx", M([node("Softmax", axis=numpy_helper.from_array(np.array(1)))]),
         tlc.ValidationError, "attribute 'axis' should be int, got ndarray"),
    Case("axis-floats", "onnx", M([node("Softmax", axis=[1.0, 2.0])]), tlc.ValidationError,
         "attribute 'axis' should be int, got list"),
    Case("perm-floats", "onnx", M([node("Transpose", perm=[1.0, 0.0])]), tlc.ValidationError,
         "attribute 'perm' should be ints"),
    Case("int-for-floats", "onnx",
         M(lambda: [with_attr(node("LSTM", ("x", "w", "r"), ("y",), hidden_size=2), "activation_alpha",
                              onnx.AttributeProto.INT, i=3)],
           inputs=[vi("x", T.FLOAT, [1, 1, 2]), vi("w", T.FLOAT, [1, 8, 2]), vi("r", T.FLOAT, [1, 8, 2])]),
         tlc.ValidationError, "attribute 'activation_alpha' should be floats, got int 3"),
    Case("alpha-string", "onnx", M([node("Gemm", ("x", "x"), transB=1, alpha="big")]), tlc.ValidationError,
         "attribute 'alpha' should be float, got str"),
    Case("constant-int-as-string", "onnx",
         M(lambda: [with_attr(node("Constant", (), ("y",)), "value_int", onnx.AttributeProto.STRING, s=b"7")]),
         tlc.InvalidModelError, "'value_int' should be of type INT, got STRING"),
    Case("cast-to-unknown-type", "onnx", M([node("Cast", to=999)]), tlc.ShapeInferenceError,
         "ONNX element type 999 is not supported"),
    # -- dangling, duplicate and empty names; cycles
    Case("dangling-input", "onnx", M([node("Relu", ("nowhere",))]), tlc.InvalidModelError,
         "a dangling input: node '' (Relu) reads 'nowhere'"),
    Case("output-produced-twice", "onnx", M([node("Relu"), node("Neg")]), tlc.InvalidModelError,
         "value 'y' is produced twice"),
    Case("input-redefined", "onnx", M([node("Relu", ("x",), ("x",))], outputs=[vi("x", T.FLOAT, None)]),
         tlc.InvalidModelError, "value 'x' is produced twice"),
    Case("graph-output-twice", "onnx", M([node("Relu")], outputs=[vi("y", T.FLOAT, None)] * 2),
         tlc.ValidationError, "already has an output named 'y'"),
    Case("graph-input-twice", "onnx", M([node("Relu")], inputs=[vi("x", T.FLOAT, [2])] * 2), tlc.ValidationError,
         "already has a value named 'x'"),
    Case("initializer-twice", "onnx", M([node("Add", ("x", "w"))], inits=[raw_tensor("w", [3], bytes(12))] * 2),
         tlc.InvalidModelError, "initializer name(s) 'w' are used more than once"),
    Case("empty-required-input", "onnx", M([node("Relu", ("",))]), tlc.ValidationError,
         "(Relu): expected 1 inputs, got 0"),
    Case("empty-graph-output", "onnx", M([node("Relu", ("x",), ("",))], outputs=[vi("", T.FLOAT, None)]),
         tlc.InvalidModelError, "graph output '' is not produced by any node"),
    Case("node-without-outputs", "onnx", M([node("Relu", ("x",), ())], outputs=[vi("x", T.FLOAT, None)]),
         tlc.InvalidModelError, "a node needs at least one output"),
    Case("constant-without-outputs", "onnx",
         M([node("Constant", (), (), value_float=1.0), node("Relu")]), tlc.InvalidModelError,
         "node '' (Constant): a node needs at least one output, got none"),
    Case("no-graph-outputs", "onnx", M([node("Relu")], outputs=[]), tlc.ValidationError, "has no outputs"),
    Case("cycle", "onnx", M([node("Add", ("x", "b"), ("a",)), node("Relu", ("a",), ("b",)), node("Relu", ("a",))]),
         tlc.InvalidModelError, "a cycle: node '' (Add) reads 'b'"),
    Case("self-loop", "onnx", M([node("Add", ("x", "y"))]), tlc.InvalidModelError, "a cycle"),
    # -- negative, overflowing and 10^12-element shapes
    Case("initializer-negative-dim", "onnx", M([node("Add", ("x", "w"))], inits=[raw_tensor("w", [-1, 3], bytes(12))]),
         tlc.InvalidModelError, "declares shape [-1, 3]: dims must be >= 0"),
    Case("initializer-1e12", "onnx", M([node("Add", ("x", "w"))], inits=[raw_tensor("w", [10**6, 10**6], bytes(16))]),
         tlc.InvalidModelError, "declares shape [1000000, 1000000] (1000000000000 elements", bounded=True),
    Case("initializer-1e12-no-data", "onnx", M([node("Add", ("x", "w"))], inits=[raw_tensor("w", [10**6, 10**6])]),
         tlc.InvalidModelError, "but its data does not fit it", bounded=True),
    Case("initializer-string-1e12", "onnx",
         M([node("Identity", ("w",))], inits=[raw_tensor("w", [10**6, 10**6], dtype=T.STRING)]),
         tlc.InvalidModelError, "elements of string", bounded=True),
    Case("initializer-int4-1e12", "onnx",
         M([node("Identity", ("w",))], inits=[raw_tensor("w", [10**6, 10**6], b"\x11", dtype=T.INT4)]),
         tlc.InvalidModelError, "elements of int4", bounded=True),
    Case("initializer-dims-overflow-int64", "onnx",
         M([node("Add", ("x", "w"))], inits=[raw_tensor("w", [2**62, 2**62], bytes(16))]),
         tlc.InvalidModelError, "declares shape [4611686018427387904, 4611686018427387904]", bounded=True),
    Case("initializer-short-data", "onnx", M([node("Add", ("x", "w"))], inits=[raw_tensor("w", [3], bytes(5))]),
         tlc.InvalidModelError, "declares shape [3] (3 elements of float)"),
    Case("opset-10-resize-short-scales", "onnx",  # read while converting the opset, before the initializers
         M([node("Resize", ("x", "scales"), mode="nearest")], inits=[raw_tensor("scales", [2], bytes(4))],
           opset=10), tlc.InvalidModelError, "tensor 'scales' declares shape [2] (2 elements of float)"),
    Case("sparse-1e12", "onnx", M(lambda: [sparse([10**6, 10**6])], outputs=[vi("c", T.FLOAT, None)]),
         tlc.InvalidModelError, "would densify to 4,000,000,000,000 bytes", bounded=True),
    Case("sparse-negative-dim", "onnx", M(lambda: [sparse([-4])], outputs=[vi("c", T.FLOAT, None)]),
         tlc.InvalidModelError, "declares shape [-4]"),
    Case("reshape-to-1e12", "onnx",
         M([node("Constant", (), ("s",), value=numpy_helper.from_array(np.array([10**6, 10**6], np.int64))),
            node("Reshape", ("x", "s"))]), tlc.ShapeInferenceError, "cannot reshape [2, 3] into [1000000, 1000000]"),
    Case("constant-of-shape-negative", "onnx",
         M([node("Constant", (), ("s",), value=numpy_helper.from_array(np.array([-3, 2], np.int64))),
            node("ConstantOfShape", ("s",))]), tlc.ShapeInferenceError, "shape [-3, 2] has a negative dim"),
    # -- nesting
    Case("nested-200", "onnx", lambda: nested_if(200), tlc.InvalidModelError,
         f"subgraphs are nested more than {MAX_BODY_DEPTH} levels deep"),
    Case("scan-1e12-scanned-inputs", "onnx", lambda: scan(10**12), tlc.InvalidModelError,
         "num_scan_inputs 1000000000000 and scan_input_axes [] do not fit the node's 2 inputs", bounded=True),
    Case("fused-function-calls-itself", "onnx", self_calling_fused, tlc.InvalidModelError,
         "Fused functions call each other in a cycle or more than 24 deep: 'Fused_0' -> 'Fused_0'"),
    Case("text-nested-200", "text", lambda: nested_text(200), tlc.InvalidModelError,
         f"graphs are nested more than {MAX_BODY_DEPTH} levels deep"),
    Case("text-nested-lists", "text",
         lambda: SMALL_TEXT.replace(": float32[2]\n  return", "{a = " + "[" * 5000 + "]" * 5000 + "}\n  return"),
         tlc.InvalidModelError, "lists are nested more than 8 levels deep"),
    Case("text-nested-types", "text", lambda: SMALL_TEXT.replace("float32[2]", "opt<" * 3000 + "float32[2]", 1),
         tlc.InvalidModelError, "an optional holds a tensor or a sequence, got opt<...>"),
    # -- text IR
    Case("text-empty", "text", lambda: "", tlc.InvalidModelError, ":1:1: expected 'graph'"),
    Case("text-cut-in-a-tensor", "text", lambda: "graph @g {\n%c = Constant {value = dense<float32[2]> [1.0,",
         tlc.InvalidModelError, ":2:47: expected ',' or ']', got end of input"),
    Case("text-undefined-value", "text", lambda: SMALL_TEXT.replace("Relu(%x)", "Relu(%w)"), tlc.InvalidModelError,
         ":3:13: value %w is not defined before its use"),
    Case("text-value-twice", "text", lambda: SMALL_TEXT.replace("%y = Relu", "%x = Relu").replace("return %y",
                                                                                                  "return %x"),
         tlc.InvalidModelError, "value name 'x' is defined twice"),
    Case("text-5000-digit-int", "text", lambda: SMALL_TEXT.replace("float32[2]", "float32[" + "9" * 5000 + "]", 1),
         tlc.InvalidModelError, "a number of 5000 characters; at most 400"),
    Case("text-int64-overflow", "text",
         lambda: SMALL_TEXT.replace("Input", "Constant {value = dense<int64[1]> [9223372036854775808]}", 1),
         tlc.InvalidModelError, "element 9223372036854775808 does not fit in int64"),
    Case("text-int4-overflow", "text", lambda: SMALL_TEXT.replace("Input", "Constant {value = dense<int4[1]> [9]}", 1),
         tlc.InvalidModelError, "element 9 does not fit in int4"),
    Case("text-1e12-tensor", "text",
         lambda: SMALL_TEXT.replace("Input", "Constant {value = dense<float32[1000000,1000000]> [1.0]}", 1),
         tlc.InvalidModelError, "needs 1000000000000 elements, got 1", bounded=True),
    Case("text-constant-without-value", "text", lambda: UNTYPED_TEXT.format("%c = Constant"), tlc.ValidationError,
         "node 'c' (Constant): required attribute 'value' is missing"),
    Case("text-loop-without-body", "text", lambda: UNTYPED_TEXT.format("%c = Loop(%x, %x)"), tlc.ValidationError,
         "node 'c' (Loop): required attribute 'body' is missing"),
    Case("text-fused-without-body", "text", lambda: UNTYPED_TEXT.format("%c = tlc.Fused(%x)"), tlc.ValidationError,
         "node 'c' (tlc.Fused): required attribute 'body' is missing"),
    Case("text-not-utf8", "text", lambda: b"graph @\xff {", tlc.InvalidModelError, "cannot read text IR file"),
    # -- GraphML (tlc's own dump format, read back by tlc.load)
    Case("graphml-entity-bomb", "graphml", lambda: ENTITY_BOMB, tlc.InvalidModelError, "amplification", bounded=True),
    Case("graphml-external-entity", "graphml", lambda: EXTERNAL_ENTITY, tlc.InvalidModelError, "undefined entity"),
    Case("graphml-1e12-ports", "graphml", lambda: graphml_text(lambda G: G.nodes["n1"].update(num_inputs=10**12)),
         tlc.InvalidModelError, "declares 1000000000000 inputs", bounded=True),
    Case("graphml-negative-port", "graphml",
         lambda: graphml_text(lambda G: next(iter(G.edges(data=True)))[2].update(src_port=-1)),
         tlc.InvalidModelError, "port -1 of node 'n0' is out of range"),
    Case("graphml-deep-json", "graphml",
         lambda: graphml_text(lambda G: G.nodes["n2"].update({"attr.perm": "[" * 100000 + "]" * 100000})),
         tlc.InvalidModelError, "RecursionError"),
    Case("graphml-nested-graph-text", "graphml",
         lambda: graphml_text(lambda G: G.nodes["n2"].update({"kind.body": "graph", "attr.body": nested_text(200)})),
         tlc.InvalidModelError, "nested more than"),
]
SUFFIX = {"onnx": ".onnx", "bytes": ".onnx", "text": ".tlc", "graphml": ".graphml"}


def write(case: Case, folder: Path) -> Path:
    made = case.make()
    data = (made.SerializeToString() if isinstance(made, onnx.ModelProto)
            else made.encode() if isinstance(made, str) else made)
    path = folder / f"hostile{SUFFIX[case.kind]}"
    path.write_bytes(data)
    return path


def read(case: Case, path: Path) -> tlc.Graph:
    """The case's entry point: from_onnx on the ModelProto, else the file through tlc.load; then what a user does
    next with a graph (type what text left untyped; verify; optimize at -O1)."""
    if case.kind == "onnx":
        graph, _ = from_onnx(case.make())
    elif case.kind == "graphml":
        graph = read_graphml(path)
    else:
        graph = tlc.load(path)
    graph.infer_missing_types()
    graph.verify()
    return tlc.optimize(graph, opt_level=1)[0]


def bounded(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` under tracemalloc: it must stay within PEAK_BYTES and SECONDS (numpy reports its allocations)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        return fn()
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < PEAK_BYTES and seconds < SECONDS, f"peak {peak:,} bytes, {seconds:.1f} s"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_ends_in_a_named_error(case: Case, tmp_path):
    path = write(case, tmp_path)
    with pytest.raises(case.error) as info:
        bounded(lambda: read(case, path)) if case.bounded else read(case, path)
    assert case.fragment in str(info.value)


FILE_CASES = [c for c in CASES if c.kind != "onnx" or c.id in ("dangling-input", "initializer-1e12", "nested-200",
                                                                "axis-string", "cycle")]


def test_tlc_opt_writes_nothing_for_hostile_inputs(capsys, tmp_path):
    """One line on stderr, exit 1, no output file (nor a temporary one) and the input unchanged, for every file."""
    for case in FILE_CASES:
        folder = tmp_path / case.id
        folder.mkdir()
        source = write(case, folder)
        before = source.read_bytes()
        for out in ("out.onnx", "out.tlc"):
            code = tlc_opt([str(source), "-O1", "-o", str(folder / out), "--dump-dot", str(folder / "g.dot")])
            err = capsys.readouterr().err
            assert code == 1 and err.startswith("tlc-opt: error: ") and err.count("\n") == 1, (case.id, err)
        code = tlc_opt([str(source), "-O1", "-o", str(source)])  # asked to overwrite its input: still refuses
        assert code == 1, case.id
        capsys.readouterr()
        assert sorted(os.listdir(folder)) == [source.name] and source.read_bytes() == before, case.id


class _Payload:
    """Pickles to a call of os.system: what an .npz of object arrays could run if tlc ever unpickled one."""

    def __init__(self, sentinel: Path):
        self.sentinel = sentinel

    def __reduce__(self):
        return os.system, (f"touch {self.sentinel}",)


def npy_header(shape, descr: str = "<f4") -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
    return header.getvalue()


def test_tensors_beside_text_are_read_only_as_stored(tmp_path):
    """A .tlc file's tensors come from the .npz beside it: read without pickle (an object array is refused and its
    payload never runs), and only when the file holds them: numpy would allocate a 200-byte member's 10^12-element
    header before reading it, and a compressed member could expand without bound."""
    sentinel = tmp_path / "SENTINEL"
    source = tmp_path / "m.tlc"
    source.write_text(SMALL_TEXT.replace("Input", "Constant {value = dense<float32[2]> @w}", 1), encoding="utf-8")
    npz = tmp_path / "m.tlc.npz"
    np.savez(npz, w=np.array([_Payload(sentinel), 1], dtype=object), allow_pickle=True)
    with pytest.raises(tlc.InvalidModelError, match="tensor @w cannot be read: Object arrays cannot be loaded"):
        tlc.load(source)
    assert tlc_opt([str(source), "-O1", "-o", str(tmp_path / "out.tlc")]) == 1
    assert not sentinel.exists() and not (tmp_path / "out.tlc").exists()
    for compression, member, fragment in [
            (zipfile.ZIP_STORED, npy_header((10**6, 10**6)) + bytes(16), "declares float32[1000000, 1000000]"),
            (zipfile.ZIP_DEFLATED, npy_header((2,)) + bytes(8), "is compressed")]:
        with zipfile.ZipFile(npz, "w", compression=compression) as archive:
            archive.writestr("w.npy", member)
        with pytest.raises(tlc.InvalidModelError) as info:
            bounded(lambda: tlc.load(source))
        assert fragment in str(info.value)


# ---------------------------------------------------------------------------- values that are read, not refused
def test_huge_declared_shapes_stay_symbolic_and_are_never_allocated(tmp_path):
    """A 10^12-element input (and one whose dims overflow int64; a negative dim reads as unknown) imports,
    optimizes, compiles and refuses a feed of another shape, all within PEAK_BYTES; a ConstantOfShape / Expand of
    10^12 elements is left for run time by -O2's folding."""
    huge = model([node("Relu")], inputs=INPUT_1E12)
    overflow = model([node("Relu")], inputs=[vi("x", T.FLOAT, [2**62, 2**62])])
    negative = model([node("Relu")], inputs=[vi("x", T.FLOAT, [-5, 3])])
    shape = numpy_helper.from_array(np.array([10**6, 10**6], np.int64))
    grown = model([node("Constant", (), ("s",), value=shape), node("ConstantOfShape", ("s",), ("c",)),
                   node("Constant", (), ("one",), value_float=1.0), node("Expand", ("one", "s"), ("e",)),
                   node("Add", ("c", "e"), ("f",)), node("Add", ("x", "x"))],
                  outputs=[vi("y", T.FLOAT, None), vi("f", T.FLOAT, None)])

    def check():
        for m, dims in ((huge, (10**6, 10**6)), (overflow, (2**62, 2**62)), (negative, (None, 3))):
            graph, _ = from_onnx(m)
            assert graph.type_of(graph.input_value("x")).shape == dims
            plan = tlc.compile(graph, jit="off")
            with pytest.raises(tlc.ShapeMismatchError, match="expected shape float32"):
                plan.run({"x": np.ones((3, 4), np.float32)})
        optimized, _ = tlc.optimize(from_onnx(grown)[0], opt_level=2)
        assert optimized.type_of(optimized.outputs[1][0]).shape == (10**6, 10**6)
        assert max(n.attrs["value"].size for n in optimized.nodes() if n.op == "Constant") <= 2
        return parse_graph(print_graph(optimized))

    bounded(check)


def test_hostile_feeds_are_input_errors():
    """What numpy cannot make an array of, and what is no array at all (wrong names, shapes and dtypes are
    tests/runtime/test_runtime_plan.py's)."""
    g = tlc.Graph("g")
    g.output(g.add_node("Relu", [g.input("x", "float32", ("N", 2))]), "y")
    plan = tlc.compile(g, jit="off")
    for feeds, fragment in [({"x": [[1.0, 2.0], [3.0]]}, "got a list numpy cannot convert"),
                            ({"x": None}, "expected an array of float32[N,2], got NoneType"),
                            ({"x": {"a": 1}}, "got dict"),
                            ([np.ones((1, 2), np.float32)], "feeds must be a dict")]:
        with pytest.raises(tlc.InputError) as info:
            plan.run(feeds)
        assert fragment in str(info.value)


# ---------------------------------------------------------------------------- corrupted bytes
def small_real_model() -> bytes:
    """An MLP with weights (MatMul, Add, Relu, Softmax), an If whose branches read the outer activation, a Constant
    of strings: 546 bytes with the kinds of field a real model has."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    then = helper.make_graph([node("Mul", ("s", "s"), ("m",))], "then", [], [vi("m", T.FLOAT, ["N", 8])])
    other = helper.make_graph([node("Neg", ("s",), ("n",))], "else", [], [vi("n", T.FLOAT, ["N", 8])])
    m = model([node("MatMul", ("x", "w"), ("h",)), node("Add", ("h", "b"), ("a",)), node("Relu", ("a",), ("r",)),
               node("Softmax", ("r",), ("s",), axis=-1),
               node("If", ("c",), ("y",), then_branch=then, else_branch=other),
               node("Constant", (), ("t",), value_strings=["tlc", "onnx"])],
              inputs=[vi("x", T.FLOAT, ["N", 4]), vi("c", T.BOOL, [])],
              outputs=[vi("y", T.FLOAT, ["N", 8]), vi("t", T.STRING, [2])], inits=[w, b])
    return m.SerializeToString()


def mutations(data: bytes, count: int, seed: int = 11) -> list[tuple[str, bytes]]:
    """A fixed sample: half truncations, half flips of one to four bits."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        if i % 2 == 0:
            cut = int(rng.integers(1, len(data)))
            out.append((f"truncated at {cut}", data[:cut]))
        else:
            flipped = bytearray(data)
            where = rng.integers(0, len(data), int(rng.integers(1, 5)))
            for at in where:
                flipped[at] ^= 1 << int(rng.integers(0, 8))
            out.append((f"bits flipped at {sorted(where.tolist())}", bytes(flipped)))
    return out


def test_mutated_models_load_or_end_in_a_named_error():
    """50 seeded corruptions of a small real model: each is refused with a TlcError, or loads, and then optimizes,
    verifies and prints (a flipped weight bit is a valid model)."""
    outcomes = {"refused": 0, "loaded": 0}
    for what, data in mutations(small_real_model(), 50):
        try:
            graph, _ = from_onnx(parse_model(data))
        except tlc.TlcError:
            outcomes["refused"] += 1
            continue
        except Exception as exc:  # the failure this test exists for: say which mutation
            raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc
        outcomes["loaded"] += 1
        optimized, _ = tlc.optimize(graph, opt_level=1)
        optimized.verify()
        tensors: dict[str, np.ndarray] = {}
        text = print_graph(optimized, tensors=tensors)
        assert print_graph(parse_graph(text, tensors=tensors), tensors={}) == text
    assert outcomes["refused"] >= 25 and outcomes["loaded"] >= 5, outcomes  # the sample reaches both paths


# ---------------------------------------------------------------------------- depth and size
def test_bodies_nested_to_the_limit_load_optimize_and_print():
    """MAX_BODY_DEPTH levels of If (one more is refused: CASES): import, verify, -O2, text round trip, the
    reference executor and a compiled plan, all without RecursionError."""
    graph, _ = from_onnx(nested_if(MAX_BODY_DEPTH))
    graph.verify()
    optimized, _ = tlc.optimize(graph, opt_level=2)
    back = parse_graph(print_graph(optimized))
    back.verify()
    feeds = {"c": np.array(True), "x": np.array([-1.0, 2.0], np.float32)}
    assert tlc.reference.run(back, feeds)["y0"].tolist() == [0.0, 2.0]
    feeds["c"] = np.array(False)
    assert tlc.reference.run(graph, feeds)["y0"].tolist() == [1.0, -2.0]
    with pytest.raises(tlc.InvalidModelError, match="nested more than"):
        parse_graph(nested_text(MAX_BODY_DEPTH + 1))


def long_chain(n: int) -> None:
    graph, _ = from_onnx(chain(n))          # import verifies the structure
    graph.verify()                          # and this the types, once more
    optimized, _ = tlc.optimize(graph, opt_level=1)
    text = print_graph(optimized)
    assert len(graph) == n + 1 and text.count("\n") == n + 4


def test_10000_node_chain_without_recursion():
    long_chain(10_000)


@pytest.mark.sweep
def test_100000_node_chain_without_recursion():
    long_chain(100_000)


def test_tlc_opt_reports_an_internal_error_in_one_line(tmp_path, monkeypatch, capsys):
    """A bug of tlc's (here a pass that raises a bare Python error) never prints a traceback or leaves output:
    one line on stderr and exit status 70."""
    import tlc.cli as cli

    model = tmp_path / "m.tlc"
    model.write_text('graph @g {\n  %x = Input : float32[2]\n  %y = Relu(%x) : float32[2]\n  return %y\n}\n')

    def broken(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(cli, "run", broken)
    monkeypatch.delenv("TLC_TRACEBACK", raising=False)
    assert cli.main([str(model), "-O1", "-o", str(tmp_path / "out.onnx")]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: KeyError" in err and "Traceback" not in err
    assert not (tmp_path / "out.onnx").exists()
