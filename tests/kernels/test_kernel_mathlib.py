"""Accuracy (in ulps, over the whole float range) and vectorization of tlc.kernels.mathlib.

References: numpy in float64 for float32 results, numpy in long double for float64 results, math.erf for erf.
Run this file as a script to print the accuracy table.
"""

from __future__ import annotations

import math
import re
from functools import cache

import numpy as np
import pytest
from kernel_helpers import vectorized
from numba import njit

from tlc._platform import avx512
from tlc.kernels import mathlib as ml

FUNCTIONS = ("exp", "log", "tanh", "erf", "sigmoid")
SUFFIX = {np.float32: "f32", np.float64: "f64"}


@cache
def loop_of(fn):
    """A jitted loop applying ``fn`` to an array (compiled once per function)."""

    @njit(error_model="numpy")
    def run(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])

    return run


@cache
def loop2_of(fn):
    @njit(error_model="numpy")
    def run(x, y, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i], y[i])

    return run


# fmt: off
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754944e-38, -1.1754944e-38, 3.4028235e38,
            -3.4028235e38, 1.0, -1.0, 0.5, -0.5, 0.625, 0.75, 0.875, 1.0000001, 2.0, 4.0, 9.0, 6.0, 22.0,
            88.72283, 88.7228394, 89.0, -87.33655, -103.97208, -104.0, 709.782712893384, 709.7827128933841,
            -745.1332191019411, -745.1332191019412, 5e-324, -5e-324, 2.2250738585072014e-308,
            1.7976931348623157e308]
# fmt: on


@cache
def sample(dtype) -> np.ndarray:
    """Every 997th float32 bit pattern (all exponents and signs), random values and the special cases."""
    rng = np.random.default_rng(1234)
    if dtype is np.float32:
        sweep = np.arange(0, 2**32, 997, dtype=np.uint64).astype(np.uint32).view(np.float32)
        wide = rng.standard_normal(200_000).astype(np.float32) * 8
    else:
        sweep = rng.integers(0, 2**64, size=600_000, dtype=np.uint64).view(np.float64)
        wide = np.concatenate([rng.standard_normal(200_000) * 8, rng.uniform(-750, 750, 100_000)])
    specials = np.array(SPECIALS, dtype=np.float64)
    with np.errstate(over="ignore"):
        specials = specials.astype(dtype)
    return np.concatenate([sweep, wide.astype(dtype), specials])


def reference(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64 if x.dtype == np.float32 else np.longdouble)
        if name == "erf":
            return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(wide.dtype)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-wide))
        return getattr(np, name)(wide)


def ulp_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the spacing of the target dtype at ref; 0 where both are the same inf/NaN."""
    dtype = got.dtype
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        spacing = np.spacing(np.abs(rounded)).astype(ref.dtype)
        err = np.abs(got.astype(ref.dtype) - ref) / spacing
        same = (np.isnan(got) & np.isnan(ref)) | (np.isinf(got) & (got == rounded)) | (got.astype(ref.dtype) == ref)
    err = np.where(same, 0.0, err)
    return np.where(np.isnan(err), np.inf, err)


def max_ulp(name: str, dtype) -> tuple[float, float]:
    """(max ulp error, the x where it occurs) of ``<name>_<dtype>`` over ``sample(dtype)``."""
    x = sample(dtype)
    out = np.empty_like(x)
    loop_of(getattr(ml, f"{name}_{SUFFIX[dtype]}"))(x, out)
    err = ulp_errors(out, reference(name, x))
    i = int(np.argmax(err))
    return float(err[i]), float(x[i])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_accuracy_within_stated_bound(name, dtype):
    error, where = max_ulp(name, dtype)
    bound = ml.ERROR_BOUNDS_ULP[name]
    assert f"{bound:g} ulp" in getattr(ml, f"{name}_{SUFFIX[dtype]}").__doc__
    assert error <= bound, f"{name}_{SUFFIX[dtype]}: {error:.3f} ulp at x={where!r} (bound {bound})"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_loop_vectorizes(name, dtype):
    run = loop_of(getattr(ml, f"{name}_{SUFFIX[dtype]}"))
    x = np.ones(8, dtype)
    run(x, x.copy())
    ir = "\n".join(run.inspect_llvm().values())
    assert vectorized(ir, np.dtype(dtype).name)
    calls = set(re.findall(r"call [^@]*@([\w.]+)", ir))
    assert not {c for c in calls if c.startswith(("exp", "log", "tanh", "erf"))}  # no libm calls


def test_special_values_and_signed_zero():
    for dtype in (np.float32, np.float64):
        s = SUFFIX[dtype]
        x = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan], dtype)
        results = {}
        for name in FUNCTIONS:
            out = np.empty_like(x)
            loop_of(getattr(ml, f"{name}_{s}"))(x, out)
            results[name] = out
        np.testing.assert_array_equal(results["exp"], [1, 1, np.inf, 0, np.nan])
        np.testing.assert_array_equal(results["log"], [-np.inf, -np.inf, np.inf, np.nan, np.nan])
        np.testing.assert_array_equal(results["tanh"], [0, 0, 1, -1, np.nan])
        np.testing.assert_array_equal(results["erf"], [0, 0, 1, -1, np.nan])
        np.testing.assert_array_equal(results["sigmoid"], [0.5, 0.5, 1, 0, np.nan])
        assert np.signbit(results["tanh"][0]) and np.signbit(results["erf"][0])
        assert not np.signbit(results["tanh"][1]) and not np.signbit(results["erf"][1])
        neg = np.array([-1.0, -1e-30], dtype)
        out = np.empty_like(neg)
        loop_of(getattr(ml, f"log_{s}"))(neg, out)
        assert np.isnan(out).all()


def test_exp_subnormal_results_and_overflow_threshold():
    x = np.array([-100.0, -103.0, -87.5, 88.72283, 88.7228394], np.float32)
    out = np.empty_like(x)
    loop_of(ml.exp_f32)(x, out)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)  # -100 and -103 give subnormals
    assert ulp_errors(out, np.exp(x.astype(np.float64))).max() <= 1
    assert np.isfinite(out[3]) and np.isinf(out[4]) and out[0] == want[0] and out[0] < np.finfo(np.float32).tiny


@pytest.mark.skipif(not avx512(), reason="vscalef is AVX-512's")
def test_exp_scaled_by_vscalef_gives_the_bits_of_two_factors():
    """Where the host has AVX-512, 2**k is one vscalef (``bits.ldexp``): the same bits as the two factors built
    from bits over every exponent, the subnormal results and the overflow (exp and sigmoid, both widths)."""
    for dtype in (np.float32, np.float64):
        fast, slow = ml.functions(dtype, scalef=True), ml.functions(dtype, scalef=False)
        x = sample(dtype)
        for name in ("exp", "sigmoid"):
            got, want = np.empty_like(x), np.empty_like(x)
            loop_of(getattr(fast, name))(x, got)
            loop_of(getattr(slow, name))(x, want)
            assert got.tobytes() == want.tobytes(), (name, dtype)
        run = loop_of(fast.exp)
        assert "vscalef" in run.inspect_asm(run.signatures[0])


def test_pow_f32_special_cases_match_numpy_and_accuracy():
    vals = np.array(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            2.0,
            -2.0,
            3.0,
            -3.0,
            np.inf,
            -np.inf,
            np.nan,
            1e-45,
            0.3,
            2.5,
            -2.5,
            1e30,
            16777216.0,
            1e20,
            -1e20,
        ],
        np.float32,
    )
    a, b = (m.ravel() for m in np.meshgrid(vals, vals))
    out = np.empty_like(a)
    run = loop2_of(ml.pow_f32)
    run(a, b, out)
    with np.errstate(all="ignore"):
        want = np.power(a, b)
        exact = np.power(a.astype(np.longdouble), b.astype(np.longdouble))
    # special results (inf, nan, zeros, exact powers) exactly as numpy; other finite results within the ulp
    # bound of the exact power (numpy's own float32 pow is not correctly rounded on AVX-512 hosts: 3 ** 0.5)
    special = ~np.isfinite(want) | (want == 0) | np.isin(np.abs(a), [0.0, 1.0]) | np.isin(b, [0.0, 1.0])
    np.testing.assert_array_equal(out[special], want[special])
    assert ulp_errors(out[~special], exact[~special]).max() <= ml.ERROR_BOUNDS_ULP["pow"]
    assert np.array_equal(np.signbit(out[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    rng = np.random.default_rng(5)
    x = (np.abs(rng.standard_normal(300_000)) * 10).astype(np.float32)
    y = (rng.standard_normal(300_000) * 8).astype(np.float32)
    out = np.empty_like(x)
    run(x, y, out)
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
    assert ulp_errors(out, ref).max() <= ml.ERROR_BOUNDS_ULP["pow"]
    ir = "\n".join(run.inspect_llvm().values())
    assert re.search(r"<\d+ x double>", ir)


def test_integer_helpers_follow_c_semantics():
    @njit
    def both(a, b):
        return ml.int_div(a, b), ml.int_fmod(a, b), ml.int_pow(a, b)

    for a, b in [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (0, 5)]:
        q, r, _ = both(a, b)
        assert q == int(a / b) and r == math.fmod(a, b)
    assert both(3, 4)[2] == 81 and both(-2, 3)[2] == -8 and both(2, -1)[2] == 0 and both(-1, -3)[2] == -1


if __name__ == "__main__":
    print("| function | dtype | max ulp | at x | bound |")
    print("|---|---|---|---|---|")
    for fname in FUNCTIONS:
        for dt in (np.float32, np.float64):
            e, at = max_ulp(fname, dt)
            print(f"| {fname} | {dt.__name__} | {e:.3f} | {at:.6g} | {ml.ERROR_BOUNDS_ULP[fname]} |")
