"""Running ONNX backend node test cases (``onnx.backend.test.case.node``) through tlc: the reference executor
by default, or compiled plans (``CompiledRunner``: ``tlc.compile`` at an opt level, eager JIT by default).

One place for the outside oracle: tests and tools/conformance.py use ``run_case`` and ``cases_for``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

import tlc
from tlc.io.onnx import from_onnx

PASS, FAIL, UNSUPPORTED = "pass", "fail", "unsupported"

#: graph -> a function that runs it on feeds (name -> array) and returns outputs (name -> array)
Runner = Callable[[tlc.Graph], Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]]


def reference_runner(graph: tlc.Graph) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """The reference executor (the default of ``run_case``)."""
    return functools.partial(tlc.reference.run, graph)


@dataclasses.dataclass(frozen=True)
class CompiledRunner:
    """``tlc.compile(graph, opt_level=..., jit=...)``, then ``Plan.run``.

    With ``strict_jit`` a kernel that fails to compile (the plan would run the step's fallback and warn) is a
    failure of the case: the point is to test generated kernels, not the fallback.
    """

    opt_level: int = 2
    jit: str = "eager"
    cache_dir: str | None = None      # None: $TLC_CACHE_DIR or the kernel cache's default
    strict_jit: bool = True
    target: str = "cpu"
    on_plan: Callable[[tlc.Plan], None] | None = dataclasses.field(default=None, compare=False)  # sees each plan

    @property
    def label(self) -> str:
        return f"-O{self.opt_level}"

    def __call__(self, graph: tlc.Graph) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a failed group warns; strict_jit reports it below
            plan = tlc.compile(graph, opt_level=self.opt_level, jit=self.jit, cache_dir=self.cache_dir,
                               target=self.target)
        if self.on_plan is not None:
            self.on_plan(plan)
        failed = [job for job in plan.jobs if job.status == "failed"]
        if failed and self.strict_jit:
            raise tlc.CompileError(f"kernel of {failed[0].name} was not compiled: {failed[0].reason}"
                                   + (f" (+{len(failed) - 1} other)" if len(failed) > 1 else ""))
        return plan.run


@functools.cache
def all_cases() -> tuple:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(collect_testcases())


def quick_cases_for(*ops: str) -> list:
    """``cases_for(*ops)`` without building all ~1,900 node cases (``all_cases`` takes ~6 s): importing onnx's case
    module of an op (``onnx.backend.test.case.node.<op lowercased>``, else in snake case) records that op's cases
    in onnx's list, which ``all_cases`` later returns in full (the other modules imported then), so the two mix in
    one session."""
    import importlib

    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in ops:
            names = (op.lower(), re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower(), f"{op.lower()}_")   # if_: a keyword
            for k, name in enumerate(names):
                try:
                    importlib.import_module(f"{node.__name__}.{name}")
                    break
                except ModuleNotFoundError:  # some modules are snake case: causal_conv_with_state
                    if k == len(names) - 1:
                        raise
    wanted = set(ops)
    # NOTE: _NodeTestCases is where onnx's ``expect`` records every case it builds
    return [c for c in node._NodeTestCases if c.model.graph.node and c.model.graph.node[0].op_type in wanted]


def case_ops(case) -> list[str]:
    """The (qualified) op types a case's model uses."""
    return sorted({f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
                   for n in case.model.graph.node})


def cases_for(*ops: str) -> list:
    """Node cases whose model uses one of ``ops`` (by its first node's op type)."""
    wanted = set(ops)
    return [c for c in all_cases() if c.model.graph.node and c.model.graph.node[0].op_type in wanted]


def as_array(item) -> np.ndarray:
    """Case data is numpy arrays, or TensorProtos for types numpy lacks (the test-case type hints lie); a
    sequence is a list of them and an empty optional None (kept so)."""
    if item is None:
        return None
    if isinstance(item, list):
        return [as_array(x) for x in item]
    return numpy_helper.to_array(item) if isinstance(item, onnx.TensorProto) else np.asarray(item)


def input_names(model: onnx.ModelProto) -> list[str]:
    """The model's graph inputs that the caller feeds (those without an initializer), in order."""
    initialized = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in initialized]


def compare_values(name: str, have, want, rtol: float, atol: float) -> str:
    """``compare`` for any value: an array, a sequence (a list of arrays, compared element by element) or an
    empty optional (None)."""
    if want is None or have is None:
        return "" if have is None and want is None else f"output {name!r}: {have!r:.40}, expected {want!r:.40}"
    if isinstance(want, list) or isinstance(have, list):
        if not isinstance(have, list) or not isinstance(want, list) or len(have) != len(want):
            return f"output {name!r}: a sequence of {len(want) if isinstance(want, list) else '?'} expected"
        return next((r for i, (h, w) in enumerate(zip(have, want))
                     if (r := compare(f"{name}[{i}]", np.asarray(h), w, rtol, atol))), "")
    return compare(name, np.asarray(have), want, rtol, atol)


def compare(name: str, have: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    """"" when ``have`` matches ``want`` the way ONNX's backend runner checks it, else the reason."""
    if have.shape != want.shape:
        return f"output {name!r}: shape {list(have.shape)}, expected {list(want.shape)}"
    if want.dtype == object or have.dtype == object:
        if [str(v) for v in have.ravel()] != [str(v) for v in want.ravel()]:
            return f"output {name!r}: string values differ"
        return ""
    if have.dtype != want.dtype:
        return f"output {name!r}: dtype {have.dtype}, expected {want.dtype}"
    try:
        np.testing.assert_allclose(have, want, rtol=rtol, atol=atol)
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        detail = next((ln for ln in lines if ln.startswith("Mismatched elements")), lines[-1] if lines else "")
        worst = next((ln for ln in lines if ln.startswith("Max absolute")), "")
        return f"output {name!r}: {detail}" + (f"; {worst}" if worst else "")
    return ""


def run_case(case, runner: Runner = reference_runner) -> tuple[str, str]:
    """(status, detail): pass, fail (with the reason) or unsupported (tlc refuses the model by name).

    ``runner`` prepares the imported graph (default: the reference executor; ``CompiledRunner()`` compiles it).
    The stage that failed starts the reason: ``import:``, ``compile:`` or ``run:``.
    """
    try:
        g, _ = from_onnx(case.model)
    except tlc.UnsupportedOperatorError as exc:
        return UNSUPPORTED, str(exc)
    except tlc.TlcError as exc:
        return FAIL, f"import: {type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug in tlc, not in the model: report it as a failure of this case
        return FAIL, f"import: internal error: {type(exc).__name__}: {exc}"
    try:
        execute = runner(g)
    except tlc.TlcError as exc:
        return FAIL, f"compile: {type(exc).__name__}: {exc}"
    except Exception as exc:
        return FAIL, f"compile: internal error: {type(exc).__name__}: {exc}"
    names = input_names(case.model)
    for inputs, outputs in case.data_sets:
        feeds = {n: as_array(a) for n, a in zip(names, inputs)}
        try:
            got = execute(feeds)
        except tlc.TlcError as exc:
            return FAIL, f"run: {type(exc).__name__}: {exc}"
        except Exception as exc:
            return FAIL, f"run: internal error: {type(exc).__name__}: {exc}"
        if len(outputs) != len(g.outputs):
            return FAIL, f"{len(g.outputs)} outputs, expected {len(outputs)}"
        for (_, name), want in zip(g.outputs, outputs):
            reason = compare_values(name, got[name], as_array(want), case.rtol, case.atol)
            if reason:
                return FAIL, reason
    return PASS, ""


#: ConstantOfShape fills larger than this (the fully connected layers of AlexNet, VGG, ZFNet) stay uniform: speed
MAX_RANDOM_FILL = 1 << 22


def random_light_weights(model: onnx.ModelProto, rng: np.random.Generator) -> onnx.ModelProto:
    """A light model (changed in place and returned) with its ConstantOfShape weight fills replaced by random
    initializers: He-scaled normal for filters and matrices, [0.5, 1.5) for vectors (positive, so
    BatchNormalization's variances stay valid). Its final Softmax is dropped: random weights give large logits,
    and a saturated softmax would hide differences."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        shape = tuple(int(d) for d in inits[node.input[0]]) if node.input and node.input[0] in inits else None
        if node.op_type != "ConstantOfShape" or shape is None or np.prod(shape) > MAX_RANDOM_FILL:
            kept.append(node)
            continue
        if len(shape) >= 2:
            value = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / np.prod(shape[1:])))
        else:
            value = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        model.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        # NOTE: opset 9 models have IR version 3, where every initializer is also a graph input
        model.graph.input.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, shape))
    if kept[-1].op_type == "Softmax" and kept[-1].output[0] == model.graph.output[0].name:
        model.graph.output[0].name = kept.pop().input[0]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def tools_models():
    """tools/models.py, the benchmark and real-model builders (tools/ is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "models.py"
    spec = importlib.util.spec_from_file_location("tlc_tools_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
