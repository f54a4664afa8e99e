"""cse: merge pure nodes with the same op, attributes and inputs, and constants with the same dtype, shape and bytes.

Value numbering in topological order: a node's key is its op, domain, resolved attributes (digested as in
``tlc.ir.hashing``, so a graph-valued attribute compares by structure) and its input values, already replaced by
their representatives; inputs of commutative ops (``OpDef.is_commutative``) are sorted first. The first node with
a key is kept and later ones are merged into it, so a value is only ever replaced by one defined before it.
Constants are bucketed by dtype and shape and compared byte for byte (0.0 and -0.0 differ; equal NaNs merge).
Graph output names survive: an output that pointed at a merged value points at its representative.
Bodies (If, Loop, Scan) are value-numbered on their own first (a body's captures are its inputs, so nothing
merges across a body boundary); a node with bodies merges only when every op in them is pure.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from ..ir.hashing import attr_digest
from ..ops import lookup
from ..ops.control import bodies, bodies_pure
from .base import Pass, PassResult, register_pass
from .dce import absorb


@register_pass
class CsePass(Pass):
    name = "cse"
    min_level = 2
    description = "common-subexpression elimination: share equal pure nodes and equal constants"

    def run(self, graph: Graph) -> PassResult:
        result = PassResult()
        seen: dict[tuple, Node] = {}
        constants = _ConstantTable()
        for node in graph.nodes():
            if node.domain == "" and node.op == "Input":
                continue
            for _, body in bodies(node):
                absorb(result, self.run(body))
            self.current_node = node.name
            if node.domain == "" and node.op == "Constant":
                keep = constants.find_or_add(node)
                counter = "constants_merged"
            else:
                key = node_key(graph, node)
                if key is None:
                    continue
                keep = seen.setdefault(key, node)
                counter = "nodes_merged"
            if keep is not node:
                merge(graph, node, keep)
                result.count(counter)
        self.current_node = None
        return result


def node_key(graph: Graph, node: Node) -> tuple | None:
    """The value-numbering key of a pure node; None for nodes CSE must leave alone (impure or unknown ops)."""
    opdef = lookup(node.op, node.domain)
    if opdef is None or not opdef.pure_at(graph, node) or not bodies_pure(node):
        return None
    attrs = opdef.resolved_attrs(node)
    digest = tuple((k, attr_digest(v)) for k, v in sorted(attrs.items()) if v is not None)
    inputs = graph.inputs_of(node)
    if opdef.is_commutative and None not in inputs:
        inputs = sorted(inputs)
    return node.domain, node.op, node.num_outputs, digest, tuple(inputs)


def merge(graph: Graph, node: Node, keep: Node) -> None:
    """Replace every use of ``node``'s outputs by ``keep``'s and erase ``node`` (``keep`` comes first in order)."""
    graph.replace_values(zip(node.outputs, keep.outputs), [node])


class _ConstantTable:
    """Constants seen so far, by dtype and shape; byte digests are computed only when a bucket has company."""

    def __init__(self) -> None:
        self.buckets: dict[tuple, list[tuple[Node, str | int | None]]] = {}

    def find_or_add(self, node: Node) -> Node:
        array: np.ndarray = node.attrs["value"]
        bucket = self.buckets.setdefault((array.dtype.str, array.shape), [])
        if not bucket:
            bucket.append((node, None))
            return node
        for other, _ in bucket:
            if other.attrs["value"] is array:  # one array behind two constants (fold shares equal results)
                return other
        digest = _digest(array)
        for i, (other, other_digest) in enumerate(bucket):
            if other_digest is None:
                other_digest = _digest(other.attrs["value"])
                bucket[i] = (other, other_digest)
            if other_digest == digest and _same_bytes(other.attrs["value"], array):
                return other
        bucket.append((node, digest))
        return node


#: arrays up to this many bytes are fingerprinted whole; larger ones by a sample (equal samples are then compared
#: byte for byte, so a sample only decides which pairs are worth comparing).
_WHOLE_BYTES = 1 << 14
_SAMPLE = 1024


def _digest(array: np.ndarray) -> str | int:
    """A fingerprint: equal arrays have equal ones. Large arrays are sampled at evenly spaced elements: weights
    of one shape almost always differ there, and hashing every byte of every weight cost more than the pass."""
    if array.dtype == object:
        return attr_digest(array)
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.nbytes > _WHOLE_BYTES:
        flat = flat[:: max(1, flat.size // _SAMPLE)]
    return hash(flat.tobytes())


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype == object:
        return a.tolist() == b.tolist()
    # NOTE: as bytes, not values: 0.0 and -0.0 differ, equal NaNs are equal (see the module docstring).
    return np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                          np.ascontiguousarray(b).reshape(-1).view(np.uint8))
