"""Every group the fusion pass makes of the example transformer block compiles and matches the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kernel_helpers import stand_in_ops

from tlc.io import load
from tlc.kernels import compile_group, epilogue_inputs, split_epilogue
from tlc.passes.manager import optimize
from tlc.reference import run_graph

EXAMPLE = Path(__file__).resolve().parents[2] / "tlc" / "examples" / "transformer_small.onnx"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="the example model is not in this checkout")
def test_every_fused_group_of_the_example_transformer(kcache):
    with stand_in_ops():  # ReduceMean and LayerNormalization where the registry lacks them
        graph = load(EXAMPLE)
        optimized = optimize(graph, 2)
        optimized = optimized[0] if isinstance(optimized, tuple) else optimized
        groups = [n for n in optimized.nodes() if n.op == "Fused"]
        assert {n.attrs["kind"] for n in groups} == {"epilogue", "reduction"}
        rng = np.random.default_rng(0)
        for node in groups:
            body, kind = node.attrs["body"], node.attrs["kind"]
            types = [optimized.type_of(v) for v in optimized.inputs_of(node)]
            shapes = [tuple(d if isinstance(d, int) else 3 for d in t.shape) for t in types]
            inputs = [rng.standard_normal(s).astype(t.dtype) for s, t in zip(shapes, types, strict=True)]
            expected = run_graph(body, inputs)
            if kind == "epilogue":  # the elementwise part's kernel, over the contraction the reference computes
                head, body = split_epilogue(body)
                head_in, rest_in = epilogue_inputs(node.attrs["body"])
                product = run_graph(head, [inputs[i] for i in head_in])
                inputs = product + [inputs[i].reshape(n.output_types[0].shape) for i, n in
                                    zip(rest_in, body.inputs[1:], strict=True)]
                types = [n.output_types[0] for n in body.inputs]
                kind = "elementwise"
            kernel = compile_group(body, kind, types, cache=kcache)
            outputs = [np.empty_like(e) for e in expected]
            kernel(inputs, outputs)
            for got, want in zip(outputs, expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{kind} group {node.id}")
