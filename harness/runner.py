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

import contextlib
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import acks as ackmod
from harness import (
    agent_rows,  # noqa: F401  (registers the agent's row part)
    bounds,
)
from harness.plan import PlannedRun, plan_for, remaining
from harness.record import (
    ResultDir,
    atomic_write_json,
    utc_stamp,
    write_jsonl,
)
from harness.rowparts import ROW_PARTS, RowPart, register_row_part
from harness.spec import ExperimentSpec, Level, link_of
from netem.linkspec import LinkSpec
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.records import RecordError, RequestRecord, ServerEvent
from tbcore.records import read_jsonl as read_records
from tbcore.runrow import RunRow
from tbcore.settings import DEFAULT_INITCWND_SEGMENTS, Settings

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

SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_MARGIN_S = 30.0
"""Added to the run's timeout before the harness kills a client (startup, warm-up)."""

KEEP_QLOG_BYTES = 64 * 2**20

# --- the pure part -----------------------------------------------------------------------


@dataclass(frozen=True)
class Phases:
    """One request's times, relative to its start (connect start for a request that opened
    its connection, first request byte otherwise)."""

    start_s: float
    """Absolute CLOCK_MONOTONIC start."""
    new_connection: bool
    handshake_s: float
    ttfb_s: float
    total_s: float
    rel: dict[str, float]
    """t_connect_s, t_handshake_s, t_request_first_s, ... relative to the start."""


PHASE_TIMES = (
    ("t_connect_s", "connect_start"),
    ("t_handshake_s", "handshake_done"),
    ("t_request_first_s", "request_first_byte"),
    ("t_request_last_s", "request_last_byte"),
    ("t_response_first_s", "response_first_byte"),
    ("t_response_last_s", "response_last_byte"),
)
"""Row column and RequestRecord time of each phase boundary."""
CONNECTION_TIMES = ("connect_start", "handshake_done")
CLIENT_EVENT_TIMES = (
    "connect_start",
    "tcp_connected",
    "handshake_done",
    "request_first_byte",
    "request_last_byte",
    "response_first_byte",
    "response_last_byte",
)
"""The RequestRecord times that go to events.jsonl."""


def request_phases(record: RequestRecord, opened_connection: bool) -> Phases | None:
    """Times of one client record; None when it has no complete response."""
    first, last = record.request_first_byte, record.response_last_byte
    if first is None or last is None:
        return None
    connect = record.connect_start
    new = opened_connection and connect is not None
    start = float(connect) if new else float(first)  # type: ignore[arg-type]
    handshake = 0.0
    if new and record.handshake_done is not None:
        handshake = record.handshake_done - start
    rel = {}
    for name, key in PHASE_TIMES:
        value = getattr(record, key)
        if value is not None and (new or key not in CONNECTION_TIMES):
            rel[name] = float(value) - start
    response_first = record.response_first_byte
    return Phases(
        start_s=start,
        new_connection=new,
        handshake_s=handshake,
        ttfb_s=(response_first - start) if response_first is not None else math.nan,
        total_s=float(last) - start,
        rel=rel,
    )


def opened_connections(records: Sequence[RequestRecord]) -> list[bool]:
    """For each record, whether it was the first request on its connection."""
    seen: set[int] = set()
    out = []
    for record in records:
        out.append(record.conn_index not in seen)
        seen.add(record.conn_index)
    return out


def server_phases(events: Sequence[ServerEvent], start_s: float, end_s: float) -> dict[str, float]:
    """The server's view of one request, from its events inside [start_s, end_s]:
    ``server_receive_s`` (first to last request byte read), ``server_turnaround_s``
    (processing end to first response byte written), ``server_send_s`` (first to last
    response byte written), ``processing_s`` (first processing start to last processing end).
    Stack overheads the bound does not count show up here."""

    def times(name: str) -> list[float]:
        return [e.t for e in events if e.event == name and start_s <= e.t <= end_s]

    def first(name: str) -> float | None:
        return min(times(name), default=None)

    def last(name: str) -> float | None:
        return max(times(name), default=None)

    out: dict[str, float] = {}
    pairs = {
        "processing_s": (first("processing_start"), last("processing_end")),
        "server_receive_s": (first("request_first_byte"), last("request_last_byte")),
        "server_turnaround_s": (last("processing_end"), first("response_first_byte")),
        "server_send_s": (first("response_first_byte"), last("response_last_byte")),
    }
    for name, (a, b) in pairs.items():
        if a is not None and b is not None:
            out[name] = b - a
    return out


def bound_for(
    settings: Settings, link: LinkSpec, up_bytes: int, down_bytes: int
) -> bounds.RequestBound | None:
    """The bound of one request of this level (None for a workload the request bound does
    not cover, such as the stream, or a link without rates)."""
    workload = kinds.workload(settings.workload)
    if not workload.bounded or link.up.rate_bps is None or link.down.rate_bps is None:
        return None
    protocol = kinds.protocol(settings.protocol)
    window = min((c for c in protocol.window_caps(settings) if c is not None), default=None)
    return bounds.request_time_for_link(
        link,
        upload_bytes=up_bytes,
        download_bytes=down_bytes,
        protocol=settings.protocol,
        connection=settings.connection,
        processing_s=workload.processing_s(settings),
        initcwnd_segments=settings.initcwnd or DEFAULT_INITCWND_SEGMENTS,
        mss_bytes=protocol.mss(settings),
        window_bytes=window,
    )


def mathis_time_s(settings: Settings, link: LinkSpec, bound: bounds.RequestBound) -> float | None:
    """MODELS.md section 8: the data direction sent at min(path, Mathis rate), plus the
    bound's set-up, propagation and processing; None without loss on that direction."""
    upload = bound.upload_bytes >= bound.download_bytes
    loss = link.up.mean_loss if upload else link.down.mean_loss
    size = bound.upload_bytes if upload else bound.download_bytes
    rate = bound.up_bps if upload else bound.down_bps
    if loss <= 0 or size <= 0:
        return None
    mathis = bounds.mathis_throughput_bps(bound.mss_bytes, bound.rtt_s, loss)
    return (
        bound.setup_s
        + bound.propagation_s
        + bound.processing_s
        + size * bounds.BITS_PER_BYTE / min(rate, mathis)
    )


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


# --- commands of the stacks --------------------------------------------------------------


def testbed_argv() -> list[str]:
    """How to start ``testbed`` in a child: this interpreter, the package's entry point."""
    return [sys.executable, "-m", "harness.cli"]


SERVER_SETTINGS_FILE = "server-settings.json"
CLIENT_SETTINGS_FILE = "client-settings.json"


def write_settings(run_dir: Path, name: str, settings: Settings) -> Path:
    """The settings document one end reads (``--settings FILE``), kept with the run."""
    path = run_dir / name
    atomic_write_json(path, settings.document())
    return path


def server_argv(
    settings: Settings, link: LinkSpec, *, bind: str, port: int, run_dir: Path
) -> list[str]:
    """``testbed serve`` of a run: its addresses and files; the knobs in one document."""
    document = write_settings(run_dir, SERVER_SETTINGS_FILE, settings.for_end(link.down.rate_bps))
    argv = [
        *testbed_argv(),
        "serve",
        "--bind",
        bind,
        "--h2-port",
        str(port),
        "--h3-port",
        str(port),
        "--no-h3" if settings.protocol == "h2" else "--no-h2",
        "--log",
        str(run_dir / "server.jsonl"),
        "--keylog",
        str(run_dir / "keys.log"),
        "--settings",
        str(document),
    ]
    if settings.protocol == "h3" and settings.qlog:
        argv += ["--qlog-dir", str(run_dir / "qlog" / "server")]
    return argv


def client_argv(
    settings: Settings, link: LinkSpec, *, host: str, port: int, run_dir: Path
) -> list[str]:
    """``testbed client`` of a run: its peer and files; the knobs in one document."""
    document = write_settings(run_dir, CLIENT_SETTINGS_FILE, settings.for_end(link.up.rate_bps))
    argv = [
        *testbed_argv(),
        "client",
        "--host",
        host,
        "--port",
        str(port),
        "--records",
        str(run_dir / "records.jsonl"),
        "--samples",
        str(run_dir / "samples.csv"),
        "--keylog",
        str(run_dir / "keys.log"),
        "--settings",
        str(document),
    ]
    if settings.protocol == "h3" and settings.qlog:
        argv += ["--qlog-dir", str(run_dir / "qlog" / "client")]
    return argv


def sender_paces(settings: Settings) -> bool:
    """Whether the sender spreads a window over time instead of sending it at line rate
    (tbcore.kinds: the protocol's pacer). The bound assumes line-rate windows, so a paced
    sender's gap is named for its pacer."""
    return kinds.protocol(settings.protocol).paces(settings)


def run_sysctls(settings: Settings) -> dict[str, str]:
    # The congestion control is chosen per socket by the stacks (TCP_CONGESTION, --cc): a
    # namespace may set net.ipv4.tcp_congestion_control only to an algorithm of the host's
    # tcp_allowed_congestion_control (reno and bbr here, not cubic), a socket as root any.
    values = {
        "net.ipv4.tcp_slow_start_after_idle": "1" if settings.slow_start_after_idle else "0",
    }
    values.update(settings.sysctls)
    return values


# --- one run -------------------------------------------------------------------------------


@dataclass
class RunEnvironment:
    """What stays up across the runs of one experiment."""

    link: Any
    """A ``netem.link.Link`` that is up."""
    result: ResultDir
    spec: ExperimentSpec
    set_route_metrics: bool = False
    """True when some level sets initcwnd/initrwnd (every run then sets them)."""
    sysctl_defaults: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per role, the values at link up of every sysctl some level sets: a run of a level
    that does not set one gets this value back, not the previous level's."""
    current_link: str | None = None
    port_base: int = 20000
    log: Callable[[str], None] = lambda _msg: None


def _wait_listening(proc: subprocess.Popen, expected: int, timeout_s: float) -> list[str]:
    """Read the server's stdout until ``expected`` 'listening' lines (or fail)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while sum("listening" in line for line in lines) < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"server did not listen within {timeout_s:g} s")
            if not sel.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server exited ({proc.wait()}) before listening")
            lines.append(line.decode(errors="replace").rstrip())
    return lines


def _stop(proc: subprocess.Popen | None, timeout_s: float = SERVER_STOP_TIMEOUT_S) -> int | None:
    if proc is None:
        return None
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def _tail(path: Path, limit: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return (text[-1] if text else "")[:limit]


def _emulator_pids(link: Any) -> list[int]:
    state = getattr(link, "state", None)
    pids = []
    for name in ("emulator_pid", "emulator_pids"):
        value = getattr(state, name, None) if state is not None else getattr(link, name, None)
        if isinstance(value, int):
            pids.append(value)
        elif isinstance(value, (list, tuple)):
            pids.extend(int(v) for v in value)
    return pids


def execute_run(env: RunEnvironment, planned: PlannedRun) -> dict[str, Any]:
    """Make one run and return its row (also saved as the run's row.json)."""
    from netem import nsexec

    level: Level = env.spec.level(planned.level)
    settings = level.settings
    link_spec = link_of(settings).with_seed(planned.link_seed)
    run_dir = env.result.fresh_run_dir(planned.run_id)
    started_utc = datetime.now(UTC).isoformat(timespec="seconds")
    wall0 = time.monotonic()
    row: dict[str, Any] = {
        **planned.to_dict(),
        "protocol": settings.protocol,
        "connection": settings.connection,
        "workload": settings.workload,
        "cc": getattr(settings, kinds.protocol(settings.protocol).cc_attr),
        "paced": sender_paces(settings),
        "rtt_s": link_spec.rtt_s,
        "loss": max(link_spec.up.mean_loss, link_spec.down.mean_loss),
        "up_bps": link_spec.up.rate_bps,
        "down_bps": link_spec.down.rate_bps,
        "link": str(link_spec),
        "started_utc": started_utc,
    }
    error: str | None = None
    server: subprocess.Popen | None = None
    client: subprocess.Popen | None = None
    progress: ProgressEvents | None = None
    stats_before = stats_after = None
    watch = CpuWatch()
    offset_s = time.time() - time.monotonic()
    try:
        link = env.link
        link.set_spec(link_spec)
        for role in ("client", "server"):
            values = {**env.sysctl_defaults.get(role, {}), **run_sysctls(settings)}
            link.set_sysctls(values, (role,))
        if env.set_route_metrics:
            for role in ("client", "server"):
                link.set_route_metrics(
                    role,
                    initcwnd=settings.initcwnd or DEFAULT_INITCWND_SEGMENTS,
                    initrwnd=settings.initrwnd,
                )
        port = env.port_base + planned.seq % 20000
        if settings.protocol == "h3" and settings.qlog:
            (run_dir / "qlog" / "server").mkdir(parents=True, exist_ok=True)
            (run_dir / "qlog" / "client").mkdir(parents=True, exist_ok=True)
        s_argv = server_argv(settings, link_spec, bind=link.server_addr, port=port, run_dir=run_dir)
        c_argv = client_argv(settings, link_spec, host=link.server_addr, port=port, run_dir=run_dir)
        names = [*sorted(run_sysctls(settings)), "net.ipv4.tcp_no_metrics_save"]
        atomic_write_json(
            run_dir / "run.json",
            {
                "run": planned.to_dict(),
                "settings": settings.to_dict(),
                "link": str(link_spec),
                "server_argv": s_argv,
                "client_argv": c_argv,
                "sysctls": {role: link.sysctls(role, names) for role in ("client", "server")},
                "clock_offset_s": offset_s,
            },
        )
        server_log = open(run_dir / "server.stderr", "wb")  # noqa: SIM115
        try:
            server = nsexec.popen(link.server_ns, s_argv, stdout=subprocess.PIPE, stderr=server_log)
        finally:
            server_log.close()
        _wait_listening(server, 1, SERVER_START_TIMEOUT_S)
        with watch:
            watch.watch("server", server.pid)
            watch.watch("emulator", next(iter(_emulator_pids(link)), None))
            for extra in _emulator_pids(link)[1:]:
                watch.watch("emulator", extra)
            stats_before = link.stats()
            capture = link.capture(run_dir) if settings.capture else contextlib.nullcontext()
            with capture:
                planned_events = kinds.workload(settings.workload).link_events(settings)
                with open(run_dir / "client.stderr", "wb") as client_err:
                    client = nsexec.popen(
                        link.client_ns,
                        c_argv,
                        stdout=subprocess.PIPE if planned_events else subprocess.DEVNULL,
                        stderr=client_err,
                    )
                if planned_events:
                    progress = ProgressEvents(link, planned_events, env.log)
                    progress.follow(client.stdout)
                watch.watch("client", client.pid)
                limit_s = kinds.workload(settings.workload).run_limit_s(settings)
                code = _wait_child(client, limit_s + CLIENT_TIMEOUT_MARGIN_S, watch)
                if code != 0:
                    error = f"client exited {code}: {_tail(run_dir / 'client.stderr')}"
            stats_after = link.stats()
    except Exception as err:  # a run that fails is recorded, never dropped
        error = f"harness: {type(err).__name__}: {err}".replace("\n", " ")[:300]
        (run_dir / "harness_error.txt").write_text(traceback.format_exc())
    finally:
        if client is not None and client.poll() is None:  # interrupted while it ran
            client.kill()
            client.wait()
        code = _stop(server)
        if code not in (0, None, -signal.SIGTERM) and error is None:
            error = f"server exited {code}: {_tail(run_dir / 'server.stderr')}"
    fired = progress.finish(run_dir) if progress is not None else []
    try:
        row.update(
            _collect(
                env,
                settings,
                link_spec,
                run_dir,
                watch,
                stats_before,
                stats_after,
                offset_s,
                error,
                fired,
            )
        )
    except Exception as err:
        row.update(
            valid=False,
            invalid_reason=f"harness: collecting failed: {type(err).__name__}: {err}"[:300],
        )
    row["wall_s"] = time.monotonic() - wall0
    try:
        typed = RunRow(**row)
    except TypeError as err:  # a column the model does not declare: a bug, said loudly
        raise RecordError("run", str(err)) from None
    env.result.save_row(typed)
    return typed.to_dict()


class ProgressEvents:
    """Gives a workload's link events when its client reports progress: the client prints
    ``progress N`` on stdout; at the first such N of ``events`` the link gets that event
    (netem.events string), now. What was given, and when, goes to link_events.json."""

    def __init__(
        self, link: Any, events: Mapping[int, Sequence[str]], log: Callable[[str], None]
    ) -> None:
        self.link = link
        self.events = {n: list(texts) for n, texts in events.items()}
        self.log = log
        self.fired: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None

    def on_line(self, line: str) -> None:
        mark, _, value = line.strip().partition(" ")
        if mark != "progress" or not value.isdigit():
            return
        for text in self.events.pop(int(value), []):
            given = time.monotonic()
            try:
                scheduled = self.link.event(text)
                self.fired.append(
                    {
                        "after_progress": int(value),
                        "event": text,
                        "kind": scheduled.kind,
                        "given_s": given,
                        "start_s": scheduled.start_s,
                        "end_s": scheduled.end_s if math.isfinite(scheduled.end_s) else None,
                    }
                )
            except Exception as err:  # recorded; the run's row says the event failed
                self.fired.append({"after_progress": int(value), "event": text, "error": str(err)})

    def follow(self, stream: Any) -> None:
        def run() -> None:
            for raw in iter(stream.readline, b""):
                self.on_line(raw.decode(errors="replace"))

        self._thread = threading.Thread(target=run, name="tb-progress", daemon=True)
        self._thread.start()

    def finish(self, run_dir: Path) -> list[dict[str, Any]]:
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self.fired:  # a rate change lasts for good: the next run gets its own path back
            try:
                self.link.end_events()
            except Exception as err:
                self.log(f"{run_dir.name}: ending the link events failed: {err}")
        atomic_write_json(run_dir / "link_events.json", self.fired)
        return self.fired


def _wait_child(proc: subprocess.Popen, timeout_s: float, watch: CpuWatch) -> int:
    """Wait for the client, sampling its CPU up to its exit (reaped with wait4)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, _usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return -signal.SIGKILL
        time.sleep(0.005)


def _collect(
    env: RunEnvironment,
    settings: Settings,
    link_spec: LinkSpec,
    run_dir: Path,
    watch: CpuWatch,
    before: Any,
    after: Any,
    offset_s: float,
    error: str | None,
    fired: Sequence[Any] = (),
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    builder = ROW_PARTS[kinds.workload(settings.workload).records]
    part = builder(settings, link_spec, run_dir, error, fired)
    out.update(part.columns)
    error, start_s, end_s, sha256_ok = part.error, part.start_s, part.end_s, part.sha256_ok
    # ACKs and in-flight from the packets
    upload = int(out["up_bytes"]) >= int(out["down_bytes"])
    ack_info = _acks(settings, run_dir, upload, offset_s, start_s, end_s)
    out.update(ack_info)
    # the link over the run
    lateness = None
    loss_checks: dict[str, tuple[float, int, int]] = {}
    if before is not None and after is not None:
        diff = after - before
        atomic_write_json(run_dir / "link_stats.json", diff.to_dict())
        for name in ("up", "down"):
            d = diff.direction(name)
            out[f"realised_loss_{name}"] = d.realised_loss
            out[f"queue_drops_{name}"] = d.dropped_queue
            out[f"dropped_loss_{name}"] = d.dropped_loss
            configured = getattr(link_spec, name)
            if configured.gemodel is None:
                loss_checks[name] = (configured.loss, d.dropped_loss, d.loss_trials)
        if "lateness" in diff.measured:
            p99 = [diff.direction(n).lateness_quantile_s(0.99) for n in ("up", "down")]
            p99 = [v for v in p99 if v is not None]
            lateness = max(p99) if p99 else None
        out["lateness_p99_s"] = lateness
        emulator_cpu = diff.emulator_cpu_fraction
        out["cpu_emulator_run"] = emulator_cpu
    cpu: dict[str, float | None] = {}
    waits: dict[str, float | None] = {}
    if start_s is not None and end_s is not None:
        for name in ("client", "server", "emulator"):
            cpu[name] = watch.fraction(name, start_s, end_s)
            out[f"cpu_{name}"] = cpu[name]
        out["steal"] = watch.steal(start_s, end_s)
        out["cpu_pressure"] = watch.pressure(start_s, end_s)
        for name in ("client", "server", "emulator"):
            waits[name] = watch.wait_s(name, start_s, end_s)
            out[f"runqueue_wait_{name}_s"] = waits[name]
    if out.get("cpu_emulator") is None and out.get("cpu_emulator_run") is not None:
        out["cpu_emulator"] = out["cpu_emulator_run"]
        cpu["emulator"] = out["cpu_emulator_run"]
    valid, reason = validity(
        error=error,
        sha256_ok=sha256_ok,
        cpu=cpu,
        steal=out.get("steal"),
        lateness_p99_s=lateness,
        configured_rtt_s=link_spec.rtt_s,
        measured_rtt_s=out.get("measured_rtt_s"),
        loss=loss_checks,
        runqueue_wait_s=waits,
        total_s=out.get("total_s"),
        host_pressure=out.get("cpu_pressure"),
    )
    out["valid"] = valid
    out["invalid_reason"] = reason
    if reason:
        env.log(f"{run_dir.name}: invalid: {reason}")
    return out


def _request_part(
    settings: Settings, link_spec: LinkSpec, run_dir: Path, error: str | None, _events: Any
) -> RowPart:
    """The row of a run of request records: its median measured request, its bound."""
    out: dict[str, Any] = {}
    records = read_records(run_dir / "records.jsonl", RequestRecord)
    server_events = read_records(run_dir / "server.jsonl", ServerEvent)
    opened = opened_connections(records)
    measured = [(r, o) for r, o in zip(records, opened, strict=True) if not r.warmup]
    phases = [request_phases(r, o) for r, o in measured]
    good = [(r, p) for (r, _), p in zip(measured, phases, strict=True) if p is not None]
    errors = [r.error for r in records if r.error]
    if error is None and errors:
        error = str(errors[0])
    if error is None and not good:
        error = "no measured request completed"
    # the run's request: the median of its measured requests
    workload = kinds.workload(settings.workload)
    up_default, down_default = workload.up_bytes(settings), workload.down_bytes(settings)
    start_s = end_s = None
    if good:
        good.sort(key=lambda rp: rp[1].total_s)
        record, ph = good[len(good) // 2]
        start_s, end_s = ph.start_s, ph.start_s + ph.total_s
        out.update(
            handshake_s=ph.handshake_s if ph.new_connection else 0.0,
            ttfb_s=ph.ttfb_s,
            total_s=ph.total_s,
            requests=len(good),
            up_bytes=record.up_bytes or up_default,
            down_bytes=record.down_bytes or down_default,
            resumed=record.resumed,
            early_data_accepted=record.early_data_accepted,
            client_retransmits=record.retransmits,
            client_min_rtt_s=record.min_rtt_s,
            **ph.rel,
        )
        out.update(server_phases(server_events, start_s, end_s))
    else:
        out.update(up_bytes=up_default, down_bytes=down_default, requests=0)
    sha_values = [r.sha256_ok for r, _ in measured]
    sha256_ok = None if not sha_values else all(v is True for v in sha_values)
    out["sha256_ok"] = sha256_ok
    bound = bound_for(settings, link_spec, int(out["up_bytes"]), int(out["down_bytes"]))
    if bound is not None:
        out.update(
            bound_s=bound.total_s,
            bound_setup_s=bound.setup_s,
            bound_feedback_s=bound.feedback_s,
            bound_window_s=bound.window_s,
            bound_serialisation_s=bound.serialisation_s,
            bound_propagation_s=bound.propagation_s,
            bound_processing_s=bound.processing_s,
            bound_retransmission_s=bound.retransmission_s,
            bound_expected_s=bound.expected_s,
        )
        if "total_s" in out and bound.total_s > 0:
            out["ratio"] = out["total_s"] / bound.total_s
        out["bound_mathis_s"] = mathis_time_s(settings, link_spec, bound)
    # events.jsonl: client and server on one clock
    events = []
    for index, record in enumerate(records):
        for key in CLIENT_EVENT_TIMES:
            if getattr(record, key) is not None:
                events.append(
                    {
                        "t": getattr(record, key),
                        "source": "client",
                        "event": key,
                        "request": index,
                        "warmup": record.warmup,
                        "conn": record.conn_index,
                    }
                )
    for event in server_events:
        events.append({**event.to_dict(), "source": "server"})
    events.sort(key=lambda e: e.get("t", 0.0))
    write_jsonl(run_dir / "events.jsonl", events)
    return RowPart(out, error, start_s, end_s, sha256_ok)


register_row_part("request", _request_part)


def _acks(
    settings: Settings,
    run_dir: Path,
    upload: bool,
    offset_s: float,
    start_s: float | None,
    end_s: float | None,
) -> dict[str, Any]:
    """acks.csv and inflight.csv of the data sender; counts within the request window."""
    out: dict[str, Any] = {}
    zero = start_s or 0.0
    rows: list[ackmod.AckRow] = []
    if settings.protocol == "h2":
        pcap = run_dir / ("client.pcap" if upload else "server.pcap")
        segments = ackmod.read_tcp_segments(pcap)
        if segments:
            result = ackmod.tcp_acks(segments, clock_offset_s=offset_s)
            rows = result.rows
            inside = _inside(rows, start_s, end_s)
            out["acks"] = len(inside)
            windows = [r.rwnd_bytes for r in inside if r.rwnd_bytes is not None]
            out["min_rwnd_bytes"] = min(windows) if windows else None
            out["retransmits"] = _retransmits_inside(segments, offset_s, start_s, end_s)
            out["measured_rtt_s"] = ackmod.handshake_rtt_s(segments)
            ackmod.write_inflight_csv(
                run_dir / "inflight.csv",
                ackmod.tcp_inflight(segments, clock_offset_s=offset_s),
                start_s=zero,
            )
    else:
        traces = ackmod.read_qlog_traces(run_dir / "qlog" / ("client" if upload else "server"))
        vantage = "client" if upload else "server"
        if traces:
            result_q = ackmod.quic_acks(traces, clock_offset_s=offset_s, vantage=vantage)
            rows = result_q.rows
            out["acks"] = len(_inside(rows, start_s, end_s))
            out["retransmits"] = (
                result_q.lost_packets
                if start_s is None or end_s is None
                else sum(start_s <= t <= end_s for t in result_q.lost_times_s)
            )
            out["measured_rtt_s"] = ackmod.qlog_min_rtt_s(traces)
            ackmod.write_inflight_csv(
                run_dir / "inflight.csv",
                ackmod.quic_inflight(traces, clock_offset_s=offset_s, vantage=vantage),
                start_s=zero,
            )
        _trim_qlog(run_dir / "qlog")
    if rows:
        ackmod.write_acks_csv(run_dir / "acks.csv", rows, start_s=zero)
    return out


def _inside(rows: Sequence[ackmod.AckRow], t0: float | None, t1: float | None) -> list:
    if t0 is None or t1 is None:
        return list(rows)
    return [r for r in rows if t0 <= r.time_s <= t1]


def _retransmits_inside(
    segments: Sequence[ackmod.TcpSegment], offset_s: float, t0: float | None, t1: float | None
) -> int:
    if t0 is None or t1 is None:
        return ackmod.tcp_acks(segments).retransmits
    window = [s for s in segments if t0 <= s.time_s - offset_s <= t1 + 1.0]
    return ackmod.tcp_acks(window).retransmits if window else 0


def _trim_qlog(directory: Path) -> None:
    """qlog costs ~1.1 KB per packet; very large traces are kept only up to a cap."""
    total = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    if total > KEEP_QLOG_BYTES:
        (directory / "TRIMMED").write_text(
            f"{total} bytes of qlog removed (cap {KEEP_QLOG_BYTES})\n"
        )
        for path in directory.rglob("*.qlog"):
            path.unlink()


# --- one experiment --------------------------------------------------------------------------


def versions() -> dict[str, str]:
    out = {"testbed": _version("transport-testbed"), "python": platform.python_version()}
    for package in (
        "aioquic",
        "h2",
        "cryptography",
        "pyroute2",
        "scapy",
        "pandas",
        "numpy",
        "matplotlib",
        "uvloop",
        "pyarrow",
        "rich",
    ):
        out[package] = _version(package)
    return out


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment(link: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpus": os.cpu_count(),
        "backend": getattr(link, "backend", None),
        "link_name": getattr(link, "name", None),
    }
    try:
        from netem import sysctl

        names = [
            "net.ipv4.tcp_congestion_control",
            "net.ipv4.tcp_slow_start_after_idle",
            "net.ipv4.tcp_no_metrics_save",
            "net.ipv4.tcp_rmem",
            "net.ipv4.tcp_wmem",
            "net.core.rmem_max",
            "net.core.wmem_max",
            "net.ipv4.tcp_sack",
            "net.ipv4.tcp_timestamps",
            "net.ipv4.tcp_ecn",
        ]
        info["sysctls"] = {
            role: sysctl.read_many(getattr(link, f"{role}_ns"), names)
            for role in ("client", "server")
        }
    except Exception as err:
        info["sysctls_error"] = str(err)
    try:
        from netem import topology

        qdiscs = {}
        for role in ("client", "server"):
            ns = getattr(link, f"{role}_ns")
            with topology.ipr(ns) as ip:
                qdiscs[role] = [
                    {
                        "ifindex": q["index"],
                        "kind": q.get_attr("TCA_KIND"),
                        "handle": q["handle"],
                        "parent": q["parent"],
                    }
                    for q in ip.get_qdiscs()
                ]
        info["qdiscs"] = qdiscs
    except Exception as err:
        info["qdiscs_error"] = str(err)
    with contextlib.suppress(Exception):
        info["link"] = link.show()
    return info


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
    else:
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


def copy_experiment_file(spec: ExperimentSpec, result: ResultDir) -> None:
    if spec.path and Path(spec.path).is_file():
        shutil.copyfile(spec.path, result.path / "experiment.toml")
