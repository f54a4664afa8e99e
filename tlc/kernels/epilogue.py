"""Epilogue groups: a contraction (MatMul, Gemm, Conv) followed by elementwise work on its result.

The runtime computes the contraction itself (BLAS, conv) into the output buffer and then applies the rest in
place with an elementwise kernel. ``split_epilogue`` cuts the body for it: the contraction body reads the
body's inputs (names kept) and the elementwise body takes the contraction's result as its input 0 (named
``contraction``), followed by the other body inputs it uses (names kept, original order). ``EpilogueKernel``
runs a whole epilogue group that way, with the contraction from the op registry's reference implementation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import CompileError
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from ..ops import Trait, opdef_of
from .cache import KernelCache
from .kernel import Kernel, KernelOptions
from .plan import build_plan, typed_body


def _contraction(body: Graph) -> Node:
    ops = body.ops()
    if not ops or not opdef_of(ops[0]).has(Trait.CONTRACTION):
        first = ops[0].qualified_op if ops else "nothing"
        raise CompileError(f"cannot compile epilogue group: its first op must be a contraction, got {first}")
    head = ops[0]
    for port, v in enumerate(body.inputs_of(head)):
        if v is not None and body.node(v.node).op not in ("Input", "Constant"):
            raise CompileError(
                f"cannot compile epilogue group: input {port} of the contraction is computed inside the group"
            )
    return head


def epilogue_inputs(body: Graph) -> tuple[list[int], list[int]]:
    """Positions (in ``body.inputs``) of the inputs of each part of ``split_epilogue(body)``.

    The second list is for the elementwise body's inputs 1.. (its input 0 is the contraction result).
    """
    head = _contraction(body)
    index = {n.id: i for i, n in enumerate(body.inputs)}
    used_by_head = {v.node for v in body.inputs_of(head) if v is not None}
    used_by_rest = {v.node for n in body.ops() if n.id != head.id for v in body.inputs_of(n) if v is not None}
    used_by_rest |= {v.node for v, _ in body.outputs}
    return (
        [i for nid, i in sorted(index.items(), key=lambda kv: kv[1]) if nid in used_by_head],
        [i for nid, i in sorted(index.items(), key=lambda kv: kv[1]) if nid in used_by_rest],
    )


def split_epilogue(body: Graph) -> tuple[Graph, Graph]:
    """(contraction_body, elementwise_body): ``body`` cut after its contraction (see the module docstring)."""
    head = _contraction(body)
    head_inputs, rest_inputs = epilogue_inputs(body)
    contraction = Graph("contraction")
    mapping: dict[Value, Value] = {}
    for i in head_inputs:
        _copy_input(body, body.inputs[i], contraction, mapping)
    for v in body.inputs_of(head):
        if v is not None and v not in mapping:  # a constant operand (e.g. a folded weight)
            _copy_node(body, body.node(v.node), contraction, mapping)
    result = _copy_node(body, head, contraction, mapping)
    contraction.output(result[0], "contraction")

    elementwise = Graph("epilogue")
    rest: dict[Value, Value] = {}
    rest[head.output(0)] = elementwise.input("contraction", *_type_parts(body.type_of(head.output(0))))
    for i in rest_inputs:
        _copy_input(body, body.inputs[i], elementwise, rest)
    for node in body.nodes():
        if node.id == head.id or node.op == "Input" or not _used_beyond(body, node, head):
            continue
        _copy_node(body, node, elementwise, rest)
    for value, out_name in body.outputs:
        elementwise.output(rest[value], _free_output_name(elementwise, out_name))
    return contraction, elementwise


def _used_beyond(body: Graph, node: Node, head: Node) -> bool:
    """Whether ``node`` feeds anything besides the contraction (constants used only there stay out)."""
    return any(body.is_output(v) or any(user.id != head.id for user, _ in body.users(v)) for v in node.outputs)


def _type_parts(t: TensorType | None) -> tuple[str, tuple | None]:
    if t is None:
        raise CompileError("cannot split epilogue group: the contraction result has no type")
    return t.dtype, t.shape


def _copy_input(src: Graph, node: Node, dst: Graph, mapping: dict[Value, Value]) -> None:
    name = node.name if not dst.has_value(node.name) else dst.fresh_name("input")
    mapping[node.output(0)] = dst.input(name, *_type_parts(node.output_types[0]))


def _copy_node(src: Graph, node: Node, dst: Graph, mapping: dict[Value, Value]) -> list[Value]:
    if node.op == "Constant" and node.domain == "":
        mapping[node.output(0)] = dst.constant(node.attrs["value"])
        return [mapping[node.output(0)]]
    inputs = [None if v is None else mapping[v] for v in src.inputs_of(node)]
    out = dst.add_node(node.op, inputs, domain=node.domain, num_outputs=node.num_outputs, **node.attrs)
    outs = [out] if isinstance(out, Value) else list(out)
    for port, v in enumerate(outs):
        mapping[node.output(port)] = v
    return outs


def _free_output_name(g: Graph, name: str) -> str:
    return name if not any(n == name for _, n in g.outputs) else g.fresh_name("output")


class EpilogueKernel(Kernel):
    """A whole epilogue group: the registry's contraction, then the compiled elementwise rest."""

    def __init__(
        self,
        body: Graph,
        input_types: Sequence[TensorType],
        options: KernelOptions,
        cache: KernelCache,
        target: str = "cpu",
    ):
        typed = typed_body(body, list(input_types))
        self._head = _contraction(typed)
        _, self._rest_inputs = epilogue_inputs(typed)
        position = {n.id: i for i, n in enumerate(typed.inputs)}
        # per contraction input port: a body input position, a constant array, or None (absent)
        self._head_args: list[int | np.ndarray | None] = [
            None if v is None else position.get(v.node, typed.const_value(v)) for v in typed.inputs_of(self._head)
        ]
        contraction, rest = split_epilogue(typed)
        self._opdef = opdef_of(self._head)
        rest_types = [n.output_types[0] for n in rest.inputs]
        super().__init__(build_plan(typed_body(rest, rest_types), "elementwise"), options, cache, target)
        self.kind = "epilogue"
        self.contraction_body = contraction

    def __call__(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        head_args = [inputs[a] if isinstance(a, int) else a for a in self._head_args]
        product = self._opdef.run_reference(head_args, self._head.attrs)[0]
        super().__call__([np.asarray(product)] + [inputs[i] for i in self._rest_inputs], outputs)
