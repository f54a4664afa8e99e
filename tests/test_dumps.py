"""DOT and GraphML dumps: readable DOT with Fused clusters; GraphML that networkx reads and tlc rebuilds."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pydot
import pytest
from graph_equal import assert_graphs_equal
from hypothesis import HealthCheck, given, settings
from sample_graphs import WEIRD, elementwise_graphs, fused_body, kitchen_sink

import tlc
from tlc.io import dumps, load, save
from tlc.io.dumps import from_networkx, read_graphml, to_dot, to_graphml, to_networkx, write_dot
from tlc.ir.graph import TLC_DOMAIN, Graph


def layered(blocks: int) -> Graph:
    """A generated model of ``4 * blocks`` nodes: MatMul + bias + activation, every 10th activation fused."""
    rng = np.random.default_rng(0)
    g = Graph("layered")
    h = g.input("x", "float32", ("N", 8))
    for i in range(blocks):
        w = g.constant(rng.standard_normal((8, 8)).astype(np.float32), name=f"w{i}")
        h = g.add_node("MatMul", [h, w], name=f"/layer{i}/MatMul")
        if i % 10 == 0:
            body = Graph("act")
            a = body.input("a", "float32", ("N", 8))
            body.output(body.add_node("Tanh", [body.add_node("Relu", [a])]), "y")
            h = g.add_node("Fused", [h], domain=TLC_DOMAIN, body=body, kind="elementwise",
                           name=f"/layer{i}/act")
        else:
            h = g.add_node("Relu", [h], name=f"/layer{i}/Relu")
        h = g.add_node("Add", [h, g.constant(np.float32(i), name=f"b{i}")], name=f"/layer{i}/Add")
    g.output(h, "y")
    return g


def dot_nodes(dot: pydot.Dot) -> dict[str, pydot.Node]:
    """Every node of a DOT graph, clusters included, by name."""
    found = {n.get_name(): n for n in dot.get_nodes() if n.get_name() not in ("node", "edge", "graph")}
    for sub in dot.get_subgraphs():
        found.update(dot_nodes(sub))
    return found


def test_dot_labels_styles_and_folded_constants():
    g = Graph("mlp")
    x = g.input("x", "float32", ("N", 4))
    w = g.constant(np.ones((4, 3), np.float32), name="weights")
    shared = g.constant(np.float32(2), name="two")
    h = g.add_node("MatMul", [x, w], name="fc1")
    y = g.add_node("Mul", [h, shared])
    z = g.add_node("Add", [y, shared])
    g.output(z, "logits")
    nodes = dot_nodes(to_dot(g))
    labels = {name: node.get("label") for name, node in nodes.items()}
    matmul = labels[f"n{h.node}"]
    assert "<b>MatMul</b>" in matmul and "fc1" in matmul and "float32[N,3]" in matmul
    assert "weights: float32[4,3]" in matmul                # one consumer: folded into its label
    assert f"n{w.node}" not in nodes
    assert nodes[f"n{shared.node}"].get("shape") == "box"   # two consumers: drawn, small
    assert nodes[f"n{shared.node}"].get("fontsize") == "7"
    assert nodes[f"n{x.node}"].get("shape") == "ellipse" and "float32[N,4]" in labels[f"n{x.node}"]
    assert nodes["out0"].get("shape") == "invhouse" and "logits" in labels["out0"]
    text = to_dot(g).to_string()
    assert "rankdir=TB" in text and f"n{h.node} -> n{y.node}" in text and f"n{z.node} -> out0" in text


def test_dot_draws_fused_bodies_as_clusters():
    g = Graph("f")
    a = g.input("a", "float32", ("N", 4))
    b = g.input("b", "float32", (4,))
    r, s = g.add_node("Fused", [a, b], domain=TLC_DOMAIN, body=fused_body(), kind="elementwise")
    g.output(r, "r")
    g.output(s, "s")
    dot = to_dot(g)
    outer = dot.get_subgraphs()
    assert [c.get_name() for c in outer] == [f"cluster_c{r.node}"]
    assert "tlc.Fused (elementwise)" in outer[0].get("label")
    inner = outer[0].get_subgraphs()
    assert len(inner) == 1 and inner[0].get_name().startswith("cluster_")  # the nested Fused
    body_ops = {n.get("label").split("</b>")[0][4:] for n in dot_nodes(outer[0]).values()}
    assert {"Add", "Relu", "a", "b"} <= body_ops
    text = dot.to_string()
    assert f"n{a.node} -> f{r.node}_n0" in text              # graph input -> body input 0
    # graph output "r" comes from the body's Relu, inside the cluster
    relu = g.node(r).attrs["body"].outputs[0][0].node
    assert "<b>Relu</b>" in dot_nodes(outer[0])[f"f{r.node}_n{relu}"].get("label")
    assert f"f{r.node}_n{relu} -> out0" in text


# pydot's own DOT parser (used here as an independent syntax check) warns about its pyparsing calls
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_dot_of_hostile_names_is_valid_and_400_nodes_stay_compact(tmp_path):
    for g in (kitchen_sink(), layered(12)):  # pydot's parser is slow: small graphs only
        text = to_dot(g).to_string()
        parsed = pydot.graph_from_dot_data(text)
        assert parsed is not None and len(dot_nodes(parsed[0])) == len(dot_nodes(to_dot(g)))
    big = layered(100)
    assert len(big) >= 400
    nodes = dot_nodes(to_dot(big))
    # 100 weights and 100 biases are folded into their consumers; 10 fused bodies add 3 nodes each
    assert len(nodes) == len(big) - 200 - 10 + 10 * 3 + 1
    assert all(len(n.get("label")) < 400 for n in nodes.values())
    write_dot(big, tmp_path / "big.dot")
    assert (tmp_path / "big.dot").read_text(encoding="utf-8") == to_dot(big).to_string()


def test_graphml_round_trips_every_feature(tmp_path):
    g = kitchen_sink()
    path = tmp_path / "k.graphml"
    dumps.write_graphml(g, path)
    assert_graphs_equal(g, read_graphml(path))
    raw = nx.read_graphml(path, force_multigraph=True)        # plain networkx reads it too
    assert raw.graph["format"] == "tlc-graphml-1"
    by_name = {d["name"]: d for _, d in raw.nodes(data=True)}
    clip = by_name["Clip"]
    assert clip["op"] == "Clip" and clip["out0.type"] == "float32[N,4]" and clip["num_inputs"] == 3
    everything = next(d for d in raw.nodes(data=True) if d[1]["op"] == "Everything")[1]
    assert everything["kind.i"] == "int" and everything["attr.i"] == -7
    assert everything["kind.f"] == "float" and everything["attr.f"] == 0.1
    assert everything["kind.t"] == "tensor" and everything["dtype.t"] == "int32"
    assert everything["kind.g"] == "graph" and everything["attr.g"].startswith("graph @")
    add = next(n for n, d in raw.nodes(data=True) if d["name"] == "add twice")
    ports = sorted((d["src_port"], d["dst_port"]) for _, _, d in raw.in_edges(add, data=True))
    assert ports == [(0, 0), (0, 1)]
    assert to_graphml(g).startswith("<graphml")


def test_graphml_same_attribute_name_with_different_kinds():
    g = Graph("kinds")
    x = g.input("x", "float32", (2,))
    a = g.add_node("LeakyRelu", [x], alpha=2)          # a float attribute given as an int
    b = g.add_node("LeakyRelu", [a], alpha=0.5)
    c = g.add_node("Custom", [b], domain="c", num_outputs=1, infer=False, alpha="text")
    g.output(c)
    back = from_networkx(nx.parse_graphml(to_graphml(g), force_multigraph=True))
    assert_graphs_equal(g, back)
    assert type(back.node("LeakyRelu").attrs["alpha"]) is int


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elementwise_graphs())
def test_random_graphs_round_trip_through_graphml(graph):
    assert_graphs_equal(graph, from_networkx(nx.parse_graphml(to_graphml(graph), force_multigraph=True)))


def test_graphml_round_trip_runs_the_same(tmp_path, rng):
    g = layered(12)
    save(g, tmp_path / "m.graphml")
    back = load(tmp_path / "m.graphml")
    assert_graphs_equal(g, back)
    back.verify()
    feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32)}
    np.testing.assert_array_equal(tlc.reference.run(back, feeds)["y"], tlc.reference.run(g, feeds)["y"])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tlc_io_dispatch_to_dumps(tmp_path):
    g = kitchen_sink()
    save(g, tmp_path / "k.dot")
    assert pydot.graph_from_dot_file(str(tmp_path / "k.dot")) is not None
    save(g, tmp_path / "k.graphml")
    assert_graphs_equal(g, load(tmp_path / "k.graphml"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.dot", "k.graphml"]


def test_foreign_or_broken_graphml_is_refused(tmp_path):
    foreign = tmp_path / "foreign.graphml"
    nx.write_graphml(nx.path_graph(3), foreign)
    with pytest.raises(tlc.InvalidModelError, match="not a GraphML file written by tlc"):
        read_graphml(foreign)
    broken = tmp_path / "broken.graphml"
    broken.write_text("<graphml><graph", encoding="utf-8")
    with pytest.raises(tlc.InvalidModelError, match="cannot read GraphML"):
        read_graphml(broken)
    for corrupt in (lambda G: G.graph.update(outputs="[[9999, 0, \"y\"]]"),
                    lambda G: next(iter(G.edges(data=True)))[2].update(src_port=7)):
        G = to_networkx(kitchen_sink())
        corrupt(G)
        nx.write_graphml(G, tmp_path / "bad.graphml")
        with pytest.raises(tlc.InvalidModelError, match="malformed tlc GraphML"):
            read_graphml(tmp_path / "bad.graphml")


def test_weird_names_survive_graphml():
    g = Graph(WEIRD)
    x = g.input(WEIRD, "float32", (WEIRD,))
    g.output(g.add_node("Relu", [x], name=WEIRD + "!", doc=WEIRD), "base64:not really")
    back = from_networkx(nx.parse_graphml(to_graphml(g), force_multigraph=True))
    assert_graphs_equal(g, back)
    assert back.outputs[0][1] == "base64:not really"


def test_fuse_pass_output_round_trips_and_draws_its_groups(tmp_path, rng):
    from tlc.passes.fuse import FusePass

    g = Graph("mlp")
    x = g.input("x", "float32", ("N", 16))
    w = g.constant(rng.standard_normal((16, 8)).astype(np.float32), name="w")
    h = g.add_node("Add", [g.add_node("MatMul", [x, w]), g.constant(rng.standard_normal(8).astype(np.float32))])
    y = g.add_node("Mul", [h, g.add_node("Sigmoid", [h])])
    g.output(g.add_node("Softmax", [y], axis=-1), "y")
    FusePass().run(g)
    fused = [n for n in g.nodes() if n.op == "Fused"]
    assert fused, "the fuse pass formed no group; this test needs one"
    assert len(to_dot(g).get_subgraphs()) == len(fused)
    feeds = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    want = tlc.reference.run(g, feeds)["y"]
    for ext in ("tlc", "graphml"):
        save(g, tmp_path / f"f.{ext}")
        back = load(tmp_path / f"f.{ext}")
        assert_graphs_equal(g, back)
        back.verify()
        np.testing.assert_array_equal(tlc.reference.run(back, feeds)["y"], want)
