"""HTTP/2 pieces shared by the server and the client edges: the settings each end sends
first, and the queueing of DATA frames under flow control."""

from __future__ import annotations

import h2.connection
import h2.settings

H2_MAX_FRAME_BYTES = 2**20
"""SETTINGS_MAX_FRAME_SIZE we accept (RFC 9113 allows up to 2^24-1): fewer frames per MB."""
H2_DEFAULT_WINDOW_BYTES = 65_535
"""RFC 9113 section 6.9.2: the initial connection and stream windows."""
WRITE_BUFFER_HIGH_BYTES = 1024 * 1024
"""The transport's write buffer high-water mark: above it, wait until it drains."""
WRITE_BATCH_BYTES = 256 * 1024
"""Flush to the transport after at most this many body bytes, then wait if it is full."""


def start_connection(
    conn: h2.connection.H2Connection,
    window_bytes: int,
    extra_settings: dict[int, int] | None = None,
) -> None:
    """The preface and SETTINGS: ``window_bytes`` for every stream and for the connection
    (its window starts at 65,535 whatever the settings say, so it is raised by an update)."""
    conn.initiate_connection()
    conn.update_settings(
        {
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window_bytes,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: H2_MAX_FRAME_BYTES,
            **(extra_settings or {}),
        }
    )
    if window_bytes > H2_DEFAULT_WINDOW_BYTES:
        conn.increment_flow_control_window(window_bytes - H2_DEFAULT_WINDOW_BYTES)


def queue_data(
    conn: h2.connection.H2Connection,
    stream_id: int,
    body: memoryview,
    offset: int,
    window: int,
    end_stream: bool,
) -> int:
    """Queue DATA frames of ``body[offset:]`` up to the flow-control ``window`` and
    :data:`WRITE_BATCH_BYTES`; the last frame of the body ends the stream if ``end_stream``.
    Returns the new offset; the caller flushes ``conn.data_to_send()``."""
    total = len(body)
    frame_max = conn.max_outbound_frame_size
    stop = min(total, offset + window, offset + WRITE_BATCH_BYTES)
    while offset < stop:
        size = min(frame_max, stop - offset)
        end = end_stream and offset + size == total
        conn.send_data(stream_id, bytes(body[offset : offset + size]), end_stream=end)
        offset += size
    return offset
