"""QUIC pieces without sockets: fixed flow-control windows, counters, configuration.

Two aioquic endpoints are driven in memory with a fake clock (as aioquic's own tests do)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aioquic.quic import events
from aioquic.quic.connection import QuicConnection

from servers.quic import (
    FixedWindowQuicConnection,
    make_quic_configuration,
    make_quic_connection,
    stream_fully_sent,
)
from servers.tls import ensure_certificate

CLIENT_ADDR = ("1.2.3.4", 1234)
SERVER_ADDR = ("2.3.4.5", 4433)
PAYLOAD_BYTES = 4_000_000


def pair(tmp_path: Path, window: int | None) -> tuple[QuicConnection, QuicConnection]:
    paths = ensure_certificate(tmp_path / "tls")
    server_config = make_quic_configuration(is_client=False, fixed_window_bytes=window)
    server_config.load_cert_chain(paths.cert, paths.key)
    client_config = make_quic_configuration(is_client=True, fixed_window_bytes=window)
    client_config.verify_mode = 0
    client = make_quic_connection(client_config, window)
    server = make_quic_connection(
        server_config,
        window,
        original_destination_connection_id=client.original_destination_connection_id,
    )
    return client, server


def run_transfer(client: QuicConnection, server: QuicConnection) -> tuple[int, int]:
    """Send PAYLOAD_BYTES client -> server; returns (bytes received, largest credit seen)."""
    now = 0.0
    client.connect(SERVER_ADDR, now=now)
    stream_id = None
    received = 0
    largest_credit = 0
    for _ in range(20_000):
        now += 0.001
        for data, _addr in client.datagrams_to_send(now=now):
            server.receive_datagram(data, CLIENT_ADDR, now=now)
        for data, _addr in server.datagrams_to_send(now=now):
            client.receive_datagram(data, SERVER_ADDR, now=now)
        while (event := client.next_event()) is not None:
            if isinstance(event, events.HandshakeCompleted) and stream_id is None:
                stream_id = client.get_next_available_stream_id()
                client.send_stream_data(stream_id, b"x" * PAYLOAD_BYTES, end_stream=True)
        while (event := server.next_event()) is not None:
            if isinstance(event, events.StreamDataReceived):
                received += len(event.data)
        limit = server._local_max_data
        largest_credit = max(largest_credit, limit.sent - limit.used)
        if received >= PAYLOAD_BYTES:
            break
    return received, largest_credit


def test_aioquic_grows_its_window_by_itself(tmp_path: Path) -> None:
    client, server = pair(tmp_path, None)
    received, _ = run_transfer(client, server)
    assert received == PAYLOAD_BYTES
    assert server._local_max_data.value > 2 * 1024 * 1024  # doubled from 1 MiB


@pytest.mark.parametrize("window", [64_000, 256_000])
def test_fixed_window_stays_fixed(tmp_path: Path, window: int) -> None:
    client, server = pair(tmp_path, window)
    assert isinstance(server, FixedWindowQuicConnection)
    received, largest_credit = run_transfer(client, server)
    assert received == PAYLOAD_BYTES  # the window refills: the transfer completes
    assert largest_credit <= window  # and never grants more than the window
    assert server._local_max_data.value <= PAYLOAD_BYTES + window
    for stream in server._streams.values():
        if stream.max_stream_data_local:
            assert stream.max_stream_data_local <= stream.receiver.highest_offset + window


def test_stream_fully_sent(tmp_path: Path) -> None:
    client, server = pair(tmp_path, None)
    now = 0.0
    client.connect(SERVER_ADDR, now=now)
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"y" * 5000, end_stream=True)
    assert not stream_fully_sent(client, stream_id)
    for _ in range(50):
        now += 0.001
        for data, _addr in client.datagrams_to_send(now=now):
            server.receive_datagram(data, CLIENT_ADDR, now=now)
        for data, _addr in server.datagrams_to_send(now=now):
            client.receive_datagram(data, SERVER_ADDR, now=now)
    assert stream_fully_sent(client, stream_id)


def test_configuration_knobs(tmp_path: Path) -> None:
    config = make_quic_configuration(
        is_client=True,
        cc="cubic",
        max_datagram_size=1452,
        fixed_window_bytes=100_000,
        qlog_dir=tmp_path / "q",
    )
    assert config.congestion_control_algorithm == "cubic"
    assert config.max_datagram_size == 1452
    assert config.max_data == config.max_stream_data == 100_000
    assert config.alpn_protocols == ["h3"]
    assert (tmp_path / "q").is_dir() and config.quic_logger is not None
