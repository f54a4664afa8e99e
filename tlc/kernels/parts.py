"""Work in parts on Numba's pool without a parallel loop in every generated module.

A Numba ``prange`` costs its module a parallel compile: a gufunc built and compiled for the loop's body, with
every function the body calls linked in and optimized again, ~0.8 s a loop with a cold cache on the 2-core
machine (an epilogue module's ``run_parallel`` with two loops: 1.9-2.7 s of the transformer block's 11 s). Here
the loops are compiled once, in two drivers (``driver``: one on the pool, one serial; cached on disk), and a
generated module gives only a *step*: a C-ABI function (``numba.cfunc``, signature ``STEP``) that does part
``p`` of ``n`` of a phase, ``step(ctx, phase, p, n)``. A driver runs phase 0 for p < n0, then phase 1 for
p < n1, then phase 2 for p < n2, each phase's parts spread over the pool (or in turn), calling the step by
address.

``ctx`` is the address of the call's arguments, packed by ``pack`` where the call enters native code (the
module's ``run(driver, step_address, n0, n1, n2, *arguments)``: a small jitted function that packs them and
calls ``drive``) and read back by ``unpack`` in the step, whose source names their types (``spec``): both
sides lay the tuple out as one LLVM struct of the members' value types. The arrays come back as borrowed views
(no reference counting: the caller holds them for the whole call, which returns only when every part has). The
spec is rendered from Numba types tlc chose, never from text read from a model, and the caller must pass
arrays of exactly those types (a layout 'C' array must be C-contiguous: the step computes its addresses so).
"""

from __future__ import annotations

import threading

from llvmlite import ir
from numba import cfunc, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

#: a step's C signature: (ctx, phase, p, n)
STEP = types.void(types.int64, types.int64, types.int64, types.int64)
_DRIVER = types.void(types.int64, types.int64, types.int64, types.int64, types.int64)

_SCALARS = {str(t): t for t in (types.float16, types.boolean, types.int8, types.int16, types.int32, types.int64,
                                types.uint8, types.uint16, types.uint32, types.uint64, types.float32, types.float64)}
_LAYOUTS = ("C", "F", "A")


def spec(members) -> str:
    """The text a step's source names its arguments' types by: ``int64,array:float32:2:A,...``."""
    out = []
    for t in members:
        if isinstance(t, types.Array) and str(t.dtype) in _SCALARS and t.layout in _LAYOUTS:
            out.append(f"array:{t.dtype}:{t.ndim}:{t.layout}")
        elif str(t) in _SCALARS:
            out.append(str(t))
        else:
            raise TypeError(f"a step cannot take an argument of type {t}")
    return ",".join(out)


def parse(text: str) -> types.Tuple:
    """The tuple type ``spec`` wrote as ``text``."""
    members = []
    for item in text.split(","):
        if item.startswith("array:"):
            _, dtype, ndim, layout = item.split(":")
            if layout not in _LAYOUTS:
                raise TypeError(f"bad layout in step spec {text!r}")
            members.append(types.Array(_SCALARS[dtype], int(ndim), layout))
        else:
            members.append(_SCALARS[item])
    return types.Tuple(members)


def _struct(context, members) -> ir.LiteralStructType:
    return ir.LiteralStructType([context.get_value_type(t) for t in members])


@intrinsic
def pack(typingctx, values):
    """The address of ``values`` (a tuple) laid out on the caller's stack, valid until the caller returns."""
    if not isinstance(values, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        members = list(values)
        struct = _struct(context, members)
        slot = cgutils.alloca_once(builder, struct)
        for k in range(len(members)):
            item = builder.extract_value(args[0], k)
            builder.store(item, cgutils.gep_inbounds(builder, slot, 0, k))
        return builder.ptrtoint(slot, ir.IntType(64))

    return types.int64(values), codegen


@intrinsic
def unpack(typingctx, addr, text):
    """The tuple ``pack`` stored at ``addr``, its types named by ``text`` (a literal ``spec``); arrays borrowed."""
    if not isinstance(text, types.StringLiteral):
        return None
    tup = parse(text.literal_value)

    def codegen(context, builder, sig, args):
        members = list(tup)
        ptr = builder.inttoptr(args[0], _struct(context, members).as_pointer())
        items = []
        for k, t in enumerate(members):
            item = builder.load(cgutils.gep_inbounds(builder, ptr, 0, k))
            if isinstance(t, types.Array):   # a view: no meminfo, so nothing here counts references
                array = context.make_array(t)(context, builder, item)
                array.meminfo = cgutils.get_null_value(array.meminfo.type)
                array.parent = cgutils.get_null_value(array.parent.type)
                item = array._getvalue()
            items.append(item)
        return context.make_tuple(builder, tup, items)

    return tup(addr, text), codegen


def _call_address(builder, address, args) -> None:
    """A call of the C function of int64 arguments at ``address``."""
    fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64)] * len(args))
    builder.call(builder.inttoptr(address, fnty.as_pointer()), list(args))


@intrinsic
def _call(typingctx, fn, a, b, c, d):
    """``fn(a, b, c, d)`` where ``fn`` is the address of a C function of four int64."""
    def codegen(context, builder, sig, args):
        _call_address(builder, args[0], args[1:])
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def drive(typingctx, driver, step, ctx, n0, n1, n2):
    """``driver(step, ctx, n0, n1, n2)`` where ``driver`` is the address of a driver (``driver()``)."""
    def codegen(context, builder, sig, args):
        _call_address(builder, args[0], args[1:])
        return context.get_dummy_value()

    return types.void(*[types.int64] * 6), codegen


def _parallel(step, ctx, n0, n1, n2):
    if n0 > 0:
        for p in prange(n0):
            _call(step, ctx, 0, p, n0)
    if n1 > 0:
        for p in prange(n1):
            _call(step, ctx, 1, p, n1)
    if n2 > 0:
        for p in prange(n2):
            _call(step, ctx, 2, p, n2)


def _serial(step, ctx, n0, n1, n2):
    for p in range(n0):
        _call(step, ctx, 0, p, n0)
    for p in range(n1):
        _call(step, ctx, 1, p, n1)
    for p in range(n2):
        _call(step, ctx, 2, p, n2)


def compile_step(fn, fast_math: bool = False):
    """``fn(ctx, phase, p, n)`` (a generated module's ``step``) compiled as a C function, or loaded from Numba's
    cache; its ``address`` is what ``run`` takes."""
    return cfunc(STEP, cache=True, nogil=True, error_model="numpy", fastmath=fast_math, boundscheck=False)(fn)


_DRIVERS: dict[bool, object] = {}
_LOCK = threading.Lock()


def driver(parallel: bool) -> int:
    """The address of the driver on Numba's pool (``parallel``) or on the calling thread; compiled (or loaded
    from Numba's cache) once per process."""
    compiled = _DRIVERS.get(parallel)
    if compiled is None:
        with _LOCK:
            compiled = _DRIVERS.get(parallel)
            if compiled is None:
                fn = _parallel if parallel else _serial
                compiled = _DRIVERS[parallel] = cfunc(_DRIVER, cache=True, nogil=True, parallel=parallel)(fn)
    return compiled.address
