"""Choices made for the machine before numpy loads: which OpenBLAS kernels numpy's BLAS uses.

numpy's OpenBLAS (scipy-openblas, built for several CPUs) picks its kernels when it loads. On AMD Zen 4 and
later, which report AVX-512, it picks the SkylakeX kernels; but Zen 4 runs AVX-512 as two 256-bit halves, and
its Haswell (AVX2) kernels are faster. Measured on the 2-core EPYC (Zen 4), one thread, sgemm through numpy:

| M x K x N          | SkylakeX GFLOP/s | Haswell GFLOP/s |
|--------------------|-----------------:|----------------:|
| 128 x 768 x 768    | 101.6            | 108.4           |
| 128 x 768 x 3072   | 89.7             | 106.6           |
| 128 x 3072 x 768   | 95.3             | 98.5            |
| 64 x 784 x 1024    | 78.5             | 103.6           |
| 512 x 512 x 512    | 100.2            | 106.9           |

(transformer_block at one thread: 21.4 ms with SkylakeX, 19.6 ms with Haswell kernels.) So when tlc is imported
before numpy on such a CPU, it asks OpenBLAS for its Haswell kernels (``OPENBLAS_CORETYPE=Haswell``), unless
the user chose a core type. Zen 5 (CPU family 26) runs AVX-512 at full width, and there the SkylakeX kernels,
which OpenBLAS picks by itself, are the fast ones (2-core EPYC Zen 5, one thread, GFLOP/s SkylakeX / Haswell:
128 x 768 x 768 214 / 119, 128 x 768 x 3072 179 / 111, 64 x 784 x 1024 140 / 115, 512^3 235 / 120): the
choice is Zen 4's only (CPU family 25). Once numpy has loaded, the choice is made; ``blas_note()`` then says
how to get the faster kernels. ``import tlc`` imports this module first, which makes the choice. This is a leaf
module: it imports nothing of tlc, and nothing that loads numpy.
"""

from __future__ import annotations

import functools
import os
import sys

_applied = False


#: AMD's CPU family of Zen 3 and Zen 4 (Zen 5 is 26)
ZEN4_FAMILY = 25


@functools.cache   # read once: at ``import tlc`` (the BLAS choice) and by the conv cost model's host rates
def _cpu_flags() -> tuple[str, frozenset[str], int]:
    """The first CPU's vendor, flags and family in /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read(65536)
    except OSError:
        return "", frozenset(), -1
    vendor, flags, family = "", frozenset(), -1
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
        elif key == "cpu family" and family < 0 and value.strip().isdigit():
            family = int(value)
    return vendor, flags, family


@functools.cache   # once per process: LLVM's feature string took ~0.35 ms, twice per product bound
def avx512() -> bool:
    """Whether LLVM compiles for AVX-512 here (the panel kernels' and mathlib's vscalef paths)."""
    import llvmlite.binding as llvm

    return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")


def zen4() -> bool:
    """An AMD CPU of family 25 (Zen 3 and Zen 4; Zen 4 runs AVX-512 in two 256-bit halves)."""
    vendor, _, family = _cpu_flags()
    return _zen4(vendor, family)


def _zen4(vendor: str, family: int) -> bool:
    return vendor == "AuthenticAMD" and family == ZEN4_FAMILY


def wants_haswell_kernels() -> bool:
    """A Zen 4 (``zen4`` with AVX-512), where OpenBLAS's Haswell kernels beat its SkylakeX ones."""
    vendor, flags, family = _cpu_flags()
    return _zen4(vendor, family) and "avx512f" in flags


def choose_blas_kernels(environ: dict | None = None, numpy_loaded: bool | None = None) -> bool:
    """Set ``OPENBLAS_CORETYPE`` before numpy loads, where that is faster here; True when it was set."""
    global _applied
    env = os.environ if environ is None else environ
    loaded = "numpy" in sys.modules if numpy_loaded is None else numpy_loaded
    if loaded or "OPENBLAS_CORETYPE" in env or not wants_haswell_kernels():
        return False
    env["OPENBLAS_CORETYPE"] = "Haswell"
    _applied = environ is None
    return True


def blas_note() -> str:
    """Empty, or why numpy's BLAS runs slower kernels than it could here."""
    if _applied or "OPENBLAS_CORETYPE" in os.environ or not wants_haswell_kernels():
        return ""
    return ("numpy was imported before tlc, so OpenBLAS runs its SkylakeX kernels on this AMD Zen 4 CPU; its "
            "Haswell kernels are up to 30% faster here: import tlc first, or set OPENBLAS_CORETYPE=Haswell")


choose_blas_kernels()
