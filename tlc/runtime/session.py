"""``InferenceSession``: onnxruntime's session interface over a compiled ``Plan``.

``get_inputs()``/``get_outputs()`` give objects with ``name``, ``shape`` (ints, symbolic dims as strings,
unknown dims as None) and ``type`` (onnxruntime's "tensor(float)" strings); ``run(output_names, feeds)``
returns a list of arrays. ``get_providers()`` names the target's onnxruntime provider (``Target.provider``), and
``providers=[...]`` picks the target whose provider comes first, so code written for onnxruntime runs unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BackendError, InputError
from ..ir.graph import Graph
from ..ir.types import OptionalType, SequenceType, ValueType
from ..targets import Target, all_targets, get
from .compiler import compile
from .plan import Plan

_ORT_TYPE = {"float32": "float", "float64": "double"}


def ort_type(dtype: str) -> str:
    """onnxruntime's type string for a tlc dtype name: "tensor(float)", "tensor(int64)", ..."""
    return f"tensor({_ORT_TYPE.get(dtype, dtype)})"


@dataclass(frozen=True)
class NodeArg:
    name: str
    shape: list[int | str | None] | None
    type: str

    @staticmethod
    def of(name: str, t: ValueType | None) -> NodeArg:
        """onnxruntime's description: a sequence is "seq(tensor(float))", an optional "optional(...)" (no shape)."""
        if t is None:
            return NodeArg(name, None, "tensor(undefined)")
        if isinstance(t, (SequenceType, OptionalType)):
            return NodeArg(name, None, _ort_value_type(t))
        return NodeArg(name, None if t.shape is None else list(t.shape), ort_type(t.dtype))


def _ort_value_type(t: ValueType) -> str:
    if isinstance(t, SequenceType):
        return f"seq({_ort_value_type(t.elem)})"
    if isinstance(t, OptionalType):
        return f"optional({_ort_value_type(t.elem)})"
    return ort_type(t.dtype)


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


def _load(model: Graph | str | os.PathLike | bytes) -> Graph:
    if isinstance(model, Graph):
        return model
    if isinstance(model, (bytes, bytearray)):
        import onnx

        from ..io.onnx import from_onnx

        return from_onnx(onnx.load_from_string(bytes(model)))[0]
    from ..io import load

    return load(model)


def _target(target: str | Target, providers: Sequence[Any] | None) -> Target:
    """``target``, or the target of the first of ``providers`` (names, or (name, options) pairs) tlc knows."""
    if not providers:
        return get(target)
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers]
    for name in names:
        for known in all_targets():
            if name == known.provider:
                return known
    raise BackendError(f"none of the providers {names} is available; tlc offers "
                       f"{[known.provider for known in all_targets()]}")


class InferenceSession:
    """A compiled model behind onnxruntime's ``InferenceSession`` interface."""

    def __init__(self, path_or_model: Graph | str | os.PathLike | bytes, target: str | Target = "cpu",
                 opt_level: int = 2, providers: Sequence[Any] | None = None, **compile_options: Any):
        self._graph = _load(path_or_model)
        self._target = _target(target, providers)
        self._plan = compile(self._graph, target=self._target, opt_level=opt_level, **compile_options)

    @property
    def plan(self) -> Plan:
        return self._plan

    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg.of(name, t) for name, t in self._plan.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg.of(name, t) for name, t in self._plan.outputs]

    def get_providers(self) -> list[str]:
        return [self._target.provider]

    def get_modelmeta(self) -> ModelMetadata:
        g = self._graph
        meta = dict(g.metadata)
        return ModelMetadata(producer_name=g.producer_name, graph_name=g.name, domain=meta.pop("domain", ""),
                             description=g.doc, graph_description=g.doc,
                             version=int(meta.pop("model_version", 0) or 0), custom_metadata_map=meta)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """Run; returns the named outputs (all of them for None) in order."""
        names = [name for name, _ in self._plan.outputs]
        if output_names:
            unknown = [n for n in output_names if n not in names]
            if unknown:
                raise InputError(f"unknown output name(s) {unknown}; the model's outputs are {names}")
        result = self._plan.run(input_feed)
        return [result[n] for n in (output_names or names)]
