"""The op registry: one ``OpDef`` per operator, and everything else asks it.

An ``OpDef`` declares, side by side: name and domain, input/output arity, the attribute schema with defaults,
type and shape inference, the numpy reference implementation, traits, a cost hint, for elementwise ops the
scalar expression the code generator composes, for row-reducible ops their row form (``tlc.ops.rowform``), and
for contractions with an additive bias which input it is. Constant folding, CSE, fusion, the reference executor
and codegen all read the same entry.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShapeInferenceError, UnsupportedOperatorError, ValidationError
from ..ir.graph import Graph, Node, set_op_resolver
from ..ir.types import ML_DTYPES, ML_FLOAT_DTYPES, TensorType, dtype_name, np_dtype

if TYPE_CHECKING:
    from .rowform import RowForm


class Trait(enum.Enum):
    ELEMENTWISE = "elementwise"          # output[i] depends only on inputs at i (after broadcasting)
    BROADCAST = "broadcast"              # inputs broadcast numpy-style
    REDUCTION = "reduction"              # reduces over axes
    COMMUTATIVE = "commutative"          # inputs may be reordered (all of them)
    PURE = "pure"                        # deterministic, no side effects: CSE and DCE may act
    FOLDABLE = "foldable"                # constant folding may evaluate it
    LAYOUT_SENSITIVE = "layout"          # semantics depend on NCHW/NHWC axis order
    SHAPE_ONLY = "shape-only"            # output depends only on input shapes, not values (Shape, Size)
    CONTRACTION = "contraction"          # matmul-like; an elementwise epilogue may be fused after it
    SUBGRAPH = "subgraph"                # has graph-valued attributes (tlc.Fused)
    ROW_REDUCIBLE = "row-reducible"      # over the last axis, computable per row from sum/max/min
    #                                      accumulations and elementwise steps (row kernels; needs REDUCTION)


REQUIRED = object()

ATTR_KINDS = ("int", "float", "string", "ints", "floats", "strings", "tensor", "graph")


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its kind and default (``REQUIRED`` when it must be given; None = absent)."""

    kind: str
    default: Any = None

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"attribute kind {self.kind!r} not in {ATTR_KINDS}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


class InferContext:
    """What an inference function sees: the node, its resolved attributes, input types and constants."""

    def __init__(self, graph: Graph, node: Node, opdef: OpDef):
        self.graph = graph
        self.node = node
        self.opdef = opdef
        self.attrs = opdef.resolved_attrs(node)
        self.inputs = graph.inputs_of(node)
        self.input_types: list[TensorType | None] = [
            None if v is None else graph.type_of(v) for v in self.inputs]

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def type(self, i: int) -> TensorType:
        """The type of input ``i``; fails inference when it is missing or untyped."""
        t = self.input_types[i] if i < len(self.input_types) else None
        if t is None:
            self.fail(f"input {i} is missing or has no type")
        return t

    def shape(self, i: int):
        return self.type(i).shape

    def const(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` when it is a constant (for data-dependent shapes), else None."""
        return self.graph.const_value(self.inputs[i]) if self.has_input(i) else None

    def fail(self, message: str) -> None:
        raise ShapeInferenceError(f"node {self.node.name!r} ({self.node.qualified_op}): {message}")


InferFn = Callable[[InferContext], Sequence[TensorType]]


@dataclass
class OpDef:
    """Everything tlc knows of one operator."""

    name: str
    infer: InferFn
    reference: Callable[..., Any]
    domain: str = ""
    inputs: tuple[int, int | None] = (1, 1)
    outputs: int | Callable[[dict[str, Any], int], int] = 1
    attrs: dict[str, Attr] = field(default_factory=dict)
    traits: frozenset[Trait] = frozenset({Trait.PURE, Trait.FOLDABLE})
    expr: Callable[..., Any] | None = None
    cost: float = 1.0
    doc: str = ""
    #: tlc-domain ops only: ``(graph, node) -> Graph``, the node as a body of default-domain ops (inputs and
    #: outputs in the node's order), so the ONNX exporter can write the op as a model-local function.
    decompose: Callable[[Graph, Node], Graph] | None = None
    #: ``Trait.ROW_REDUCIBLE`` ops only: the op as per-row accumulations and elementwise steps, written through the
    #: kernel builder it is handed (``tlc.ops.rowform``).
    row_form: RowForm | None = None
    #: contractions with an additive bias: ``(input port of the bias, output axis it runs along)``; the axis is None
    #: when the bias broadcasts against the output as it is (numpy-style). The code generator may move the bias
    #: into the elementwise epilogue (``tlc.kernels.epilogue``).
    bias: tuple[int, int | None] | None = None
    #: the reference takes the ml_dtypes element types (bfloat16, float8, int4, ...) as they are; otherwise
    #: ``run_reference`` widens them (``widened``) and rounds the outputs to their types once
    ml_dtypes: bool = False
    #: ops pure in general but random at some nodes: ``(graph, node) -> True`` where this node draws random numbers
    #: (Dropout in training mode without a seed); passes ask ``pure_at``, not the trait
    impure_at: Callable[[Graph, Node], bool] | None = None
    #: input values on which ONNX leaves the outputs undefined: ``(inputs, attrs) -> why`` or None (Cast of NaN
    #: or an out-of-range float to an integer, QuantizeLinear of a NaN quotient, BitCast of a NaN's payload,
    #: DynamicQuantizeLinear of a zero range, the order of an unsorted TopK, NaN in a MaxPool window); no oracle
    #: can judge such a run, so the fuzzer's generator refuses it
    #: (``tlc.testing.generate``)
    undefined_at: Callable[[Sequence[np.ndarray | None], dict[str, Any]], str | None] | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.domain}.{self.name}" if self.domain else self.name

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    @property
    def is_pure(self) -> bool:
        return Trait.PURE in self.traits

    def pure_at(self, graph: Graph, node: Node) -> bool:
        """Whether this node computes the same outputs from the same inputs (CSE may merge it, fold run it)."""
        return self.is_pure and not (self.impure_at is not None and self.impure_at(graph, node))

    @property
    def is_elementwise(self) -> bool:
        return Trait.ELEMENTWISE in self.traits

    @property
    def is_commutative(self) -> bool:
        return Trait.COMMUTATIVE in self.traits

    @property
    def is_foldable(self) -> bool:
        return Trait.FOLDABLE in self.traits

    def num_outputs(self, attrs: dict[str, Any], num_inputs: int) -> int:
        return self.outputs(attrs, num_inputs) if callable(self.outputs) else self.outputs

    def resolved_attrs(self, node: Node) -> dict[str, Any]:
        """The node's attributes with schema defaults filled in (absent optional ones are None)."""
        out = {k: (None if a.required else a.default) for k, a in self.attrs.items()}
        out.update(node.attrs)
        return out

    def run_reference(self, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any],
                      out_dtypes: Sequence[str | None] | None = None, **context: Any) -> list[np.ndarray]:
        """Run the numpy reference implementation; always returns a list of arrays. Inputs of an ml_dtypes
        element type are widened for a reference that does not take them (``ml_dtypes``); its outputs are then
        rounded to ``out_dtypes`` (their inferred types) where those are ml_dtypes types, else to the widest
        input's type."""
        full = {k: (None if a.required else a.default) for k, a in self.attrs.items()}
        full.update(attrs)
        narrow = None
        if not self.ml_dtypes:
            narrow = next((x.dtype for x in inputs if x is not None and dtype_name(x.dtype) in ML_DTYPES), None)
            if narrow is not None:
                inputs = [widened(x) for x in inputs]
        result = self.reference(*inputs, **full, **context)
        arrays = [np.asarray(r) for r in result] if isinstance(result, (list, tuple)) else [np.asarray(result)]
        if narrow is not None:
            arrays = [_narrowed(a, narrow, out_dtypes[i] if out_dtypes and i < len(out_dtypes) else None)
                      for i, a in enumerate(arrays)]
        return arrays


def widened(x: np.ndarray | None) -> np.ndarray | None:
    """``x`` in a numpy type that holds its values exactly: ml_dtypes floats as float32, 4- and 2-bit ints as
    int8 / uint8 (other arrays as they are)."""
    if x is None:
        return None
    name = dtype_name(x.dtype)
    if name not in ML_DTYPES:
        return x
    if name in ML_FLOAT_DTYPES:
        return x.astype(np.float32)
    return x.astype(np.uint8 if name.startswith("u") else np.int8)


def _narrowed(a: np.ndarray, narrow: np.dtype, want: str | None) -> np.ndarray:
    """An output of a widened run in its own type: ``want`` when that is an ml_dtypes type (also when it is not
    known: then the narrow input's type, where the output came out in that input's widened type)."""
    if want is not None:
        return a.astype(np_dtype(want)) if want in ML_DTYPES else a
    return a.astype(narrow) if a.dtype == widened(np.zeros(0, narrow)).dtype else a


_REGISTRY: dict[tuple[str, str], OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    key = (opdef.domain, opdef.name)
    if key in _REGISTRY:
        raise ValueError(f"op {opdef.qualified_name} registered twice")
    if Trait.ELEMENTWISE in opdef.traits and opdef.expr is None:
        raise ValueError(f"elementwise op {opdef.qualified_name} declares no scalar expression")
    if (Trait.ROW_REDUCIBLE in opdef.traits) != (opdef.row_form is not None):
        raise ValueError(f"op {opdef.qualified_name}: Trait.ROW_REDUCIBLE and a row_form go together")
    if Trait.ROW_REDUCIBLE in opdef.traits and Trait.REDUCTION not in opdef.traits:
        raise ValueError(f"row-reducible op {opdef.qualified_name} is not a reduction")
    if opdef.bias is not None and (Trait.CONTRACTION not in opdef.traits or opdef.inputs[1] is None
                                   or not opdef.inputs[0] <= opdef.bias[0] < opdef.inputs[1]):
        raise ValueError(f"op {opdef.qualified_name}: a bias needs a contraction with an optional input there")
    _REGISTRY[key] = opdef
    return opdef


def get(op: str, domain: str = "") -> OpDef:
    """The OpDef for ``op``; raises ``UnsupportedOperatorError`` when there is none."""
    try:
        return _REGISTRY[(domain, op)]
    except KeyError:
        qualified = f"{domain}.{op}" if domain else op
        raise UnsupportedOperatorError(f"operator {qualified} is not supported by tlc",
                                       {(domain, op): 1}) from None


def lookup(op: str, domain: str = "") -> OpDef | None:
    return _REGISTRY.get((domain, op))


def is_registered(op: str, domain: str = "") -> bool:
    return (domain, op) in _REGISTRY


def all_ops() -> list[OpDef]:
    """Every registered op, sorted by domain then name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def opdef_of(node: Node) -> OpDef:
    return get(node.op, node.domain)


_PY_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int, np.integer),
    "float": (float, int, np.floating, np.integer),
    "string": (str,),
    "tensor": (np.ndarray,),
    "graph": (Graph,),
}


def check_attr(node: Node, key: str, spec: Attr, value: Any) -> None:
    where = f"node {node.name!r} ({node.qualified_op})"
    if spec.kind in _PY_KINDS:
        ok = isinstance(value, _PY_KINDS[spec.kind]) and not isinstance(value, bool)
    else:
        scalar = _PY_KINDS[spec.kind[:-1]]
        ok = isinstance(value, (list, tuple)) and all(
            isinstance(v, scalar) and not isinstance(v, bool) for v in value)
    if not ok:
        raise ValidationError(f"{where}: attribute {key!r} should be {spec.kind}, got {type(value).__name__} "
                              f"{_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _RegistryResolver:
    """The registry's answers to the IR (installed with ``set_op_resolver``)."""

    def num_outputs(self, op: str, domain: str, attrs: dict[str, Any], num_inputs: int) -> int:
        return get(op, domain).num_outputs(attrs, num_inputs)

    def infer(self, graph: Graph, node: Node) -> list[TensorType]:
        opdef = opdef_of(node)
        ctx = InferContext(graph, node, opdef)
        try:
            return list(opdef.infer(ctx))
        except ShapeInferenceError:
            raise
        except (ValueError, IndexError, TypeError, KeyError) as exc:
            raise ShapeInferenceError(f"node {node.name!r} ({node.qualified_op}): inference failed: {exc}") from exc

    def check(self, graph: Graph, node: Node) -> None:
        opdef = opdef_of(node)
        where = f"node {node.name!r} ({node.qualified_op})"
        lo, hi = opdef.inputs
        ins = graph.inputs_of(node)
        if node.num_inputs < lo or (hi is not None and node.num_inputs > hi):
            want = f"{lo}" if lo == hi else f"{lo} to {'any number' if hi is None else hi}"
            raise ValidationError(f"{where}: expected {want} inputs, got {node.num_inputs}")
        for port in range(lo):
            if ins[port] is None:
                raise ValidationError(f"{where}: required input {port} is not connected")
        for key, value in node.attrs.items():
            spec = opdef.attrs.get(key)
            if spec is None:
                known = ", ".join(sorted(opdef.attrs)) or "none"
                raise ValidationError(f"{where}: unknown attribute {key!r} (known: {known})")
            check_attr(node, key, spec, value)
        for key, spec in opdef.attrs.items():
            if spec.required and key not in node.attrs:
                raise ValidationError(f"{where}: required attribute {key!r} is missing")


set_op_resolver(_RegistryResolver())
