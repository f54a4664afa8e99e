"""A step bound to concrete shapes: the calls the generated runner makes for it, its scratch, how it runs.

Binding happens once per input-shape signature (``specialize.py``). A ``Bound`` lists ``Call``s, each a Python
callable with arguments that are either references to the run's arrays (``V``: a value as its N-D array, ``F``:
the same value flat, ``W``: one of the step's scratch arrays) or constants (bound into the runner's namespace,
never pasted into source). ``runner.py`` turns the calls of every step into one straight-line function.

A step whose native kernel must be compiled first carries a ``KernelRequest``: the runner calls ``calls`` (the
fallback: the op's reference, written into the planned outputs) until the request's job has a kernel, then
``request.calls(kernel)``. Both write the same outputs, so the memory plan does not change when a kernel arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..ir.types import TensorType


class Ref(NamedTuple):
    """An array of the run: ``kind`` "v" (value ``index`` as its N-D array), "f" (the value flat, 1-D), "w"
    (scratch array ``index`` of the step) or "fw" (that scratch array flat)."""

    kind: str
    index: int


def V(value: int) -> Ref:
    return Ref("v", value)


def F(value: int) -> Ref:
    return Ref("f", value)


def W(k: int) -> Ref:
    return Ref("w", k)


def FW(k: int) -> Ref:
    return Ref("fw", k)


class Call(NamedTuple):
    """``result = fn(*args, **kwargs)``; ``result``: the value ids its return value is assigned to (none: the
    call writes into arrays it was given); ``unpack``: the call returns a sequence of them (else one array)."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] | None = None
    result: tuple[int, ...] = ()
    unpack: bool = False


class NotNative(Exception):
    """A step's implementation cannot take these attributes or shapes; the reason goes to ``plan.stats()``."""


def serial(fn: Callable) -> Callable:
    """Mark a Python function a step calls as one that runs on the calling thread only (numpy, no Numba pool):
    a plan whose every call is serial runs at one thread (``runner.uses_pool``), with no thread governance or
    probing. Unmarked Python functions are taken to use the pool."""
    fn.tlc_serial = True
    return fn


class KernelRequest:
    """A native kernel a step needs compiled: ``build(alias)`` compiles it (on the JIT thread or now) and returns
    what ``calls(kernel, alias)`` turns into the step's calls. ``alias``: per output, the input whose buffer the
    memory plan gave it (-1: its own), known only after memory planning."""

    def __init__(self, name: str, build: Callable[[tuple[int, ...] | None], Any],
                 calls: Callable[[Any, tuple[int, ...] | None], list[Call]]):
        self.name = name
        self.build = build
        self.calls = calls


@dataclass
class Bound:
    """One step bound to concrete shapes (see the module docstring)."""

    calls: list[Call]
    mode: str = "library"                 # native | library | view | reference
    note: str = ""                        # what was chosen, or why reference
    workspace: list[tuple[tuple[int, ...], np.dtype]] = field(default_factory=list)
    writes_outputs: bool = True           # False: returns arrays of its own (views, reference results)
    inplace: bool = False                 # elementwise: an output may take the buffer of an input dying here
    donors: tuple[int, ...] | None = None   # with ``inplace``: the input ports that may give it (None: any)
    request: KernelRequest | None = None  # a native kernel to compile; ``calls`` run until it is ready
    out_strides: list[tuple[int, ...] | None] | None = None   # view steps: the strides of each output
    blas: bool = False                    # calls BLAS (the run then sets BLAS to one thread)
    joins: bool = False                   # its inputs are consecutive ranges of its one output (the memory
                                          # planner may have their producers write them there: then no calls)


def static_shapes(types: list[TensorType | None], what: str) -> list[tuple[int, ...] | None]:
    """The concrete shapes of ``types`` (None for a missing optional value); NotNative when one is not known."""
    shapes: list[tuple[int, ...] | None] = []
    for i, t in enumerate(types):
        if t is None:
            shapes.append(None)
        elif not t.is_static:
            raise NotNative(f"{what} {i} has no static shape ({t})")
        else:
            shapes.append(tuple(t.shape))
    return shapes


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))
