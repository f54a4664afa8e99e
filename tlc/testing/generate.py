"""Random graphs over the whole op registry, for differential fuzzing.

Nothing here lists ops. ``fuzzable_ops`` reads the registry (skipping random, control-flow and sequence ops)
and, for input names and allowed element types, ONNX's own schema of each op. A graph grows node by node: an op
is drawn, its inputs are proposed from the values built so far (or new constants) in element types its schema
allows and in shapes derived from its first input, its attributes are drawn from its attribute schema, and then
the op's own shape inference and a reference run on the concrete values accept or refuse the candidate. A refused
candidate is taken out again and another is drawn. So a newly registered op is fuzzed without new code.

Random choice almost never finds a valid Reshape target or in-range Gather indices, so int64 inputs get values
derived from the first input's shape, by the input's name, and a few attribute names get values of the right
kind (``tlc.testing.hints``): data hints, not per-op rules.

Every choice goes through a ``Chooser``: a seeded numpy generator for campaigns (``RngChooser``), or
hypothesis's ``draw`` (``tlc.testing.strategies``), which then shrinks a failing graph by shrinking its choices.
Array contents come from a numpy generator seeded by one choice, so shrinking does not draw them one by one.

Inference and the reference disagreeing on a candidate (an output of another shape or dtype than inferred) is a
bug in the op itself: it is kept in ``Case.findings`` (and the candidate refused).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import TlcError
from ..ir.graph import DEFAULT_OPSET, Graph, Node, Value, op_resolver
from ..ir.types import ONNX_TYPE_CODES, TensorType, np_dtype
from ..ops.registry import OpDef, Trait, all_ops, lookup
from ..reference import Interpreter
from .hints import draw_attr, int_hint

#: how often each is drawn for a graph input (float32 mostly)
INPUT_DTYPE_WEIGHTS = {"float32": 0.7, "int64": 0.08, "int32": 0.06, "bool": 0.06, "float16": 0.05,
                       "float64": 0.05}
SYMBOL = "N"
MAX_ELEMENTS = 2048      # a candidate making a bigger output is refused: graphs stay small and fast
MAX_RANK = 5
#: the ONNX type string of each generated dtype
_ONNX_TYPE = {"float32": "tensor(float)", "float16": "tensor(float16)", "float64": "tensor(double)",
              "int64": "tensor(int64)", "int32": "tensor(int32)", "int8": "tensor(int8)",
              "uint8": "tensor(uint8)", "bool": "tensor(bool)"}
_DTYPE_OF_ONNX = {v: k for k, v in _ONNX_TYPE.items()}
#: domains whose ops are training-only
SKIP_DOMAINS = frozenset({"ai.onnx.preview.training"})
# ---------------------------------------------------------------------------- choices
class Chooser(Protocol):
    """Where every random decision of the generator comes from."""

    def integer(self, lo: int, hi: int) -> int:
        """An int in [lo, hi] (both included)."""

    def choice(self, items: Sequence[Any]) -> Any:
        """One of ``items`` (not empty)."""

    def coin(self, p: float) -> bool:
        """True with probability ``p``."""


class RngChooser:
    """Choices from a numpy generator (campaigns: a seed replays a graph)."""

    def __init__(self, seed: int | np.random.Generator):
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, items: Sequence[Any]) -> Any:
        return items[int(self.rng.integers(len(items)))]

    def coin(self, p: float) -> bool:
        return bool(self.rng.random() < p)


# ---------------------------------------------------------------------------- op specs
@dataclass(frozen=True)
class Port:
    """One input of an op: its name, the element types it takes (of ``DTYPES``), its type parameter."""

    name: str
    dtypes: tuple[str, ...]
    type_param: str
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class OpSpec:
    opdef: OpDef
    ports: tuple[Port, ...]

    @property
    def name(self) -> str:
        return self.opdef.qualified_name


def _onnx_schema(opdef: OpDef):
    import onnx.defs

    # NOTE: the schema at tlc's opset where the op exists there (type lists grow: BitShift takes signed ints
    # only after opset 21), else its first version (ops defined later)
    for version in ((DEFAULT_OPSET,) if opdef.domain == "" else ()) + (None,):
        try:
            if version is None:
                return onnx.defs.get_schema(opdef.name, domain=opdef.domain)
            return onnx.defs.get_schema(opdef.name, version, opdef.domain)
        except onnx.defs.SchemaError:
            continue
    return None


def _ports(opdef: OpDef) -> tuple[Port, ...] | None:
    """The op's inputs from ONNX's schema (None: the op takes no tensor of ``DTYPES`` where it must). An op ONNX
    does not know (tlc's own) gets float inputs as many as it needs."""
    lo, hi = opdef.inputs
    schema = _onnx_schema(opdef)
    if schema is None:
        return tuple(Port(f"input{i}", ("float32",), "T") for i in range(lo))
    Option = type(schema).FormalParameterOption
    allowed = {tc.type_param_str: tc.allowed_type_strs for tc in schema.type_constraints}
    if any(not s.startswith("tensor(") for o in schema.outputs for s in allowed.get(o.type_str, [o.type_str])):
        return None  # makes sequences, optionals or maps
    ports = []
    for i, formal in enumerate(schema.inputs):
        strs = allowed.get(formal.type_str, [formal.type_str])
        dtypes = tuple(_DTYPE_OF_ONNX[s] for s in strs if s in _DTYPE_OF_ONNX)
        optional = formal.option == Option.Optional
        variadic = formal.option == Option.Variadic
        if not dtypes:
            if optional or variadic or i >= lo:
                break
            return None
        ports.append(Port(formal.name, dtypes, formal.type_str, optional or i >= lo, variadic))
    return tuple(ports)


@functools.cache
def fuzzable_ops() -> tuple[OpSpec, ...]:
    """Every registered op the generator builds (``collect_ops`` of the registry when first asked)."""
    return collect_ops()


def collect_ops() -> tuple[OpSpec, ...]:
    """Every registered op the generator can build: pure, no subgraphs, not training-only, inputs and outputs of
    tensors (of ``DTYPES`` where ONNX's schema names types)."""
    specs = []
    for opdef in all_ops():
        if (not opdef.is_pure or opdef.has(Trait.SUBGRAPH) or opdef.domain in SKIP_DOMAINS
                or opdef.inputs[0] == 0):
            continue
        ports = _ports(opdef)
        if ports and not any(p.optional for p in ports[: opdef.inputs[0]]):
            specs.append(OpSpec(opdef, ports))
    return tuple(specs)


# ---------------------------------------------------------------------------- the graph under construction
@dataclass
class Case:
    """A generated graph with its feeds (and what the generator learnt on the way)."""

    graph: Graph
    feeds: dict[str, np.ndarray]
    seed: int | None = None
    ops: list[str] = field(default_factory=list)                 # qualified op of each generated node, in order
    findings: list[str] = field(default_factory=list)           # inference/reference disagreements seen
    refused: int = 0                                             # candidates refused on the way
    #: pure ops whose reference gave two results on one input (refused: no oracle can check them)
    nondeterministic: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Case(seed={self.seed}, ops={self.ops})\n{self.graph}"


class _Refused(Exception):
    """A candidate node that inference or the reference did not accept."""


class GraphBuilder:
    """One graph being grown: its values with their concrete arrays, and the choices that decide what comes."""

    def __init__(self, choose: Chooser, ops: Sequence[OpSpec], weights: Sequence[float] | None = None):
        self.choose = choose
        self.last_shape: tuple[int, ...] | None = None
        self.ops = list(ops)
        self.weights = None if weights is None else np.cumsum(weights) / np.sum(weights)
        self.data = np.random.default_rng(choose.integer(0, 2**32 - 1))
        self.g = Graph("fuzz")
        self.env: dict[Value, np.ndarray] = {}
        self.batch = choose.choice([1, 2, 3])
        self.case = Case(self.g, {})

    # ------------------------------------------------------------------ inputs and constants
    def add_input(self, symbolic: bool) -> None:
        dtypes = list(INPUT_DTYPE_WEIGHTS)
        cut = self.choose.integer(0, 99) / 100
        acc = np.cumsum(list(INPUT_DTYPE_WEIGHTS.values()))
        dtype = dtypes[min(int(np.searchsorted(acc, cut, side="right")), len(dtypes) - 1)]
        rank = self.choose.choice([1, 2, 2, 3, 3, 4, 0])
        shape: list[int | str] = [self.choose.integer(1, 6) for _ in range(rank)]
        if symbolic and rank:
            shape[0] = SYMBOL
        concrete = tuple(self.batch if d == SYMBOL else d for d in shape)
        array = self.random_array(dtype, concrete, positive=self.choose.coin(0.2))
        name = f"x{len(self.case.feeds)}"
        v = self.g.input(name, dtype, tuple(shape))
        self.env[v] = array
        self.case.feeds[name] = array

    def random_array(self, dtype: str, shape: tuple[int, ...], positive: bool = False) -> np.ndarray:
        rng = self.data
        if dtype == "bool":
            return np.asarray(rng.random(shape) < 0.5)
        if np.issubdtype(np_dtype(dtype), np.integer):
            lo = 0 if positive or dtype.startswith("u") else -4
            return np.asarray(rng.integers(lo, 5, shape), dtype)
        values = rng.uniform(0.25, 2.0, shape) if positive else rng.standard_normal(shape)
        return np.asarray(values, dtype)

    def constant(self, array: np.ndarray) -> Value:
        v = self.g.constant(np.ascontiguousarray(array))
        self.env[v] = self.g.const_value(v)
        return v

    # ------------------------------------------------------------------ helpers
    def shape(self, v: Value) -> tuple[int, ...]:
        """The concrete shape of ``v`` (symbols bound)."""
        return self.env[v].shape

    def values(self, dtype: str | None = None) -> list[Value]:
        return [v for v in self.env if dtype is None or self.env[v].dtype == np_dtype(dtype)]

    def pick_value(self, dtype: str) -> Value | None:
        """An existing value of ``dtype``, recent ones more often (chains), older ones too (branches)."""
        fits = self.values(dtype)
        if not fits:
            return None
        if self.choose.coin(0.5):
            return fits[-1 - self.choose.integer(0, min(2, len(fits) - 1))]
        return self.choose.choice(fits)

    # ------------------------------------------------------------------ one node
    def grow(self) -> bool:
        """Add one node (after up to a few refused candidates); False when every try was refused."""
        for _ in range(24):
            spec = self.pick_op()
            mark = max(self.g.nx.nodes, default=-1)
            try:
                self.try_op(spec)
                self.case.ops.append(spec.name)
                return True
            except (_Refused, TlcError):
                self.case.refused += 1
                self.rollback(mark)
        return False

    def pick_op(self) -> OpSpec:
        if self.weights is None:
            return self.choose.choice(self.ops)
        cut = self.choose.integer(0, 10**6 - 1) / 10**6
        return self.ops[min(int(np.searchsorted(self.weights, cut, side="right")), len(self.ops) - 1)]

    def rollback(self, mark: int) -> None:
        """Take out every node added after id ``mark`` (the refused candidate and its new constants)."""
        for nid in sorted((n for n in self.g.nx.nodes if n > mark), reverse=True):
            node = self.g.node(nid)
            for v in node.outputs:
                self.env.pop(v, None)
            self.g.erase(node)

    def try_op(self, spec: OpSpec) -> None:
        opdef = spec.opdef
        dtypes = self.bind_types(spec)
        first = self.first_input(spec.ports[0], dtypes)
        inputs = [first]
        lo, hi = opdef.inputs
        count = self.input_count(spec, lo, hi)
        self.last_shape = None
        for i in range(1, count):
            port = spec.ports[min(i, len(spec.ports) - 1)]
            if port.optional and i >= lo and self.choose.coin(0.25) and i < count - 1:
                inputs.append(None)
                continue
            inputs.append(self.operand(port, dtypes[port.type_param], first, opdef))
        rank = len(self.shape(first))
        attrs = self.draw_attrs(opdef, rank)
        try:
            outs = self.g.add_node(opdef.name, inputs, domain=opdef.domain, attrs=attrs)
            node = self.g.producer(outs if isinstance(outs, Value) else outs[0])
            op_resolver().check(self.g, node)  # attribute kinds and required inputs, as the verifier asks
        except TlcError as exc:
            raise _Refused(str(exc)) from None
        except Exception as exc:  # inference must refuse with a named error, never crash
            self.case.findings.append(f"{spec.name} inference raised {type(exc).__name__}: {exc} "
                                      f"(attributes {attrs})")
            raise _Refused(str(exc)) from None
        self.run_candidate(node, inputs)

    def bind_types(self, spec: OpSpec) -> dict[str, str]:
        """An element type for each type parameter of the op (float32 where it may)."""
        chosen: dict[str, str] = {}
        for port in spec.ports:
            if port.type_param in chosen:
                continue
            options = port.dtypes
            if "float32" in options and self.choose.coin(0.7):
                chosen[port.type_param] = "float32"
            elif options == ("bool",) or not self.values() or self.choose.coin(0.5):
                chosen[port.type_param] = self.choose.choice(options)
            else:  # a type some value already has, when the op takes it
                have = [d for d in options if self.values(d)]
                chosen[port.type_param] = self.choose.choice(have or list(options))
        return chosen

    def input_count(self, spec: OpSpec, lo: int, hi: int | None) -> int:
        most = len(spec.ports) if hi is None or not spec.ports[-1].variadic else lo + 2
        if hi is not None:
            most = min(most if spec.ports and not spec.ports[-1].variadic else hi, hi)
        most = max(lo, most)
        return self.choose.integer(lo, most) if self.choose.coin(0.6) else lo

    def first_input(self, port: Port, dtype_of: dict[str, str]) -> Value:
        dtype = dtype_of[port.type_param]
        v = self.pick_value(dtype)
        if v is None or self.choose.coin(0.05):
            source = self.pick_value("float32") or self.choose.choice(self.values())
            if self.env[source].dtype.kind in "biu" or dtype in ("float16", "float64") or self.choose.coin(0.5):
                return self.cast(source, dtype)
            return self.constant(self.random_array(dtype, self.shape(source)))
        return v

    def cast(self, source: Value, dtype: str) -> Value:
        """A Cast node from ``source`` (a generated node like any other)."""
        v = self.g.add_node("Cast", [source], to=ONNX_TYPE_CODES[dtype])
        self.run_candidate(self.g.producer(v), [source])
        return v

    def operand(self, port: Port, dtype: str, first: Value, opdef: OpDef) -> Value:
        """Input ``port`` for an op whose first input is ``first``: hinted values for integer index-like inputs,
        else a value or constant in a shape derived from ``first``'s."""
        base = self.shape(first)
        if dtype in ("int64", "int32") and self.choose.coin(0.85):
            return self.constant(int_hint(port.name, base, self.choose).astype(dtype))
        # parameters often come in equal shapes (BatchNormalization's scale, bias, mean, var): reuse the last one
        sticky = self.last_shape is not None and self.choose.coin(0.6)
        shape = self.last_shape if sticky else self.operand_shape(port.name, base)
        self.last_shape = shape
        same = [v for v in self.values(dtype) if self.shape(v) == shape and v != first]
        if same and self.choose.coin(0.6):
            return self.choose.choice(same)
        return self.constant(self.random_array(dtype, shape, positive=self.choose.coin(0.3)))

    def operand_shape(self, name: str, base: tuple[int, ...]) -> tuple[int, ...]:
        """A shape for a second input: the first's, a broadcasting one, one dim of it, a matrix product's or a
        convolution weight's."""
        rank = len(base)
        m = self.choose.integer(1, 4)
        options: list[tuple[int, ...]] = [base, base, (), base[1:], base[-1:], (m,)]
        if rank >= 1:
            options += [(base[-1], m), base[:-2] + (base[-1], m), (self.choose.choice(base),)]
        if rank >= 2:
            options += [(base[1],), base[:-2] + (base[-1], base[-2])]
        if rank >= 3:  # a convolution weight (M, C, k...) or (M, C/2, k...)
            kernel = tuple(self.choose.integer(1, max(1, min(3, d))) for d in base[2:])
            options += [(m, base[1]) + kernel, (m * 2, max(base[1] // 2, 1)) + kernel, (base[1],) * 1]
        if name in ("W", "R") and rank >= 3:
            return options[-2] if self.choose.coin(0.3) else options[-3]
        return self.choose.choice(options)

    def draw_attrs(self, opdef: OpDef, rank: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        for key, spec in opdef.attrs.items():
            if spec.kind in ("graph", "tensor", "strings") and not spec.required:
                continue
            if not spec.required and self.choose.coin(0.5):
                continue
            value = draw_attr(key, spec.kind, rank, self.choose, spec.default)
            if value is not None:
                attrs[key] = value
        return attrs

    def run_candidate(self, node: Node, inputs: Sequence[Value | None]) -> None:
        """The reference on the candidate's concrete inputs: refuse it when the reference fails, when an output
        is too big, or (sometimes) not finite; record a finding when the reference disagrees with inference."""
        opdef = lookup(node.op, node.domain)
        if opdef is not None and opdef.is_pure and not opdef.pure_at(self.g, node):
            # random at this node (Dropout training without a seed): two runs may still agree by chance (a scalar
            # kept twice; fuzz seed 806841), so ask the op, not only the double run below
            self.case.nondeterministic.append(f"{node.qualified_op} ({self.describe(node)})")
            raise _Refused("nondeterministic")
        arrays = [None if v is None else self.env[v] for v in inputs]
        try:
            with np.errstate(all="ignore"):
                outs = Interpreter(self.g).run_node(node, arrays)
        except (TlcError, RecursionError, MemoryError) as exc:
            raise _Refused(str(exc)) from None
        why = opdef.undefined_at(arrays, opdef.resolved_attrs(node)) if opdef and opdef.undefined_at else None
        if why:   # ONNX leaves the outputs undefined here: no oracle can judge them
            raise _Refused(f"undefined: {why}")
        with np.errstate(all="ignore"):
            again = Interpreter(self.g).run_node(node, arrays)
        if any(not _same(a, b) for a, b in zip(outs, again)):  # random (Dropout in training mode): no oracle
            self.case.nondeterministic.append(f"{node.qualified_op} ({self.describe(node)})")
            raise _Refused("nondeterministic")
        for port, (array, ttype) in enumerate(zip(outs, node.output_types)):
            if not isinstance(array, np.ndarray) or not isinstance(ttype, TensorType):
                raise _Refused("not a tensor")
            if array.size > MAX_ELEMENTS or array.ndim > MAX_RANK:
                raise _Refused("too big")
            mismatch = self.type_mismatch(array, ttype)
            if mismatch:
                self.case.findings.append(f"{node.qualified_op} output {port}: {mismatch} ({self.describe(node)})")
                raise _Refused(mismatch)
            if array.dtype.kind in "fc" and not np.isfinite(array).all() and not self.choose.coin(0.15):
                raise _Refused("not finite")
            if array.size == 0 and not self.choose.coin(0.1):
                raise _Refused("empty")
        self.check_concrete(node, inputs, outs)
        for v, array in zip(node.outputs, outs):
            self.env[v] = array

    def check_concrete(self, node: Node, inputs: Sequence[Value | None], outs: Sequence[np.ndarray]) -> None:
        """With a symbolic batch, inference saw ``N``; a compiled plan infers again at the fed shapes. Both must
        accept what the reference ran, and agree with it: a node alone, on inputs of the concrete shapes."""
        types = [None if v is None else self.g.type_of(v) for v in inputs]
        if all(t is None or t.is_static for t in types):
            return
        g = Graph("concrete")
        ins = []
        for v in inputs:
            if v is None or self.g.is_constant(v):
                ins.append(None if v is None else g.constant(self.env[v]))
            else:
                ins.append(g.input(f"in{len(ins)}", self.g.type_of(v).dtype, self.env[v].shape))
        try:
            outputs = g.add_node(node.op, ins, domain=node.domain, attrs=dict(node.attrs))
        except TlcError as exc:
            self.case.findings.append(f"{node.qualified_op}: inference refuses the concrete shapes the reference "
                                      f"ran ({self.describe(node)}, N = {self.batch}): {exc}")
            raise _Refused(str(exc)) from None
        outputs = [outputs] if isinstance(outputs, Value) else list(outputs)
        for port, (v, array) in enumerate(zip(outputs, outs)):
            mismatch = self.type_mismatch(array, g.type_of(v))
            if mismatch:
                self.case.findings.append(f"{node.qualified_op} output {port} at concrete shapes: {mismatch} "
                                          f"({self.describe(node)}, N = {self.batch})")
                raise _Refused(mismatch)

    def type_mismatch(self, array: np.ndarray, ttype: TensorType) -> str | None:
        if np.dtype(array.dtype) != np_dtype(ttype.dtype):
            return f"inferred {ttype.dtype}, the reference gave {array.dtype}"
        if ttype.shape is None:
            return None
        want = tuple(self.batch if d == SYMBOL else d for d in ttype.shape)
        if len(want) != array.ndim or any(isinstance(d, int) and d != n for d, n in zip(want, array.shape)):
            return f"inferred shape {list(ttype.shape)}, the reference gave {list(array.shape)}"
        return None

    def describe(self, node: Node) -> str:
        ins = ", ".join("-" if v is None else str(self.g.type_of(v)) for v in self.g.inputs_of(node))
        return f"inputs ({ins}), attributes {node.attrs}"

    # ------------------------------------------------------------------ the whole graph
    def build(self, min_nodes: int = 3, max_nodes: int = 12) -> Case:
        symbolic = self.choose.coin(0.25)
        for _ in range(self.choose.integer(1, 3)):
            self.add_input(symbolic)
        for _ in range(self.choose.integer(min_nodes, max_nodes)):
            self.grow()
        self.choose_outputs()
        used = {n.name for n in self.g.inputs}
        self.case.feeds = {k: a for k, a in self.case.feeds.items() if k in used}
        return self.case

    def choose_outputs(self) -> None:
        computed = [v for v in self.env if self.g.producer(v).op not in ("Input", "Constant")]
        if not computed:  # every candidate refused: one Identity keeps the graph valid
            source = next(iter(self.env))
            v = self.g.add_node("Identity", [source])
            self.env[v] = self.env[source]
            computed = [v]
        # the last value, the values nothing reads (most of them: else their nodes are dead code, which some
        # graphs keep for DCE), and sometimes an intermediate value
        leaves = [v for v in computed if not self.g.num_uses(v) and self.choose.coin(0.8)]
        picks = [computed[-1]] + leaves[-3:] + [self.choose.choice(computed) for _ in range(self.choose.integer(0, 1))]
        for i, v in enumerate(dict.fromkeys(picks)):
            self.g.output(v, f"out{i}")


def _same(a, b) -> bool:
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return a is b or a == b
    return a.shape == b.shape and a.dtype == b.dtype and (a.tobytes() == b.tobytes() or np.array_equal(
        a, b, equal_nan=a.dtype.kind in "fc"))


def generate(seed: int | None = None, *, choose: Chooser | None = None, ops: Sequence[OpSpec] | None = None,
             weights: Sequence[float] | None = None, min_nodes: int = 3, max_nodes: int = 12) -> Case:
    """A random graph of ``min_nodes`` to ``max_nodes`` generated nodes over ``ops`` (default: every fuzzable
    op, drawn with ``weights`` when given), with feeds; the same ``seed`` gives the same case."""
    choose = choose if choose is not None else RngChooser(seed if seed is not None else 0)
    builder = GraphBuilder(choose, ops if ops is not None else fuzzable_ops(), weights)
    case = builder.build(min_nodes, max_nodes)
    case.seed = seed
    return case
