"""Sampling the machine during a run: the CPU of the run's processes, their run-queue
waits, the host's steal and CPU pressure, read from /proc (tbcore.procfs) in a thread.

The fraction over the request window is known only after the run, so :class:`CpuWatch`
keeps cumulative samples and brackets the window afterwards. The judgement of what the
samples mean for a run is in :mod:`harness.validity.rules`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from harness.validity.rules import MIN_CPU_WINDOW_S
from tbcore import procfs

PROC_SAMPLE_PERIOD_S = 0.02
"""How often the harness reads /proc for CPU during a run (50 Hz; a few µs per read)."""

CLOCK_TICKS_PER_S = procfs.CLOCK_TICKS_PER_S


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), None when it is gone."""
    return procfs.process_cpu_s(pid)


def proc_runqueue_waits_s(pid: int) -> dict[int, tuple[float, int]] | None:
    """Per thread of ``pid``: (seconds spent runnable without a CPU, times scheduled in);
    None when it is gone."""
    return procfs.thread_schedstats(pid)


def cpu_pressure_s() -> float | None:
    """Cumulative host CPU pressure stall time, 'some' line of /proc/pressure/cpu (PSI)."""
    return procfs.cpu_pressure_s()


FOREIGN_SHARE_RESOLUTION = 0.10
"""The smallest share of the host's busy CPU time that can be told from none: host and
process CPU are both tick-counted (10 ms ticks, +-5 % each on the 200 ms minimum window,
docs/machine.md). A computed share below it counts as none: the run's own processes (the
emulator, the peer stack) taking turns on two cores are what the run measures (issue 25),
not a disturbance of the host."""


class CpuWatch:
    """Samples the CPU of named processes and the host's steal in a thread, so that the
    fraction over the request window (known only afterwards) can be computed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.pids: dict[str, list[int]] = {}
        self.samples: list[tuple[float, dict[str, float | None], procfs.HostCpu]] = []
        self._thread_waits: dict[tuple[str, int, int], tuple[float, int]] = {}
        self._cpu_last: dict[tuple[str, int], float] = {}
        self.sched: dict[str, str | None] = {}
        """How each named process's first pid was scheduled (procfs.process_sched), read
        when it was watched."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, name: str, pid: int | None) -> None:
        if pid:
            self.pids.setdefault(name, []).append(pid)
            self.sched.setdefault(name, procfs.process_sched(pid))
            self.sample()

    def sample(self) -> None:
        values: dict[str, float | None] = {}
        for name, pids in list(self.pids.items()):
            # a stack's work may run in a child (ngtcp2's binaries under their testbed
            # edge): every descendant counts under its name, a finished one with its last
            # value (a process's own utime/stime, never its reaped children's)
            for pid in list(pids):
                pids.extend(c for c in procfs.child_pids(pid) if c not in pids)
            alive = False
            for pid in pids:
                value = proc_cpu_s(pid)
                if value is not None:
                    self._cpu_last[(name, pid)] = value
                    alive = True
                # a thread that exits takes its counter with it: keep each thread's last
                # value so that the sum never goes down
                for tid, stat in (proc_runqueue_waits_s(pid) or {}).items():
                    self._thread_waits[(name, pid, tid)] = stat
            total = sum(self._cpu_last.get((name, pid), 0.0) for pid in pids)
            values[name] = total if alive else None
            mine = [w for (n, _, _), w in self._thread_waits.items() if n == name]
            main = [w for (n, p, t), w in self._thread_waits.items() if n == name and p == t]
            values[f"wait:{name}"] = sum(w for w, _ in mine) if alive else None
            known = alive and bool(main)
            values[f"mainwait:{name}"] = sum(w for w, _ in main) if known else None
        values["host:pressure"] = cpu_pressure_s()
        self.samples.append((self.clock(), values, procfs.host_cpu()))

    def _run(self) -> None:
        while not self._stop.wait(PROC_SAMPLE_PERIOD_S):
            self.sample()

    def __enter__(self) -> CpuWatch:
        self._thread = threading.Thread(target=self._run, name="tb-cpuwatch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def fraction(self, name: str, t0: float, t1: float) -> float | None:
        """CPU seconds per wall second of ``name`` over [t0, t1], widened to the nearest
        samples outside it and to at least :data:`MIN_CPU_WINDOW_S`."""
        series = [(t, v[name]) for t, v, _ in self.samples if v.get(name) is not None]
        return _window_rate(series, t0, t1)

    def wait_s(self, name: str, t0: float, t1: float) -> float | None:
        """Seconds the threads of ``name`` waited on a run queue over [t0, t1] (widened as
        in :meth:`fraction`): the time they were runnable but another task had the CPU."""
        series = [
            (t, v[f"wait:{name}"]) for t, v, _ in self.samples if v.get(f"wait:{name}") is not None
        ]
        span = _bracket(series, t0, t1)
        return None if span is None else span[1] - span[0]

    def main_wait_series(self, name: str) -> list[tuple[float, float]]:
        """(time, cumulative run-queue wait) samples of the main thread of ``name`` (its
        event loop: the stack's protocol work); the other threads (the in-flight sampler)
        are instrumentation, not the request's path."""
        key = f"mainwait:{name}"
        return [(t, v[key]) for t, v, _ in self.samples if v.get(key) is not None]

    def main_wait_s(self, name: str, t0: float, t1: float) -> float | None:
        """Seconds the main thread of ``name`` waited on a run queue over [t0, t1] (widened
        as in :meth:`fraction`)."""
        span = _bracket(self.main_wait_series(name), t0, t1)
        return None if span is None else span[1] - span[0]

    def pressure(self, t0: float, t1: float) -> float | None:
        """Host CPU pressure (PSI 'some'): the fraction of [t0, t1] in which at least one
        runnable task on the host waited for a CPU."""
        series = [
            (t, v["host:pressure"])
            for t, v, _ in self.samples
            if v.get("host:pressure") is not None
        ]
        return _window_rate(series, t0, t1)

    def steal(self, t0: float, t1: float) -> float | None:
        """Host steal over all host CPU time in [t0, t1] (widened as in :meth:`fraction`)."""
        host = self._host(t0, t1)
        return None if host is None else host.steal_fraction

    def foreign_share(self, t0: float, t1: float, own: Sequence[str]) -> float | None:
        """The share of the host's busy CPU time over [t0, t1] (widened as in
        :meth:`fraction`) that processes other than ``own`` used (0 below
        :data:`FOREIGN_SHARE_RESOLUTION`); None when the host was not sampled or idle. An own
        process not sampled counts as using nothing (the share can only come out larger)."""
        points = _bracket_points([(t, 0.0) for t, _, _ in self.samples], t0, t1)
        host = self._host(t0, t1)
        if points is None or host is None or host.busy_s <= 0:
            return None
        ta, tb = points[0][0], points[1][0]
        own_s = 0.0
        for name in own:
            series = [(t, v[name]) for t, v, _ in self.samples if v.get(name) is not None]
            inside = [(t, v) for t, v in series if ta <= t <= tb]
            if len(inside) >= 2:
                own_s += inside[-1][1] - inside[0][1]
        share = (host.busy_s - own_s) / host.busy_s
        return 0.0 if share < FOREIGN_SHARE_RESOLUTION else min(1.0, share)

    def _host(self, t0: float, t1: float) -> procfs.HostCpu | None:
        points = _bracket_points([(t, 0.0) for t, _, _ in self.samples], t0, t1)
        if points is None:
            return None
        by_time = {t: host for t, _, host in self.samples}
        return by_time[points[1][0]] - by_time[points[0][0]]


def _bracket_points(
    series: Sequence[tuple[float, float]], t0: float, t1: float
) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The samples just outside [t0, t1] (widened to MIN_CPU_WINDOW_S), None if too few."""
    if len(series) < 2:
        return None
    if t1 - t0 < MIN_CPU_WINDOW_S:
        mid = (t0 + t1) / 2.0
        t0, t1 = mid - MIN_CPU_WINDOW_S / 2.0, mid + MIN_CPU_WINDOW_S / 2.0
    before = [p for p in series if p[0] <= t0]
    after = [p for p in series if p[0] >= t1]
    start = before[-1] if before else series[0]
    end = after[0] if after else series[-1]
    if end[0] <= start[0]:
        return None
    return start, end


def _bracket(
    series: Sequence[tuple[float, float]], t0: float, t1: float
) -> tuple[float, float] | None:
    points = _bracket_points(series, t0, t1)
    return None if points is None else (points[0][1], points[1][1])


def _window_rate(series: Sequence[tuple[float, float]], t0: float, t1: float) -> float | None:
    points = _bracket_points(series, t0, t1)
    if points is None:
        return None
    (ta, va), (tb, vb) = points
    return (vb - va) / (tb - ta)


QUIET_STEAL_FRACTION = 0.02
"""A re-run starts once the hypervisor's steal over the last :data:`QUIET_WINDOW_S` is below
2 %: runs measured at 6-16 % steal were 15-50 ms slower on a 1.25 s request (issue 10's
closing note), at 0-1 % they were not."""
QUIET_WINDOW_S = 1.0
"""The window the steal is read over before a re-run (100 ticks of two CPUs)."""
QUIET_WINDOWS = 3
"""How many windows in a row must be quiet: at stop 21 a gate of one quiet second let two
re-runs start inside a spell that came back within the run (13 % and 11 % steal, both
rejected again), so one quiet second is not the end of a spell."""
QUIET_WAIT_MAX_S = 90.0
"""The longest a re-run waits for steal to fall; then it is made anyway (and judged)."""


def wait_for_low_steal(
    read: Callable[[], procfs.HostCpu] = procfs.host_cpu,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    limit: float = QUIET_STEAL_FRACTION,
    window_s: float = QUIET_WINDOW_S,
    max_s: float = QUIET_WAIT_MAX_S,
    quiet_windows: int = QUIET_WINDOWS,
) -> tuple[float, float | None]:
    """Wait until the host's steal has been below ``limit`` over ``quiet_windows`` windows
    in a row, or ``max_s`` has passed; returns (seconds waited, the last window's steal).
    Steal comes in spells (the hypervisor's other guests), so a run made again straight
    after a disturbed one would likely be disturbed the same way. A host that cannot tell
    steal (no counter) does not wait."""
    start = clock()
    before = read()
    steal: float | None = None
    quiet = 0
    while True:
        sleep(window_s)
        now = read()
        steal = (now - before).steal_fraction
        quiet = quiet + 1 if steal is not None and steal < limit else 0
        waited = clock() - start
        if steal is None or quiet >= quiet_windows or waited >= max_s:
            return waited, steal
        before = now
