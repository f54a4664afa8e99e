"""``tlc.dask``: a compiled tlc plan mapped over Dask arrays chunked along the batch axis.

    outs = tlc.dask.run("model.onnx", {"x": x})     # x: a dask.array, chunked along axis 0
    y = outs["y"].compute()                         # the caller's scheduler: local threads, processes, a Client
    res = outs.compute()                            # every output in one pass (+ errors, valid rows, report)

The graph goes to the workers as data (text IR, its tensors and a dict of compile options; never native code);
each worker process compiles it once, loading kernels from the on-disk cache, and every later task and thread of
that process runs the same plan (``worker.py``). One task per chunk runs the model; each output is a Dask array
whose blocks are picked from those tasks' results, so computing several outputs together runs the model once per
chunk. Task names read ``tlc-<model>`` (the runs), ``tlc-<model>-<output>`` and so on in Dask's dashboard
(where Dask fuses a lone output's picks into the runs: ``tlc-<model>-tlc-<model>-<output>``).

Inputs whose axis 0 is symbolic in the model ("N") are batched: cut into the first such input's chunks along
axis 0 (the others are rechunked to match, and every other axis to one chunk); inputs whose axis 0 is fixed go
whole to every chunk. Every output must have the chunk's rows as its axis 0. NOTE: the model must compute each
row of axis 0 on its own (a batch); a model whose axis 0 is another dim (time, in a sequence-first RNN) would be
cut along it, which no check here can tell.

Dask itself is imported only when ``run`` is called; without it, ``run`` raises ``BackendError`` saying what to
install.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BackendError, BatchError, ChunkError, DTypeMismatchError, InputError, ShapeMismatchError
from ..ir.graph import Graph
from ..ir.types import TensorType, dtype_name, np_dtype
from ..runtime import CompileOptions
from . import worker
from .report import Report, merge
from .worker import NAN_POLICIES, Chunk, Feed, ShippedModel

__all__ = ["ChunkError", "Outputs", "Report", "Result", "run"]

ERROR_MODES = ("raise", "keep")


def run(model: Graph | str | os.PathLike, feeds: Mapping[str, Any], opt_level: int = 2, *, jit: str = "eager",
        num_threads: int | None = None, nan_policy: str = "propagate", errors: str = "raise",
        fill_value: Any = None, collect: bool = False, profile: bool = False, name: str | None = None,
        **compile_options: Any) -> Outputs:
    """Map ``model`` (a ``tlc.Graph`` or a model file) over ``feeds`` (input name -> ``dask.array``, chunked
    along axis 0; numpy arrays are taken too); returns ``Outputs``: output name -> lazy ``dask.array``.

    ``jit`` defaults to "eager": every chunk runs the native kernels (none runs a fallback while they compile), so
    a chunk's rows do not depend on when it ran. ``num_threads`` (None: ``$TLC_NUM_THREADS`` on the worker, else
    the worker's CPUs over the Dask tasks that run at once on its machine, at least 1) is each plan's pool size.
    ``nan_policy="raise"`` refuses a chunk with a NaN in a float input or output. ``errors="raise"`` lets a bad
    chunk's ``ChunkError`` end the compute; ``errors="keep"`` fills its rows with ``fill_value`` (NaN for floats,
    0 otherwise) and reports it in ``outputs.errors`` / ``outputs.valid``. ``collect`` (and ``profile``, which
    also profiles every run) gathers the workers' plan stats into ``outputs.report``. ``name`` names the tasks
    (default: the graph's name). Further keywords are ``tlc.compile`` options.
    """
    da = _dask_array()
    if nan_policy not in NAN_POLICIES:
        raise InputError(f"nan_policy must be one of {', '.join(NAN_POLICIES)}; got {nan_policy!r}")
    if errors not in ERROR_MODES:
        raise InputError(f"errors must be one of {', '.join(ERROR_MODES)}; got {errors!r}")
    graph = model if isinstance(model, Graph) else _load(model)
    options = {"opt_level": opt_level, "jit": jit, "num_threads": num_threads, **compile_options}
    CompileOptions.from_env({}, **options)      # NOTE: refuse bad options here, not in every worker
    specs, arrays = _feeds(graph, feeds, da)
    ref = next(a for f, a in zip(specs, arrays) if f.batched).chunks[0]
    out_types = _output_types(graph, specs, arrays, ref)
    keep = errors == "keep"
    shipped = ShippedModel(graph, options, specs, [n for n, _ in out_types], nan_policy, keep, collect, profile)
    return _build(da, shipped, arrays, ref, out_types, _label(name or graph.name), keep, fill_value)


@dataclass
class Result:
    """``Outputs.compute()``: every output as numpy, the chunks that failed (errors="keep"), which rows are
    valid (None: all), and the merged report (``collect``/``profile``)."""

    outputs: dict[str, np.ndarray]
    errors: dict[int, ChunkError]
    valid: np.ndarray | None
    report: Report | None


class Outputs(dict):
    """Output name -> lazy ``dask.array``; besides: ``errors`` (a ``Delayed`` of {chunk: ChunkError}, with
    errors="keep"), ``valid`` (a bool array over the rows, with errors="keep"), ``report`` (a ``Delayed``
    ``Report``, with collect/profile) and ``chunks`` (the row chunks)."""

    errors: Any = None
    valid: Any = None
    report: Any = None
    chunks: tuple[int, ...] = ()

    def compute(self, **kwargs: Any) -> Result:
        """Compute every output, and the errors, valid rows and report when asked for, in one ``dask.compute``
        (each chunk's model run once); keywords go to ``dask.compute`` (``scheduler=``, ...)."""
        import dask

        # NOTE: arrays before Delayed objects: dask 2026.8's compute returns a mix of the two grouped by kind, in
        # the order each kind first appears, not in the order given
        arrays = [*self.values(), *([self.valid] if self.valid is not None else [])]
        delayed = [x for x in (self.errors, self.report) if x is not None]
        values = dask.compute(*arrays, *delayed, **kwargs)
        outputs = dict(zip(self, values))
        valid = values[len(self)] if self.valid is not None else None
        rest = iter(values[len(arrays):])
        errors = next(rest) if self.errors is not None else {}
        report = next(rest) if self.report is not None else None
        return Result(outputs, errors, valid, report)


# ---------------------------------------------------------------------------- feeds and types
def _dask_array() -> Any:
    try:
        import dask.array as da
    except ImportError as exc:
        raise BackendError(f'tlc.dask needs dask: pip install "tlc[dask]" ({exc})') from None
    return da


def _load(path: str | os.PathLike) -> Graph:
    from ..io import load

    return load(path)


def _feeds(graph: Graph, feeds: Mapping[str, Any], da: Any) -> tuple[list[Feed], list[Any]]:
    """The model's inputs as ``Feed``s and the feeds as Dask arrays chunked for them."""
    types = {node.name: node.output_types[0] for node in graph.inputs}
    expected = ", ".join(f"{n}: {t}" for n, t in types.items()) or "(none)"
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must map input names to dask arrays; got {type(feeds).__name__}. "
                         f"Expected inputs: {expected}")
    unknown = [k for k in feeds if k not in types]
    missing = [k for k in types if k not in feeds]
    if unknown or missing:
        raise InputError(f"unknown input(s) {unknown}, missing input(s) {missing}; expected inputs: {expected}")
    specs, arrays = [], []
    for name, t in types.items():
        a = feeds[name]
        a = a if isinstance(a, da.Array) else da.asarray(a)
        if not isinstance(t, TensorType) or t.shape is None:
            raise InputError(f"input {name!r} is {t}; tlc.dask.run takes tensor inputs of known rank")
        if dtype_name(a.dtype) != t.dtype:
            raise DTypeMismatchError(f"input {name!r}: the model expects {t.dtype}, the dask array holds "
                                     f"{a.dtype} (cast it: x.astype({t.dtype!r}))")
        if a.ndim != len(t.shape) or any(isinstance(d, int) and d != s for d, s in zip(t.shape, a.shape)):
            raise ShapeMismatchError(f"input {name!r}: the model expects shape {t}, the dask array has "
                                     f"{list(a.shape)}")
        if any(np.isnan(c) for axis in a.chunks for c in axis):
            raise InputError(f"input {name!r} has unknown chunk sizes; call x.compute_chunk_sizes() first")
        batched = a.ndim > 0 and not isinstance(t.shape[0], int)
        specs.append(Feed(name, t.dtype, tuple(a.shape[1:] if batched else a.shape), batched))
        arrays.append(a)
    lengths = {f.name: a.shape[0] for f, a in zip(specs, arrays) if f.batched}
    if not lengths:
        raise BatchError(f"no input has a symbolic batch axis (axis 0) to cut into chunks; inputs: {expected}")
    if len(set(lengths.values())) > 1:
        raise BatchError(f"the batched inputs differ in rows: {lengths}")
    batch_dims = {types[f.name].shape[0] for f in specs if f.batched}
    for f in specs:
        later = types[f.name].shape[1 if f.batched else 0:]
        if any(isinstance(d, str) and d in batch_dims for d in later):
            raise BatchError(f"the batch dim also sizes a later axis of input {f.name!r} ({types[f.name]}): its "
                             f"rows are not independent, so tlc.dask cannot cut them into chunks")
    ref = next(a for f, a in zip(specs, arrays) if f.batched).chunks[0]
    return specs, [_rechunked(a, ref if f.batched else None) for f, a in zip(specs, arrays)]


def _rechunked(a: Any, rows: tuple[int, ...] | None) -> Any:
    """``a`` in the batch chunks ``rows`` along axis 0 (None: one chunk) and one chunk along every other axis."""
    want = ((rows if rows is not None else (a.shape[0],),) if a.ndim else ()) + tuple((s,) for s in a.shape[1:])
    return a if a.chunks == want else a.rechunk(want)


def _output_types(graph: Graph, specs: list[Feed], arrays: list[Any], ref: tuple[int, ...]
                  ) -> list[tuple[str, TensorType]]:
    """Each output's name and type for a chunk of ``ref[0]`` rows, checked for every chunk size: tensors of
    static shape with the chunk's rows on axis 0 (their other dims the same for every size)."""
    found: dict[str, TensorType] = {}
    for rows in sorted(set(ref) - {0}) or [0]:
        g = graph.copy()
        for f, a in zip(specs, arrays):
            shape = ((rows,) + f.shape) if f.batched else tuple(a.shape)
            g.node(f.name).output_types[0] = TensorType(f.dtype, shape)
        g.infer_types()
        for value, out in g.outputs:
            t = g.type_of(value)
            where = f"output {out!r} is {t} for a chunk of {rows} rows"
            if not isinstance(t, TensorType) or t.shape is None or not all(isinstance(d, int) for d in t.shape):
                raise BatchError(f"{where}; tlc.dask.run needs outputs of static shape per chunk")
            if not t.shape or t.shape[0] != rows:
                raise BatchError(f"{where}; tlc.dask.run maps the model over row chunks, so every output must "
                                 f"have the chunk's rows as its axis 0 (a loss or a statistic over the batch?)")
            first = found.setdefault(out, t)
            if first.shape[1:] != t.shape[1:]:
                raise BatchError(f"{where} but {first} for another chunk size; the dims after axis 0 must not "
                                 f"depend on the rows")
    return list(found.items())


# ---------------------------------------------------------------------------- the Dask graph
def _label(name: str) -> str:
    """A task-name word of the model's name that Dask's ``key_split`` keeps (letters only, joined by '-')."""
    return "-".join(re.findall(r"[A-Za-z]+", name))[:40] or "model"


def _build(da: Any, shipped: ShippedModel, arrays: list[Any], ref: tuple[int, ...],
           out_types: list[tuple[str, TensorType]], label: str, keep: bool, fill_value: Any) -> Outputs:
    """The Dask graph: the model as one key; a Blockwise layer of runs, one task per chunk, given the model, the
    chunk's place and its feeds (Dask fuses the layers that make the feeds' chunks into it); per output a
    Blockwise layer picking its block from each run; the errors, valid rows and report the same way."""
    import dask
    from dask.array.blockwise import blockwise
    from dask.base import tokenize
    from dask.layers import ArrayValuesDep  # NOTE: how map_blocks hands each task its block_info

    token = tokenize(shipped.digest, shipped.nan_policy, keep, shipped.collect, shipped.profile, fill_value,
                     [a.name for a in arrays], ref)
    run_name = f"tlc-{label}-{token}"
    model = dask.delayed(shipped, name=f"tlc-{label}-model-{token}", traverse=False)
    starts = np.concatenate([[0], np.cumsum(ref)]).astype(int).tolist()
    chunks = [Chunk(i, starts[i], starts[i + 1]) for i in range(len(ref))]
    # NOTE: every axis of every feed is in the runs' index (their other axes one chunk each), so that no axis is
    # contracted: Dask then fuses the Blockwise layers that make the feeds' chunks into the runs' tasks
    run_ind: tuple[str, ...] = ("i",)
    args: list[Any] = [model, None, ArrayValuesDep((ref,), {(c.index,): c for c in chunks}), ("i",)]
    for k, (f, a) in enumerate(zip(shipped.feeds, arrays)):
        axes = tuple(f"feed{k}.{axis}" for axis in range(1 if f.batched else 0, a.ndim))
        args += [a, (("i",) if f.batched else ()) + axes]
        run_ind += axes
    runs = blockwise(worker.run_chunk, run_ind, *args, name=run_name, dtype=object,
                     meta=np.empty((0,) * len(run_ind), object), align_arrays=False)

    def per_chunk(name: str, func: Any, rest: tuple[int, ...], dtype: Any, *extra: Any) -> Any:
        axes = tuple(f"out.{axis}" for axis in range(len(rest)))
        extras = [x for e in extra for x in (e, None)]
        return blockwise(func, ("i",) + axes, runs, run_ind, *extras, name=name, dtype=dtype,
                         meta=np.empty((0,) * (1 + len(rest)), dtype=dtype), new_axes=dict(zip(axes, rest)),
                         align_arrays=False)

    out = Outputs()
    for k, (oname, t) in enumerate(out_types):
        dtype = np_dtype(t.dtype)
        fill = fill_value if fill_value is not None else (np.nan if dtype.kind in "fc" else 0)
        rest = tuple(t.shape[1:])
        out[oname] = per_chunk(f"tlc-{label}-{_label(oname)}-{k}-{token}", worker.pick, rest, dtype, k, rest,
                               dtype, fill)
    out.chunks = tuple(ref)
    if keep:
        out.valid = per_chunk(f"tlc-{label}-valid-{token}", worker.valid_rows, (), np.dtype(bool))
        out.errors = _reduce(runs, chunks, f"tlc-{label}-errors-{token}", worker.error_of, _errors_by_chunk)
    if shipped.collect:
        out.report = _reduce(runs, chunks, f"tlc-{label}-report-{token}", worker.report_of, merge)
    return out


def _reduce(runs: Any, chunks: list[Chunk], name: str, part: Any, combine: Any) -> Any:
    """A ``Delayed`` of ``combine([part(run) per chunk])``: small per-chunk tasks first, so that the reduce never
    moves a chunk's outputs to one worker."""
    from dask.core import flatten
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    keys = list(flatten(runs.__dask_keys__()))        # one a chunk: the runs' other axes are one chunk each
    layer: dict[Any, Any] = {(f"{name}-part", c.index): (part, keys[c.index]) for c in chunks}
    layer[name] = (combine, [(f"{name}-part", c.index) for c in chunks])
    return Delayed(name, HighLevelGraph.from_collections(name, layer, dependencies=[runs]))


def _errors_by_chunk(errors: list[ChunkError | None]) -> dict[int, ChunkError]:
    return {e.chunk: e for e in errors if e is not None}
