"""Competing traffic around a run's client (the ``cross`` setting, tbcore.cross): iperf3 in
the link's namespaces, its server in the server's and its client in the client's (``-R``
when the request's data goes down), started ``cross_lead`` before the measured client and
stopped after it.

TCP flows are one iperf3 test with ``-P N -C cc``; the UDP stream one test with ``-u -b``.
Both ends write their JSON report into the run directory (``cross-client.json``,
``cross-server.json``: per flow, bytes and rate every 100 ms); ``cross.json`` says what ran
and when on CLOCK_MONOTONIC. The harness reads the bytes each flow moved while the request
ran from the run's capture (harness.collect.cross), on the clock every process shares.

Guards, since iperf3 can hang (NOTES-machine: its UDP test's first packet is not resent, so
on a lossy path a test may never start): the control connection must come up within
:data:`CONNECT_TIMEOUT_MS`, the flows must still run when the lead is over (else the run
fails with iperf3's own words), the test ends by itself at most ``-t`` seconds after it
began, and at the end the client gets SIGINT (iperf3 then writes its report), the server
a grace period, then both are killed. A run whose competitor failed is an error, never a
run measured alone.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.spec.cross import cross_of, data_direction
from harness.store.files import CROSS_CLIENT_REPORT, CROSS_FILE, CROSS_SERVER_REPORT
from harness.store.resultdir import atomic_write_json
from netem import nsexec
from tbcore.cross import CrossTraffic
from tbcore.errors import SpecError
from tbcore.processes import stop_process
from tbcore.settings import Settings

PORT_BASE = 45000
PORT_SPAN = 5000
"""The competitor's port: PORT_BASE + the run's sequence mod PORT_SPAN (apart from the
stacks' 20000-39999), a fresh one per run."""
INTERVAL_S = 0.1
"""iperf3's report interval: each flow's rate every 100 ms."""
CONNECT_TIMEOUT_MS = 5000
"""iperf3 --connect-timeout: the control connection up within 5 s (25 RTTs at 200 ms)."""
LISTEN_TIMEOUT_S = 10.0
"""The iperf3 server must listen within this (it prints nothing before its JSON)."""
STOP_TIMEOUT_S = 5.0
"""After SIGINT, iperf3 writes its report and exits; past this it is killed."""
POLL_S = 0.02
TCP_LISTEN_STATE = "0A"
"""/proc/net/tcp's st column for LISTEN (include/net/tcp_states.h: TCP_LISTEN = 10)."""


def cross_port(seq: int) -> int:
    return PORT_BASE + seq % PORT_SPAN


def client_argv(
    traffic: CrossTraffic, *, server: str, port: int, direction: str, duration_s: float
) -> list[str]:
    """The iperf3 client of the competing traffic."""
    argv = ["iperf3", "-c", server, "-p", str(port), "--json", "-i", f"{INTERVAL_S:g}"]
    argv += ["-t", str(max(1, math.ceil(duration_s))), "--connect-timeout", str(CONNECT_TIMEOUT_MS)]
    if direction == "down":
        argv.append("-R")
    if traffic.kind == "udp":
        assert traffic.rate_bps is not None
        return [*argv, "-u", "-b", f"{traffic.rate_bps:.0f}"]
    return [*argv, "-P", str(traffic.flows), "-C", str(traffic.cc)]


def server_argv(*, bind: str, port: int) -> list[str]:
    """The iperf3 server: one test (``-1``), on the server's address only (IPv4, so that its
    socket shows in /proc/net/tcp)."""
    return ["iperf3", "-s", "-1", "-B", bind, "-p", str(port), "--json", "-i", f"{INTERVAL_S:g}"]


def listening(proc_net_tcp: str, port: int) -> bool:
    """Whether /proc/PID/net/tcp's text has a socket listening on ``port``."""
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if (
            len(fields) > 3
            and fields[3] == TCP_LISTEN_STATE
            and int(fields[1].rpartition(":")[2], 16) == port
        ):
            return True
    return False


@dataclass
class CrossRun:
    """What ran beside the client, for cross.json."""

    cross: str
    kind: str
    flows: int
    cc: str | None
    rate_bps: float | None
    direction: str
    port: int
    lead_s: float
    started_s: float = math.nan
    """CLOCK_MONOTONIC: the iperf3 client was launched."""
    client_start_s: float = math.nan
    """The lead was over: the measured client was started after this."""
    stopped_s: float = math.nan
    client_exit: int | None = None
    server_exit: int | None = None
    error: str | None = None


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return (lines[-1] if lines else "")[:200]


def _wait_listening(proc: subprocess.Popen, port: int, stderr: Path) -> None:
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"cross: iperf3 server exited {proc.returncode}: {_tail(stderr)}")
        with contextlib.suppress(OSError):
            if listening(Path(f"/proc/{proc.pid}/net/tcp").read_text(), port):
                return
        time.sleep(POLL_S)
    raise TimeoutError(f"cross: iperf3 server did not listen within {LISTEN_TIMEOUT_S:g} s")


def _report_error(path: Path) -> str | None:
    """iperf3's own error in its JSON report (``error``), if any."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    return str(error) if error else None


@contextlib.contextmanager
def competing(
    link: Any,
    settings: Settings,
    *,
    seq: int,
    run_dir: Path,
    duration_s: float,
    watch: Any = None,
) -> Iterator[CrossRun | None]:
    """The run's competing traffic around the block (None without ``cross``): flows running
    for ``cross_lead`` on entry, stopped on the way out, cross.json written. Raises (the run
    is an error) when the competitor fails to start or dies during the lead."""
    traffic = cross_of(settings)
    if traffic is None:
        yield None
        return
    if not hasattr(link, "client_ns") or not hasattr(link, "server_ns"):
        raise SpecError("cross", "needs the testbed's namespaces (an emulated link)")
    direction = data_direction(settings)
    port = cross_port(seq)
    record = CrossRun(
        cross=str(settings.cross), kind=traffic.kind, flows=traffic.flows, cc=traffic.cc,
        rate_bps=traffic.rate_bps, direction=direction, port=port, lead_s=settings.cross_lead_s,
    )  # fmt: skip

    server = client = None
    try:
        with (
            open(run_dir / CROSS_SERVER_REPORT, "wb") as out,
            open(run_dir / "cross-server.stderr", "wb") as err,
        ):
            server = nsexec.popen(
                link.server_ns, server_argv(bind=link.server_addr, port=port), stdout=out,
                stderr=err, start_new_session=True,
            )  # fmt: skip
        _wait_listening(server, port, run_dir / "cross-server.stderr")
        argv = client_argv(
            traffic, server=link.server_addr, port=port, direction=direction,
            duration_s=settings.cross_lead_s + duration_s,
        )  # fmt: skip
        with (
            open(run_dir / CROSS_CLIENT_REPORT, "wb") as out,
            open(run_dir / "cross-client.stderr", "wb") as err,
        ):
            record.started_s = time.monotonic()
            client = nsexec.popen(
                link.client_ns, argv, stdout=out, stderr=err, start_new_session=True
            )
        if watch is not None:
            watch.watch("cross", client.pid)
            watch.watch("cross", server.pid)
        time.sleep(settings.cross_lead_s)
        if client.poll() is not None:
            why = _report_error(run_dir / CROSS_CLIENT_REPORT) or _tail(
                run_dir / "cross-client.stderr"
            )
            raise RuntimeError(
                f"cross: iperf3 client exited {client.returncode} in the lead: {why}"
            )
        record.client_start_s = time.monotonic()
        yield record
    finally:
        record.stopped_s = time.monotonic()
        record.client_exit = stop_process(client, STOP_TIMEOUT_S, signal.SIGINT)
        if server is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=STOP_TIMEOUT_S)
        record.server_exit = stop_process(server, STOP_TIMEOUT_S)
        record.error = _report_error(run_dir / CROSS_CLIENT_REPORT)
        atomic_write_json(run_dir / CROSS_FILE, asdict(record))
