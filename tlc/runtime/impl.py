"""How one step computes: the ``Impl`` interface and the generic implementations (reference, view, ufunc).

An ``Impl`` is chosen per node when a graph is lowered (shape-independent); ``bind`` specialises it to the
concrete types of one input-shape signature and returns a ``Bound``: the function the executor calls and the
scratch arrays it needs. The function has one signature for every kind of step::

    fn(inputs: list[ndarray | None], outputs: list[ndarray | None], work: list[ndarray]) -> list[ndarray]

Library and native kernels write into ``outputs`` (preallocated, C-contiguous) and return them; reference and
view steps ignore ``outputs`` and return arrays of their own (``writes_outputs`` is False), which the memory
planner treats as possibly aliasing their inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..ir.graph import Node
from ..ir.types import TensorType, np_dtype
from ..ops import Trait, expr, opdef_of
from ..ops.window import Window, make_window

StepFn = Callable[[list, list, list], list]


class Bound(NamedTuple):
    """A step specialised to concrete shapes: its function, its scratch arrays, what it chose (for stats)."""

    fn: StepFn
    workspace: list[tuple[tuple[int, ...], np.dtype]] = []
    note: str = ""
    alias: tuple[int, ...] | None = None   # a kernel's outputs written into its inputs, where the step decides


class NotNative(Exception):
    """Raised by a library impl that cannot take this node or these shapes; the reason goes to ``stats()``."""


def static_shapes(types: list[TensorType | None], what: str) -> list[tuple[int, ...] | None]:
    """The concrete shapes of ``types`` (None for a missing optional value); NotNative when one is not known."""
    shapes: list[tuple[int, ...] | None] = []
    for i, t in enumerate(types):
        if t is None:
            shapes.append(None)
        elif not t.is_static:
            raise NotNative(f"{what} {i} has no static shape ({t})")
        else:
            shapes.append(tuple(t.shape))
    return shapes


def spatial_window(attrs: dict[str, Any], kernel: tuple[int, ...],
                   in_spatial: tuple[int, ...]) -> tuple[Window, list[int], list[int]]:
    """A conv's or pool's window as the op registry reads it (strides, dilations, ``pads`` or ``auto_pad``), and
    its begin and end pads for an input of spatial sizes ``in_spatial``."""
    try:
        window = make_window(attrs, kernel, bool(attrs.get("ceil_mode", 0)))
        _, begins, ends = window.resolve(in_spatial)
    except ValueError as exc:
        raise NotNative(str(exc)) from None
    return window, begins, ends


class Impl:
    """One step's implementation. Subclasses set the flags and implement ``bind``."""

    mode = "library"          # library | native | view | reference
    reason = ""               # why this is not native (reference steps), or what was chosen
    inplace = False           # elementwise: output i may reuse an input buffer that dies at this step
    writes_outputs = True     # False: returns its own arrays (which may alias its inputs)

    def bind(self, in_types: list[TensorType | None], out_types: list[TensorType | None]) -> Bound:
        raise NotImplementedError

    def accepts_strided(self, port: int) -> bool:
        """Whether input ``port`` may be any strided view (e.g. a transpose) at no extra cost: the producer of
        such an input may then hand over a view instead of copying (``lower.transposes_as_views``)."""
        return False


class ReferenceImpl(Impl):
    """The op's numpy reference implementation from the registry, through the reference interpreter."""

    mode = "reference"
    writes_outputs = False

    def __init__(self, node: Node, run_node: Callable[[Node, list], list], reason: str):
        self.node = node
        self.run_node = run_node
        self.reason = reason

    def bind(self, in_types, out_types) -> Bound:
        node, run_node = self.node, self.run_node
        return Bound(lambda ins, outs, work: run_node(node, ins))


class ViewImpl(Impl):
    """Reshape-like ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity): a view of input 0, no copy."""

    mode = "view"
    writes_outputs = False

    def bind(self, in_types, out_types) -> Bound:
        (shape,) = static_shapes(out_types[:1], "output")
        return Bound(lambda ins, outs, work: [ins[0].reshape(shape)])


class TransposeViewImpl(Impl):
    """Transpose as a strided view of its input, for consumers that read any strides (BLAS through np.matmul
    takes a transposed matrix as it is): no copy."""

    mode = "view"
    writes_outputs = False
    reason = "strided view (every consumer reads strides)"

    def __init__(self, perm: tuple[int, ...] | None):
        self.perm = perm

    def bind(self, in_types, out_types) -> Bound:
        perm = self.perm
        return Bound(lambda ins, outs, work: [np.transpose(ins[0], perm)])


#: scalar-expression primitives that are one numpy ufunc (``tlc.ops.expr`` names)
_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power, "max": np.maximum,
    "min": np.minimum, "neg": np.negative, "abs": np.absolute, "sqrt": np.sqrt, "exp": np.exp, "log": np.log,
    "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor, "not": np.logical_not,
}


class UfuncImpl(Impl):
    """An elementwise op whose scalar expression is one primitive: one numpy ufunc call into the output."""

    mode = "library"
    inplace = True

    def __init__(self, ufunc: np.ufunc, operands: list[tuple[str, Any]]):
        self.ufunc = ufunc
        self.operands = operands   # ("arg", input index) or ("const", number)
        self.reason = f"numpy {ufunc.__name__}"

    def bind(self, in_types, out_types) -> Bound:
        static_shapes(out_types, "output")
        out_dtype = np_dtype(out_types[0].dtype)
        arg_dtypes = [np_dtype(in_types[v].dtype) if kind == "arg" else None for kind, v in self.operands]
        dtype_of_consts = next((d for d in arg_dtypes if d is not None), out_dtype)
        try:
            resolved = self.ufunc.resolve_dtypes(
                tuple(d if d is not None else dtype_of_consts for d in arg_dtypes) + (None,))
        except (TypeError, ValueError) as exc:
            raise NotNative(f"numpy {self.ufunc.__name__} does not take these dtypes: {exc}") from None
        # NOTE: this also keeps integer Div off numpy (true division gives floats; ONNX truncates).
        if resolved[-1] != out_dtype or any(d is not None and r != d for d, r in zip(arg_dtypes, resolved)):
            raise NotNative(f"numpy {self.ufunc.__name__} would compute in {resolved[-1]}, not {out_dtype}")
        ufunc = self.ufunc
        consts = {i: dtype_of_consts.type(v) for i, (kind, v) in enumerate(self.operands) if kind == "const"}
        picks = [(kind == "arg", v) for kind, v in self.operands]

        def fn(ins, outs, work):
            args = [ins[v] if is_arg else consts[i] for i, (is_arg, v) in enumerate(picks)]
            return [ufunc(*args, out=outs[0])]

        return Bound(fn)


def ufunc_impl(node: Node) -> UfuncImpl | None:
    """A ``UfuncImpl`` when the node is elementwise and its expression is a single ufunc-able primitive."""
    opdef = opdef_of(node)
    if not opdef.has(Trait.ELEMENTWISE) or opdef.expr is None or node.num_outputs != 1:
        return None
    try:
        tree = opdef.expr(*[expr.arg(i) for i in range(node.num_inputs)], **opdef.resolved_attrs(node))
    except Exception:  # an expression that needs inputs we do not model here: no ufunc path
        return None
    if tree.fn not in _UFUNCS or any(a.fn not in ("arg", "const") for a in tree.args):
        return None
    if all(a.fn == "const" for a in tree.args):
        return None
    return UfuncImpl(_UFUNCS[tree.fn], [(a.fn, a.value) for a in tree.args])
