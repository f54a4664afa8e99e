"""The CUDA renderer under Numba's simulator (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1): elementwise and row
kernels against the reference executor, and ``entry``, the runtime's launch on device arrays."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kernel_helpers import check_against_reference, random_array

from tlc.errors import CompileError
from tlc.ir import Graph, TensorType
from tlc.kernels import compile_group
from tlc.kernels import cuda as kcuda

cuda = pytest.importorskip("numba.cuda")
pytestmark = pytest.mark.skipif(not cuda.is_available(), reason="no CUDA device and no simulator")


def chain(dtype: str) -> Graph:
    g = Graph("cuda_chain")
    x = g.input("x", dtype, ("N", 8))
    b = g.input("b", dtype, (8,))
    h = g.add_node("Add", [x, b])
    g.output(g.add_node("Mul", [g.add_node("Sigmoid", [h]), g.add_node("Tanh", [h])]), "y")
    g.output(
        g.add_node(
            "Where",
            [
                g.add_node("Less", [x, b]),
                g.add_node("Pow", [x, g.constant(np.array(2, dtype))]),
                g.add_node("Erf", [x]),
            ],
        ),
        "z",
    )
    g.output(g.add_node("Max", [x, b]), "m")
    return g


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_elementwise_matches_reference(kcache, dtype):
    body = chain(dtype)
    kernel = compile_group(
        body, "elementwise", [TensorType(dtype, ("N", 8)), TensorType(dtype, (8,))], target="cuda", cache=kcache
    )
    assert kernel.target.name == "cuda" and "cuda.grid(1)" in kernel.source and "cl.tanh_" in kernel.source
    rng = np.random.default_rng(0)
    x = random_array(rng, (5, 8), dtype)
    x[0, 0] = np.nan
    check_against_reference(kernel, body, [x, random_array(rng, (8,), dtype)], tolerance=(1e-5, 1e-6))
    check_against_reference(kernel, body, [random_array(rng, (0, 8), dtype), random_array(rng, (8,), dtype)])


def test_cuda_integer_ops_and_in_place(kcache):
    g = Graph("cuda_int")
    a = g.input("a", "int32", ("N",))
    b = g.input("b", "int32", ("N",))
    g.output(g.add_node("Add", [g.add_node("Div", [a, b]), g.add_node("Mod", [a, b], fmod=1)]), "q")
    kernel = compile_group(g, "elementwise", [TensorType("int32", ("N",))] * 2, target="cuda", cache=kcache)
    a_val = np.array([7, -7, 7, -7, 0], np.int32)
    b_val = np.array([2, 2, -2, -2, 3], np.int32)
    want = (np.trunc(a_val / b_val) + np.fmod(a_val, b_val)).astype(np.int32)
    kernel([a_val, b_val], [a_val])  # written over an input
    np.testing.assert_array_equal(a_val, want)


def test_a_numba_cuda_that_cannot_compile_with_this_numpy_is_a_named_error(monkeypatch):
    """numba-cuda 0.30.4 on numpy 2.5 fails at the first launch of any kernel (its array typing registers
    np.row_stack, which numpy 2.5 removed): on a device, the cuda target's check says so before compiling anything."""
    import importlib

    from tlc.targets import cuda as kcuda

    real = importlib.import_module

    def broken(name, *args):
        if name == "numba.cuda.np.arrayobj":
            raise AttributeError("module 'numpy' has no attribute 'row_stack'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(CompileError, match=r"cannot compile kernels with numpy .*row_stack.*numpy < 2\.5"):
        kcuda._check_numba_cuda()


def test_cuda_cache_keys_carry_the_device(kcache, monkeypatch):
    """A CUDA kernel's cache key holds the target, the device's compute capability and the toolkit's version
    (the simulator: a mark of its own), so an entry cached on one GPU or toolkit never serves another; CPU keys
    are as before (no salt)."""
    from types import SimpleNamespace

    from tlc.targets import cuda as cuda_target

    body = chain("float32")
    kernel = compile_group(body, "elementwise", [TensorType("float32", ("N", 8)), TensorType("float32", (8,))],
                           target="cuda", cache=kcache)
    salt = kernel.target.cache_key_salt()
    from numba import config
    if config.ENABLE_CUDASIM:
        assert salt == "target=cuda;cuda=simulator"
    else:                           # on a GPU: its compute capability and the toolkit's version
        assert re.fullmatch(r"target=cuda;cc=\d+\.\d+;toolkit=\d+\.\d+", salt), salt
    assert kernel.name.endswith(kcache.key(kernel.source, salt)[:12])
    assert kcache.key(kernel.source, salt) != kcache.key(kernel.source)
    monkeypatch.setattr(cuda_target, "_simulated", lambda: False)
    monkeypatch.setattr(cuda, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)),
                        raising=False)
    monkeypatch.setattr(cuda.runtime, "get_version", lambda: (12, 4), raising=False)
    assert cuda_target.cache_salt() == "cc=9.0;toolkit=12.4"
    monkeypatch.setattr(cuda, "get_current_device", lambda: SimpleNamespace(compute_capability=(8, 0)),
                        raising=False)
    assert kcache.key(kernel.source, f"target=cuda;{cuda_target.cache_salt()}") != \
        kcache.key(kernel.source, "target=cuda;cc=9.0;toolkit=12.4")

    def no_device():
        raise RuntimeError("no device")

    monkeypatch.setattr(cuda, "get_current_device", no_device, raising=False)
    assert cuda_target.cache_salt() == "cuda=unknown (RuntimeError)"


# ---------------------------------------------------------------------------- row kernels
def axes(g: Graph):
    return g.constant(np.array([-1], np.int64))


def biased_softmax(dtype: str) -> Graph:
    """x plus a bias per row (broadcast along the row), then a softmax decomposed over the last axis."""
    g = Graph("cuda_softmax")
    x = g.input("x", dtype, ("N", "L"))
    h = g.add_node("Add", [x, g.input("bias", dtype, ("N", 1))])
    e = g.add_node("Exp", [g.add_node("Sub", [h, g.add_node("ReduceMax", [h, axes(g)])])])
    g.output(g.add_node("Div", [e, g.add_node("ReduceSum", [e, axes(g)])]), "p")
    return g


def softmax_types(dtype: str) -> list[TensorType]:
    return [TensorType(dtype, ("N", "L")), TensorType(dtype, ("N", 1))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_softmax_rows(kcache, dtype):
    """Rows longer than the block and not a multiple of it, rows of one element, no rows; a NaN row stays NaN."""
    body = biased_softmax(dtype)
    kernel = compile_group(body, "reduction", softmax_types(dtype), target="cuda", cache=kcache)
    assert "cuda.shared.array" in kernel.source and "cuda.syncthreads()" in kernel.source
    assert "sc_" not in kernel.source  # the exp the CPU keeps in a scratch row is computed again
    rng = np.random.default_rng(0)
    long = 2 * kcuda.ROW_THREADS + 5  # 37 under the simulator
    for n, length in [(5, long), (3, 1), (0, long)]:
        x = random_array(rng, (n, length), dtype) * 10
        if n == 5:
            x[2, 30] = np.nan
        check_against_reference(kernel, body, [x, random_array(rng, (n, 1), dtype)], tolerance=(1e-5, 1e-6))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_layer_norm_rows(kcache, dtype):
    """A decomposed layer norm (three passes: sum x | sum (x - mean)^2 | write) and its mean, a row-reduced
    output."""
    g = Graph("cuda_ln")
    x = g.input("x", dtype, ("B", "T", 20))
    gamma, beta = g.input("gamma", dtype, (20,)), g.input("beta", dtype, (20,))
    mean = g.add_node("ReduceMean", [x, axes(g)])
    d = g.add_node("Sub", [x, mean])
    var = g.add_node("ReduceMean", [g.add_node("Mul", [d, d]), axes(g)])
    den = g.add_node("Sqrt", [g.add_node("Add", [var, g.constant(np.array(1e-5, dtype))])])
    g.output(g.add_node("Add", [g.add_node("Mul", [g.add_node("Div", [d, den]), gamma]), beta]), "y")
    g.output(mean, "mean")
    types = [TensorType(dtype, ("B", "T", 20)), TensorType(dtype, (20,)), TensorType(dtype, (20,))]
    kernel = compile_group(g, "reduction", types, target="cuda", cache=kcache)
    rng = np.random.default_rng(1)
    tolerance = (1e-4, 1e-5) if dtype == "float32" else (1e-11, 1e-12)
    for b, t in [(2, 3), (1, 1)]:
        x = random_array(rng, (b, t, 20), dtype) * 3 + 1
        check_against_reference(kernel, g, [x, random_array(rng, (20,), dtype), random_array(rng, (20,), dtype)],
                                tolerance=tolerance)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the simulator adds numpy scalars
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_cuda_sum_max_min_rows(kcache, dtype):
    """Plain row reductions in one pass, NaN-propagating max/min (NaN first, last, alone), integer sums that wrap
    like the CPU's, and rows of no elements (the reductions' identities)."""
    g = Graph("cuda_reduce")
    x = g.input("x", dtype, ("N", "L"))
    for op in ("ReduceSum", "ReduceMax", "ReduceMin"):
        g.output(g.add_node(op, [x, axes(g)]), op)
    kernel = compile_group(g, "reduction", [TensorType(dtype, ("N", "L"))], target="cuda", cache=kcache)
    rng = np.random.default_rng(2)
    x = random_array(rng, (6, 23), dtype)
    if dtype == "int32":
        x[0] = np.iinfo(np.int32).max  # the sum wraps
    else:
        x[1, 0], x[2, 22], x[3, :] = np.nan, np.nan, np.nan
    check_against_reference(kernel, g, [x])
    check_against_reference(kernel, g, [np.empty((2, 0), dtype)])


def test_cuda_row_kernels_refuse_bool_reductions_and_in_place(kcache):
    g = Graph("cuda_any")
    g.output(g.add_node("ReduceMax", [g.input("x", "bool", (4, 4)), axes(g)]), "y")
    for target in ("cuda", "cpu"):   # refused by name when the plan is built, for every target
        with pytest.raises(CompileError, match="a row max of bool values"):
            compile_group(g, "reduction", [TensorType("bool", (4, 4))], target=target, cache=kcache)
    kernel = compile_group(biased_softmax("float32"), "reduction", softmax_types("float32"), target="cuda",
                           cache=kcache)
    with pytest.raises(CompileError, match="only elementwise cuda kernels compute in place"):
        kernel.entry([(2, 8), (2, 1)], [(2, 8)], (0,))


# ---------------------------------------------------------------------------- entry: launches on device arrays
def test_cuda_entry_elementwise_in_place_on_device_arrays(kcache):
    """The runtime's call: ``fn(dims, *inputs, *constants, *outputs)`` on arrays already on the device, the
    output of the in-place variant left out and written into its input; a plain function, not a dispatcher."""
    g = Graph("cuda_axpb")
    x = g.input("x", "float32", ("N", 8))
    scale = g.constant(np.linspace(0.5, 2, 8, dtype=np.float32))  # a constant operand, passed after the inputs
    g.output(g.add_node("Add", [g.add_node("Mul", [x, scale]), g.constant(np.array(1, np.float32))]), "y")
    kernel = compile_group(g, "elementwise", [TensorType("float32", ("N", 8))], target="cuda", cache=kcache,
                           alias=(0,))
    rng = np.random.default_rng(3)
    host = random_array(rng, (3, 8), "float32")
    want = host * np.linspace(0.5, 2, 8, dtype=np.float32) + 1
    fn, dims = kernel.entry([(3, 8)], [(3, 8)], (0,))
    assert type(fn).__name__ == "function" and list(dims) == [3, 8]
    (constant,) = kernel.constant_arrays
    assert kernel.constant_arrays[0] is constant and constant.shape == (8,)  # made once
    device = cuda.to_device(host.reshape(-1))
    fn(dims, device, *kernel.constant_arrays)
    np.testing.assert_allclose(device.copy_to_host().reshape(3, 8), want, rtol=1e-6)
    flat = host.reshape(-1).copy()  # the simulator's device memory: a numpy array
    fn(dims, flat, *kernel.constant_arrays)
    np.testing.assert_allclose(flat.reshape(3, 8), want, rtol=1e-6)
    out = cuda.device_array(24, np.float32)  # the variant with an output of its own
    own, _ = kernel.entry([(3, 8)], [(3, 8)], (-1,))
    own(dims, cuda.to_device(host.reshape(-1)), *kernel.constant_arrays, out)
    np.testing.assert_allclose(out.copy_to_host().reshape(3, 8), want, rtol=1e-6)
    nothing, zero = kernel.entry([(0, 8)], [(0, 8)], (0,))
    nothing(zero, np.empty(0, np.float32), *kernel.constant_arrays)  # no element: no launch


def test_cuda_entry_reduction_grid_strides_over_rows(kcache, monkeypatch):
    """A row kernel through ``entry`` with fewer blocks than rows: each block strides over the rows."""
    from tlc.reference import run_graph

    monkeypatch.setattr(kcuda, "MAX_BLOCKS", 2)
    body = biased_softmax("float64")
    kernel = compile_group(body, "reduction", softmax_types("float64"), target="cuda", cache=kcache)
    rng = np.random.default_rng(4)
    x, bias = random_array(rng, (5, 19), "float64"), random_array(rng, (5, 1), "float64")
    fn, dims = kernel.entry([(5, 19), (5, 1)], [(5, 19)], (-1,))
    assert kernel._grid(dims) == (2, kcuda.row_threads(19))
    out = cuda.device_array(5 * 19, np.float64)
    fn(dims, cuda.to_device(x.reshape(-1)), cuda.to_device(bias.reshape(-1)), out)
    np.testing.assert_allclose(out.copy_to_host().reshape(5, 19), run_graph(body, [x, bias])[0], rtol=1e-12)


def test_device_view_is_made_once_per_buffer_without_a_sync(monkeypatch):
    """A ``__cuda_array_interface__`` object (a CuPy array) becomes a Numba view once per (address, shape, dtype,
    strides), with ``sync=False``; numpy arrays (the simulator's device memory) and Numba's pass as they are."""

    class Foreign:
        def __init__(self, array):
            self.array = array

        @property
        def __cuda_array_interface__(self):
            a = self.array
            return {"data": (a.ctypes.data, False), "shape": a.shape, "typestr": a.dtype.str, "strides": None,
                    "version": 3, "stream": 1}

    made = []

    def from_cai(desc, owner=None, sync=True):
        made.append((desc["data"][0], owner, sync))
        return np.zeros(desc["shape"], desc["typestr"])

    monkeypatch.setattr(cuda, "from_cuda_array_interface", from_cai, raising=False)
    monkeypatch.setattr(kcuda, "_VIEWS", {})
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    first = kcuda.device_view(Foreign(a))
    assert kcuda.device_view(Foreign(a)) is first and len(made) == 1
    assert kcuda.device_view(Foreign(b)) is not first and len(made) == 2
    assert kcuda.device_view(Foreign(a.reshape(2, 2))) is not first and len(made) == 3
    assert all(owner is None and sync is False for _, owner, sync in made)
    device = cuda.to_device(a)
    assert kcuda.device_view(a) is a and kcuda.device_view(device) is device
