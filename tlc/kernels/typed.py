"""Type-generic scalars for hand-written Numba kernels (``recurrent.py``, ``attention.py``): one name, the
float32 or float64 variant picked at compile time from the argument's type. ``of_type(like, value)``: ``value`` as
a scalar of ``like``'s dtype (an array or a scalar; float32 stays float32); ``exp``, ``tanh``, ``sigmoid``: mathlib's
vectorizable variant of the argument's type."""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from . import mathlib


def of_type(like, value):
    """``value`` as a scalar of ``like``'s dtype (compiled code only)."""


@overload(of_type, inline="always")
def _of_type(like, value):
    dtype = like.dtype if isinstance(like, types.Array) else like
    if dtype == types.float32:
        return lambda like, value: np.float32(value)
    return lambda like, value: np.float64(value)


def _generic(name: str):
    """A function ``name(x)`` compiled code resolves to ``mathlib.<name>_f32`` or ``_f64`` by x's type."""
    f32, f64 = getattr(mathlib, f"{name}_f32"), getattr(mathlib, f"{name}_f64")

    def stub(x):
        raise NotImplementedError(f"{name} runs in compiled code only")

    stub.__name__ = stub.__qualname__ = name

    @overload(stub, inline="always")
    def _impl(x):
        if x == types.float32:
            return lambda x: f32(x)
        return lambda x: f64(x)

    return stub


exp, tanh, sigmoid = _generic("exp"), _generic("tanh"), _generic("sigmoid")
