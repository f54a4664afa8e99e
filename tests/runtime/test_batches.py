"""plan.run_batches: ragged input dicts re-batched and split back bit for bit, a static batch padded, a bounded set
of specializations, a lazy generator input, errors naming the input dict, the progress bar.

The model's data are small integers held as float32, so every product and sum is exact whatever the order of its
terms: one run over all the rows, chunk runs of any size, the JIT's fallbacks and its native kernels all agree bit
for bit, and any difference is a row put in the wrong place.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import tlc
from tlc.errors import BatchError, DTypeMismatchError, InputError, ShapeMismatchError
from tlc.io.arrays import RowReader
from tlc.runtime.batches import run_file


def scorer(batch: int | str = "N") -> tlc.Graph:
    """Two inputs of different ranks and two outputs: y[batch, 3] = relu(2x + 1) @ w, z[batch] = max(x, axis 1) * s."""
    g = tlc.Graph("scorer")
    x = g.input("x", "float32", (batch, 6))
    s = g.input("s", "float32", (batch,))
    w = g.constant(np.arange(18, dtype=np.float32).reshape(6, 3) - 8, name="w")
    two, one = g.constant(np.float32(2), name="two"), g.constant(np.float32(1), name="one")
    h = g.add_node("Relu", [g.add_node("Add", [g.add_node("Mul", [x, two]), one])])
    g.output(g.add_node("MatMul", [h, w]), "y")
    row_max = g.add_node("ReduceMax", [x, g.constant(np.array([1]), name="axis")], keepdims=0)
    g.output(g.add_node("Mul", [row_max, s]), "z")
    return g


def dicts(sizes, seed=0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.integers(-5, 6, (n, 6)).astype(np.float32), "s": rng.integers(-3, 4, n).astype(np.float32)}
            for n in sizes]


def concatenated(feeds) -> dict[str, np.ndarray]:
    return {name: np.concatenate([f[name] for f in feeds]) for name in ("x", "s")}


def assert_split(outputs, sizes, whole):
    """``outputs``: one dict per input dict, holding exactly that dict's rows of ``whole``, bit for bit."""
    assert len(outputs) == len(sizes)
    start = 0
    for i, (out, n) in enumerate(zip(outputs, sizes)):
        assert list(out) == ["y", "z"], i
        for name, value in out.items():
            want = whole[name][start:start + n]
            assert value.dtype == want.dtype and value.shape == want.shape, (i, name, value.shape)
            np.testing.assert_array_equal(value, want, err_msg=f"input dict {i}, output {name}")
        start += n


@pytest.fixture(scope="module")
def plan():
    return tlc.compile(scorer("N"))


@pytest.fixture(scope="module")
def static_plan():
    return tlc.compile(scorer(4))


def signatures(p) -> set[str]:
    return {spec.signature for spec in p.specializations()}


# ---------------------------------------------------------------------------- re-batching
def test_ragged_dicts_are_rebatched_and_split_back(plan):
    sizes = [1, 3, 7, 2]
    feeds = dicts(sizes)
    before = signatures(plan)
    outputs = list(plan.run_batches(feeds, batch_size=4))
    assert signatures(plan) - before <= {"x[4, 6], s[4]", "x[1, 6], s[1]"}   # 3 chunks of 4 rows, then 1
    assert_split(outputs, sizes, plan.run(concatenated(feeds)))


def test_specializations_stay_bounded():
    """Any mix of dict sizes runs at batch_size rows and at most one remainder a call; nothing per dict size."""
    fresh = tlc.compile(scorer("N"))
    rng = np.random.default_rng(1)
    sizes = [int(n) for n in rng.integers(0, 10, 40)]
    total = sum(sizes)
    assert total % 8 != 0
    outputs = list(fresh.run_batches(dicts(sizes, seed=2), batch_size=8))
    assert_split(outputs, sizes, fresh.run(concatenated(dicts(sizes, seed=2))))
    assert signatures(fresh) == {"x[8, 6], s[8]", f"x[{total % 8}, 6], s[{total % 8}]", f"x[{total}, 6], s[{total}]"}
    for extra in ([3, 9, 2, 5], [8, 8], [16, 1]):   # remainders 3, none, 1
        list(fresh.run_batches(dicts(extra), batch_size=8))
    assert len(fresh.specializations()) == 5         # + x[3] and x[1]: one per remainder size, none per dict size


def test_static_batch_pads_the_last_chunk(plan, static_plan, monkeypatch):
    """A model exported at batch 4 runs chunks of exactly 4 rows; the last is padded with copies of its last row."""
    sizes = [1, 3, 7, 2]
    feeds = dicts(sizes, seed=3)
    fed = []
    run = static_plan.run
    monkeypatch.setattr(static_plan, "run", lambda f, **kw: fed.append({k: v.copy() for k, v in f.items()}) or run(f))
    outputs = list(static_plan.run_batches(feeds))           # batch_size: the model's 4
    assert_split(outputs, sizes, plan.run(concatenated(feeds)))
    assert [len(f["x"]) for f in fed] == [4, 4, 4, 4]
    last_real = feeds[-1]["x"][-1]
    np.testing.assert_array_equal(fed[-1]["x"], np.stack([last_real] * 4))   # 13 rows: 1 real, 3 copies of it
    assert len(static_plan.specializations()) == 1
    with pytest.raises(BatchError, match=r"batch dim is fixed at 4 .*batch_size must be 4 or None, got 8"):
        static_plan.run_batches(feeds, batch_size=8)


def test_a_generator_is_read_lazily_and_rows_without_the_batch_axis_come_back_without_it(plan):
    rows = dicts([10], seed=4)[0]
    pulled = []

    def one_row_at_a_time():
        for i in range(10):
            pulled.append(i)
            if i == 5:
                yield {"x": rows["x"][5], "s": rows["s"][5]}          # one row, no batch axis
            elif i == 6:
                yield {"x": rows["x"][6:6], "s": rows["s"][6:6]}      # no rows at all
            else:
                yield {"x": rows["x"][i:i + 1], "s": rows["s"][i:i + 1]}

    stream = plan.run_batches(one_row_at_a_time(), batch_size=4)
    first = next(stream)
    assert len(pulled) == 4                  # the first chunk's dicts, not the whole iterable
    outputs = [first, *stream]
    assert outputs[5]["y"].shape == (3,) and outputs[5]["z"].shape == ()
    assert outputs[6]["y"].shape == (0, 3) and outputs[6]["z"].shape == (0,)
    whole = plan.run(rows)
    sizes = [1] * 10
    sizes[6] = 0
    batched = [{k: v[np.newaxis] for k, v in o.items()} if i == 5 else o for i, o in enumerate(outputs)]
    np.testing.assert_array_equal(np.concatenate([o["y"] for o in batched]), np.delete(whole["y"], 6, axis=0))
    np.testing.assert_array_equal(np.concatenate([o["z"] for o in batched]), np.delete(whole["z"], 6))


# ---------------------------------------------------------------------------- errors
BAD = {
    "name": (InputError, lambda f: {"x": f["x"], "scale": f["s"]}, r"unknown input name\(s\) 'scale'; expected "
             r"inputs: x: float32\[N,6\], s: float32\[N\]"),
    "dtype": (DTypeMismatchError, lambda f: {"x": f["x"].astype(np.float64), "s": f["s"]},
              r"input 'x': expected dtype float32, got float64"),
    "rank": (ShapeMismatchError, lambda f: {"x": f["x"][None], "s": f["s"]},
             r"input 'x': expected rank 2 \(float32\[N,6\], the batch axis first\) or 1 \(one row without it\); "
             r"got shape \[1, 2, 6\]"),
    "rows": (ShapeMismatchError, lambda f: {"x": f["x"], "s": f["s"][:1]},
             r"the inputs disagree on the number of rows \('x' has 2, 's' has 1\)"),
    "row shape": (ShapeMismatchError, lambda f: {"x": f["x"][:, :5], "s": f["s"]},
                  r"input 'x': expected shape float32\[N,6\], got \[2, 5\]"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_dict_is_named_after_the_dicts_before_it_are_yielded(plan, case):
    error, spoil, message = BAD[case]
    good = dicts([3, 2, 2], seed=5)
    stream = plan.run_batches([good[0], good[1], spoil(good[2]), good[0]], batch_size=4)
    got = []
    with pytest.raises(error, match=r"^input dict 2: " + message):
        for out in stream:
            got.append(out)
    assert_split(got, [3, 2], plan.run(concatenated(good[:2])))


def test_the_iterables_own_failure_comes_after_the_dicts_before_it(plan):
    good = dicts([3, 2], seed=7)

    def failing():
        yield from good
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for out in plan.run_batches(failing(), batch_size=4):
            got.append(out)
    assert_split(got, [3, 2], plan.run(concatenated(good)))
    with pytest.raises(InputError, match=r"input dict\(s\) 0, 1 have no rows, and no dict had any"):
        list(plan.run_batches(dicts([0, 0])))


def test_inputs_without_one_batch_axis_are_refused_by_the_call():
    def model(x_shape, s_shape):
        g = tlc.Graph("two")
        x, s = g.input("x", "float32", x_shape), g.input("s", "float32", s_shape)
        g.output(g.add_node("Add", [g.add_node("ReduceMax", [x], keepdims=0), g.add_node("ReduceMax", [s],
                                                                                            keepdims=0)]), "y")
        return tlc.compile(g)

    with pytest.raises(BatchError, match=r"the inputs disagree on the batch dim \(their leading dims: 'x': 'N', "
                                         r"'s': 'M'\)"):
        model(("N", 6), ("M",)).run_batches([])
    with pytest.raises(BatchError, match=r"the batch dim 'N' also sizes a later axis of input 's'"):
        model(("N", 6), ("N", "N")).run_batches([])


def test_a_batch_that_cannot_be_split_is_a_named_error():
    g = tlc.Graph("losses")
    x = g.input("x", "float32", ("N", 3))
    g.output(g.add_node("Relu", [x]), "y")
    g.output(g.add_node("Reshape", [x, g.constant(np.array([-1]), name="flat")]), "flat")       # N*3 values
    with_loss = scorer("N")
    with_loss.output(with_loss.add_node("ReduceSum", [with_loss.node("x").outputs[0]], keepdims=0), "loss")
    feeds = [{"x": np.ones((2, 3), np.float32)}] * 3
    with pytest.raises(BatchError, match=r"output 'flat' has shape \[12\] for a run of 4 rows \(of input dicts "
                                         r"0-1\): its leading dim is not the batch"):
        list(tlc.compile(g).run_batches(feeds, batch_size=4))
    with pytest.raises(BatchError, match=r"output 'loss' \(float32\[\]\) has no leading batch axis"):
        tlc.compile(with_loss).run_batches([])        # refused by the call, before any row
    with pytest.raises(InputError, match=r"got one dict \(keys \['x'\]\); pass \[feeds\]"):
        tlc.compile(g).run_batches(feeds[0])


# ---------------------------------------------------------------------------- files
def test_run_file_streams_npz_members_of_any_layout(plan, tmp_path):
    """run_file reads a compressed member by rows, a big-endian one converted, a Fortran-ordered one whole."""
    feeds = dicts([11], seed=6)[0]
    path = tmp_path / "in.npz"
    np.savez_compressed(path, x=np.asfortranarray(feeds["x"]), s=feeds["s"].astype(">f4"))
    assert run_file(plan, path, tmp_path / "out.npz", batch_size=4) == 11
    with RowReader(path) as reader:   # NOTE: big-endian rows come native (native kernels would misread them)
        assert [b["s"].dtype.isnative for b in reader.blocks(4)] == [True] * 3
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == ["y", "z"]
        assert_split([dict(out)], [11], plan.run(feeds))
    np.savez(path, x=feeds["x"], s=feeds["s"][:5])
    with pytest.raises(InputError, match=r"the arrays disagree on their number of rows \('x' has 11, 's' has 5\)"):
        run_file(plan, path, tmp_path / "bad.npz")
    np.savez(path, x=feeds["x"], t=feeds["s"])
    with pytest.raises(InputError, match=r"in.npz: arrays 't' are not inputs of the model"):
        run_file(plan, path, tmp_path / "bad.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "out.npz"]


# ---------------------------------------------------------------------------- progress
def test_progress_bar_counts_rows(plan, monkeypatch):
    pytest.importorskip("tqdm")
    bar = io.StringIO()
    list(plan.run_batches(dicts([1, 3, 7, 2]), batch_size=4, progress=bar))
    text = bar.getvalue()
    assert "13/13" in text and "rows/s" in text and "scorer" in text
    monkeypatch.setitem(sys.modules, "tqdm", None)          # as if tqdm were not installed
    with pytest.raises(ImportError, match=r"progress needs tqdm.*pip install 'tlc\[progress\]'"):
        plan.run_batches(dicts([1]), progress=True)
    assert len(list(plan.run_batches(dicts([1])))) == 1     # without a bar, no tqdm needed
