"""Running ONNX backend node test cases (``onnx.backend.test.case.node``) through tlc's reference executor.

One place for the outside oracle: tests and tools/conformance.py use ``run_case`` and ``cases_for``.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

import tlc
from tlc.io.onnx import from_onnx

PASS, FAIL, UNSUPPORTED = "pass", "fail", "unsupported"


@functools.cache
def all_cases() -> tuple:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(collect_testcases())


def case_ops(case) -> list[str]:
    return sorted({n.op_type for n in case.model.graph.node})


def cases_for(*ops: str) -> list:
    """Node cases whose model uses one of ``ops`` (by its first node's op type)."""
    wanted = set(ops)
    return [c for c in all_cases() if c.model.graph.node and c.model.graph.node[0].op_type in wanted]


def run_case(case) -> tuple[str, str]:
    """(status, detail): pass, fail (with the reason) or unsupported (tlc refuses the model by name)."""
    try:
        g, _ = from_onnx(case.model)
    except tlc.UnsupportedOperatorError as exc:
        return UNSUPPORTED, str(exc)
    except tlc.TlcError as exc:
        return FAIL, f"import: {type(exc).__name__}: {exc}"
    for inputs, outputs in case.data_sets:
        feeds = {n.name: a for n, a in zip(g.inputs, inputs)}
        try:
            got = tlc.reference.run(g, feeds)
        except tlc.TlcError as exc:
            return FAIL, f"run: {type(exc).__name__}: {exc}"
        for (_, name), want in zip(g.outputs, outputs):
            have = got[name]
            if want.dtype == object or have.dtype == object:
                ok = have.shape == want.shape and [str(v) for v in have.ravel()] == [str(v) for v in want.ravel()]
                if not ok:
                    return FAIL, f"output {name!r}: string values differ"
                continue
            if have.dtype != want.dtype:
                return FAIL, f"output {name!r}: dtype {have.dtype}, expected {want.dtype}"
            try:
                np.testing.assert_allclose(have, want, rtol=case.rtol, atol=case.atol)
            except AssertionError as exc:
                return FAIL, f"output {name!r}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}"
    return PASS, ""
