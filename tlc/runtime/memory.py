"""The memory planner: buffers for a step sequence with static shapes, reused by liveness, in place where safe.

Every value a kernel writes into (``writes_outputs``) gets a slot of an arena: a byte buffer viewed with the
value's dtype and shape. A slot is reused once everything that may read it is dead. Values made by reference or
view steps are not planned, but they may alias their inputs (a reference op can return a view), so they keep
their inputs' slots alive as long as they live. An elementwise step may write an output into the slot of an
input that dies at that step (same shape and dtype, and no other input of the step may alias it).

Graph outputs are never placed in the arena: they are allocated for each run ("fresh"), so ``run`` can return
them without a copy and they never alias internal buffers.

A step that joins its inputs (``joins``: a Concat whose inputs are consecutive ranges of its output) is
joined in place where each input is a distinct value a kernel writes (``_joins``): the output's slot is taken
when its first input is written, every input is placed at its range of it (``within``; never then an in-place
donor), and the step itself runs nothing (``joined``). UNet's skip connections at batch 1: the
encoder's conv and the decoder's Resize write their halves of the Concat's output, which no longer copies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.types import TensorType, np_dtype

ALIGN = 64
NEVER = 1 << 62


@dataclass
class StepSpec:
    """What the planner needs of one step."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    writes_outputs: bool
    inplace: bool
    workspace: list[tuple[tuple[int, ...], np.dtype]]
    joins: bool = False          # its inputs may be written in place as consecutive ranges of its one output
    donors: tuple[int, ...] | None = None   # with ``inplace``: the input ports that may give an output their slot


@dataclass
class MemoryPlan:
    slot_bytes: list[int] = field(default_factory=list)
    placement: dict[int, int] = field(default_factory=dict)          # planned value -> slot
    fresh: set[int] = field(default_factory=set)                     # written values allocated per run
    work: list[list[tuple[int, tuple[int, ...], np.dtype]]] = field(default_factory=list)
    release: list[list[int]] = field(default_factory=list)           # per step: values to drop after it
    inplace: list[tuple[int, int, int]] = field(default_factory=list)  # (step, output value, input value)
    within: dict[int, tuple[int, int]] = field(default_factory=dict)   # value -> (the value it lies in, byte offset)
    joined: set[int] = field(default_factory=set)                      # joining steps whose inputs were joined

    @property
    def arena_bytes(self) -> int:
        return sum(self.slot_bytes)


def _nbytes(t: TensorType) -> int:
    n = int(np.prod(t.shape, dtype=np.int64)) * np_dtype(t.dtype).itemsize
    return -(-n // ALIGN) * ALIGN


class _Slots:
    """Free-slot bookkeeping: best fit by capacity, growing the largest free slot when none fits."""

    def __init__(self, plan: MemoryPlan):
        self.plan = plan
        self.free: list[int] = []

    def take(self, nbytes: int) -> int:
        sizes = self.plan.slot_bytes
        fits = [s for s in self.free if sizes[s] >= nbytes]
        if fits:
            slot = min(fits, key=lambda s: (sizes[s], s))
        elif self.free:
            slot = max(self.free, key=lambda s: (sizes[s], -s))
            sizes[slot] = nbytes
        else:
            sizes.append(nbytes)
            return len(sizes) - 1
        self.free.remove(slot)
        return slot

    def give_back(self, slot: int) -> None:
        self.free.append(slot)


def plan_memory(steps: list[StepSpec], types: list[TensorType | None], outputs: set[int]) -> MemoryPlan:
    """Assign slots to the values the steps write; ``outputs`` are the graph's output values."""
    plan = MemoryPlan()
    last_use = _last_uses(steps, len(types), outputs)
    roots: list[frozenset[int]] = [frozenset()] * len(types)
    for st in steps:
        for o in st.outputs:
            if not st.writes_outputs:
                roots[o] = frozenset().union(*(roots[i] for i in st.inputs if i < len(types)))
            elif o in outputs or types[o].dtype == "string":
                plan.fresh.add(o)
            else:
                roots[o] = frozenset({o})
    joins = _joins(steps, types, roots, outputs)
    for t, (out, offsets) in joins.items():
        plan.joined.add(t)
        for i, offset in offsets.items():
            plan.within[i] = (out, offset)
            roots[i] = frozenset({out})
    # how long each planned buffer must live: until the last use of anything that may alias it
    buffer_end: dict[int, int] = {}
    for v, rs in enumerate(roots):
        for r in rs:
            buffer_end[r] = max(buffer_end.get(r, -1), last_use[v])
    slots = _Slots(plan)
    owner: dict[int, int] = {}          # slot -> the planned value that holds it now
    dying: dict[int, list[int]] = {}
    for r, end in buffer_end.items():
        dying.setdefault(end, []).append(r)
    for t, st in enumerate(steps):
        taken: set[int] = set()
        for o in st.outputs:
            if o in plan.within:        # a joined input: its range of the joining step's output
                out = plan.within[o][0]
                if out not in plan.placement:
                    plan.placement[out] = slots.take(_nbytes(types[out]))
                    owner[plan.placement[out]] = out
                plan.placement[o] = plan.placement[out]
                taken.add(plan.placement[o])
                continue
            if roots[o] != frozenset({o}) or o in plan.placement:
                continue
            donor = _inplace_donor(t, st, o, types, roots, buffer_end, plan, taken) if st.inplace else None
            if donor is not None:
                slot = plan.placement[donor]
                plan.inplace.append((t, o, donor))
            else:
                slot = slots.take(_nbytes(types[o]))
            plan.placement[o] = slot
            owner[slot] = o
            taken.add(slot)
        work = [(slots.take(-(-int(np.prod(s, dtype=np.int64)) * d.itemsize // ALIGN) * ALIGN), s, d)
                for s, d in st.workspace]
        plan.work.append(work)
        for slot, _, _ in work:
            slots.give_back(slot)
        for r in dying.get(t, ()):
            slot = plan.placement[r]
            if owner.get(slot) == r:
                del owner[slot]
                slots.give_back(slot)
    plan.release = [[] for _ in steps]
    for v, t in enumerate(last_use):
        if 0 <= t < len(steps) and v not in outputs:
            plan.release[t].append(v)
    return plan


def _joins(steps: list[StepSpec], types, roots, outputs: set[int]) -> dict[int, tuple[int, dict[int, int]]]:
    """The joining steps whose inputs can be written in place: per step, its output and each input's byte offset
    in it. Each input must be a planned value of its own (written by a kernel, not a feed, constant, view or graph
    output), in no other join and not itself the output of a joined step (its inputs lie in its own slot), at an
    offset that keeps the arena's alignment; the output a planned value too."""
    produced: dict[int, int] = {}
    for t, st in enumerate(steps):
        for o in st.outputs:
            produced[o] = t
    found: dict[int, tuple[int, dict[int, int]]] = {}
    used: set[int] = set()
    for t, st in enumerate(steps):
        if not st.joins or len(st.outputs) != 1:
            continue
        out = st.outputs[0]
        if out in outputs or roots[out] != frozenset({out}) or not st.inputs:
            continue
        offsets: dict[int, int] = {}
        offset = 0
        for i in st.inputs:
            ok = (i < len(types) and isinstance(types[i], TensorType) and i not in outputs and i not in used
                  and i not in offsets and roots[i] == frozenset({i}) and produced.get(i, t) < t
                  and produced[i] not in found and offset % ALIGN == 0 and types[i].dtype == types[out].dtype)
            if not ok:
                break
            offsets[i] = offset
            offset += int(np.prod(types[i].shape, dtype=np.int64)) * np_dtype(types[i].dtype).itemsize
        else:
            found[t] = (out, offsets)
            used.update(offsets)
    return found


def _last_uses(steps: list[StepSpec], num_values: int, outputs: set[int]) -> list[int]:
    """Per value, the index of the last step that reads it (its own step when unread; NEVER for outputs)."""
    last = [-1] * num_values
    for t, st in enumerate(steps):
        for o in st.outputs:
            last[o] = max(last[o], t)
        for i in st.inputs:
            if i < num_values:
                last[i] = max(last[i], t)
    for v in outputs:
        last[v] = NEVER
    return last


def _inplace_donor(t: int, st: StepSpec, o: int, types, roots, buffer_end, plan: MemoryPlan,
                   taken: set[int]) -> int | None:
    """An input of step ``t`` (at one of its ``donors`` ports, where it names them) whose slot output ``o`` may
    take over, or None."""
    for port, i in enumerate(st.inputs):
        if st.donors is not None and port not in st.donors:
            continue
        if i >= len(types) or roots[i] != frozenset({i}) or i not in plan.placement:
            continue
        if buffer_end[i] != t or types[i] != types[o] or plan.placement[i] in taken:
            continue
        # NOTE: another input that may alias this buffer (a view of it) would be read after being overwritten
        if any(w != i and i in roots[w] for w in st.inputs if w < len(types)):
            continue
        return i
    return None
