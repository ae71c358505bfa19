"""Cross-validation: the userspace emulator against the kernel's real sch_netem.

One short scenario, the same on both backends: a 200 ms round trip, 20 Mbit/s, 14 % random
loss on the data (upload) direction, and the 354,640-byte audio uploaded over a new kernel
TCP connection, several times per congestion control. The userspace emulator runs on this
host; netem runs in a stock-kernel QEMU guest (this host's kernel has no netem), booted by
``.ci/netem-vm``. Each part also sends a UDP echo probe across the idle link for its RTT
and realised loss. The parts are joined into one table (median, p25/p75, min, realised
loss, RTT) next to each other.

``testbed bench crossval`` measures both parts and writes ``results/reference/crossval.md``
and ``.json``; ``--part userspace`` or ``--part netem`` measures one part in this kernel
and writes its JSON (the guest runs ``python -m harness.bench.crossval --part netem``).

The core (statistics, table, report) is pure; sockets live in :func:`udp_probe` and
:func:`tcp_upload`, the VM in :func:`run_guest_part`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import select
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.bench.guest import guest_path, run_in_guest
from netem import names
from netem.link import Link
from netem.linkspec import LinkSpec, format_link, resolve_link
from netem.nsexec import in_netns
from netem.stats import LinkStats, host_cpu_s
from tbcore.errors import SpecError, require_schema
from tbcore.stats import median_difference_ci, quantile, tost_shift
from tbcore.tcpinfo import parse_tcp_info, read_tcp_info_raw
from tbcore.units import format_rate, parse_count
from tbcore.workloads import AUDIO_SIZE_BYTES

SCHEMA_VERSION = 1
"""Version of the JSON this module writes (bump on an incompatible change)."""

SCENARIO_LINK = "rtt=200ms,rate=20mbit,up.loss=14%"
"""The scenario: the dc-longhaul path's delay and loss (loss on the data direction only),
at a rate low enough for the guest's emulated CPU to carry it."""
UPLOAD_BYTES = AUDIO_SIZE_BYTES
"""The seed's ASR upload (docs/design.md "Workloads")."""
DEFAULT_RUNS = 10
DEFAULT_CCS = ("cubic", "bbr")
"""Congestion controls of the sender, set per socket (TCP_CONGESTION); runs alternate."""
DEFAULT_PROBES = 400
PROBE_GAP_S = 0.010
"""One UDP probe every 10 ms: 0.4 Mbit/s, nothing next to the link's 20 Mbit/s."""
PROBE_DRAIN_S = 1.5
"""Wait after the last probe for its echo (several round trips of the scenario)."""
UPLOAD_TIMEOUT_S = 180.0
"""One upload's limit: 14 % loss with loss-based TCP takes tens of seconds at worst."""
BACKENDS = ("userspace", "netem")
HOST_LINK_NAME = "vm2"
GUEST_LINK_NAME = "vm1"
GUEST_JSON_NAME = "crossval-netem.json"
"""The guest part's JSON, in the VM's writable share (:func:`harness.bench.guest.guest_path`)."""
GUEST_TIMEOUT_S = 2400.0
REFERENCE_STEM = Path("results/reference/crossval")
BOOTSTRAP_SEED = 20261202
EQUIVALENCE_MARGIN_FRACTION = 0.10
"""The backends agree on a congestion control when their upload times are equivalent within
10 % of the emulator's median (TOST, tbcore.stats.tost_shift): the arm effects the testbed
reports are tens of percent (docs/measurements.md, "The main job"), so a backend difference
under a tenth of the time changes none of them; the two kernels' TCP stacks (6.1 in the guest, the
host's newer one) alone may differ by a few percent under 14 % loss."""

SO_TIMESTAMPNS = 35
"""Kernel receive timestamps as a struct timespec (asm-generic/socket.h); Python lacks it."""
TCP_CONGESTION = 13
TCP_INFO_BYTES = 232
"""struct tcp_info up to tcpi_snd_wnd (linux/tcp.h, kernels >= 5.4)."""
PROBE_REQUEST = struct.Struct("!IQ")
"""seq, client send time (CLOCK_REALTIME ns)."""
PROBE_REPLY = struct.Struct("!IQQQ")
"""seq, client send time, server kernel receive time, server send time (ns)."""
TIMESPEC = struct.Struct("qq")


# --- what one part measured ---------------------------------------------------------------


@dataclass(frozen=True)
class TcpInfo:
    """The fields of ``struct tcp_info`` this comparison reads (linux/tcp.h offsets)."""

    total_retrans: int
    """Segments retransmitted over the connection's life."""
    min_rtt_us: int
    data_segs_out: int
    bytes_sent: int
    """Payload bytes sent, retransmissions included."""
    bytes_retrans: int
    snd_cwnd: int

    @classmethod
    def parse(cls, raw: bytes) -> TcpInfo:
        if len(raw) < TCP_INFO_BYTES:
            raise SpecError("tcp_info", f"{len(raw)} bytes, need {TCP_INFO_BYTES} (kernel < 5.4?)")
        info = parse_tcp_info(raw)  # tbcore.tcpinfo: the one decoder of struct tcp_info
        return cls(**{f.name: info[f.name] for f in fields(cls)})

    @classmethod
    def of(cls, sock: socket.socket) -> TcpInfo:
        return cls.parse(read_tcp_info_raw(sock))


@dataclass(frozen=True)
class Upload:
    """One upload over a new connection, timed on one clock (client and server threads)."""

    backend: str
    cc: str
    run: int
    upload_s: float
    """From the client's connect() to the server's read of the last byte."""
    connect_s: float
    """The handshake: connect() call to its return (one round trip)."""
    reply_s: float
    """connect() to the client's receipt of the server's one-byte reply."""
    size_bytes: int
    sha256_ok: bool
    retrans_segments: int
    data_segments: int
    bytes_sent: int
    bytes_retrans: int
    min_rtt_s: float
    """The sender's tcpi_min_rtt: the kernel's own RTT floor, free of Python overhead."""

    @property
    def retrans_fraction(self) -> float:
        """Retransmitted share of the payload bytes sent: the sender's view of the loss."""
        return self.bytes_retrans / self.bytes_sent if self.bytes_sent else 0.0


@dataclass(frozen=True)
class Probe:
    """A UDP echo probe across the idle link: the RTT and loss the path actually has."""

    sent: int
    rtts_s: list[float]
    """Kernel receive time minus send time, less the echo's own turnaround, per echo."""

    @property
    def received(self) -> int:
        return len(self.rtts_s)

    @property
    def loss(self) -> float:
        """Round-trip loss; with loss on one direction only, that direction's loss."""
        return 1.0 - self.received / self.sent if self.sent else math.nan


@dataclass
class Part:
    """Everything one backend measured, self-describing."""

    backend: str
    link: str
    """The canonical link string (``format_link``)."""
    ccs: list[str]
    runs: int
    uploads: list[Upload] = field(default_factory=list)
    probe: Probe | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    """Kernel, CPU steal, load, sysctls that matter, link counters."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Part:
        require_schema(data, "schema", SCHEMA_VERSION, "crossval.schema")
        try:
            probe = Probe(**data["probe"]) if data.get("probe") else None
            return cls(
                backend=data["backend"],
                link=data["link"],
                ccs=list(data["ccs"]),
                runs=int(data["runs"]),
                uploads=[Upload(**u) for u in data["uploads"]],
                probe=probe,
                environment=dict(data.get("environment", {})),
            )
        except (KeyError, TypeError) as err:
            raise SpecError("crossval", f"malformed part JSON: {err}") from None


# --- the pure core: statistics and the table ---------------------------------------------


def summary_rows(parts: Sequence[Part]) -> list[dict[str, Any]]:
    """One row per (congestion control, backend): the side-by-side table."""
    rows = []
    ccs = [cc for part in parts for cc in part.ccs]
    for cc in dict.fromkeys(ccs):
        for part in parts:
            uploads = [u for u in part.uploads if u.cc == cc]
            if not uploads:
                continue
            times = [u.upload_s for u in uploads]
            probe = part.probe
            rows.append(
                {
                    "cc": cc,
                    "backend": part.backend,
                    "runs": len(uploads),
                    "median_s": statistics.median(times),
                    "p25_s": quantile(times, 0.25),
                    "p75_s": quantile(times, 0.75),
                    "min_s": min(times),
                    "max_s": max(times),
                    "retrans_fraction": statistics.median(u.retrans_fraction for u in uploads),
                    "tcp_min_rtt_ms": 1e3 * min(u.min_rtt_s for u in uploads),
                    "probe_loss": probe.loss if probe else math.nan,
                    "probe_rtt_median_ms": 1e3 * statistics.median(probe.rtts_s)
                    if probe and probe.rtts_s
                    else math.nan,
                    "probe_rtt_p99_ms": 1e3 * quantile(probe.rtts_s, 0.99)
                    if probe and probe.rtts_s
                    else math.nan,
                    "link_loss_up": _counter_loss(part, "up"),
                    "integrity_ok": all(
                        u.sha256_ok and u.size_bytes == UPLOAD_BYTES for u in uploads
                    ),
                }
            )
    return rows


def _counter_loss(part: Part, direction: str) -> float:
    """The backend's own count of loss drops over the whole part (probe and all uploads)."""
    counters = part.environment.get("link_counters", {}).get(direction, {})
    value = counters.get("realised_loss")
    return math.nan if value is None else float(value)


def comparisons(parts: Sequence[Part]) -> list[dict[str, Any]]:
    """Per congestion control: netem's median minus the emulator's, with a bootstrap CI, and
    whether they are equivalent within :data:`EQUIVALENCE_MARGIN_FRACTION` (TOST)."""
    by_backend = {p.backend: p for p in parts}
    if not {"userspace", "netem"} <= set(by_backend):
        return []
    out = []
    for cc in dict.fromkeys(by_backend["userspace"].ccs + by_backend["netem"].ccs):
        user = [u.upload_s for u in by_backend["userspace"].uploads if u.cc == cc]
        kern = [u.upload_s for u in by_backend["netem"].uploads if u.cc == cc]
        if not user or not kern:
            continue
        diff, low, high = median_difference_ci(user, kern, seed=BOOTSTRAP_SEED)
        margin = EQUIVALENCE_MARGIN_FRACTION * statistics.median(user)
        verdict = tost_shift(user, kern, margin)
        out.append(
            {
                "cc": cc,
                "median_ratio": statistics.median(kern) / statistics.median(user),
                "median_diff_s": diff,
                "ci95_low_s": low,
                "ci95_high_s": high,
                "margin_s": margin,
                "tost_p": verdict.p_value,
                "equivalent": verdict.equivalent,
            }
        )
    return out


def why_they_differ(spec: LinkSpec) -> str:
    """Why the two backends can differ on ``spec``, by construction (not by measurement)."""
    rate = format_rate(spec.up.rate_bps) if spec.up.rate_bps else "unlimited"
    loss = f"{spec.up.mean_loss * 100:g} %"
    return WHY_THEY_DIFFER.format(rate=rate, loss=loss)


WHY_THEY_DIFFER = """\
Why the two can differ, by construction (not by measurement):

- Two TCP stacks: the guest runs Debian's 6.1 kernel, the host its own (6.x newer); loss
  recovery (RACK-TLP, SACK handling), cubic and bbr differ in detail between releases.
- Where loss happens: netem drops at enqueue, before its tbf child's rate limit, so a lost
  packet takes no bottleneck time; the emulator drops after the bottleneck (see
  netem/emulator/core.py). Below the {rate} rate (cubic under {loss} loss rarely gets near
  it) this changes nothing; a bbr sender that fills the rate loses up to {loss} of the
  bottleneck time to lost packets on the emulator.
- Loss draws: the emulator is seeded (the same sequence at every link up); netem's loss is
  unseeded. Each upload continues the sequence, so runs differ on both, but the emulator's
  part is repeatable and netem's is not.
- Devices and timing: netem sits on a router namespace's veth egress inside a software-
  emulated (TCG) guest, whose timers and softirqs run late whenever the host is busy: that
  is the probe RTT's tail in the netem rows. The emulator is a Python process on the host
  between two TUN devices, releasing packets about 0.1 to 0.3 ms late (shared
  docs/machine.md).
- Sample size: with {loss} loss, cubic's upload time can be heavy-tailed (retransmission
  timeouts with exponential back-off), so ten runs give a median whose 95 % interval spans
  seconds; the comparison excludes large differences, not small ones.
"""


def closing_note(parts: Sequence[Part]) -> str:
    """How close the two backends came, from the measured parts, then why they differ."""
    lines = []
    rows = {(r["cc"], r["backend"]): r for r in summary_rows(parts)}
    for comp in comparisons(parts):
        cc = comp["cc"]
        user, kern = rows[(cc, "userspace")], rows[(cc, "netem")]
        lines.append(
            f"- {cc}: median {kern['median_s']:.2f} s on netem vs {user['median_s']:.2f} s on "
            f"the emulator (ratio {comp['median_ratio']:.2f}; difference "
            f"[{comp['ci95_low_s']:+.2f}, {comp['ci95_high_s']:+.2f}] s, 95 %); equivalence "
            f"within ±{comp['margin_s']:.2f} s ({EQUIVALENCE_MARGIN_FRACTION:.0%} of the "
            f"emulator's median), TOST p = {comp['tost_p']:.3f}: "
            + (
                "the backends agree for this sender."
                if comp["equivalent"]
                else "agreement is not shown (they differ, or the sample is too small)."
            )
        )
    by = {p.backend: p for p in parts}
    spec = resolve_link(parts[0].link if parts else SCENARIO_LINK)
    if {"userspace", "netem"} <= set(by):
        probes = {b: p.probe for b, p in by.items()}
        if all(probes.values()):
            u, k = probes["userspace"], probes["netem"]
            lines.append(
                f"- Path: probe RTT median {1e3 * statistics.median(k.rtts_s):.2f} ms (netem) "
                f"vs {1e3 * statistics.median(u.rtts_s):.2f} ms (emulator), p99 "
                f"{1e3 * quantile(k.rtts_s, 0.99):.2f} vs {1e3 * quantile(u.rtts_s, 0.99):.2f}"
                f" ms; loss counted by the backends {100 * _counter_loss(by['netem'], 'up'):.1f}"
                f" % vs {100 * _counter_loss(by['userspace'], 'up'):.1f} % "
                f"({100 * spec.up.mean_loss:g} % configured)."
            )
    return "\n".join(lines) + "\n\n" + why_they_differ(spec)


def _fmt(value: float, digits: int = 2) -> str:
    return (
        "n/a"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (f"{value:.{digits}f}")
    )


def render_markdown(parts: Sequence[Part], note: str = "") -> str:
    """The reference report: the table, the comparison, the conditions, a closing note."""
    lines = [
        "# Cross-validation: userspace emulator vs kernel netem",
        "",
        f"Scenario: `{parts[0].link if parts else SCENARIO_LINK}`; a new kernel TCP "
        f"connection per run uploads {UPLOAD_BYTES:,} bytes; time from connect() to the "
        "server's read of the last byte. Produced by `testbed bench crossval` "
        "(harness/bench/crossval.py).",
        "",
        "| cc | backend | runs | median s | p25 s | p75 s | min s | max s "
        "| retrans share | link loss up | probe loss | TCP min RTT ms | probe RTT median ms "
        "| probe RTT p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in summary_rows(parts):
        lines.append(
            f"| {row['cc']} | {row['backend']} | {row['runs']} | {_fmt(row['median_s'])} "
            f"| {_fmt(row['p25_s'])} | {_fmt(row['p75_s'])} | {_fmt(row['min_s'])} "
            f"| {_fmt(row['max_s'])} | {_fmt(100 * row['retrans_fraction'], 1)} % "
            f"| {_fmt(100 * row['link_loss_up'], 1)} % | {_fmt(100 * row['probe_loss'], 1)} % "
            f"| {_fmt(row['tcp_min_rtt_ms'], 1)} | {_fmt(row['probe_rtt_median_ms'], 2)} "
            f"| {_fmt(row['probe_rtt_p99_ms'], 2)} |"
        )
    comps = comparisons(parts)
    if comps:
        lines += [
            "",
            "netem minus userspace, median upload time (95 % bootstrap interval), and the "
            "equivalence test (TOST, two one-sided Mann-Whitney tests) within "
            f"{EQUIVALENCE_MARGIN_FRACTION:.0%} of the emulator's median:",
            "",
        ]
        for c in comps:
            lines.append(
                f"- {c['cc']}: {c['median_diff_s']:+.2f} s "
                f"[{c['ci95_low_s']:+.2f}, {c['ci95_high_s']:+.2f}], "
                f"ratio {c['median_ratio']:.2f}; TOST p = {c['tost_p']:.3f} "
                f"({'equivalent' if c['equivalent'] else 'not shown equivalent'})"
            )
    lines += ["", "## Conditions", ""]
    for part in parts:
        env = part.environment
        details = ", ".join(f"{k} {v}" for k, v in env.items() if not isinstance(v, dict))
        lines.append(f"- {part.backend}: {details}")
    if note:
        lines += ["", "## Note", "", note.strip()]
    return "\n".join(lines) + "\n"


# --- the I/O edges: probes and uploads inside the namespaces -----------------------------


def _udp_socket(ns: str, addr: str) -> socket.socket:
    with in_netns(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addr, 0))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setblocking(False)
    return sock


def _recv_stamped(sock: socket.socket) -> tuple[bytes, Any, int] | None:
    """One datagram, its sender and its kernel receive time (ns, CLOCK_REALTIME)."""
    try:
        data, ancillary, _flags, peer = sock.recvmsg(64, socket.CMSG_SPACE(TIMESPEC.size))
    except BlockingIOError:
        return None
    stamp_ns = time.time_ns()
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = TIMESPEC.unpack(payload[: TIMESPEC.size])
            stamp_ns = sec * 1_000_000_000 + nsec
    return data, peer, stamp_ns


def probe_rtt_s(
    client_tx_ns: int, server_rx_ns: int, server_tx_ns: int, client_rx_ns: int
) -> float:
    """The network's round trip: the echo's turnaround in the server is taken out."""
    return ((client_rx_ns - client_tx_ns) - (server_tx_ns - server_rx_ns)) / 1e9


def udp_probe(
    client_ns: str,
    server_ns: str,
    *,
    count: int = DEFAULT_PROBES,
    gap_s: float = PROBE_GAP_S,
    drain_s: float = PROBE_DRAIN_S,
) -> Probe:
    """Echo ``count`` datagrams client -> server -> client, one every ``gap_s``."""
    server = _udp_socket(server_ns, names.SERVER_ADDR)
    client = _udp_socket(client_ns, names.CLIENT_ADDR)
    target = (names.SERVER_ADDR, server.getsockname()[1])
    rtts_s: list[float] = []
    seen: set[int] = set()
    try:
        start = time.monotonic()
        sent = 0
        deadline = start + count * gap_s + drain_s
        while (now := time.monotonic()) < deadline:
            if sent < count and now >= start + sent * gap_s:
                client.sendto(PROBE_REQUEST.pack(sent, time.time_ns()), target)
                sent += 1
                continue
            wake = start + sent * gap_s if sent < count else deadline
            readable, _, _ = select.select([server, client], [], [], max(0.0, wake - now))
            if server in readable and (got := _recv_stamped(server)) is not None:
                data, peer, rx_ns = got
                seq, tx_ns = PROBE_REQUEST.unpack(data[: PROBE_REQUEST.size])
                server.sendto(PROBE_REPLY.pack(seq, tx_ns, rx_ns, time.time_ns()), peer)
            if client in readable and (got := _recv_stamped(client)) is not None:
                data, _peer, rx_ns = got
                seq, tx_ns, srx_ns, stx_ns = PROBE_REPLY.unpack(data[: PROBE_REPLY.size])
                if seq not in seen:
                    seen.add(seq)
                    rtts_s.append(probe_rtt_s(tx_ns, srx_ns, stx_ns, rx_ns))
    finally:
        server.close()
        client.close()
    return Probe(sent=count, rtts_s=rtts_s)


def payload(size_bytes: int = UPLOAD_BYTES) -> bytes:
    """Deterministic bytes (SHAKE-256 of a label), so the receiver can check them."""
    return hashlib.shake_256(b"transport-testbed crossval upload").digest(size_bytes)


def tcp_upload(
    client_ns: str,
    server_ns: str,
    *,
    cc: str,
    data: bytes,
    backend: str,
    run: int,
    timeout_s: float = UPLOAD_TIMEOUT_S,
) -> Upload:
    """Upload ``data`` over a new connection with congestion control ``cc``; time it."""
    with in_netns(server_ns):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with in_netns(client_ns):
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server_side: dict[str, Any] = {}
    want = hashlib.sha256(data).hexdigest()

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(timeout_s)
                digest = hashlib.sha256()
                total = 0
                while total < len(data):
                    chunk = conn.recv(1 << 20)
                    if not chunk:
                        break
                    digest.update(chunk)
                    total += len(chunk)
                server_side["done"] = time.monotonic()
                server_side["bytes"] = total
                server_side["sha_ok"] = digest.hexdigest() == want
                conn.sendall(b"k")
        except OSError as err:
            server_side["error"] = err

    try:
        listener.bind((names.SERVER_ADDR, 0))
        listener.listen(1)
        listener.settimeout(timeout_s)
        try:
            client.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
        except OSError as err:
            raise SpecError("cc", f"{cc!r} refused by this kernel: {err.strerror}") from None
        client.settimeout(timeout_s)
        thread = threading.Thread(target=serve, name="tb-crossval-server", daemon=True)
        thread.start()
        t0 = time.monotonic()
        client.connect((names.SERVER_ADDR, listener.getsockname()[1]))
        t_connected = time.monotonic()
        client.sendall(data)
        reply = client.recv(1)
        t_reply = time.monotonic()
        info = TcpInfo.of(client)
        thread.join(timeout_s)
    finally:
        client.close()
        listener.close()
    if "error" in server_side:
        raise server_side["error"]
    if reply != b"k" or "done" not in server_side:
        raise OSError(f"upload {run} ({cc}) got no reply from the server")
    return Upload(
        backend=backend,
        cc=cc,
        run=run,
        upload_s=server_side["done"] - t0,
        connect_s=t_connected - t0,
        reply_s=t_reply - t0,
        size_bytes=server_side["bytes"],
        sha256_ok=server_side["sha_ok"],
        retrans_segments=info.total_retrans,
        data_segments=info.data_segs_out,
        bytes_sent=info.bytes_sent,
        bytes_retrans=info.bytes_retrans,
        min_rtt_s=info.min_rtt_us / 1e6,
    )


def cpu_counters() -> tuple[float, float]:
    """(total, steal) CPU seconds of the host (:func:`netem.stats.host_cpu_s`)."""
    _busy_s, steal_s, total_s = host_cpu_s()
    return total_s, steal_s


def steal_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    total = after[0] - before[0]
    return 100.0 * (after[1] - before[1]) / total if total > 0 else 0.0


def measure_part(
    backend: str,
    spec: LinkSpec,
    *,
    runs: int,
    ccs: Sequence[str],
    probes: int = DEFAULT_PROBES,
    name: str = HOST_LINK_NAME,
    progress: Callable[[str], None] | None = None,
) -> Part:
    """Bring a link up on ``backend``, probe it, run the uploads (ccs alternating), down."""
    progress = progress or _progress
    part = Part(backend=backend, link=format_link(spec), ccs=list(ccs), runs=runs)
    data = payload()
    steal_before = cpu_counters()
    started = time.monotonic()
    with Link.up(name, spec, backend=backend) as link:
        client_ns, server_ns = link.client_ns, link.server_ns
        part.environment["sysctls_client"] = link.sysctls(
            "client",
            [
                "net.ipv4.tcp_no_metrics_save",
                "net.ipv4.tcp_slow_start_after_idle",
                "net.ipv4.tcp_wmem",
                "net.ipv4.tcp_rmem",
            ],
        )
        stats_before = link.stats()
        part.probe = udp_probe(client_ns, server_ns, count=probes)
        progress(
            f"{backend}: probe {part.probe.received}/{part.probe.sent} echoes, "
            f"median RTT {1e3 * statistics.median(part.probe.rtts_s or [math.nan]):.2f} ms"
        )
        for run in range(runs):
            for cc in ccs:
                upload = tcp_upload(
                    client_ns, server_ns, cc=cc, data=data, backend=backend, run=run
                )
                part.uploads.append(upload)
                progress(
                    f"{backend}: run {run + 1}/{runs} {cc}: {upload.upload_s:.3f} s, "
                    f"{100 * upload.retrans_fraction:.1f} % retransmitted"
                )
        part.environment["link_counters"] = link_counters(link.stats() - stats_before)
    part.environment.update(
        kernel=platform.release(),
        cpus=os.cpu_count(),
        steal_percent=round(steal_percent(steal_before, cpu_counters()), 1),
        loadavg_1min=round(os.getloadavg()[0], 2),
        duration_s=round(time.monotonic() - started, 1),
        measured_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        in_vm=bool(os.environ.get("TESTBED_IN_VM")),
    )
    return part


def _progress(message: str) -> None:
    print(f"crossval: {message}", file=sys.stderr, flush=True)


def link_counters(delta: LinkStats) -> dict[str, dict[str, Any]]:
    """What the backend itself counted over the part, per direction (compact)."""
    out: dict[str, dict[str, Any]] = {}
    for name in ("up", "down"):
        d = delta.direction(name)
        out[name] = {
            "packets_in": d.packets_in,
            "packets_out": d.packets_out,
            "dropped_loss": d.dropped_loss,
            "dropped_queue": d.dropped_queue,
            "realised_loss": d.realised_loss,
            "lateness_p50_s": d.lateness_quantile_s(0.5),
            "lateness_p99_s": d.lateness_quantile_s(0.99),
            "lateness_max_s": d.lateness_max_s if d.lateness_samples else None,
        }
    return out


# --- the VM edge --------------------------------------------------------------------------


def guest_command(args: argparse.Namespace) -> list[str]:
    return [
        str(Path(sys.executable)),
        "-m",
        "harness.bench.crossval",
        "--part",
        "netem",
        "--runs",
        str(args.runs),
        "--cc",
        ",".join(args.cc),
        "--probes",
        str(args.probes),
        "--link",
        args.link,
        "--json",
        guest_path(GUEST_JSON_NAME),
    ]


def run_guest_part(args: argparse.Namespace) -> tuple[Part, dict[str, Any]]:
    """Boot the netem guest (``.ci/netem-vm``) to measure the netem part; read its JSON."""
    data, host = run_in_guest(guest_command(args), GUEST_JSON_NAME, GUEST_TIMEOUT_S)
    return Part.from_dict(data), host


# --- the command line ---------------------------------------------------------------------


def _ccs(text: str) -> list[str]:
    ccs = [cc.strip() for cc in text.split(",") if cc.strip()]
    if not ccs or any(not cc.isalnum() for cc in ccs):
        raise SpecError("cc", f"{text!r}: give congestion controls like cubic,bbr")
    return ccs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", default=str(DEFAULT_RUNS), help="uploads per cc and backend")
    parser.add_argument("--cc", default=",".join(DEFAULT_CCS), help="congestion controls")
    parser.add_argument("--probes", default=str(DEFAULT_PROBES), help="UDP echo probes")
    parser.add_argument("--link", default=SCENARIO_LINK, help="link string or preset")
    parser.add_argument(
        "--part",
        choices=("both", *BACKENDS),
        default="both",
        help="both (host emulator + netem guest, the default) or one part in this kernel",
    )
    parser.add_argument("--json", help="with --part: where to write the part's JSON")
    parser.add_argument(
        "--join",
        nargs=2,
        metavar=("USERSPACE_JSON", "NETEM_JSON"),
        help="measure nothing: join two part JSON files into the report at --out",
    )
    parser.add_argument(
        "--out",
        default=str(REFERENCE_STEM),
        help="with --part both: report stem (.md and .json are written)",
    )


def _validated(args: argparse.Namespace) -> argparse.Namespace:
    args.runs = parse_count("runs", args.runs)
    args.probes = parse_count("probes", args.probes)
    args.cc = _ccs(args.cc) if isinstance(args.cc, str) else args.cc
    spec = resolve_link(args.link)
    args.spec = spec
    return args


def read_part(path: str) -> Part:
    try:
        return Part.from_dict(json.loads(Path(path).read_text()))
    except OSError as err:
        raise SpecError("join", f"{path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise SpecError("join", f"{path}: not JSON ({err})") from None


def write_report(parts: Sequence[Part], stem: Path) -> str:
    """Write ``stem``.json (summary, comparisons, raw parts) and ``stem``.md; return the md."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "schema": SCHEMA_VERSION,
        "scenario": {"link": parts[0].link, "upload_bytes": UPLOAD_BYTES},
        "summary": summary_rows(parts),
        "comparisons": comparisons(parts),
        "parts": [p.to_dict() for p in parts],
    }
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    text = render_markdown(parts, note=closing_note(parts))
    stem.with_suffix(".md").write_text(text)
    return text


def handle(args: argparse.Namespace) -> int:
    args = _validated(args)
    if args.join:
        parts = [read_part(path) for path in args.join]
        if [p.backend for p in parts] != list(BACKENDS):
            raise SpecError("join", f"give the {BACKENDS[0]} part, then the {BACKENDS[1]} part")
        sys.stdout.write(write_report(parts, Path(args.out)))
        return 0
    if os.geteuid() != 0:
        raise SpecError("crossval", "needs root: it creates network namespaces")
    if args.part != "both":
        name = GUEST_LINK_NAME if args.part == "netem" else HOST_LINK_NAME
        part = measure_part(
            args.part, args.spec, runs=args.runs, ccs=args.cc, probes=args.probes, name=name
        )
        text = json.dumps(part.to_dict(), indent=1) + "\n"
        if args.json:
            Path(args.json).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    print(f"crossval: userspace part on this host ({platform.release()})", flush=True)
    user = measure_part(
        "userspace", args.spec, runs=args.runs, ccs=args.cc, probes=args.probes, name=HOST_LINK_NAME
    )
    print("crossval: netem part in the QEMU guest (.ci/netem-vm)", flush=True)
    kern, host = run_guest_part(args)
    kern.environment.update(host)
    sys.stdout.write(write_report([user, kern], Path(args.out)))
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``testbed bench crossval``."""
    parser = bench.add_parser(
        "crossval",
        help="the userspace emulator against real kernel netem (in a QEMU guest), side by side",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.crossval")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return handle(args)
    except SpecError as err:
        print(f"crossval: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
