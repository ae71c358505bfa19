"""``testbed bench stacks``' second table: CPU per datagram sent and received, aioquic beside
the native stack (``quic_stack = "ngtcp2"``: tb-h3 on ngtcp2 0.12 and nghttp3 0.8), each end
as the runs run it.

In a network namespace of its own (loopback only; the testbed's ``tb-`` prefix, removed on
every exit path): ``testbed serve`` with the stack, then ``--reps`` downloads of the 5 MB
result (``workload = "result"``, a new connection each, 1200-byte datagrams, qlog on at both
ends as in every run). Per transfer:

- server CPU: the on-CPU time of every thread of the server's process tree
  (/proc/PID/task/TID/schedstat, nanoseconds): for aioquic the ``testbed serve`` process;
  for the native stack the same process (its Python edge: routes, log) and its engine child,
  the engine also apart (``server_engine_us_per_dgram``);
- client CPU: the client runs in this process (getrusage of this process, µs); the native
  stack's engine is its child, reaped when the run ends (getrusage of the reaped children);
  the whole end is the sum, the engine apart in ``client_engine_us_per_dgram``;
- datagrams: the QUIC packets each end's qlog logged as sent and received (a datagram
  carries one packet after the handshake); beside them ``udp_sends``, the namespace's
  /proc/net/snmp ``Udp: OutDatagrams``, which counts a GSO batch once: how many sends the
  datagrams took.

The table gives, per stack and end, CPU microseconds per datagram handled (sent + received)
as the median over the transfers, and ``*_cores_at_333mbit``: the share of one core the end
needs to move the 5 MB at the chapter's 333 Mbit/s (its CPU seconds for the transfer over
the transfer's time at that rate), with the host's load around it (these VMs share CPUs).
Root is needed (the namespace).
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from clients.api import run_requests
from clients.config import ClientConfig
from harness.run.stacks import testbed_argv, wait_listening
from netem import nsexec, topology
from proto.qlogseq import SEQ_SUFFIX, parse_qlog_seq
from tbcore import procfs, workloads
from tbcore.errors import SpecError
from tbcore.processes import stop_process
from tbcore.settings import Settings

BENCH_NAMESPACE = "tb-benchq-{pid}"
"""The namespace of one bench (``tb-``: ``testbed clean`` finds it if a bench is killed)."""
BENCH_PORT = 4433
BENCH_WORKLOAD = "result"
"""The 5 MB image result: long enough to amortise the handshake, short enough for aioquic."""
BENCH_TIMEOUT_S = 120.0
SERVER_START_S = 30.0
SERVER_STOP_S = 10.0
US_PER_S = 1e6
MS_PER_S = 1e3
CHAPTER_RATE_BPS = 333e6
"""The chapter's path rate (§12.1): the rate the cores column is read at."""
AT_RATE_S = workloads.RETOUCHED_SIZE_BYTES * 8 / CHAPTER_RATE_BPS
"""How long the 5 MB result takes at 333 Mbit/s (0.12 s): an end's CPU seconds for the
transfer over this is the share of a core it needs to keep up with the path."""


@dataclass(frozen=True)
class EndCount:
    """One end's packets in one transfer, from its qlog."""

    sent: int
    received: int

    @property
    def handled(self) -> int:
        return self.sent + self.received


def qlog_counts(traces: list[dict[str, Any]]) -> EndCount:
    """Packets sent and received over every trace of one end (aioquic's shape)."""
    sent = received = 0
    for trace in traces:
        for event in trace.get("events", []):
            name = event.get("name")
            sent += name == "transport:packet_sent"
            received += name == "transport:packet_received"
    return EndCount(sent=sent, received=received)


def parse_snmp_udp(text: str) -> dict[str, int]:
    """The ``Udp:`` counters of a /proc/net/snmp text, by name."""
    lines = [line.split() for line in text.splitlines() if line.startswith("Udp:")]
    if len(lines) < 2:
        raise SpecError("/proc/net/snmp", "no Udp: lines")
    return {k: int(v) for k, v in zip(lines[0][1:], lines[1][1:], strict=False)}


def tree_runtime_s(pid: int) -> float:
    """On-CPU seconds of every thread of ``pid`` and its live descendants (schedstat)."""
    total = 0.0
    for current in [pid, *procfs.descendant_pids(pid)]:
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/schedstat", encoding="ascii") as handle:
                    total += procfs.parse_schedstat(handle.read())[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total


def _children_runtime_s(pid: int) -> float:
    """On-CPU seconds of the descendants of ``pid`` alone (the native stack's engine)."""
    return math.fsum(tree_runtime_s(child) for child in procfs.child_pids(pid))


def _usage_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def bench_settings(stack: str) -> Settings:
    return Settings(
        protocol="h3",
        quic_stack=stack,
        workload=BENCH_WORKLOAD,
        connection="new",
        requests=1,
        timeout_s=BENCH_TIMEOUT_S,
    )


def _client(settings: Settings, qlog_dir: Path) -> tuple[list[Any], float, float]:
    """One transfer from this process; (records, CPU of this process, CPU of its children:
    the native engine)."""
    config = ClientConfig(host="127.0.0.1", port=BENCH_PORT, settings=settings, qlog_dir=qlog_dir)
    self_before, kids_before = _usage_s(resource.RUSAGE_SELF), _usage_s(resource.RUSAGE_CHILDREN)
    records = uvloop.run(run_requests(config))
    self_s = _usage_s(resource.RUSAGE_SELF) - self_before
    kids_s = _usage_s(resource.RUSAGE_CHILDREN) - kids_before
    return records, self_s, kids_s


def _snmp(ns: str) -> dict[str, int]:
    with nsexec.in_netns(ns):
        return parse_snmp_udp(Path("/proc/thread-self/net/snmp").read_text())


def one_transfer(ns: str, stack: str, server_pid: int, work: Path, index: int) -> dict[str, Any]:
    """One 5 MB download: the row of its CPU and datagrams."""
    settings = bench_settings(stack)
    qlog_dir = work / f"client-{index}"
    qlog_dir.mkdir()
    server_dir = work / "server-qlog"
    before_files = set(server_dir.iterdir())
    snmp0 = _snmp(ns)
    server0, engine0 = tree_runtime_s(server_pid), _children_runtime_s(server_pid)
    with nsexec.in_netns(ns):
        records, self_s, kids_s = _client(settings, qlog_dir)
    server_s, snmp1 = tree_runtime_s(server_pid) - server0, _snmp(ns)
    engine_s = _children_runtime_s(server_pid) - engine0
    record = records[-1]
    if record.error or not record.sha256_ok:
        raise RuntimeError(f"{stack}: {record.error or 'checksum mismatch'}")
    client = qlog_counts(read_traces(sorted(qlog_dir.iterdir())))
    server = qlog_counts(read_traces(_settled(server_dir, before_files)))
    client_s = self_s + kids_s
    native = stack == "ngtcp2"

    def per_dgram(cpu_s: float, handled: int) -> float | None:
        return cpu_s * US_PER_S / handled if handled else None

    return {
        "stack": stack,
        "transfer_ms": (record.response_last_byte - record.request_first_byte) * MS_PER_S,
        "client_sent": client.sent,
        "client_received": client.received,
        "server_sent": server.sent,
        "server_received": server.received,
        "udp_sends": snmp1["OutDatagrams"] - snmp0["OutDatagrams"],
        "client_us_per_dgram": per_dgram(client_s, client.handled),
        "server_us_per_dgram": per_dgram(server_s, server.handled),
        "client_engine_us_per_dgram": per_dgram(kids_s, client.handled) if native else None,
        "server_engine_us_per_dgram": per_dgram(engine_s, server.handled) if native else None,
        "client_cores_at_333mbit": client_s / AT_RATE_S,
        "server_cores_at_333mbit": server_s / AT_RATE_S,
    }


SETTLE_S = 0.2
"""A server's qlog file is complete once its size has not changed for this long (aioquic
writes it when the connection ends, gtlsserver flushes it when the connection is freed)."""
SETTLE_MAX_S = 5.0


def _settled(directory: Path, before: set[Path]) -> list[Path]:
    """The files that appeared in ``directory`` since ``before``, once they stopped growing."""
    deadline = time.monotonic() + SETTLE_MAX_S
    sizes: dict[Path, int] = {}
    while time.monotonic() < deadline:
        now = {p: p.stat().st_size for p in directory.iterdir() if p not in before}
        if now and now == sizes:
            return sorted(now)
        sizes = now
        time.sleep(SETTLE_S)
    return sorted(sizes)


def read_traces(paths: list[Path]) -> list[dict[str, Any]]:
    """The traces of qlog files of either stack, clock or not (counting needs none)."""
    traces: list[dict[str, Any]] = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == SEQ_SUFFIX:
            traces.append({"events": parse_qlog_seq(text, path.name).events})
        else:
            traces += json.loads(text).get("traces", [])
    return traces


def bench_stack(ns: str, stack: str, reps: int, work: Path) -> list[dict[str, Any]]:
    """``reps`` transfers against one server of ``stack`` in namespace ``ns``."""
    settings_file = work / f"{stack}-settings.json"
    settings_file.write_text(bench_settings(stack).to_json())
    server_dir = work / "server-qlog"
    server_dir.mkdir(exist_ok=True)
    argv = [*testbed_argv(), "serve", "--bind", "127.0.0.1", "--h3-port", str(BENCH_PORT)]
    argv += ["--no-h2", "--settings", str(settings_file), "--qlog-dir", str(server_dir)]
    proc = nsexec.popen(ns, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        wait_listening(proc, 1, SERVER_START_S)
        return [one_transfer(ns, stack, proc.pid, work, i) for i in range(reps)]
    finally:
        stop_process(proc, SERVER_STOP_S)
        for path in server_dir.iterdir():
            path.unlink()


def run_datagrams(stacks: list[str], reps: int) -> list[dict[str, Any]]:
    """Every stack's transfers in one namespace of this bench's (module docstring)."""
    if os.geteuid() != 0:
        raise SpecError("quic-stacks", "the per-datagram table needs root (a namespace)")
    ns = BENCH_NAMESPACE.format(pid=os.getpid())
    topology.create_namespace(ns)
    try:
        with tempfile.TemporaryDirectory(prefix="tb-benchq-") as tmp:
            rows = []
            for stack in stacks:
                work = Path(tmp) / stack
                work.mkdir()
                rows += bench_stack(ns, stack, reps, work)
            return rows
    finally:
        topology.delete_namespace(ns)


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stack, the median of each column over its transfers."""
    out = []
    for stack in dict.fromkeys(r["stack"] for r in rows):
        mine = [r for r in rows if r["stack"] == stack]
        line: dict[str, Any] = {"stack": stack, "transfers": len(mine)}
        for key in mine[0]:
            values = [r[key] for r in mine if isinstance(r[key], (int, float))]
            if key != "stack" and values:
                line[key] = statistics.median(values)
        out.append(line)
    return out
