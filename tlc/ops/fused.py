"""``tlc.Fused``: a group of ops that one kernel computes; its ``body`` attribute is the subgraph.

The body's Input nodes are the group's inputs in order and its outputs the group's outputs. ``kind`` says what
shape of kernel the fusion pass chose ("elementwise", "reduction", "epilogue", ...); code generators read it.
"""

from __future__ import annotations

from ..ir.graph import TLC_DOMAIN, Graph
from ..ir.types import TensorType
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register


def body_with_input_types(body: Graph, types: list[TensorType]) -> Graph:
    """A copy of ``body`` re-typed for the given input types (symbolic or concrete)."""
    g = body.copy()
    for node, t in zip(g.inputs, types):
        node.output_types[0] = t
    g.infer_types()
    return g


def _fused_infer(ctx: InferContext) -> list[TensorType]:
    body: Graph = ctx.attrs["body"]
    if len(body.inputs) != ctx.num_inputs:
        ctx.fail(f"body has {len(body.inputs)} inputs but the node has {ctx.num_inputs}")
    types = [ctx.type(i) for i in range(ctx.num_inputs)]
    if all(t == n.output_types[0] for t, n in zip(types, body.inputs)):
        return [body.type_of(v) for v, _ in body.outputs]
    typed = body_with_input_types(body, types)
    return [typed.type_of(v) for v, _ in typed.outputs]


def _fused_reference(*inputs, body, kind, run_graph):
    return run_graph(body, list(inputs))


register(OpDef(
    name="Fused", domain=TLC_DOMAIN, infer=_fused_infer, reference=_fused_reference, inputs=(0, None),
    outputs=lambda attrs, n: len(attrs["body"].outputs) if "body" in attrs else 1,
    attrs={"body": Attr("graph", REQUIRED), "kind": Attr("string", "elementwise")},
    traits=frozenset({Trait.PURE, Trait.FOLDABLE, Trait.SUBGRAPH}),
    doc="A fused group; the body subgraph is run by one generated kernel."))
