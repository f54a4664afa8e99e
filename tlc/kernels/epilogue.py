"""Epilogue groups: a contraction (MatMul, Gemm, Conv) followed by elementwise work on its result.

``split_epilogue`` cuts the body in two: the contraction body reads the body's inputs (names kept) and the
elementwise body takes the contraction's result as its input 0 (named ``contraction``), followed by the other
body inputs it uses (names kept, original order). ``EpilogueKernel`` compiles the native function of a whole
group: a library routine computes the contraction in parts (``tlc.kernels.gemm``, the conv family) and the
elementwise part follows each part on the same thread, over the range that part wrote, while it is in cache.

The contraction's additive bias (Conv's B, Gemm's C) moves into the elementwise body, where it costs nothing
(the kernel passes over the result anyway) instead of a pass of its own after BLAS. A moved bias input keeps
its name; where the elementwise body declares it with more dims (Conv's [M] as [M, 1, 1]), the caller appends
trailing 1-dims to the array it passes (a view). Which input is the bias and along which output axis it runs
is the op's ``OpDef.bias``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numba
import numpy as np

from ..errors import CompileError
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from ..ops import Trait, opdef_of
from ..targets import CPU
from . import parts
from .cache import KernelCache
from .common import Contraction, Variant
from .kernel import Kernel, KernelOptions
from .plan import KernelPlan


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


def _movable_bias(body: Graph, head: Node) -> Value | None:
    """The contraction's bias when it can move into the elementwise part (used by the contraction alone)."""
    spec = opdef_of(head).bias
    inputs = body.inputs_of(head)
    if spec is None or len(inputs) <= spec[0] or inputs[spec[0]] is None:
        return None
    bias = inputs[spec[0]]
    t = body.type_of(bias)
    if t is None or t.shape is None or body.is_output(bias) or any(u.id != head.id for u, _ in body.users(bias)):
        return None
    if spec[1] is not None and len(t.shape) != 1:
        return None
    if float(head.attrs.get("beta", 1.0)) == 0.0:  # Gemm ignores C then (0 * inf would be NaN)
        return None
    return bias


def epilogue_inputs(body: Graph) -> tuple[list[int], list[int]]:
    """Positions (in ``body.inputs``) of the inputs of each part of ``split_epilogue(body)``.

    The second list is for the elementwise body's inputs 1.. (its input 0 is the contraction result).
    """
    head = _contraction(body)
    bias = _movable_bias(body, head)
    index = {n.id: i for i, n in enumerate(body.inputs)}
    used_by_head = {v.node for v in body.inputs_of(head) if v is not None and v != bias}
    used_by_rest = {v.node for n in body.ops() if n.id != head.id for v in body.inputs_of(n) if v is not None}
    used_by_rest |= {v.node for v, _ in body.outputs}
    if bias is not None:
        used_by_rest.add(bias.node)
    return (
        [i for nid, i in sorted(index.items(), key=lambda kv: kv[1]) if nid in used_by_head],
        [i for nid, i in sorted(index.items(), key=lambda kv: kv[1]) if nid in used_by_rest],
    )


def split_epilogue(body: Graph) -> tuple[Graph, Graph]:
    """(contraction_body, elementwise_body): ``body`` cut after its contraction (see the module docstring)."""
    head = _contraction(body)
    bias = _movable_bias(body, head)
    head_inputs, rest_inputs = epilogue_inputs(body)
    contraction = Graph("contraction")
    mapping: dict[Value, Value] = {}
    for i in head_inputs:
        _copy_input(body, body.inputs[i], contraction, mapping)
    head_args = body.inputs_of(head)
    if bias is not None:
        head_args = head_args[: opdef_of(head).bias[0]]
    for v in head_args:
        if v is not None and v not in mapping:  # a constant operand (e.g. a folded weight)
            _copy_node(body, body.node(v.node), contraction, mapping)
    result = _copy_node(body, head, contraction, mapping, head_args)
    contraction.output(result[0], "contraction")

    elementwise = Graph("epilogue")
    rest: dict[Value, Value] = {}
    acc = elementwise.input("contraction", *_type_parts(body.type_of(head.output(0))))
    for i in rest_inputs:
        moved = body.inputs[i].output(0) == bias
        _copy_input(body, body.inputs[i], elementwise, rest, _bias_shape(body, head) if moved else None)
    if bias is not None:
        acc = _add_bias(body, head, bias, elementwise, rest, acc)
    rest[head.output(0)] = acc
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


def _bias_shape(body: Graph, head: Node) -> tuple | None:
    """The shape the moved bias has in the elementwise body (None: its own)."""
    port, axis = opdef_of(head).bias
    out = body.type_of(head.output(0))
    bias = body.type_of(body.inputs_of(head)[port])
    if axis is None or out is None or out.shape is None:
        return None
    return tuple(bias.shape) + (1,) * (len(out.shape) - axis - 1)


def _add_bias(body: Graph, head: Node, bias: Value, dst: Graph, mapping: dict[Value, Value], acc: Value) -> Value:
    """``acc + beta * bias`` in the elementwise body (beta: Gemm's)."""
    value = body.const_value(bias)
    if value is not None:  # a constant bias: reshaped here, once
        shape = _bias_shape(body, head)
        moved = dst.constant(np.asarray(value).reshape(shape) if shape is not None else value)
    else:
        moved = mapping[bias]
    beta = float(head.attrs.get("beta", 1.0)) if head.op == "Gemm" else 1.0
    if beta != 1.0:
        moved = dst.add_node("Mul", [moved, dst.constant(np.asarray(beta, dtype=body.type_of(bias).dtype))])
    return dst.add_node("Add", [acc, moved])


def _copy_input(src: Graph, node: Node, dst: Graph, mapping: dict[Value, Value], shape: tuple | None = None) -> None:
    name = node.name if not dst.has_value(node.name) else dst.fresh_name("input")
    dtype, own = _type_parts(node.output_types[0])
    mapping[node.output(0)] = dst.input(name, dtype, own if shape is None else shape)


def _copy_node(
    src: Graph, node: Node, dst: Graph, mapping: dict[Value, Value], inputs_of: list | None = None
) -> list[Value]:
    if node.op == "Constant" and node.domain == "":
        mapping[node.output(0)] = dst.constant(node.attrs["value"])
        return [mapping[node.output(0)]]
    inputs = [None if v is None else mapping[v] for v in (src.inputs_of(node) if inputs_of is None else inputs_of)]
    out = dst.add_node(node.op, inputs, domain=node.domain, num_outputs=node.num_outputs, **node.attrs)
    outs = [out] if isinstance(out, Value) else list(out)
    for port, v in enumerate(outs):
        mapping[node.output(port)] = v
    return outs


def _free_output_name(g: Graph, name: str) -> str:
    return name if not any(n == name for _, n in g.outputs) else g.fresh_name("output")


class EpilogueKernel(Kernel):
    """An epilogue group's native function: its contraction run in parts by a library routine
    (``contraction``), each part followed on the same thread by the elementwise ``plan`` over the range it wrote.

    Built for static shapes. ``contraction_types``: Numba types of the contraction's arrays and scalars as the
    caller passes them (``c0.., acc, x0..``; see ``tlc.kernels.cpu._render_epilogue_module``): exactly those
    (the module's step reads its arguments as these types); ``parallel``: whether the parts run on Numba's pool
    or in turn on the caller's thread. ``call(args)`` gives the compiled function and its arguments for
    ``args`` = ``(dims, total, nparts, nprep, deferred, c0.., acc, x0.., in0.., out0..)``; ``function(*args)``
    runs them.
    """

    def __init__(self, plan: KernelPlan, options: KernelOptions, cache: KernelCache, contraction: Contraction,
                 contraction_types: Sequence, parallel: bool, alias: tuple[int, ...] | None = None):
        self.contraction = contraction
        self.contraction_types = tuple(contraction_types)
        self.parallel = parallel
        super().__init__(plan, options, cache, CPU, alias=alias)
        self.kind = "epilogue"
        module = next(iter(self._variants.values()))
        self._run = module.run
        self._head = (parts.driver(parallel), module.__tlc_step__.address)

    def _variant(self, alias: tuple[int, ...]) -> Variant:
        variant = Variant(self.layout, self.options.fast_math, alias, self.contraction)
        return replace(variant, arguments=parts.spec(self._arguments(variant)))

    def _arguments(self, variant: Variant) -> tuple:
        """Numba types of the step's arguments (see the class docstring)."""
        arrays = self._signature(variant)
        scalars = (numba.types.int64,) * 3 + (numba.types.boolean,)
        return arrays[:1] + scalars + self.contraction_types + arrays[1:]

    def _build(self, module, variant: Variant) -> bool:
        step = self._step(module, variant.fast_math)
        module.run.compile((numba.types.int64,) * 5 + self._arguments(variant))
        return bool(step.cache_hits)

    def call(self, args: Sequence) -> tuple:
        """``(function, arguments)`` that run the kernel on ``args`` (see the class docstring); the scalars
        ``nparts``, ``nprep`` and ``deferred`` must be plain values, the arrays may be placeholders the caller
        resolves (only their position matters here)."""
        nparts, nprep, deferred = args[2], args[3], args[4]
        return self._run, (*self._head, nprep, nparts, nparts if deferred else 0, *args)

    def function(self, *args) -> None:
        fn, full = self.call(args)
        fn(*full)
