"""An int8 matrix product with AVX-512 VNNI, written in LLVM IR (llvmlite) like ``tlc.kernels.panel`` and called
by name from compiled code: ``C[i, j] (int32) = init[j] + sum_k A[i, k] * B[k, j]`` with A unsigned bytes (the
activations) and B signed bytes (a constant weight, packed once at bind time).

Why: the quantized products' float32 path (``tlc.kernels.qgemm``: exact sgemm chunks summed in float64) runs at
the float32 FMA rate, 16 multiply-adds a vector instruction; ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.512``)
does 64 (16 int32 lanes, each the sum of four u8 x s8 products added to the lane), which is what onnxruntime's
int8 kernels use on this CPU.

Layout. B is packed in panels of ``PANEL`` columns, [ceil(N / PANEL), ceil(K / 4), PANEL, 4] bytes: per group of
four consecutive k, a panel row is ``PANEL / 16`` vectors of 16 lanes, lane j holding B[4g..4g+3, j] (zeros past
K and past N). A tile of ``TILE`` rows of C keeps its ``TILE * PANEL / 16`` accumulators in registers while it
walks the groups: per group, the panel row's vectors are loaded once, each row's four bytes A[i, 4g..4g+3] are
loaded as one int32 and broadcast, and every (row, vector) pair takes one ``vpdpbusd``. The last group of a K that
is no multiple of 4 loads A's bytes under a mask (nothing past the row is read; B is zero there).

``tlc_qpanel(b, a, c, rows, k, n, lda, ldc, a_xor, init)`` (int64 each): A[i, k] the byte at ``a + i * lda + k``
(xored with ``a_xor``'s byte: 0x80 turns int8 activations into their uint8 value + 128), C[i, j] the int32 at
``c + 4 * (i * ldc + j)``, B packed as above from ``b``, ``init`` int32 [N rounded up to PANEL] (what each
column's accumulators start from: the zero points' column term). Accumulation wraps modulo 2^32, as
``vpdpbusd`` does; exact while every partial sum stays below 2^31 in magnitude. A last panel of fewer columns
stores under masks. Zero points are the caller's: ``(A - za)(B - zb) = A.B - za colsum(B) - zb rowsum(A) + K za zb``.

``tlc_qpanel_t`` is the same loop nest with the operands' roles swapped (``qpanel_t``): C = W A^T with the
weight's signed rows broadcast and the activations' unsigned bytes in the vectors, A^T's groups of four rows
found through a table of offsets (a convolution's taps over phase planes of its input, ``tlc.kernels.qgemm``), C's
rows the output channels; the accumulators start from ``init[row]``.

``ensure()`` compiles the module (MCJIT; machine code kept in the kernel cache, keyed by this file's code, the CPU
and llvmlite's version) and registers the symbol; where the host has no AVX-512 VNNI (the 256-bit AVX-VNNI form
is not emitted) or the build fails, the symbol is a no-op stub, ``available()`` is False and ``REASON`` says why.
"""

from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import cfunc, njit, types

from . import irjit, panel
from .panel import _const, _Emitter, _joined, _splat

#: columns of C a panel (four 16-lane vectors) and rows a tile: 24 accumulators, the panel row's four vectors and
#: a broadcast within AVX-512's 32 registers
PANEL = 64
TILE = 6
LANES = 16
VECTORS = PANEL // LANES
SYMBOL = "tlc_qpanel"
SYMBOL_T = "tlc_qpanel_t"
ARGS = 10
#: the largest |A - za| * |B - zb| and |A| * |B| summed per output: int32 partial sums are exact below 2^31
EXACT_I32 = (1 << 31) - 1

_i64, _i32, _i8 = ir.IntType(64), ir.IntType(32), ir.IntType(8)
_vec = ir.VectorType(_i32, LANES)
_mask = ir.VectorType(ir.IntType(1), LANES)


class _Emitter8:
    """The IR of ``tlc_qpanel`` (or, ``transposed``, of ``tlc_qpanel_t``): loops as blocks with phi nodes
    (``panel._Emitter.loop``). The two differ in four places only: where a panel's vectors are (B packed by
    ``pack``, a panel after another; or A^T's groups of four rows at offsets from a table), which operand of
    ``vpdpbusd`` is unsigned (the broadcast A rows; or the vectors), what the accumulators start from (``init``'s
    columns; or ``init[row]`` in every lane) and the ninth argument (``a_xor``; or the offsets' address)."""

    loop = _Emitter.loop

    def __init__(self, module: ir.Module, transposed: bool = False):
        self.transposed = transposed
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_i64] * ARGS),
                              name=SYMBOL_T if transposed else SYMBOL)
        self.dot = module.globals.get("llvm.x86.avx512.vpdpbusd.512") or ir.Function(
            module, ir.FunctionType(_vec, [_vec, _vec, _vec]), name="llvm.x86.avx512.vpdpbusd.512")
        vp = _vec.as_pointer()
        self.store = module.globals.get("llvm.masked.store.v16i32.p0v16i32") or ir.Function(
            module, ir.FunctionType(ir.VoidType(), [_vec, vp, _i32, _mask]), name="llvm.masked.store.v16i32.p0v16i32")
        bytes4 = ir.VectorType(_i8, 4)
        self.bytes4 = bytes4
        self.load4 = module.globals.get("llvm.masked.load.v4i8.p0v4i8") or ir.Function(
            module, ir.FunctionType(bytes4, [bytes4.as_pointer(), _i32, ir.VectorType(ir.IntType(1), 4), bytes4]),
            name="llvm.masked.load.v4i8.p0v4i8")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        b = self.b
        bp, ap, cp, rows, k, n, lda, ldc, ninth, init = self.fn.args
        self.bp, self.ap = b.inttoptr(bp, _i8.as_pointer()), b.inttoptr(ap, _i8.as_pointer())
        self.cp, self.init = b.inttoptr(cp, _i32.as_pointer()), b.inttoptr(init, _i32.as_pointer())
        self.rows, self.n, self.lda, self.ldc = rows, n, lda, ldc
        self.groups = b.sdiv(k, _const(4))                        # whole groups of four k
        self.tail = b.sub(k, b.mul(self.groups, _const(4)))       # k left over: 0..3
        if transposed:   # the ninth argument: the groups' byte offsets, int64 [k / 4]
            self.xor, self.offsets = ir.Constant(_i32, 0), b.inttoptr(ninth, _i64.as_pointer())
            self.step = _const(4 * PANEL)
        else:
            self.xor, self.offsets = b.trunc(ninth, _i32), None
            self.step = b.mul(b.sdiv(b.add(k, _const(3)), _const(4)), _const(4 * PANEL))   # bytes a panel
        # the tail group's byte mask: lane t < tail
        self.tail_mask = b.icmp_signed("<", ir.Constant(ir.VectorType(_i32, 4), [0, 1, 2, 3]),
                                       _splat4(b, b.trunc(self.tail, _i32)))
        panels = b.sdiv(b.add(n, _const(PANEL - 1)), _const(PANEL))
        self.loop(_const(0), panels, self.panel, "panel")
        b.ret_void()

    def panel(self, jb) -> None:
        """Panel ``jb``: C's columns [jb * PANEL, (jb + 1) * PANEL) of every row; a last panel of fewer columns
        stores under masks."""
        b = self.b
        self.wp = b.gep(self.bp, [b.mul(jb, self.step)])
        self.col = b.mul(jb, _const(PANEL))
        rem = b.sub(self.n, self.col)
        limit = _splat(b, b.trunc(rem, _i32), _vec)
        self.masks = [b.icmp_signed("<", ir.Constant(_vec, list(range(v * LANES, (v + 1) * LANES))), limit)
                      for v in range(VECTORS)]
        if not self.transposed:
            at = b.gep(self.init, [self.col])
            self.start = [b.load(b.bitcast(b.gep(at, [_const(v * LANES)]), _vec.as_pointer()), align=4)
                          for v in range(VECTORS)]
        with b.if_else(b.icmp_signed(">=", rem, _const(PANEL))) as (whole, part):
            with whole:
                self.tiles(False)
            with part:
                self.tiles(True)

    def starts(self, r0, height: int) -> list:
        """The accumulators' first values, row by row: ``init``'s panel columns, or ``init[row]`` splat."""
        if not self.transposed:
            return self.start * height
        b = self.b
        out = []
        for a in range(height):
            value = _splat(b, b.load(b.gep(self.init, [b.add(r0, _const(a))]), align=4), _vec)
            out += [value] * VECTORS
        return out

    def tiles(self, masked: bool) -> None:
        """Every row: whole tiles, then one tile of the last ``rows % TILE`` rows."""
        b = self.b
        full = b.sdiv(self.rows, _const(TILE))
        self.loop(_const(0), full, lambda t: self.tile(b.mul(t, _const(TILE)), TILE, masked), "tile")
        start = b.mul(full, _const(TILE))
        done = self.fn.append_basic_block("rest_end")
        switch = b.switch(b.sub(self.rows, start), done)
        for height in range(1, TILE):
            block = self.fn.append_basic_block(f"rest{height}")
            switch.add_case(_const(height), block)
            b.position_at_end(block)
            self.tile(start, height, masked)
            b.branch(done)
        b.position_at_end(done)

    def group(self, acc: list, rows: list, g, masked_a: bool) -> list:
        """The accumulators after group ``g`` (four k) of the tile whose broadcast rows start at ``rows``."""
        b = self.b
        if self.offsets is None:
            w = b.gep(self.wp, [b.mul(g, _const(4 * PANEL))])
        else:
            w = b.gep(self.wp, [b.load(b.gep(self.offsets, [g]), align=8)])
        vectors = [b.load(b.bitcast(b.gep(w, [_const(4 * LANES * v)]), _vec.as_pointer()), align=4)
                   for v in range(VECTORS)]
        k0 = b.mul(g, _const(4))
        new = []
        for a, row in enumerate(rows):
            at = b.gep(row, [k0])
            if masked_a:   # the last bytes of the row only; the lanes past K are zeros in B
                four = b.call(self.load4, [b.bitcast(at, self.bytes4.as_pointer()), ir.Constant(_i32, 1),
                                           self.tail_mask, ir.Constant(self.bytes4, None)])
                word = b.bitcast(four, _i32)
            else:
                word = b.load(b.bitcast(at, _i32.as_pointer()), align=1)
            v = _splat(b, b.xor(word, self.xor), _vec)
            if self.transposed:   # unsigned activations in the vectors, the signed weight broadcast
                new += [b.call(self.dot, [acc[VECTORS * a + j], vectors[j], v]) for j in range(VECTORS)]
            else:
                new += [b.call(self.dot, [acc[VECTORS * a + j], v, vectors[j]]) for j in range(VECTORS)]
        return new

    def tile(self, r0, height: int, masked: bool) -> None:
        """Rows [r0, r0 + height): the accumulators are phis of the group loop, starting from ``init``."""
        b = self.b
        rows = [b.gep(self.ap, [b.mul(b.add(r0, _const(a)), self.lda)]) for a in range(height)]
        start = self.starts(r0, height)
        before = b.block
        head = self.fn.append_basic_block("g_head")
        inside = self.fn.append_basic_block("g_body")
        after = self.fn.append_basic_block("g_end")
        b.branch(head)
        b.position_at_end(head)
        g = b.phi(_i64, "g")
        g.add_incoming(_const(0), before)
        acc = []
        for value in start:
            phi = b.phi(_vec)
            phi.add_incoming(value, before)
            acc.append(phi)
        b.cbranch(b.icmp_signed("<", g, self.groups), inside, after)
        b.position_at_end(inside)
        new = self.group(acc, rows, g, False)
        g.add_incoming(b.add(g, _const(1)), b.block)
        for phi, value in zip(acc, new, strict=True):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(after)
        # the tail group (K % 4 bytes), where there is one
        before = b.block
        with b.if_then(b.icmp_signed("!=", self.tail, _const(0))):
            tailed = self.group(acc, rows, self.groups, True)
            done = b.block
        final = _joined(b, acc, before, tailed, done)
        vp = _vec.as_pointer()
        for a in range(height):
            out = b.gep(self.cp, [b.add(b.mul(b.add(r0, _const(a)), self.ldc), self.col)])
            for j in range(VECTORS):
                at = b.bitcast(b.gep(out, [_const(j * LANES)]), vp)
                if masked:
                    b.call(self.store, [final[VECTORS * a + j], at, ir.Constant(_i32, 4), self.masks[j]])
                else:
                    b.store(final[VECTORS * a + j], at, align=4)


def _splat4(b: ir.IRBuilder, value):
    """``value`` (i32) in the four lanes of a <4 x i32>."""
    lanes = ir.VectorType(_i32, 4)
    one = b.insert_element(ir.Constant(lanes, None), value, ir.Constant(_i32, 0))
    return b.shuffle_vector(one, ir.Constant(lanes, None), ir.Constant(lanes, [0] * 4))


def _source() -> str:
    module = ir.Module(name="tlc_qpanel")
    module.triple = llvm.get_process_triple()
    _Emitter8(module)
    _Emitter8(module, transposed=True)
    return str(module)


_LOCK = threading.Lock()
_STATE: dict[str, object] = {}
#: why the VNNI product is off ("" when it is built)
REASON = ""


def ensure() -> None:
    """Compile ``tlc_qpanel`` for this host, or load its machine code from the kernel cache, and register the
    symbol; once per process. Without VNNI, or where the build fails, the symbol is a no-op stub and ``REASON``
    says why (the quantized products then keep the float32 path)."""
    global REASON
    if "engine" in _STATE:
        return
    with _LOCK:
        if "engine" in _STATE:
            return
        try:
            if not _vnni():
                raise RuntimeError("the host has no AVX-512 VNNI (avx512vnni with avx512bw)")
            _STATE["engine"] = _build()
        except Exception as exc:   # noqa: BLE001 - any failure only costs the kernel, never the product
            REASON = f"the VNNI int8 product is off: {type(exc).__name__}: {exc}"
            stub = cfunc(types.void(*([types.int64] * ARGS)))(_nothing)
            _STATE["engine"] = stub
            llvm.add_symbol(SYMBOL, stub.address)
            llvm.add_symbol(SYMBOL_T, stub.address)


def _nothing(b, a, c, rows, k, n, lda, ldc, a_xor, init):
    return   # the stub's body: never called, ``available()`` being False


@functools.cache
def _vnni() -> bool:
    llvm.initialize_native_target()
    features = set(llvm.get_host_cpu_features().flatten().split(","))
    return {"+avx512vnni", "+avx512bw", "+avx512f"} <= features


def available() -> bool:
    """Whether the VNNI product runs on this host (``ensure()`` first)."""
    ensure()
    return not REASON


def _build():
    """The MCJIT engine holding the kernels' machine code, compiled or loaded from the kernel cache
    (``tlc.kernels.irjit``), with the symbols registered."""
    return irjit.engine_for("qpanel", [__file__, panel.__file__], _source, (SYMBOL, SYMBOL_T))


_qpanel = types.ExternalFunction(SYMBOL, types.void(*([types.int64] * ARGS)))
_qpanel_t = types.ExternalFunction(SYMBOL_T, types.void(*([types.int64] * ARGS)))


@njit(cache=True, nogil=True, inline="always")
def qpanel(b_addr, a_addr, lda, c_addr, ldc, rows, k, n, a_xor, init_addr):
    """C[i, j] (int32 at ``c_addr + 4 * (i * ldc + j)``) = init[j] + sum_k (A[i, k] ^ a_xor) * B[k, j] for
    i < rows, j < n: A's bytes at ``a_addr + i * lda + k``, B packed by ``pack`` at ``b_addr``, ``init_addr``
    int32 [N rounded up to PANEL]."""
    if rows > 0 and n > 0:
        _qpanel(b_addr, a_addr, c_addr, rows, k, n, lda, ldc, a_xor, init_addr)


@njit(cache=True, nogil=True, inline="always")
def qpanel_t(w_addr, ldw, p_addr, offsets_addr, c_addr, ldc, rows, k, n, init_addr):
    """C[m, j] (int32 at ``c_addr + 4 * (m * ldc + j)``) = init[m] + sum_k W[m, k] * P[k, j] for m < rows,
    j < n: the weight's signed bytes W[m, k] at ``w_addr + m * ldw + k``, the activations' unsigned bytes as A^T
    in groups of four rows, P[4g + t, j] the byte at ``p_addr + offsets[g] + 4 * j + t`` (``offsets_addr``: int64
    [k / 4], bytes; a last panel's lanes past ``n`` are read, up to ``4 * PANEL`` bytes past the panel's start,
    their columns never stored), ``init_addr`` int32 [rows]. The product of a convolution whose output keeps its
    channels apart (NCHW): C's rows are the output's channel planes, A^T's groups a tap's shifted window of four
    channels. ``k`` a multiple of 4."""
    if rows > 0 and n > 0:
        _qpanel_t(p_addr, w_addr, c_addr, rows, k, n, ldw, ldc, offsets_addr, init_addr)


def pack(b2d: np.ndarray) -> np.ndarray:
    """B [K, N] (int8 values) as panels [ceil(N / PANEL), ceil(K / 4), PANEL, 4], flat int8, zeros past K and N."""
    k, n = b2d.shape
    panels, groups = -(-n // PANEL), -(-k // 4)
    b = np.zeros((groups * 4, panels * PANEL), np.int8)
    b[:k, :n] = b2d
    return np.ascontiguousarray(b.reshape(groups, 4, panels, PANEL).transpose(2, 0, 3, 1)).ravel()


def padded(n: int) -> int:
    """N rounded up to whole panels: the length of ``init``."""
    return -(-n // PANEL) * PANEL
