"""Vectorizable float32/float64 math for generated kernels: exp, log, tanh, erf, sigmoid, pow.

Numba from PyPI has no SVML, so ``math.exp`` in a jitted loop is a scalar libm call that stops LLVM from
vectorizing the loop. These functions contain no calls and no data-dependent branches: every case is computed
and the result chosen with selects, 2**k is built from bits (``tlc.kernels.bits``), and polynomial
coefficients are either exact series terms or fitted by ``tlc.kernels.mathfit``. Compiled with
``forceinline``, they are inlined into the caller, where a loop over an array becomes ``<8 x float>`` /
``<4 x double>`` code (tests check the IR).

Every function handles the whole IEEE range: NaN in -> NaN out, +-inf, overflow to inf, gradual underflow
through the subnormals, and the sign of -0.0 where the function is odd. Error bounds (max ulp against a
higher-precision reference, measured by ``tests/kernels/test_kernel_mathlib.py`` over dense sweeps) are in each
docstring; the names are ``<function>_f32`` / ``<function>_f64``.

NOTE: these are compiled without fast-math flags even inside a fast-math kernel (LLVM inlines them with their
own flags), so range reduction and the NaN/inf selects survive ``KernelOptions(fast_math=True)``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
from numba import njit

from .._platform import avx512
from . import _coefficients as C
from .bits import bits_f32, bits_f64, float_bits, key_value, ldexp, ordered_key  # noqa: F401  (used by kernels)
from .scratch import free_row, scratch_row  # noqa: F401  (used by kernels)

_JIT = {"nogil": True, "error_model": "numpy", "fastmath": {"contract"}, "forceinline": True}

#: scale by 2**k with ``bits.ldexp`` (AVX-512's vscalef) where the host has AVX-512; elsewhere LLVM would call
#: libm's ldexp an element, and two factors built from bits do it (the results are the same bits either way).
#: Numba's cache keys compiled code by the host's CPU and features, so a cache moved between hosts stays right
SCALEF = avx512()


@njit(inline="always", **_JIT)
def _horner(coeffs, u):
    """sum(coeffs[i] * u**i); the loop over a constant tuple unrolls completely."""
    r = coeffs[len(coeffs) - 1]
    for i in range(len(coeffs) - 2, -1, -1):
        r = r * u + coeffs[i]
    return r


def _piece(ftype, piece):
    """(scale, shift, coefficients) of a fitted piece: u = v * scale + shift maps [a, b] to [-1, 1]."""
    a, b, coeffs = piece
    return ftype(2 / (b - a)), ftype(-(a + b) / (b - a)), tuple(ftype(c) for c in coeffs)


def _build(ftype, itype, mant: int, pieces: dict, exp_terms: int, log_terms: int, limits: dict,
           exp_poly: tuple | None = None, scalef: bool = SCALEF):
    """The functions for one float type; constants live in the closure (Numba freezes them)."""
    F, Int = ftype, itype  # noqa: N806  (type constructors, as in the generated kernels)
    bias = 127 if mant == 23 else 1023
    bits = bits_f32 if F is np.float32 else bits_f64
    width = 32 if F is np.float32 else 64
    sign_bit, abs_mask = Int(-(2 ** (width - 1))), Int(2 ** (width - 1) - 1)
    exp_mask, mant_mask, one_bits = Int(2 ** (width - 1 - mant) - 1), Int(2**mant - 1), Int(bias << mant)
    one, two, half, zero = F(1), F(2), F(0.5), F(0)
    inf, nan = F(np.inf), F(np.nan)
    log2e, ln2_hi, ln2_lo = F(1.4426950408889634), F(limits["ln2_hi"]), F(limits["ln2_lo"])
    exp_lo, exp_hi = F(limits["exp_lo"]), F(limits["exp_hi"])
    min_normal, subnormal_scale = F(np.finfo(F).tiny), F(2.0**mant)
    sqrt2 = F(1.4142135623730951)
    exp_tail = tuple(F(1 / math.factorial(n)) for n in range(2, exp_terms + 1))
    # float32: e**r on the reduced range as one fitted polynomial in plain Horner (6 fused multiply-adds; Taylor's
    # 1 + (r + r^2 Q(r)) took 8 operations: exp 0.194 -> 0.179 ns an element, one core, same 1.05 ulp measured)
    fitted = exp_poly is not None
    exp_coeffs = tuple(F(c) for c in exp_poly[2]) if fitted else (one,)
    log_series = tuple(F(2 / (2 * n + 1)) for n in range(1, log_terms + 1))
    erf_small, erf_mid, erf_tail, tanh_small = (
        _piece(F, pieces[k]) for k in ("erf_small", "erf_mid", "erf_tail", "tanh_small")
    )
    erf_one = F(1 / pieces["erf_tail"][0])  # |x| beyond which erf rounds to +-1
    # float32: one piece for 1 <= |x| < erf_one (erf_far) where the mid and tail pieces were both evaluated
    # (erf 0.380 -> 0.354 ns an element, one core; the same 1.5-ulp bound holds)
    far = "erf_far" in pieces
    erf_far = _piece(F, pieces["erf_far"]) if far else erf_tail
    tanh_split, erf_split_lo, erf_split_hi = F(0.875), F(1.0), F(2.0)

    @njit(inline="always", **_JIT)
    def copysign(r, x):
        return bits((float_bits(r) & abs_mask) | (float_bits(x) & sign_bit))

    @njit(**_JIT)
    def exp(x):
        """e**x. Max error: 1.5 ulp (float32 and float64; about 1 measured)."""
        # clamped by max/min (vmaxps/vminps; the two selects took two compares and two blends). A NaN comes out
        # of the clamp as either bound or as NaN, runs through as garbage and is put back at the end
        xc = min(max(x, exp_lo), exp_hi)
        k = np.rint(xc * log2e)
        r = (xc - k * ln2_hi) - k * ln2_lo  # Cody-Waite: k * ln2_hi is exact
        p = _horner(exp_coeffs, r) if fitted else one + (r + r * r * _horner(exp_tail, r))
        ki = Int(k)
        if scalef:   # p * 2**k by vscalefps/pd: one instruction, one rounding (exp 0.336 -> 0.217 ns an element)
            y = ldexp(p, ki)
        else:
            k1 = ki >> 1  # 2**k as two normal factors: covers overflow and subnormal results, one rounding
            y = p * bits((k1 + bias) << mant) * bits((ki - k1 + bias) << mant)
        return y if x == x else x

    @njit(**_JIT)
    def log(x):
        """Natural log; log(0) = -inf, log(x < 0) = NaN. Max error: 1 ulp (float32 and float64)."""
        tiny = x < min_normal
        ix = float_bits(x * (subnormal_scale if tiny else one))
        e = ((ix >> mant) & exp_mask) - bias - (mant if tiny else 0)
        m = bits((ix & mant_mask) | one_bits)  # mantissa in [1, 2)
        big = m > sqrt2
        m = m * half if big else m
        k = F(e + 1 if big else e)
        f = m - one  # exact; log(1 + f) = f - hfsq + s * (hfsq + R), s = f / (2 + f), R = 2s^2/3 + 2s^4/5 ...
        s = f / (two + f)
        z = s * s
        hfsq = half * f * f
        big_r = z * _horner(log_series, z)
        y = k * ln2_hi - ((hfsq - (s * (hfsq + big_r) + k * ln2_lo)) - f)
        y = y if x > zero else (-inf if x == zero else nan)
        return y if x < inf else x + x

    @njit(**_JIT)
    def tanh(x):
        """Hyperbolic tangent (odd: keeps -0.0). Max error: 1.5 ulp (float32 and float64)."""
        a = abs(x)
        small = a + a * _horner(tanh_small[2], a * a * tanh_small[0] + tanh_small[1])
        large = one - two / (exp(a + a) + one)  # exp(2a) = inf gives exactly 1
        return copysign(small if a < tanh_split else large, x)

    @njit(**_JIT)
    def erf(x):
        """Error function (odd: keeps -0.0). Max error: 1.5 ulp (float32; float64 against math.erf)."""
        a = abs(x)
        z = a * a
        small = a + a * _horner(erf_small[2], z * erf_small[0] + erf_small[1])
        ez = exp(-z)
        if far:
            outer = one - ez * _horner(erf_far[2], (one / a) * erf_far[0] + erf_far[1])
            r = small if a < erf_split_lo else (outer if a < erf_one else one)
        else:
            mid = one - ez * _horner(erf_mid[2], a * erf_mid[0] + erf_mid[1])
            tail = one - ez * _horner(erf_tail[2], (one / a) * erf_tail[0] + erf_tail[1])
            r = small if a < erf_split_lo else (mid if a < erf_split_hi else (tail if a < erf_one else one))
        return copysign(r, x) if x == x else x

    @njit(**_JIT)
    def sigmoid(x):
        """1 / (1 + e**-x), without overflow and keeping subnormal results. Max error: 2.5 ulp."""
        e = exp(-abs(x))
        return (one if x >= zero else e) / (one + e)

    return SimpleNamespace(exp=exp, log=log, tanh=tanh, erf=erf, sigmoid=sigmoid)


# fmt: off
def functions(dtype, scalef: bool = SCALEF) -> SimpleNamespace:
    """exp, log, tanh, erf and sigmoid for ``dtype`` (np.float32 or np.float64); ``scalef``: 2**k by
    ``bits.ldexp`` (the default where the host has AVX-512) or by two factors."""
    if dtype is np.float32:
        return _build(np.float32, np.int32, 23, {
            "erf_small": C.ERF_SMALL_F32, "erf_mid": C.ERF_MID_F32, "erf_tail": C.ERF_TAIL_F32,
            "erf_far": C.ERF_FAR_F32, "tanh_small": C.TANH_SMALL_F32}, exp_terms=7, log_terms=5,
            limits={"ln2_hi": 0.693145751953125, "ln2_lo": 1.4286068203094173e-06, "exp_lo": -104.0,
                    "exp_hi": 89.0},
            exp_poly=C.EXP_REDUCED_F32, scalef=scalef)
    return _build(np.float64, np.int64, 52, {
        "erf_small": C.ERF_SMALL_F64, "erf_mid": C.ERF_MID_F64, "erf_tail": C.ERF_TAIL_F64,
        "tanh_small": C.TANH_SMALL_F64}, exp_terms=13, log_terms=11,
        limits={"ln2_hi": 0.6931471803691238, "ln2_lo": 1.9082149292705877e-10, "exp_lo": -746.0,
                "exp_hi": 710.0}, scalef=scalef)


_F32, _F64 = functions(np.float32), functions(np.float64)
# fmt: on

#: ulp bounds the tests hold each function to (same for float32 and float64)
ERROR_BOUNDS_ULP = {"exp": 1.5, "log": 1.0, "tanh": 1.5, "erf": 1.5, "sigmoid": 2.5, "pow": 1.0}

exp_f32, exp_f64 = _F32.exp, _F64.exp
log_f32, log_f64 = _F32.log, _F64.log
tanh_f32, tanh_f64 = _F32.tanh, _F64.tanh
erf_f32, erf_f64 = _F32.erf, _F64.erf
sigmoid_f32, sigmoid_f64 = _F32.sigmoid, _F64.sigmoid


@njit(**_JIT)
def pow_f32(x, y):
    """x**y for float32 as exp(y log|x|) in float64 (vectorizes, unlike libm powf). Max error: 1 ulp.

    The C99/numpy special cases are selected explicitly: y == 0 or x == 1 gives 1, (+-1)**+-inf gives 1, a
    finite negative base with a non-integer exponent gives NaN, an odd integer exponent keeps the sign of x
    (-0.0 too).
    """
    xd, yd = np.float64(x), np.float64(y)
    r = exp_f64(yd * log_f64(abs(xd)))
    y_fraction = np.floor(yd) != yd  # NaN too; +-inf count as even integers
    y_odd = (not y_fraction) & (abs(yd) < 9007199254740992.0) & (np.floor(yd * 0.5) * 2.0 != yd)
    r = -r if y_odd & (float_bits(x) < 0) else r
    r = np.nan if (x < 0) & (x > -np.inf) & y_fraction else r
    one = (yd == 0.0) | (xd == 1.0) | ((abs(xd) == 1.0) & (abs(yd) == np.inf))
    return np.float32(1.0 if one else r)


# ---------------------------------------------------------------------------- scalar semantics helpers
@njit(inline="always", **_JIT)
def maximum(a, b):
    """np.maximum: NaN wins."""
    return a if (a > b) | (a != a) else b


@njit(inline="always", **_JIT)
def minimum(a, b):
    """np.minimum: NaN wins."""
    return a if (a < b) | (a != a) else b


@njit(inline="always", **_JIT)
def int_div(a, b):
    """Integer division truncating toward zero (C and onnxruntime semantics; Python's // floors).

    As the reference computes it where C leaves it undefined: a zero divisor gives 0, MIN / -1 wraps to MIN
    (Numba's ``//`` gives 0 for both, and the truncation fix-up then made -5 / 0 into 1)."""
    q = a // b
    q = q + ((a - q * b != 0) & ((a < 0) != (b < 0)))
    q = (a - a) - a if b == -1 else q
    return q if b != 0 else a - a


@njit(inline="always", **_JIT)
def int_fmod(a, b):
    """C fmod for integers: the remainder takes the sign of the dividend; 0 for a zero divisor (numpy's) and for
    -1 (MIN % -1 overflows the product in between)."""
    return a - int_div(a, b) * b if (b != 0) & (b != -1) else a - a


@njit(**_JIT)
def int_pow(a, b):
    """a**b for integers by squaring; a negative exponent gives 0 unless |a| == 1 (numpy raises instead)."""
    if b < 0:
        if a == 1:
            return a
        if a == -1:
            return a if b % 2 else -a
        return a - a
    result, base, e = a - a + 1, a, b
    while e > 0:
        if e & 1:
            result = result * base
        base = base * base
        e = e >> 1
    return result


# ---------------------------------------------------------------------------- row reductions
@njit(nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"}, forceinline=True)
def acc_add(acc, x):
    """``acc + x`` that LLVM may reassociate: a sum over a loop vectorizes into several partial sums.

    Only this one addition carries the flag (it keeps it when inlined), so the kernel around it stays strict.
    """
    return acc + x
