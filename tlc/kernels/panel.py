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

``tlc_panel(b, a, c, rows, k, n, lda, ldc, ldb, step, a_k, c_j, bias, bias_mode, clamp, b_rows)`` (addresses and
element strides as int64, as ``blas.py``'s symbols): ``C[i, j] = bias + sum_k A[i, k] B[k, j]`` for rows i <
``rows`` and columns j < ``n`` (the bias ``bias[i]``, ``bias[j]`` or none: ``bias_mode``), clamped to [lo, hi]
(two float32 at ``clamp``) where ``bias_mode`` has the ``CLAMP`` bit: a conv's Relu or Clip applied as the tile
is stored, as ``tlc.kernels.mathlib``'s maximum and minimum do (NaN stays NaN) - applied after the whole product
over a part's output, in a pass of its own, it cost MobileNetV2's 1x1 expansion convs ~100 us each, re-reading
what the kernel had just stored), with
A[i, k] at ``a + i * lda + k * a_k``, C[i, j] at ``c + i * ldc + j * c_j``, and B in panels of ``PANEL``
columns, panel p at ``b + p * step`` and its row k ``ldb`` elements after row k - 1. Packed weights are panels
``K x PANEL`` (``ldb = PANEL``, ``step = K * PANEL``); an activation read in place is one panel every ``PANEL``
columns (``ldb`` its row stride, ``step = PANEL``), or (``b_rows`` not 0) with its row k ``b_rows[k]`` elements
from the panel's start: a convolution's taps read from its input's planes, no im2col matrix gathered. Whole
tiles, then one tile of the last ``rows % TILE``
rows; a last panel of fewer columns loads and stores under masks (no element past ``n`` is read or written).
C's rows are stored as whole vectors where ``c_j`` is 1, else each vector's lanes are scattered (a conv's
output with its channels in the kernel's lanes: NCHW has them ``H * W`` apart). Each panel (K x 128 bytes)
stays in L1/L2 while every tile of rows walks it. Where B is read in place (``step == PANEL``: K rows far
apart, more streams than the hardware prefetchers follow) the k loop prefetches each row ``PREFETCH`` panels
ahead; packed panels take a copy of the loops without those prefetches, except the first whole tile of each
panel, which reads the panel from memory (a layer's weights are cold in a model), and the last tile: they
prefetch it ``NEAR`` rows ahead (one Zen 5 core, weights cold, 960 -> 320 at 7x7 (channels in lanes) 201 -> 139
us, 2048 -> 512 at 7x7 692 -> 488; warm weights unchanged).
The module also holds ``tlc_dw3x3``, the vector 3x3 depthwise kernel (``_DepthwiseEmitter``). ``ensure()``
compiles the module for the host (MCJIT, once per machine: ~1 s to build 4 MB of IR in Python, ~2.5 s in LLVM;
``import tlc`` on a cold kernel cache 4.1-4.5 s, warm 0.6. The product's k loops are eight functions, one per
way of reading B and width, each holding one copy of the tile loops per height: one function of ~200 loops (a
copy per split rest, per whole or masked panel) was 7.8 MB of IR and ~12 s, LLVM's passes growing faster than a
function's size. The machine code is kept in the kernel cache, keyed by this file's code, the CPU and
llvmlite's version, and loaded in ~2 ms without generating the IR) and registers the symbols with LLVM: before
any kernel that calls them is compiled or loaded.
"""

from __future__ import annotations

import threading

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import cfunc, njit, types

from .._platform import avx512
from . import irjit

#: columns of C a panel (two 16-lane vectors) and rows a tile: 2 * TILE accumulators, two panel vectors and a
#: broadcast stay within AVX-512's 32 registers. 12 rows rather than 6 halve the panel's loads per multiply-add
#: (a panel of a conv's input read in place, or of a deep conv's weights, comes from L2): measured on one Zen 5
#: core, the kernel alone, 6 -> 12 rows: 1x1 512 -> 256 at 28x28 (positions in lanes) 100 -> 124 GMAC/s, 3x3
#: 512 -> 512 at 7x7 (im2col, channels in lanes) 79 -> 111, 512 -> 2048 at 7x7 104 -> 113; transformer
#: products (197 x 192 x 768 and the like) 124-128 either way. 14 rows were no better than 12.
PANEL = 32
TILE = 12
#: panels ahead that the k loop prefetches B's rows (a prefetch never faults, so past the last panel is fine)
PREFETCH = 4
#: a last tile of fewer rows than this after whole tiles runs with the last whole tile as two tiles of about equal
#: height: alone, its rows' 2 to 10 accumulators wait on each multiply-add's latency (49 rows: 4 tiles and 1 row)
REST_SPLIT = 6
#: rows ahead that the first and the last tile of a packed panel prefetch the panel (0: none; 16 rows gained half
#: of 64's, 96 and 128 no more)
NEAR = 64
LANES = 16
#: the largest plane (outputs) the depthwise kernel runs in vectors along the flattened plane (a mask word per
#: tap and vector kept on the stack: 16 vectors)
FLAT_MAX = 256
SYMBOL = "tlc_panel"
DEPTHWISE_SYMBOL = "tlc_dw3x3"
#: the kernel's arguments (int64 each: see the module docstring)
ARGS = 16
#: the bias the kernel adds (``bias_mode``'s low two bits): none, one a row of C, one a column of C
BIAS_NONE, BIAS_ROWS, BIAS_COLUMNS = 0, 1, 2
#: ``bias_mode``'s bit for a clamp of the stored values to [lo, hi] (read from the ``clamp`` address)
CLAMP = 4
#: ``bias_mode``'s bit for C's values before the call added to the product (C's rows contiguous, ``c_j`` 1, and B
#: read in place, ``step`` = ``PANEL``, no ``b_rows``: elsewhere the bit is ignored): a conv's residual Add, the
#: output written where the residual was (``tlc.kernels.conv.set_accumulate``)
ACCUMULATE = 16
#: ``tlc_dw3x3``'s arguments (int64 each)
DEPTHWISE_ARGS = 15
#: ``tlc_dw3x3``'s ``flags`` bit for a 3x3 max pool instead of the convolution (no weights, bias or clamp)
MAX_POOL = 8

_f32, _i64, _i32 = ir.FloatType(), ir.IntType(64), ir.IntType(32)
_vec = ir.VectorType(_f32, LANES)
_ptrs = ir.VectorType(_f32.as_pointer(), LANES)


def _const(v: int) -> ir.Constant:
    return ir.Constant(_i64, v)


def _splat(b: ir.IRBuilder, value, lanes_type: ir.VectorType):
    """``value`` in every lane of a vector of ``lanes_type``."""
    one = b.insert_element(ir.Constant(lanes_type, None), value, ir.Constant(_i32, 0))
    return b.shuffle_vector(one, ir.Constant(lanes_type, None), ir.Constant(ir.VectorType(_i32, LANES), [0] * LANES))


def _joined(b: ir.IRBuilder, first: list, first_block, second: list, second_block) -> list:
    """Where two arms meet (an ``if_then`` and the way around it): a phi per pair of values, ``first[i]`` when
    control came from ``first_block``, ``second[i]`` from ``second_block``."""
    joined = []
    for one, other in zip(first, second, strict=True):
        phi = b.phi(one.type)
        phi.add_incoming(one, first_block)
        phi.add_incoming(other, second_block)
        joined.append(phi)
    return joined


class _Emitter:
    """The IR of ``tlc_panel``: loops as blocks with phi nodes."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_i64] * ARGS), name=SYMBOL)
        self.fma = ir.Function(module, ir.FunctionType(_vec, [_vec, _vec, _vec]), name="llvm.fma.v16f32")
        mask = ir.VectorType(ir.IntType(1), LANES)
        vp = _vec.as_pointer()
        self.store = ir.Function(module, ir.FunctionType(ir.VoidType(), [_vec, vp, _i32, mask]),
                                 name="llvm.masked.store.v16f32.p0v16f32")
        self.load = ir.Function(module, ir.FunctionType(_vec, [vp, _i32, mask, _vec]),
                                name="llvm.masked.load.v16f32.p0v16f32")
        self.scatter = ir.Function(module, ir.FunctionType(ir.VoidType(), [_vec, _ptrs, _i32, mask]),
                                   name="llvm.masked.scatter.v16f32.v16p0f32")
        i8p = ir.IntType(8).as_pointer()
        self.prefetch = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, _i32, _i32, _i32]),
                                    name="llvm.prefetch.p0i8")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        b = self.b
        bp, ap, cp, rows, k, n, lda, ldc, ldb, step, a_k, c_j, bias, bias_mode, clamp, b_rows = self.fn.args
        fp = _f32.as_pointer()
        self.bp, self.ap, self.cp = b.inttoptr(bp, fp), b.inttoptr(ap, fp), b.inttoptr(cp, fp)
        self.bias = b.inttoptr(bias, fp)
        which = b.and_(bias_mode, _const(3))
        self.row_bias = b.icmp_signed("==", which, _const(BIAS_ROWS))
        self.column_bias = b.icmp_signed("==", which, _const(BIAS_COLUMNS))
        self.clamp_bounds = _clamp_bounds(b, bias_mode, clamp)
        self.accumulate = b.icmp_signed("!=", b.and_(bias_mode, _const(ACCUMULATE)), _const(0))
        self.rows, self.k, self.n, self.lda, self.ldc = rows, k, n, lda, ldc
        self.ldb, self.step, self.a_k, self.c_j = ldb, step, a_k, c_j
        # the lanes' offsets in bytes along C's columns, for scattered stores (a column stride other than 1)
        lanes = ir.Constant(ir.VectorType(_i64, LANES), list(range(LANES)))
        self.lane_bytes = b.mul(lanes, _splat(b, b.mul(c_j, _const(4)), ir.VectorType(_i64, LANES)))
        self.ahead = b.mul(step, _const(PREFETCH))   # elements from a panel's row to the row PREFETCH panels on
        self.in_place = b.icmp_signed("==", step, _const(PANEL))   # B read where it is: a panel every PANEL
        # B's rows at the offsets (elements, int64) of a table instead of ldb apart: a conv's input planes read
        # in place, row k of B being tap k's input row (``tlc.kernels.conv``'s PANEL on stride phases)
        self.indirect = b.icmp_signed("!=", b_rows, _const(0))
        self.b_rows = b.inttoptr(b_rows, _i64.as_pointer())
        self.functions = {}
        whole = b.sdiv(n, _const(PANEL))
        last = b.sub(n, b.mul(whole, _const(PANEL)))   # the columns of a last panel of fewer than PANEL
        with b.if_else(self.indirect) as (table, strided):
            with table:   # rows from the table: planes in L1/L2, no prefetches
                self.panels("table", whole, last)
            with strided, b.if_else(self.in_place) as (streams, packed):   # k loops with and without prefetches
                for reads, block in (("streams", streams), ("packed", packed)):
                    with block:
                        self.panels(reads, whole, last)
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

    def panels(self, reads: str, whole, last) -> None:
        """The whole panels, then a last one of ``last`` columns (fewer than ``PANEL``; none where 0): in two
        vectors a row, or in one where it holds ``LANES`` or fewer columns (the masked second vector would be all
        multiply-adds for nothing: a 7x7 stem's rows of 112 columns are three panels and a half). Whole panels of
        a B read in place as streams take the masked loops (masks all true; no slower there, and one copy of the
        loops less), the others loops of plain loads (one core: 3x3 convs reading their input at a table's
        offsets, 512 -> 512 at 7x7 1.55 -> 1.40 ms, 64 -> 64 at 56x56 1.02 -> 0.99; packed 1 x 512 x 1000 21.7 ->
        19.8 us)."""
        b = self.b
        self.outlined(reads, 2, reads == "streams", _const(0), whole)
        end = b.add(whole, _const(1))
        with b.if_then(b.icmp_signed(">", last, _const(0))), \
                b.if_else(b.icmp_signed(">", last, _const(LANES))) as (two, one):
            with two:
                self.outlined(reads, 2, True, whole, end)
            with one:
                self.outlined(reads, 1, True, whole, end)

    #: what the panels' loops read from the kernel's entry (``outlined`` passes them): values, and lists of them
    SHARED = ("rows", "k", "n", "lda", "ldc", "ldb", "step", "a_k", "c_j", "bp", "ap", "cp", "bias", "row_bias",
              "column_bias", "b_rows", "ahead", "lane_bytes", "accumulate")
    SHARED_LISTS = ("clamp_bounds",)

    def outlined(self, reads: str, halves: int, masked: bool, first, end) -> None:
        """A call of the function that runs panels [first, end) (reading B's rows as ``reads``, in ``halves``
        vectors a row, under masks or not), emitted at its first call: internal, never inlined, the values it
        reads passed as arguments. LLVM's time grows faster than a function's size: all the loops in one
        function, 41K lines of IR, took 3.3 s to compile, the same loops as seven functions 2.0 s; the eight of
        today (49K lines), ~2.5 s. A call per panel instead of per range of panels cost the products of few rows
        and short k 5-10%."""
        key = reads, halves, masked
        values = [getattr(self, name) for name in self.SHARED]
        values += [v for name in self.SHARED_LISTS for v in getattr(self, name)]
        if key not in self.functions:
            fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [_i64, _i64] + [v.type for v in values]),
                             name=f"{self.fn.name}_{reads}{halves}{'m' if masked else ''}")
            fn.linkage = "internal"
            fn.attributes.add("noinline")
            self.functions[key] = fn
            saved = self.fn, self.b, {name: getattr(self, name) for name in self.SHARED + self.SHARED_LISTS}
            self.fn, self.b = fn, ir.IRBuilder(fn.append_basic_block("entry"))
            args = list(fn.args)
            start, stop, args = args[0], args[1], args[2:]
            for name in self.SHARED:
                setattr(self, name, args.pop(0))
            for name in self.SHARED_LISTS:
                count = len(saved[2][name])
                setattr(self, name, args[:count])
                args = args[count:]
            self.loop(start, stop, lambda jb: self.panel(jb, reads, halves, masked), "panel")
            self.b.ret_void()
            self.fn, self.b = saved[0], saved[1]
            for name, value in saved[2].items():
                setattr(self, name, value)
        self.b.call(self.functions[key], [first, end] + values)

    def panel(self, jb, reads: str, halves: int, masked: bool) -> None:
        """Panel ``jb``: C's columns [jb * PANEL, (jb + 1) * PANEL) of every row, under masks past ``n`` where
        ``masked``."""
        b = self.b
        wp = b.gep(self.bp, [b.mul(jb, self.step)])
        col = b.mul(jb, _const(PANEL))
        rem = b.sub(self.n, col)   # the columns of C this panel holds: PANEL or more, or fewer in the last one
        limit = _splat(b, b.trunc(b.select(b.icmp_signed("<", rem, _const(PANEL)), rem, _const(PANEL)), _i32),
                       ir.VectorType(_i32, LANES))
        self.masks = [b.icmp_signed("<", ir.Constant(ir.VectorType(_i32, LANES),
                                                     list(range(half * LANES, (half + 1) * LANES))), limit)
                      for half in range(2)]
        # the panel's columns' bias (BIAS_COLUMNS; else zeros): what its accumulators start from
        start = b.block
        with b.if_then(self.column_bias):
            at = b.gep(self.bias, [col])
            loaded = [b.call(self.load, [b.bitcast(b.gep(at, [_const(half * LANES)]), _vec.as_pointer()),
                                         ir.Constant(_i32, 4), self.masks[half], ir.Constant(_vec, None)])
                      for half in range(2)]
            with_bias = b.block
        self.column_init = _joined(b, [ir.Constant(_vec, None)] * 2, start, loaded, with_bias)
        self.tiles(wp, col, reads, halves, masked)

    def tiles(self, wp, col, reads: str, halves: int, masked: bool) -> None:
        """Every row of the panel at ``wp``: whole tiles, then the rows left as one tile of their height, or where
        fewer than ``REST_SPLIT`` rows follow a whole tile, the two as two tiles of about equal height. How B's
        rows are read (``reads``): "streams" (in place, each prefetched ``PREFETCH``
        panels ahead), "packed" (no prefetches), "near" (packed, prefetched ``NEAR`` rows ahead) or "table" (at
        ``b_rows``' offsets). Packed panels: the first whole tile reads "near" (it is the one that reads the panel
        from memory; the others find it in L2), and so do the last tiles (the only ones where there are fewer rows
        than a tile: 8 x 1280 x 1000 on cold weights 222 -> 151 us, warm 91 -> 88)."""
        b = self.b
        full = b.sdiv(self.rows, _const(TILE))
        rest = b.sub(self.rows, b.mul(full, _const(TILE)))
        # a rest of fewer than REST_SPLIT rows after a whole tile: the two as two tiles of about equal height
        split = b.and_(b.and_(b.icmp_signed(">", rest, _const(0)), b.icmp_signed("<", rest, _const(REST_SPLIT))),
                       b.icmp_signed(">", full, _const(0)))
        whole = b.sub(full, b.zext(split, _i64))
        first = _const(0)
        ends = "near" if reads == "packed" and NEAR else reads   # the first whole tile's and the last tiles'
        if ends != reads:
            with b.if_then(b.icmp_signed(">", whole, _const(0))):
                self.tile(wp, col, _const(0), TILE, ends, halves, masked)
            first = b.select(b.icmp_signed(">", whole, _const(0)), _const(1), _const(0))
        self.loop(first, whole, lambda t: self.tile(wp, col, b.mul(t, _const(TILE)), TILE, reads, halves, masked),
                  "tile")
        start = b.mul(whole, _const(TILE))
        left = b.sub(self.rows, start)   # 0 to TILE + REST_SPLIT - 1 rows: one tile, or two of about equal height
        two = b.icmp_signed(">", left, _const(TILE))
        upper = b.select(two, b.sdiv(b.add(left, _const(1)), _const(2)), left)
        pieces = b.select(two, _const(2), b.zext(b.icmp_signed(">", left, _const(0)), _i64))

        def piece(p) -> None:   # one switch over the heights serves both: one copy of the loops per height
            second = b.icmp_signed("==", p, _const(1))
            r0 = b.select(second, b.add(start, upper), start)
            done = self.fn.append_basic_block("rest_end")
            switch = b.switch(b.select(second, b.sub(left, upper), upper), done)
            for height in range(1, TILE + 1):
                block = self.fn.append_basic_block(f"rest{height}")
                switch.add_case(_const(height), block)
                b.position_at_end(block)
                self.tile(wp, col, r0, height, ends, halves, masked)
                b.branch(done)
            b.position_at_end(done)

        self.loop(_const(0), pieces, piece, "piece")

    def accumulated(self, init: list, r0, col, height: int, halves: int, masked: bool) -> list:
        """The accumulators' starting values, plus C's values there where ``bias_mode`` has ``ACCUMULATE`` (rows
        contiguous: read as the contiguous store writes them)."""
        b = self.b
        start = b.block
        vp = _vec.as_pointer()
        with b.if_then(self.accumulate):
            summed = []
            for a in range(height):
                out = b.gep(self.cp, [b.add(b.mul(b.add(r0, _const(a)), self.ldc), col)])
                for half in range(halves):
                    at = b.bitcast(b.gep(out, [_const(half * LANES)]), vp)
                    old = (b.call(self.load, [at, ir.Constant(_i32, 4), self.masks[half], ir.Constant(_vec, None)])
                           if masked else b.load(at, align=4))
                    summed.append(b.fadd(init[halves * a + half], old))
            added = b.block
        return _joined(b, init, start, summed, added)

    def tile(self, wp, col, r0, height: int, reads: str, halves: int, masked: bool) -> None:
        """Rows [r0, r0 + height) of the panel at ``wp`` in ``halves`` vectors a row (2; 1 where the panel holds
        at most ``LANES`` columns): the accumulators are phis of the k loop, starting from the bias (a row's, or
        the panel's columns')."""
        b = self.b
        start = b.block
        with b.if_then(self.row_bias):
            loaded = [_splat(b, b.load(b.gep(self.bias, [b.add(r0, _const(a))]), align=4), _vec)
                      for a in range(height)]
            with_bias = b.block
        rows = _joined(b, [ir.Constant(_vec, None)] * height, start, loaded, with_bias)
        init = [b.fadd(row, self.column_init[half]) for row in rows for half in range(halves)]   # one is zero
        if reads == "streams":   # (the only loops that take ACCUMULATE: a module ~10% larger for each other)
            init = self.accumulated(init, r0, col, height, halves, masked)
        before = b.block
        head = self.fn.append_basic_block("k_head")
        inside = self.fn.append_basic_block("k_body")
        after = self.fn.append_basic_block("k_end")
        b.branch(head)
        b.position_at_end(head)
        k = b.phi(_i64, "k")
        k.add_incoming(_const(0), before)
        acc = []
        for value in init:
            phi = b.phi(_vec)
            phi.add_incoming(value, before)
            acc.append(phi)
        b.cbranch(b.icmp_signed("<", k, self.k), inside, after)
        b.position_at_end(inside)
        vp = _vec.as_pointer()
        if reads == "table":
            row = b.gep(wp, [b.load(b.gep(self.b_rows, [k]), align=8)])
        else:
            row = b.gep(wp, [b.mul(k, self.ldb)])
        vectors = [b.bitcast(b.gep(row, [_const(half * LANES)]), vp) for half in range(halves)]
        # "streams": the same row PREFETCH panels ahead, both cache lines: a B read in place (a conv's input,
        # positions in lanes) is K streams a plane apart, more than the hardware's stream prefetchers follow
        # (packed panels are one stream: there such prefetches in every tile only took load slots, 1 x 768 x 3072
        # 117 -> 175 us); "near": the row NEAR rows on in the same packed stream
        if reads in ("streams", "near"):
            ahead = b.gep(row, [self.ahead if reads == "streams" else _const(NEAR * PANEL)])
            for line in range(halves):
                address = b.bitcast(b.gep(ahead, [_const(line * LANES)]), ir.IntType(8).as_pointer())
                b.call(self.prefetch, [address, ir.Constant(_i32, 0), ir.Constant(_i32, 3), ir.Constant(_i32, 1)])
        if masked:   # past N: zeros, never read
            panel = [b.call(self.load, [h, ir.Constant(_i32, 4), m, ir.Constant(_vec, None)])
                     for h, m in zip(vectors, self.masks, strict=False)]
        else:
            panel = [b.load(h, align=4) for h in vectors]
        ka = b.mul(k, self.a_k)
        new = []
        for a in range(height):
            v = _splat(b, b.load(b.gep(self.ap, [b.add(b.mul(b.add(r0, _const(a)), self.lda), ka)]), align=4), _vec)
            new += [b.call(self.fma, [w, v, acc[halves * a + half]]) for half, w in enumerate(panel)]
        k.add_incoming(b.add(k, _const(1)), b.block)
        for phi, value in zip(acc, new, strict=True):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(after)
        acc = [_clamped(b, v, self.clamp_bounds) for v in acc]
        true = ir.Constant(ir.VectorType(ir.IntType(1), LANES), [1] * LANES)
        masks = self.masks if masked else [true, true]
        with b.if_else(b.icmp_signed("==", self.c_j, _const(1))) as (contiguous, scattered):
            with contiguous:   # C's rows are contiguous: whole vectors (under masks past N)
                for a in range(height):
                    out = b.gep(self.cp, [b.add(b.mul(b.add(r0, _const(a)), self.ldc), col)])
                    for half in range(halves):
                        at = b.bitcast(b.gep(out, [_const(half * LANES)]), vp)
                        if masked:
                            b.call(self.store, [acc[halves * a + half], at, ir.Constant(_i32, 4), masks[half]])
                        else:
                            b.store(acc[halves * a + half], at, align=4)
            with scattered:   # C's columns are strided (a transposed output): each vector's lanes scattered
                for a in range(height):
                    out = b.gep(self.cp, [b.add(b.mul(b.add(r0, _const(a)), self.ldc), b.mul(col, self.c_j))])
                    for half in range(halves):
                        at = b.ptrtoint(b.gep(out, [b.mul(_const(half * LANES), self.c_j)]), _i64)
                        ptrs = b.inttoptr(b.add(_splat(b, at, ir.VectorType(_i64, LANES)), self.lane_bytes),
                                          _ptrs)
                        b.call(self.scatter, [acc[halves * a + half], ptrs, ir.Constant(_i32, 4), masks[half]])


def _clamp_bounds(b: ir.IRBuilder, flags, clamp) -> list:
    """The clamp's bounds as vectors: the two float32 at address ``clamp`` where ``flags`` has the ``CLAMP`` bit,
    else -inf and inf (which keep every value, NaN included)."""
    start = b.block
    with b.if_then(b.icmp_signed("!=", b.and_(flags, _const(CLAMP)), _const(0))):
        bounds = b.inttoptr(clamp, _f32.as_pointer())
        lo_read, hi_read = b.load(bounds, align=4), b.load(b.gep(bounds, [_const(1)]), align=4)
        read = b.block
    phis = []
    for value, unbounded in ((lo_read, float("-inf")), (hi_read, float("inf"))):
        phi = b.phi(_f32)
        phi.add_incoming(ir.Constant(_f32, unbounded), start)
        phi.add_incoming(value, read)
        phis.append(phi)
    return [_splat(b, phi, _vec) for phi in phis]


def _clamped(b: ir.IRBuilder, v, bounds):
    """``v`` clamped to ``bounds`` as ``mathlib.maximum`` then ``minimum`` do: a lane keeps its value where it is
    past the bound or NaN (so -0.0 against a bound of 0.0 gives 0.0, as theirs)."""
    lo, hi = bounds
    nan = b.fcmp_unordered("uno", v, v)
    v = b.select(b.or_(b.fcmp_ordered(">", v, lo), nan), v, lo)
    return b.select(b.or_(b.fcmp_ordered("<", v, hi), nan), v, hi)


class _DepthwiseEmitter:
    """The IR of ``tlc_dw3x3(x, w, bias, out, planes, h, width, ho, wo, stride, flags, clamp, x_plane,
    out_plane, top)``: a 3x3 depthwise convolution with padding 1 and stride 1 or 2 over ``planes`` planes
    (input [h, width] every ``x_plane`` elements, output [ho, wo] every ``out_plane``, weights 9 per plane, a bias
    per plane where ``flags`` has bit 0, the outputs clamped to the two float32 at ``clamp`` where it has the
    ``CLAMP`` bit). ``top`` (0 or 1): rows of input above row 0 that are real, not padding - a band of a plane
    whose rows above were computed into scratch (``tlc.kernels.conv``'s expansion-depthwise chain); a band's last
    rows are cut by ``h`` as a plane's are. Vectors of 16 outputs along an output
    row: per vector nine masked loads of the input (the masks drop the padding's columns and the lanes past the
    row; at stride 2 a row's three taps are the even lanes, the odd lanes and the even lanes a column on of two
    vectors and the first lane of a third) and nine fused multiply-adds with the
    plane's weights, held in registers, then one masked store. Rows of the padding are skipped. The column
    chunks walk a plane down its rows, which the hardware prefetchers do not follow from memory where a row holds
    several chunks: there the first chunk prefetches, row by row, the next plane's input rows of that output row
    (one core: MobileNetV2's depthwise convs at batch 8 17.4 -> 10.5 ms, at batch 1 ~1.08 -> ~0.97 ms; 144
    planes of 56x56 at batch 8 alone 5.0 -> 1.5-1.8 ms; all of the next plane's lines at a plane's start: 12.8
    ms at batch 8; its output lines too: slower). A small plane
    (stride 1, at most 8 wide) runs in vectors of 16 consecutive outputs of the flattened plane instead, each
    tap one masked load (its masks, which drop what lies across a row's end, computed once for every plane).
    With the ``MAX_POOL`` bit in ``flags`` the same loops take a 3x3 max pool instead (``max_pool_3x3``): the
    masked loads give -inf for the padding, and the taps are compared, not multiplied and added."""

    def __init__(self, module: ir.Module, loops: _Emitter):
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_i64] * DEPTHWISE_ARGS),
                              name=DEPTHWISE_SYMBOL)
        self.fma, self.load, self.store, self.prefetch = loops.fma, loops.load, loops.store, loops.prefetch
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        b = self.b
        xp, wp, bp, op, planes, self.h, self.width, self.ho, self.wo, stride, flags, clamp, self.x_plane, \
            self.out_plane, top = self.fn.args
        self.first_row = b.sub(_const(0), top)   # the first input row that is not padding
        fp = _f32.as_pointer()
        self.xp, self.wp, self.bp, self.op = (b.inttoptr(v, fp) for v in (xp, wp, bp, op))
        self.has_bias = b.icmp_signed("!=", b.and_(flags, _const(1)), _const(0))
        self.clamp_bounds = _clamp_bounds(b, flags, clamp)
        self.lanes = ir.Constant(ir.VectorType(_i64, LANES), list(range(LANES)))
        self.lanes2 = ir.Constant(ir.VectorType(_i64, LANES), list(range(LANES, 2 * LANES)))
        self.zero = ir.Constant(_vec, None)
        self.neg_inf = ir.Constant(_vec, [float("-inf")] * LANES)
        pool = b.icmp_signed("!=", b.and_(flags, _const(MAX_POOL)), _const(0))
        # a small plane (stride 1, as wide as its input, at most 8 columns) in vectors along the flattened plane
        # instead of one masked vector a row (a 7x7 plane: 4 vectors of 16 instead of 7 holding 7 each; measured
        # on one core, 960 planes: 26 -> 22 us; 14-wide planes were slower flat, 21 -> 29 us for 384 of them)
        hw = b.mul(self.ho, self.wo)
        narrow = b.and_(b.icmp_signed("<=", self.wo, _const(LANES // 2)), b.icmp_signed("<=", hw, _const(FLAT_MAX)))
        flat = b.and_(b.and_(b.icmp_signed("==", stride, _const(1)), b.icmp_signed("==", self.wo, self.width)), narrow)
        flat = b.and_(b.and_(flat, b.not_(pool)), b.icmp_signed("==", top, _const(0)))
        self.masks = b.alloca(ir.IntType(16), FLAT_MAX // LANES * 10)   # per vector: nine taps' masks, the store's
        with b.if_else(flat) as (small, rows):
            with small:
                chunks = b.sdiv(b.add(hw, _const(LANES - 1)), _const(LANES))
                _Emitter.loop(self, _const(0), chunks, lambda c: self.flat_masks(c, hw), "masks")
                _Emitter.loop(self, _const(0), planes, lambda q: self.flat_plane(q, hw, chunks), "planef")
            with rows, b.if_else(pool) as (maximum, conv):
                for block, reduce in ((maximum, "max"), (conv, "fma")):
                    with block, b.if_else(b.icmp_signed("==", stride, _const(1))) as (one, two):
                        for strided, stride_ in ((one, 1), (two, 2)):
                            # rows of several chunks: the first chunk's walk down the rows prefetches the next
                            # plane's (rows of one chunk are read in order, which the hardware prefetchers follow)
                            with strided, b.if_else(b.icmp_signed(">", self.wo, _const(LANES))) as (wide, narrow):
                                for block_, fetch in ((wide, True), (narrow, False)):
                                    with block_:
                                        _Emitter.loop(self, _const(0), planes,
                                                      lambda q, s_=stride_, r_=reduce, f_=fetch:
                                                      self.plane(q, s_, r_, f_),
                                                      f"plane{stride_}{reduce}{'f' if fetch else ''}")
        b.ret_void()

    def flat_masks(self, c, hw) -> None:
        """The masks of vector ``c`` of a flattened plane (outputs [16 c, 16 c + 16)) as 16-bit words: per tap
        (ki, kj) the lanes whose input (oh + ki - 1, ow + kj - 1) lies inside the plane, then the lanes below hw."""
        b = self.b
        vi32, vf = ir.VectorType(_i32, LANES), _vec
        lanes = ir.Constant(vi32, list(range(LANES)))
        pos = b.add(_splat(b, b.trunc(b.mul(c, _const(LANES)), _i32), vi32), lanes)
        wo = _splat(b, b.trunc(self.wo, _i32), vi32)
        # oh = floor((p + 0.5) / wo): exact in float32 for these small numbers; ow = p - oh * wo
        oh = b.fptosi(b.fdiv(b.fadd(b.sitofp(pos, vf), _splat(b, ir.Constant(_f32, 0.5), vf)), b.sitofp(wo, vf)), vi32)
        ow = b.sub(pos, b.mul(oh, wo))
        h = _splat(b, b.trunc(self.h, _i32), vi32)
        keep = b.icmp_signed("<", pos, _splat(b, b.trunc(hw, _i32), vi32))
        words = b.gep(self.masks, [b.mul(c, _const(10))])
        for ki in range(3):
            row = b.add(oh, ir.Constant(vi32, [ki - 1] * LANES))
            row_in = b.and_(b.icmp_signed(">=", row, ir.Constant(vi32, [0] * LANES)), b.icmp_signed("<", row, h))
            for kj in range(3):
                col = b.add(ow, ir.Constant(vi32, [kj - 1] * LANES))
                col_in = b.and_(b.icmp_signed(">=", col, ir.Constant(vi32, [0] * LANES)), b.icmp_signed("<", col, wo))
                mask = b.and_(b.and_(row_in, col_in), keep)
                b.store(b.bitcast(mask, ir.IntType(16)), b.gep(words, [_const(3 * ki + kj)]))
        b.store(b.bitcast(keep, ir.IntType(16)), b.gep(words, [_const(9)]))

    def flat_plane(self, q, hw, chunks) -> None:
        """Plane ``q`` in vectors of 16 consecutive outputs: output p reads input p + (ki - 1) * wo + kj - 1."""
        b = self.b
        self.plane_setup(q)
        mask_type = ir.VectorType(ir.IntType(1), LANES)

        def vector(c):
            p0 = b.mul(c, _const(LANES))
            words = b.gep(self.masks, [b.mul(c, _const(10))])
            acc = self.bias
            for ki in range(3):
                for kj in range(3):
                    mask = b.bitcast(b.load(b.gep(words, [_const(3 * ki + kj)])), mask_type)
                    at = b.add(p0, b.add(b.mul(_const(ki - 1), self.wo), _const(kj - 1)))
                    v = b.call(self.load, [b.bitcast(b.gep(self.x, [at]), _vec.as_pointer()), ir.Constant(_i32, 4),
                                           mask, self.zero])
                    acc = b.call(self.fma, [v, self.taps[3 * ki + kj], acc])
            keep = b.bitcast(b.load(b.gep(words, [_const(9)])), mask_type)
            at = b.bitcast(b.gep(self.out, [p0]), _vec.as_pointer())
            b.call(self.store, [_clamped(b, acc, self.clamp_bounds), at, ir.Constant(_i32, 4), keep])

        _Emitter.loop(self, _const(0), chunks, vector, "jf")

    def plane_setup(self, q, reduce: str = "fma") -> None:
        """Plane ``q``'s nine weights and bias as splatted vectors (none for a max pool), its input and output
        planes."""
        b = self.b
        self.x = b.gep(self.xp, [b.mul(q, self.x_plane)])
        self.out = b.gep(self.op, [b.mul(q, self.out_plane)])
        if reduce == "max":
            return
        w = b.gep(self.wp, [b.mul(q, _const(9))])
        self.taps = [_splat(b, b.load(b.gep(w, [_const(t)]), align=4), _vec) for t in range(9)]
        start = b.block
        with b.if_then(self.has_bias):
            loaded = b.load(b.gep(self.bp, [q]), align=4)
            with_bias = b.block
        bias = b.phi(_f32)
        bias.add_incoming(ir.Constant(_f32, 0.0), start)
        bias.add_incoming(loaded, with_bias)
        self.bias = _splat(b, bias, _vec)

    def plane(self, q, stride: int, reduce: str, fetch: bool) -> None:
        """Plane ``q`` in column chunks; with ``fetch`` the first chunk prefetches the next plane's input."""
        b = self.b
        self.plane_setup(q, reduce)
        chunks = b.sdiv(b.add(self.wo, _const(LANES - 1)), _const(LANES))
        if fetch:
            following = b.gep(self.xp, [b.mul(b.add(q, _const(1)), self.x_plane)])
            self.chunk(_const(0), stride, reduce, following)
        _Emitter.loop(self, _const(1 if fetch else 0), chunks, lambda c: self.chunk(c, stride, reduce),
                      "jf" if fetch else "j")

    def chunk(self, c, stride: int, reduce: str, following=None) -> None:
        """Outputs [j0, j0 + 16) (j0 = 16 c) of every output row: the column masks once, then the rows (given
        ``following``, the next plane's input, each row first prefetches that plane's input rows of its output
        row)."""
        b = self.b
        vi64 = ir.VectorType(_i64, LANES)
        j0 = b.mul(c, _const(LANES))
        keep = b.icmp_signed("<", b.add(_splat(b, j0, vi64), self.lanes), _splat(b, self.wo, vi64))
        width = _splat(b, self.width, vi64)
        everything = ir.Constant(ir.VectorType(ir.IntType(1), LANES), [1] * LANES)
        loads = []   # per vector a row loads: (its first column, its mask)

        def inside(first, lanes, kept):
            cols = b.add(_splat(b, first, vi64), lanes)
            return b.and_(b.and_(b.icmp_signed(">=", cols, ir.Constant(vi64, [0] * LANES)),
                                 b.icmp_signed("<", cols, width)), kept)

        if stride == 1:
            for kj in range(3):
                first = b.add(j0, _const(kj - 1))   # the input column of lane 0
                loads.append((first, inside(first, self.lanes, keep)))
        else:   # columns [2 j0 - 1, 2 j0 + 32): two whole vectors and the first lane of a third, read where
            # they are in the row; the taps' columns are their even lanes, their odd lanes, and the even ones
            # a column on
            first = b.sub(b.mul(j0, _const(2)), _const(1))
            lane0 = ir.Constant(ir.VectorType(ir.IntType(1), LANES), [1] + [0] * (LANES - 1))
            loads = [(first, inside(first, self.lanes, everything)),
                     (b.add(first, _const(LANES)), inside(first, self.lanes2, everything)),
                     (b.add(first, _const(2 * LANES)), inside(b.add(first, _const(2 * LANES)), self.lanes, lane0))]
        def row(oh):
            if following is not None:   # the next plane's input rows of this output row, a line at a time
                lines = b.sdiv(b.add(self.width, _const(LANES - 1)), _const(LANES))
                first = b.gep(following, [b.mul(b.mul(oh, _const(stride)), self.width)])

                def line(i):
                    at = b.bitcast(b.gep(first, [b.mul(i, _const(LANES))]), ir.IntType(8).as_pointer())
                    b.call(self.prefetch, [at, ir.Constant(_i32, 0), ir.Constant(_i32, 3), ir.Constant(_i32, 1)])

                _Emitter.loop(self, _const(0), b.mul(lines, _const(stride)), line, "fetch")
            self.vector(oh, j0, keep, loads, stride, reduce)

        _Emitter.loop(self, _const(0), self.ho, row, "oh" if following is None else "ohf")

    def vector(self, oh, j0, keep, loads, stride: int, reduce: str) -> None:
        """Outputs [j0, j0 + 16) of output row ``oh``, masked past ``wo``: the taps' multiply-adds, or (a max
        pool) their maximum as ``tlc.kernels.conv``'s pool kernels take it: from the window's first tap (a pad is
        -inf) on, a later tap replaces it where greater (a NaN counts only as the first tap)."""
        b = self.b
        pool = reduce == "max"
        acc = self.neg_inf if pool else self.bias
        fill = self.neg_inf if pool else self.zero
        for ki in range(3):
            ih = b.add(b.mul(oh, _const(stride)), _const(ki - 1))
            inside = b.and_(b.icmp_signed(">=", ih, self.first_row), b.icmp_signed("<", ih, self.h))
            before = b.block
            with b.if_then(inside):
                row = b.gep(self.x, [b.mul(ih, self.width)])
                vectors = [b.call(self.load, [b.bitcast(b.gep(row, [first]), _vec.as_pointer()),
                                              ir.Constant(_i32, 4), mask, fill]) for first, mask in loads]
                if stride == 2:
                    lanes = ir.VectorType(_i32, LANES)
                    a, c, tail = vectors
                    # the third tap's columns are the first's a lane on, then the tail's first lane: one lane shift
                    # (valignd) instead of a third two-source permute and a blend (96 planes 112 -> 56 on one
                    # Zen 5 core, input in L3: 150 -> 117 us)
                    evens = b.shuffle_vector(a, c, ir.Constant(lanes, list(range(0, 2 * LANES, 2))))
                    odds = b.shuffle_vector(a, c, ir.Constant(lanes, list(range(1, 2 * LANES, 2))))
                    third = b.shuffle_vector(evens, tail, ir.Constant(lanes, list(range(1, LANES + 1))))
                    vectors = [evens, odds, third]
                summed = acc
                for kj in range(3):
                    v = vectors[kj]
                    if pool and ki == kj == 0:
                        summed = v
                    elif pool:
                        summed = b.select(b.fcmp_ordered(">", v, summed), v, summed)
                    else:
                        summed = b.call(self.fma, [v, self.taps[3 * ki + kj], summed])
                done = b.block
            (acc,) = _joined(b, [acc], before, [summed], done)
        at = b.bitcast(b.gep(self.out, [b.add(b.mul(oh, self.wo), j0)]), _vec.as_pointer())
        b.call(self.store, [acc if pool else _clamped(b, acc, self.clamp_bounds), at, ir.Constant(_i32, 4), keep])


def _source() -> str:
    module = ir.Module(name="tlc_panel")
    module.triple = llvm.get_process_triple()
    _DepthwiseEmitter(module, _Emitter(module))
    return str(module)


_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def ensure() -> None:
    """Compile the module's kernels (``tlc_panel``, ``tlc_dw3x3``) for this host, or load their machine code from
    the kernel cache, and register the symbols. Once per process. Where that fails (an llvmlite without MCJIT's
    object cache, an unsupported target), the symbols are no-op stubs, ``fast()`` is False (BLAS keeps every
    product, the phase kernels every depthwise conv) and ``REASON`` says why: the kernels that name the
    symbols still link."""
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
            stubs = [cfunc(types.void(*([types.int64] * ARGS)))(_nothing),
                     cfunc(types.void(*([types.int64] * DEPTHWISE_ARGS)))(_nothing_dw)]
            _STATE["engine"] = stubs
            llvm.add_symbol(SYMBOL, stubs[0].address)
            llvm.add_symbol(DEPTHWISE_SYMBOL, stubs[1].address)


#: why the panel product is off ("" when it is built)
REASON = ""


def _nothing(b, a, c, rows, k, n, lda, ldc, ldb, step, a_k, c_j, bias, bias_mode, clamp, b_rows):
    return   # the stub's body: never called, ``fast()`` being False


def _nothing_dw(x, w, bias, out, planes, h, width, ho, wo, stride, flags, clamp, x_plane, out_plane, top):
    return


def _build():
    """The MCJIT engine holding the kernels' machine code, compiled or loaded from the kernel cache
    (``tlc.kernels.irjit``), with the symbols registered."""
    return irjit.engine_for("panel", [__file__], _source, (SYMBOL, DEPTHWISE_SYMBOL))


def fast() -> bool:
    """Whether the host runs the kernels at full speed (AVX-512: a 16-lane vector a register); elsewhere they
    compute the same, and BLAS keeps the products and the phase kernels the depthwise convs."""
    return not REASON and avx512()


_panel = types.ExternalFunction(SYMBOL, types.void(*([types.int64] * ARGS)))


@njit(cache=True, nogil=True, inline="always")
def panel_strided(b_addr, ldb, step, a_addr, lda, a_k, c_addr, ldc, c_j, rows, k, n, bias_addr, bias_mode,
                  clamp_addr=0, b_rows=0):
    """The kernel on any strides: C[i, j] (at ``c_addr + (i * ldc + j * c_j) * 4``) = bias + sum over k of
    A[i, k] (at ``a_addr + (i * lda + k * a_k) * 4``) times B[k, j] (panel ``j // PANEL`` from ``b_addr + (j //
    PANEL) * step * 4``, its row k ``ldb`` elements after row k - 1, or where ``b_rows`` is an address, ``b_rows[k]``
    elements (int64) from the panel's start), for i < rows, j < n; the bias (float32,
    ``bias_mode``): ``bias_addr[i]`` a row (BIAS_ROWS), ``bias_addr[j]`` a column (BIAS_COLUMNS), or none
    (BIAS_NONE: ``bias_addr`` unread); with the ``CLAMP`` bit, clamped to the two float32 at ``clamp_addr``."""
    if rows > 0 and n > 0:
        _panel(b_addr, a_addr, c_addr, rows, k, n, lda, ldc, ldb, step, a_k, c_j, bias_addr, bias_mode, clamp_addr,
               b_rows)


@njit(cache=True, nogil=True)
def lanes_used(n: int) -> float:
    """The share of the kernel's lanes that hold C's ``n`` columns: whole panels of two vectors, a last one of
    ``LANES`` or fewer columns in one vector (masked), of more in two."""
    if n <= 0:
        return 1.0
    rest = n % PANEL
    vectors = 2 * (n // PANEL) + (0 if rest == 0 else 1 if rest <= LANES else 2)
    return n / (LANES * vectors)


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


_dw3x3 = types.ExternalFunction(DEPTHWISE_SYMBOL, types.void(*([types.int64] * DEPTHWISE_ARGS)))


@njit(cache=True, nogil=True, inline="always")
def depthwise_3x3(x_addr, w_addr, bias_addr, out_addr, planes, h, width, ho, wo, stride, has_bias, clamp_addr=0):
    """``planes`` consecutive float32 planes of a 3x3 depthwise convolution with padding 1 and stride 1 or 2
    (``_DepthwiseEmitter``): input planes [h, width] at ``x_addr``, output planes [ho, wo] at ``out_addr``, nine
    weights a plane at ``w_addr``, one bias a plane at ``bias_addr`` where ``has_bias``, the outputs clamped to
    the two float32 at ``clamp_addr`` where that is not 0."""
    if planes > 0:
        flags = (1 if has_bias else 0) | (CLAMP if clamp_addr != 0 else 0)
        _dw3x3(x_addr, w_addr, bias_addr, out_addr, planes, h, width, ho, wo, stride, flags, clamp_addr,
               h * width, ho * wo, 0)


@njit(cache=True, nogil=True, inline="always")
def depthwise_3x3_band(x_addr, w_addr, bias_addr, out_addr, planes, h, width, ho, wo, stride, clamp_addr,
                       x_plane, out_plane, top):
    """``depthwise_3x3`` (with a bias) on planes ``x_plane`` and ``out_plane`` elements apart, ``top`` real
    input rows above row 0 (a band of rows: ``_DepthwiseEmitter``)."""
    if planes > 0:
        flags = 1 | (CLAMP if clamp_addr != 0 else 0)
        _dw3x3(x_addr, w_addr, bias_addr, out_addr, planes, h, width, ho, wo, stride, flags, clamp_addr,
               x_plane, out_plane, top)


@njit(cache=True, nogil=True, inline="always")
def max_pool_3x3(x_addr, out_addr, planes, h, width, ho, wo, stride):
    """``planes`` consecutive float32 planes of a 3x3 max pool with padding 1 at the start and stride 1 or 2 on
    ``tlc_dw3x3``'s loops (``MAX_POOL``): input planes [h, width], output planes [ho, wo]; windows past the input
    (an end pad, ``ceil_mode``) take only what lies inside it."""
    if planes > 0:
        _dw3x3(x_addr, 0, 0, out_addr, planes, h, width, ho, wo, stride, MAX_POOL, 0, h * width, ho * wo, 0)
