"""Where a run's arrays live: ``HOST`` (numpy, the CPU target) or a device's memory (``CUDA_MEMORY``).

A ``Memory`` gives the runtime what it needs to keep a plan's arrays on a target: the array module the target's
library steps compute with (``xp``: numpy, or CuPy on a GPU: the same API, so one step implementation serves
both), buffers for the arena, and the two transfers. A plan of a ``memory="device"`` target copies its feeds to
the device once at the start of a run and its outputs back once at the end (``runner.py``); every intermediate
lives in the arena's device buffers.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) device memory *is* host memory: ``xp`` is numpy and
the transfers are identities (outputs are still copied, so the caller owns them), and the simulated kernels take
numpy arrays. That is how the device plan's structure, its steps and its kernels are tested without a GPU; on a
GPU the same code runs on CuPy arrays, which Numba's kernels take through the CUDA Array Interface (no copies).
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import CompileError
from .memory import ALIGN


class Memory:
    """Host memory: numpy arrays, transfers that copy nothing."""

    device = False

    @property
    def xp(self):
        return np

    def empty(self, nbytes: int):
        """A 1-D uint8 buffer of ``nbytes``, ``ALIGN``-byte aligned."""
        raw = np.empty(nbytes + ALIGN, np.uint8)
        offset = (-raw.ctypes.data) % ALIGN
        return raw[offset:offset + nbytes]

    def to_device(self, a: np.ndarray):
        return a

    def to_host(self, a) -> np.ndarray:
        return a

    def is_device_array(self, a) -> bool:
        return isinstance(a, np.ndarray)

    def copy(self, a):
        """A copy of ``a`` where it lies (a graph output the caller will own)."""
        return np.array(a)

    def host(self, a):
        """``a`` on the host: a device array copied there, anything else (a host array, None, a sequence) as it
        is."""
        return self.to_host(a) if self.is_device_array(a) else a


class CudaMemory(Memory):
    """A CUDA device's memory through CuPy (``pip install "tlc[cuda]"``); host memory under the simulator."""

    device = True

    @functools.cached_property
    def simulated(self) -> bool:
        from numba import config

        return bool(config.ENABLE_CUDASIM)

    @functools.cached_property
    def xp(self):
        if self.simulated:
            return np
        try:
            import cupy
        except ImportError as exc:
            raise CompileError(f"plans for the cuda target keep their arrays in CuPy arrays; install CuPy "
                               f"(pip install \"tlc[cuda]\"): {exc}") from exc
        return cupy

    def empty(self, nbytes: int):
        if self.simulated:
            return super().empty(nbytes)
        return self.xp.empty(nbytes, np.uint8)   # CuPy's allocations are 256-byte aligned

    def to_device(self, a: np.ndarray):
        if self.simulated or a.dtype.name not in DEVICE_DTYPES:
            return a     # float8, bfloat16 (ml_dtypes) and strings: CuPy holds none; only host steps read them
        return self.xp.asarray(a)

    def to_host(self, a) -> np.ndarray:
        if self.simulated:
            return np.array(a)
        return a.get() if hasattr(a, "get") else np.array(a)

    def is_device_array(self, a) -> bool:
        return isinstance(a, self.xp.ndarray)

    def copy(self, a):
        # an array of a dtype CuPy cannot hold came from a host step and stays on the host
        return self.xp.array(a) if self.is_device_array(a) else np.array(a)


#: dtypes CuPy arrays hold (ml_dtypes' float8 types say kind "f" too, so they are named, not kinds)
DEVICE_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                            "float16", "float32", "float64", "complex64", "complex128"})

HOST = Memory()
CUDA_MEMORY = CudaMemory()


def memory_of(target) -> Memory:
    """The ``Memory`` a target's plans keep their arrays in (``Target.arrays``; host when it names none)."""
    found = target.resolve("arrays") if target.arrays is not None else None
    return HOST if found is None else found


def on_host(fn, memory: Memory):
    """``fn`` (a host function of arrays returning a list of results) called on a device's arrays: its array
    inputs copied to the host, its array results copied to the device (the reference of a step the device has no
    implementation of; ``plan.stats()`` lists such steps)."""
    def call(*ins):
        results = fn(*[memory.host(a) for a in ins])
        return [memory.to_device(r) if isinstance(r, np.ndarray) else r for r in results]

    return call
