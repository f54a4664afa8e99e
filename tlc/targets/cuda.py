"""The CUDA target: ``cuda.jit`` kernels of elementwise groups (grid-stride) and reduction groups (a block per
row) (``tlc.kernels.cuda``).

Its kernels' arrays live on the device (``memory="device"``): ``Kernel.entry`` launches on device arrays, and
calling a kernel with host arrays copies them to the device and back at each launch. The
runtime has no op table for it yet, so ``tlc.compile(..., target="cuda")`` is refused by name; its kernels are
reached through ``tlc.kernels.compile_group`` (tested under Numba's simulator, ``NUMBA_ENABLE_CUDASIM=1``). No
layout costs: the layout pass leaves its graphs in NCHW.
"""

from __future__ import annotations

import numpy as np

from ..errors import CompileError
from .base import Target, register


def _simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def _check_numba_cuda() -> None:
    """numba-cuda's array typing, which every kernel compiles with, must import with this numpy: numba-cuda
    0.30.4 registers ``np.row_stack``, which numpy 2.5 removed, and then fails at the first launch of any kernel
    (seen on an H200, 2026-11-26; the simulator never imports that module)."""
    import importlib

    try:
        importlib.import_module("numba.cuda.np.arrayobj")
    except ImportError:   # another numba-cuda's layout: nothing known to check
        return
    except AttributeError as exc:
        from importlib.metadata import PackageNotFoundError, version

        try:
            have = version("numba-cuda")
        except PackageNotFoundError:
            have = "?"
        raise CompileError(f"numba-cuda {have} cannot compile kernels with numpy {np.__version__} ({exc}); "
                           "install a numba-cuda release made for this numpy, or numpy < 2.5") from exc


def require_cuda() -> None:
    """numba-cuda installed, a device (or the simulator), and a numba-cuda that works with this numpy."""
    try:
        from numba import cuda
    except ImportError as exc:  # numba-cuda is an optional dependency
        raise CompileError(f"the cuda target needs the numba-cuda package: {exc}") from exc
    if not cuda.is_available():
        raise CompileError("the cuda target needs a CUDA device (or NUMBA_ENABLE_CUDASIM=1)")
    if not _simulated():
        _check_numba_cuda()


def cache_salt() -> str:
    """The device's compute capability and the CUDA toolkit's (driver runtime's) version, or the simulator's
    mark: kernels cached on one GPU or toolkit are not taken on another."""
    if _simulated():
        return "cuda=simulator"
    try:
        from numba import cuda

        cc = cuda.get_current_device().compute_capability
        runtime = cuda.runtime.get_version()
        return f"cc={cc[0]}.{cc[1]};toolkit={runtime[0]}.{runtime[1]}"
    except Exception as exc:   # noqa: BLE001 - no device to ask: a key of its own, never a cached GPU's
        return f"cuda=unknown ({type(exc).__name__})"


CUDA = register(Target(
    name="cuda",
    description="Numba CUDA kernels of elementwise and reduction groups on device arrays",
    dtypes=frozenset({"float32", "float64"}),
    group_kinds=("epilogue", "reduction", "elementwise"),
    rendered_kinds=("elementwise", "reduction"),
    provider="CUDAExecutionProvider",
    device="CUDA",
    memory="device",
    costs=None,
    kernel="tlc.kernels.cuda:CudaKernel",
    renderer="tlc.kernels.cuda:render_cuda_module",
    library="tlc.kernels.cuda:CUDA_LIBRARY",
    ops="tlc.runtime.cuda_ops:CUDA_OPS",
    check=require_cuda,
    cache_salt=cache_salt,
    arrays="tlc.runtime.device:CUDA_MEMORY",
))
