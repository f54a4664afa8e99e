"""Bit reinterpretation of floats for Numba code: the primitives behind 2**k scaling, exponent extraction and
copysign in ``tlc.kernels.mathlib``.

Numba has no ``view``/``bitcast`` for scalars, so these are ``@intrinsic`` functions that emit one LLVM
``bitcast`` (plus a ``trunc`` when Numba has widened an integer to 64 bits, which it does for any arithmetic
on int32). They compile to nothing, so loops that use them still vectorize.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_FLOAT_TO_INT = {types.float32: types.int32, types.float64: types.int64}


@intrinsic
def float_bits(typingctx, x):
    """The IEEE bits of ``x``: float32 -> int32, float64 -> int64."""
    if x not in _FLOAT_TO_INT:
        return None
    sig = _FLOAT_TO_INT[x](x)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


def _bits_to(float_type, width: int):
    def typer(typingctx, i):
        if not isinstance(i, types.Integer):
            return None
        sig = float_type(i)

        def codegen(context, builder, signature, args):
            value = args[0]
            if i.bitwidth > width:
                value = builder.trunc(value, ir.IntType(width))
            elif i.bitwidth < width:
                extend = builder.sext if i.signed else builder.zext
                value = extend(value, ir.IntType(width))
            return builder.bitcast(value, context.get_value_type(float_type))

        return sig, codegen

    typer.__name__ = typer.__qualname__ = f"bits_f{width}"
    return typer


#: ``bits_f32(i)``: the float32 whose bits are the low 32 bits of integer ``i``.
bits_f32 = intrinsic(_bits_to(types.float32, 32))
#: ``bits_f64(i)``: the float64 whose bits are the 64 bits of integer ``i``.
bits_f64 = intrinsic(_bits_to(types.float64, 64))


@intrinsic
def ldexp(typingctx, x, k):
    """``x * 2**k`` in one rounding (LLVM's ``llvm.ldexp``: overflow to inf, gradual underflow, NaN and inf kept),
    ``k`` any integer (truncated to int32). A vector loop of it becomes AVX-512's ``vscalefps``/``vscalefpd``;
    without AVX-512 LLVM calls libm's ``ldexp`` an element, so ``tlc.kernels.mathlib`` uses it on AVX-512 hosts
    only."""
    if x not in _FLOAT_TO_INT or not isinstance(k, types.Integer):
        return None
    sig = x(x, k)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        value = args[1]
        if k.bitwidth > 32:
            value = builder.trunc(value, i32)
        elif k.bitwidth < 32:
            value = (builder.sext if k.signed else builder.zext)(value, i32)
        ftype = context.get_value_type(x)
        fn = builder.module.declare_intrinsic("llvm.ldexp", [ftype, i32], ir.FunctionType(ftype, [ftype, i32]))
        return builder.call(fn, [args[0], value])

    return sig, codegen


def _flip(builder, bits, width: int):
    """``bits ^ ((bits >> (width-1)) & MAX)``: maps float bits to integers in numeric order; an involution."""
    sign = builder.ashr(bits, ir.Constant(bits.type, width - 1))
    return builder.xor(bits, builder.and_(sign, ir.Constant(bits.type, (1 << (width - 1)) - 1)))


@intrinsic
def ordered_key(typingctx, x):
    """An integer whose signed order is the numeric order of ``x`` (not NaN; -0.0 sorts below +0.0).

    Max/min reductions over these keys vectorize (integer smax/smin), where float selects do not without
    fast-math flags; NaN is tracked apart by the caller.
    """
    if x not in _FLOAT_TO_INT:
        return None
    int_type = _FLOAT_TO_INT[x]
    sig = int_type(x)

    def codegen(context, builder, signature, args):
        bits = builder.bitcast(args[0], context.get_value_type(int_type))
        return _flip(builder, bits, int_type.bitwidth)

    return sig, codegen


_INT_TO_FLOAT = {types.int32: types.float32, types.int64: types.float64}


@intrinsic
def key_value(typingctx, k):
    """The float whose ``ordered_key`` is ``k`` (int32 -> float32, int64 -> float64)."""
    if k not in _INT_TO_FLOAT:
        return None
    sig = _INT_TO_FLOAT[k](k)

    def codegen(context, builder, signature, args):
        bits = _flip(builder, args[0], k.bitwidth)
        return builder.bitcast(bits, context.get_value_type(signature.return_type))

    return sig, codegen
