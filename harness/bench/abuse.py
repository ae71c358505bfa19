"""``testbed abuse``: a benchmark of the servers under attack, on loopback only.

For each attack (:data:`ATTACKS`) a fresh ``testbed serve`` runs; a normal HTTP/2 and
HTTP/3 request (``GET /stream?chunks=1``: one 960-byte chunk after 12 ms, on a new
connection, so handshake and event-loop delays show whole) is timed
quiet, during the attack (which runs in its own process from 127.0.0.2) and for
:data:`AFTER_S` after it; the server's CPU and RSS are sampled from ``/proc`` throughout.
Every attack is bounded in count and time, and the whole benchmark stops by itself.

``--server-src DIR`` runs the server from another source tree (e.g. ``git archive`` of an
older commit) with this interpreter: the before/after comparison of issue 17.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue as queue_module
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from clients.api import run_requests
from clients.config import ClientConfig
from harness.abuse import attacks, protocol
from servers.process import ServerProcess
from tbcore import paths, procfs
from tbcore.errors import SpecError

PROBE_TIMEOUT_S = 5.0
"""A normal request that takes longer counts as failed (and is shown as such)."""
PROBE_CHUNKS = 1
"""The normal request: one streamed chunk (960 bytes, 12 ms of processing)."""
QUIET_PROBES = 5
"""Probes per protocol before the attack; their median is the quiet latency."""
AFTER_S = 6.0
"""How long requests are timed after an attack ends."""
PROBE_GAP_S = 0.1
"""Pause between two probes."""
SAMPLE_INTERVAL_S = 0.2
"""CPU and RSS of the server are read from /proc this often."""
RECOVERED_FACTOR = 2.0
"""A request is "back to normal" within this factor of its quiet latency (issue 17)."""
ATTACK_GRACE_S = 30.0
"""An attack process still running this long after its duration is killed (setting up 200
TLS connections takes 5 s or more on a loaded 2-core host)."""
RECOVERY_RUN_PROBES = 4
"""Back to normal: the first of this many consecutive probes (two of each protocol) all
within RECOVERED_FACTOR of their quiet latency. One late probe on a shared host is noise,
not a server that has not recovered."""
FLOOD_FRAMES = 5_000_000
"""Frames a control-frame flood sends at most (in its 5 s: the issue's SETTINGS flood sent
34.8 MB, about 2.3 million frames)."""
TABLE_WIDTH_CHARS = 200
"""The rich table is printed at least this wide (narrower terminals wrap every cell)."""


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    duration_s: float
    run: Callable[..., str]
    kwargs: dict[str, Any]


ATTACKS: dict[str, Attack] = {
    a.name: a
    for a in (
        Attack(
            "initial-flood",
            "forged QUIC Initials from one source: 10,000 at once, then 2,000/s",
            5.0,
            attacks.initial_flood,
            {"burst": 10_000, "rate_per_s": 2_000},
        ),
        Attack(
            "rapid-reset",
            "HTTP/2 HEADERS+RST_STREAM as fast as they go, up to 1,000,000 (CVE-2023-44487)",
            5.0,
            attacks.rapid_reset,
            {"streams": 1_000_000},
        ),
        Attack(
            "slowloris",
            "200 TLS connections sending a request head one byte per second for 12 s",
            12.0,
            attacks.slowloris,
            {"connections": 200, "byte_interval_s": 1.0},
        ),
        Attack(
            "idle-flood",
            "2,000 TCP connections that send nothing",
            6.0,
            attacks.idle_flood,
            {"connections": 2_000},
        ),
        Attack(
            "send-after-reset",
            "DATA on a stream the server reset after a 413, up to 500 MB",
            5.0,
            attacks.send_after_reset,
            {"max_bytes": 500_000_000},
        ),
        *(
            Attack(
                f"{kind}-flood",
                f"HTTP/2 {flood.what} frames as fast as they go, up to {FLOOD_FRAMES:,}, "
                f"nothing read ({cve})",
                5.0,
                attacks.control_flood,
                {"kind": kind, "frames": FLOOD_FRAMES},
            )
            for kind, flood, cve in (
                ("settings", attacks.FLOODS["settings"], "CVE-2019-9515"),
                ("ping", attacks.FLOODS["ping"], "CVE-2019-9512"),
                ("empty-data", attacks.FLOODS["empty-data"], "CVE-2019-9518"),
                ("priority", attacks.FLOODS["priority"], "CVE-2019-9513"),
                ("window-update", attacks.FLOODS["window-update"], "control-frame flood"),
                ("reset", attacks.FLOODS["reset"], "CVE-2019-9514"),
                ("unknown", attacks.FLOODS["unknown"], "RFC 9113 5.5"),
                ("priority-update", attacks.FLOODS["priority-update"], "RFC 9218"),
            )
        ),
        Attack(
            "header-block",
            "HTTP/2 header blocks of 64 MiB of one-byte literals (HEADERS + CONTINUATION), "
            "8 connections",
            5.0,
            protocol.header_block,
            {"block_bytes": 64 * 2**20, "connections": 8},
        ),
        Attack(
            "unfinished-block",
            "24 connections each sending a 64 MiB header block that never ends",
            6.0,
            protocol.unfinished_block,
            {"block_bytes": 64 * 2**20, "connections": 24},
        ),
        Attack(
            "trickled-data",
            "8 uploads whose DATA frame declares 16 MiB, then a byte every 2 s",
            8.0,
            protocol.trickled_data,
            {"connections": 8, "interval_s": 2.0},
        ),
        Attack(
            "hpack-table",
            "SETTINGS_HEADER_TABLE_SIZE 2^32-1, then 7,500 requests on one connection",
            15.0,
            protocol.hpack_table,
            {"requests": 7_500},
        ),
        Attack(
            "h3-control-frame",
            "an 8 MB reserved frame on the HTTP/3 control stream",
            5.0,
            protocol.h3_big_frame,
            {"frame_bytes": 8_000_000, "where": "control"},
        ),
        Attack(
            "h3-headers-frame",
            "an 8 MB HEADERS frame on an HTTP/3 request stream",
            5.0,
            protocol.h3_big_frame,
            {"frame_bytes": 8_000_000, "where": "request"},
        ),
        Attack(
            "flow-gap",
            "10 bytes at the flow-control edge of 12 QUIC streams (nothing before them)",
            3.0,
            protocol.flow_gap,
            {"streams": 12},
        ),
        Attack(
            "ack-ranges",
            "QUIC ACK frames of 540 ranges of packets never sent, 4,000 packets/s",
            4.0,
            protocol.ack_ranges,
            {"ranges": 540, "rate_per_s": 4_000},
        ),
        Attack(
            "stale-ticket",
            "a QUIC session ticket offered twice (the second time it is stale)",
            8.0,
            protocol.stale_ticket,
            {},
        ),
        Attack(
            "empty-uni-stream",
            "an empty unidirectional stream and one whose type is split across packets",
            2.0,
            protocol.empty_uni_stream,
            {},
        ),
    )
}


@dataclass
class Probe:
    t: float
    """Start, seconds after the attack started (negative: quiet)."""
    proto: str
    latency_s: float | None
    """None: failed or slower than PROBE_TIMEOUT_S."""


@dataclass
class AttackResult:
    attack: str
    server: str
    outcome: str = ""
    quiet_s: dict[str, float | None] = field(default_factory=dict)
    during_s: dict[str, list[float | None]] = field(default_factory=dict)
    after_s: dict[str, list[float | None]] = field(default_factory=dict)
    recovered_s: float | None = None
    """Seconds after the attack's end until every later request was within 2x quiet."""
    cpu_during_pct: float | None = None
    rss_base_mb: float | None = None
    rss_peak_mb: float | None = None
    rss_end_mb: float | None = None
    probes: list[Probe] = field(default_factory=list)


class ProcSampler:
    """CPU (utime+stime) and RSS of one process from /proc, in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []
        """(time, cpu seconds, rss bytes)"""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def read(self) -> tuple[float, float, float] | None:
        cpu_s = procfs.process_cpu_s(self.pid)
        rss = procfs.process_rss_bytes(self.pid)
        if cpu_s is None or rss is None:
            return None
        return time.monotonic(), cpu_s, float(rss)

    def _loop(self) -> None:
        while not self._stop.is_set():
            sample = self.read()
            if sample is not None:
                self.samples.append(sample)
            self._stop.wait(SAMPLE_INTERVAL_S)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> list[tuple[float, float, float]]:
        return [s for s in self.samples if start <= s[0] <= end]


async def probe(proto: str, port: int) -> float | None:
    """One normal request on a new connection: its latency, or None."""

    config = ClientConfig.of(
        protocol=proto,
        host="127.0.0.1",
        port=port,
        workload="stream",
        chunks=PROBE_CHUNKS,
        requests=1,
        connection="new",
        timeout_s=PROBE_TIMEOUT_S,
    )
    try:
        (record,) = await asyncio.wait_for(run_requests(config), PROBE_TIMEOUT_S)
    except (TimeoutError, OSError):
        return None
    if record.error is not None or record.response_last_byte is None:
        return None
    assert record.connect_start is not None
    latency = record.response_last_byte - record.connect_start
    return latency if latency <= PROBE_TIMEOUT_S else None


def _run_attack(attack: Attack, target: attacks.Target, queue: Any) -> None:
    try:
        queue.put(attack.run(target, attack.duration_s, **attack.kwargs))
    except Exception as err:  # the outcome line says what broke the attacker
        queue.put(f"attacker failed: {type(err).__name__}: {err}"[:200])


def server_command(src: Path | None) -> list[str] | None:
    if src is None:
        return None
    # -m would put the current directory first on sys.path; this puts ``src`` first
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(src)!r}); "
        "runpy.run_module('harness.cli', run_name='__main__')"
    )
    return [sys.executable, "-c", code]


async def measure(attack: Attack, src: Path | None, label: str) -> AttackResult:
    result = AttackResult(attack=attack.name, server=label)
    with tempfile.TemporaryDirectory(prefix="tb-abuse-") as tmp:
        args = ["--processing-audio", "0ms", "--log", str(Path(tmp) / "events.jsonl")]
        server = ServerProcess(args, command=server_command(src)).start()
        try:
            assert server.proc is not None
            target = attacks.Target("127.0.0.1", server.ports["h2"], server.ports["h3"])
            sampler = ProcSampler(server.proc.pid)
            sampler.start()
            try:
                await _phases(attack, target, sampler, result)
            finally:
                sampler.stop()
        finally:
            server.stop()
        result.outcome += "; " + server_tally(Path(tmp) / "events.jsonl")
    return result


def server_tally(log: Path) -> str:
    """What the server's event log says happened: connections, requests, abuse closes."""

    counts: Counter[str] = Counter()
    try:
        with log.open() as lines:
            for line in lines:
                try:
                    counts[json.loads(line).get("event", "")] += 1
                except ValueError:
                    continue
    except OSError:
        return "server log unreadable"
    return (
        f"server: {counts['connection_open']} conns, {counts['request_first_byte']} requests, "
        f"{counts['abuse']} closed for abuse"
    )


async def _probe_both(
    target: attacks.Target, t0: float, result: AttackResult, into: dict[str, list[float | None]]
) -> None:
    for proto, port in (("h2", target.h2_port), ("h3", target.h3_port)):
        start = time.monotonic()
        latency = await probe(proto, port)
        result.probes.append(Probe(start - t0, proto, latency))
        into.setdefault(proto, []).append(latency)
        await asyncio.sleep(PROBE_GAP_S)


async def _phases(
    attack: Attack, target: attacks.Target, sampler: ProcSampler, result: AttackResult
) -> None:
    quiet: dict[str, list[float | None]] = {}
    for _ in range(QUIET_PROBES):
        await _probe_both(target, time.monotonic(), result, quiet)
    for proto, values in quiet.items():
        ok = [v for v in values if v is not None]
        result.quiet_s[proto] = statistics.median(ok) if ok else None
    base = sampler.read()
    result.rss_base_mb = base[2] / 1e6 if base else None
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=_run_attack, args=(attack, target, queue), daemon=True)
    t0 = time.monotonic()
    process.start()
    try:
        while process.is_alive() and time.monotonic() - t0 < attack.duration_s + ATTACK_GRACE_S:
            await _probe_both(target, t0, result, result.during_s)
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)
    t_end = time.monotonic()
    try:
        result.outcome = queue.get(timeout=1.0)
    except queue_module.Empty:
        result.outcome = "attacker gave no outcome"
    while time.monotonic() - t_end < AFTER_S:
        await _probe_both(target, t0, result, result.after_s)
    during = sampler.between(t0, t_end)
    if len(during) >= 2:
        result.cpu_during_pct = (
            100 * (during[-1][1] - during[0][1]) / max(during[-1][0] - during[0][0], 1e-9)
        )
    everything = sampler.between(t0, time.monotonic())
    if everything:
        result.rss_peak_mb = max(s[2] for s in everything) / 1e6
    end = sampler.read()
    result.rss_end_mb = end[2] / 1e6 if end else None
    result.recovered_s = recovery_s(result.probes, result.quiet_s, t_end - t0)


def recovery_s(
    probes: list[Probe], quiet_s: dict[str, float | None], attack_end: float
) -> float | None:
    """Seconds after ``attack_end`` until the first run of RECOVERY_RUN_PROBES consecutive
    probes all within RECOVERED_FACTOR of their quiet latency (0 if it starts at once);
    None if no such run came (or fewer probes were made than a run)."""
    later = [p for p in probes if p.t >= attack_end]
    run_start: float | None = None
    run = 0
    for p in later:
        quiet = quiet_s.get(p.proto)
        fine = p.latency_s is not None and quiet is not None
        fine = fine and p.latency_s <= RECOVERED_FACTOR * quiet  # type: ignore[operator]
        if not fine:
            run, run_start = 0, None
            continue
        if run == 0:
            run_start = p.t
        run += 1
        if run >= RECOVERY_RUN_PROBES:
            assert run_start is not None
            return 0.0 if run_start == later[0].t else max(0.0, run_start - attack_end)
    return None


def _ms(value: float | None) -> str:
    return "fail" if value is None else f"{value * 1000:.0f}"


def _series(values: list[float | None]) -> str:
    """``median / worst`` of a phase in ms, failures counted."""
    if not values:
        return "-"
    ok = [v for v in values if v is not None]
    failed = len(values) - len(ok)
    text = f"{statistics.median(ok) * 1000:.0f} / {max(ok) * 1000:.0f}" if ok else "all fail"
    if failed:
        text += f" ({failed}/{len(values)} fail)"
    return text


COLUMNS = (
    "attack",
    "server",
    "h2 quiet",
    "h2 during",
    "h2 after",
    "h3 quiet",
    "h3 during",
    "h3 after",
    "normal after (s)",
    "server CPU during",
    "RSS MB base/peak/end",
    "outcome",
)
"""The table's columns, in the order of :func:`cells`."""


def cells(r: AttackResult) -> list[str]:
    """One result's row of the table (:data:`COLUMNS`)."""
    return [
        r.attack,
        r.server,
        _ms(r.quiet_s.get("h2")),
        _series(r.during_s.get("h2", [])),
        _series(r.after_s.get("h2", [])),
        _ms(r.quiet_s.get("h3")),
        _series(r.during_s.get("h3", [])),
        _series(r.after_s.get("h3", [])),
        f"not in {AFTER_S:g} s" if r.recovered_s is None else f"{r.recovered_s:.1f}",
        "-" if r.cpu_during_pct is None else f"{r.cpu_during_pct:.0f} %",
        "/".join(
            "-" if v is None else f"{v:.0f}" for v in (r.rss_base_mb, r.rss_peak_mb, r.rss_end_mb)
        ),
        r.outcome,
    ]


def render(results: list[AttackResult]) -> Any:
    table = Table(title="testbed abuse: normal request latency (ms, median / worst) under attack")
    for column in COLUMNS:
        table.add_column(column)
    for r in results:
        table.add_row(*cells(r))
    return table


def markdown(results: list[AttackResult]) -> str:
    """The table as Markdown (for the README)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in results]
    return "\n".join(lines)


def parse_attacks(text: str) -> list[Attack]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise SpecError("attacks", "no attack named")
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        raise SpecError("attacks", f"{unknown[0][:40]!r} is not one of {', '.join(ATTACKS)}")
    return [ATTACKS[n] for n in names]


def _abuse(args: argparse.Namespace) -> int:
    chosen = parse_attacks(args.attacks)
    for flag, value in (("json", args.json), ("markdown", args.markdown)):
        if value is not None:
            paths.check_writable_file(flag, value)
    servers: list[tuple[str, Path | None]] = []
    if args.before is not None:
        if not (args.before / "servers" / "serve.py").is_file():
            raise SpecError("before", f"{str(args.before)[:200]} is not a testbed source tree")
        servers.append(("before", args.before))
    servers.append(("this", None))
    results: list[AttackResult] = []
    console = Console(width=max(Console().width, TABLE_WIDTH_CHARS))
    for attack in chosen:
        for label, src in servers:
            console.print(f"[dim]{attack.name} vs {label}: {attack.what}[/dim]")
            results.append(asyncio.run(measure(attack, src, label)))
    console.print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1, default=str) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(markdown(results) + "\n")
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``testbed bench abuse`` and, its older name, ``testbed abuse``."""
    for parent, name in ((bench, "abuse"), (commands, "abuse")):
        _add_parser(parent, name)


def _add_parser(parent: argparse._SubParsersAction, name: str) -> None:
    parser = parent.add_parser(
        name, help="attacks on loopback: normal request latency, CPU and RSS during each"
    )
    parser.add_argument(
        "--attacks", default=",".join(ATTACKS), help=f"comma-separated: {', '.join(ATTACKS)}"
    )
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="also run each attack against the server of this source tree (git archive)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, default=None, help="write the table as Markdown")
    parser.set_defaults(handler=_abuse)
