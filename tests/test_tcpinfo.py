"""TCP_INFO parsing: lengths checked before each field; a real connection's values; the
kernel BBR's tcp_bbr_info through TCP_CC_INFO."""

from __future__ import annotations

import socket
import struct

from tbcore.tcpinfo import (
    FIELDS,
    congestion_control,
    parse_bbr_info,
    parse_tcp_info,
    read_bbr_info,
    read_tcp_info,
)


def test_short_buffer_yields_only_covered_fields() -> None:
    raw = bytes(8) + struct.pack("=I", 200_000) + bytes(4)  # through ato_us
    info = parse_tcp_info(raw)
    assert info["rto_us"] == 200_000
    assert "ato_us" in info
    assert "snd_mss" not in info and "snd_cwnd" not in info


def test_a_field_cut_in_half_is_absent() -> None:
    offset = dict((name, off) for name, off, _ in FIELDS)["pacing_rate"]
    raw = bytearray(offset + 4)  # half of the u64
    info = parse_tcp_info(bytes(raw))
    assert "total_retrans" in info and "pacing_rate" not in info


def test_values_at_their_offsets() -> None:
    raw = bytearray(256)
    struct.pack_into("=I", raw, 80, 42)  # snd_cwnd
    struct.pack_into("=I", raw, 68, 1234)  # rtt
    struct.pack_into("=Q", raw, 160, 10**9)  # delivery_rate
    struct.pack_into("=I", raw, 24, 7)  # unacked
    struct.pack_into("=I", raw, 16, 1448)  # snd_mss
    info = parse_tcp_info(bytes(raw))
    assert info["snd_cwnd"] == 42 and info["rtt_us"] == 1234
    assert info["delivery_rate"] == 10**9
    assert info["packets_in_flight"] == 7 and info["bytes_in_flight"] == 7 * 1448


def test_real_connection() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        with client, server:
            client.sendall(b"x" * 100_000)
            server.recv(65536)
            info = read_tcp_info(client)
            assert info["state"] == 1  # TCP_ESTABLISHED
            assert info["snd_cwnd"] >= 1
            assert info["bytes_acked"] > 0
            # set by the first ACK (never 0: the kernel stores at least 1 us); ~0U before it
            assert 0 < info["min_rtt_us"] < 1_000_000


def test_bbr_info_parsed_in_the_quic_samples_units() -> None:
    raw = struct.pack("=IIIII", 5, 1, 200_000, 739, 739)
    assert parse_bbr_info(raw) == {
        "bbr_bw": 5 + (1 << 32),
        "bbr_min_rtt_us": 200_000,
        "bbr_pacing_gain": 739,
        "bbr_cwnd_gain": 739,
    }
    assert parse_bbr_info(raw[:19]) == {}  # a kernel without tcp_bbr_info


def _connected_pair(cc: bytes) -> tuple[socket.socket, socket.socket, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.socket()
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    return listener, client, server


def test_kernel_bbr_reports_its_model_and_cubic_nothing() -> None:
    listener, client, server = _connected_pair(b"bbr")
    with listener, client, server:
        client.sendall(b"x" * 200_000)
        server.recv(65536)
        assert congestion_control(client) == "bbr"
        info = read_bbr_info(client)
        assert set(info) == {"bbr_bw", "bbr_min_rtt_us", "bbr_pacing_gain", "bbr_cwnd_gain"}
        assert 0 < info["bbr_min_rtt_us"] < 1_000_000
        assert info["bbr_cwnd_gain"] > 0
    listener, client, server = _connected_pair(b"cubic")
    with listener, client, server:
        assert congestion_control(client) == "cubic"
        assert read_bbr_info(client) == {}
