"""tlc.kernels.parts: arguments packed into one struct and read back by a step's spec; the drivers' phases."""

import numba
import numpy as np
import pytest
from numba import njit, types

from tlc.kernels import parts

SPEC = "array:int64:2:C,int64,float64,array:float32:2:A,bool,array:float32:1:C"


def _record(ctx, phase, p, n):
    """Phase 1 checks that phase 0 finished (every slot written), phase 2 reads a strided view and scalars."""
    log, n0, scale, view, flag, out = parts.unpack(ctx, SPEC)
    if phase == 1:
        done = 0
        for q in range(n0):
            done += log[0, q] > 0
        log[1, p] = n + 1 if done == n0 else -1
    else:
        log[phase, p] = n + 1
        if phase == 2:
            out[p] = view[p, 1] * scale if flag else np.float32(-1)


STEP = parts.compile_step(_record)


@njit(nogil=True)
def _run(driver, step, n0, n1, n2, log, scale, view, flag, out):
    parts.drive(driver, step, parts.pack((log, n0, scale, view, flag, out)), n0, n1, n2)


@pytest.mark.parametrize("parallel", [False, True])
def test_drivers_run_every_part_of_each_phase_in_order_on_the_packed_arguments(parallel):
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base.T[::2]                       # [3, 4], strides (8, 24): no contiguous layout
    log, out = np.zeros((3, 8), np.int64), np.zeros(5, np.float32)
    _run(parts.driver(parallel), STEP.address, 3, 7, 3, log, 0.5, view, True, out)
    assert log[0, :3].tolist() == [4] * 3 and log[1, :7].tolist() == [8] * 7 and log[2, :3].tolist() == [4] * 3
    assert not log[0, 3:].any() and not log[1, 7:].any() and not log[2, 3:].any()
    np.testing.assert_array_equal(out[:3], view[:, 1] * 0.5)
    _run(parts.driver(parallel), STEP.address, 0, 0, 2, log, 2.0, view, False, out)   # empty phases skipped
    assert out[:2].tolist() == [-1, -1]


def test_spec_names_types_and_refuses_others():
    members = (types.int64[::1], types.boolean, types.float32[:, :], types.float64)
    assert parts.spec(members) == "array:int64:1:C,bool,array:float32:2:A,float64"
    assert parts.parse(parts.spec(members)) == types.Tuple(members)
    with pytest.raises(TypeError):
        parts.spec((types.unicode_type,))
    with pytest.raises(KeyError):
        parts.parse("array:object:1:C")
