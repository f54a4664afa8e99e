"""Kernels called by address: a big Numba function compiled once (and cached on disk), called from other compiled
code through a symbol instead of being linked into it.

Why: Numba links every function a kernel calls into the kernel's own module, and LLVM re-optimizes the linked
code in each module that links it: a conv part (Winograd's: ~4 s cold) cost those seconds again in every
epilogue module and parallel driver that called it. An entry is a C-ABI wrapper (``numba.cfunc``, cached) of
the function, whose address is registered with LLVM under a fixed name, as blas.py does for OpenBLAS; callers
declare the name and call it (``call``), so their modules stay small, and their cached machine code links by
name in the next process. ``ensure`` must run before any module that calls an entry is compiled or loaded.

Calling convention (``call`` on one side, ``Entry.kinds`` on the other): every array is passed as (data address,
element count), every integer as int64, then the address of an int64[2] that receives the entry's two results.
An entry rebuilds its arrays with ``numba.carray``: callers pass C-contiguous arrays only. The symbol is
``tlc_entry_<name>_<dtype>``, the dtype being the first array's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import cfunc, types
from numba.core import cgutils
from numba.extending import intrinsic

#: argument kinds: an array of the entry's dtype, an int64 array, an int64 scalar
REAL, INDEX, INT = "r", "g", "i"


@dataclass(frozen=True)
class Entry:
    """A Python function compiled as an entry: ``kinds`` are its arguments' kinds in order (each array becomes
    a pointer and a count; the results' address follows them)."""

    name: str
    function: Callable
    kinds: str


def symbol(name: str, dtype) -> str:
    return f"tlc_entry_{name}_{dtype}"


def signature(kinds: str, dtype) -> types.Signature:
    """The entry's C signature for arrays of ``dtype`` (a Numba type)."""
    args: list = []
    for kind in kinds:
        if kind == INT:
            args.append(types.int64)
        else:
            args += [types.CPointer(dtype if kind == REAL else types.int64), types.int64]
    return types.void(*args, types.CPointer(types.int64))


_READY: dict[object, object] = {}   # by symbol, and by (name, dtype as the caller gave it): hot paths ask
_LOCK = threading.Lock()


def ensure(entry: Entry, dtype) -> None:
    """Compile (or load from Numba's cache) ``entry`` for arrays of ``dtype`` (numpy's or Numba's) and register
    its address, once per process; a dictionary look-up after that."""
    if (entry.name, dtype) in _READY:
        return
    real = numba.from_dtype(np.dtype(str(dtype)))
    name = symbol(entry.name, real)
    with _LOCK:
        if name not in _READY:
            compiled = cfunc(signature(entry.kinds, real), cache=True, error_model="numpy")(entry.function)
            llvm.add_symbol(name, compiled.address)
            _READY[name] = compiled   # kept alive: its machine code is what the symbol points to
        _READY[entry.name, dtype] = _READY[name]


@intrinsic
def call(typingctx, name, args):
    """``call("conv_gemm", (x, w, ...))``: the entry ``name`` for the first array's dtype, with ``args`` passed
    by the calling convention above; returns its two int64 results."""
    if not isinstance(name, types.StringLiteral) or not isinstance(args, types.BaseTuple):
        return None
    arrays = [t for t in args if isinstance(t, types.Array)]
    if not arrays or not all(isinstance(t, (types.Array, types.Integer)) for t in args):
        return None
    target = symbol(name.literal_value, arrays[0].dtype)
    result = types.UniTuple(types.int64, 2)

    def codegen(context, builder, sig, llargs):
        i64 = ir.IntType(64)
        values = []
        for k, t in enumerate(args):
            value = builder.extract_value(llargs[1], k)
            if isinstance(t, types.Array):
                array = context.make_array(t)(context, builder, value)
                values += [builder.ptrtoint(array.data, i64), array.nitems]
            else:
                values.append(context.cast(builder, value, t, types.int64))
        out = cgutils.alloca_once(builder, i64, size=2)
        fnty = ir.FunctionType(ir.VoidType(), [i64] * (len(values) + 1))
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, target),
                     values + [builder.ptrtoint(out, i64)])
        lo, hi = builder.load(out), builder.load(builder.gep(out, [ir.Constant(i64, 1)]))
        return context.make_tuple(builder, result, [lo, hi])

    return result(name, args), codegen
