"""Batch and stream execution: ``run_batches(plan, feeds, batch_size=..., progress=...)`` runs an iterable of feed
dicts through one plan in chunks of ``batch_size`` rows and yields one output dict per input dict, in order.

The batch axis is the leading axis of every input and every output. An input dict holds one or more rows of every
input (the same number for each); a dict whose arrays all lack the batch axis (each input's rank minus one) is one
row, and its outputs come without the batch axis too. Rows of consecutive dicts are copied into one buffer per input,
``batch_size`` rows long (a dict with at least a whole chunk left while the buffer is empty runs straight from its
own arrays); a full buffer runs the plan, and the outputs are split back by the rows each dict gave. Rows must be
independent (true of inference models): a dict's outputs are then what its rows alone would give.

Specializations stay bounded. A model whose batch dim is symbolic runs every chunk at ``batch_size`` rows and the
last one at its remainder (one specialization more, which ``Plan.run`` makes and caches by itself). A model exported
with a static batch ``B`` runs chunks of exactly ``B`` rows; the last one is padded with copies of its last row,
whose outputs are dropped. One call takes rows of one shape: the first dict fixes every non-batch dim.

Memory is bounded by the batch: the iterable is read one dict at a time (a generator of unknown length works), and
besides the current dict at most one chunk of inputs is held, plus the outputs of the dicts not yet complete (a
dict is yielded as soon as all its rows have run). Output arrays belong to the caller and never alias the plan's
buffers; the outputs of the dicts of one chunk are views of that chunk's output arrays.

``run_file(plan, "in.npz", "out.npz", batch_size=...)`` streams the rows of an ``.npz``/``.npy`` file through
``run_batches`` and writes the outputs the same way, a block at a time (``tlc.io.arrays``; ``tlc-opt --run-inputs``).

Errors: a model that cannot be batched, a bad ``batch_size`` or a missing tqdm are raised by the call itself; a bad
input dict (``InputError``, ``ShapeMismatchError``, ``DTypeMismatchError``, naming ``input dict <index>``) or an
exception from the iterable is raised once the dicts before it have been run and yielded.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from ..errors import BatchError, InputError, ShapeMismatchError
from ..io.arrays import RowReader, RowWriter
from ..ir.feeds import check_feeds, check_names, describe_inputs
from ..ir.types import TensorType

if TYPE_CHECKING:
    from .plan import Plan

#: rows per chunk of a model with a symbolic batch dim when ``batch_size`` is not given
DEFAULT_BATCH_SIZE = 64
#: how to get tqdm, for ``progress``
PROGRESS_EXTRA = "pip install 'tlc[progress]'"

Outputs = dict[str, np.ndarray]


def run_batches(plan: Plan, feeds: Iterable[Mapping[str, Any]], *, batch_size: int | None = None,
                progress: bool | TextIO = False) -> Iterator[Outputs]:
    """Run ``plan`` over ``feeds`` (an iterable of input dicts) in chunks; a generator of one output dict per input
    dict, in order (see the module's docstring for batching, padding, memory and errors).

    ``batch_size``: rows per run (default ``DEFAULT_BATCH_SIZE``, or ``B`` for a model with a static batch ``B``,
    which takes no other). ``progress``: True for a tqdm bar on stderr, or a text stream to draw it on; it counts
    rows and shows rows/s, with a total when ``feeds`` is a list or tuple.
    """
    return _stream(plan, feeds, batch_size, progress)


def _stream(plan: Plan, feeds: Iterable[Mapping[str, Any]], batch_size: int | None, progress: bool | TextIO,
            total: int | None = None) -> Iterator[Outputs]:
    """``run_batches``, with the rows in all when the caller knows them (for the bar)."""
    layout = BatchLayout.of(plan)
    rows = layout.run_rows(batch_size)
    bar = _progress_bar(progress)
    if isinstance(feeds, Mapping):
        raise InputError(f"run_batches takes an iterable of input dicts, got one dict (keys {list(feeds)}); "
                         f"pass [feeds], or call plan.run(feeds)")
    if not isinstance(feeds, Iterable):
        raise InputError(f"run_batches takes an iterable of input dicts, got {type(feeds).__name__}")
    return _Stream(plan, layout, rows).run(feeds, bar, total)


def run_file(plan: Plan, inputs: str | os.PathLike, outputs: str | os.PathLike, *, batch_size: int | None = None,
             progress: bool | TextIO = False) -> int:
    """Run ``plan`` over the rows of an ``.npz`` (one array per input name, the batch axis first) or ``.npy`` file
    (a model with one input), ``batch_size`` rows at a time, and write the outputs the same way to ``outputs``
    (``.npz`` by output name, or ``.npy`` for one output); returns the number of rows. Rows are read and written a
    block at a time (``tlc.io.arrays``), so memory stays bounded by the batch; the output file appears only once
    complete. The file's arrays are checked against the inputs from their headers before any row is read."""
    layout = BatchLayout.of(plan)
    rows = layout.run_rows(batch_size)
    names = {"input": [name for name, _ in plan.inputs], "output": [name for name, _ in plan.outputs]}
    for what, path in (("input", inputs), ("output", outputs)):
        if Path(path).suffix.lower() == ".npy" and len(names[what]) != 1:
            raise InputError(f"{str(path)!r}: an .npy file holds one array, but the model has {len(names[what])} "
                             f"{what}s ({', '.join(names[what])}); use an .npz file, one array per {what} name")
    with RowReader(inputs, name=names["input"][0]) as reader:
        layout.check_file(reader, str(inputs))
        with RowWriter(outputs, reader.rows) as writer:
            for block in _stream(plan, reader.blocks(rows), batch_size, progress, total=reader.rows):
                writer.write(block)
    return reader.rows


# ---------------------------------------------------------------------------- the batch axis
@dataclass(frozen=True)
class BatchLayout:
    """Where a plan's inputs carry the batch: the leading axis of each, of a symbolic size (``static`` None) or of
    the fixed size ``static``. ``specs``: the inputs' types with that axis named ``symbol``; ``row_specs``: the
    types of one row (without it; None where an input's rank is unknown)."""

    specs: tuple[tuple[str, TensorType], ...]
    row_specs: tuple[tuple[str, TensorType], ...] | None
    symbol: str
    static: int | None

    @staticmethod
    def of(plan: Plan) -> BatchLayout:
        """``plan``'s layout; a ``BatchError`` when an input or output has no batch axis or the inputs disagree."""
        inputs = plan.inputs
        if not inputs:
            raise BatchError(f"plan {plan.name!r} has no inputs: there are no rows to batch")
        leading: dict[str, object] = {}
        for name, t in inputs:
            if not isinstance(t, TensorType):
                raise BatchError(f"input {name!r} is a {t}, not a tensor: run_batches splits tensors along their "
                                 f"leading (batch) axis")
            if t.shape is not None and not t.shape:
                raise BatchError(f"input {name!r} is a scalar ({t}): every input needs a leading batch axis")
            if t.shape is not None and t.shape[0] is not None:
                leading[name] = t.shape[0]
        if len(set(leading.values())) > 1:
            dims = ", ".join(f"{name!r}: {dim!r}" for name, dim in leading.items())
            raise BatchError(f"the inputs disagree on the batch dim (their leading dims: {dims}); run_batches needs "
                             f"the same symbol or size first in every input")
        dim = next(iter(leading.values()), None)
        symbols = {d for _, t in inputs if t.shape is not None for d in t.shape[1:] if isinstance(d, str)}
        if isinstance(dim, str) and dim in symbols:
            (where,) = [name for name, t in inputs if t.shape is not None and dim in t.shape[1:]][:1]
            raise BatchError(f"the batch dim {dim!r} also sizes a later axis of input {where!r}: its rows are not "
                             f"independent, so run_batches cannot split them into chunks")
        static = dim if isinstance(dim, int) else None
        if static == 0:
            raise BatchError("the model's batch dim is fixed at 0 rows: there is nothing to batch")
        symbol = dim if isinstance(dim, str) else _fresh_symbol("batch", symbols)
        specs = tuple((name, t if t.shape is None else TensorType(t.dtype, (symbol, *t.shape[1:])))
                      for name, t in inputs)
        row_specs = None
        if all(t.shape is not None for _, t in inputs):
            row_specs = tuple((name, TensorType(t.dtype, t.shape[1:])) for name, t in inputs)
        layout = BatchLayout(specs, row_specs, symbol, static)
        layout._check_output_types(plan)
        return layout

    def _check_output_types(self, plan: Plan) -> None:
        """Outputs whose types already say they have no batch axis (the others are checked after each run)."""
        batch = self.static if self.static is not None else repr(self.symbol)
        for name, t in plan.outputs:
            if t is None or (isinstance(t, TensorType) and t.shape is None):
                continue
            if not isinstance(t, TensorType):
                raise BatchError(f"output {name!r} is a {t}, not a tensor: its rows cannot be split between input "
                                 f"dicts; run this model with plan.run")
            if not t.shape or (isinstance(t.shape[0], int) and t.shape[0] != self.static):
                raise BatchError(f"output {name!r} ({t}) has no leading batch axis (the batch dim is {batch}): its "
                                 f"rows cannot be split between input dicts (a loss or a statistic over the "
                                 f"batch?); run this model with plan.run")

    def run_rows(self, batch_size: int | None) -> int:
        """The rows of one run for ``batch_size``; a ``BatchError`` when it is not a size this model can take."""
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                       or batch_size < 1):
            raise BatchError(f"batch_size must be a positive integer or None, got {batch_size!r}")
        if self.static is None:
            return DEFAULT_BATCH_SIZE if batch_size is None else int(batch_size)
        if batch_size is not None and batch_size != self.static:
            raise BatchError(f"the model's batch dim is fixed at {self.static} ({describe_inputs(self.specs)}): "
                             f"batch_size must be {self.static} or None, got {batch_size}; run_batches feeds it "
                             f"{self.static} rows a run and pads the last run")
        return self.static

    def check(self, feeds: object, where: str) -> tuple[dict[str, np.ndarray], bool]:
        """``feeds`` checked (names, dtypes, ranks, rows, dims): the arrays with the batch axis first, and whether
        the dict had it (False: one row without it). Errors start with ``where``."""
        try:
            check_names(self.specs, feeds)
            arrays = {name: _as_array(feeds[name]) for name, _ in self.specs}
            batched = self._has_batch_axis(arrays)
            checked, _ = check_feeds(self.specs if batched else self.row_specs, arrays)
        except InputError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        if not batched:
            return {name: a[np.newaxis] for name, a in checked.items()}, False
        return checked, True

    def _has_batch_axis(self, arrays: dict[str, object]) -> bool:
        """Whether every array has the batch axis (all with the same number of rows) or none has (one row)."""
        batched: dict[str, bool] = {}
        for name, t in self.specs:
            a = arrays[name]
            if not isinstance(a, np.ndarray):
                continue        # not an array: check_feeds names what it is
            if t.shape is None or a.ndim == len(t.shape):
                if a.ndim == 0:
                    raise ShapeMismatchError(f"input {name!r}: expected the batch axis first, got a scalar")
                batched[name] = True
            elif a.ndim == len(t.shape) - 1 and self.row_specs is not None:
                batched[name] = False
            else:
                one_row = len(t.shape) > 1 and self.row_specs is not None
                row = f" or {len(t.shape) - 1} (one row without it)" if one_row else ""
                raise ShapeMismatchError(f"input {name!r}: expected rank {len(t.shape)} ({t}, the batch axis "
                                         f"first){row}; got shape {list(a.shape)}")
        if len(set(batched.values())) > 1:
            (has,) = [n for n, b in batched.items() if b][:1]
            (lacks,) = [n for n, b in batched.items() if not b][:1]
            raise ShapeMismatchError(f"input {has!r} has the batch axis (shape {list(arrays[has].shape)}) but input "
                                     f"{lacks!r} has not (shape {list(arrays[lacks].shape)}): give every input of a "
                                     f"dict with it, or every input without it (one row)")
        rows = {name: arrays[name].shape[0] for name, b in batched.items() if b}
        if len(set(rows.values())) > 1:
            counts = ", ".join(f"{name!r} has {n}" for name, n in rows.items())
            raise ShapeMismatchError(f"the inputs disagree on the number of rows ({counts}); the leading axis of "
                                     f"every input is the batch")
        return all(batched.values())

    def check_file(self, reader: RowReader, where: str) -> None:
        """A file's arrays against the inputs, from their headers alone (names, dtypes, ranks, dims); every array
        must have the batch axis, and there must be rows (no run, no outputs' shapes)."""
        unknown = [name for name in reader.names if name not in dict(self.specs)]
        missing = [name for name, _ in self.specs if name not in reader.names]
        if unknown or missing:
            what = (f"arrays {', '.join(map(repr, unknown))} are not inputs of the model" if unknown
                    else f"no array for input(s) {', '.join(map(repr, missing))}")
            raise InputError(f"{where}: {what}; expected one array per input: {describe_inputs(self.specs)}")
        # NOTE: zero-stride stand-ins with the arrays' shapes and dtypes: checking them reads nothing
        shapes = reader.shapes
        stand_ins = {name: np.broadcast_to(np.zeros((), dtype), shapes[name]) for name, dtype in reader.dtypes.items()}
        if not self.check(stand_ins, where)[1]:
            got = ", ".join(f"{name}{list(shape)}" for name, shape in shapes.items())
            raise ShapeMismatchError(f"{where}: the arrays ({got}) lack the batch axis; expected "
                                     f"{describe_inputs(self.specs)}")
        if reader.rows == 0:
            raise InputError(f"{where}: the arrays have no rows")

    def count_rows(self, feeds: Sequence[object]) -> int | None:
        """The rows of a sequence of input dicts, from their first input's shape (None where that is unclear)."""
        name, t = self.specs[0]
        total = 0
        for item in feeds:
            shape = getattr(item.get(name), "shape", None) if isinstance(item, Mapping) else None
            if shape is None or (not shape and t.shape is None):
                return None
            one_row = t.shape is not None and len(shape) == len(t.shape) - 1
            total += 1 if one_row else shape[0]
        return total


def _fresh_symbol(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def _as_array(raw: object) -> object:
    """``raw`` as an array where numpy makes one; else ``raw`` (``check_feeds`` says what is wrong with it)."""
    if isinstance(raw, np.ndarray):
        return raw
    try:
        array = np.asarray(raw)
    except (ValueError, TypeError, OverflowError):
        return raw
    return raw if array.dtype == object and array.ndim == 0 else array


# ---------------------------------------------------------------------------- progress
def _progress_bar(progress: bool | TextIO) -> Any:
    """A factory of tqdm bars for ``progress`` (None for False): tqdm is imported now, the bar drawn later."""
    if progress is False or progress is None:
        return None
    if progress is not True and not callable(getattr(progress, "write", None)):
        raise BatchError(f"progress must be True, False or a text stream to draw the bar on, got "
                         f"{type(progress).__name__}")
    try:
        from tqdm import tqdm
    except ImportError:
        raise ImportError(f"progress needs tqdm, which is not installed: {PROGRESS_EXTRA}") from None
    stream = None if progress is True else progress

    def make(total: int | None, desc: str) -> Any:
        return tqdm(total=total, desc=desc, unit="rows", file=stream or sys.stderr,
                    dynamic_ncols=stream is None)
    return make


# ---------------------------------------------------------------------------- streaming
class _Pending:
    """An input dict whose outputs are being gathered: its index and rows, whether it had the batch axis, and the
    outputs of its rows run so far (one dict of arrays per run)."""

    __slots__ = ("index", "rows", "batched", "done", "pieces")

    def __init__(self, index: int, rows: int, batched: bool):
        self.index, self.rows, self.batched = index, rows, batched
        self.done = 0
        self.pieces: list[Outputs] = []

    def outputs(self, empty: Outputs) -> Outputs:
        if not self.pieces:
            out = {name: a.copy() for name, a in empty.items()}
        elif len(self.pieces) == 1:
            out = self.pieces[0]
        else:
            out = {name: np.concatenate([p[name] for p in self.pieces]) for name in self.pieces[0]}
        return out if self.batched else {name: a[0] for name, a in out.items()}


class _Stream:
    """One ``run_batches`` call's state: the chunk's input buffers and the dicts waiting for their outputs."""

    def __init__(self, plan: Plan, layout: BatchLayout, run_rows: int):
        self.plan, self.layout, self.run_rows = plan, layout, run_rows
        self.buffers: dict[str, np.ndarray] = {}
        self.filled = 0                                  # rows in the buffers
        self.chunk: list[tuple[_Pending, int]] = []      # whose rows are in the buffers, in order, and how many
        self.waiting: deque[_Pending] = deque()          # dicts not yet yielded, in order
        self.row_shapes: dict[str, tuple[int, ...]] | None = None   # fixed by the first dict
        self.empty: Outputs | None = None                # zero-row outputs (for dicts without rows), after a run
        self.bar: Any = None

    def run(self, feeds: Iterable[object], bar_factory: Any, total: int | None) -> Iterator[Outputs]:
        if bar_factory is not None:
            if total is None and isinstance(feeds, (list, tuple)):
                total = self.layout.count_rows(feeds)
            self.bar = bar_factory(total, self.plan.name)
        failure: BaseException | None = None
        try:
            iterator = iter(feeds)
            for index in itertools.count():
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                except Exception as exc:  # the iterable's own failure: raised after the dicts before it
                    failure = exc
                    break
                try:
                    entry, arrays = self.accept(index, item)
                except InputError as exc:
                    failure = exc
                    break
                yield from self.feed(entry, arrays)
            self.flush()
            yield from self.completed()
            if failure is not None:
                raise failure
            if self.waiting:
                indices = ", ".join(str(e.index) for e in self.waiting)
                raise InputError(f"input dict(s) {indices} have no rows, and no dict had any: run_batches learns the "
                                 f"outputs' shapes from a run")
        finally:
            if self.bar is not None:
                self.bar.close()

    def accept(self, index: int, feeds: object) -> tuple[_Pending, dict[str, np.ndarray]]:
        where = f"input dict {index}"
        arrays, batched = self.layout.check(feeds, where)
        shapes = {name: a.shape[1:] for name, a in arrays.items()}
        if self.row_shapes is None:
            self.row_shapes = shapes
        elif shapes != self.row_shapes:
            (name,) = [n for n in shapes if shapes[n] != self.row_shapes[n]][:1]
            raise ShapeMismatchError(f"{where}: input {name!r} has rows of shape {list(shapes[name])}, but the first "
                                     f"dict's were {list(self.row_shapes[name])}; one run_batches call takes rows of "
                                     f"one shape (group the rows by shape and call it once per group)")
        entry = _Pending(index, next(iter(arrays.values())).shape[0], batched)
        self.waiting.append(entry)
        return entry, arrays

    def feed(self, entry: _Pending, arrays: dict[str, np.ndarray]) -> Iterator[Outputs]:
        """Put ``entry``'s rows in chunks, running each chunk that fills; yield the dicts that complete."""
        start, rows, size = 0, entry.rows, self.run_rows
        while start < rows:
            if self.filled == 0 and rows - start >= size:   # a whole chunk of this dict: no copy
                stop = start + size
                self.execute({name: a[start:stop] for name, a in arrays.items()}, [(entry, size)], size)
            else:
                stop = min(rows, start + size - self.filled)
                self.copy_in(arrays, start, stop)
                self.chunk.append((entry, stop - start))
                if self.filled == size:
                    self.flush()
            start = stop
            yield from self.completed()
        yield from self.completed()

    def copy_in(self, arrays: dict[str, np.ndarray], start: int, stop: int) -> None:
        if not self.buffers:
            self.buffers = {name: np.empty((self.run_rows, *a.shape[1:]), a.dtype) for name, a in arrays.items()}
        end = self.filled + stop - start
        for name, a in arrays.items():
            self.buffers[name][self.filled:end] = a[start:stop]
        self.filled = end

    def flush(self) -> None:
        """Run the rows in the buffers (a static batch's last chunk padded with copies of its last row)."""
        rows = self.filled
        if rows == 0:
            return
        size = rows
        if self.layout.static is not None and rows < self.run_rows:
            for buffer in self.buffers.values():
                buffer[rows:] = buffer[rows - 1]
            size = self.run_rows
        parts, self.chunk, self.filled = self.chunk, [], 0
        self.execute({name: b[:size] for name, b in self.buffers.items()}, parts, rows)

    def execute(self, feeds: dict[str, np.ndarray], parts: list[tuple[_Pending, int]], rows: int) -> None:
        """Run one chunk and hand each dict in ``parts`` its rows of the outputs (``rows``: not counting padding)."""
        outputs = self.plan.run(feeds)
        size = next(iter(feeds.values())).shape[0]
        for name, value in outputs.items():
            if not isinstance(value, np.ndarray) or value.ndim == 0 or value.shape[0] != size:
                got = f"shape {list(value.shape)}" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"
                first, last = parts[0][0].index, parts[-1][0].index
                dicts = f"input dict {first}" if first == last else f"input dicts {first}-{last}"
                raise BatchError(f"output {name!r} has {got} for a run of {size} rows (of {dicts}): its leading dim "
                                 f"is not the batch, so its rows cannot be split between input dicts (a loss or a "
                                 f"statistic over the batch?); run this model with plan.run")
        offset = 0
        for entry, n in parts:
            entry.pieces.append({name: a[offset:offset + n] for name, a in outputs.items()})
            entry.done += n
            offset += n
        if self.empty is None:
            self.empty = {name: a[:0].copy() for name, a in outputs.items()}
        if self.bar is not None:
            self.bar.update(rows)

    def completed(self) -> Iterator[Outputs]:
        """Yield the dicts at the front whose rows have all run."""
        while self.waiting and self.waiting[0].done == self.waiting[0].rows:
            if self.empty is None:     # a dict without rows before any run: its outputs' shapes are not known yet
                return
            yield self.waiting.popleft().outputs(self.empty)
