"""Value hints for the generator: what integer inputs and attributes get where random values almost never fit.

Keyed by names (of an input in ONNX's schema, or of an attribute), never by op: an int64 input called ``shape``
gets a reshape of the first input's shape, ``axes`` distinct axes of it, ``indices`` values in range of its
smallest dim, and so on; inference and the reference still decide whether a candidate is valid.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir.types import ONNX_TYPE_CODES
from ..ops.registry import REQUIRED

if TYPE_CHECKING:
    from .generate import Chooser

#: element types graphs are built from (others the registry knows are reached through Cast only)
DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")
#: string attributes: the values ONNX gives them across ops (inference refuses the ones an op does not take)
STRING_CHOICES = {
    "auto_pad": ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
    "mode": ("constant", "reflect", "edge", "wrap", "nearest", "linear", "cubic", "DCR", "CRD", "bilinear",
             "avg", "max", "bicubic"),
    "direction": ("LEFT", "RIGHT", "forward", "reverse", "bidirectional"),
    "reduction": ("none", "add", "mul", "max", "min", "mean", "sum"),
    "approximate": ("none", "tanh"),
    "coordinate_transformation_mode": ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                                       "tf_crop_and_resize", "half_pixel_symmetric"),
    "nearest_mode": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    "padding_mode": ("zeros", "border", "reflection"),
    "keep_aspect_ratio_policy": ("stretch", "not_larger", "not_smaller"),
    "equation": ("ij,jk->ik", "ij->ji", "ii->i", "ij->", "bij,bjk->bik", "ij,ij->ij", "i,i->", "ij->i"),
}
#: int attributes whose name says what values make sense (key: name; value: function of the first input's rank)
ATTR_HINTS = {
    "axis": lambda rank: list(range(-max(rank, 1), max(rank, 1))),
    "to": lambda rank: [ONNX_TYPE_CODES[d] for d in DTYPES],
    "dtype": lambda rank: [ONNX_TYPE_CODES[d] for d in DTYPES],
    "output_datatype": lambda rank: [ONNX_TYPE_CODES[d] for d in ("float32", "float64", "float16")],
    "output_dtype": lambda rank: [0, ONNX_TYPE_CODES["int8"], ONNX_TYPE_CODES["uint8"]],
    "blocksize": lambda rank: [1, 2],
    "group": lambda rank: [1, 2],
    "num_outputs": lambda rank: [1, 2, 3],
}


def int_hint(name: str, base: tuple[int, ...], choose: Chooser) -> np.ndarray:
    """Values for an integer input called ``name`` of an op whose first input has shape ``base``: what makes
    sense for a shape, axes, indices, slice bounds, pads, repeats, split sizes or a count."""
    rank = len(base)
    dims = [d for d in base] or [1]
    lname = name.lower()
    if lname in ("shape", "sizes", "output_shape"):
        return np.array(reshape_target(base, choose), np.int64)
    if "axes" in lname or lname == "axis":
        k = choose.integer(1, max(1, min(2, rank)))
        axes = sorted({choose.integer(-max(rank, 1), max(rank, 1) - 1) for _ in range(k)})
        return np.array(axes if lname != "axis" else axes[0], np.int64)
    if "indices" in lname or lname in ("index", "y"):
        top = max(1, min(dims))
        shape = choose.choice([(), (choose.integer(1, 3),), base, (choose.integer(1, 3), 1)])
        return np.random.default_rng(choose.integer(0, 2**31)).integers(-top if choose.coin(0.2) else 0, top,
                                                                          shape).astype(np.int64)
    if lname in ("target", "labels") and rank >= 2:  # class indices for scores (N, C, d...)
        values = np.random.default_rng(choose.integer(0, 2**31)).integers(0, max(base[1], 1), base[:1] + base[2:])
        return values.astype(np.int64)
    if lname in ("starts", "ends", "steps"):
        n = choose.integer(1, max(1, rank))
        if lname == "steps":
            return np.array([choose.choice([1, 1, 2, -1]) for _ in range(n)], np.int64)
        return np.array([choose.integer(-dims[i % len(dims)], dims[i % len(dims)]) for i in range(n)], np.int64)
    if lname == "pads":
        return np.array([choose.integer(0, 2) for _ in range(2 * rank)], np.int64)
    if lname == "repeats":
        return np.array([choose.integer(1, 2) for _ in range(rank)], np.int64)
    if lname == "split":
        total = choose.choice(dims)
        cut = choose.integer(0, total)
        return np.array([cut, total - cut] if cut else [total], np.int64)
    if lname in ("k", "depth", "sequence_lens", "num_groups"):
        return np.array([choose.integer(1, max(1, min(dims)))], np.int64)
    return np.array(choose.integer(0, 3) if choose.coin(0.5) else [choose.integer(0, 3)], np.int64)


def reshape_target(base: tuple[int, ...], choose: Chooser) -> list[int]:
    """A new shape for ``base``'s elements: the same, dims merged or split, 0 (keep) and -1 (infer) entries,
    or (for Expand and Tile) a broadcasting one."""
    dims = list(base)
    kind = choose.integer(0, 4)
    if kind == 0 or not dims:
        return [math.prod(dims)] if choose.coin(0.5) else [-1]
    if kind == 1 and len(dims) >= 2:
        i = choose.integer(0, len(dims) - 2)
        return dims[:i] + [dims[i] * dims[i + 1]] + dims[i + 2:]
    if kind == 2:
        i = choose.integer(0, len(dims) - 1)
        return [0 if j != i and choose.coin(0.3) else (-1 if j == i else d) for j, d in enumerate(dims)]
    if kind == 3:  # broadcast: prepend a dim, widen a 1
        return [choose.integer(1, 3)] + [choose.integer(1, 3) if d == 1 else d for d in dims]
    i = choose.integer(0, len(dims) - 1)
    if dims[i] % 2 == 0:
        return dims[:i] + [2, dims[i] // 2] + dims[i + 1:]
    return dims[:i] + [dims[i], 1] + dims[i + 1:]


def draw_attr(key: str, kind: str, rank: int, choose: Chooser, default: Any) -> Any:
    """A value for attribute ``key`` of ``kind``; None leaves it out."""
    spatial = max(rank - 2, 1)
    if kind == "int":
        if key in ATTR_HINTS:
            return int(choose.choice(ATTR_HINTS[key](rank)))
        if default in (0, 1):  # a flag
            return choose.choice([0, 1])
        return choose.choice([0, 1, 1, 2, 3, -1])
    if kind == "float":
        return float(choose.choice([0.0, 0.5, 1.0, 2.0, 1e-5, 0.1, -1.0, 1.5]))
    if kind == "string":
        options = STRING_CHOICES.get(key) or (STRING_CHOICES["mode"] if "mode" in key else None)
        if options:
            return choose.choice(options)
        return default if isinstance(default, str) else None
    if kind == "ints":
        if key == "perm":
            return [int(i) for i in np.random.default_rng(choose.integer(0, 2**31)).permutation(rank)]
        if key in ("axes",):
            return sorted({choose.integer(0, max(rank - 1, 0)) for _ in range(choose.integer(1, 2))})
        if key == "pads":
            return [choose.integer(0, 1) for _ in range(2 * spatial)]
        if key in ("kernel_shape", "pooled_shape"):
            return [choose.integer(1, 3) for _ in range(spatial)]
        if key in ("strides", "dilations"):
            return [choose.integer(1, 2) for _ in range(spatial)]
        return [choose.integer(0, 2) for _ in range(choose.integer(1, max(rank, 1)))]
    if kind == "floats":
        return [float(choose.choice([0.5, 1.0, 2.0])) for _ in range(max(rank, 1))]
    if default is REQUIRED:
        return None
    return None
