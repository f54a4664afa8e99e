"""Profiler exports, InferenceSession against onnxruntime, thread settings, the memory planner's rules."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tlc
from tlc.ir.types import TensorType
from tlc.runtime import InferenceSession, compile, threads
from tlc.runtime.memory import StepSpec, plan_memory

ort = pytest.importorskip("onnxruntime")


def small_graph() -> tlc.Graph:
    g = tlc.Graph("small")
    x = g.input("x", "float32", ("N", 4))
    w = g.constant(np.eye(4, dtype=np.float32) * 2, name="w")
    h = g.add_node("MatMul", [x, w])
    g.output(g.add_node("Softmax", [g.add_node("Tanh", [h])]), "y")
    return g


def test_profile_table_chrome_trace_and_collapsed(tmp_path, rng):
    plan = compile(small_graph(), opt_level=0, jit="off")
    x = rng.standard_normal((3, 4), dtype=np.float32)
    plan.run({"x": x})                                     # not profiled
    for _ in range(3):
        plan.run({"x": x}, profile=True)
    prof = plan.profile()
    rows = prof.summary()
    assert {r["op"] for r in rows} == {"MatMul", "Tanh", "Softmax"}
    assert all(r["calls"] == 3 for r in rows)
    assert [r["total_ms"] for r in rows] == sorted((r["total_ms"] for r in rows), reverse=True)
    assert abs(sum(r["percent"] for r in rows) - 100.0) < 1e-6
    assert "MatMul" in str(prof) and "3 run(s)" in str(prof)

    path = tmp_path / "trace.json"
    prof.to_chrome_trace(path)
    with open(path) as f:
        doc = json.load(f)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 3 * (3 + 1)                          # 3 steps and the run itself, 3 runs
    assert {e["tid"] for e in xs} == {1}
    steps = [e for e in xs if e["cat"] != "plan"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in steps)
    assert [e["name"] for e in steps[:3]] == ["MatMul", "Tanh", "Softmax"]

    collapsed = tmp_path / "stacks.txt"
    prof.to_collapsed(collapsed)
    lines = collapsed.read_text().splitlines()
    assert sorted(line.rsplit(" ", 1)[0] for line in lines) == [
        "small;library;MatMul", "small;library;Softmax", "small;library;Tanh"]
    assert all(int(line.rsplit(" ", 1)[1]) >= 1 for line in lines)

    assert len(plan.profile(reset=True).runs) == 3 and plan.profile().runs == []


def write_model(path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.linspace(-1, 1, 12).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "session_model", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9,
                              producer_name="tests")
    onnx.save(model, str(path))


def test_inference_session_mirrors_onnxruntime(tmp_path, rng):
    path = tmp_path / "m.onnx"
    write_model(path)
    ours = InferenceSession(str(path))
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for mine, ref in [(ours.get_inputs(), theirs.get_inputs()), (ours.get_outputs(), theirs.get_outputs())]:
        assert [(a.name, a.shape, a.type) for a in mine] == [(a.name, a.shape, a.type) for a in ref]
    assert ours.get_providers() == ["CPUExecutionProvider"]
    assert ours.get_modelmeta().producer_name == "tests"
    for batch in (1, 5):
        x = rng.standard_normal((batch, 4), dtype=np.float32)
        (mine,) = ours.run(None, {"x": x})
        (ref,) = theirs.run(None, {"x": x})
        np.testing.assert_allclose(mine, ref, rtol=1e-5, atol=1e-6)
    assert len(ours.run(["y"], {"x": x})) == 1
    with pytest.raises(tlc.InputError, match="unknown output name"):
        ours.run(["nope"], {"x": x})
    with pytest.raises(tlc.BackendError, match="providers"):
        InferenceSession(str(path), providers=["TensorrtExecutionProvider"])
    from_bytes = InferenceSession(path.read_bytes(), jit="off")
    np.testing.assert_allclose(from_bytes.run(None, {"x": x})[0], ref, rtol=1e-5, atol=1e-6)


def test_num_threads_governs_numba_and_blas_during_a_run_only(rng, monkeypatch):
    """A run sets Numba's count on its thread and BLAS to one thread (parts run inside Numba's pool), and gives
    the caller's numpy its BLAS count back afterwards, nested and concurrent runs included."""
    numba = pytest.importorskip("numba")
    from tlc.kernels import blas

    monkeypatch.setattr(threads.Placement, "contended", lambda self, n: False)   # whatever else the machine runs

    if not blas.AVAILABLE:
        pytest.skip(f"numpy's BLAS not governable here: {blas.REASON}")
    before = blas.get_threads()
    seen = []
    outer, inner = threads.Governor(3), threads.Governor(1)
    token = outer.enter()
    seen.append(blas.get_threads())
    nested = inner.enter()                         # nested (or concurrent) runs: the outermost restores
    seen.append(blas.get_threads())
    inner.exit(nested)
    seen.append(blas.get_threads())
    outer.exit(token)
    assert seen == [1, 1, 1] and blas.get_threads() == before
    plan = compile(small_graph(), num_threads=1)
    plan.run({"x": rng.standard_normal((2, 4), dtype=np.float32)})
    assert numba.get_num_threads() == 1
    assert blas.get_threads() == before              # the caller's numpy keeps its BLAS threads
    compile(small_graph()).run({"x": rng.standard_normal((2, 4), dtype=np.float32)})   # back to every core
    assert numba.get_num_threads() == min(threads.cores(), numba.config.NUMBA_NUM_THREADS)


def test_a_plan_none_of_whose_steps_uses_the_pool_runs_at_one_thread_unprobed(rng):
    """A specialization none of whose calls can run on Numba's pool (serial kernels, numpy's functions) settles
    at one thread at its first run, never probes and says why; one with a kernel big enough for the pool's
    parallel variant probes."""
    small = compile(small_graph(), num_threads=2, jit="eager")
    feeds = {"x": rng.standard_normal((2, 4), dtype=np.float32)}
    for _ in range(3):
        np.testing.assert_allclose(small.run(feeds)["y"], tlc.reference.run(small_graph(), feeds)["y"], rtol=1e-6)
    (state,) = small._specs.values()
    assert state.probe is None and state.one_thread and state.governors is state.single
    assert small.stats().specializations[0]["threads"] == "runs at one thread (no step uses the thread pool)"
    g = tlc.Graph("wide")
    x = g.input("x", "float32", (512, 1024))
    g.output(g.add_node("Tanh", [g.add_node("Exp", [x])]), "y")
    wide = compile(g, num_threads=2, jit="eager")
    wide.run({"x": rng.standard_normal((512, 1024), dtype=np.float32)})
    (state,) = wide._specs.values()
    assert state.runner().uses_pool and state.probe is not None and not state.one_thread


def test_a_plan_at_several_threads_keeps_the_faster_count_and_times_both_again_later(rng, monkeypatch):
    """A specialization at several threads times PROBE_RUNS runs at all cores and at one thread (``plan.SpecState``;
    fed timings below: the machine's own are noise); a small plan whose one-thread arm came within reach probes
    again at once on a specialization bound at one thread; one thread is kept where no slower, and said so
    in ``plan.stats()``; both are timed again (REPROBE_SHORT_RUNS each after a decisive verdict; the one-thread arm
    stops after EARLY_RUNS where they are DECISIVE apart) REPROBE_FIRST
    runs later (REPROBE_ONE_FIRST after a verdict of one thread), then at doubling intervals while the count holds
    (up to REPROBE_RUNS), from the first interval again when it changes."""
    from tlc.runtime import plan as plan_module
    from tlc.runtime import runner as runner_module

    monkeypatch.setattr(plan_module, "REPROBE_FIRST", 3)
    monkeypatch.setattr(plan_module, "REPROBE_ONE_FIRST", 2)
    monkeypatch.setattr(plan_module, "REPROBE_RUNS", 8)
    monkeypatch.setattr(runner_module, "_pooled", lambda fn: True)   # (its one kernel is serial: see below)
    plan = compile(small_graph(), num_threads=2, jit="eager")
    feeds = {"x": rng.standard_normal((2, 4), dtype=np.float32)}
    want = plan.run(feeds)["y"]
    (state,) = plan._specs.values()

    def settle():
        deadline = time.monotonic() + 60   # (a one-thread arm's specialization is bound on the JIT thread)
        while state.probe is not None and time.monotonic() < deadline:
            np.testing.assert_array_equal(plan.run(feeds)["y"], want)
        assert state.probe is None and state.spec.threads_note.startswith("runs at")

    monkeypatch.setattr(plan_module, "ONE_SPEC_S", 0.0)
    settle()   # on its own timings, on no second specialization
    monkeypatch.setattr(plan_module, "ONE_SPEC_S", 1e-3)
    probes = plan_module.PROBE_RUNS
    state.reprobe()
    for arm, seconds in [(0, 200e-6)] * probes + [(1, 216e-6)] * probes:   # one thread 8% slower: within reach
        state.record(arm, seconds, plan.runs)
    assert state.want_one and not state.one_thread and state.one is None
    np.testing.assert_array_equal(plan.run(feeds)["y"], want)
    assert state.probe is not None                     # probing again at once
    settle()
    assert state.one is not None and state.one.spec.options.threads == 1
    intervals = []
    for fast in (1, 0, 0, 0, 1, 1):   # the faster arm: one thread, all cores three times, one thread twice
        state.reprobe()
        for arm, seconds in [(fast, 0.5e-3)] * probes + [(1 - fast, 1e-3)] * probes:
            state.record(arm, seconds, plan.runs)
        intervals.append(state.interval)
    # doubling while the count holds, up to REPROBE_RUNS; from REPROBE_ONE_FIRST after a change to one thread
    assert intervals[1:] == [3, 6, 8, 2, 4]
    assert state.probe is None and state.one_thread and state.governors is state.single
    assert state.settled is state.one                 # the runs take the specialization bound at one thread
    assert "runs at one thread (timed: 0.500 ms at one (bound at one thread), 1.000 at all)" in str(plan.stats())
    for _ in range(4):
        np.testing.assert_array_equal(plan.run(feeds)["y"], want)
    assert state.probe == ([], [])                     # the interval's runs on: timing both again
    # after a decisive verdict (2x) the next probe is short; after a close one, full length again
    assert state.probe_runs == plan_module.REPROBE_SHORT_RUNS
    short = plan_module.REPROBE_SHORT_RUNS
    for arm, seconds in [(0, 1e-3)] * short + [(1, 1.05e-3)] * short:   # one thread 5% slower: all cores
        state.record(arm, seconds, plan.runs)
    assert state.probe is None and not state.one_thread and state.probe_runs == probes
    # the one-thread arm stops after EARLY_RUNS runs where each is DECISIVE apart from the all-cores median
    early = plan_module.EARLY_RUNS
    state.reprobe()
    for arm, seconds in [(0, 1e-3)] * probes + [(1, 1.1e-3)] * early:
        state.record(arm, seconds, plan.runs)
    assert state.probe is not None                     # close: the arm runs on
    for _ in range(probes - early):
        state.record(1, 2e-3, plan.runs)
    assert state.probe is None and not state.one_thread
    state.reprobe()
    for arm, seconds in [(0, 1e-3)] * state.probe_runs + [(1, 2e-3)] * early:
        state.record(arm, seconds, plan.runs)
    assert state.probe is None and not state.one_thread
    state.reprobe()   # one thread 5% faster: a second thread that buys nothing is given up (PROBE_MARGIN 1)
    for arm, seconds in [(0, 1e-3)] * probes + [(1, 0.95e-3)] * probes:
        state.record(arm, seconds, plan.runs)
    assert state.probe is None and state.one_thread
    single = compile(small_graph(), num_threads=1, jit="eager")
    single.run(feeds)
    assert next(iter(single._specs.values())).probe is None
    # no run is timed while a kernel of the specialization is still on its way (it would time a fallback)
    lazy = compile(small_graph(), num_threads=2, jit="lazy")
    lazy.run(feeds)
    (lazy_state,) = lazy._specs.values()
    for status in ("pending", "queued", "compiling"):
        lazy_state.spec.jobs()[0].status = status
        assert lazy_state.probing_arm() is None


def test_placement_holds_a_runs_threads_apart_during_the_run_only(monkeypatch):
    """A placed run holds the caller on its CPU and its OpenMP workers (libgomp's team, found once) on the others;
    afterwards the caller may go anywhere again. Where other processes keep the CPUs busy, nothing is held."""
    import os

    place = threads.placement()
    if not place.enabled or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("no libgomp pool to place, or one CPU")
    before = os.sched_getaffinity(0)
    gov = threads.Governor(2, uses_blas=False)
    gov._long = True                                    # as if its last run took long enough
    monkeypatch.setattr(place, "_busy_elsewhere", lambda mask, n: False)
    monkeypatch.setattr(place, "_sample", None)         # (not the last look's answer)
    token = gov.enter()
    during = os.sched_getaffinity(0)
    team = place._teams[threading.get_ident()]
    held = {tid: os.sched_getaffinity(tid) for tid in team.workers}
    gov.exit(token)
    assert len(during) == 1 and during <= before and os.sched_getaffinity(0) == before
    me = threading.get_native_id()
    tasks = {int(t) for t in os.listdir("/proc/self/task")}
    assert team.workers and me not in team.workers and set(team.workers) <= tasks
    assert all(cpus == before - during for cpus in held.values())
    assert all(os.sched_getaffinity(tid) == before for tid in team.workers)   # let go after the run too
    import numba

    monkeypatch.setattr(place, "_busy_elsewhere", lambda mask, n: True)
    monkeypatch.setattr(place, "_sample", None)         # look again now
    gov._long = True
    token = gov.enter()
    assert os.sched_getaffinity(0) == before
    assert all(os.sched_getaffinity(tid) == before for tid in team.workers)
    assert numba.get_num_threads() == 1                 # the parts run in turn on the caller
    gov.exit(token)
    assert numba.get_num_threads() == 2                 # and the count is the plan's again after the run
    monkeypatch.setattr(place, "_busy_elsewhere", lambda mask, n: False)
    monkeypatch.setattr(place, "_sample", None)
    gov.exit(gov.enter())
    assert numba.get_num_threads() == 2


def test_a_short_run_after_an_idle_gap_is_placed(monkeypatch):
    """A run whose plan is short is placed anyway when no run has ended for ``IDLE_S`` (its workers sleep by
    then, and a woken worker would land on the caller's CPU); one right after another run is not."""
    import os

    place = threads.placement()
    if not place.enabled or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("no libgomp pool to place, or one CPU")
    before = os.sched_getaffinity(0)
    monkeypatch.setattr(place, "_busy_elsewhere", lambda mask, n: False)
    monkeypatch.setattr(place, "contended", lambda n: False)
    gov = threads.Governor(2, uses_blas=False)
    assert not gov._long
    monkeypatch.setattr(threads, "_last_exit", time.perf_counter() - 2 * threads.IDLE_S)
    token = gov.enter()
    during = os.sched_getaffinity(0)
    gov.exit(token)
    assert len(during) == 1 and os.sched_getaffinity(0) == before
    for _ in range(threads.SAMPLE_RUNS + 1):          # back to back: short runs go unplaced, timed or not
        token = gov.enter()
        assert os.sched_getaffinity(0) == before
        gov.exit(token)


def test_planner_never_writes_in_place_over_a_view_still_read():
    """Step 1 reads v0 and a view of v0 (step 0's reference output): no in-place into v0 there."""
    t = TensorType("float32", (4, 4))
    types = [t, t, t, t]                                  # v0 planned, v1 = view of v0, v2 out, v3 = feed
    steps = [StepSpec((3,), (0,), True, True, []),        # v0 = f(feed)
             StepSpec((0,), (1,), False, False, []),      # v1 = view(v0)   (reference: may alias v0)
             StepSpec((0, 1), (2,), True, True, [])]      # v2 = v0 + v1    (elementwise)
    plan = plan_memory(steps, types, outputs=set())
    assert plan.inplace == []
    assert plan.placement[2] != plan.placement[0]
    # without the view the output takes v0's buffer
    alone = plan_memory([steps[0], StepSpec((0, 3), (2,), True, True, [])], types, outputs=set())
    assert alone.inplace == [(1, 2, 0)] and alone.placement[2] == alone.placement[0]


def test_planner_joins_a_concat_s_inputs_in_place():
    """A joining step's inputs take consecutive ranges of its output's slot, which is taken when the first is
    written; a later in-place step may not take an input's range; a feed or a repeated input stops the join."""
    t4, t8 = TensorType("float32", (1, 4, 8)), TensorType("float32", (1, 8, 8))
    types = [t4, t4, t4, t8, t4, t8]                      # v0 feed, v1 a, v2 b, v3 cat, v4 d, v5 out
    steps = [StepSpec((0,), (1,), True, False, []),       # a = f(x)
             StepSpec((0,), (2,), True, False, []),       # b = g(x)
             StepSpec((1, 2), (3,), True, False, [], joins=True),   # cat = Concat(a, b)
             StepSpec((1,), (4,), True, True, []),        # d = h(a): a dies here, an in-place candidate
             StepSpec((3, 4), (5,), True, False, [])]
    plan = plan_memory(steps, types, outputs={5})
    assert plan.joined == {2} and plan.within == {1: (3, 0), 2: (3, 128)}
    assert plan.placement[1] == plan.placement[2] == plan.placement[3]
    assert plan.inplace == [] and plan.placement[4] != plan.placement[3]
    assert plan.arena_bytes == 256 + 128                  # cat's slot, and d's
    feed = plan_memory([steps[0], StepSpec((1, 0), (3,), True, False, [], joins=True)], types, outputs=set())
    twice = plan_memory([steps[0], StepSpec((1, 1), (3,), True, False, [], joins=True)], types, outputs=set())
    assert not feed.joined and not feed.within and not twice.joined and not twice.within
    # DenseNet's chain: Concat(Concat(a, b), d) joins the first only (the second's input is written by no kernel)
    t12 = TensorType("float32", (1, 12, 8))
    chain = plan_memory(steps[:4] + [StepSpec((3, 4), (5,), True, False, [], joins=True)], types[:5] + [t12],
                        outputs=set())
    assert chain.joined == {2} and set(chain.within) == {1, 2}


def test_planner_reuses_slots_and_keeps_workspace_apart():
    t = TensorType("float32", (8,))
    ws = [((16,), np.dtype("float32"))]
    steps = [StepSpec((9,), (0,), True, False, []), StepSpec((0,), (1,), True, False, ws),
             StepSpec((1,), (2,), True, False, []), StepSpec((2,), (3,), True, False, [])]
    plan = plan_memory(steps, [t] * 4, outputs=set())
    slot = plan.placement
    assert slot[0] != slot[1] and slot[1] != slot[2] and slot[2] != slot[3]
    (work_slot, _, _), = plan.work[1]
    assert work_slot not in (slot[0], slot[1])            # scratch never overlaps the step's inputs/outputs
    assert len(plan.slot_bytes) <= 3


def test_openmp_spin_is_bounded_unless_the_user_chose_a_policy(monkeypatch):
    """libgomp's idle workers spin about a millisecond (bridging steps, not burning a core after a run), set
    before Numba's pool starts, unless the user set a policy."""
    monkeypatch.setattr(threads, "_numba_pool_started", lambda: False)
    env: dict[str, str] = {}
    threads.configure_openmp(env)
    assert env == {"GOMP_SPINCOUNT": str(threads.SPIN_COUNT)}
    for users in ({"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "300000"}):
        mine = dict(users)
        threads.configure_openmp(mine)
        assert mine == users
    monkeypatch.setattr(threads, "_numba_pool_started", lambda: True)
    started: dict[str, str] = {}
    threads.configure_openmp(started)
    assert started == {}   # too late: libgomp has read its environment


def test_blas_kernels_are_chosen_before_numpy_loads_and_never_over_the_users_choice(monkeypatch):
    """On an AMD CPU with AVX-512, OpenBLAS's Haswell kernels (faster there) are asked for, before numpy loads."""
    from tlc import _platform

    monkeypatch.setattr(_platform, "wants_haswell_kernels", lambda: True)
    env: dict[str, str] = {}
    assert _platform.choose_blas_kernels(env, numpy_loaded=False) and env == {"OPENBLAS_CORETYPE": "Haswell"}
    users = {"OPENBLAS_CORETYPE": "SkylakeX"}
    assert not _platform.choose_blas_kernels(users, numpy_loaded=False) and users == {"OPENBLAS_CORETYPE": "SkylakeX"}
    late: dict[str, str] = {}
    assert not _platform.choose_blas_kernels(late, numpy_loaded=True) and late == {}
    monkeypatch.setattr(_platform, "wants_haswell_kernels", lambda: False)
    other: dict[str, str] = {}
    assert not _platform.choose_blas_kernels(other, numpy_loaded=False) and other == {}


@pytest.mark.parametrize("vendor, flags, family, wanted", [
    ("AuthenticAMD", {"avx2", "avx512f"}, 25, True),     # Zen 4: AVX-512 in halves, Haswell kernels faster
    ("AuthenticAMD", {"avx2", "avx512f"}, 26, False),    # Zen 5: full-width AVX-512, SkylakeX kernels 1.2-2x faster
    ("AuthenticAMD", {"avx2"}, 25, False),               # Zen 3: OpenBLAS's own choice
    ("GenuineIntel", {"avx2", "avx512f"}, 6, False),
])
def test_haswell_kernels_are_asked_for_on_zen_4_only(monkeypatch, vendor, flags, family, wanted):
    from tlc import _platform

    monkeypatch.setattr(_platform, "_cpu_flags", lambda: (vendor, flags, family))
    assert _platform.wants_haswell_kernels() is wanted
