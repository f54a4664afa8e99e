"""Native steps: generated kernels of fused groups and elementwise ops, and products in parts on Numba's pool.

Each ``bind`` returns the step's fallback calls (the reference, or numpy, into the planned outputs) and a
``KernelRequest`` whose build compiles the kernel (``jit.py`` decides when) and whose calls run it. Kernels take
flat C-contiguous arrays: an input that is a strided view is copied into scratch first.

Products (MatMul, Gemm and the contraction of an epilogue group) run as single-threaded BLAS calls in parts on
Numba's pool (``tlc.kernels.gemm``); an epilogue group whose contraction is a product is one compiled function
that applies its elementwise part to each part's rows right after that part, on the same thread
(``tlc.kernels.epilogue``). A Conv and its epilogue are one function the same way, with the conv family's parts
(``tlc.kernels.conv``) as the contraction.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numba
import numpy as np

from ..errors import CompileError
from ..ir.graph import Graph, Value
from ..ir.types import TensorType, np_dtype
from ..kernels import (
    KernelCache,
    KernelOptions,
    blas,
    compile_group,
    default_cache,
    gemm,
    lib_conv,
    panel,
    split_epilogue,
)
from ..kernels import chain as kchain
from ..kernels import conv as kconv
from ..kernels.common import Contraction
from ..kernels.epilogue import EpilogueKernel
from ..kernels.plan import SUPPORTED_DTYPES, build_plan, typed_body
from ..ops import opdef_of
from .bound import FW, Bound, Call, F, KernelRequest, NotNative, Ref, V, W, contiguous_strides
from .impl import BindContext, StepImpl, fallback_calls, spatial_window
from .library import ConvNhwcImpl, expression_calls
from .options import CompileOptions

_CACHES: dict[str, KernelCache] = {}
_CACHES_LOCK = threading.Lock()


def kernel_cache(ctx: BindContext) -> KernelCache:
    """One ``KernelCache`` per directory, shared by every plan (the kernel library's default without one)."""
    return cache_for(ctx.options)


def cache_for(options: CompileOptions) -> KernelCache:
    """The ``KernelCache`` of ``options.cache_dir`` (the kernel library's default when None)."""
    if options.cache_dir is None:
        return default_cache()
    with _CACHES_LOCK:
        return _CACHES.setdefault(options.cache_dir, KernelCache(options.cache_dir))


def kernel_options(ctx: BindContext) -> KernelOptions:
    return KernelOptions(fast_math=ctx.options.fast_math, num_threads=ctx.options.threads)


def numba_type(shape: tuple[int, ...], strides: tuple[int, ...] | None, dtype: np.dtype):
    """Numba's type of an array of this shape, strides and dtype, as the runner will pass it."""
    probe = np.lib.stride_tricks.as_strided(np.empty(1, dtype), shape=shape,
                                            strides=strides or contiguous_strides(shape, dtype.itemsize))
    return numba.typeof(probe)


class Scratch:
    """A step's scratch arrays as it builds its calls."""

    def __init__(self) -> None:
        self.shapes: list[tuple[tuple[int, ...], np.dtype]] = []

    def add(self, shape: tuple[int, ...], dtype: np.dtype) -> int:
        self.shapes.append((tuple(shape), np.dtype(dtype)))
        return len(self.shapes) - 1


def flat_inputs(ctx: BindContext, ports: list[int], scratch: Scratch) -> tuple[list[Call], list[Ref]]:
    """Flat references to inputs ``ports`` for a kernel, and copies into scratch of the strided ones."""
    copies, refs = [], []
    for p in ports:
        v = ctx.inputs[p]
        if v in ctx.strides:
            t = ctx.in_types[p]
            k = scratch.add(tuple(t.shape), np_dtype(t.dtype))
            copies.append(Call(np.copyto, (W(k), V(v))))
            refs.append(FW(k))
        else:
            refs.append(F(v))
    return copies, refs


# ---------------------------------------------------------------------------- generated kernels
def kernel_request(ctx: BindContext, body: Graph, kind: str, in_types: list[TensorType],
                   in_refs: list[Ref], out_refs: list[Ref], what: str,
                   fixed_alias: tuple[int, ...] | None = None) -> KernelRequest:
    """A request for ``body``'s generated kernel over arrays ``in_refs`` -> ``out_refs`` (all flat). The memory
    plan's alias (elementwise kernels) decides the variant unless ``fixed_alias`` does."""
    in_shapes = [tuple(t.shape) for t in in_types]
    out_shapes = [tuple(t.shape) for t in ctx.out_types]
    options, cache, target = kernel_options(ctx), kernel_cache(ctx), ctx.options.target

    def variant(alias):
        if kind != "elementwise":
            return (-1,) * len(out_refs)
        return tuple(fixed_alias if fixed_alias is not None else alias or (-1,) * len(out_refs))

    def build(alias):
        a = variant(alias)
        kernel = compile_group(body, kind, in_types, target=target, options=options, cache=cache, alias=a)
        kernel.entry_point = kernel.entry(in_shapes, out_shapes, a)
        return kernel

    def calls(kernel, alias):
        fn, dims = kernel.entry_point
        a = variant(alias)
        outs = tuple(r for m, r in enumerate(out_refs) if a[m] < 0)
        return [Call(fn, (dims, *in_refs, *kernel.constant_arrays, *outs))]

    return KernelRequest(what, build, calls)


def _with_copies(request: KernelRequest, copies: list[Call]) -> KernelRequest:
    if not copies:
        return request
    return KernelRequest(request.name, request.build, lambda k, a: copies + request.calls(k, a))


class FusedImpl(StepImpl):
    """A ``tlc.Fused`` elementwise or reduction group: its generated kernel."""

    mode = "native"

    def __init__(self, body: Graph, kind: str):
        self.body = body
        self.kind = kind
        self.reason = f"generated {kind} kernel"

    def bind(self, ctx: BindContext) -> Bound:
        return kernel_step(ctx, self.body, self.kind, f"{self.kind} kernel", fallback_calls(ctx))


def kernel_step(ctx: BindContext, body: Graph, kind: str, what: str, fallback: list[Call]) -> Bound:
    """A step that is one generated kernel over all its inputs and outputs."""
    ctx.out_shapes()
    if any(t is None for t in ctx.in_types) or any(s is None for s in ctx.in_shapes()):
        raise NotNative("an optional input is absent")
    if not ctx.options.jit_enabled:
        return Bound(fallback, mode="reference", note="jit='off'", inplace=kind == "elementwise")
    scratch = Scratch()
    copies, refs = flat_inputs(ctx, list(range(len(ctx.inputs))), scratch)
    request = kernel_request(ctx, body, kind, list(ctx.in_types), refs, [F(o) for o in ctx.outputs], what)
    return Bound(fallback, mode="native", note=what, workspace=scratch.shapes, inplace=kind == "elementwise",
                 request=_with_copies(request, copies))


class ElementwiseImpl(StepImpl):
    """One elementwise op outside any group: a one-op generated kernel (numpy from its expression meanwhile)."""

    mode = "native"
    reason = "generated elementwise kernel (one op)"

    def bind(self, ctx: BindContext) -> Bound:
        node = ctx.node
        if len(ctx.outputs) != 1:
            raise NotNative(f"{len(ctx.outputs)} outputs")
        body = Graph("op")
        ins = [None if t is None else body.input(f"in{i}", t.dtype, t.shape) for i, t in enumerate(ctx.in_types)]
        body.output(body.add_node(node.op, ins, domain=node.domain, attrs=dict(node.attrs)), "out")
        dtypes = {t.dtype for t in ctx.in_types + ctx.out_types if t is not None}
        numeric = {t.dtype for t in ctx.in_types if t is not None and t.dtype != "bool"}
        if len(numeric) > 1:   # Pow(int, float): an expression computes in its first operand's type, ONNX does not
            raise NotNative(f"inputs of different types ({', '.join(sorted(numeric))}): the reference computes them")
        if not dtypes <= SUPPORTED_DTYPES:   # float16, strings: the reference
            raise NotNative(f"no kernel for dtypes {', '.join(sorted(dtypes - SUPPORTED_DTYPES))}")
        # the target's kernel dtypes, as the fuse pass groups them; integer arithmetic: numpy has its semantics
        if not dtypes <= ctx.options.target.internal_dtypes:
            return Bound(expression_calls(ctx), note="numpy from the op's scalar expression")
        bound = kernel_step(ctx, body, "elementwise", "one-op elementwise kernel", expression_calls(ctx))
        if bound.request is None:
            bound.mode, bound.note = "library", "numpy from the op's scalar expression"
        return bound


# ---------------------------------------------------------------------------- products
class Product:
    """A MatMul or Gemm ``C = alpha * op(A) @ op(B)`` over broadcast batch dims, from a step's inputs 0 and 1."""

    def __init__(self, ctx: BindContext, trans_a: bool, trans_b: bool, alpha: float, fold: bool = False):
        """``fold``: a contiguous A of batch dims times a 2-D B is one product of A's rows stacked (the caller
        runs it through ``promoted_product``, which reshapes): an RNN's projection of all its steps,
        [100, 1, 256] @ [256, 256], was 100 one-row products (0.24 ms) where one takes 0.07."""
        a, b = ctx.in_shapes()[:2]
        self.promoted = None
        folded = fold and len(a) > 2 and len(b) == 2 and not trans_a and not trans_b and ctx.contiguous(0)
        if folded:
            rows = int(np.prod(a[:-1], dtype=np.int64))
            a = (rows, a[-1])
            self.promoted = (a, b, (rows, b[-1]))
        elif len(a) < 2 or len(b) < 2:   # numpy's rule: a vector operand is a one-row (one-column) matrix
            if not (ctx.contiguous(0) and ctx.contiguous(1)) or ctx.const(1) is not None and len(b) < 2:
                raise NotNative("a strided or constant 1-D operand")
            a, b = ((1,) + a if len(a) == 1 else a), (b + (1,) if len(b) == 1 else b)
            out = np.broadcast_shapes(a[:-2], b[:-2]) + (a[-2], b[-1])
            self.promoted = (a, b, out)
        dtype = np_dtype(ctx.in_types[0].dtype)
        if not blas.AVAILABLE:
            raise NotNative(f"BLAS: {blas.REASON}")
        if dtype not in (np.float32, np.float64):
            raise NotNative(f"no native product for {dtype}")
        strides = [ctx.strides.get(ctx.inputs[p]) or contiguous_strides(s, dtype.itemsize)
                   for p, s in ((0, a), (1, b))]
        self.b_const = ctx.const(1)
        if self.b_const is not None and trans_b:   # pre-packed once: BLAS reads a row-major B fastest
            self.b_const = np.ascontiguousarray(np.swapaxes(self.b_const, -1, -2))
            b, strides[1], trans_b = self.b_const.shape, self.b_const.strides, False
        self.dtype, self.alpha, self.views = dtype, alpha, (trans_a, trans_b)
        self.a_shape, self.a_strides = _oriented(a, strides[0], trans_a)
        self.b_shape, self.b_strides = _oriented(b, strides[1], trans_b)
        for shape, st in ((self.a_shape, self.a_strides), (self.b_shape, self.b_strides)):
            if not blas.blas_operand(np.lib.stride_tricks.as_strided(np.empty(1, dtype), shape[-2:], st[-2:])):
                raise NotNative("an operand BLAS cannot read where it is")
        self.out_shape = tuple(ctx.out_shapes()[0]) if self.promoted is None else self.promoted[2]
        self.offs = gemm.batch_offsets(self.a_shape, self.a_strides, self.b_shape, self.b_strides, self.out_shape,
                                       dtype.itemsize)
        m, n, k = self.out_shape[-2], self.out_shape[-1], self.a_shape[-1]
        weights = 0 if self.b_const is None else self.b_const.nbytes
        self.nparts = gemm.parts_for(self.offs.shape[0] * m * n * k, ctx.threads, weights)
        self.cols = gemm.column_split(m, n, self.offs.shape[0], self.nparts)
        # a constant float32 B in panels, packed once here: the panel product (``tlc.kernels.panel``)
        b2d = self.b_const if self.b_const is not None and (self.promoted is None or folded) else None
        self.packed = panel.pack(b2d) if gemm.packs(b2d, alpha) else gemm.UNPACKED
        if self.b_const is None and gemm.in_place(dtype, self.b_strides[-1] == dtype.itemsize, n, k, alpha):
            self.packed = gemm.IN_PLACE
        self.a = ctx.const(0) if ctx.const(0) is not None else V(ctx.inputs[0])
        self.b = self.b_const if self.b_const is not None else V(ctx.inputs[1])
        kind = "panels" if self.packed.size > 1 else "panels in place" if self.packed.size else "BLAS"
        self.note = (f"{kind} in {self.nparts} {'column' if self.cols else 'row'} parts" if self.nparts > 1
                     else kind)

    def types(self) -> tuple:
        """Numba types of (a, b, c, offs, alpha, cols, packed) as ``gemm_part`` gets them."""
        t = numba.types
        a = numba.typeof(self.a) if isinstance(self.a, np.ndarray) else numba_type(self.a_shape, self.a_strides,
                                                                                    self.dtype)
        b = numba.typeof(self.b) if isinstance(self.b, np.ndarray) else numba_type(self.b_shape, self.b_strides,
                                                                                    self.dtype)
        return (a, b, numba_type(self.out_shape, None, self.dtype), t.int64[:, ::1], t.float64, t.boolean,
                t.float32[::1])


def _oriented(shape: tuple[int, ...], strides: tuple[int, ...], trans: bool):
    if not trans:
        return tuple(shape), tuple(strides)
    return shape[:-2] + (shape[-1], shape[-2]), strides[:-2] + (strides[-1], strides[-2])


def oriented(a: np.ndarray, trans: bool) -> np.ndarray:
    return np.swapaxes(a, -1, -2) if trans else a


def product(a, b, c, offs, alpha, cols, packed, nparts, trans_a, trans_b) -> None:
    """``c = alpha * op(a) @ op(b)``, transposes as views (see ``tlc.kernels.gemm.matmul``)."""
    gemm.matmul(oriented(a, trans_a), oriented(b, trans_b), c, offs, alpha, cols, nparts, packed)


def promoted_product(a, b, c, shapes, offs, alpha, cols, packed, nparts, trans_a, trans_b) -> None:
    """``product`` of vector operands seen as one-row / one-column matrices (``shapes``: a, b, c as such)."""
    product(a.reshape(shapes[0]), b.reshape(shapes[1]), c.reshape(shapes[2]), offs, alpha, cols, packed, nparts,
            trans_a, trans_b)


def numpy_product(a, b, out, alpha, trans_a, trans_b) -> None:
    np.matmul(oriented(a, trans_a), oriented(b, trans_b), out=out)
    if alpha != 1.0:
        np.multiply(out, out.dtype.type(alpha), out=out)


def gemm_tail(out: np.ndarray, c: np.ndarray, beta: float) -> None:
    """Gemm's ``+ beta * C`` (C broadcast to the output)."""
    np.add(out, c if beta == 1.0 else c * c.dtype.type(beta), out=out)


def compile_product(types: tuple, nparts: int) -> str:
    """Compile (or load) the product driver for these argument types; what a product step's job builds."""
    if nparts > 1:
        gemm._matmul_parallel.compile(types + (numba.types.int64,))
    else:
        gemm._matmul_serial.compile(types[:5] + types[6:7])
    return "gemm"


class ProductImpl(StepImpl):
    """MatMul and Gemm: BLAS in parts on Numba's pool; Gemm's C added after."""

    mode = "native"
    reason = "BLAS in parts"

    def __init__(self, op: str, attrs: dict[str, Any]):
        self.op = op
        self.alpha = float(attrs.get("alpha", 1.0)) if op == "Gemm" else 1.0
        self.beta = float(attrs.get("beta", 1.0)) if op == "Gemm" else 0.0
        self.trans = (bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))) if op == "Gemm" else (False, False)

    def accepts_strided(self, port: int) -> bool:
        return port < 2

    def wants_unit_columns(self, port: int, dtype: str) -> bool:
        return port == 1 and not self.trans[1] and gemm.reads_b_in_place(dtype, self.alpha)

    def bind(self, ctx: BindContext) -> Bound:
        prod = Product(ctx, *self.trans, self.alpha, fold=True)
        out = V(ctx.outputs[0])
        tail = []
        if self.op == "Gemm" and len(ctx.inputs) > 2 and ctx.in_types[2] is not None and self.beta != 0.0:
            c = ctx.const(2) if ctx.const(2) is not None else V(ctx.inputs[2])
            tail = [Call(gemm_tail, (out, c, self.beta))]
        fallback = [Call(numpy_product, (prod.a, prod.b, out, prod.alpha, *prod.views))] + tail
        if not ctx.options.jit_enabled:
            return Bound(fallback, note="numpy matmul (jit='off')", blas=True)
        types = prod.types()
        args = (prod.offs, prod.alpha, prod.cols, prod.packed, prod.nparts, *prod.views)
        if prod.promoted is not None:
            native = Call(promoted_product, (prod.a, prod.b, out, prod.promoted) + args)
        elif prod.nparts == 1 and not any(prod.views):   # the serial driver itself: two Python calls fewer
            native = Call(gemm.matmul_serial, (prod.a, prod.b, out, prod.offs, prod.alpha, prod.packed))
        else:
            native = Call(product, (prod.a, prod.b, out) + args)
        request = KernelRequest("product", lambda alias: compile_product(types, prod.nparts),
                                lambda kernel, alias: [native] + tail)
        return Bound(fallback, mode="native", note=prod.note, request=request, blas=True)


# ---------------------------------------------------------------------------- epilogue groups
GEMM_PART = Contraction("tlc.kernels.gemm", "gemm_part", before=2, after=4)


class EpilogueImpl(StepImpl):
    """A contraction with elementwise work after it (see the module docstring)."""

    mode = "native"
    reason = "contraction in parts, epilogue on each part"

    def __init__(self, body: Graph):
        self.body = body
        try:
            self.contraction_body, self.elementwise = split_epilogue(body)
        except CompileError as exc:
            raise NotNative(str(exc)) from None
        self.head = self.contraction_body.ops()[0]
        self.head_attrs = opdef_of(self.head).resolved_attrs(self.head)
        index = {n.name: i for i, n in enumerate(body.inputs)}
        self.c_sources = [None if v is None else self._source(v, index)
                          for v in self.contraction_body.inputs_of(self.head)]
        self.ew_sources = [index[n.name] for n in self.elementwise.inputs[1:]]

    def _source(self, v, index) -> tuple[str, Any]:
        node = self.contraction_body.node(v)
        return ("const", self.contraction_body.const_value(v)) if node.op == "Constant" else ("in", index[node.name])

    @property
    def is_product(self) -> bool:
        return self.head.domain == "" and self.head.op in ("MatMul", "Gemm")

    def accepts_strided(self, port: int) -> bool:
        return self.is_product and port not in self.ew_sources and ("in", port) in self.c_sources[:2]

    def wants_unit_columns(self, port: int, dtype: str) -> bool:
        trans_b = bool(self.head_attrs.get("transB", 0)) if self.head.op == "Gemm" else False
        alpha = float(self.head_attrs.get("alpha", 1.0)) if self.head.op == "Gemm" else 1.0
        return self.is_product and len(self.c_sources) > 1 and self.c_sources[1] == ("in", port) and not trans_b \
            and gemm.reads_b_in_place(dtype, alpha)

    def typed_epilogue(self, ctx: BindContext) -> tuple[Graph, list[TensorType]]:
        """The group's elementwise part typed for this step's shapes (the body cut the same way), and the types
        of its inputs (the contraction's result first); NotNative when they are not static."""
        ctx.in_shapes()
        try:
            elementwise = split_epilogue(typed_body(self.body, list(ctx.in_types)))[1]
        except CompileError as exc:
            raise NotNative(str(exc)) from None
        ew_types = [n.output_types[0] for n in elementwise.inputs]
        if not all(t.is_static for t in ew_types):
            raise NotNative("the epilogue's shapes are not static")
        return elementwise, ew_types

    def bind(self, ctx: BindContext) -> Bound:
        elementwise, ew_types = self.typed_epilogue(ctx)
        sub = contraction_context(ctx, self.c_sources)
        out0 = ctx.out_types[0]
        acc_type = sub.out_types[0] = ew_types[0]
        in_place = (len(ctx.outputs) == 1 and tuple(out0.shape) == tuple(acc_type.shape)
                    and out0.dtype == acc_type.dtype)
        scratch = Scratch()
        acc = (V(ctx.outputs[0]), F(ctx.outputs[0])) if in_place else scratch_pair(scratch, acc_type)
        copies, ew_refs = flat_inputs(ctx, self.ew_sources, scratch)
        if not ctx.options.jit_enabled:
            return Bound(fallback_calls(ctx), mode="reference", note="jit='off'", workspace=scratch.shapes, blas=True)
        if self.is_product:
            return self._product(ctx, sub, elementwise, ew_types, acc, in_place, scratch, copies, ew_refs)
        if self.head.qualified_op == "Conv":
            absorbed = self._absorbed(ctx, sub, elementwise, ew_types)
            if absorbed is not None:
                return absorbed
            try:
                setup = ConvSetup(sub, self.head_attrs, with_bias=False, epilogue=True)
            except NotNative:
                setup = None
            if setup is not None:
                return self._conv(ctx, setup, elementwise, ew_types, acc, in_place, scratch, copies, ew_refs)
        make_head = CONV_HEADS.get(self.head.qualified_op)
        if make_head is None:
            raise NotNative(f"no native contraction for {self.head.qualified_op}")
        conv = make_head(self.head_attrs).bind_into(sub, acc[0], scratch.shapes)
        out_refs = [F(o) for o in ctx.outputs]
        alias = (0 if in_place else -1,) + (-1,) * (len(out_refs) - 1)
        ew = kernel_request(ctx, elementwise, "elementwise", ew_types, [acc[1]] + ew_refs, out_refs,
                            "epilogue kernel", fixed_alias=alias)
        build_conv = conv.request.build if conv.request else (lambda alias: None)

        def build(alias):
            return build_conv(None), ew.build(None)

        def calls(kernels, alias):
            conv_calls = conv.request.calls(kernels[0], None) if conv.request else conv.calls
            return conv_calls + copies + ew.calls(kernels[1], None)

        return Bound(fallback_calls(ctx), mode="native", note=f"{conv.note} + epilogue kernel",
                     workspace=scratch.shapes, request=KernelRequest("conv epilogue", build, calls), blas=True)

    def bias_and_clamp(self, ctx: BindContext, elementwise: Graph, ew_types: list,
                       residual: bool = False) -> tuple | None:
        """(the constant per-channel bias as float32, or None; the clamp's bounds, or None; the group's input port
        of a residual added, or None - only looked for where ``residual``) where the group is a float32 2-D conv
        whose epilogue is no more than those (``clamp_epilogue``); else None."""
        if len(ctx.outputs) != 1 or ew_types[0].dtype != "float32" or len(ew_types[0].shape) != 4:
            return None
        found = clamp_epilogue(elementwise, ew_types[0].shape[1], residual)
        if found is None:
            return None
        bias_input, residual_input, bounds = found
        bias = None
        if bias_input is not None:
            value = ctx.const(self.ew_sources[bias_input - 1])
            if value is None:
                return None
            bias = np.ascontiguousarray(np.asarray(value, np.float32).reshape(-1))
        port = None if residual_input is None else self.ew_sources[residual_input - 1]
        if port is not None and (ctx.const(port) is not None or not ctx.contiguous(port)):
            return None
        return bias, bounds, port

    def _absorbed(self, ctx: BindContext, sub: BindContext, elementwise: Graph, ew_types: list) -> Bound | None:
        """The group as one conv whose kernel adds the bias (and a residual: ``kconv.accumulates``) and clamps as
        it stores, where the epilogue is no more than that (``clamp_epilogue``) and the cost model picks a kernel
        that does (``kconv.clamps``); else None."""
        found = self.bias_and_clamp(ctx, elementwise, ew_types, residual=True)
        if found is None:
            return None
        bias, bounds, residual = found
        try:
            setup = ConvSetup(sub, self.head_attrs, with_bias=False, bias=bias, clamp=bounds)
        except NotNative:   # among them: no kernel that clamps as it stores (refused before the weights are packed)
            return None
        if residual is not None:   # (read as the conv's input too, it would be overwritten while read)
            if not kconv.accumulates(setup.geo) or ctx.inputs[residual] in sub.inputs:
                return None
            kconv.set_accumulate(setup.geo)
        work: list = []
        what = [w for w, present in (("bias", bias is not None), ("the residual", residual is not None),
                                     (self.elementwise.ops()[-1].op, bounds is not None)) if present]
        bound = conv_bound(setup, V(ctx.outputs[0]), work, fallback_calls(ctx),
                           f"Conv: {setup.note}, {' and '.join(what)} applied as the kernel stores")
        bound.workspace, bound.blas = work, True
        if residual is not None:   # the kernel adds the output's values: the residual, in place or copied there
            request, out, res = bound.request, V(ctx.outputs[0]), V(ctx.inputs[residual])
            # in place where the residual dies here: only its port may give the output its slot (a 16 -> 16
            # conv's own input, of the output's type too, would be overwritten while the kernel reads it)
            bound.inplace, bound.donors = True, (residual,)

            def calls(kernel, alias):
                taken = alias is not None and alias[0] == residual
                return ([] if taken else [Call(np.copyto, (out, res))]) + request.calls(kernel, alias)

            bound.request = KernelRequest(request.name, request.build, calls)
        return bound

    def _conv(self, ctx, setup, elementwise, ew_types, acc, in_place, scratch, copies, ew_refs) -> Bound:
        if setup.out_shape != tuple(ew_types[0].shape):
            raise NotNative("the conv's shape differs from the epilogue's")
        plan = build_plan(elementwise, "elementwise")
        total = int(np.prod(setup.out_shape))
        ew_shapes = [tuple(t.shape) for t in ew_types]
        col = W(scratch.add((setup.col_size,), setup.dtype))
        types = setup.types()
        options, cache = kernel_options(ctx), kernel_cache(ctx)

        def build(alias):
            kconv.ensure_entries(setup.geo, setup.dtype)   # the module calls the part by address
            kernel = EpilogueKernel(plan, options, cache, conv_contraction(setup.geo), types, setup.parallel,
                                    alias=(0,) if in_place else None)
            const_shapes = [c.shape for c in kernel.constant_arrays]
            kernel.dims = np.asarray(kernel.layout.dims(setup.out_shape, ew_shapes + const_shapes), np.int64)
            return kernel

        def calls(kernel, alias):
            outs = () if in_place else tuple(F(o) for o in ctx.outputs)
            args = (kernel.dims, total, setup.nparts, setup.nprep, kconv.deferred(setup.geo),
                    *setup.args(acc[0], col), acc[1], *ew_refs, *kernel.constant_arrays, *outs)
            return copies + [Call(*kernel.call(args))]

        return Bound(fallback_calls(ctx), mode="native", note=f"Conv: {setup.note} + epilogue per part",
                     workspace=scratch.shapes, request=KernelRequest("conv epilogue", build, calls), blas=True)

    def _product(self, ctx, sub, elementwise, ew_types, acc, in_place, scratch, copies, ew_refs) -> Bound:
        attrs = self.head_attrs
        is_gemm = self.head.op == "Gemm"
        trans = (bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))) if is_gemm else (False, False)
        prod = Product(sub, *trans, float(attrs.get("alpha", 1.0)) if is_gemm else 1.0)
        if prod.out_shape != tuple(ew_types[0].shape):
            raise NotNative("the product's shape differs from the epilogue's")
        plan = build_plan(elementwise, "elementwise")
        types = prod.types()
        total = int(np.prod(prod.out_shape))
        ew_shapes = [tuple(t.shape) for t in ew_types]
        options, cache = kernel_options(ctx), kernel_cache(ctx)

        def build(alias):
            kernel = EpilogueKernel(plan, options, cache, GEMM_PART, types, prod.nparts > 1,
                                    alias=(0,) if in_place else None)
            const_shapes = [c.shape for c in kernel.constant_arrays]
            kernel.dims = np.asarray(kernel.layout.dims(prod.out_shape, ew_shapes + const_shapes), np.int64)
            return kernel

        def calls(kernel, alias):
            outs = () if in_place else tuple(F(o) for o in ctx.outputs)
            args = (kernel.dims, total, prod.nparts, 0, prod.cols, prod.a, prod.b, acc[0], prod.offs, prod.alpha,
                    prod.cols, prod.packed, acc[1], *ew_refs, *kernel.constant_arrays, *outs)
            fn, full = kernel.call(args)
            if any(prod.views):
                head = len(full) - len(args)
                return copies + [Call(transposed_call, (fn, prod.views, full[:head]) + args)]
            return copies + [Call(fn, full)]

        return Bound(fallback_calls(ctx), mode="native", note=f"{self.head.op}: {prod.note} + epilogue",
                     workspace=scratch.shapes, request=KernelRequest("epilogue", build, calls), blas=True)


def clamp_epilogue(elementwise: Graph, channels: int, residual: bool = False) -> tuple | None:
    """(the elementwise input added first as a per-channel bias, or None; the input of the conv's full shape added
    next as a residual, or None - only where ``residual``; the bounds of a Relu or of a Clip with constant bounds
    after them, or None) where a conv's epilogue is no more than those three, the work ``tlc.kernels.panel``'s
    kernels do as they store; None for any other epilogue."""
    ops = elementwise.ops()
    current = Value(elementwise.inputs[0].id, 0)
    full = tuple(elementwise.inputs[0].output_types[0].shape)
    inputs = [n.id for n in elementwise.inputs]
    bias_input = residual_input = None

    def added(node, shapes) -> int | None:   # the other operand of an Add of ``current``: an input of these shapes
        if node.domain != "" or node.op != "Add":
            return None
        a, b = elementwise.inputs_of(node)
        other = b if a == current else a if b == current else None
        if other is None or other.port != 0:
            return None
        source = elementwise.node(other.node)
        if source.op != "Input" or tuple(source.output_types[0].shape) not in shapes:
            return None
        return inputs.index(source.id)

    if ops:
        bias_input = added(ops[0], ((channels, 1, 1), (1, channels, 1, 1)))
        if bias_input is not None:
            current, ops = Value(ops[0].id, 0), ops[1:]
    if ops and residual:
        residual_input = added(ops[0], (full,))
        if residual_input is not None:
            current, ops = Value(ops[0].id, 0), ops[1:]
    if len(ops) > 1:
        return None
    bounds = None
    if ops:
        node, ins = ops[0], elementwise.inputs_of(ops[0])
        if node.domain != "" or not ins or ins[0] != current:
            return None
        if node.op == "Relu":
            bounds = (0.0, math.inf)
        elif node.op == "Clip":
            limits = [node.attrs.get("min", -math.inf), node.attrs.get("max", math.inf)]   # Clip-6's attributes
            for k, port in enumerate((1, 2)):
                if port < len(ins) and ins[port] is not None:
                    value = elementwise.const_value(ins[port])
                    if value is None or np.asarray(value).size != 1:
                        return None
                    limits[k] = float(np.asarray(value).reshape(()))
            bounds = (limits[0], limits[1])
        else:
            return None
    if bias_input is None and residual_input is None and bounds is None:
        return None
    return bias_input, residual_input, bounds


def scratch_pair(scratch: Scratch, t: TensorType) -> tuple[Ref, Ref]:
    k = scratch.add(tuple(t.shape), np_dtype(t.dtype))
    return W(k), FW(k)


def transposed_call(fn, views, head, dims, total, nparts, nprep, deferred, a, b, *rest) -> None:
    """``fn(*head, <the epilogue kernel's arguments>)`` with the product's A and B oriented at run time."""
    fn(*head, dims, total, nparts, nprep, deferred, oriented(a, views[0]), oriented(b, views[1]), *rest)


def contraction_context(ctx: BindContext, sources: list) -> BindContext:
    """``ctx`` seen from an epilogue group's contraction: its input ports mapped to the group's, constants of the
    contraction body known under ids of their own (negative, never a value of the plan)."""
    inputs, types, known = [], [], dict(ctx.known)
    for k, s in enumerate(sources):
        if s is not None and s[0] == "in":
            inputs.append(ctx.inputs[s[1]])
            types.append(ctx.in_types[s[1]])
        else:
            inputs.append(-1 - k)
            types.append(None if s is None else TensorType.of(s[1]))
            if s is not None:
                known[-1 - k] = s[1]
    return BindContext(ctx.node, ctx.attrs, tuple(inputs), ctx.outputs, types, list(ctx.out_types), known,
                       ctx.strides, ctx.options, ctx.run_node)


# ---------------------------------------------------------------------------- chains
#: the value id under which a chain's two groups see the expanded tensor between them (never a plan's value:
#: their calls' references to it are turned into the chain's scratch)
_BETWEEN = -(1 << 40)
#: an expanded tensor of at least this many bytes an image goes through the banded kernel; a smaller one stays in
#: L3 between the two convs, where the bands only add calls (MobileNetV2 at batch 1, 2 threads, every chain of
#: 14x14 or wider banded: 5.47 / 5.11 ms against 4.99 / 4.55 run in turn; only its 4.8 MB one: 4.61 / 4.38
#: against 4.76 / 4.53)
CHAIN_MIN_BYTES = 4 << 20


class ChainImpl(StepImpl):
    """A ``chain`` group (``tlc.passes.fuse``): a 1x1 expansion conv's epilogue group and the 3x3 depthwise conv's
    group it feeds. Both absorbable (a constant bias and a clamp at most, float32, the panel kernels fast) and the
    expanded tensor large: ``tlc.kernels.chain``'s bands; else the two groups' own steps one after the other,
    the expanded tensor in the step's scratch."""

    mode = "native"
    reason = "expansion and depthwise convs in bands of rows"

    def __init__(self, body: Graph):
        ops = body.ops()
        if len(ops) != 2 or any(n.op != "Fused" or n.attrs.get("kind") != "epilogue" for n in ops):
            raise NotNative("a chain holds two epilogue groups")
        self.nodes = ops
        self.groups = [EpilogueImpl(n.attrs["body"]) for n in ops]
        index = {n.id: i for i, n in enumerate(body.inputs)}
        # per group, per input port: ("in", chain port) or ("between",): the expanded tensor
        self.sources = []
        for node in ops:
            sources = []
            for v in body.inputs_of(node):
                if v is None:
                    sources.append(None)
                elif v.node == ops[0].id:
                    sources.append(("between",))
                elif v.node in index:
                    sources.append(("in", index[v.node]))
                else:   # (the fuse pass chains no group with a scalar constant input: the body would hold it)
                    raise NotNative("a chain's group reads a constant of the chain's body")
            self.sources.append(sources)

    def _context(self, ctx: BindContext, g: int, between: TensorType | None) -> BindContext:
        inputs, types = [], []
        for k, s in enumerate(self.sources[g]):
            if s is None:
                inputs.append(-2 - k)
                types.append(None)
            elif s[0] == "in":
                inputs.append(ctx.inputs[s[1]])
                types.append(ctx.in_types[s[1]])
            else:
                inputs.append(_BETWEEN)
                types.append(between)
        outputs, out_types = ((_BETWEEN,), [between]) if g == 0 else (ctx.outputs, list(ctx.out_types))
        node = self.nodes[g]
        return BindContext(node, opdef_of(node).resolved_attrs(node), tuple(inputs), outputs, types, out_types,
                           ctx.known, ctx.strides, ctx.options, ctx.run_node)

    def bind(self, ctx: BindContext) -> Bound:
        ctx.in_shapes()
        if not ctx.options.jit_enabled:
            return Bound(fallback_calls(ctx), mode="reference", note="jit='off'")
        first = self._context(ctx, 0, None)
        ew1, ew_types1 = self.groups[0].typed_epilogue(first)
        between = ew_types1[0]
        first.out_types[0] = between
        second = self._context(ctx, 1, between)
        banded = self._banded(ctx, (first, second), (ew1, ew_types1), between)
        if banded is not None:
            return banded
        return self._in_turn(ctx, (first, second), between)

    def _banded(self, ctx: BindContext, contexts, typed, between: TensorType) -> Bound | None:
        """The chain in bands (``tlc.kernels.chain``), where it applies; else None."""
        first, second = contexts
        if self.sources[0][0] is None or self.sources[0][0][0] != "in":
            return None
        x_shape = tuple(first.in_types[0].shape) if first.in_types[0] is not None else ()
        if len(x_shape) != 4 or between.dtype != "float32" or not panel.fast() or not first.contiguous(0) \
                or np.prod(between.shape[1:]) * 4 < CHAIN_MIN_BYTES:
            return None
        parts = []
        for g, c in enumerate(contexts):
            ew, ew_types = typed if g == 0 else self.groups[1].typed_epilogue(c)
            found = self.groups[g].bias_and_clamp(c, ew, ew_types)
            sub = contraction_context(c, self.groups[g].c_sources)
            weights = sub.const(1)
            if found is None or weights is None or np.asarray(weights).dtype != np.float32:
                return None
            parts.append((np.asarray(weights), *found[:2]))   # (no residual: not looked for)
        (w1, b1, bounds1), (wd, bd, bounds2) = parts
        n, cexp, h, width = between.shape
        out = tuple(ctx.out_types[0].shape)
        stride = int((self.groups[1].head_attrs.get("strides") or [1, 1])[0])
        if out != (n, cexp, (h - 1) // stride + 1, (width - 1) // stride + 1) or width <= panel.LANES // 2:
            return None

        def vector(v, size):
            return np.zeros(size, np.float32) if v is None else np.ascontiguousarray(v, np.float32).reshape(-1)

        def bounds(v):
            return np.zeros(0, np.float32) if v is None else np.asarray(v, np.float32)

        band = kchain.band_rows(cexp, width, stride, out[2])
        nparts = kchain.parts(n * -(-out[2] // band), ctx.threads)
        args = (np.ascontiguousarray(w1.reshape(cexp, -1)), vector(b1, cexp), bounds(bounds1),
                np.ascontiguousarray(wd.reshape(cexp, 9)), vector(bd, cexp), bounds(bounds2))
        scratch = [((nparts * kchain.scratch_elements(cexp, width, stride, band),), np.dtype(np.float32))]
        native = [Call(kchain.chain_run, (V(ctx.inputs[self.sources[0][0][1]]), *args, V(ctx.outputs[0]), W(0),
                                          band, stride, nparts))]

        def build(alias):
            kchain.compile_for(nparts)
            return "chain"

        return Bound(fallback_calls(ctx), mode="native", workspace=scratch, blas=False,
                     note=f"Conv 1x1 -> depthwise 3x3 in bands of {band} output rows, {nparts} part(s)",
                     request=KernelRequest("conv chain", build, lambda kernel, alias: native))

    def _in_turn(self, ctx: BindContext, contexts, between: TensorType) -> Bound:
        """The two groups' own steps one after the other, the expanded tensor in the step's scratch."""
        work = [(tuple(between.shape), np_dtype(between.dtype))]
        bounds = [impl.bind(c) for impl, c in zip(self.groups, contexts)]
        offsets = [1, 1 + len(bounds[0].workspace)]
        for b in bounds:
            work += list(b.workspace)

        def remap(calls: list[Call], g: int) -> list[Call]:
            def ref(a):
                if not isinstance(a, Ref):
                    return a
                if a.index == _BETWEEN and a.kind in ("v", "f"):
                    return W(0) if a.kind == "v" else FW(0)
                if a.kind in ("w", "fw"):
                    return Ref(a.kind, a.index + offsets[g])
                return a
            return [c._replace(args=tuple(ref(a) for a in c.args),
                               kwargs=None if c.kwargs is None else {k: ref(v) for k, v in c.kwargs.items()})
                    for c in calls]

        # (a bound without a request runs its calls: native ones, writing into the arrays they are given)
        if any(b.request is None and (b.mode != "native" or any(c.result for c in b.calls)) for b in bounds):
            raise NotNative("a group of the chain runs no native step")

        def build(alias):
            return [b.request.build(None) if b.request is not None else None for b in bounds]

        def calls(kernels, alias):
            out = []
            for g, (b, k) in enumerate(zip(bounds, kernels)):
                out += remap(b.request.calls(k, None) if b.request is not None else b.calls, g)
            return out

        return Bound(fallback_calls(ctx), mode="native", workspace=work, blas=any(b.blas for b in bounds),
                     note=f"{bounds[0].note}; then {bounds[1].note}",
                     request=KernelRequest("conv chain", build, calls))


# ---------------------------------------------------------------------------- convolution
def conv_contraction(geo: np.ndarray) -> Contraction:
    """The conv family's contraction for an epilogue module: the chosen algorithm's part function only."""
    algo = int(geo[kconv.ALGO])
    prepare = kconv.PREPARE_FUNCTIONS.get(algo)
    return Contraction("tlc.kernels.conv", kconv.PART_FUNCTIONS[algo], before=4, after=1, prepare=prepare)


class ConvSetup:
    """One 2-D NCHW convolution bound for ``tlc.kernels.conv``: its geometry with the algorithm the cost model
    chose, weights packed once for it, the bias (``with_bias``: the conv's own; else none), the im2col buffer's
    size and how the work is cut into parts (an ``epilogue`` follows each part: ``kconv.plan_conv``), and whether
    they run on the pool. NotNative when the family cannot run it (the numpy library can)."""

    def __init__(self, ctx: BindContext, attrs: dict[str, Any], with_bias: bool = True, epilogue: bool = False,
                 bias: np.ndarray | None = None, clamp: tuple[float, float] | None = None):
        x, w, *_ = ctx.in_shapes()
        y = tuple(ctx.out_types[0].shape)
        self.dtype = np_dtype(ctx.in_types[0].dtype)
        if len(x) != 4:
            raise NotNative(f"only 2-D convolutions are native (input rank {len(x)})")
        if not ctx.options.jit_enabled:
            raise NotNative("jit='off'")
        if self.dtype not in (np.float32, np.float64) or not blas.AVAILABLE:
            raise NotNative(f"no native conv for {self.dtype}" if blas.AVAILABLE else f"BLAS: {blas.REASON}")
        if not ctx.contiguous(0):
            raise NotNative("a strided conv input")
        weights = ctx.const(1)
        if weights is None and not ctx.contiguous(1):
            raise NotNative("strided conv weights")
        window, begin, _ = spatial_window(attrs, w[2:], x[2:])
        self.geo = kconv.conv_geometry(x, w, y, window.strides, begin, window.dilations,
                                       int(attrs.get("group", 1)))
        # the panel kernel: float32, weights packed once, a host that runs it fast
        algo = kconv.choose(self.geo, panels=weights is not None and self.dtype == np.float32 and panel.fast(),
                            winograd=ctx.options.winograd != "off")
        if weights is None and algo in (kconv.DIRECT, kconv.WINOGRAD):   # weights fed at run time: the
            algo = kconv.GEMM                                              # algorithm that reads them unpacked
        self.col_size, self.nparts, self.nprep = kconv.plan_conv(
            self.geo, ctx.threads, algo, epilogue=epilogue, tile=2 if ctx.options.winograd == "2x2" else None)
        kconv.use_vector_depthwise(self.geo, self.dtype)
        in_panels = kconv.use_panel_products(self.geo, self.dtype)
        if clamp is not None:   # an epilogue the kernel takes over (``EpilogueImpl._absorbed``)
            if not kconv.clamps(self.geo):
                raise NotNative(f"{kconv.ALGO_NAMES[self.geo[kconv.ALGO]]} does not clamp as it stores")
            kconv.set_clamp(self.geo, *clamp)
        # parts on the pool (else in order on the calling thread): several parts, and work worth a region
        self.parallel = self.nparts > 1 and kconv.parallel(self.geo, ctx.threads)
        self.weights: Any = F(ctx.inputs[1]) if weights is None else \
            kconv.pack_weights(np.asarray(weights, self.dtype), self.geo)
        self.w_size = int(np.prod(w))
        # C-contiguous operands only: the family's parts get them by address (``tlc.kernels.entries``)
        self.x = np.ascontiguousarray(ctx.const(0)) if ctx.const(0) is not None else V(ctx.inputs[0])
        self.bias: Any = np.zeros(0, self.dtype) if bias is None else bias   # given: an absorbed epilogue's
        if with_bias and len(ctx.inputs) > 2 and ctx.in_types[2] is not None:
            own = ctx.const(2)
            if own is None and not ctx.contiguous(2):
                raise NotNative("a strided conv bias")
            self.bias = np.ascontiguousarray(own, self.dtype) if own is not None else V(ctx.inputs[2])
        self.out_shape = y
        algo = kconv.ALGO_NAMES[self.geo[kconv.ALGO]]
        if self.geo[kconv.ALGO] == kconv.WINOGRAD:
            algo += " F({0}x{0}, 3x3)".format(int(self.geo[kconv.WT]))
        algo += " (panel products)" if in_panels else ""
        self.note = f"{algo}, {self.nparts} part(s)" if self.nparts > 1 else algo
        if self.nparts > 1 and not self.parallel:
            self.note += " on this thread"

    def types(self) -> tuple:
        """Numba types of (x, w, bias, geo, acc, col) as the family's functions get them."""
        def typed(value, shape):
            return numba.typeof(value) if isinstance(value, np.ndarray) else numba_type(shape, None, self.dtype)

        x = typed(self.x, tuple(self.geo[:4]))
        vec = numba_type((1,), None, self.dtype)
        bias = typed(self.bias, (1,))
        return (x, typed(self.weights, (self.w_size,)), bias, numba.typeof(self.geo),
                numba_type(self.out_shape, None, self.dtype), vec)

    def args(self, acc: Ref, col: Ref) -> tuple:
        return (self.x, self.weights, self.bias, self.geo, acc, col)


def compile_conv(types: tuple, geo: np.ndarray, parallel: bool) -> str:
    """Compile (or load) the conv family's driver of ``geo``'s algorithm for these argument types."""
    i64 = numba.types.int64
    kconv.ensure_entries(geo, types[0].dtype)
    if parallel:
        kconv.parallel_driver(geo).compile(types + (i64,))
    else:
        kconv.part_function(geo).compile(types + (i64, i64))
    prepare = kconv.parallel_prepare(geo) if parallel else kconv.prepare_function(geo)
    if prepare is not None:
        prepare.compile(types[:4] + (types[5], i64) + (() if parallel else (i64,)))
    return "conv"


def conv_bound(setup: ConvSetup, out: Ref, work: list, fallback: list[Call], note: str) -> Bound:
    """The conv family's run of ``setup`` into ``out`` (its im2col buffer appended to ``work``)."""
    work.append(((setup.col_size,), setup.dtype))
    col = W(len(work) - 1)
    parallel = setup.parallel
    # the family's compiled functions called directly, each a Call the runner binds to its entry point for these
    # argument types (a Python driver between them cost a dispatcher's type resolution per call: ~3 us a call
    # where the run's other steps had left it cold)
    args = setup.args(out, col)
    prep_args = args[:4] + args[5:]   # the preparation takes no output
    native = [Call(fn, (args if with_out else prep_args) + tail)
              for fn, with_out, tail in kconv.run_calls(setup.geo, parallel, setup.nparts, setup.nprep)]
    types = setup.types()
    return Bound(fallback, mode="native", note=note,
                 request=KernelRequest("conv", lambda alias: compile_conv(types, setup.geo, parallel),
                                       lambda kern, alias: native))


class ConvImpl(StepImpl):
    """2-D convolution: the conv family's kernels (``tlc.kernels.conv``: im2col + BLAS, direct, depthwise) in
    parts; numpy's im2col + BLAS where the family cannot run it (JIT off, other dtypes, runtime weights)."""

    mode = "native"
    reason = "conv family: im2col + BLAS, direct or depthwise, in parts"

    def __init__(self, attrs: dict[str, Any]):
        self.attrs = attrs

    def bind(self, ctx: BindContext) -> Bound:
        work: list = []
        bound = self.bind_into(ctx, V(ctx.outputs[0]), work)
        bound.workspace, bound.blas = work, True
        return bound

    def bind_into(self, ctx: BindContext, out: Ref, work: list) -> Bound:
        """The conv of ``ctx``'s inputs (with its bias) into ``out``; its scratch appended to ``work``."""
        fallback, note = self._numpy(ctx, out, work)
        try:
            setup = ConvSetup(ctx, self.attrs)
        except NotNative as exc:
            return Bound(fallback, note=f"{note} (numpy): {exc}")
        return conv_bound(setup, out, work, fallback, setup.note)

    def _numpy(self, ctx: BindContext, out: Ref, work: list) -> tuple[list[Call], str]:
        """The library's numpy convolution (the fallback while the family's kernel compiles)."""
        x, w, *_ = ctx.in_shapes()
        y = tuple(ctx.out_types[0].shape)
        if len(x) != 4:
            raise NotNative(f"only 2-D convolutions are native (input rank {len(x)})")
        if not ctx.contiguous(0):
            raise NotNative("a strided conv input")
        window, begin, _ = spatial_window(self.attrs, w[2:], x[2:])
        geo = lib_conv.geometry(x, w, y, window.strides, begin, window.dilations, int(self.attrs.get("group", 1)))
        algo = lib_conv.choose_algorithm(geo, allow_numba=False)
        dtype = np_dtype(ctx.in_types[0].dtype)
        first = len(work)
        work += [(tuple(s), dtype) for s in lib_conv.workspace(geo, algo)]
        refs = tuple(W(k) for k in range(first, len(work)))
        xin = ctx.const(0) if ctx.const(0) is not None else V(ctx.inputs[0])
        weight = ctx.const(1) if ctx.const(1) is not None else V(ctx.inputs[1])
        bias = None
        if len(ctx.inputs) > 2 and ctx.in_types[2] is not None:
            bias = ctx.const(2) if ctx.const(2) is not None else V(ctx.inputs[2])
        return [Call(conv_numpy, (algo, xin, weight, bias, out, geo) + refs)], algo


#: contractions an epilogue group runs before its elementwise kernel, in two passes: channels-last, and the NCHW
#: Conv where the conv family cannot run it (elsewhere it runs its epilogue per part: ``EpilogueImpl._conv``)
CONV_HEADS = {"Conv": ConvImpl, "tlc.ConvNhwc": ConvNhwcImpl}


def conv_numpy(algo, x, w, b, out, geo, *work) -> None:
    lib_conv.run(algo, x, w, b, out, geo, list(work))
