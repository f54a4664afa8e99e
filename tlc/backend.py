"""tlc as an ONNX backend (``onnx.backend.base.Backend``), so ONNX's backend test suite runs against it the way
it runs against other runtimes::

    import onnx.backend.test
    import tlc.backend

    globals().update(onnx.backend.test.BackendTest(tlc.backend, __name__).test_cases)

``prepare`` imports the model (``tlc.io.onnx.from_onnx``: opset conversion, named refusals) and hands the graph to
``_executor``, the one place that decides how a prepared model runs: a compiled plan (``tlc.compile`` at -O2 with
eager JIT, the default) or the reference executor::

    rep = tlc.backend.prepare(model)                              # compiled, opt_level=2, jit="eager"
    rep = tlc.backend.prepare(model, opt_level=3, num_threads=1)  # keywords go to tlc.compile
    rep = tlc.backend.prepare(model, executor="reference")        # the reference executor (the oracle)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from . import reference
from .errors import BackendError, InputError, UnsupportedOperatorError
from .io.onnx import from_onnx, read_model
from .ir.graph import DEFAULT_OPSET, Graph
from .ir.types import ONNX_TYPE_CODES, dtype_name
from .runtime import Plan
from .runtime import compile as compile_plan
from .targets import Target, all_targets

Executor = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]

#: How ``prepare`` runs a model: "compiled" (``tlc.compile``, then ``Plan.run``) or "reference".
EXECUTORS = ("compiled", "reference")


def _device_target(device: str) -> Target | None:
    """The target a device name ("CPU", "CUDA:0") runs on: the first registered target of that ``Target.device``
    that the runtime can run and whose kernels can run here (CUDA: numba-cuda and a device, or the simulator);
    None for any other."""
    try:
        kind = Device(device).type
    except (AttributeError, ValueError):  # an unknown device name
        return None
    return next((t for t in all_targets() if t.runs_plans and getattr(DeviceType, t.device, None) == kind
                 and t.available()), None)


def _executor(graph: Graph, device: str, executor: str = "compiled",
              **compile_options: Any) -> tuple[Executor, Plan | None]:
    """How a prepared model runs, and its plan: a compiled plan for the device's target (``compile_options`` go to
    ``tlc.compile``; default -O2, eager JIT) or, with ``executor="reference"``, the reference executor (no plan)."""
    if executor == "reference":
        if compile_options:
            raise BackendError(f"the reference executor takes no compile options; got "
                               f"{', '.join(sorted(compile_options))}")
        return (lambda feeds: reference.run(graph, feeds)), None
    if executor != "compiled":
        raise BackendError(f"unknown executor {executor!r}; expected one of {', '.join(EXECUTORS)}")
    compile_options.setdefault("jit", "eager")   # a backend runs each model a few times: kernels first
    plan = compile_plan(graph, target=_device_target(device), **compile_options)
    return plan.run, plan


class TlcBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns its outputs in graph order (a tuple that also takes names).

    ``plan`` is the compiled ``tlc.Plan`` (None with the reference executor): its ``stats()`` say which kernel
    each step runs.
    """

    def __init__(self, graph: Graph, execute: Executor, plan: Plan | None = None):
        self.graph = graph
        self.plan = plan
        self.input_names = [n.name for n in graph.inputs]
        self.output_names = [name for _, name in graph.outputs]
        self._execute = execute

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Run on ``inputs``: a list in input order, a dict name -> array, or one array for a one-input model."""
        result = self._execute(self._feeds(inputs))
        return namedtupledict("Outputs", self.output_names)(*[result[n] for n in self.output_names])

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            return {k: np.asarray(v) for k, v in inputs.items()}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if not isinstance(inputs, Sequence):
            raise InputError(f"inputs must be a list of arrays, a dict name -> array or one array; got "
                             f"{type(inputs).__name__}")
        if len(inputs) != len(self.input_names):
            raise InputError(f"got {len(inputs)} inputs, the model takes {len(self.input_names)}: "
                             f"{', '.join(self.input_names) or '(none)'}")
        return {name: np.asarray(a) for name, a in zip(self.input_names, inputs)}


class TlcBackend(Backend):
    """The ONNX backend interface over tlc."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return _device_target(device) is not None

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """True when tlc can import the model for ``device`` (it refuses unknown ops and types by name)."""
        if not cls.supports_device(device):
            return False
        try:
            from_onnx(model)
        except UnsupportedOperatorError:
            return False
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto | bytes | str | os.PathLike, device: str = "CPU",
                **kwargs: Any) -> TlcBackendRep:
        """Import ``model`` (a ModelProto, its serialized bytes or a path) and prepare it to run on ``device``.

        Keywords: ``executor`` ("compiled", the default, or "reference") and, for compiled plans, the options of
        ``tlc.compile`` (``opt_level=2``, ``jit="eager"``, ``num_threads``, ``cache_dir``, ...).
        """
        if not cls.supports_device(device):
            devices = sorted({t.device for t in all_targets() if t.runs_plans})
            raise BackendError(f"tlc cannot run on device {device!r}; supported: {', '.join(devices)}")
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        elif isinstance(model, (str, os.PathLike)):
            model = read_model(model)
        graph, _ = from_onnx(model)
        return TlcBackendRep(graph, *_executor(graph, device, **kwargs))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """Run one node on ``inputs`` (in the order of its non-empty inputs), at ``opset_version`` (default 21)."""
        arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, Mapping) else inputs)]
        names = [n for n in node.input if n]
        if len(arrays) != len(names):
            raise InputError(f"node {node.name!r} ({node.op_type}) has {len(names)} inputs, got {len(arrays)} arrays")
        graph_inputs = [helper.make_tensor_value_info(n, ONNX_TYPE_CODES[dtype_name(a.dtype)], a.shape)
                        for n, a in zip(names, arrays)]
        graph_outputs = [onnx.ValueInfoProto(name=n) for n in node.output if n]
        opset = int(kwargs.pop("opset_version", DEFAULT_OPSET))
        model = helper.make_model(helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs),
                                  opset_imports=[helper.make_opsetid(node.domain or "", opset)])
        return cls.run_model(model, arrays, device, **kwargs)


prepare = TlcBackend.prepare
run_model = TlcBackend.run_model
run_node = TlcBackend.run_node
supports_device = TlcBackend.supports_device
is_compatible = TlcBackend.is_compatible
