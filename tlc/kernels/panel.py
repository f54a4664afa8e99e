"""A float32 matrix product on a constant right operand packed in panels, written in LLVM IR (llvmlite) and
called by name from compiled code: ``C[rows, N] = A[rows, K] @ B[K, N]`` for MatMul/Gemm steps whose B is a
weight (a transformer's projections and MLPs).

Why: on the products of small transformers (197 x 192 x 768 and the like) numpy's OpenBLAS runs at 45-52
GMAC/s on one core of this machine, onnxruntime's MLAS at 55-70, and every call packs B again. Here B is packed
once, when the plan is bound, into panels of ``PANEL`` columns ([N / PANEL, K, PANEL]); a tile of ``TILE`` rows
of C keeps its ``2 * TILE`` accumulators (16 lanes each) in registers while it walks K: per k, two vector
loads of the panel, ``TILE`` broadcasts of A's elements, ``2 * TILE`` fused multiply-adds, and the tile's rows
are stored as whole vectors. Measured against numpy's BLAS in one process (1 thread, min of medians): 197 x 192
x 768 54-57 against 49-52 GMAC/s, 197 x 768 x 192 55-58 against 48-52, 96 x 1024 x 1024 55 against 43. Numba's
loops never keep such a block in registers (LLVM cannot prove the arrays apart), hence IR with explicit vectors;
LLVM lowers the 16-lane vectors to what the host has (one AVX-512 register each).

``tlc_panel_rows(b, a, c, rows, k, n, lda, ldc)`` (addresses as int64, as ``blas.py``'s symbols): C's columns
[0, n) of rows [0, rows) (row stride ``ldc``) from the panels at ``b`` and A [rows, k] (row stride ``lda``, unit
column stride); whole tiles, then one tile of the last ``rows % TILE`` rows; the last panel's columns past ``n``
are masked off the stores. Each panel (K x 128 bytes) stays in L1/L2 while every tile of rows walks it.
``ensure()`` compiles it for the host (MCJIT, ~0.1 s; the machine code is kept in the kernel cache, keyed by the
IR, the CPU and llvmlite's version) and registers the symbol with LLVM: before any kernel that calls it is
compiled or loaded.
"""

from __future__ import annotations

import hashlib
import os
import threading

import llvmlite
import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import cfunc, njit, types

from .cache import default_cache_dir

#: columns of C a panel (two 16-lane vectors) and rows a tile: 2 * TILE accumulators, two panel vectors and a
#: broadcast stay within AVX-512's 32 registers
PANEL = 32
TILE = 6
LANES = 16
SYMBOL = "tlc_panel_rows"

_f32, _i64, _i32 = ir.FloatType(), ir.IntType(64), ir.IntType(32)
_vec = ir.VectorType(_f32, LANES)


def _const(v: int) -> ir.Constant:
    return ir.Constant(_i64, v)


def _splat(b: ir.IRBuilder, value, lanes_type: ir.VectorType):
    """``value`` in every lane of a vector of ``lanes_type``."""
    one = b.insert_element(ir.Constant(lanes_type, None), value, ir.Constant(_i32, 0))
    return b.shuffle_vector(one, ir.Constant(lanes_type, None), ir.Constant(ir.VectorType(_i32, LANES), [0] * LANES))


class _Emitter:
    """The IR of ``tlc_panel_rows``: loops as blocks with phi nodes."""

    def __init__(self, module: ir.Module):
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_i64] * 8), name=SYMBOL)
        self.fma = ir.Function(module, ir.FunctionType(_vec, [_vec, _vec, _vec]), name="llvm.fma.v16f32")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        b = self.b
        bp, ap, cp, rows, k, n, lda, ldc = self.fn.args
        fp = _f32.as_pointer()
        self.bp, self.ap, self.cp = b.inttoptr(bp, fp), b.inttoptr(ap, fp), b.inttoptr(cp, fp)
        self.rows, self.k, self.n, self.lda, self.ldc = rows, k, n, lda, ldc
        self.store = ir.Function(module, ir.FunctionType(ir.VoidType(), [_vec, _vec.as_pointer(), _i32,
                                                                         ir.VectorType(ir.IntType(1), LANES)]),
                                 name="llvm.masked.store.v16f32.p0v16f32")
        panels = b.sdiv(b.add(n, _const(PANEL - 1)), _const(PANEL))
        self.loop(_const(0), panels, self.panel, "panel")
        b.ret_void()

    def loop(self, start, stop, body, name: str) -> None:
        """``for i in range(start, stop): body(i)``."""
        b = self.b
        before = b.block
        head = self.fn.append_basic_block(f"{name}_head")
        inside = self.fn.append_basic_block(f"{name}_body")
        after = self.fn.append_basic_block(f"{name}_end")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(_i64, name)
        i.add_incoming(start, before)
        b.cbranch(b.icmp_signed("<", i, stop), inside, after)
        b.position_at_end(inside)
        body(i)
        i.add_incoming(b.add(i, _const(1)), b.block)
        b.branch(head)
        b.position_at_end(after)

    def panel(self, jb) -> None:
        """Panel ``jb``: C's columns [jb * PANEL, (jb + 1) * PANEL) of every row."""
        b = self.b
        wp = b.gep(self.bp, [b.mul(jb, b.mul(self.k, _const(PANEL)))])
        col = b.mul(jb, _const(PANEL))
        self.rem = b.sub(self.n, col)   # the columns of C this panel holds: PANEL, or fewer in the last one
        full = b.sdiv(self.rows, _const(TILE))
        self.loop(_const(0), full, lambda t: self.tile(wp, col, b.mul(t, _const(TILE)), TILE), "tile")
        start = b.mul(full, _const(TILE))
        done = self.fn.append_basic_block("rest_end")
        switch = b.switch(b.sub(self.rows, start), done)
        for height in range(1, TILE):
            block = self.fn.append_basic_block(f"rest{height}")
            switch.add_case(_const(height), block)
            b.position_at_end(block)
            self.tile(wp, col, start, height)
            b.branch(done)
        b.position_at_end(done)

    def tile(self, wp, col, r0, height: int) -> None:
        """Rows [r0, r0 + height) of the panel at ``wp``: the accumulators are phis of the k loop."""
        b = self.b
        before = b.block
        head = self.fn.append_basic_block("k_head")
        inside = self.fn.append_basic_block("k_body")
        after = self.fn.append_basic_block("k_end")
        b.branch(head)
        b.position_at_end(head)
        k = b.phi(_i64, "k")
        k.add_incoming(_const(0), before)
        acc = []
        for _ in range(2 * height):
            phi = b.phi(_vec)
            phi.add_incoming(ir.Constant(_vec, None), before)
            acc.append(phi)
        b.cbranch(b.icmp_signed("<", k, self.k), inside, after)
        b.position_at_end(inside)
        vp = _vec.as_pointer()
        row = b.gep(wp, [b.mul(k, _const(PANEL))])
        w0 = b.load(b.bitcast(row, vp), align=4)
        w1 = b.load(b.bitcast(b.gep(row, [_const(LANES)]), vp), align=4)
        new = []
        for a in range(height):
            v = _splat(b, b.load(b.gep(self.ap, [b.add(b.mul(b.add(r0, _const(a)), self.lda), k)]), align=4), _vec)
            new += [b.call(self.fma, [w0, v, acc[2 * a]]), b.call(self.fma, [w1, v, acc[2 * a + 1]])]
        k.add_incoming(b.add(k, _const(1)), b.block)
        for phi, value in zip(acc, new, strict=True):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(after)
        whole = b.icmp_signed(">=", self.rem, _const(PANEL))
        with b.if_else(whole) as (full, part):
            with full:
                for a in range(height):
                    out = b.gep(self.cp, [b.add(b.mul(b.add(r0, _const(a)), self.ldc), col)])
                    b.store(acc[2 * a], b.bitcast(out, vp), align=4)
                    b.store(acc[2 * a + 1], b.bitcast(b.gep(out, [_const(LANES)]), vp), align=4)
            with part:   # the last panel's columns only (its packed columns past N are zeros)
                limit = _splat(b, b.trunc(self.rem, _i32), ir.VectorType(_i32, LANES))
                masks = [b.icmp_signed("<", ir.Constant(ir.VectorType(_i32, LANES),
                                                        list(range(half * LANES, (half + 1) * LANES))), limit)
                         for half in range(2)]
                for a in range(height):
                    out = b.gep(self.cp, [b.add(b.mul(b.add(r0, _const(a)), self.ldc), col)])
                    b.call(self.store, [acc[2 * a], b.bitcast(out, vp), ir.Constant(_i32, 4), masks[0]])
                    b.call(self.store, [acc[2 * a + 1], b.bitcast(b.gep(out, [_const(LANES)]), vp),
                                        ir.Constant(_i32, 4), masks[1]])


def _source() -> str:
    module = ir.Module(name="tlc_panel")
    module.triple = llvm.get_process_triple()
    _Emitter(module)
    return str(module)


_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def ensure() -> None:
    """Compile ``tlc_panel_rows`` for this host (or load its machine code from the kernel cache) and register
    the symbol. Once per process. Where that fails (an llvmlite without MCJIT's object cache, an unsupported
    target), the symbol is a no-op stub, ``fast()`` is False (BLAS keeps every product) and ``REASON`` says
    why: the kernels that name the symbol still link."""
    global REASON
    if "engine" in _STATE:
        return
    with _LOCK:
        if "engine" in _STATE:
            return
        try:
            _STATE["engine"] = _build()
        except Exception as exc:   # noqa: BLE001 - any failure only costs the kernel, never the product
            REASON = f"the panel product could not be built: {type(exc).__name__}: {exc}"
            _STATE["engine"] = stub = cfunc(types.void(*([types.int64] * 8)))(_nothing)
            llvm.add_symbol(SYMBOL, stub.address)


#: why the panel product is off ("" when it is built)
REASON = ""


def _nothing(b, a, c, rows, k, n, lda, ldc):   # the stub's body: never called, ``fast()`` being False
    return


def _build():
    """The MCJIT engine that holds the kernel's machine code (compiled, or loaded from the kernel cache), with
    the symbol registered."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    source = _source()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    key = hashlib.sha256(f"{source}|{cpu}|{features}|{llvmlite.__version__}".encode()).hexdigest()[:24]
    path = default_cache_dir() / f"panel-{key}.o"
    machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu=cpu, features=features, opt=3)
    parsed = llvm.parse_assembly(source)
    parsed.verify()
    engine = llvm.create_mcjit_compiler(parsed, machine)
    optimize = getattr(llvm, "create_pass_builder", None)   # llvmlite >= 0.44; else codegen's own opt=3

    def saved(module, buffer) -> None:   # the machine code LLVM made: into the cache for the next process
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(buffer)
            os.replace(tmp, path)
        except OSError:
            pass   # a read-only cache only costs the next process the compile

    def cached(module):
        try:
            return path.read_bytes()
        except OSError:
            if optimize is not None:
                builder = optimize(machine, llvm.create_pipeline_tuning_options(3))
                builder.getModulePassManager().run(parsed, builder)
            return None

    engine.set_object_cache(saved, cached)
    engine.finalize_object()
    llvm.add_symbol(SYMBOL, engine.get_function_address(SYMBOL))
    return engine   # owns the machine code: kept for the life of the process


def fast() -> bool:
    """Whether the host runs the kernel at full speed (AVX-512: a 16-lane vector a register); elsewhere it
    computes the same, and BLAS keeps the products."""
    return not REASON and "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")


_panel_rows = types.ExternalFunction(SYMBOL, types.void(*([types.int64] * 8)))


@njit(cache=True, nogil=True, inline="always")
def panel_rows(packed, first, a_addr, c_addr, rows, k, n, lda, ldc):
    """``n`` columns of ``rows`` rows of C at address ``c_addr`` (row stride ``ldc`` elements) = A's rows at
    ``a_addr`` (row stride ``lda``, unit column stride) times panels ``first``, ``first + 1``, ... of ``packed``
    (float32, ``pack``'s layout)."""
    if rows > 0 and n > 0:
        _panel_rows(packed.ctypes.data + first * k * PANEL * 4, a_addr, c_addr, rows, k, n, lda, ldc)


def pack(b2d: np.ndarray) -> np.ndarray:
    """B [K, N] as panels [ceil(N / PANEL), K, PANEL], flat, float32; the last panel's columns past N are zeros
    (never stored). Every column of C then comes from the same kernel in the same order: a product whose
    columns are equal stays equal (a light model's softmax over 1000 equal logits of 1e21 told apart BLAS's
    rounding from the kernel's)."""
    k, n = b2d.shape
    panels = -(-n // PANEL)
    b = np.zeros((k, panels * PANEL), np.float32)
    b[:, :n] = b2d
    return np.ascontiguousarray(b.reshape(k, panels, PANEL).transpose(1, 0, 2)).ravel()
