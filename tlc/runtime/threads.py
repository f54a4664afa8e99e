"""One thread governance: Numba's pool runs every parallel step of a plan; BLAS runs single-threaded inside it.

Why (measured on the 2-core machine, see docs/architecture.md): three pools used to meet in one run: Numba's
OpenMP workers (parallel kernels), OpenBLAS's own threads (large products) and tlc's own worker threads (product
slabs). Each pool's idle workers either spin, stealing the core the next step needs, or sleep, so every hand-off
paid a wake-up (~50 us with ``OMP_WAIT_POLICY=PASSIVE``, the policy tlc had set to stop the spinning). A second
thread made models slower. Now:

- products and convolutions are cut into parts that run as single-threaded BLAS calls inside Numba parallel
  loops (``tlc.kernels.gemm``), epilogues right after each part on the same thread: one pool owns the cores;
- OpenBLAS is set to one thread for the length of each run (process-wide in OpenBLAS; the first of concurrent
  runs records the caller's count and the last one gives it back, so the user's own numpy keeps its threads);
- libgomp's idle workers spin for a bounded time (``GOMP_SPINCOUNT``, about a millisecond) before sleeping: long
  enough to bridge the Python between two steps (a parallel region then costs ~2 us instead of ~50), short
  enough not to burn a core after a run. tlc sets it before Numba starts its pool, unless the user set
  ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``;
- Numba's thread count is per calling thread; each run sets it to the plan's ``num_threads``;
- where other processes keep busy the CPUs a run's workers need (``Placement.contended``: /proc/stat, looked at
  every ``LOOK_S``), the run's parallel steps run their parts in turn on the calling thread;
- during a run of a plan with threads (one that took at least ``PLACE_MIN_S`` last time, or any run after the
  process's runs have been idle ``IDLE_S``), the calling thread is held on the CPU it is on and its OpenMP
  workers on the other CPUs it may use (``Placement``). Without it, a
  worker woken after an idle gap is placed on the caller's CPU by the scheduler (wake-affine) and the two share
  one core until the load balancer parts them ~50 ms later: UNet at 2 threads ran its first runs after a 0.15 s
  pause at 11-15 ms instead of 7.4. Skipped where the user placed OpenMP's threads (``OMP_PROC_BIND``,
  ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``), where ``TLC_PLACE_THREADS=0``, and where Numba's pool is not libgomp.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

from ..kernels import blas

#: libgomp spin iterations before an idle worker sleeps (~0.5-1.5 ms on the 2-core machine: 10,000 bridged
#: gaps of 100 us between parallel regions, 30,000 gaps of 300 us, 100,000 gaps of 1 ms)
SPIN_COUNT = 50_000

#: a run shorter than this (the plan's previous one) is not worth the ~7 us of placement calls ...
PLACE_MIN_S = 1e-3
#: ... unless no run of the process's has ended for this long (s): its workers sleep by then, and a worker woken
#: after such a gap lands on the caller's CPU (dynamic_batch b1 at 2 threads after a 0.15 s pause: 3.0 ms unplaced
#: against 0.3; a bare two-iteration Numba loop 5.8 ms; gaps of 5 ms cost nothing)
IDLE_S = 0.01
#: a plan whose runs are short times one run in this many (whether they have become long)
SAMPLE_RUNS = 8
#: how often (s) placement looks whether other processes keep our CPUs busy (~20 us a look)
LOOK_S = 0.1

_lock = threading.Lock()
_depth = 0                  # runs in progress (process-wide), for BLAS's count
_last_exit = 0.0            # perf_counter when the process's last placeable run ended
_blas_before = 0            # BLAS's count when the first of them began


def cores() -> int:
    return os.cpu_count() or 1


def configure_openmp(environ: dict | None = None) -> None:
    """Set libgomp's bounded spin before Numba starts its pool (unless the user chose a policy)."""
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env and not _numba_pool_started():
        env["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def _numba_pool_started() -> bool:
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return bool(parallel is not None and getattr(parallel, "_is_initialized", False))


def _thread_count_functions():
    """Numba's own getter and setter of this thread's count, without the checks of its public functions (the
    pool is started once here); the public ones where this Numba has no such internals."""
    import numba

    try:
        from numba.np.ufunc import parallel

        parallel._launch_threads()
        return parallel._get_num_threads, numba.set_num_threads
    except (ImportError, AttributeError):  # another Numba: its public API (slower by ~0.5 us a call)
        return numba.get_num_threads, numba.set_num_threads


class _Team:
    """One calling thread's OpenMP workers, and the caller's mask to give back after a placed run."""

    __slots__ = ("workers", "depth", "restore")

    def __init__(self, workers: list[int]):
        self.workers = workers
        self.depth = 0                  # placed runs in progress on this thread (a nested run is not placed)
        self.restore: set[int] | None = None


class Placement:
    """Holds a run's calling thread on its CPU and its OpenMP workers off it (see the module docstring).

    The workers' thread ids come from one parallel region of libgomp's own (``GOMP_parallel`` with a callback
    that records each team member's id): libgomp keeps one pool of workers per calling thread and gives a team
    of n its first n - 1, the same threads Numba's parallel loops of n threads run on."""

    def __init__(self):
        self._teams: dict[int, _Team] = {}
        self._lock = threading.Lock()
        self._gomp = None
        self._getcpu = None
        self.enabled = self._available()
        self._sample: tuple[float, float, float] | None = None   # (monotonic s, CPUs' busy s, our CPU s)
        self._contended = False
        if hasattr(os, "register_at_fork"):   # a forked child has none of these threads (ids of others' threads)
            os.register_at_fork(after_in_child=self._teams.clear)

    def _available(self) -> bool:
        env = os.environ
        if env.get("TLC_PLACE_THREADS", "1") == "0" or not sys.platform.startswith("linux"):
            return False
        if any(k in env for k in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")):
            return False
        try:
            import numba

            _thread_count_functions()           # starts Numba's pool: its layer is known from then on
            if numba.threading_layer() != "omp":
                return False
            # the libgomp Numba's pool loaded, not another copy: RTLD_NOLOAD fails when none is loaded
            self._gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            self._gomp.GOMP_parallel.argtypes = [_REGION, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
            self._gomp.GOMP_parallel.restype = None
            getcpu = ctypes.CDLL(None).sched_getcpu
            getcpu.restype, getcpu.argtypes = ctypes.c_int, []
            self._getcpu = getcpu
        except (OSError, AttributeError, ValueError):
            return False
        return True

    def _team(self, threads: int) -> _Team:
        ident = threading.get_ident()
        team = self._teams.get(ident)
        if team is None or (team.depth == 0 and len(team.workers) < threads - 1):
            seen: list[int] = []

            def member(_data):
                seen.append(threading.get_native_id())   # list.append is atomic under the GIL

            region = _REGION(member)
            self._gomp.GOMP_parallel(region, None, threads, 0)
            me = threading.get_native_id()
            team = _Team(sorted(t for t in seen if t != me))
            with self._lock:
                self._teams[ident] = team
        return team

    def _busy_elsewhere(self, mask: set[int], threads: int) -> bool:
        """Whether other processes kept the CPUs we would run on busy since the last look (at most every
        ``LOOK_S``): busy time of ``mask``'s CPUs in /proc/stat less this process's own CPU time, against the
        CPUs the plan's threads leave over. Held apart, a worker could not leave a CPU another process keeps
        busy (a CPU hog on one of 2 vCPUs: UNet 13.4 ms placed against 10.5 unplaced), so such runs go unplaced
        and the scheduler shares the cores out."""
        now = time.monotonic()
        if self._sample is not None and now - self._sample[0] < LOOK_S:
            return self._contended
        try:
            with open("/proc/stat", "rb") as f:
                lines = f.read().split(b"\n")
        except OSError:
            return False
        busy = 0
        for line in lines[1:]:
            if not line.startswith(b"cpu"):
                break
            fields = line.split()
            if int(fields[0][3:]) in mask:     # user nice system idle iowait irq softirq steal ...
                busy += sum(map(int, fields[1:4])) + sum(map(int, fields[6:8]))
        busy_s = busy / _TICKS
        times = os.times()
        ours = times[0] + times[1]
        if self._sample is not None:
            t0, busy0, ours0 = self._sample
            others = ((busy_s - busy0) - (ours - ours0)) / (now - t0)
            self._contended = others > len(mask) - threads + 0.5
        self._sample = (now, busy_s, ours)
        return self._contended

    def contended(self, threads: int) -> bool:
        """Whether other processes keep busy the CPUs a run of ``threads`` would need (``_busy_elsewhere``; the
        last look's answer until ``LOOK_S`` has passed: a clock read a run)."""
        if self._sample is not None and time.monotonic() - self._sample[0] < LOOK_S:
            return self._contended
        return self._busy_elsewhere(os.sched_getaffinity(0), threads)

    def enter(self, threads: int) -> None:
        team = self._team(threads)
        team.depth += 1
        if team.depth > 1:
            return
        cpu = self._getcpu()
        mask = os.sched_getaffinity(0)
        if len(mask) < 2 or cpu not in mask or self._busy_elsewhere(mask, threads):
            return
        try:
            os.sched_setaffinity(0, (cpu,))
        except OSError:               # the CPU went offline or out of our cpuset meanwhile: run unplaced
            return
        team.restore = mask
        self._hold_workers(team, mask - {cpu})

    def _hold_workers(self, team: _Team, cpus: set[int]) -> None:
        for tid in team.workers:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:           # a worker that has exited (libgomp shrank its pool): the next placed run
                team.workers = []     # finds them again (the team stays: its caller's mask is given back)
                return

    def exit(self) -> None:
        team = self._teams.get(threading.get_ident())
        if team is None:
            return
        team.depth -= 1
        if team.depth == 0 and team.restore is not None:
            # NOTE: the workers are let go too: held on the other CPU after the run, they shared the caller's CPU
            # in the next short (unplaced) run whenever the caller had moved there (dynamic_batch b1 at 2
            # threads 0.92 ms after a conv net's placed runs in the same process, 0.43 alone)
            mask, team.restore = team.restore, None
            os.sched_setaffinity(0, mask)
            self._hold_workers(team, mask)


_REGION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_placement: Placement | None = None


def placement() -> Placement:
    """The process's one ``Placement`` (made after Numba's pool has started)."""
    global _placement
    if _placement is None:
        with _lock:
            if _placement is None:
                _placement = Placement()
    return _placement


class Governor:
    """Around a run (``token = governor.enter()`` ... ``governor.exit(token)``): Numba's count for this thread, the
    run's threads held apart (``Placement``) when its plan's last timed run was long enough and, for plans that
    call BLAS (``uses_blas``), BLAS single-threaded meanwhile. A run is timed when the last timed one was long, and
    otherwise one run in ``SAMPLE_RUNS``: timing every run of a one-op plan cost 0.33 us of its 2.0 at 2 threads."""

    def __init__(self, threads: int, uses_blas: bool = True):
        import numba

        self.threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
        self.uses_blas = uses_blas and blas.AVAILABLE
        self._get = self._set = None
        self._place: Placement | None = None
        self._long = False              # the last timed run took at least PLACE_MIN_S
        # runs since the last timed one (approximate under concurrent runs); the first run is timed
        self._runs = SAMPLE_RUNS - 1

    def enter(self) -> tuple[bool, float | None, bool] | None:
        """Begin a run on the calling thread; returns the token ``exit`` takes: (placed, start of a timed run or
        None, whether the run's count was lowered) for a timed or contended run, else None."""
        global _depth, _blas_before
        if self._get is None:
            self._get, self._set = _thread_count_functions()
            if self.threads > 1:
                place = placement()
                self._place = place if place.enabled else None
        threads = self.threads
        if self._place is not None and self._place.contended(threads):
            # other processes hold the CPUs our workers would run on: the parts run in turn on this thread (a
            # part's worker waiting for a CPU held the run up a time slice: qdq_convnet b8 at 2 threads, a test
            # suite on the other core, 4.9 ms a run against 0.21)
            threads = 1
        if self._get() != threads:
            self._set(threads)
        token = None
        if self._place is not None:   # runs at one thread (or unplaceable) keep no timings
            self._runs += 1
            now = time.perf_counter()
            idle = now - _last_exit >= IDLE_S
            if self._long or idle or self._runs >= SAMPLE_RUNS:
                self._runs = 0
                placed = (self._long or idle) and threads > 1
                if placed:
                    self._place.enter(self.threads)
                token = (placed, now, threads != self.threads)
            elif threads != self.threads:
                token = (False, None, True)
        if self.uses_blas:
            with _lock:
                if _depth == 0:
                    _blas_before = blas.get_threads()
                    if _blas_before != 1:
                        blas.set_threads(1)
                _depth += 1
        return token

    def exit(self, token: tuple[bool, float | None, bool] | None) -> None:
        """End the run that ``enter`` began with ``token``."""
        global _depth, _last_exit
        if self._place is not None:
            _last_exit = time.perf_counter()
        if token is not None:
            placed, start, lowered = token
            if placed:
                self._place.exit()
            if start is not None:   # (a timed run is a placeable one: ``_last_exit`` is its end)
                self._long = _last_exit - start >= PLACE_MIN_S
            if lowered:   # the thread's count back to the plan's (what a run leaves, as uncontended runs do)
                self._set(self.threads)
        if self.uses_blas:
            with _lock:
                _depth -= 1
                if _depth == 0 and _blas_before != 1:
                    blas.set_threads(_blas_before)
