"""Shrinking a disagreement to a small graph, and writing it as a reproducer.

``shrink`` is greedy: it drops outputs, then takes nodes out one at a time (their uses reading one of the
node's own inputs of the same type instead, or failing that a constant holding the node's reference value) and
keeps each step after which the oracle still disagrees, until no step is left that keeps it. Hypothesis shrinks
generated cases itself (``tlc.testing.strategies``); this is for campaigns (``tools/fuzz.py``) and for graphs
that came from elsewhere.

A reproducer is ``<dir>/<id>.tlc`` (with ``.tlc.npz`` for large constants), ``<id>.onnx`` when the graph
exports, ``<id>.npz`` (the feeds) and ``<id>.json`` (oracle, max error, seed, what differed, status).
``replay`` runs one again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TlcError
from ..ir.graph import Graph, Value
from .compare import reference_outputs
from .oracles import Checker, Outcome

Still = Callable[[Graph, Mapping[str, np.ndarray]], bool]


def disagrees(oracle: str) -> Still:
    """The predicate ``shrink`` keeps: ``oracle`` still disagrees on the graph (and the reference runs it)."""
    def still(graph: Graph, feeds: Mapping[str, np.ndarray]) -> bool:
        try:
            return Checker(graph, feeds).check(oracle).status == "disagree"
        except Exception:  # the reference no longer runs the candidate: not a reproducer
            return False
    return still


def shrink(graph: Graph, feeds: Mapping[str, np.ndarray], still: Still, max_steps: int = 200
           ) -> tuple[Graph, dict[str, np.ndarray]]:
    """The smallest graph (with the feeds it still reads) found greedily for which ``still`` holds."""
    graph, feeds = graph.copy(), dict(feeds)
    steps = 0
    changed = True
    while changed and steps < max_steps:
        changed = False
        for candidate in _candidates(graph, feeds):
            steps += 1
            if candidate is not None and still(*candidate):
                graph, feeds = candidate
                changed = True
                break
            if steps >= max_steps:
                break
    return graph, feeds


def _candidates(graph: Graph, feeds: Mapping[str, np.ndarray]):
    """Smaller graphs: one output fewer, then one node fewer (bypassed, or replaced by its value)."""
    if len(graph.outputs) > 1:
        for i in range(len(graph.outputs)):
            g = graph.copy()
            del g.outputs[i]
            yield _tidy(g, feeds)
    values = None
    for node in reversed(graph.ops()):
        if node.op == "Constant" and node.domain == "":
            continue
        ins = [v for v in graph.inputs_of(node) if v is not None]
        for replacement in ("bypass", "constant"):
            g = graph.copy()
            for out in node.outputs:
                if not g.num_uses(out):
                    continue
                new = _bypass(g, out, ins) if replacement == "bypass" else None
                if new is None and replacement == "constant":
                    if values is None:
                        values = _all_values(graph, feeds)
                    if out not in values:
                        break
                    new = g.constant(values[out], name=g.fresh_name("value"))
                if new is None:
                    break
                _replace(g, out, new)
            else:
                yield _tidy(g, feeds)


def _bypass(g: Graph, out: Value, ins: list[Value]) -> Value | None:
    """An input of the node with the type of ``out``, when there is one."""
    want = g.type_of(out)
    return next((v for v in ins if g.type_of(v) == want), None)


def _replace(g: Graph, old: Value, new: Value) -> None:
    """``old``'s uses (graph outputs included) read ``new``."""
    g.replace_all_uses(old, new)
    g.outputs = [(new if v == old else v, name) for v, name in g.outputs]


def _tidy(g: Graph, feeds: Mapping[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray]] | None:
    """Dead nodes and unread inputs out; None when what is left is no graph (an output that is an input)."""
    g.remove_unused()
    read = {v.node for v, _ in g.outputs} | {u for u in g.nx.nodes if g.nx.out_degree(u)}
    for node in list(g.inputs):
        if node.id not in read:
            g.erase(node)
    if any(g.producer(v).op == "Input" for v, _ in g.outputs) or not g.outputs:
        return None
    names = {n.name for n in g.inputs}
    try:
        g.verify()
    except TlcError:
        return None
    return g, {k: v for k, v in feeds.items() if k in names}


def _all_values(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[Value, np.ndarray]:
    """The reference value of every tensor value of ``graph``."""
    g = graph.copy()
    values = [v for n in g.ops() if not (n.op == "Constant" and n.domain == "") for v in n.outputs]
    g.outputs = [(v, f"__value{i}") for i, v in enumerate(values)]
    try:
        out = reference_outputs(g, feeds)
    except Exception:
        return {}
    return {v: out[f"__value{i}"] for i, v in enumerate(values) if isinstance(out[f"__value{i}"], np.ndarray)}


# ---------------------------------------------------------------------------- reproducers
@dataclass
class Reproducer:
    """A saved disagreement."""

    path: Path            # the .tlc file
    oracle: str
    max_error: float
    seed: int | None
    detail: str
    status: str = "open"  # "open" until fixed, then "fixed" (tests replay both; an open one is an expected failure)


def save_reproducer(directory: str | Path, ident: str, graph: Graph, feeds: Mapping[str, np.ndarray],
                    outcome: Outcome, seed: int | None = None, **extra: object) -> Reproducer:
    """Write ``<ident>.tlc``, ``.onnx`` (when it exports), ``.npz`` (feeds) and ``.json`` into ``directory``."""
    from ..io.onnx_export import save_onnx
    from ..ir.text import save_text

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{ident}.tlc"
    save_text(graph, path)
    try:
        save_onnx(graph, directory / f"{ident}.onnx")
    except Exception as exc:  # a reproducer of an export bug cannot be exported: the .tlc file still is one
        extra.setdefault("onnx", f"not written: {type(exc).__name__}: {str(exc)[:200]}")
    np.savez(directory / f"{ident}.npz", **{k: np.asarray(v) for k, v in feeds.items()})
    max_error = outcome.max_error
    record = {"oracle": outcome.oracle, "max_error": None if not np.isfinite(max_error) else max_error,
              "seed": seed, "detail": str(outcome), "status": "open", **extra}
    (directory / f"{ident}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return Reproducer(path, outcome.oracle, max_error, seed, str(outcome))


def load_reproducer(path: str | Path) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """The graph, feeds and record of a reproducer written by ``save_reproducer`` (``path``: its .tlc file)."""
    from ..ir.text import load_text

    path = Path(path)
    graph = load_text(path)
    graph.infer_missing_types()
    graph.verify()   # as a user would: a file whose declared types inference now refuses is no graph to replay
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    record = json.loads(path.with_suffix(".json").read_text())
    return graph, feeds, record


def replay(path: str | Path) -> Outcome:
    """Run a reproducer's oracle again on it."""
    graph, feeds, record = load_reproducer(path)
    return Checker(graph, feeds).check(record["oracle"])
