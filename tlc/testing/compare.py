"""Comparing outputs: dtype-aware tolerances, and how sensitive a graph is to rounding.

A compiled plan rounds differently from the reference (vectorized exp, sums in another order, a rewrite that
reassociates), so float outputs are compared within a few ulp of their scale. A graph that amplifies rounding
(``Floor`` after a product, a comparison of two computed values, ``Log`` of a difference) can then differ by far
more, or flip an integer, without any bug. ``sensitivity`` measures that on the reference itself: it runs the
graph again with every float result of every node perturbed by a few ulp, and an output whose perturbed runs move
beyond the plain tolerance is *unstable*: it is compared within twice what the perturbation moved it. Stable
integer and bool outputs must match bit for bit; so must every output of an *exact* oracle (one that must
compute what the reference computes, such as a text round trip). NaN matches NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import TlcError
from ..ir.graph import Graph, Node
from ..reference import Interpreter, run

#: relative tolerance per float dtype: a few ulp of the output's scale, for kernels within ~2.5 ulp per op
RTOL = {"float16": 4e-3, "float32": 1e-5, "float64": 1e-12}
#: ulp of noise per node result in ``sensitivity`` runs
PERTURB_ULP = 4
#: an unstable output's tolerance in units of its measured spread: two runs of a few ulp of noise estimate it, and
#: other implementations reorder sums or compute in float32 what the reference does in float64 (onnxruntime's
#: window functions: a BlackmanWindow of size 1, 0 in exact arithmetic, divided into 1.19 gave 1.6e8 apart where
#: the noise moved it 7e7; fuzz seed 501692)
SPREAD_FACTOR = 4
PERTURB_RUNS = 2


@dataclass
class Mismatch:
    """How one output of an oracle differs from the reference."""

    output: str
    max_error: float
    tolerance: float
    detail: str

    def __str__(self) -> str:
        return f"{self.output}: {self.detail}"


class _Perturbing(Interpreter):
    """The reference executor with each float result multiplied by (1 + a few ulp of noise)."""

    def __init__(self, graph: Graph, rng: np.random.Generator):
        super().__init__(graph)
        self.rng = rng

    def run_node(self, node: Node, inputs: list) -> list:
        outs = super().run_node(node, inputs)
        size = max([_magnitude(x) for x in inputs] + [0.0])
        return [self.perturbed(a, size) for a in outs]

    def perturbed(self, a, size: float):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.dtype.itemsize < 2 or not a.size:
            return a
        eps = np.finfo(a.dtype).eps * PERTURB_ULP
        with np.errstate(all="ignore"):
            size = max(size, _magnitude(a))
            # relative noise, and a little absolute noise of the magnitude of the node's inputs and results: a
            # sum that cancels to an exact zero (or to 1e-8) on the reference may come out as -1e-8 elsewhere
            noise = a * self.rng.uniform(-eps, eps, a.shape) + size * self.rng.uniform(-eps, eps, a.shape) / 4
            return np.where(np.isfinite(a), a + noise, a).astype(a.dtype)


def _magnitude(x) -> float:
    """The largest finite magnitude in a numeric array (0 for anything else)."""
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "biuf" or not x.size:
        return 0.0
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        finite = wide[np.isfinite(wide)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def sensitivity(graph: Graph, feeds: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                seed: int = 0) -> dict[str, float]:
    """Per output: how far rounding noise moves it (0 when it stays within the plain tolerance; inf when it
    changes its NaN pattern, shape or dtype, and for every output when the run fails: a float cast to a shape
    that rounding makes negative)."""
    rng = np.random.default_rng(seed)
    spread = {name: 0.0 for name in want}
    inputs_scale = input_scale(feeds)
    for _ in range(PERTURB_RUNS):
        try:
            with np.errstate(all="ignore"):
                got = _Perturbing(graph, rng).run(dict(feeds))
        except TlcError:
            return {name: np.inf for name in want}
        for name, w in want.items():
            g = got[name]
            if g.shape != w.shape or g.dtype != w.dtype:
                spread[name] = np.inf
                continue
            error, tol, detail = _error(g, w, inputs_scale)
            if error > tol:
                spread[name] = max(spread[name], error)
    return spread


def precision_floor(graph: Graph) -> dict[str, float]:
    """Per output: the ``RTOL`` of the narrowest float type it was computed through (a float32 result cast to
    float64 carries float32's rounding: Celu then Cast, fuzz seed 909047)."""
    import networkx as nx

    floors = {}
    for value, name in graph.outputs:
        nodes = nx.ancestors(graph.nx, value.node) | {value.node}
        kinds = {str(t.dtype) for n in nodes for t in graph.node(n).output_types if hasattr(t, "dtype")}
        floors[name] = max([RTOL[k] for k in kinds if k in RTOL], default=0.0)
    return floors


def input_scale(feeds: Mapping[str, np.ndarray]) -> float:
    """The magnitude of the float inputs (at least 1): what an output's rounding is relative to."""
    scale = 1.0
    for a in feeds.values():
        if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.size:
            finite = a[np.isfinite(a)]
            if finite.size:
                scale = max(scale, float(np.abs(finite.astype(np.float64)).max()))
    return scale


def _error(got: np.ndarray, want: np.ndarray, scale: float, min_rtol: float = 0.0) -> tuple[float, float, str]:
    """(max error, plain tolerance, what differs) of two arrays of one shape and dtype."""
    if want.dtype.kind not in "fc":
        if want.dtype == object:
            same = [a == b for a, b in zip(got.ravel(), want.ravel())]
            return (0.0 if all(same) else np.inf), 0.0, "objects differ"
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        error = float(diff.max(initial=0.0))
        return error, 0.0, f"max |diff| {error:g} (integer: exact)"
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    g64, w64 = got.astype(wide), want.astype(wide)
    g_nan, w_nan = np.isnan(g64), np.isnan(w64)
    if (g_nan != w_nan).any():
        return np.inf, 0.0, f"NaN at {int((g_nan != w_nan).sum())} positions differs"
    finite = np.isfinite(w64) & np.isfinite(g64)
    same_special = (g64 == w64) | g_nan | finite
    if not same_special.all():
        return np.inf, 0.0, "infinities differ"
    diff = np.abs(g64[finite] - w64[finite])
    error = float(diff.max(initial=0.0))
    out_scale = float(np.abs(w64[finite]).max(initial=0.0))
    rtol = max(RTOL.get(str(want.dtype), 1e-5), min_rtol)
    tol = rtol * max(out_scale, scale)
    return error, tol, f"max |diff| {error:.3g} (tolerance {tol:.3g}, scale {max(out_scale, scale):.3g})"


def compare(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], *, exact: bool = False,
            spread: Mapping[str, float] | None = None, scale: float = 1.0,
            min_rtol: float | Mapping[str, float] = 0.0) -> list[Mismatch]:
    """The outputs of ``got`` that differ from ``want`` beyond their tolerance: bit for bit when ``exact``,
    else dtype-aware (``RTOL`` of the larger of the output's and the inputs' ``scale``, at least ``min_rtol``: one
    for all outputs, or one an output),
    widened to ``SPREAD_FACTOR`` times the ``spread`` ``sensitivity`` measured for unstable outputs; an output
    that the noise moves by as much as its largest value is not judged at all."""
    mismatches = []
    if list(got) != list(want):
        return [Mismatch("*", np.inf, 0.0, f"outputs {list(got)}, expected {list(want)}")]
    for name, w in want.items():
        g = np.asarray(got[name])
        if g.dtype == w.dtype and g.shape != w.shape and (spread or {}).get(name) == np.inf:
            continue  # a value-dependent shape (NonZero, Unique) the graph itself makes unstable
        if g.dtype != w.dtype or g.shape != w.shape:
            mismatches.append(Mismatch(name, np.inf, 0.0, f"{g.dtype}{list(g.shape)}, expected "
                                                          f"{w.dtype}{list(w.shape)}"))
            continue
        if exact:
            if not _bitwise_equal(g, w):
                error, _, detail = _error(g, w, scale)
                mismatches.append(Mismatch(name, max(error, np.finfo(np.float64).tiny), 0.0,
                                           f"not bit for bit: {detail}"))
            continue
        unstable = (spread or {}).get(name, 0.0)
        if unstable and w.dtype.kind in "fc" and unstable >= _magnitude(w):
            # rounding noise moves this output as far as its own size: noise decides it, NaN or not (MVN over a
            # slice equal up to the last bits: ONNX's E[x^2] - E[x]^2 gives onnxruntime NaN where tlc's stable
            # variance gives +-0.98; fuzz seed 700200)
            continue
        error, tol, detail = _error(g, w, scale, min_rtol.get(name, 0.0) if isinstance(min_rtol, Mapping)
                                    else min_rtol)
        if unstable:
            tol = max(tol, SPREAD_FACTOR * unstable)
        if error > tol:
            mismatches.append(Mismatch(name, error, tol, detail + (f", unstable by {unstable:.3g}" if unstable
                                                                  else "")))
    return mismatches


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype == object:
        return all(x == y for x, y in zip(a.ravel(), b.ravel()))
    return a.tobytes() == b.tobytes() or (a.dtype.kind in "fc" and np.array_equal(a, b, equal_nan=True))


def reference_outputs(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    with np.errstate(all="ignore"):
        return run(graph, feeds)
