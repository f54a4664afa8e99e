"""The tiled transposed copy (``tlc.kernels.transpose``) against numpy, and the plans that take it."""

from __future__ import annotations

import itertools

import numpy as np

import tlc
from tlc.kernels import transpose as T


def test_tiles_copy_every_permutation_that_takes_them():
    """Every permutation of ranks 2 to 4 that takes the tiles (ragged tiles: 33, 17, 196 and 7 are no multiples
    of 16), float32 and float64; the others keep the last axis (whole rows) or read at a stride numpy's copy
    handles: no multiple of 1 KiB, of 256 bytes in a small array (ViT's K^T at batch 1, not at 8)."""
    rng = np.random.default_rng(0)
    taken = 0
    for dtype, shape in ((np.float32, (2, 256)), (np.float32, (3, 17, 256)), (np.float64, (2, 33, 128)),
                         (np.float32, (2, 3, 5, 256)), (np.float32, (2, 3, 5, 192)), (np.float32, (40, 7, 64)),
                         (np.float64, (3, 32))):
        x = rng.standard_normal(shape).astype(dtype)
        for perm in itertools.permutations(range(len(shape))):
            plan = T.plan(shape, perm, x.itemsize)
            if plan is None:
                stride = int(np.prod(shape[perm[-1] + 1:])) * x.itemsize
                assert perm[-1] == len(shape) - 1 or stride % 256, (shape, perm)
                continue
            out = np.full([shape[k] for k in perm], np.nan, dtype)
            assert plan[3] == 1
            T.copy(x.reshape(-1), out.reshape(-1), *(np.array(a, np.int64) for a in plan[:3]))
            np.testing.assert_array_equal(out, x.transpose(perm), err_msg=f"{shape} {perm}")
            taken += 1
    assert taken > 30
    assert T.plan((1, 3, 197, 64), (0, 1, 3, 2), 4) is not None and T.plan((8, 3, 197, 64), (0, 1, 3, 2), 4) is None
    assert T.plan((1, 256, 196), (0, 2, 1), 4) is None and T.plan((8, 196, 256), (0, 2, 1), 4) is not None


def test_a_plan_runs_the_tiles_for_a_key_transpose(rng):
    """BERT's K^T ([1, 128, 12, 64] -> [1, 12, 64, 128]) into a Softmax: the transpose is a tiled copy."""
    g = tlc.Graph("kt")
    x = g.input("x", "float32", (1, 32, 4, 64))
    g.output(g.add_node("Softmax", [g.add_node("Transpose", [x], perm=[0, 2, 3, 1])], axis=-1), "y")
    plan = tlc.compile(g, jit="eager", opt_level=0)
    feeds = {"x": rng.standard_normal((1, 32, 4, 64), dtype=np.float32)}
    want = tlc.reference.run(g, feeds)["y"]
    np.testing.assert_allclose(plan.run(feeds)["y"], want, rtol=1e-6, atol=1e-7)
    (step,) = [s for s in plan.stats().steps if s.op == "Transpose"]
    assert step.mode == "native" and "tiles" in step.reason


def test_large_transposes_take_the_tiles_in_parts_at_several_threads(rng):
    """From ``PARALLEL_BYTES`` at several threads the tiles run a part a thread (runs of (i0, i1) planes) at any
    stride; an array of one plane, a small one, and one thread keep the serial rule. Against numpy; and a plan at
    2 threads says so."""
    for shape, perm, parts in (((8, 3, 197, 64), (0, 1, 3, 2), 2), ((8, 256, 196), (0, 2, 1), 2),
                               ((3, 300, 301), (2, 0, 1), 2), ((600, 500), (1, 0), None),
                               ((2, 96, 196), (0, 2, 1), None)):
        x = rng.standard_normal(shape).astype(np.float32)
        plan = T.plan(shape, perm, 4, threads=2)
        assert (plan[3] if plan else None) == parts, (shape, plan)
        assert T.plan(shape, perm, 4, threads=1) is None   # (strides numpy's copy walks well)
        if plan is None:
            continue
        out = np.full([shape[k] for k in perm], np.nan, np.float32)
        T.copy_parallel(x.reshape(-1), out.reshape(-1), *(np.array(a, np.int64) for a in plan[:3]), plan[3])
        np.testing.assert_array_equal(out, x.transpose(perm), err_msg=f"{shape} {perm}")
    g = tlc.Graph("big")
    x = g.input("x", "float32", (8, 3, 197, 64))
    g.output(g.add_node("Transpose", [x], perm=[0, 1, 3, 2]), "y")
    plan = tlc.compile(g, jit="eager", opt_level=0, num_threads=2)
    feeds = {"x": rng.standard_normal((8, 3, 197, 64), dtype=np.float32)}
    np.testing.assert_array_equal(plan.run(feeds)["y"], feeds["x"].transpose(0, 1, 3, 2))
    want = "tiles of 16 x 16 in 2 parts" if plan.options.threads >= 2 else None
    assert plan.stats().steps[0].notes == ([want] if want else [])
