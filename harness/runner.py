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
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import acks as ackmod
from harness import bounds, machine
from harness import validity as judge
from harness.machine import CpuWatch
from harness.plan import DEFAULT_ATTEMPTS, Outcome, PlannedRun, next_attempt, plan_for, remaining
from harness.record import (
    ResultDir,
    atomic_write_json,
    utc_stamp,
    write_jsonl,
)
from harness.spec import ExperimentSpec, Level, link_of
from harness.validity import run_validity
from netem.linkspec import LinkSpec
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.records import RecordError, RequestRecord, ServerEvent
from tbcore.records import read_jsonl as read_records
from tbcore.runrow import RunRow
from tbcore.settings import DEFAULT_INITCWND_SEGMENTS, Settings

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
    """The judgement :func:`_collect` makes: only what the run itself says
    (:func:`harness.validity.run_validity`). The machine's load it records (``cpu``,
    ``steal``, ``lateness_p99_s``, ``runqueue_wait_s``, ``host_pressure``) is judged by its
    impact after collection (:func:`judge_run`), not by fixed thresholds here."""
    del cpu, steal, lateness_p99_s, runqueue_wait_s, total_s, host_pressure
    return run_validity(
        error=error,
        sha256_ok=sha256_ok,
        configured_rtt_s=configured_rtt_s,
        measured_rtt_s=measured_rtt_s,
        loss=loss,
    )


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
                with open(run_dir / "client.stderr", "wb") as client_err:
                    client = nsexec.popen(
                        link.client_ns,
                        c_argv,
                        stdout=subprocess.DEVNULL,
                        stderr=client_err,
                    )
                watch.watch("client", client.pid)
                code = _wait_child(client, settings.timeout_s + CLIENT_TIMEOUT_MARGIN_S, watch)
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
    try:
        row.update(
            _collect(
                env, settings, link_spec, run_dir, watch, stats_before, stats_after, offset_s, error
            )
        )
    except Exception as err:
        row.update(
            valid=False,
            invalid_reason=f"harness: collecting failed: {type(err).__name__}: {err}"[:300],
        )
    row["wall_s"] = time.monotonic() - wall0
    return typed_row(row).to_dict()


def typed_row(row: Mapping[str, Any]) -> RunRow:
    """The row as the record model's :class:`RunRow`; an undeclared column is a bug."""
    try:
        return RunRow(**row)
    except TypeError as err:  # a column the model does not declare: a bug, said loudly
        raise RecordError("run", str(err)) from None


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
) -> dict[str, Any]:
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
"""Called with ("start", run, None), ("retry", run, row) for an invalid attempt that will be
made again, ("done", run, row) for the last attempt of a planned run, and ("plan", None,
{"total", "left", "dir"})."""


# --- judging a run by its disturbance ------------------------------------------------------


def effect_scales(spec: ExperimentSpec) -> dict[str, float | None]:
    """Per level, the arm effect its comparisons are about, as the bounds predict it: the
    bound's difference to its baseline, and for a baseline the smallest difference to the
    levels compared with it; None without a bound or without a difference."""
    bound_s: dict[str, float | None] = {}
    for lv in spec.levels:
        workload = kinds.workload(lv.settings.workload)
        up, down = workload.up_bytes(lv.settings), workload.down_bytes(lv.settings)
        bound = bound_for(lv.settings, link_of(lv.settings), up, down)
        bound_s[lv.name] = None if bound is None else bound.total_s
    scales: dict[str, list[float]] = {lv.name: [] for lv in spec.levels}
    for lv in spec.levels:
        a, b = bound_s[lv.name], bound_s.get(lv.baseline)
        if lv.baseline == lv.name or a is None or b is None or abs(a - b) <= 0:
            continue
        scales[lv.name].append(abs(a - b))
        scales[lv.baseline].append(abs(a - b))
    return {name: min(values) if values else None for name, values in scales.items()}


def request_window(run_dir: Path) -> tuple[float, float] | None:
    """CLOCK_MONOTONIC start and end of the run's measured request (the median one, as
    :func:`_collect` picks it), from the client's records."""
    records = read_records(run_dir / "records.jsonl", RequestRecord)
    opened = opened_connections(records)
    phases = [request_phases(r, o) for r, o in zip(records, opened, strict=True) if not r.warmup]
    good = sorted((p for p in phases if p is not None), key=lambda p: p.total_s)
    if not good:
        return None
    median = good[len(good) // 2]
    return (median.start_s, median.start_s + median.total_s)


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def judge_run(
    row: dict[str, Any],
    run_dir: Path,
    effect_s: float | None,
    watch: machine.CpuWatch | None = None,
) -> dict[str, Any]:
    """The row with its disturbance estimate (harness.validity) and the verdict of both
    the run's own checks (already in the row) and the disturbance's impact. ``watch``: the
    run's CPU samples (for the endpoints' main threads; without it, the recorded waits of all
    their threads)."""
    total_s = _float(row.get("total_s"))
    window = request_window(run_dir) if total_s is not None else None
    path = None
    if window is not None:
        series = machine.emulator_lateness(run_dir)
        if series is not None:
            path = judge.critical_path(series, *window, rtt_s=float(row["rtt_s"]))
    waits = [_float(row.get(f"runqueue_wait_{n}_s")) for n in ("client", "server")]
    main: dict[str, float | None] = {}
    if watch is not None and window is not None:
        main = {n: watch.main_wait_s(n, *window) for n in ("client", "server")}
        waits = list(main.values())
    known = [w for w in waits if w is not None]
    wait_s = math.fsum(known) if known else None
    disturbance = judge.Disturbance(
        lateness_s=None if path is None else path.lateness_s,
        endpoint_wait_s=wait_s,
        endpoint_steal_s=judge.endpoint_steal_s(
            [_float(row.get("cpu_client")), _float(row.get("cpu_server"))],
            max(total_s or 0.0, machine.MIN_CPU_WINDOW_S),
            _float(row.get("steal")),
        )
        if total_s is not None
        else None,
    )
    ok, reason, limit = judge.judge_disturbance(disturbance, total_s, effect_s)
    own = (bool(row.get("valid")), row.get("invalid_reason"))
    valid, reasons = judge.combine(own, (ok, reason))
    return {
        **row,
        **judge.disturbance_columns(disturbance, total_s, effect_s),
        "main_wait_client_s": main.get("client"),
        "main_wait_server_s": main.get("server"),
        "flights_up": None if path is None else path.flights.get("up"),
        "flights_down": None if path is None else path.flights.get("down"),
        "disturbance_limit_s": limit,
        "valid": valid,
        "invalid_reason": reasons,
    }


def _make(env: RunEnvironment, run: PlannedRun, effect_s: float | None) -> dict[str, Any]:
    """One attempt: execute, judge, save the judged row."""
    previous = machine.last_watch()
    row = execute_run(env, run)
    watch = machine.last_watch()
    try:
        row = judge_run(
            row, env.result.run_dir(run.run_id), effect_s, None if watch is previous else watch
        )
    except Exception as err:  # a row is never lost to its judgement
        row.update(
            valid=False,
            invalid_reason=f"harness: judging failed: {type(err).__name__}: {err}"[:300],
        )
    env.result.save_row(typed_row(row))
    if not row.get("valid"):
        env.log(f"{run.run_id}: attempt {run.attempt} invalid: {row.get('invalid_reason')}")
    return row


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
    attempts: int = DEFAULT_ATTEMPTS,
) -> ExperimentResult:
    """Plan, run every run not yet finished (an invalid measured run again, up to
    ``attempts`` attempts in all), write the tables and the report."""
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
    by_id = {run.run_id: run for run in plan}
    outcomes = {r["run_id"]: Outcome.of_row(r) for r in result.rows()}
    left = remaining(plan, outcomes, attempts)
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
            scales = effect_scales(spec)
            for first in left:
                run: PlannedRun | None = first
                while run is not None:
                    if progress:
                        progress("start", run, None)
                    row = _make(env, run, scales.get(run.level))
                    rows.append(row)
                    outcomes[run.run_id] = Outcome.of_row(row)
                    made = run
                    run = next_attempt(by_id[made.planned_id], outcomes.values(), attempts)
                    if progress:
                        progress("done" if run is None else "retry", made, row)
    result.write_tables()
    result.update_manifest(
        finished_utc=utc_stamp(),
        finished=not remaining(
            plan, {r["run_id"]: Outcome.of_row(r) for r in result.rows()}, attempts
        ),
        attempts=attempts,
    )
    if report:
        from harness.report import build_report

        build_report(result.path)
    return ExperimentResult(result=result, rows=rows, skipped=len(plan) - len(left))


def copy_experiment_file(spec: ExperimentSpec, result: ResultDir) -> None:
    if spec.path and Path(spec.path).is_file():
        shutil.copyfile(spec.path, result.path / "experiment.toml")
