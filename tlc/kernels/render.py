"""Rendering of scalar expressions (``tlc.ops.expr``) into Numba-compilable Python ``ast``, for any target.

Typing follows the expression contract: arithmetic happens in the dtype of its first typed operand (the
node's output dtype when every operand is a constant), other operands and constants are converted to it,
comparisons give bool. Every primitive result is assigned to its own variable (``t3_0``, ``t3_1`` ...),
wrapped in its numpy scalar type so that Numba's integer widening and float64 literals never change the
arithmetic. Constant integer powers become multiplications; 1 / (1 + exp(-x)) becomes a sigmoid and 1 + tanh(y)
becomes 2 * sigmoid(2y) (the tanh form of GELU: one exp and one division instead of tanh's three parts).
Functions (transcendentals, NaN-propagating max/min, C integer division ...) come from the target's
``Library``: ``tlc.kernels.mathlib`` on the CPU (``cpu.CPU_LIBRARY``), libdevice and ``tlc.kernels.cudalib`` on
CUDA (``cuda.CUDA_LIBRARY``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import CompileError
from ..ir.types import FLOAT_DTYPES
from ..ops import expr as E
from . import emit as M
from .plan import KernelPlan, ScalarOp

#: libm functions with no vectorizable version in mathlib (yet), and numpy's spelling of each, which Numba
#: compiles to a libm call (the CPU's library calls these; every library must name them)
LIBM = {"tan": "np.tan", "atan": "np.arctan", "asin": "np.arcsin", "acos": "np.arccos", "sinh": "np.sinh",
         "cosh": "np.cosh", "asinh": "np.arcsinh", "acosh": "np.arccosh", "atanh": "np.arctanh"}
FLOAT_ONLY = frozenset({"sqrt", "exp", "log", "tanh", "erf", "sin", "cos"}) | frozenset(LIBM)
INTEGER_ONLY = E.BITWISE
SUFFIX = {"float32": "f32", "float64": "f64"}


@dataclass(frozen=True)
class Library:
    """What a target's kernels call: ``function(name, dtype)`` is the dotted name of a function taking the
    operands (None: draw the operator instead), ``imports`` what the generated module imports for them.

    Names: exp log tanh erf sigmoid sqrt sin cos tan atan asin acos sinh cosh asinh acosh atanh floor ceil rint
    fmod pow (float dtypes) and maximum minimum int_div int_fmod int_pow (any numeric dtype). Bitwise operations
    are drawn as operators on every target.
    """

    imports: tuple[str, ...]
    function: Callable[[str, str], str | None]


@dataclass
class Typed:
    """A rendered operand: an expression, its dtype (None: an untyped constant) and the constant's value."""

    node: ast.expr | None
    dtype: str | None
    value: float | int | bool | None = None


def render_ops(plan: KernelPlan, library: Library, wanted: set[str] | None = None) -> list[ast.stmt]:
    """Statements of the plan's scalar ops (those assigning ``wanted`` variables, or all), in plan order, calling
    ``library``'s functions: what every renderer's loops compute."""
    renderer = ExprRenderer(library)
    stmts: list[ast.stmt] = []
    for step in plan.steps:
        if isinstance(step, ScalarOp) and (wanted is None or step.target in wanted):
            stmts += renderer.render(step)
    return stmts


class ExprRenderer:
    """Renders the ScalarOps of a plan; ``render(op)`` returns statements that assign ``op.target``."""

    def __init__(self, library: Library) -> None:
        self.lib = library
        self._stmts: list[ast.stmt] = []
        self._prefix = ""
        self._count = 0

    def render(self, op: ScalarOp) -> list[ast.stmt]:
        self._stmts, self._prefix, self._count = [], op.target, 0
        pairs = zip(op.args, op.arg_dtypes, strict=True)
        args = [None if a is None else Typed(M.name(a), d) for a, d in pairs]
        result = self._convert(self._emit(op.expr, args, op.dtype), op.dtype)
        last = self._stmts[-1] if self._stmts else None
        if isinstance(result, ast.Name) and isinstance(last, ast.Assign) and last.targets[0].id == result.id:
            last.targets[0] = M.name(op.target, store=True)  # the final temp is the target itself
        else:
            self._stmts.append(M.assign(op.target, result))
        return self._stmts

    # ------------------------------------------------------------------ helpers
    def _temp(self, value: ast.expr) -> ast.expr:
        var = f"{self._prefix}_{self._count}"
        self._count += 1
        self._stmts.append(M.assign(var, value))
        return M.name(var)

    def _convert(self, t: Typed, dtype: str) -> ast.expr:
        """``t`` as a value of ``dtype`` (constants rendered typed, other dtypes converted)."""
        if t.dtype is None:
            return M.number(t.value, dtype)
        if t.dtype == dtype:
            return t.node
        if dtype == "bool":
            return M.binop(t.node, "!=", M.number(0, t.dtype))
        return M.call(M.np_type(dtype), t.node)

    def _typed(self, dtype: str, value: ast.expr) -> Typed:
        """A new temp holding ``value`` converted to ``dtype``."""
        wrapped = value if dtype == "bool" else M.call(M.np_type(dtype), value)
        return Typed(self._temp(wrapped), dtype)

    # ------------------------------------------------------------------ the tree walk
    def _emit(self, e: E.Expr, args: list[Typed | None], out_dtype: str) -> Typed:
        if e.fn == "arg":
            if e.value >= len(args) or args[e.value] is None:
                raise CompileError(f"scalar expression reads missing input {e.value}")
            return args[e.value]
        if e.fn == "const":
            return Typed(None, None, e.value)
        peephole = self._sigmoid(e, args, out_dtype)
        if peephole is None:
            peephole = self._one_plus_tanh(e, args, out_dtype)
        if peephole is not None:
            return peephole
        ops = [self._emit(a, args, out_dtype) for a in e.args]
        if e.fn == "cast":
            src = ops[0]
            if src.dtype is None:
                return Typed(None, None, src.value)
            return Typed(self._temp(self._convert(src, e.value)), e.value)
        if e.fn in E.COMPARISONS:
            return self._comparison(e.fn, ops)
        if e.fn in E.LOGICAL:
            vals = [self._convert(o, "bool") for o in ops]
            node = (
                M.not_(vals[0])
                if e.fn == "not"
                else M.binop(vals[0], {"and": "&", "or": "|", "xor": "^"}[e.fn], vals[1])
            )
            return Typed(self._temp(node), "bool")
        if e.fn == "where":
            dtype = _first_dtype(ops[1:], out_dtype)
            cond = self._convert(ops[0], "bool")
            return Typed(self._temp(M.select(cond, self._convert(ops[1], dtype), self._convert(ops[2], dtype))), dtype)
        return self._arithmetic(e.fn, ops, _first_dtype(ops, out_dtype))

    def _comparison(self, fn: str, ops: list[Typed]) -> Typed:
        dtype = _first_dtype(ops, "float64")
        a = self._convert(ops[0], dtype)
        if fn == "isnan":
            node = M.binop(a, "!=", a) if dtype in FLOAT_DTYPES else ast.Constant(False)
            return Typed(self._temp(node), "bool")
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[fn]
        return Typed(self._temp(M.binop(a, sym, self._convert(ops[1], dtype))), "bool")

    def _arithmetic(self, fn: str, ops: list[Typed], dtype: str) -> Typed:
        if dtype == "bool":
            raise CompileError(f"primitive {fn!r} on bool values is not supported")
        is_float = dtype in FLOAT_DTYPES
        if fn in FLOAT_ONLY and not is_float:
            raise CompileError(f"primitive {fn!r} needs a float operand, got {dtype}")
        if fn in INTEGER_ONLY and is_float:
            raise CompileError(f"primitive {fn!r} needs an integer operand, got {dtype}")
        if fn == "pow":
            return self._pow(ops, dtype)
        if fn in ("shl", "shr"):
            return self._shift(fn, ops, dtype)
        vals = [self._convert(o, dtype) for o in ops]
        return self._typed(dtype, _RENDER[fn](vals, dtype, self.lib))

    def _pow(self, ops: list[Typed], dtype: str) -> Typed:
        base, exponent = self._convert(ops[0], dtype), ops[1]
        small = _SMALL_POWERS.get(float(exponent.value)) if exponent.dtype is None else None
        if small is not None and (dtype in FLOAT_DTYPES or float(exponent.value) >= 0):
            return self._typed(dtype, small(base, dtype))
        if dtype in FLOAT_DTYPES:
            function = self.lib.function("pow", dtype)
            power = self._convert(exponent, dtype)
            node = M.call(function, base, power) if function else M.binop(base, "**", power)
        else:
            node = M.call(self.lib.function("int_pow", dtype), base, self._convert(exponent, exponent.dtype or dtype))
        return self._typed(dtype, node)

    def _shift(self, fn: str, ops: list[Typed], dtype: str) -> Typed:
        """a << b, a >> b (arithmetic for signed types). An amount b outside [0, width) gives the sign fill: 0, or
        a >> (width - 1) for a right shift of a signed a. The amount is clamped before the shift, so no shift is
        ever out of range (that is poison in LLVM, on whichever side of a select it lands)."""
        a, b = (self._convert(o, dtype) for o in ops)
        width = np.dtype(dtype).itemsize * 8
        zero = M.number(0, dtype)
        inside = self._temp(M.binop(M.binop(b, ">=", zero), "&", M.binop(b, "<", M.number(width, dtype))))
        if fn == "shr" and dtype.startswith("int"):
            return self._typed(dtype, M.binop(a, ">>", M.select(inside, b, M.number(width - 1, dtype))))
        shifted = M.binop(a, "<<" if fn == "shl" else ">>", M.select(inside, b, zero))
        return self._typed(dtype, M.select(inside, shifted, zero))

    def _sigmoid(self, e: E.Expr, args: list[Typed | None], out_dtype: str) -> Typed | None:
        """1 / (1 + exp(-x)) -> sigmoid: exact for large -x where the quotient form overflows to 0."""
        if not (
            e.fn == "div"
            and _is_const(e.args[0], 1)
            and e.args[1].fn == "add"
            and _is_const(e.args[1].args[0], 1)
            and e.args[1].args[1].fn == "exp"
            and e.args[1].args[1].args[0].fn == "neg"
        ):
            return None
        x = self._emit(e.args[1].args[1].args[0].args[0], args, out_dtype)
        if x.dtype not in SUFFIX:
            return None
        return Typed(self._temp(M.call(self.lib.function("sigmoid", x.dtype), x.node)), x.dtype)


    def _one_plus_tanh(self, e: E.Expr, args: list[Typed | None], out_dtype: str) -> Typed | None:
        """1 + tanh(y) -> 2 * sigmoid(2y): the same number (2y and the doubling are exact), one exp and one
        division instead of tanh's polynomial, exp and division, and accurate where 1 + tanh(y) cancels (y << 0).
        The tanh form of GELU is written this way."""
        if e.fn != "add" or len(e.args) != 2:
            return None
        one, other = (e.args[0], e.args[1]) if _is_const(e.args[0], 1) else (e.args[1], e.args[0])
        if not _is_const(one, 1) or other.fn != "tanh":
            return None
        y = self._emit(other.args[0], args, out_dtype)
        if y.dtype not in SUFFIX:
            return None
        doubled = self._typed(y.dtype, M.binop(y.node, "+", y.node))
        s = self._temp(M.call(self.lib.function("sigmoid", y.dtype), doubled.node))
        return self._typed(y.dtype, M.binop(s, "+", s))


def _is_const(e: E.Expr, value: float) -> bool:
    return e.fn == "const" and not isinstance(e.value, bool) and float(e.value) == value


def _first_dtype(ops: list[Typed], default: str) -> str:
    for o in ops:
        if o.dtype is not None:
            return o.dtype
    return default if default != "bool" else "float64"


Draw = Callable[[list[ast.expr], str, Library], ast.expr]


def _fn(name: str) -> Draw:
    return lambda v, d, lib: M.call(lib.function(name, d), *v)


def _int_or_float(int_draw: Draw, float_draw: Draw) -> Draw:
    return lambda v, d, lib: float_draw(v, d, lib) if d in FLOAT_DTYPES else int_draw(v, d, lib)


def _same(v: list[ast.expr], d: str, lib: Library) -> ast.expr:
    return v[0]


def _sign(v: list[ast.expr], d: str, lib: Library) -> ast.expr:
    zero = M.number(0, d)
    return M.select(M.binop(v[0], ">", zero), M.number(1, d), M.select(M.binop(v[0], "<", zero), M.number(-1, d), v[0]))


_RENDER: dict[str, Draw] = {
    "add": lambda v, d, lib: M.binop(v[0], "+", v[1]),
    "sub": lambda v, d, lib: M.binop(v[0], "-", v[1]),
    "mul": lambda v, d, lib: M.binop(v[0], "*", v[1]),
    "div": _int_or_float(_fn("int_div"), lambda v, d, lib: M.binop(v[0], "/", v[1])),
    "max": _fn("maximum"),
    "min": _fn("minimum"),
    "mod": lambda v, d, lib: M.binop(v[0], "%", v[1]),
    "fmod": _int_or_float(_fn("int_fmod"), _fn("fmod")),
    "neg": lambda v, d, lib: M.neg(v[0]),
    "abs": lambda v, d, lib: M.call("abs", v[0]),
    "sqrt": _fn("sqrt"),
    "exp": _fn("exp"),
    "log": _fn("log"),
    "tanh": _fn("tanh"),
    "erf": _fn("erf"),
    "sin": _fn("sin"),
    "cos": _fn("cos"),
    "floor": _int_or_float(_same, _fn("floor")),
    "ceil": _int_or_float(_same, _fn("ceil")),
    "round": _int_or_float(_same, _fn("rint")),
    "sign": _sign,
    **{name: _fn(name) for name in LIBM},
    "bitand": lambda v, d, lib: M.binop(v[0], "&", v[1]),
    "bitor": lambda v, d, lib: M.binop(v[0], "|", v[1]),
    "bitxor": lambda v, d, lib: M.binop(v[0], "^", v[1]),
    "bitnot": lambda v, d, lib: ast.UnaryOp(ast.Invert(), v[0]),
}


def _mul_chain(x: ast.expr, n: int) -> ast.expr:
    out = x
    for _ in range(n - 1):
        out = M.binop(out, "*", x)
    return out


#: x ** c for constants c where repeated multiplication is exact enough (FACTS: pow dominates otherwise)
_SMALL_POWERS: dict[float, Callable[[ast.expr, str], ast.expr]] = {
    0.0: lambda x, d: M.number(1, d),
    1.0: lambda x, d: x,
    2.0: lambda x, d: _mul_chain(x, 2),
    3.0: lambda x, d: _mul_chain(x, 3),
    4.0: lambda x, d: M.binop(_mul_chain(x, 2), "*", _mul_chain(x, 2)),
    -1.0: lambda x, d: M.binop(M.number(1, d), "/", x),
    -2.0: lambda x, d: M.binop(M.number(1, d), "/", _mul_chain(x, 2)),
}

#: every primitive of tlc.ops.expr this renderer draws (a test checks it covers PRIMITIVES)
RENDERED = frozenset(_RENDER) | {"pow", "shl", "shr", "cast", "where", "isnan", "not"} | E.COMPARISONS | E.LOGICAL
