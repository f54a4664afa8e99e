"""``CompileOptions``: every option of ``tlc.compile`` in one object, validated once and passed down.

Environment variables are read in one place, ``CompileOptions.from_env`` (called by ``tlc.compile`` for the
options the caller left unset): ``TLC_CACHE_DIR`` (kernel cache directory) and ``TLC_NUM_THREADS``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TlcError
from ..targets import Target, get

JIT_MODES = ("auto", "eager", "lazy", "off")
WINOGRAD_MODES = ("auto", "2x2", "off")


@dataclass(frozen=True)
class CompileOptions:
    """How a graph is optimized, lowered and executed.

    ``jit``: "auto" starts every native kernel's compile on the JIT thread and runs the steps' fallbacks (numpy,
    the reference) until each arrives (from a warm cache in milliseconds); "eager" compiles every kernel in
    ``compile()``; "lazy" starts compiling once a plan has run ``hot_threshold`` times; "off" runs numpy and
    reference steps only. ``num_threads`` (None = all cores) is the size of the one pool (Numba's) that runs
    every parallel step; BLAS runs single-threaded inside it. ``target``: a name or a ``tlc.targets.Target``,
    resolved here to the object (an unknown name is a ``BackendError`` naming the known ones). ``winograd``: how
    3x3 stride-1 convolutions may run as Winograd products: "auto" F(2x2, 3x3) or F(4x4, 3x3), whichever the
    cost model finds faster (F(4x4): about 10x F(2x2)'s rounding error, relative to the largest input of a 6x6
    tile rather than to each output), "2x2" F(2x2) only, "off" none (im2col, panel or direct sums).
    """

    target: Target | str = "cpu"
    opt_level: int = 2
    jit: str = "auto"
    num_threads: int | None = None
    passes: str | tuple[str, ...] | None = None
    fast_math: bool = False
    hot_threshold: int = 5
    cache_dir: str | None = None
    max_specializations: int = 8     # input-shape signatures whose plans are kept (LRU)
    winograd: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", get(self.target))
        if self.jit not in JIT_MODES:
            raise TlcError(f"jit must be one of {', '.join(JIT_MODES)}; got {self.jit!r}")
        if not (isinstance(self.opt_level, int) and 0 <= self.opt_level <= 3):
            raise TlcError(f"opt_level must be 0, 1, 2 or 3; got {self.opt_level!r}")
        if self.num_threads is not None and not (isinstance(self.num_threads, int) and self.num_threads >= 1):
            raise TlcError(f"num_threads must be a positive int or None (all cores); got {self.num_threads!r}")
        if not (isinstance(self.hot_threshold, int) and self.hot_threshold >= 1):
            raise TlcError(f"hot_threshold must be an int >= 1; got {self.hot_threshold!r}")
        if self.winograd not in WINOGRAD_MODES:
            raise TlcError(f"winograd must be one of {', '.join(WINOGRAD_MODES)}; got {self.winograd!r}")
        if self.max_specializations < 1:
            raise TlcError(f"max_specializations must be >= 1; got {self.max_specializations!r}")
        if isinstance(self.passes, list):
            object.__setattr__(self, "passes", tuple(self.passes))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: Any) -> CompileOptions:
        """Options from ``given``, with unset ``cache_dir``/``num_threads`` taken from the environment."""
        env = os.environ if environ is None else environ
        if given.get("cache_dir") is None and env.get("TLC_CACHE_DIR"):
            given["cache_dir"] = env["TLC_CACHE_DIR"]
        if given.get("num_threads") is None and env.get("TLC_NUM_THREADS"):
            try:
                given["num_threads"] = int(env["TLC_NUM_THREADS"])
            except ValueError:
                raise TlcError(f"TLC_NUM_THREADS must be an int; got {env['TLC_NUM_THREADS']!r}") from None
        unknown = set(given) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown compile option(s) {', '.join(sorted(unknown))}; known: "
                            f"{', '.join(f.name for f in dataclasses.fields(cls))}")
        return cls(**given)

    @property
    def jit_enabled(self) -> bool:
        return self.jit != "off"

    @property
    def threads(self) -> int:
        """The thread count in force: ``num_threads`` or every core."""
        return self.num_threads or (os.cpu_count() or 1)
