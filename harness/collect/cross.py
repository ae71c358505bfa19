"""Competing traffic in a run's row: what the flows beside the request delivered while it ran,
the request's share of the bottleneck, and its bound at its fair share (docs/models.md section
15), from the run's capture at the receiving end of the data direction (server.pcap for an
upload, client.pcap for a download: what left the bottleneck, on the run's one clock).

Each flow's rate over time goes to ``cross.csv`` (100 ms bins, the request and every
competing connection; gathered beside runs.csv); iperf3's own reports stay in the run
directory (harness.run.cross). The standing queue the request crossed is the least time its
data packets waited in the emulator's queue beyond their own serialisation (its packet log,
``packets-up.csv``/``packets-down.csv``) or, without a log, its handshake's round trip above
the configured one.
"""

from __future__ import annotations

import csv
import json
import math
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.collect.streamview import read_pcap
from harness.spec.cross import cross_of, data_direction
from harness.store.files import CROSS_FILE, CROSS_TABLE, PACKET_LOGS
from harness.store.resultdir import atomic_write_text
from netem import pcapng
from netem.linkspec import LinkSpec
from tbcore.cross import CrossTraffic
from tbcore.settings import Settings

BIN_S = 0.1
"""cross.csv's bins: each flow's rate every 100 ms (iperf3's interval)."""
UDP_PAYLOAD_BYTES = 1448
"""iperf3's UDP datagram payload on a 1500-byte path: 3.12 takes the control connection's
TCP MSS (1448 with timestamps) as its UDP length (``blksize`` in its report here)."""
IPV4_UDP_HEADER_BYTES = 28
MIN_FLOW_FRACTION = 0.01
"""A connection with less than 1 % of the competitors' bytes is iperf3's control channel,
not a flow."""
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_PORTS = struct.Struct("!HH")


@dataclass(frozen=True)
class Packet:
    """One IPv4 packet of a capture: when, how big, which ports."""

    time_s: float
    size_bytes: int
    proto: int
    sport: int
    dport: int


def parse_ipv4(time_s: float, data: bytes) -> Packet | None:
    """The fields of one captured IPv4 packet (None for anything else or a short header)."""
    if len(data) < _IPV4.size or data[0] >> 4 != 4:
        return None
    first, _, total, _, _, _, proto, _, _, _ = _IPV4.unpack_from(data)
    header = (first & 0x0F) * 4
    if proto not in (6, 17) or len(data) < header + _PORTS.size:
        return None
    sport, dport = _PORTS.unpack_from(data, header)
    return Packet(time_s, total, proto, sport, dport)


def flow_key(packet: Packet, direction: str) -> tuple[int, int]:
    """A data packet's connection as (server port, client port)."""
    return (packet.dport, packet.sport) if direction == "up" else (packet.sport, packet.dport)


def fair_share(traffic: CrossTraffic, capacity_bps: float | None) -> float | None:
    """docs/models.md section 15: ``1 / (n + 1)`` beside ``n`` TCP flows; beside a UDP stream,
    what its wire rate leaves of the capacity (None when it leaves nothing)."""
    if traffic.kind == "tcp":
        return 1.0 / (traffic.flows + 1)
    if not capacity_bps or traffic.rate_bps is None:
        return None
    wire = traffic.rate_bps * (UDP_PAYLOAD_BYTES + IPV4_UDP_HEADER_BYTES) / UDP_PAYLOAD_BYTES
    left = 1.0 - wire / capacity_bps
    return left if left > 0 else None


@dataclass(frozen=True)
class Window:
    """Bytes per connection that left the bottleneck in the request's window."""

    request_bytes: int
    cross_bytes: dict[tuple[int, int], int]

    @property
    def cross_total(self) -> int:
        return sum(self.cross_bytes.values())

    def flows(self) -> int:
        total = self.cross_total
        return sum(1 for b in self.cross_bytes.values() if total and b >= MIN_FLOW_FRACTION * total)


def window_bytes(
    packets: Iterable[Packet], direction: str, ports: tuple[int, int], start_s: float, end_s: float
) -> Window:
    """The request's (server port ``ports[0]``) and the competitors' (``ports[1]``) bytes in
    ``[start_s, end_s]`` of the data direction."""
    request = 0
    cross: dict[tuple[int, int], int] = defaultdict(int)
    for packet in packets:
        if not start_s <= packet.time_s <= end_s:
            continue
        server_port, _ = key = flow_key(packet, direction)
        if server_port == ports[0]:
            request += packet.size_bytes
        elif server_port == ports[1]:
            cross[key] += packet.size_bytes
    return Window(request, dict(cross))


def rate_rows(
    packets: Sequence[Packet], direction: str, ports: tuple[int, int], origin_s: float
) -> list[dict[str, Any]]:
    """cross.csv: per 100 ms bin (from ``origin_s``, the request's start) and connection, the
    bytes that left the bottleneck and their rate."""
    bins: dict[tuple[str, int], int] = defaultdict(int)
    names: dict[tuple[int, int], str] = {}
    for packet in packets:
        server_port, _ = key = flow_key(packet, direction)
        if server_port not in ports:
            continue
        if server_port == ports[0]:
            name = "request"
        else:
            name = names.setdefault(key, f"cross-{len(names)}")
        bins[(name, math.floor((packet.time_s - origin_s) / BIN_S))] += packet.size_bytes
    return [
        {"flow": name, "t_s": index * BIN_S, "bytes": size, "rate_bps": size * 8 / BIN_S}
        for (name, index), size in sorted(bins.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


def standing_queue_s(
    log_rows: Iterable[Mapping[str, str]],
    direction: str,
    port: int,
    link: LinkSpec,
    window: tuple[float, float],
) -> float | None:
    """The least wait of the request's data packets in the bottleneck's queue beyond their
    own serialisation (due - arrival - delay - size / rate) in ``window``; None on a traced
    or unlimited direction (no fixed serialisation) or without such packets."""
    spec = getattr(link, direction)
    if spec.rate_bps is None or spec.delay_trace is not None:
        return None
    least = math.inf
    for row in log_rows:
        if row.get("event") != "departed" or not row.get("due_s"):
            continue
        ports = (int(row["dst_port"] or 0), int(row["src_port"] or 0))
        if (ports[0] if direction == "up" else ports[1]) != port:
            continue
        arrival = float(row["arrival_s"])
        if not window[0] <= arrival <= window[1] or int(row["size_bytes"]) < 500:
            continue  # data packets only: an ACK's wait is not the data's
        serialise = int(row["size_bytes"]) * 8 / spec.rate_bps
        least = min(least, float(row["due_s"]) - arrival - spec.delay_s - serialise)
    return None if math.isinf(least) else max(0.0, least)


def _read_log(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _write_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    lines = ["flow,t_s,bytes,rate_bps"]
    lines += [f"{r['flow']},{r['t_s']:.1f},{r['bytes']},{r['rate_bps']:.0f}" for r in rows]
    atomic_write_text(path, "\n".join(lines) + "\n")


def cross_columns(
    settings: Settings,
    link: LinkSpec,
    run_dir: Path,
    clock_offset_s: float,
    port: int | None,
    window: tuple[float | None, float | None],
) -> tuple[dict[str, Any], float | None]:
    """The row's cross columns and the standing queue (None: not measured) of a run beside
    competing traffic; ``{}`` without ``cross``."""
    traffic = cross_of(settings)
    if traffic is None:
        return {}, None
    out: dict[str, Any] = {"cross": settings.cross}
    ran = json.loads((run_dir / CROSS_FILE).read_text(encoding="utf-8"))
    direction = data_direction(settings)
    pcap = pcapng.capture_file(run_dir, "server" if direction == "up" else "client")
    start, end = window
    if port is None or start is None or end is None or pcap is None:
        return out, None
    packets = [
        p for t, data in read_pcap(pcap) if (p := parse_ipv4(t - clock_offset_s, data)) is not None
    ]
    ports = (int(port), int(ran["port"]))
    counted = window_bytes(packets, direction, ports, start, end)
    _write_rows(run_dir / CROSS_TABLE, rate_rows(packets, direction, ports, start))
    together = counted.request_bytes + counted.cross_total
    out.update(
        cross_flows=counted.flows(),
        cross_bytes=counted.cross_total,
        cross_bps=counted.cross_total * 8 / (end - start) if end > start else None,
        request_wire_bytes=counted.request_bytes,
        request_share=counted.request_bytes / together if together else None,
        fair_share=fair_share(traffic, getattr(link, direction).mean_rate_bps),
    )
    log = _read_log(run_dir / PACKET_LOGS[direction])
    return out, standing_queue_s(log, direction, int(port), link, (start, end))
