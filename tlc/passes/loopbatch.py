"""loopbatch: a Loop body's product of the iteration's slice of an outer tensor by a constant weight becomes one
product of the whole tensor before the loop, sliced each iteration (-O2).

An RNN written as a Loop (PyTorch's scripted loops export this way) reads its input a step at a time and
projects it inside the body: ``MatMul(Gather(x, i), W)``, a product of one row block per iteration, latency-bound
(a batch-1 step multiplies one row by W). The projection does not depend on the state, so all steps can be
projected at once, as onnxruntime's and cuDNN's RNN kernels do:

    Loop(M, ...) { x_t = Gather(x, i); p = MatMul(x_t, W) ... }
      ->  XW = MatMul(x, W);  Loop(M, ..., XW) { p = Gather(XW, i) ... }

Row ``i`` of the batched product is what the body's product computed (one dot product per output element; a
product kernel may sum K in another order at another shape, an ulp at most, as ``horizontal`` notes).
tools/models.rnn_loop at batch 1, 1 thread: 1.09 -> 0.90 ms (onnxruntime 0.88).

Conditions: the trip count M is a constant equal to x's leading dimension (no row is projected that no iteration
reads: a loop that may exit early on its condition still reads row i only in iteration i), x and W are captures
of the Loop whose outer values are a graph value and a constant, the Gather takes axis 0 of x with the body's
iteration number as its index, and the MatMul reads the Gather as its first operand. The new projection becomes
one more capture of the Loop; the body's Gather and MatMul die unless something else reads them.
"""

from __future__ import annotations

from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..ops import lookup
from ..ops.control import drop_unused_captures, num_captures
from .base import Pass, PassResult, register_pass


@register_pass
class LoopBatchPass(Pass):
    name = "loopbatch"
    min_level = 2
    description = ("a Loop body's product of the iteration's slice of an outer tensor by a constant becomes one "
                   "product before the loop, sliced each iteration")

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        graph.infer_missing_types()
        for node in graph.nodes():
            if node.domain != "" or node.op != "Loop":
                continue
            self.current_node = node.name
            while True:
                found = _candidate(graph, node)
                if found is None:
                    break
                _batch(graph, node, *found)
                result.count("products_batched")
            if drop_unused_captures(graph, node):
                result.count("captures_dropped")
        self.current_node = None
        return result


def _candidate(graph: Graph, loop: Node) -> tuple[Node, Node, int, int] | None:
    """(the body's Gather, its MatMul, x's capture position, W's capture position), or None."""
    body: Graph = loop.attrs["body"]
    trip = graph.const_value(graph.input_of(loop, 0)) if loop.num_inputs else None
    if trip is None or trip.size != 1:
        return None
    k = num_captures(loop)
    first = loop.num_inputs - k                     # node port of the first capture
    body_inputs = body.inputs
    if len(body_inputs) != loop.num_inputs or not body_inputs:
        return None
    iteration = body_inputs[0].output(0)
    outer = graph.inputs_of(loop)
    for gather, port in body.users(iteration):
        if gather.domain != "" or gather.op != "Gather" or port != 1:
            continue
        if lookup("Gather").resolved_attrs(gather).get("axis", 0) != 0:
            continue
        data = body.input_of(gather, 0)
        x_pos = _capture(body, data, first)
        if x_pos is None:
            continue
        x_type = graph.type_of(outer[x_pos])
        if not isinstance(x_type, TensorType) or not x_type.is_static or not x_type.shape \
                or x_type.shape[0] != int(trip.reshape(-1)[0]):
            continue
        for matmul, mport in body.users(gather.output(0)):
            if matmul.domain != "" or matmul.op != "MatMul" or mport != 0:
                continue
            w_pos = _capture(body, body.input_of(matmul, 1), first)
            if w_pos is not None and graph.is_constant(outer[w_pos]):
                return gather, matmul, x_pos, w_pos
    return None


def _capture(body: Graph, value, first: int) -> int | None:
    """The Loop's node port of the capture behind body value ``value``, or None when it is not a capture."""
    if value is None:
        return None
    position = next((p for p, n in enumerate(body.inputs) if n.id == value.node), None)
    return position if position is not None and position >= first else None


def _batch(graph: Graph, loop: Node, gather: Node, matmul: Node, x_pos: int, w_pos: int) -> None:
    body: Graph = loop.attrs["body"]
    outer = graph.inputs_of(loop)
    projected = graph.add_node("MatMul", [outer[x_pos], outer[w_pos]])
    ptype = graph.type_of(projected)
    graph.set_inputs(loop, outer + [projected])
    loop.attrs["num_captures"] = num_captures(loop) + 1
    inside = body.input(body.fresh_name(f"{graph.value_name(projected)}_captured"), ptype.dtype, ptype.shape)
    row = body.add_node("Gather", [inside, body.input_of(gather, 1)], axis=0)
    body.replace_values([(matmul.output(0), row)], dead=[matmul], cascade=True)
