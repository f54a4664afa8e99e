"""A small emitter of Python source through the ``ast`` module, for generated kernels.

Only identifiers made here (checked against a strict pattern) and numbers (rendered by ``number``) can
appear in the source; there is no way to splice text in.
"""

from __future__ import annotations

import ast
import math
import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NUMPY_TYPES = {
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
}


def ident(text: str) -> str:
    if not _IDENT.match(text):
        raise ValueError(f"not a generated identifier: {text!r}")
    return text


def name(text: str, store: bool = False) -> ast.Name:
    return ast.Name(ident(text), ast.Store() if store else ast.Load())


def dotted(path: str) -> ast.expr:
    """``np.float32``, ``ml.exp_f32``: attribute access on a generated name."""
    first, *rest = path.split(".")
    node: ast.expr = name(first)
    for part in rest:
        node = ast.Attribute(node, ident(part), ast.Load())
    return node


def call(func: str | ast.expr, *args: ast.expr) -> ast.Call:
    return ast.Call(dotted(func) if isinstance(func, str) else func, list(args), [])


def np_type(dtype: str) -> str:
    if dtype not in _NUMPY_TYPES:
        raise ValueError(f"no numpy scalar type for {dtype!r}")
    return "np.bool_" if dtype == "bool" else f"np.{dtype}"


def number(value: float | int | bool, dtype: str) -> ast.expr:
    """A typed constant: ``np.float32(0.5)``, ``np.float64(-math.inf)``, ``np.int32(3)``, ``True``."""
    if dtype == "bool":
        return ast.Constant(bool(value))
    if dtype.startswith(("int", "uint")):
        return call(np_type(dtype), ast.Constant(int(value)))
    v = float(value)
    if math.isnan(v):
        literal: ast.expr = dotted("math.nan")
    elif math.isinf(v):
        literal = dotted("math.inf") if v > 0 else ast.UnaryOp(ast.USub(), dotted("math.inf"))
    else:
        literal = ast.Constant(v)  # repr of a finite float: a plain literal
    return call(np_type(dtype), literal)


def integer(value: int) -> ast.Constant:
    return ast.Constant(int(value))


_BINOPS = {
    "**": ast.Pow,
    "+": ast.Add,
    "-": ast.Sub,
    "*": ast.Mult,
    "/": ast.Div,
    "//": ast.FloorDiv,
    "%": ast.Mod,
    "&": ast.BitAnd,
    "|": ast.BitOr,
    "^": ast.BitXor,
    "<<": ast.LShift,
    ">>": ast.RShift,
}
_COMPARE = {"<": ast.Lt, "<=": ast.LtE, ">": ast.Gt, ">=": ast.GtE, "==": ast.Eq, "!=": ast.NotEq}


def binop(a: ast.expr, op: str, b: ast.expr) -> ast.expr:
    if op in _COMPARE:
        return ast.Compare(a, [_COMPARE[op]()], [b])
    return ast.BinOp(a, _BINOPS[op](), b)


def neg(a: ast.expr) -> ast.expr:
    return ast.UnaryOp(ast.USub(), a)


def not_(a: ast.expr) -> ast.expr:
    return ast.UnaryOp(ast.Not(), a)


def select(cond: ast.expr, a: ast.expr, b: ast.expr) -> ast.expr:
    return ast.IfExp(cond, a, b)


def index(array: str, at: ast.expr) -> ast.Subscript:
    return ast.Subscript(name(array), at, ast.Load())


def assign(target: str, value: ast.expr) -> ast.Assign:
    return ast.Assign([name(target, store=True)], value)


def store(array: str, at: ast.expr, value: ast.expr) -> ast.Assign:
    return ast.Assign([ast.Subscript(name(array), at, ast.Store())], value)


def loop(
    var: str,
    start: ast.expr,
    stop: ast.expr,
    body: list[ast.stmt],
    parallel: bool = False,
    step: ast.expr | None = None,
) -> ast.For:
    rng = call("prange" if parallel else "range", start, stop, *([step] if step is not None else []))
    return ast.For(name(var, store=True), rng, body or [ast.Pass()], [])


def function(fname: str, params: list[str], body: list[ast.stmt], decorator: ast.expr | None) -> ast.FunctionDef:
    """A function definition (``decorator`` None: a plain one, for the caller to compile)."""
    args = ast.arguments(
        posonlyargs=[], args=[ast.arg(ident(p)) for p in params], kwonlyargs=[], kw_defaults=[], defaults=[]
    )
    return ast.FunctionDef(ident(fname), args, body or [ast.Pass()], [] if decorator is None else [decorator],
                           None, None)


def keyword_call(func: str, **kwargs: object) -> ast.Call:
    """``njit(cache=True, parallel=False)``; values must be bool/int/str constants."""
    keywords = []
    for key, value in kwargs.items():
        if not isinstance(value, (bool, int, str)):
            raise ValueError(f"keyword {key!r} takes a bool/int/str constant, got {type(value).__name__}")
        keywords.append(ast.keyword(ident(key), ast.Constant(value)))
    return ast.Call(dotted(func), [], keywords)


def module_source(docstring: str, imports: list[str], body: list[ast.stmt], numba_names=("njit", "prange")) -> str:
    """Source of a module: a docstring, ``import x as y`` lines (dotted names only), ``from numba import
    <numba_names>`` and ``body``."""
    stmts: list[ast.stmt] = [ast.Expr(ast.Constant(docstring))]
    for line in imports:
        parts = line.split(" as ")
        alias = ast.alias(".".join(ident(p) for p in parts[0].split(".")), ident(parts[1]) if len(parts) > 1 else None)
        stmts.append(ast.Import([alias]))
    stmts.append(ast.ImportFrom("numba", [ast.alias(ident(n)) for n in numba_names], 0))
    module = ast.Module(stmts + body, [])
    return ast.unparse(ast.fix_missing_locations(module)) + "\n"
