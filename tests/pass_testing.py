"""Helpers for pass tests: random feeds, and running a graph before and after a pass with the reference executor."""

from __future__ import annotations

import numpy as np

import tlc
from tlc.passes import Pass, PassOptions, PassResult

SYMBOL_SIZE = 3


def random_feeds(graph: tlc.Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """An array for every graph input: symbolic or unknown dims become ``SYMBOL_SIZE``."""
    feeds = {}
    for node in graph.inputs:
        t = node.output_types[0]
        shape = tuple(d if isinstance(d, int) else SYMBOL_SIZE for d in t.shape)
        if t.dtype.startswith("float"):
            feeds[node.name] = rng.standard_normal(shape).astype(t.dtype)
        elif t.dtype == "bool":
            feeds[node.name] = rng.random(shape) < 0.5
        else:
            feeds[node.name] = rng.integers(-5, 6, shape).astype(t.dtype)
    return feeds


def assert_same_outputs(before: tlc.Graph, after: tlc.Graph, feeds: dict[str, np.ndarray],
                        rtol: float | None = None) -> None:
    """Both graphs give bit-identical outputs (or within ``rtol``), under the same output names."""
    want = tlc.reference.run(before, feeds)
    got = tlc.reference.run(after, feeds)
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        if rtol is None:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=rtol, err_msg=name)


def apply(pass_cls: type[Pass], graph: tlc.Graph, rng: np.random.Generator, *, runs: int = 1,
          rtol: float | None = None, **options) -> tuple[tlc.Graph, PassResult]:
    """Run the pass on a copy of ``graph``, verify the result and compare numbers with the original (bit for
    bit, or within ``rtol`` for passes that let a kernel sum in another order)."""
    out = graph.copy()
    result = PassResult()
    p = pass_cls(PassOptions(**options))
    for _ in range(runs):
        r = p.run(out)
        result.changed |= r.changed
        for k, v in r.stats.items():
            result.stats[k] = result.stats.get(k, 0) + v
    out.verify()
    assert_same_outputs(graph, out, random_feeds(graph, rng), rtol)
    return out, result


def ops(graph: tlc.Graph) -> list[str]:
    """The ops of the graph's computing nodes, in topological order."""
    return [n.qualified_op for n in graph.ops()]
