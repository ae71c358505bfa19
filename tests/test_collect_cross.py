"""harness.collect.cross: what competing flows delivered beside the request, its share, its
standing queue and its fair share, from hand-made packets (no capture, no root)."""

from __future__ import annotations

import struct

import pytest

from harness.collect.cross import (
    Packet,
    fair_share,
    parse_ipv4,
    rate_rows,
    standing_queue_s,
    window_bytes,
)
from netem.linkspec import resolve_link
from tbcore.cross import CrossTraffic

REQUEST, CROSS = 20_001, 45_001


def ipv4(total: int, proto: int, sport: int, dport: int) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, proto, 0, b"\1" * 4, b"\2" * 4)
    return header + struct.pack("!HH", sport, dport) + b"\0" * 16


def test_an_ipv4_packets_size_and_ports() -> None:
    packet = parse_ipv4(1.5, ipv4(1500, 6, 40_000, REQUEST))
    assert packet == Packet(1.5, 1500, 6, 40_000, REQUEST)
    assert parse_ipv4(0.0, ipv4(100, 17, 1, 2)) == Packet(0.0, 100, 17, 1, 2)
    assert parse_ipv4(0.0, b"\x60" + b"\0" * 40) is None  # IPv6
    assert parse_ipv4(0.0, ipv4(100, 1, 0, 0)) is None  # ICMP: no ports
    assert parse_ipv4(0.0, b"\x45\0") is None


def _upload(times: list[float], sport: int, dport: int, size: int = 1500) -> list[Packet]:
    return [Packet(t, size, 6, sport, dport) for t in times]


def test_bytes_in_the_requests_window_by_connection() -> None:
    packets = [
        *_upload([0.5, 1.0, 1.5], 50_000, REQUEST),
        *_upload([0.0, 0.9, 1.1, 1.2, 2.5], 51_000, CROSS),
        *_upload([1.0, 1.4], 51_002, CROSS),
        *_upload([1.3], 51_004, CROSS, size=60),  # iperf3's control channel
        *_upload([1.1], 40_000, 80),  # something else
    ]
    counted = window_bytes(packets, "up", (REQUEST, CROSS), 1.0, 1.5)
    assert counted.request_bytes == 2 * 1500
    assert counted.cross_bytes == {
        (CROSS, 51_000): 3000,
        (CROSS, 51_002): 3000,
        (CROSS, 51_004): 60,
    }
    assert counted.cross_total == 6060
    assert counted.flows() == 2  # the control channel is not a flow


def test_a_download_is_counted_by_its_source_port() -> None:
    packets = _upload([1.0], REQUEST, 50_000) + _upload([1.0], CROSS, 51_000)
    counted = window_bytes(packets, "down", (REQUEST, CROSS), 0.0, 2.0)
    assert counted.request_bytes == 1500 and counted.cross_total == 1500


def test_rates_every_100_ms_from_the_requests_start() -> None:
    packets = _upload([1.00, 1.05, 1.15], 50_000, REQUEST) + _upload([0.95, 1.01], 51_000, CROSS)
    rows = rate_rows(packets, "up", (REQUEST, CROSS), 1.0)
    assert rows[0] == {"flow": "cross-0", "t_s": -0.1, "bytes": 1500, "rate_bps": 120_000.0}
    assert {"flow": "request", "t_s": 0.0, "bytes": 3000, "rate_bps": 240_000.0} in rows
    assert {"flow": "request", "t_s": 0.1, "bytes": 1500, "rate_bps": 120_000.0} in rows


def test_the_fair_share_of_section_15() -> None:
    assert fair_share(CrossTraffic("tcp", 1, cc="cubic"), 1e6) == 0.5
    assert fair_share(CrossTraffic("tcp", 4, cc="bbr"), None) == pytest.approx(0.2)
    udp = CrossTraffic("udp", 1, rate_bps=15e6 * 1448 / 1476)  # 15 Mbit/s on the wire
    assert fair_share(udp, 20e6) == pytest.approx(0.25)
    assert fair_share(udp, 10e6) is None  # it leaves nothing
    assert fair_share(udp, None) is None


def _log(arrival: float, due: float, size: int = 1500, dport: int = REQUEST) -> dict[str, str]:
    return {
        "event": "departed", "arrival_s": str(arrival), "due_s": str(due),
        "size_bytes": str(size), "src_port": "50000", "dst_port": str(dport),
    }  # fmt: skip


def test_the_standing_queue_is_the_least_wait_beyond_serialisation() -> None:
    link = resolve_link("rtt=200ms,rate=12mbit")  # 1 ms per 1500 bytes, 100 ms one way
    rows = [
        _log(1.0, 1.0 + 0.1 + 0.001 + 0.050),  # waited 50 ms
        _log(1.2, 1.2 + 0.1 + 0.001 + 0.030),  # 30 ms: the least
        _log(1.3, 1.3 + 0.1 + 0.001 + 0.001, dport=CROSS),  # a competitor's: not counted
        _log(1.4, 1.4 + 0.1 + 0.001, size=52),  # an ACK-sized packet: not data
        _log(3.0, 3.0 + 0.1 + 0.001),  # after the request
    ]
    assert standing_queue_s(rows, "up", REQUEST, link, (0.9, 2.0)) == pytest.approx(0.030)
    assert standing_queue_s(rows[2:4], "up", REQUEST, link, (0.9, 2.0)) is None
    traced = resolve_link("rtt=200ms,up.rate=trace:cell-markov.up,down.rate=1mbit")
    assert standing_queue_s(rows, "up", REQUEST, traced, (0.9, 2.0)) is None
