"""MatMul + Add(bias) -> Gemm (-O2), for a 2-D A, a 2-D constant B and a bias that broadcasts to [M, N].

Gemm with alpha = beta = 1 computes exactly A @ B + C, so the rewrite is exact. The bias may be [N], [1, N],
[M, 1], [M, N] or a scalar (ONNX's unidirectional broadcast to [M, N]); it must not broadcast the product to a
bigger shape.

A left operand of rank > 2 (a [batch, seq, K] activation times a [K, N] weight) is kept as MatMul + Add: Gemm
is 2-D only, and Reshape -> Gemm -> Reshape would add two nodes to remove one while the fusion pass already
applies the bias as an epilogue on the MatMul's output buffer. The rule refuses with that reason.
"""

from __future__ import annotations

from ..rewrite import FLOAT, Builder, Const, Match, Op, Rule, RuleSet, Var
from .common import same_type_reason, unidirectional_broadcast_reason


def _check(m: Match) -> str | None:
    a, b, c = m.type("a"), m.const("b"), m.type("c")
    if a.rank != 2:
        return f"A has rank {a.rank}: kept as MatMul + Add (Gemm is 2-D; fusion applies the bias as an epilogue)"
    if b.ndim != 2:
        return f"B has rank {b.ndim}, Gemm needs 2"
    if c is None or c.dtype != a.dtype:
        return f"the bias has dtype {None if c is None else c.dtype}, A has {a.dtype}"
    reason = same_type_reason(m.graph, m.root.output(0), m["mm"])
    if reason:
        return f"the bias broadcasts the product: {reason}"
    reason = unidirectional_broadcast_reason(c.shape, m.graph.shape_of(m["mm"]))
    return None if reason is None else f"the bias does not broadcast to [M, N]: {reason}"


def _rewrite(m: Match, b: Builder):
    return b.op("Gemm", m["a"], m["b"], m["c"])


RULES = RuleSet("gemm", (
    Rule("matmul-add-to-gemm",
         Op("Add", Op("MatMul", Var("a", dtype=FLOAT), Const(name="b"), name="mm"), Var("c")),
         _rewrite, _check, min_level=2, produces=("Gemm",),
         description="MatMul(A 2-D, B 2-D constant) + bias -> Gemm(A, B, bias)"),
), "MatMul + bias to Gemm")
