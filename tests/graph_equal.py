"""``assert_graphs_equal``: exact structural equality of two graphs, for round-trip tests.

Compares what a saved graph must keep: graph name, doc, opset, producer, metadata; per node (in
``nodes()`` order) op, domain, name, doc, output names and types, number of input ports, wiring (by
position, not by node id, which is not semantic) and attributes, kind for kind (an int is not a float, a
list not a tensor), arrays by dtype, shape and bits (NaN matches NaN), graphs recursively; graph outputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tlc.ir.graph import Graph
from tlc.ir.types import ML_DTYPES


def assert_graphs_equal(a: Graph, b: Graph, where: str = "graph") -> None:
    where = f"{where} {a.name!r}"
    for field in ("name", "doc", "opset", "producer_name", "producer_version", "metadata"):
        assert getattr(a, field) == getattr(b, field), f"{where}: {field} {getattr(a, field)!r} != " \
                                                       f"{getattr(b, field)!r}"
    na, nb = a.nodes(), b.nodes()
    assert [n.name for n in na] == [n.name for n in nb], f"{where}: node names or order differ"
    pos_a = {n.id: i for i, n in enumerate(na)}
    pos_b = {n.id: i for i, n in enumerate(nb)}
    for x, y in zip(na, nb, strict=True):
        at = f"{where}, node {x.name!r}"
        for field in ("op", "domain", "doc", "output_names", "output_types", "num_inputs"):
            assert getattr(x, field) == getattr(y, field), \
                f"{at}: {field} {getattr(x, field)!r} != {getattr(y, field)!r}"
        ins_a = [None if v is None else (pos_a[v.node], v.port) for v in a.inputs_of(x)]
        ins_b = [None if v is None else (pos_b[v.node], v.port) for v in b.inputs_of(y)]
        assert ins_a == ins_b, f"{at}: inputs {ins_a} != {ins_b}"
        assert sorted(x.attrs) == sorted(y.attrs), \
            f"{at}: attribute names {sorted(x.attrs)} != {sorted(y.attrs)}"
        for key in x.attrs:
            _assert_attr_equal(x.attrs[key], y.attrs[key], f"{at}, attribute {key!r}")
    outs_a = [(pos_a[v.node], v.port, name) for v, name in a.outputs]
    outs_b = [(pos_b[v.node], v.port, name) for v, name in b.outputs]
    assert outs_a == outs_b, f"{where}: outputs {outs_a} != {outs_b}"


def _kind(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _assert_attr_equal(x: Any, y: Any, at: str) -> None:
    assert _kind(x) == _kind(y), f"{at}: kind {_kind(x)} ({x!r}) != {_kind(y)} ({y!r})"
    if isinstance(x, Graph):
        assert_graphs_equal(x, y, f"{at}: subgraph")
    elif isinstance(x, np.ndarray):
        assert_arrays_identical(x, y, at)
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), f"{at}: list lengths {len(x)} != {len(y)}"
        for i, (p, q) in enumerate(zip(x, y, strict=True)):
            _assert_attr_equal(p, q, f"{at}[{i}]")
    elif _kind(x) == "float":
        same = (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
        assert same, f"{at}: {x!r} != {y!r}"
    else:
        assert x == y, f"{at}: {x!r} != {y!r}"


def assert_arrays_identical(x: np.ndarray, y: np.ndarray, at: str = "array") -> None:
    """Same dtype, shape and elements; floats compared bit for bit except that any NaN matches any NaN."""
    assert isinstance(y, np.ndarray), f"{at}: {type(y).__name__} is not an array"
    assert x.dtype == y.dtype and x.shape == y.shape, f"{at}: {x.dtype}{x.shape} != {y.dtype}{y.shape}"
    if x.dtype == object:
        assert x.tolist() == y.tolist(), f"{at}: {x!r} != {y!r}"
        same_types = all(type(p) is type(q) for p, q in zip(x.ravel(), y.ravel(), strict=True))
        assert same_types, f"{at}: element types differ"
    elif x.dtype.kind == "f":
        bits = np.dtype(f"u{x.dtype.itemsize}")
        same = (x.view(bits) == y.view(bits)) | (np.isnan(x) & np.isnan(y))
        assert same.all(), f"{at}: {x!r} != {y!r}"
    elif x.dtype.name in ML_DTYPES:  # ml_dtypes types: bit for bit, any NaN matching any NaN (as for floats)
        bits = np.dtype(f"u{x.dtype.itemsize}")
        nan = np.isnan(x.astype(np.float32)) & np.isnan(y.astype(np.float32))
        assert ((x.view(bits) == y.view(bits)) | nan).all(), f"{at}: {x!r} != {y!r}"
    else:
        np.testing.assert_array_equal(x, y, err_msg=at)
