"""Derives the polynomial coefficients of ``tlc.kernels.mathlib`` (a development tool, never imported by tlc).

Run ``python -m tlc.kernels.mathfit > tlc/kernels/_coefficients.py``. Each piece is a Chebyshev interpolant of
the target function, computed in 60-digit decimal arithmetic (reference values from Taylor series), converted
exactly to monomial coefficients in the mapped variable ``u = (2 v - a - b) / (b - a)`` and rounded to the
target dtype. The smallest degree whose error (measured in decimal, with the rounded coefficients) meets the
target is kept. Only the errors of the approximation are checked here; the tests measure whole functions in
ulps against numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np

getcontext().prec = 60
PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899")
SQRT_PI = PI.sqrt()
TINY = Decimal(10) ** -58


def erf(x: Decimal) -> Decimal:
    """erf by its Taylor series (converges everywhere; 60 digits absorb the cancellation for |x| <= 6)."""
    total, term, n, x2 = Decimal(0), x, 0, x * x
    while True:
        piece = term / (2 * n + 1)
        total += piece
        if abs(piece) < TINY and n > 5:
            return 2 * total / SQRT_PI
        n += 1
        term = -term * x2 / n


def tanh(x: Decimal) -> Decimal:
    e = (2 * x).exp()
    return (e - 1) / (e + 1)


def _cos(t: Decimal) -> Decimal:
    total, term, n, t2 = Decimal(0), Decimal(1), 0, t * t
    while abs(term) > TINY:
        total += term
        n += 2
        term = -term * t2 / (n * (n - 1))
    return total


def chebyshev_monomials(f: Callable[[Decimal], Decimal], a: Decimal, b: Decimal, deg: int) -> list[Fraction]:
    """Monomial coefficients (in u on [-1, 1]) of the degree-``deg`` Chebyshev interpolant of f on [a, b]."""
    n = deg + 1
    nodes = [_cos(PI * (j + Decimal("0.5")) / n) for j in range(n)]
    values = [f((a + b) / 2 + (b - a) / 2 * u) for u in nodes]
    cheb = []
    for k in range(n):
        s = sum((v * _cos(PI * k * (j + Decimal("0.5")) / n) for j, v in enumerate(values)), Decimal(0))
        cheb.append(Fraction(s * 2 / n) / (2 if k == 0 else 1))
    basis = [[Fraction(1)], [Fraction(0), Fraction(1)]]
    for k in range(2, n):
        nxt = [Fraction(0)] * (k + 1)
        for i, c in enumerate(basis[-1]):
            nxt[i + 1] += 2 * c
        for i, c in enumerate(basis[-2]):
            nxt[i] -= c
        basis.append(nxt)
    mono = [Fraction(0)] * n
    for k in range(n):
        for i, c in enumerate(basis[k]):
            mono[i] += cheb[k] * c
    return mono


def max_error(f, a: Decimal, b: Decimal, coeffs: list[float], scale, samples: int = 300) -> float:
    worst = Decimal(0)
    for i in range(samples + 1):
        v = a + (b - a) * i / samples
        u = (2 * v - a - b) / (b - a)
        p = Decimal(0)
        for c in reversed(coeffs):
            p = p * u + Decimal(c)
        worst = max(worst, abs(p - f(v)) / scale(v))
    return float(worst)


def fit(name: str, f, a: str, b: str, dtype: str, target: float, scale=lambda v: Decimal(1)) -> str:
    lo, hi = Decimal(a), Decimal(b)

    def attempt(deg: int) -> tuple[list[float], float]:
        coeffs = [float(np.dtype(dtype).type(float(c))) for c in chebyshev_monomials(f, lo, hi, deg)]
        return coeffs, max_error(f, lo, hi, coeffs, scale)

    deg, coeffs, err = _smallest(attempt, target)
    return _entry(name, f"degree {deg} on [{a}, {b}], max error {err:.2e}", (float(lo), float(hi)), coeffs)


def fit_monomials(name: str, f, b: str, dtype: str, target: float, scale) -> str:
    """As ``fit`` on [-b, b], with the coefficients in v itself (u = v / b folded into them: the caller runs
    plain Horner, no mapping of its argument). The entry's interval is (0, 0): nothing to map."""
    hi = Decimal(b)

    def attempt(deg: int) -> tuple[list[float], float]:
        mono = [c / Fraction(hi) ** i for i, c in enumerate(chebyshev_monomials(f, -hi, hi, deg))]
        coeffs = [float(np.dtype(dtype).type(float(c))) for c in mono]
        # measured in v: the u-form checker with the interval [-1, 1] scaled to [-b, b]
        return coeffs, max_error(lambda u: f(u * hi), Decimal(-1), Decimal(1),
                                 [c * float(hi) ** i for i, c in enumerate(coeffs)], lambda u: scale(u * hi))

    deg, coeffs, err = _smallest(attempt, target)
    return _entry(name, f"degree {deg} on [-{b}, {b}] in v itself (no mapping), max relative error {err:.2e}",
                  (0.0, 0.0), coeffs)


def _smallest(attempt, target: float) -> tuple[int, list[float], float]:
    """The smallest degree (3 to 29) whose rounded coefficients ``attempt`` finds within ``target``, or 29."""
    for deg in range(3, 30):
        coeffs, err = attempt(deg)
        if err <= target:
            break
    return deg, coeffs, err


def _entry(name: str, what: str, interval: tuple[float, float], coeffs: list[float]) -> str:
    body = "".join(f"    {c!r},\n" for c in coeffs)
    return f"# {name}: {what}\n{name.upper()} = ({interval[0]!r}, {interval[1]!r}, (\n{body}))\n"


def _exp(v: Decimal) -> Decimal:
    return v.exp()


def _erf_over_x_minus_1(z: Decimal) -> Decimal:
    return (erf(z.sqrt()) / z.sqrt() if z > 0 else 2 / SQRT_PI) - 1


def _erfc_scaled(x: Decimal) -> Decimal:
    return (1 - erf(x)) * (x * x).exp()


def _erfc_scaled_of_inverse(t: Decimal) -> Decimal:
    return _erfc_scaled(1 / t)


def _tanh_over_x_minus_1(z: Decimal) -> Decimal:
    return (tanh(z.sqrt()) / z.sqrt() if z > 0 else Decimal(1)) - 1


def _exp_of_square(v: Decimal) -> Decimal:
    return (v * v).exp()


def _exp_of_inverse_square(t: Decimal) -> Decimal:
    return (1 / (t * t)).exp()


PIECES = [
    # erf(x) = x + x * P(x^2) for |x| < 1 (the leading term stays exact; error: absolute in P)
    ("erf_small", _erf_over_x_minus_1, "0", "1", {"float64": 2e-17, "float32": 5e-9}, None),
    # erf(x) = 1 - exp(-x^2) G(x) for 1 <= |x| < 2 (error: absolute in erfc)
    ("erf_mid", _erfc_scaled, "1", "2", {"float64": 2e-17, "float32": 1e-8}, _exp_of_square),
    # erf(x) = 1 - exp(-x^2) H(1/x) for 2 <= |x| < 6 (float64) / 4 (float32)
    (
        "erf_tail",
        _erfc_scaled_of_inverse,
        "0.1666666666666666666666666666667",
        "0.5",
        {"float64": 1e-17},
        _exp_of_inverse_square,
    ),
    ("erf_tail", _erfc_scaled_of_inverse, "0.25", "0.5", {"float32": 3e-9}, _exp_of_inverse_square),
    # float32: erf(x) = 1 - exp(-x^2) H(1/x) for 1 <= |x| < 4 in one piece (degree 7, as erf_mid alone: the mid
    # piece's polynomial is no longer evaluated beside the tail's)
    ("erf_far", _erfc_scaled_of_inverse, "0.25", "1", {"float32": 1e-8}, _exp_of_inverse_square),
    # tanh(x) = x + x * Q(x^2) for |x| < 0.875 (error: absolute in Q)
    ("tanh_small", _tanh_over_x_minus_1, "0", "0.765625", {"float64": 1e-17, "float32": 1e-8}, None),
]


def main() -> None:
    print(
        '"""Polynomial coefficients for tlc.kernels.mathlib, generated by `python -m tlc.kernels.mathfit`;'
        " do not edit.\n\nEach entry is (a, b, coefficients): the polynomial is in"
        ' u = (2 v - a - b) / (b - a),\nlowest degree first.\n"""\n'
    )
    for name, f, a, b, targets, scale in PIECES:
        for dtype, target in targets.items():
            suffix = "f64" if dtype == "float64" else "f32"
            print(fit(f"{name}_{suffix}", f, a, b, dtype, target, scale or (lambda v: Decimal(1))))
    # float32 exp(r) on the reduced range (|r| <= ln2 / 2, widened for k's rounding) in plain Horner: degree 6
    # in 6 fused multiply-adds, where Taylor's degree 7 took 8 operations (1 + (r + r^2 Q(r)))
    print(fit_monomials("exp_reduced_f32", _exp, "0.347", "float32", 3e-8, _exp))


if __name__ == "__main__":
    main()
