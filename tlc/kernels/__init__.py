"""Code generation for fused groups: a vectorizable math library, Numba CPU (and CUDA) kernels, and their cache.

The runtime calls ``compile_group(body, kind, input_types)`` for each ``tlc.Fused`` group and gets a ``Kernel``
it calls with input and output arrays, or a ``CompileError`` saying why the group stays on the reference path.
Layers: ``plan`` (analysis of a body, target-independent), ``layout`` and ``schedule`` (iteration space and
row passes), ``render``/``emit``/``common`` (what every renderer shares) with the renderers ``cpu`` and ``cuda``
(Numba source; ``tlc.targets`` says which renderer and kernel class a target uses), ``cache`` (memory and disk),
``mathlib``/``cudalib`` (the functions generated source calls), ``epilogue`` (contraction groups).
"""

from .cache import KernelCache, default_cache, default_cache_dir
from .epilogue import epilogue_inputs, split_epilogue
from .kernel import Kernel, KernelOptions, compile_group

__all__ = [
    "Kernel",
    "KernelCache",
    "KernelOptions",
    "compile_group",
    "default_cache",
    "default_cache_dir",
    "epilogue_inputs",
    "split_epilogue",
]
