"""Nothing read from a model reaches generated source: a model whose every name and string is hostile Python.

The graph name, node names, value names (inputs, initializers, intermediates, outputs), doc strings, producer and
string values (a Constant of strings, a Cast to string) all hold a payload with triple quotes of both kinds,
newlines, ``__import__('os').system(...)`` that would create a sentinel file, format braces, backslashes and
non-ASCII. The model is imported, optimized, compiled with eager JIT (so its fused groups are generated: an
epilogue, an elementwise chain, a row reduction) and run; the numbers are checked against onnxruntime, and the
generated kernel sources and every file in the kernel cache are searched for the payload. The text IR, GraphML
and ``tlc-opt``'s outputs (.onnx, .tlc, .dot) must carry the names through unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from graph_equal import assert_graphs_equal
from onnx import TensorProto, helper, numpy_helper

import tlc
from tlc.cli import main as tlc_opt
from tlc.io.dumps import read_graphml, write_graphml
from tlc.io.onnx import from_onnx
from tlc.ir.text import load_text, parse_graph, print_graph, save_text

MARK = "PWNMARK"


def payload(sentinel: Path) -> str:
    """Python that, if it ever reached generated source (in code, a string or a docstring), would run."""
    return (f"x'''\"\"\"\n__import__('os').system('touch {sentinel}')\n{{}} {{0}} {{__class__}} \\\\ \\n "
            f"ünïcødé→✓ \x00? {MARK}")


def fragments(text: str) -> list[str]:
    """The payload and the pieces of it that generated code never needs."""
    return [text, MARK, "__import__", "'''", "ünïcødé", "{__class__}", "touch "]


def hostile_model(text: str) -> onnx.ModelProto:
    """MatMul+Add+Relu (epilogue), Mul/Tanh/Sigmoid (elementwise), Softmax (row reduction), ArgMax -> Cast to
    string, and a Constant of strings, with ``text`` in every name, doc string and string value."""
    def n(tag: str) -> str:
        return f"{tag} {text}"

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), n("weight"))
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), n("bias"))
    chain = [("MatMul", [n("x"), weight.name]), ("Add", [None, bias.name]), ("Relu", [None]), ("Mul", [None, n("y")]),
             ("Tanh", [None]), ("Sigmoid", [None]), ("Softmax", [None])]
    nodes, previous = [], None
    for i, (op, inputs) in enumerate(chain):
        out = n(f"v{i}")
        nodes.append(helper.make_node(op, [previous if v is None else v for v in inputs], [out], name=n(f"node{i}"),
                                      doc_string=text))
        previous = out
    nodes += [
        helper.make_node("ArgMax", [previous], [n("argmax")], name=n("argmax node"), axis=1, doc_string=text),
        helper.make_node("Cast", [n("argmax")], [n("as string")], name=n("cast node"), to=TensorProto.STRING),
        helper.make_node("Constant", [], [n("strings")], name=n("constant node"), value_strings=[text, "plain"]),
        helper.make_node("Identity", [n("strings")], [n("strings out")], name=n("identity node")),
    ]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, n("graph"), [vi(n("x"), TensorProto.FLOAT, [4, 8]), vi(n("y"), TensorProto.FLOAT, [4, 8])],
        [vi(previous, TensorProto.FLOAT, [4, 8]), vi(n("as string"), TensorProto.STRING, [4, 1]),
         vi(n("strings out"), TensorProto.STRING, [2])], initializer=[weight, bias], doc_string=text)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], doc_string=text,
                              producer_name=text, producer_version=text)
    helper.set_model_props(model, {text: text, "key": text})
    model.ir_version = 10  # onnxruntime 1.31 reads IR versions up to 13
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[onnx.ModelProto, str, Path]:
    sentinel = tmp_path / "SENTINEL_created_by_payload"
    text = payload(sentinel)
    return hostile_model(text), text, sentinel


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {vi.name: rng.standard_normal((4, 8)).astype(np.float32) for vi in model.graph.input}


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _assert_matches(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    soft, strings_of_argmax, strings = got
    np.testing.assert_allclose(soft, want[0], rtol=1e-5, atol=1e-6)
    assert strings_of_argmax.dtype == object and strings_of_argmax.tolist() == want[1].tolist()
    assert strings.tolist() == want[2].tolist()


def _assert_clean(source: str | bytes, text: str, where: str) -> None:
    data = source.encode() if isinstance(source, str) else source
    for piece in fragments(text):
        assert piece.encode() not in data, f"{where} holds {piece!r} from the model"


@pytest.mark.parametrize("opt_level", [2, 3])
def test_compiled_plan_runs_and_no_model_string_reaches_generated_source(hostile, tmp_path, opt_level):
    model, text, sentinel = hostile
    feeds = _feeds(model)
    want = _onnxruntime(model, feeds)
    graph, _ = from_onnx(model)
    assert graph.name == f"graph {text}" and graph.doc == text  # the names really went in
    cache = tmp_path / "kernels"
    plan = tlc.compile(graph, opt_level=opt_level, jit="eager", cache_dir=str(cache))  # optimizes, then compiles
    # the payload travels into the bodies the code generator reads (node and input names)
    groups = [st.node for st in plan.program.steps if st.label.startswith("tlc.Fused")]
    assert all(any(text in node.name for node in group.attrs["body"].nodes()) for group in groups)
    kernels = [job.result for job in plan.jobs if hasattr(job.result, "source")]
    kinds = sorted(kernel.kind for kernel in kernels)
    assert kinds == ["epilogue", "reduction"], kinds  # MatMul..Sigmoid as one epilogue, Softmax as a row kernel
    assert all(job.status == "ready" for job in plan.jobs), [job.reason for job in plan.jobs]
    got = plan.run(feeds)
    _assert_matches([got[name] for name, _ in plan.outputs], want)
    sources = [(f"kernel of the {kernel.kind} group", kernel.source) for kernel in kernels]
    sources.append(("the generated runner", plan.runner_source()))
    for where, source in sources:
        assert source.isascii(), f"{where} holds non-ASCII text"
        _assert_clean(source, text, where)
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert any(p.suffix == ".py" for p in files) and any(p.suffix == ".nbi" for p in files), files
    for path in files:
        _assert_clean(path.read_bytes(), text, f"cache file {path.name}")
        assert MARK not in path.name
    assert not sentinel.exists()


def test_cuda_source_of_the_hostile_groups_holds_no_model_string(hostile, tmp_path):
    """The CUDA renderer (elementwise groups; run under Numba's simulator where numba-cuda is installed)."""
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("no CUDA device and no simulator")
    from tlc.kernels import KernelCache, compile_group, split_epilogue

    model, text, sentinel = hostile
    graph, _ = from_onnx(model)
    plan = tlc.compile(graph, opt_level=2, jit="off")
    (epilogue,) = [st.node for st in plan.program.steps if st.label == "tlc.Fused[epilogue]"]
    _, body = split_epilogue(epilogue.attrs["body"])         # Relu, Mul, Tanh, Sigmoid after the Gemm
    assert any(text in node.name for node in body.nodes())
    kernel = compile_group(body, "elementwise", [n.output_types[0] for n in body.inputs], target="cuda",
                           cache=KernelCache(tmp_path / "cuda"))
    assert kernel.source.isascii()
    _assert_clean(kernel.source, text, "CUDA kernel source")
    for path in (p for p in (tmp_path / "cuda").rglob("*") if p.is_file()):
        _assert_clean(path.read_bytes(), text, f"cache file {path.name}")
    rng = np.random.default_rng(2)
    ins = [rng.standard_normal(tuple(n.output_types[0].shape), dtype=np.float32) for n in body.inputs]
    out = np.empty(tuple(body.type_of(body.outputs[0][0]).shape), np.float32)
    kernel(ins, [out])
    np.testing.assert_allclose(out, tlc.reference.run_graph(body, ins)[0], rtol=1e-5, atol=1e-6)
    assert not sentinel.exists()


def test_text_ir_round_trip_keeps_every_string(hostile, tmp_path):
    model, text, sentinel = hostile
    graph, _ = from_onnx(model)
    feeds = _feeds(model)
    want = _onnxruntime(model, feeds)
    for i, g in enumerate((graph, tlc.optimize(graph, opt_level=2)[0])):
        tensors: dict[str, np.ndarray] = {}
        printed = print_graph(g, tensors=tensors)
        back = parse_graph(printed, tensors=tensors)
        assert_graphs_equal(g, back)
        assert print_graph(back, tensors={}) == printed
        _assert_matches(list(tlc.reference.run(back, feeds).values()), want)
        path = tmp_path / f"g{i}.tlc"
        save_text(g, path)                   # large tensors go to an .npz beside it, keyed by value names
        assert_graphs_equal(g, load_text(path))
    assert not sentinel.exists()


def test_graphml_round_trip_keeps_every_string(hostile, tmp_path):
    model, text, sentinel = hostile
    graph, _ = from_onnx(model)
    for i, g in enumerate((graph, tlc.optimize(graph, opt_level=2)[0])):
        path = tmp_path / f"g{i}.graphml"
        write_graphml(g, path)
        back = read_graphml(path)
        assert_graphs_equal(g, back)
        feeds = _feeds(model)
        _assert_matches(list(tlc.reference.run(back, feeds).values()), _onnxruntime(model, feeds))
    assert not sentinel.exists()


def test_tlc_opt_writes_onnx_tlc_and_dot(hostile, tmp_path):
    model, text, sentinel = hostile
    source = tmp_path / "hostile.onnx"
    onnx.save(model, source)
    outputs = {ext: tmp_path / f"out.{ext}" for ext in ("onnx", "tlc", "dot")}
    for path in outputs.values():
        assert tlc_opt([str(source), "-O2", "-o", str(path)]) == 0
    feeds = _feeds(model)
    want = _onnxruntime(model, feeds)
    exported = onnx.load(outputs["onnx"])
    assert exported.graph.name == f"graph {text}"
    _assert_matches(_onnxruntime(exported, feeds), want)          # the optimized model, fused functions and all
    reread = tlc.load(outputs["tlc"])
    assert reread.name == f"graph {text}"
    _assert_matches(list(tlc.reference.run(reread, feeds).values()), want)
    import pydot

    (dot,) = pydot.graph_from_dot_file(str(outputs["dot"]))
    assert dot.get_nodes() or dot.get_subgraphs()
    assert not sentinel.exists()
