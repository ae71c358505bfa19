"""One run, and one experiment of runs, over a real emulated link with the real stacks.

A run is one client process invocation: the level's settings are applied to the link and
the namespaces, a server starts in the server namespace, the client in the client
namespace (warm-up requests first, in the same process), the link captures both of its
ends, and afterwards the harness collects the client's records, the server's events, the
link's counters over the run, the CPU of client, server and emulator, and the host's steal
time. Every run gets a row, valid or not: a run that fails in any way is kept and flagged
with its reason, never dropped.

The pure parts (:func:`request_phases`, :func:`validity`, :func:`bound_for`) take plain
values and are tested without a link; :func:`execute_run` and :func:`run_experiment` are
the I/O edge.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.collect import Collected, collect_run, label_columns
from harness.environment import environment, versions
from harness.execute import ERROR_CHARS, RunEnvironment, run_processes
from harness.plan import PlannedRun, plan_for, remaining
from harness.record import ResultDir, utc_stamp
from harness.spec import ExperimentSpec, link_of
from netem.linkspec import LinkSpec
from tbcore.errors import SpecError
from tbcore.runrow import RunRow

WATCHED = ("client", "server", "emulator")
"""The processes whose CPU is watched during a run."""

# --- validity thresholds -----------------------------------------------------------------

CPU_SATURATED_FRACTION = 0.90
"""A process above 90 % of one core during the request is the bottleneck, not the path:
the servers and clients are single-threaded asyncio loops (plus a sampler thread), so near
one core they queue their own work. The margin below 100 % covers tick-based accounting
(10 ms ticks: +-5 % on a 200 ms window, NOTES-machine.md)."""

STEAL_MAX_FRACTION = 0.10
"""Host steal above 10 % of all CPU time during the run flags it: the hypervisor then took
a tenth of both cores, and timers of the emulator and the stacks slip by milliseconds
(steal from 0 to 78 % was seen on these VMs, NOTES-machine.md)."""

RUNQUEUE_WAIT_MAX_FRACTION: float | None = None
"""Run-queue wait of the stacks (time runnable but without a CPU) is recorded per run
(``runqueue_wait_*_s``, with the host's PSI CPU pressure) but flags nothing by default: a
first campaign on a loaded host (load 5 on 2 cores) saw the server wait 200 ms during a
1.2 s upload whose time matched the unloaded runs to 0.3 %, because the kernel's TCP, not
the process, is on the critical path of a transfer. Set a fraction of the request time
here to flag such runs; emulator delays are caught by its lateness instead."""
RUNQUEUE_WAIT_MIN_S = 0.002

HOST_PRESSURE_MAX_FRACTION = 0.30
"""Host CPU pressure (PSI 'some': the share of time at least one runnable task waited for
a CPU) above 30 % during the request flags the run. In a quick connection campaign on this
2-core VM with other test suites running, 4 of the 5 runs that were 1 RTT or 40 % slower
than their level's quiet runs had pressure above 0.3, and every run below 0.15 but one was
within 1.5 % of the bound: a busy host, not the path, made those runs slow."""

LATENESS_P99_MAX_S = 1e-3
"""The emulator's p99 release lateness must stay under 1 ms, the p99 RTT-error target of
the link issue; above it the emulated path is not the configured one."""

RTT_TOLERANCE_S = 2e-3
RTT_TOLERANCE_FRACTION = 0.02
"""A measured handshake RTT more than max(2 ms, 2 %) above the configured RTT flags the
run (the link issue's accuracy targets are 0.3 ms median, 1 ms p99)."""

LOSS_SIGMAS = 4.0
"""Realised loss further than 4 binomial standard deviations (plus one packet) from the
configured rate flags the run: the path did not have the configured loss."""

MIN_CPU_WINDOW_S = 0.2
"""CPU fractions are measured over at least 200 ms around the request (tick accounting)."""

PROC_SAMPLE_PERIOD_S = 0.02
"""How often the harness reads /proc for CPU during a run (50 Hz; a few µs per read)."""


def loss_out_of_range(configured: float, dropped: int, trials: int) -> bool:
    if trials <= 0:
        return False
    expected = configured * trials
    sigma = math.sqrt(trials * configured * (1.0 - configured))
    return abs(dropped - expected) > LOSS_SIGMAS * sigma + 1.0


def validity(
    *,
    error: str | None,
    sha256_ok: bool | None,
    cpu: Mapping[str, float | None],
    steal: float | None,
    lateness_p99_s: float | None,
    configured_rtt_s: float,
    measured_rtt_s: float | None,
    loss: Mapping[str, tuple[float, int, int]],
    runqueue_wait_s: Mapping[str, float | None] | None = None,
    total_s: float | None = None,
    host_pressure: float | None = None,
) -> tuple[bool, str | None]:
    """(valid, reason): every reason joined with '; ', the most basic first."""
    reasons: list[str] = []
    if error:
        reasons.append(f"error: {error}")
    if sha256_ok is False:
        reasons.append("integrity: checksum mismatch")
    for name, fraction in cpu.items():
        if fraction is not None and fraction > CPU_SATURATED_FRACTION:
            reasons.append(f"cpu: {name} {fraction * 100:.0f} % of a core")
    if runqueue_wait_s and total_s and RUNQUEUE_WAIT_MAX_FRACTION is not None:
        limit = max(RUNQUEUE_WAIT_MIN_S, RUNQUEUE_WAIT_MAX_FRACTION * total_s)
        for name, wait in runqueue_wait_s.items():
            if wait is not None and wait > limit:
                reasons.append(f"cpu contention: {name} waited {wait * 1e3:.1f} ms for a CPU")
    if host_pressure is not None and host_pressure > HOST_PRESSURE_MAX_FRACTION:
        reasons.append(f"host busy: CPU pressure {host_pressure * 100:.0f} %")
    if steal is not None and steal > STEAL_MAX_FRACTION:
        reasons.append(f"steal: {steal * 100:.0f} % of host CPU")
    if lateness_p99_s is not None and lateness_p99_s > LATENESS_P99_MAX_S:
        reasons.append(f"emulator: p99 lateness {lateness_p99_s * 1e3:.2f} ms")
    if measured_rtt_s is not None:
        limit = max(RTT_TOLERANCE_S, RTT_TOLERANCE_FRACTION * configured_rtt_s)
        if measured_rtt_s - configured_rtt_s > limit:
            reasons.append(
                f"link: RTT {measured_rtt_s * 1e3:.1f} ms vs {configured_rtt_s * 1e3:.1f} ms"
            )
    for direction, (configured, dropped, trials) in loss.items():
        if loss_out_of_range(configured, dropped, trials):
            reasons.append(
                f"link: {direction} loss {dropped}/{trials} vs {configured * 100:g} % configured"
            )
    return (not reasons, "; ".join(reasons) or None)


# --- CPU from /proc ----------------------------------------------------------------------

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields_ = text.rpartition(")")[2].split()
    # after the comm field: state is fields_[0]; utime, stime are fields 14 and 15 (1-based)
    return (int(fields_[11]) + int(fields_[12])) / CLOCK_TICKS_PER_S


def proc_runqueue_waits_s(pid: int) -> dict[int, float] | None:
    """Per thread, the seconds it spent runnable but waiting for a CPU (the second field of
    /proc/PID/task/TID/schedstat, nanoseconds). None when the process is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    out: dict[int, float] = {}
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as handle:
                out[int(tid)] = int(handle.read().split()[1]) / 1e9
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return out


def cpu_pressure_s() -> float | None:
    """Cumulative host CPU pressure stall time, 'some' line of /proc/pressure/cpu (PSI)."""
    try:
        with open("/proc/pressure/cpu", encoding="ascii") as handle:
            first = handle.readline().split()
    except OSError:
        return None
    for item in first:
        if item.startswith("total="):
            return int(item[6:]) / 1e6
    return None


def host_steal() -> tuple[float, float]:
    """(steal, total) host CPU seconds from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as handle:
        parts = handle.readline().split()
    ticks = [int(v) for v in parts[1:9]]
    return (ticks[7] / CLOCK_TICKS_PER_S if len(ticks) > 7 else 0.0, sum(ticks) / CLOCK_TICKS_PER_S)


class CpuWatch:
    """Samples the CPU of named processes and the host's steal in a thread, so that the
    fraction over the request window (known only afterwards) can be computed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.pids: dict[str, list[int]] = {}
        self.samples: list[tuple[float, dict[str, float | None], tuple[float, float]]] = []
        self._thread_waits: dict[tuple[str, int, int], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, name: str, pid: int | None) -> None:
        if pid:
            self.pids.setdefault(name, []).append(pid)
            self.sample()

    def sample(self) -> None:
        values: dict[str, float | None] = {}
        for name, pids in list(self.pids.items()):
            total = 0.0
            alive = False
            for pid in pids:
                value = proc_cpu_s(pid)
                if value is not None:
                    total += value
                    alive = True
                # a thread that exits takes its counter with it: keep each thread's last
                # value so that the sum never goes down
                for tid, wait in (proc_runqueue_waits_s(pid) or {}).items():
                    self._thread_waits[(name, pid, tid)] = wait
            values[name] = total if alive else None
            values[f"wait:{name}"] = (
                sum(w for (n, _, _), w in self._thread_waits.items() if n == name)
                if alive
                else None
            )
        values["host:pressure"] = cpu_pressure_s()
        self.samples.append((self.clock(), values, host_steal()))

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
        steal = [(t, s[0]) for t, _, s in self.samples]
        total = [(t, s[1]) for t, _, s in self.samples]
        a, b = _bracket(steal, t0, t1), _bracket(total, t0, t1)
        if a is None or b is None or b[1] - b[0] <= 0:
            return None
        return (a[1] - a[0]) / (b[1] - b[0])


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


def execute_run(env: RunEnvironment, planned: PlannedRun) -> dict[str, Any]:
    """Make one run and return its row (also saved as the run's row.json)."""
    settings = env.spec.level(planned.level).settings
    link_spec = link_of(settings).with_seed(planned.link_seed)
    run_dir = env.result.fresh_run_dir(planned.run_id)
    wall0 = time.monotonic()
    watch = CpuWatch()
    error = run_processes(env, planned, settings, link_spec, run_dir, watch)
    try:
        row = judge(collect_run(run_dir, error), watch)
    except Exception as err:  # the files did not make a row: kept, flagged
        reason = f"harness: collecting failed: {type(err).__name__}: {err}"[:ERROR_CHARS]
        labels = label_columns(settings, link_spec)
        row = RunRow(**planned.to_dict(), **labels, valid=False, invalid_reason=reason)
    row = replace(row, wall_s=time.monotonic() - wall0)
    env.result.save_row(row)
    if row.invalid_reason:
        env.log(f"{run_dir.name}: invalid: {row.invalid_reason}")
    return row.to_dict()


def judge(collected: Collected, watch: CpuWatch) -> RunRow:
    """The collected row with the CPU of the request window and the validity verdict."""
    row, start_s, end_s = collected.row, collected.start_s, collected.end_s
    cpu: dict[str, float | None] = {}
    waits: dict[str, float | None] = {}
    machine: dict[str, Any] = {}
    if start_s is not None and end_s is not None:
        for name in WATCHED:
            cpu[name] = watch.fraction(name, start_s, end_s)
            waits[name] = watch.wait_s(name, start_s, end_s)
            machine[f"cpu_{name}"] = cpu[name]
            machine[f"runqueue_wait_{name}_s"] = waits[name]
        machine["steal"] = watch.steal(start_s, end_s)
        machine["cpu_pressure"] = watch.pressure(start_s, end_s)
    if cpu.get("emulator") is None and row.cpu_emulator_run is not None:
        cpu["emulator"] = machine["cpu_emulator"] = row.cpu_emulator_run
    row = replace(row, **machine)
    valid, reason = validity(
        error=collected.error,
        sha256_ok=row.sha256_ok,
        cpu=cpu,
        steal=row.steal,
        lateness_p99_s=row.lateness_p99_s,
        configured_rtt_s=row.rtt_s,
        measured_rtt_s=row.measured_rtt_s,
        loss=collected.loss_checks,
        runqueue_wait_s=waits,
        total_s=row.total_s,
        host_pressure=row.cpu_pressure,
    )
    return replace(row, valid=valid, invalid_reason=reason)


@dataclass
class ExperimentResult:
    result: ResultDir
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


ProgressHook = Callable[[str, PlannedRun | None, dict[str, Any] | None], None]
"""Called with ("start", run, None), ("done", run, row) and ("plan", None, {"total", "left"})."""


def _link_up(name: str, spec: LinkSpec, backend: str) -> Any:
    try:
        from netem.link import Link
    except ImportError as err:
        raise SpecError("backend", f"the emulated path is not available: {err}") from None
    return Link.up(name, spec, backend=backend)


def _reopen(spec: ExperimentSpec, plan: Sequence[PlannedRun], resume: Path) -> ResultDir:
    """The result directory of an interrupted campaign of the same experiment and plan."""
    result = ResultDir.open(resume)
    manifest = result.read_manifest()
    if manifest.get("resolved", {}).get("name") != spec.name:
        raise SpecError(
            "resume",
            f"{resume} holds experiment "
            f"{manifest.get('resolved', {}).get('name')!r}, not {spec.name!r}",
        )
    planned_ids = [r["run_id"] for r in manifest.get("plan", [])]
    if planned_ids and planned_ids != [r.run_id for r in plan]:
        raise SpecError(
            "resume",
            "the plan differs from the one in the manifest "
            "(changed file or flags?): start a new directory",
        )
    return result


def _create(
    spec: ExperimentSpec,
    plan: Sequence[PlannedRun],
    output: Path,
    backend: str,
    argv: Sequence[str] | None,
) -> ResultDir:
    """A new result directory with its manifest (the spec, plan, seeds, versions)."""
    result = ResultDir.create(Path(output), spec.name)
    result.write_manifest(
        {
            "experiment_file": spec.path,
            "experiment_source": spec.source,
            "resolved": spec.resolved(),
            "plan": [r.to_dict() for r in plan],
            "seeds": {"plan": spec.seed, "link": sorted({r.link_seed for r in plan})},
            "versions": versions(),
            "command": list(argv) if argv is not None else sys.argv,
            "started_utc": utc_stamp(),
            "backend_requested": backend,
        }
    )
    return result


def run_experiment(
    spec: ExperimentSpec,
    *,
    output: Path = Path("results"),
    backend: str = "auto",
    resume: Path | None = None,
    link_name: str | None = None,
    progress: ProgressHook | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    argv: Sequence[str] | None = None,
    report: bool = True,
) -> ExperimentResult:
    """Plan, run every run not yet finished, write the tables and the report."""
    plan = plan_for(spec)
    if resume is not None:
        result = _reopen(spec, plan, resume)
    else:
        result = _create(spec, plan, output, backend, argv)
    left = remaining(plan, result.finished())
    if progress:
        progress("plan", None, {"total": len(plan), "left": len(left), "dir": str(result.path)})
    rows: list[dict[str, Any]] = []
    if left:
        name = link_name or f"r{os.getpid() % 100000}"
        first = link_of(spec.level(left[0].level).settings)
        set_metrics = any(
            lv.settings.initcwnd is not None or lv.settings.initrwnd is not None
            for lv in spec.levels
        )
        with _link_up(name, first, backend) as link:
            keys = sorted({k for lv in spec.levels for k in lv.settings.sysctls})
            env = RunEnvironment(
                link=link,
                result=result,
                spec=spec,
                set_route_metrics=set_metrics,
                log=log,
                sysctl_defaults={r: link.sysctls(r, keys) for r in ("client", "server")}
                if keys
                else {},
            )
            manifest = result.read_manifest()
            envs = manifest.get("environments", [])
            envs.append({"at_utc": utc_stamp(), **environment(link)})
            result.update_manifest(environments=envs, environment=envs[0])
            for planned in left:
                if progress:
                    progress("start", planned, None)
                row = execute_run(env, planned)
                rows.append(row)
                if progress:
                    progress("done", planned, row)
    result.write_tables()
    result.update_manifest(finished_utc=utc_stamp(), finished=len(result.finished()) == len(plan))
    if report:
        from harness.report import build_report

        build_report(result.path)
    return ExperimentResult(result=result, rows=rows, skipped=len(plan) - len(left))
