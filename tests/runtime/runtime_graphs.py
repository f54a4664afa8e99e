"""Graphs and a hook on kernel builds shared by the runtime tests."""

from __future__ import annotations

import threading

import numpy as np

import tlc
from tlc.errors import CompileError
from tlc.ir.graph import Value


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


def fused_graph(kind: str = "elementwise", n_outputs: int = 1, batch: int | str = "N") -> tlc.Graph:
    """x -> Exp -> Fused(x_exp, x) -> [Neg] ... so the group's inputs die at the group (in place allowed)."""
    g = tlc.Graph("fused")
    x = g.input("x", "float32", (batch, 4))
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


class Compiles:
    """Wraps the kernel builds of ``tlc.runtime.native`` (generated kernels and epilogue functions): records
    which were built (the kind, or the op of a one-op kernel) and on which thread, can hold them until
    ``release()`` and can make them fail."""

    def __init__(self, monkeypatch, gate: bool = False, fail: str | None = None):
        from tlc.runtime import native

        self.built: list[str] = []
        self.threads: list[str] = []
        self.fail = fail
        self.gate = threading.Event()
        if not gate:
            self.gate.set()
        for name in ("compile_group", "EpilogueKernel"):
            monkeypatch.setattr(native, name, self._wrap(getattr(native, name), name))

    def _wrap(self, real, name):
        def build(*args, **kwargs):
            self.gate.wait(60)
            self.threads.append(threading.current_thread().name)
            if self.fail:
                raise CompileError(self.fail)
            kernel = real(*args, **kwargs)
            body = args[0] if name == "compile_group" else None
            self.built.append(kernel.kind if body is None or len(body.ops()) > 1 else body.ops()[0].op)
            return kernel

        return build

    def release(self) -> None:
        self.gate.set()


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
