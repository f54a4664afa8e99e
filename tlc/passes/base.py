"""``Pass``, ``PassResult``, ``PassOptions`` and the registry of passes by name.

A pass mutates the graph it is given, in place; the PassManager hands it the manager's own copy, so a caller's
graph never changes. ``name`` is the CLI name, the golden test file name (``tests/passes/<name>.tlc``) and
the dump label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from ..ir.graph import Graph
from ..targets import Target, get


class StepHook(Protocol):
    """Called after every rule application of the rewrite engine: ``hook(graph, pass_name, rule, node)``, with the
    graph the rule rewrote (a body's graph, inside an If or Loop) and the name of the root node it replaced."""

    def __call__(self, graph: Graph, pass_name: str, rule: str, node: str) -> None: ...


class StopPipeline(Exception):  # noqa: N818 - a signal, not an error
    """Raised by an instrument or step hook to end the pipeline at once; the PassManager lets it through as it
    is (never as a PassError), so the driver that raised it catches it (``tlc.passes.bisect``)."""


@dataclass
class PassOptions:
    """Options every pass may read (one object, passed down; no environment variables)."""

    opt_level: int = 2
    fast_math: bool = False            # allow rewrites that change rounding (reassociation, ...)
    fold_size_limit: int = 1 << 20     # folded results above this (elements) must be parameters: see fold.py
    #: the target whose kernels fusion (dtypes, group kinds) and the layout cost model assume: a name or a
    #: ``tlc.targets.Target``, resolved here to the object
    target: Target | str = "cpu"
    #: called after every rule application (``StepHook``); the PassManager installs one that calls its
    #: instruments' ``run_after_rule``. Passes that rewrite by rules hand it to ``apply_rules``.
    step_hook: StepHook | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.target = get(self.target)


@dataclass
class PassResult:
    """What a pass did: whether it changed the graph, and counters (``nodes_removed``, ``folded``, ...)."""

    changed: bool = False
    stats: dict[str, int] = field(default_factory=dict)

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to counter ``key``; a non-zero count means the graph changed."""
        self.stats[key] = self.stats.get(key, 0) + n
        if n:
            self.changed = True

    def note(self, key: str, n: int = 1) -> None:
        """Add ``n`` to an informational counter (e.g. ``skipped_too_large``) that is no change to the graph."""
        self.stats[key] = self.stats.get(key, 0) + n


class Pass:
    """Base class: subclasses set ``name``, ``min_level``, ``description`` and implement ``run``."""

    name: ClassVar[str] = ""
    min_level: ClassVar[int] = 1
    description: ClassVar[str] = ""

    def __init__(self, options: PassOptions | None = None):
        self.options = options or PassOptions()
        #: The node the pass is working on, kept current by passes that walk nodes, so that the PassManager
        #: can name it when the pass raises.
        self.current_node: str | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def run(self, graph: Graph) -> PassResult:  # pragma: no cover - abstract
        raise NotImplementedError


_PASSES: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass available by its ``name`` (CLI, pipelines, docs)."""
    if not cls.name or cls.name in _PASSES:
        raise ValueError(f"pass name {cls.name!r} is empty or registered twice")
    _PASSES[cls.name] = cls
    return cls


def get_pass(name: str) -> type[Pass]:
    try:
        return _PASSES[name]
    except KeyError:
        raise KeyError(f"unknown pass {name!r}; known passes: {', '.join(sorted(_PASSES))}") from None


def all_passes() -> list[type[Pass]]:
    return [_PASSES[k] for k in sorted(_PASSES)]
