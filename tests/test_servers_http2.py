"""HTTP/2 pieces both ends share, on two ``h2`` connections in memory (no sockets)."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings

from proto.http2 import (
    H2_DEFAULT_WINDOW_BYTES,
    H2_MAX_FRAME_BYTES,
    WRITE_BATCH_BYTES,
    queue_data,
    start_connection,
)

WINDOW_BYTES = 1024 * 1024


def pair() -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    """A client and a server that have exchanged their settings (both with WINDOW_BYTES)."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    start_connection(client, WINDOW_BYTES, {h2.settings.SettingCodes.ENABLE_PUSH: 0})
    start_connection(server, WINDOW_BYTES)
    for _ in range(2):
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
    return client, server


def test_settings_and_connection_window() -> None:
    client, server = pair()
    assert server.remote_settings.initial_window_size == WINDOW_BYTES
    assert server.remote_settings.max_frame_size == H2_MAX_FRAME_BYTES
    assert server.remote_settings.enable_push == 0
    assert client.remote_settings.initial_window_size == WINDOW_BYTES
    # the connection window starts at 65,535 whatever the settings: raised by an update
    assert client.outbound_flow_control_window == WINDOW_BYTES
    assert server.outbound_flow_control_window == WINDOW_BYTES


def test_default_window_sends_no_update() -> None:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    start_connection(conn, H2_DEFAULT_WINDOW_BYTES)
    peer = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    peer.initiate_connection()
    events = peer.receive_data(conn.data_to_send())
    assert not any(isinstance(e, h2.events.WindowUpdated) for e in events)


def test_queue_data_stops_at_window_and_batch_and_ends_the_stream_last() -> None:
    client, server = pair()
    body = memoryview(bytes(range(256)) * 2000)  # 512,000 bytes
    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, [(":method", "POST"), (":scheme", "https"),
                                    (":authority", "x"), (":path", "/sink")])  # fmt: skip
    offset = queue_data(client, stream_id, body, 0, window=100_000, end_stream=True)
    assert offset == 100_000  # the window is the limit
    offset = queue_data(client, stream_id, body, offset, window=10**9, end_stream=True)
    assert offset == 100_000 + WRITE_BATCH_BYTES  # then the batch
    offset = queue_data(client, stream_id, body, offset, window=10**9, end_stream=True)
    assert offset == len(body)
    received = bytearray()
    ended = 0
    for event in server.receive_data(client.data_to_send()):
        if isinstance(event, h2.events.DataReceived):
            received += event.data
            assert len(event.data) <= H2_MAX_FRAME_BYTES
        ended += isinstance(event, h2.events.StreamEnded)
    assert bytes(received) == bytes(body) and ended == 1


def test_queue_data_without_end_stream_leaves_the_stream_open() -> None:
    client, server = pair()
    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, [(":method", "POST"), (":scheme", "https"),
                                    (":authority", "x"), (":path", "/sink")])  # fmt: skip
    assert queue_data(client, stream_id, memoryview(b"abc"), 0, 10, end_stream=False) == 3
    events = server.receive_data(client.data_to_send())
    assert not any(isinstance(e, h2.events.StreamEnded) for e in events)
