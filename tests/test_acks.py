"""ACK extraction: TCP from a real pcap file, QUIC from qlog dictionaries."""

from __future__ import annotations

import struct
from pathlib import Path

import pandas as pd
import pytest
from scapy.layers.inet import IP, TCP

from harness.collect.acks import (
    parse_ipv4_tcp,
    quic_acks,
    read_qlog_traces,
    read_tcp_segments,
    tcp_acks,
    write_acks_csv,
)
from tbcore.errors import SpecError

CLIENT = "198.18.1.2"
SERVER = "198.18.2.2"
ISN_C = 4_294_967_000  # wraps around 2^32 during the transfer
ISN_S = 5000
MSS = 1000


def _upload_packets() -> list[tuple[float, bytes]]:
    """A client uploading 4000 bytes: handshake, 4 segments, one of them sent twice."""
    c = dict(src=CLIENT, dst=SERVER)
    s = dict(src=SERVER, dst=CLIENT)
    tc = dict(sport=40000, dport=443)
    ts = dict(sport=443, dport=40000)
    pkts = [
        (10.000, IP(**c) / TCP(**tc, flags="S", seq=ISN_C, options=[("WScale", 7)])),
        (
            10.200,
            IP(**s) / TCP(**ts, flags="SA", seq=ISN_S, ack=ISN_C + 1, options=[("WScale", 9)]),
        ),
        (10.200, IP(**c) / TCP(**tc, flags="A", seq=ISN_C + 1, ack=ISN_S + 1)),
    ]
    t = 10.201
    for i in range(4):
        seq = (ISN_C + 1 + i * MSS) % 2**32
        pkts.append((t, IP(**c) / TCP(**tc, flags="PA", seq=seq, ack=ISN_S + 1) / (b"x" * MSS)))
        t += 0.001
    # first ACK: 2 segments; then a duplicate ACK with SACK; retransmit of the third; final
    ack = lambda n, t, opts=None: (  # noqa: E731
        t,
        IP(**s)
        / TCP(
            **ts,
            flags="A",
            seq=ISN_S + 1,
            ack=(ISN_C + 1 + n) % 2**32,
            window=500,
            options=opts or [],
        ),
    )
    pkts.append(ack(2 * MSS, 10.402))
    pkts.append(
        ack(
            2 * MSS,
            10.404,
            [("SAck", ((ISN_C + 1 + 3 * MSS) % 2**32, (ISN_C + 1 + 4 * MSS) % 2**32))],
        )
    )
    seq3 = (ISN_C + 1 + 2 * MSS) % 2**32
    pkts.append((10.405, IP(**c) / TCP(**tc, flags="PA", seq=seq3, ack=ISN_S + 1) / (b"x" * MSS)))
    pkts.append(ack(4 * MSS, 10.606))
    return [(t, bytes(p)) for t, p in pkts]


def _write_pcap(path: Path, packets: list[tuple[float, bytes]]) -> None:
    """Classic pcap, nanosecond magic, LINKTYPE_RAW: the format the emulator writes."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 101))
    for t, data in packets:
        sec = int(t)
        out += struct.pack("<IIII", sec, round((t - sec) * 1e9), len(data), len(data)) + data
    path.write_bytes(bytes(out))


def test_parse_ipv4_tcp_reads_the_header_fields() -> None:
    raw = bytes(IP(src=CLIENT, dst=SERVER) / TCP(sport=1, dport=2, seq=7, ack=9, flags="A") / b"ab")
    seg = parse_ipv4_tcp(raw, 1.5)
    assert seg is not None
    assert (seg.src, seg.sport, seg.dst, seg.dport) == (CLIENT, 1, SERVER, 2)
    assert (seg.seq, seg.ack, seg.payload_bytes) == (7, 9, 2)
    assert parse_ipv4_tcp(b"\x60" + bytes(40), 0.0) is None  # IPv6
    assert parse_ipv4_tcp(b"\x45\x00", 0.0) is None  # truncated


def test_tcp_acks_from_a_pcap_file(tmp_path: Path) -> None:
    pcap = tmp_path / "client.pcap"
    _write_pcap(pcap, _upload_packets())
    segments = read_tcp_segments(pcap)
    assert len(segments) == 11
    result = tcp_acks(segments, clock_offset_s=10.0)
    assert result.connections == 1
    assert result.retransmits == 1
    data_acks = [r for r in result.rows if r.acked > 0]
    assert [r.acked for r in data_acks] == [2 * MSS, 2 * MSS, 4 * MSS]
    assert [r.inflight_bytes for r in data_acks] == [2 * MSS, 2 * MSS, 0]
    assert [r.dup for r in data_acks] == [False, True, False]
    assert data_acks[1].sack_blocks == 1
    assert data_acks[0].rwnd_bytes == 500 << 9  # the server's scale, from its SYN-ACK
    assert data_acks[0].time_s == pytest.approx(0.402, abs=1e-6)
    csv = tmp_path / "acks.csv"
    assert write_acks_csv(csv, result.rows, start_s=0.2) == len(result.rows)
    frame = pd.read_csv(csv)
    assert frame["t_s"].iloc[-1] == pytest.approx(0.406, abs=1e-6)
    assert list(frame.columns)[:3] == ["t_s", "time_s", "conn"]


def test_download_direction_is_found_by_payload(tmp_path: Path) -> None:
    packets = _upload_packets()
    segments = [s for s in (parse_ipv4_tcp(d, t) for t, d in packets) if s]
    forced = tcp_acks(segments, sender=SERVER)
    # the server sent no payload: the client's segments are its ACK-less data, no rows
    assert all(r.acked == 0 for r in forced.rows)


def test_bad_pcap_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a pcap at all, sorry")
    with pytest.raises(SpecError):
        read_tcp_segments(bad)
    assert read_tcp_segments(tmp_path / "missing.pcap") == []


def _qlog(vantage: str) -> dict:
    def ack(t, top):
        return {
            "time": t,
            "name": "transport:packet_received",
            "data": {
                "header": {"packet_type": "1RTT"},
                "frames": [{"frame_type": "ack", "acked_ranges": [[0, top]]}],
            },
        }

    def metrics(t, inflight):
        return {
            "time": t,
            "name": "recovery:metrics_updated",
            "data": {"bytes_in_flight": inflight},
        }

    return {
        "vantage_point": {"type": vantage},
        "events": [
            {"time": 1000.0, "name": "transport:packet_sent", "data": {}},
            ack(1200.0, 3),
            metrics(1200.1, 6000),
            ack(1201.0, 3),
            ack(1202.0, 9),
            metrics(1202.1, 0),
            {"time": 1203.0, "name": "recovery:packet_lost", "data": {}},
        ],
    }


def test_quic_acks_from_qlog(tmp_path: Path) -> None:
    result = quic_acks([_qlog("client"), _qlog("server")], clock_offset_s=1.0, vantage="client")
    assert result.connections == 1
    assert [r.acked for r in result.rows] == [3, 3, 9]
    assert [r.dup for r in result.rows] == [False, True, False]
    assert [r.inflight_bytes for r in result.rows] == [6000, 0, 0]
    assert result.rows[0].time_s == pytest.approx(0.2)
    assert result.lost_packets == 1 and result.sent_packets == 1
    assert result.lost_times_s == [pytest.approx(0.203)]
    import json

    (tmp_path / "a.qlog").write_text(json.dumps({"traces": [_qlog("client")]}))
    assert len(read_qlog_traces(tmp_path)) == 1
    (tmp_path / "b.qlog").write_text("{broken")
    with pytest.raises(SpecError):
        read_qlog_traces(tmp_path)
