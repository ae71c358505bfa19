"""The per-packet log: header fields parsed with struct, CSV written at stop."""

from __future__ import annotations

import csv
from pathlib import Path

from netem.emulator.core import LinkDirection
from netem.emulator.packetlog import CSV_COLUMNS, PacketLog, parse_headers
from netem.linkspec import DirectionSpec


def tcp_packet() -> bytes:
    from scapy.layers.inet import IP, TCP

    return bytes(
        IP(src="198.18.1.2", dst="198.18.2.2", id=77)
        / TCP(sport=40000, dport=443, seq=123456, ack=654321, flags="PA", window=501)
        / (b"d" * 100)
    )


def test_parse_tcp_udp_ipv6_and_garbage() -> None:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6

    assert parse_headers(tcp_packet()) == (6, 40000, 443, 123456, 654321, 0x18, 501, 77)
    udp = bytes(IP(id=5) / UDP(sport=7, dport=9) / b"x")
    assert parse_headers(udp) == (17, 7, 9, 0, 0, 0, 0, 5)
    udp6 = bytes(IPv6() / UDP(sport=1, dport=2))
    assert parse_headers(udp6)[:3] == (17, 1, 2)
    assert parse_headers(b"") == (0,) * 8
    assert parse_headers(b"\x45\x00") == (0,) * 8


def test_log_records_departures_and_drops(tmp_path: Path) -> None:
    core = LinkDirection("up", DirectionSpec(delay_s=0.01, rate_bps=1e6), 200)
    log = PacketLog("up")
    core.recorder = log
    core.receive(1.0, tcp_packet())
    core.receive(1.0, tcp_packet())  # queue full: dropped
    core.pop_due(2.0)
    path = tmp_path / "packets-up.csv"
    assert log.write_csv(path) == 2
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == list(CSV_COLUMNS)
    dropped, departed = sorted(rows, key=lambda r: r["event"], reverse=True)
    assert dropped["event"] == "dropped_queue" and dropped["departure_s"] == ""
    assert departed["event"] == "departed"
    assert float(departed["departure_s"]) == 2.0
    assert abs(float(departed["due_s"]) - (1.0 + 140 * 8 / 1e6 + 0.01)) < 1e-9
    assert departed["tcp_seq"] == "123456" and departed["tcp_flags"] == "24"
    assert departed["size_bytes"] == "140"


def test_memory_cap() -> None:
    log = PacketLog("down", memory_limit_bytes=10)
    for _ in range(5):
        log.dropped(0.0, "loss", tcp_packet())
    assert log.records == 1 and log.dropped_records == 4
