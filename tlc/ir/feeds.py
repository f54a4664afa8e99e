"""Checking feeds (name -> array) against a graph's declared inputs, with errors that say what was expected.

A sequence input takes a list of arrays and an optional input None or its value (``tlc.ir.types``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DTypeMismatchError, InputError, ShapeMismatchError
from .types import OptionalType, SequenceType, TensorType, ValueType, dtype_name, np_dtype

if TYPE_CHECKING:
    from .graph import Graph


def describe_inputs(specs: Sequence[tuple[str, TensorType]]) -> str:
    return ", ".join(f"{name}: {t}" for name, t in specs) or "(none)"


def check_feeds(specs: Sequence[tuple[str, ValueType]], feeds: Mapping[str, object]
                ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Validate ``feeds`` against ``specs``; returns the arrays (lists of arrays for sequences, None for empty
    optionals) and the sizes bound to symbolic dims (by tensor inputs only)."""
    check_names(specs, feeds)
    arrays: dict[str, np.ndarray] = {}
    bound: dict[str, tuple[int, str]] = {}
    for name, ttype in specs:
        raw = feeds[name]
        if not isinstance(ttype, TensorType):
            arrays[name] = _check_value(name, ttype, raw)
            continue
        array = _as_array(name, raw, ttype)
        try:
            got = dtype_name(array.dtype)
        except Exception:
            got = str(array.dtype)
        if got != ttype.dtype:
            raise DTypeMismatchError(f"input {name!r}: expected dtype {ttype.dtype}, got {got} "
                                     f"(shape {list(array.shape)})")
        if not array.dtype.isnative:   # '>f4' names float32 too; kernels read native bytes
            array = array.astype(array.dtype.newbyteorder("="))
        if ttype.shape is not None:
            if array.ndim != len(ttype.shape):
                raise ShapeMismatchError(f"input {name!r}: expected rank {len(ttype.shape)} shape {ttype}, "
                                         f"got shape {list(array.shape)}")
            for axis, (dim, size) in enumerate(zip(ttype.shape, array.shape)):
                if isinstance(dim, int) and dim != size:
                    raise ShapeMismatchError(f"input {name!r}: expected shape {ttype}, got {list(array.shape)} "
                                             f"(dim {axis} should be {dim})")
                if isinstance(dim, str):
                    if dim in bound and bound[dim][0] != size:
                        other_size, other = bound[dim]
                        raise ShapeMismatchError(f"input {name!r}: dim {axis} ({dim!r}) is {size}, but "
                                                 f"{dim!r} is {other_size} in input {other!r}")
                    bound.setdefault(dim, (size, name))
        arrays[name] = array
    return arrays, {k: v for k, (v, _) in bound.items()}


def check_names(specs: Sequence[tuple[str, ValueType]], feeds: object) -> None:
    """``feeds`` is a mapping that names every input of ``specs`` and nothing else; else an ``InputError``."""
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a dict of input name -> array; got {type(feeds).__name__}. "
                         f"Expected inputs: {describe_inputs(specs)}")
    wanted = dict(specs)
    unknown = [k for k in feeds if k not in wanted]
    if unknown:
        raise InputError(f"unknown input name(s) {', '.join(map(repr, unknown))}; "
                         f"expected inputs: {describe_inputs(specs)}")
    missing = [k for k in wanted if k not in feeds]
    if missing:
        raise InputError(f"missing input(s) {', '.join(map(repr, missing))}; "
                         f"expected inputs: {describe_inputs(specs)}")


def _check_value(name: str, vtype: ValueType, raw: object) -> object:
    """A sequence feed (a list or tuple of arrays) or an optional feed (None or its value), checked against its
    type: every element's dtype, rank and the sizes its element type fixes."""
    if isinstance(vtype, OptionalType):
        return None if raw is None else _check_value(name, vtype.elem, raw)
    if isinstance(vtype, SequenceType):
        if not isinstance(raw, (list, tuple)):
            raise InputError(f"input {name!r}: expected a sequence ({vtype}) as a list of arrays, got "
                             f"{type(raw).__name__}")
        items = [_check_value(f"{name}[{i}]", vtype.elem, a) for i, a in enumerate(raw)]
        return items
    array = _as_array(name, raw, vtype)
    try:
        got = dtype_name(array.dtype)
    except Exception:
        got = str(array.dtype)
    if got != vtype.dtype:
        raise DTypeMismatchError(f"input {name!r}: expected dtype {vtype.dtype}, got {got} (shape {list(array.shape)})")
    if not vtype.matches(array):
        raise ShapeMismatchError(f"input {name!r}: expected shape {vtype}, got {list(array.shape)}")
    return array


def _as_array(name: str, raw: object, ttype: TensorType) -> np.ndarray:
    """``raw`` as an array; what numpy cannot make one of (ragged nested lists) is an ``InputError``. A device
    array (one with the CUDA Array Interface: CuPy, Numba's) is returned as it is, for a device plan to read where
    it lies; its dtype and shape are checked like a numpy array's."""
    if isinstance(raw, np.ndarray) or hasattr(raw, "__cuda_array_interface__"):
        return raw
    try:
        array = np.asarray(raw)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"input {name!r}: expected an array of {ttype}, got a {type(raw).__name__} numpy cannot "
                         f"convert ({exc})") from None
    if array.dtype == object and array.ndim == 0 and not isinstance(raw, str):  # None, a dict, any object
        raise InputError(f"input {name!r}: expected an array of {ttype}, got {type(raw).__name__}")
    return array


def random_feeds(graph: Graph, seed: int = 0, symbol_size: int = 1) -> dict[str, np.ndarray]:
    """Fixed-seed feeds for every graph input: floats standard normal, integers in [0, 4), booleans at random;
    symbolic and unknown dims are ``symbol_size``. Sequence and optional inputs need feeds given."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for node in graph.inputs:
        t = node.output_types[0]
        if not isinstance(t, TensorType):
            raise InputError(f"input {node.name!r} has type {t}: random feeds are tensors only; give feeds "
                             f"(tlc-opt --feeds FILE.npz)")
        shape = [d if isinstance(d, int) else symbol_size for d in (t.shape or ())]
        dtype = np_dtype(t.dtype)
        if dtype.kind == "b":
            feeds[node.name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            feeds[node.name] = rng.integers(0, 4, shape).astype(dtype)
        elif dtype.kind in "OSU":
            feeds[node.name] = np.full(shape, "x", dtype=object)
        else:  # floats, complex and the ml_dtypes types
            feeds[node.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
