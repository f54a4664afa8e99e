"""Device functions that generated CUDA kernels call: float math (``exp_f32``, ``atanh_f64`` ...), NaN-propagating
max/min, C integer division and remainder, integer power, and a sigmoid that keeps its subnormal results.
(Bitwise operations are operators in the kernel itself.)

On a device the float math is libdevice's (``expf``, ``tanhf`` ...: CUDA's own accurate implementations).
Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) runs kernels as Python and has no working libdevice, so there
the same names are numpy's functions: the simulator checks indexing, typing and the helpers, not libdevice.
max/min/int_div/int_pow are mathlib's own definitions (``py_func``), so CPU and CUDA share one meaning.
"""

from __future__ import annotations

import math

import numpy as np
from numba import config, cuda

from . import mathlib as ml

_device = cuda.jit(device=True)
SIMULATED = bool(config.ENABLE_CUDASIM)
FLOAT_FUNCTIONS = ("exp", "log", "tanh", "erf", "sqrt", "sin", "cos", "floor", "ceil", "rint", "fmod", "pow",
                   "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh")
_NUMPY = {"erf": np.vectorize(math.erf), "pow": np.power, "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos,
          "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}

maximum = _device(ml.maximum.py_func)
minimum = _device(ml.minimum.py_func)
int_div = _device(ml.int_div.py_func)
int_pow = _device(ml.int_pow.py_func)


@_device
def int_fmod(a, b):
    return a - int_div(a, b) * b


def _simulated(name: str, ftype):
    fn = _NUMPY.get(name) or getattr(np, name)

    def call(*args):
        with np.errstate(all="ignore"):
            return ftype(fn(*args))

    return _device(call)


def _libdevice(name: str, suffix: str):
    from numba.cuda import libdevice

    fn = getattr(libdevice, name + suffix)

    def call1(x):
        return fn(x)

    def call2(x, y):
        return fn(x, y)

    return _device(call2 if name in ("fmod", "pow") else call1)


for _name in FLOAT_FUNCTIONS:
    for _ftype, _suffix in ((np.float32, "f32"), (np.float64, "f64")):
        globals()[f"{_name}_{_suffix}"] = (
            _simulated(_name, _ftype) if SIMULATED else _libdevice(_name, "f" if _suffix == "f32" else "")
        )


@_device
def sigmoid_f32(x):
    e = exp_f32(-abs(x))  # noqa: F821  (defined by the loop above)
    return (np.float32(1) if x >= np.float32(0) else e) / (np.float32(1) + e)


@_device
def sigmoid_f64(x):
    e = exp_f64(-abs(x))  # noqa: F821
    return (np.float64(1) if x >= np.float64(0) else e) / (np.float64(1) + e)
