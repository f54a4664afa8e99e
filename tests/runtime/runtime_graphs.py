"""Graphs and a stand-in code generator shared by the runtime tests."""

from __future__ import annotations

import threading
import time

import numpy as np

import tlc
from tlc.errors import CompileError
from tlc.ir.graph import Value
from tlc.reference import run_graph


def elementwise_body(n_inputs: int = 2, n_outputs: int = 1) -> tlc.Graph:
    """A fused elementwise body: y = relu(a * b + a) (and z = y - b for two outputs); inputs [N, 4]."""
    body = tlc.Graph("body")
    a = body.input("a", "float32", ("N", 4))
    b = body.input("b", "float32", ("N", 4)) if n_inputs > 1 else a
    y = body.add_node("Relu", [body.add_node("Add", [body.add_node("Mul", [a, b]), a])])
    body.output(y, "y")
    if n_outputs > 1:
        body.output(body.add_node("Sub", [y, b]), "z")
    return body


def fused_graph(kind: str = "elementwise", n_outputs: int = 1) -> tlc.Graph:
    """x -> Exp -> Fused(x_exp, x) -> [Neg] ... so the group's inputs die at the group (in place allowed)."""
    g = tlc.Graph("fused")
    x = g.input("x", "float32", ("N", 4))
    e = g.add_node("Exp", [x])
    t = g.add_node("Tanh", [x])
    outs = g.add_node("Fused", [e, t], domain="tlc", body=elementwise_body(2, n_outputs), kind=kind)
    outs = (outs,) if isinstance(outs, Value) else outs
    g.output(g.add_node("Neg", [outs[0]]), "y")
    for i, extra in enumerate(outs[1:]):
        g.output(extra, f"extra{i}")
    return g


def run_in_threads(worker, n: int = 8) -> None:
    """Call ``worker(i)`` on ``n`` threads started together; re-raise the first failure here."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def guarded(i):
        try:
            barrier.wait()
            worker(i)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class FakeKernel:
    """What ``tlc.kernels.compile_group`` returns, computed with the reference executor (counts its calls)."""

    def __init__(self, body: tlc.Graph, kind: str):
        self.body = body
        self.name, self.kind, self.target = f"fake_{kind}", kind, "cpu"
        self.compile_seconds, self.cache_hit, self.source = 0.0, False, "# fake"
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        with self._lock:
            self.calls += 1
        assert all(a.flags.c_contiguous for a in inputs) and all(o.flags.c_contiguous for o in outputs)
        for out, res in zip(outputs, run_graph(self.body, inputs)):
            np.copyto(out, res)

    def launcher(self, input_shapes, output_shapes, serial=False):
        """``Kernel.launcher``: a caller bound to shapes (checked here, as the real one checks them once)."""
        self.launchers = getattr(self, "launchers", 0) + 1

        def launch(inputs, outputs, alias=None):
            assert [a.shape for a in inputs] == [tuple(s) for s in input_shapes]
            assert [o.shape for o in outputs] == [tuple(s) for s in output_shapes]
            self(inputs, outputs)

        return launch


class FakeCodegen:
    """Stands in for ``tlc.runtime.fused.codegen`` until tlc.kernels lands: records what it compiled."""

    def __init__(self, delay: float = 0.0, fail: str | None = None):
        self.delay = delay
        self.fail = fail
        self.kernels: list[FakeKernel] = []
        self.threads: list[str] = []

    def compile_group(self, body, kind, input_types, options, alias=None):
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail:
            raise CompileError(self.fail)
        kernel = FakeKernel(body, kind)
        self.kernels.append(kernel)
        return kernel

    def split_epilogue(self, body: tlc.Graph) -> tuple[tlc.Graph, tlc.Graph]:
        """Cut a MatMul-then-elementwise body after its one contraction node."""
        (mm,) = [n for n in body.ops() if n.op in ("MatMul", "Gemm", "Conv")]
        contraction = tlc.Graph("contraction")
        ins = [contraction.input(body.node(v).name, body.type_of(v).dtype, body.type_of(v).shape)
               for v in body.inputs_of(mm)]
        contraction.output(contraction.add_node(mm.op, ins, **mm.attrs), "acc")
        ew = tlc.Graph("epilogue")   # input 0: the contraction's result (tlc.kernels' contract)
        acc = body.type_of(mm.output(0))
        values = {mm.output(0): ew.input("contraction", acc.dtype, acc.shape)}
        for node in body.inputs:
            if any(u.id != mm.id for u, _ in body.users(node.output(0))):
                values[node.output(0)] = ew.input(node.name, node.output_types[0].dtype, node.output_types[0].shape)
        for node in body.nodes():
            if node.op == "Constant":
                values[node.output(0)] = ew.constant(node.attrs["value"], name=node.name)
            elif node.op != "Input" and node.id != mm.id:
                values[node.output(0)] = ew.add_node(node.op, [values[v] for v in body.inputs_of(node)],
                                                     **node.attrs)
        for v, name in body.outputs:
            ew.output(values[v], name)
        return contraction, ew

    def __call__(self):
        return self.compile_group, self.split_epilogue


def epilogue_graph() -> tlc.Graph:
    """x[N,8] -> Fused[epilogue](x, w, bias): relu(x @ w + bias) -> Neg."""
    body = tlc.Graph("ep_body")
    x = body.input("x", "float32", ("N", 8))
    w = body.input("w", "float32", (8, 4))
    bias = body.input("bias", "float32", (4,))
    body.output(body.add_node("Relu", [body.add_node("Add", [body.add_node("MatMul", [x, w]), bias])]), "y")
    g = tlc.Graph("epilogue")
    gx = g.input("x", "float32", ("N", 8))
    rng = np.random.default_rng(1)
    gw = g.constant(rng.standard_normal((8, 4)).astype(np.float32), name="w")
    gb = g.constant(rng.standard_normal(4).astype(np.float32), name="bias")
    y = g.add_node("Fused", [gx, gw, gb], domain="tlc", body=body, kind="epilogue")
    g.output(g.add_node("Neg", [y]), "y")
    return g
