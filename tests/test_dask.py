"""tlc.dask: a plan mapped over Dask arrays on the local schedulers and on a LocalCluster of two processes, against
``plan.run`` on each chunk in this process; bad chunks, a worker lost mid-run, and the merged report."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tlc
from tlc.errors import BatchError, ChunkError, DTypeMismatchError, InputError

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
import tlc.dask as tdask  # noqa: E402
from tlc.dask import worker  # noqa: E402

ROWS = 100_000
# ragged, no chunk of one row (a one-row product takes BLAS's matrix-vector path)
CHUNKS = (2, 777, 20_000, 13_333, 30_000, 35_888)


def scorer() -> tlc.Graph:
    """16 features -> 64 (Relu) -> 4 logits; two outputs: softmax probabilities and the argmax label."""
    rng = np.random.default_rng(3)
    g = tlc.Graph("scorer")
    x = g.input("x", "float32", ("N", 16))
    w1 = g.constant(rng.standard_normal((16, 64)).astype(np.float32), name="w1")
    b1 = g.constant(rng.standard_normal(64).astype(np.float32), name="b1")
    w2 = g.constant(rng.standard_normal((64, 4)).astype(np.float32), name="w2")
    h = g.add_node("Relu", [g.add_node("Add", [g.add_node("MatMul", [x, w1]), b1])])
    logits = g.add_node("MatMul", [h, w2])
    g.output(g.add_node("Softmax", [logits], axis=-1), "probs")
    g.output(g.add_node("ArgMax", [logits], axis=-1, keepdims=0), "label")
    return g


@pytest.fixture(scope="module")
def graph() -> tlc.Graph:
    return scorer()


def chunk_runs(plan: tlc.Plan, x: np.ndarray, chunks) -> dict[str, np.ndarray]:
    """What ``plan.run`` gives for each chunk of ``x``'s rows (sizes ``chunks``), the chunks' rows in order: the
    promise of tlc.dask. Not one run over all rows: OpenBLAS's products may round a row differently for another
    number of rows (the scorer's 64 -> 4 MatMul, on a Zen 4 with numpy loaded before tlc, so SkylakeX kernels:
    row 0's probabilities 1.0252038e-14 in a run of 100,000 rows, 1.0251999e-14 in one of 2)."""
    bounds = np.cumsum((0, *chunks))
    runs = [plan.run({"x": x[a:b]}) for a, b in zip(bounds[:-1], bounds[1:])]
    return {name: np.concatenate([r[name] for r in runs]) for name in runs[0]}


@pytest.fixture(scope="module")
def one_thread(graph) -> tlc.Plan:
    """The scorer as the workers here run it: at one thread (two CPUs over two tasks at once), eager JIT."""
    return tlc.compile(graph, jit="eager", num_threads=1)


@pytest.fixture(scope="module")
def data(one_thread) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The rows and what the plan gives for them in CHUNKS."""
    x = np.random.default_rng(0).standard_normal((ROWS, 16)).astype(np.float32)
    return x, chunk_runs(one_thread, x, CHUNKS)


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert np.array_equal(got[name], want[name]), name        # bit for bit


def with_bad_chunk(x: np.ndarray, block: int, bad) -> da.Array:
    """``x`` in CHUNKS, declared float32, with block ``block`` replaced by ``bad(block)`` when computed."""
    def make(b, block_info=None):
        return bad(b) if block_info[0]["chunk-location"][0] == block else b
    return da.from_array(x, chunks=(CHUNKS, 16)).map_blocks(make, dtype=np.float32)


# ---------------------------------------------------------------------------- local schedulers
def test_threaded_scheduler_matches_the_chunks_runs_bit_for_bit(graph, data):
    x, want = data
    outs = tdask.run(graph, {"x": da.from_array(x, chunks=(CHUNKS, 16))})
    assert outs["probs"].chunks == (CHUNKS, (4,)) and outs["label"].chunks == (CHUNKS,)
    assert outs["probs"].dtype == np.float32 and outs["label"].dtype == np.int64
    got = dict(zip(outs, dask.compute(*outs.values(), scheduler="threads")))
    assert_same(got, want)


def test_outputs_share_one_run_per_chunk(graph, data, one_thread):
    """Computing both outputs together runs the model once per chunk, not once per output."""
    x, _ = data
    outs = tdask.run(graph, {"x": da.from_array(x[:2000], chunks=500)}, name="shared")
    res = outs.compute(scheduler="sync")
    runs = sum(p.runs for p in worker.cached_plans())
    res = outs.compute(scheduler="sync")
    assert sum(p.runs for p in worker.cached_plans()) - runs == 4
    assert_same(res.outputs, chunk_runs(one_thread, x, (500,) * 4))
    assert [k[0] for k in outs["probs"].__dask_keys__()[0]][0].startswith("tlc-shared-probs-")


def test_a_model_file_and_a_graph_give_the_same(graph, data, one_thread, tmp_path):
    x, _ = data
    path = tmp_path / "scorer.onnx"
    tlc.save(graph, path)
    feeds = {"x": da.from_array(x[:3000], chunks=1000)}
    from_file = tdask.run(path, feeds).compute(scheduler="sync").outputs
    assert_same(from_file, chunk_runs(one_thread, x, (1000,) * 3))


def test_feeds_are_rechunked_to_the_first_batched_ones_and_fixed_ones_go_whole():
    """x [N, 2, 3] chunked along every axis, z [N, 3] in other row chunks, w [3] as numpy: x's row chunks for all,
    one chunk along every other axis, w whole to every chunk."""
    g = tlc.Graph("mixed")
    x, z, w = g.input("x", "float32", ("N", 2, 3)), g.input("z", "float32", ("N", 3)), g.input("w", "float32", (3,))
    g.output(g.add_node("Add", [g.add_node("Mul", [x, w]), g.add_node("Unsqueeze", [z, g.constant(
        np.array([1], np.int64), name="axis")])]), "y")
    rng = np.random.default_rng(1)
    xs, zs, ws = (rng.standard_normal(s).astype(np.float32) for s in ((50, 2, 3), (50, 3), (3,)))
    outs = tdask.run(g, {"x": da.from_array(xs, chunks=(20, 1, 2)), "z": da.from_array(zs, chunks=7), "w": ws})
    assert outs["y"].chunks == ((20, 20, 10), (2,), (3,))
    np.testing.assert_array_equal(outs["y"].compute(scheduler="sync"), xs * ws + zs[:, None, :])


def test_threads_per_plan_never_oversubscribe(graph, data):
    """Two tasks at once on the threaded scheduler: each plan gets the CPUs over the tasks (>= 1)."""
    x, _ = data
    with dask.config.set(num_workers=2):
        res = tdask.run(graph, {"x": da.from_array(x[:4000], chunks=1000)}, collect=True,
                        name="threads").compute(scheduler="threads")
    cpus = len(os.sched_getaffinity(0))
    assert {w["threads"] for w in res.report.workers()} == {max(1, cpus // 2)}


@pytest.mark.parametrize("reason, bad, message", [
    ("dtype", lambda b: b.astype(np.float64), r"chunk 3 \(rows 20779:34112\), input 'x': expected dtype float32, "
                                              r"got float64"),
    ("shape", lambda b: b[:-1], r"chunk 3 \(rows 20779:34112\), input 'x': expected shape \[13333, 16\], "
                                r"got \[13332, 16\]"),
    ("nan", lambda b: np.where(np.arange(len(b))[:, None] == 5, np.float32(np.nan), b),
     r"chunk 3 \(rows 20779:34112\), input 'x': 16 NaN value\(s\) and nan_policy='raise'; the first in row 20784"),
])
def test_a_bad_chunk_is_named(graph, data, reason, bad, message):
    x, _ = data
    with pytest.raises(ChunkError, match=message) as info:
        tdask.run(graph, {"x": with_bad_chunk(x, 3, bad)}, nan_policy="raise")["label"].compute(scheduler="sync")
    assert (info.value.chunk, info.value.rows, info.value.reason, info.value.name) == (3, (20779, 34112), reason,
                                                                                       "x")


def test_errors_keep_returns_the_finished_chunks(graph, data):
    x, want = data
    outs = tdask.run(graph, {"x": with_bad_chunk(x, 2, lambda b: b.astype(np.float64))}, errors="keep")
    res = outs.compute(scheduler="threads")
    assert list(res.errors) == [2] and res.errors[2].reason == "dtype"
    assert np.array_equal(np.flatnonzero(~res.valid), np.arange(779, 20779))
    for name in want:
        assert np.array_equal(res.outputs[name][res.valid], want[name][res.valid]), name
    assert np.isnan(res.outputs["probs"][~res.valid]).all() and (res.outputs["label"][~res.valid] == 0).all()


def test_run_refuses_what_cannot_be_mapped_before_computing(graph, data):
    x, _ = data
    with pytest.raises(DTypeMismatchError, match=r"input 'x': the model expects float32, the dask array holds "
                                                 r"float64"):
        tdask.run(graph, {"x": da.from_array(x.astype(np.float64), chunks=1000)})
    with pytest.raises(InputError, match=r"unknown input\(s\) \['y'\], missing input\(s\) \['x'\]"):
        tdask.run(graph, {"y": da.from_array(x, chunks=1000)})
    g = tlc.Graph("total")
    axes = g.constant(np.array([0], np.int64), name="axes")
    g.output(g.add_node("ReduceSum", [g.input("x", "float32", ("N", 16)), axes], keepdims=0), "s")
    with pytest.raises(BatchError, match=r"output 's' is float32\[16\] for a chunk of 1000 rows; "
                                         r".*every output must have the chunk's rows as its axis 0"):
        tdask.run(g, {"x": da.from_array(x, chunks=1000)})
    g = tlc.Graph("pairs")
    g.output(g.add_node("MatMul", [g.input("x", "float32", ("N", "N")), g.input("y", "float32", ("N", 16))]), "z")
    with pytest.raises(BatchError, match=r"the batch dim also sizes a later axis of input 'x'"):
        tdask.run(g, {"x": da.zeros((100, 100), chunks=10, dtype=np.float32), "y": da.from_array(x[:100], 10)})


def test_without_dask_run_says_what_to_install(graph, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.array", None)
    with pytest.raises(tlc.BackendError, match=r'pip install "tlc\[dask\]"'):
        tdask.run(graph, {"x": np.zeros((4, 16), np.float32)})


# ---------------------------------------------------------------------------- a LocalCluster of two processes
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


def test_cluster_matches_the_chunks_runs_and_reports_each_worker(graph, data, client):
    x, want = data
    outs = tdask.run(graph, {"x": da.from_array(x, chunks=(CHUNKS, 16))}, profile=True)
    res = outs.compute()
    assert_same(res.outputs, want)
    workers = res.report.workers()
    assert sorted(w["worker"] for w in workers) == sorted(client.scheduler_info()["workers"])
    assert sum(w["rows"] for w in workers) == ROWS and sum(w["chunks"] for w in workers) == len(CHUNKS)
    cpus = len(os.sched_getaffinity(0))
    assert {w["threads"] for w in workers} == {max(1, cpus // 2)}   # two one-thread workers on this host
    steps = res.report.steps()
    assert [s["calls"] for s in steps] == [len(CHUNKS)] * len(steps)  # every chunk's run, summed over workers
    trace = res.report.chrome_trace()["traceEvents"]
    procs = [e for e in trace if e["name"] == "process_name"]
    assert len(procs) == 2 and {e["pid"] for e in trace} == {1, 2}
    assert sorted(e["name"] for e in trace if e.get("cat") == "chunk") == sorted(f"chunk {i}"
                                                                                 for i in range(len(CHUNKS)))


def kill_once(marker: str, prefix: str, block: int):
    """A worker plugin: the worker that starts running task ``prefix`` on chunk ``block`` dies there (os._exit),
    the first time only (the marker file says it happened). Defined here so that it pickles by value: the workers
    cannot import this file."""
    from dask.utils import key_split
    from distributed.diagnostics.plugin import WorkerPlugin

    class KillOnce(WorkerPlugin):
        def transition(self, key, start, finish, **kwargs):
            if (finish == "executing" and isinstance(key, tuple) and key_split(key) == prefix
                    and key[1] == block and not os.path.exists(marker)):
                open(marker, "w").close()
                os._exit(1)

    return KillOnce()


def test_a_worker_lost_mid_run_is_retried_without_wrong_rows(graph, data, client, tmp_path):
    x, want = data
    marker = tmp_path / "killed"
    client.register_plugin(kill_once(str(marker), "tlc-lost", 3), name="kill-once")
    try:
        outs = tdask.run(graph, {"x": da.from_array(x, chunks=(CHUNKS, 16))}, name="lost")
        got = dict(zip(outs, client.compute(list(outs.values()), sync=True)))
    finally:
        client.unregister_worker_plugin("kill-once")
    assert marker.exists()                       # a worker did die running chunk 3
    assert_same(got, want)


def test_cluster_keeps_the_finished_chunks_of_a_bad_run(graph, data, client):
    x, want = data
    with pytest.raises(ChunkError, match=r"^chunk 4 \(rows 34112:64112\), input 'x': expected shape") as info:
        tdask.run(graph, {"x": with_bad_chunk(x, 4, lambda b: b[:-1])})["label"].compute()
    assert (info.value.chunk, info.value.reason) == (4, "shape")     # the fields crossed the processes
    outs = tdask.run(graph, {"x": with_bad_chunk(x, 4, lambda b: b[:-1])}, errors="keep")
    res = outs.compute()
    assert list(res.errors) == [4]
    assert str(res.errors[4]) == "chunk 4 (rows 34112:64112), input 'x': expected shape [30000, 16], got [29999, 16]"
    assert np.array_equal(np.flatnonzero(~res.valid), np.arange(34112, 64112))
    assert np.array_equal(res.outputs["label"][res.valid], want["label"][res.valid])
