"""Pipelines: which passes run, in what order, and which stages iterate to a fixed point.

A pipeline is a tuple of ``Stage``s. A stage runs its passes in order, once, or repeatedly until none of them
changes the graph (bounded by the manager's ``max_iterations``). Two ways to get one:

- an opt level: ``LEVEL_ORDER`` below is the one place that orders passes; a pass takes part at ``-O<n>`` when
  its ``min_level`` (declared on the pass class) is <= n. Passes named here but not registered (yet) are left out,
  and registered passes that ``LEVEL_ORDER`` does not place run last, in name order.
- a named pipeline: ``"fold,dce,cse"`` runs those passes once each, in order; a parenthesised group
  ``"fold,(simplify,dce)"`` iterates to a fixed point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import PassError
from .base import Pass, all_passes

MAX_OPT_LEVEL = 3

#: The cleanup passes: each makes the others' work visible (a fold exposes dead code, a CSE exposes folds).
CLEANUP = ("fold", "simplify", "dce", "cse")


@dataclass(frozen=True)
class Stage:
    """Passes run in order; ``fixed_point``: repeat until nothing changes; ``after_change``: run only when the
    stage before changed the graph (a cleanup after a transformation)."""

    passes: tuple[str | Pass, ...]
    fixed_point: bool = False
    after_change: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p if isinstance(p, str) else p.name for p in self.passes)

    def __str__(self) -> str:
        text = ",".join(self.names)
        return f"({text})" if self.fixed_point else text


#: NOTE: the one place that orders passes for the opt levels. Membership comes from each pass's ``min_level``.
LEVEL_ORDER: tuple[Stage, ...] = (
    Stage(CLEANUP, fixed_point=True),
    Stage(("ifconvert", "loopbatch")),
    Stage(CLEANUP, fixed_point=True, after_change=True),   # the inlined branches fold with what feeds them
    Stage(("horizontal",)),
    Stage(CLEANUP, fixed_point=True, after_change=True),   # the members' weights and biases are dead now
    Stage(("layout",)),
    Stage(CLEANUP, fixed_point=True, after_change=True),   # transposes the layout pass left cancel and fold
    Stage(("fuse",)),
)


def known_passes() -> dict[str, type[Pass]]:
    """Registered passes by name (importing ``tlc.passes`` registers every pass module)."""
    return {cls.name: cls for cls in all_passes()}


def unknown_pass_error(name: str, what: str = "pass") -> PassError:
    known = ", ".join(sorted(known_passes())) or "(none registered)"
    return PassError(f"unknown {what} {name!r}; known passes: {known}", pass_name=name)


def level_pipeline(opt_level: int) -> tuple[Stage, ...]:
    """The stages run at ``-O<opt_level>``: ``LEVEL_ORDER`` filtered by each pass's ``min_level``."""
    if not isinstance(opt_level, int) or not 0 <= opt_level <= MAX_OPT_LEVEL:
        raise PassError(f"opt level must be an int from 0 to {MAX_OPT_LEVEL}, got {opt_level!r}")
    registry = known_passes()
    stages: list[Stage] = []
    previous_kept = False
    for stage in LEVEL_ORDER:
        names = tuple(n for n in stage.names if n in registry and registry[n].min_level <= opt_level)
        # A cleanup that follows a transformation goes with it: no layout pass, no second cleanup.
        keep = bool(names) and (previous_kept or not stage.after_change)
        if keep:
            stages.append(Stage(names, stage.fixed_point, stage.after_change))
        previous_kept = keep
    placed = {n for stage in LEVEL_ORDER for n in stage.names}
    for name in sorted(registry):
        if name not in placed and registry[name].min_level <= opt_level:
            stages.append(Stage((name,)))
    return tuple(stages)


def parse_pipeline(spec: str | Sequence[object]) -> tuple[Stage, ...]:
    """Stages for a named pipeline: ``"fold,dce,(simplify,cse)"`` or a list of names, ``Pass`` objects and
    nested lists (a nested list iterates to a fixed point). Unknown names raise ``PassError``."""
    items = _split_text(spec) if isinstance(spec, str) else list(spec)
    stages: list[Stage] = []
    run: list[str | Pass] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            if run:
                stages.append(Stage(tuple(run)))
                run = []
            group = tuple(_check_item(x) for x in item)
            if not group:
                raise PassError("empty fixed-point group '()' in pass pipeline")
            stages.append(Stage(group, fixed_point=True))
        else:
            run.append(_check_item(item))
    if run:
        stages.append(Stage(tuple(run)))
    return tuple(stages)


def _check_item(item: object) -> str | Pass:
    if isinstance(item, Pass):
        return item
    if isinstance(item, type) and issubclass(item, Pass):
        return item.name
    if not isinstance(item, str):
        raise PassError(f"a pipeline item must be a pass name or a Pass, got {type(item).__name__} {item!r}")
    if item not in known_passes():
        raise unknown_pass_error(item)
    return item


def _split_text(spec: str) -> list[object]:
    """``"a,(b,c),d"`` -> ``["a", ["b", "c"], "d"]``; whitespace is ignored, groups do not nest."""
    items: list[object] = []
    group: list[str] | None = None
    token, closed = "", False

    def bad(why: str) -> PassError:
        return PassError(f"bad pass pipeline {spec!r}: {why}")

    spec = "".join(spec.split())
    if not spec:
        return []
    for ch in spec + ",":
        if ch == "(":
            if group is not None or token or closed:
                raise bad("'(' must start an item, and groups do not nest")
            group = []
        elif ch in ",)":
            if token:
                (group if group is not None else items).append(token)
            elif not closed and not (ch == ")" and group == []):
                raise bad("empty pass name")
            token, closed = "", False
            if ch == ")":
                if group is None:
                    raise bad("unbalanced ')'")
                items.append(group)
                group, closed = None, True
        elif closed:
            raise bad("a ',' must follow ')'")
        else:
            token += ch
    if group is not None:
        raise bad("unbalanced '('")
    return items


def describe_levels() -> list[str]:
    """One line per opt level with the stages it runs, e.g. ``-O1: (fold,dce)``."""
    lines = []
    for level in range(MAX_OPT_LEVEL + 1):
        stages = level_pipeline(level)
        lines.append(f"-O{level}: " + (" ".join(str(s) for s in stages) if stages else "(nothing)"))
    return lines
