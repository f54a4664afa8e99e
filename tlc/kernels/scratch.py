"""Scratch rows for generated row kernels: arrays LLVM can tell apart from every other array of the kernel.

``np.empty`` hands back memory through Numba's runtime, whose data pointer LLVM cannot trace to an allocation,
so a loop that loads an input and stores to such a row is vectorized behind a run-time check of how far apart
the two lie (with a scalar copy for when they are close). ``scratch_row`` calls ``malloc`` (its result marked
``noalias``) and builds the array around that pointer: a row that does not escape the kernel cannot alias an
argument or another allocation, so loops that store only to scratch rows get one code path, with no check.
Row kernels rely on this to keep a float sum in its pass's loop and still add in the same order wherever the
arrays lie (``tlc.kernels.cpu._split_sums``).

The row has no Numba meminfo (no reference counting): the kernel frees it with ``free_row`` when its task ends.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_BYTES = ir.IntType(8).as_pointer()


@intrinsic
def scratch_row(typingctx, n, dtype):
    """A new uninitialized 1-d C array of ``n`` elements of ``dtype`` (a Numba number class, ``np.float32``);
    raises MemoryError when ``malloc`` fails."""
    if not isinstance(n, types.Integer) or not isinstance(dtype, types.NumberClass):
        return None
    array_type = types.Array(dtype.instance_type, 1, "C")

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        item = context.get_data_type(dtype.instance_type)
        itemsize = ir.Constant(intp, context.get_abi_sizeof(item))
        count = context.cast(builder, args[0], signature.args[0], types.intp)
        malloc = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_BYTES, [intp]), "malloc")
        malloc.return_value.add_attribute("noalias")
        one = ir.Constant(intp, 1)
        at_least_one = builder.select(builder.icmp_signed(">", count, one), count, one)  # malloc(0) may be NULL
        data = builder.call(malloc, [builder.mul(at_least_one, itemsize)])
        with cgutils.if_unlikely(builder, cgutils.is_null(builder, data)):
            context.call_conv.return_user_exc(builder, MemoryError, ("no memory for a scratch row",))
        array = context.make_array(array_type)(context, builder)
        context.populate_array(array, data=builder.bitcast(data, item.as_pointer()), shape=[count],
                               strides=[itemsize], itemsize=itemsize, meminfo=None)
        return array._getvalue()

    return array_type(n, dtype), codegen


@intrinsic
def free_row(typingctx, row):
    """Frees a row made by ``scratch_row``."""
    if not isinstance(row, types.Array):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(row)(context, builder, value=args[0]).data
        free = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [_BYTES]), "free")
        builder.call(free, [builder.bitcast(data, _BYTES)])
        return context.get_dummy_value()

    return types.void(row), codegen
