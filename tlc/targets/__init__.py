"""Targets: one ``Target`` object per target (``cpu``, ``cuda``), which passes, kernels and the runtime ask.

``get("cpu")`` turns what a caller passed (a name or a ``Target``) into the object; ``names()`` lists them. A new
target is a new module here that calls ``register(Target(...))``, imported below (or by its user), with hooks
naming its kernel class, renderer, library and runtime op table (see ``base``).
"""

from . import cpu as _cpu
from . import cuda as _cuda
from .base import Target, TargetCosts, all_targets, find, get, names, register, unregister

CPU = _cpu.CPU
CUDA = _cuda.CUDA

__all__ = ["CPU", "CUDA", "Target", "TargetCosts", "all_targets", "find", "get", "names", "register", "unregister"]
