"""The CPU target: Numba kernels on the host (``tlc.kernels.cpu``), BLAS and tlc's library kernels, the runtime.

Its layout costs were fitted on the 2-core Xeon of FACTS.md with ``tools/layout_bench.py --fit`` (medians of 21
interleaved runs): copies 0.090/0.096 ns per element + 6.9/7.1 ns per run (1/2 threads), strided 0.24, ufunc
0.51/0.47 (0.33 in max pooling's taps), GEMM 88 GFLOP/s on 1 thread (2 threads were contended), direct
depthwise 1.17/0.61 ns per multiply-add, transposes 0.70 (to NHWC) and 3.2 (to NCHW) ns per element. Where the
thread count changes a constant, the one that favours NCHW is kept: the slow GEMM (a larger NCHW total makes the
relative margin harder to meet) and the 2-thread depthwise kernel (NHWC's taps: 1 thread).
"""

from __future__ import annotations

from .base import Target, TargetCosts, register

CPU = register(Target(
    name="cpu",
    description="Numba kernels on the host CPU (LLVM, prange over Numba's pool), BLAS and tlc's library kernels",
    dtypes=frozenset({"float32", "float64"}),
    group_kinds=("epilogue", "reduction", "elementwise", "chain"),
    rendered_kinds=("elementwise", "reduction"),
    provider="CPUExecutionProvider",
    device="CPU",
    memory="host",
    costs=TargetCosts(elem_ns=0.09, run_ns=7.0, strided_elem_ns=0.24, ufunc_elem_ns=0.45, gemm_gflops=88.0,
                      dw_direct_ns=0.61, to_nhwc_ns=0.7, to_nchw_ns=3.2, min_gain_us=500.0, rel_margin=0.06),
    kernel="tlc.kernels.kernel:Kernel",
    renderer="tlc.kernels.cpu:render_module",
    library="tlc.kernels.cpu:CPU_LIBRARY",
    ops="tlc.runtime.ops:CPU_OPS",
))
