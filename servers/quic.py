"""QUIC pieces shared by the HTTP/3 server and client: configuration, fixed flow-control
windows, and the datagram edge (one protocol per connection over a shared UDP transport).

aioquic doubles its flow-control limits whenever half of them has been used
(``QuicConnection._write_connection_limits`` / ``_write_stream_limits``), so a QUIC
receive window grows without bound. :class:`FixedWindowQuicConnection` keeps the credit it
grants at a fixed size instead: like a TCP receiver with a clamped window, it advertises
``consumed + window`` whenever less than half the window is left.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.logger import QuicFileLogger
from aioquic.quic.packet import QuicFrameType
from aioquic.quic.packet_builder import QuicPacketBuilder

from servers.sockopts import set_udp_buffers

H3_ALPN = ["h3"]
QUIC_IDLE_TIMEOUT_S = 60.0
MAX_STREAM_DATA_FRAME_CAPACITY = 1 + 8 + 8
"""Frame type + stream id + limit, as varints (aioquic's own constant is private)."""


def make_quic_configuration(
    *,
    is_client: bool,
    cc: str = "reno",
    max_datagram_size: int = 1200,
    fixed_window_bytes: int | None = None,
    qlog_dir: Path | None = None,
    keylog: IO[str] | None = None,
    idle_timeout_s: float = QUIC_IDLE_TIMEOUT_S,
) -> QuicConfiguration:
    """A QuicConfiguration for HTTP/3 with the testbed's knobs (TLS 1.3 is QUIC's only TLS)."""
    config = QuicConfiguration(
        is_client=is_client,
        alpn_protocols=H3_ALPN,
        congestion_control_algorithm=cc,
        max_datagram_size=max_datagram_size,
        idle_timeout=idle_timeout_s,
    )
    if fixed_window_bytes is not None:
        config.max_data = fixed_window_bytes
        config.max_stream_data = fixed_window_bytes
    if qlog_dir is not None:
        qlog_dir.mkdir(parents=True, exist_ok=True)
        config.quic_logger = QuicFileLogger(str(qlog_dir))
    if keylog is not None:
        config.secrets_log_file = keylog
    return config


class FixedWindowQuicConnection(QuicConnection):
    """A QuicConnection whose MAX_DATA / MAX_STREAM_DATA credit stays ``window_bytes``."""

    def __init__(self, *args: Any, window_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window_bytes = window_bytes

    def _write_connection_limits(self, builder: QuicPacketBuilder, space: Any) -> None:
        limit = self._local_max_data
        if limit.value - limit.used < self.window_bytes // 2:
            limit.value = limit.used + self.window_bytes
        # the parent doubles max_data when used * 2 > value; keep it from doing so by
        # presenting it a "used" below half, then restore the real count
        used = limit.used
        limit.used = 0
        try:
            super()._write_connection_limits(builder, space)
        finally:
            limit.used = used

    def _write_stream_limits(self, builder: QuicPacketBuilder, space: Any, stream: Any) -> None:
        if not stream.max_stream_data_local:
            return
        consumed = stream.receiver.highest_offset
        if stream.max_stream_data_local - consumed < self.window_bytes // 2:
            stream.max_stream_data_local = consumed + self.window_bytes
        if stream.max_stream_data_local_sent != stream.max_stream_data_local:
            buf = builder.start_frame(
                QuicFrameType.MAX_STREAM_DATA,
                capacity=MAX_STREAM_DATA_FRAME_CAPACITY,
                handler=self._on_max_stream_data_delivery,
                handler_args=(stream,),
            )
            buf.push_uint_var(stream.stream_id)
            buf.push_uint_var(stream.max_stream_data_local)
            stream.max_stream_data_local_sent = stream.max_stream_data_local
            if self._quic_logger is not None:
                builder.quic_logger_frames.append(
                    self._quic_logger.encode_max_stream_data_frame(
                        maximum=stream.max_stream_data_local, stream_id=stream.stream_id
                    )
                )


def make_quic_connection(
    configuration: QuicConfiguration, fixed_window_bytes: int | None, **kwargs: Any
) -> QuicConnection:
    if fixed_window_bytes is None:
        return QuicConnection(configuration=configuration, **kwargs)
    return FixedWindowQuicConnection(
        configuration=configuration, window_bytes=fixed_window_bytes, **kwargs
    )


def stream_fully_sent(quic: QuicConnection, stream_id: int) -> bool:
    """True once every byte of a finished stream has been put in a packet at least once."""
    stream = quic._streams.get(stream_id)
    if stream is None:
        return True
    sender = stream.sender
    fin = sender._buffer_fin
    return fin is not None and sender.highest_offset >= fin and not sender._pending_eof


class WatchedProtocol(QuicConnectionProtocol):
    """QuicConnectionProtocol with "after transmit" watchers: callbacks that fire once a
    condition on the connection holds (e.g. a stream's last byte has left)."""

    def __init__(self, quic: QuicConnection, **kwargs: Any) -> None:
        super().__init__(quic, **kwargs)
        self._watchers: list[tuple[Callable[[], bool], Callable[[float], None]]] = []
        self.packets_lost = 0
        """Packets declared lost by aioquic's recovery (it keeps no counter of its own)."""
        recovery = quic._loss
        on_lost = recovery._on_packets_lost

        def counting_on_lost(*, packets: Any, **kw: Any) -> None:
            packets = list(packets)
            self.packets_lost += len(packets)
            on_lost(packets=packets, **kw)

        recovery._on_packets_lost = counting_on_lost

    def watch(self, condition: Callable[[], bool], callback: Callable[[float], None]) -> None:
        self._watchers.append((condition, callback))

    # aioquic's protocol takes ``now`` from loop.time(), which uvloop truncates to whole
    # milliseconds; these overrides feed it time.monotonic() (same clock, full resolution).
    def connect(self, addr: Any, transmit: bool = True) -> None:
        self._quic.connect(addr, now=time.monotonic())
        if transmit:
            self.transmit()

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        self._quic.receive_datagram(data, addr, now=time.monotonic())  # type: ignore[arg-type]
        self._process_events()
        self.transmit()

    def _handle_timer(self) -> None:
        now = max(self._timer_at or 0.0, time.monotonic())
        self._timer = None
        self._timer_at = None
        self._quic.handle_timer(now=now)
        self._process_events()
        self.transmit()

    def transmit(self) -> None:
        self._transmit_task = None
        now = time.monotonic()
        sendto = self._transport.sendto  # type: ignore[union-attr]
        for data, addr in self._quic.datagrams_to_send(now=now):
            sendto(data, addr)
        timer_at = self._quic.get_timer()
        if self._timer is not None and self._timer_at != timer_at:
            self._timer.cancel()
            self._timer = None
        if self._timer is None and timer_at is not None:
            self._timer = self._loop.call_at(timer_at, self._handle_timer)
        self._timer_at = timer_at
        if self._watchers:
            now = time.monotonic()
            keep = []
            for condition, callback in self._watchers:
                if condition():
                    callback(now)
                else:
                    keep.append((condition, callback))
            self._watchers = keep


def make_udp_socket(host: str, port: int, buffer_bytes: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        set_udp_buffers(sock, buffer_bytes)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


QUIC_SAMPLE_FIELDS = (
    "bytes_in_flight",
    "cwnd",
    "ssthresh",
    "smoothed_rtt_us",
    "latest_rtt_us",
    "min_rtt_us",
    "packets_sent",
    "packets_lost",
    "pto_count",
)
"""Columns of a QUIC in-flight sample (aioquic's recovery state)."""


def quic_counters(protocol: WatchedProtocol) -> dict[str, int | None]:
    """The sender state of a QUIC connection, in the units of the TCP_INFO samples."""
    quic = protocol._quic
    loss = quic._loss
    cc = loss._cc
    min_rtt = loss._rtt_min
    return {
        "bytes_in_flight": cc.bytes_in_flight,
        "cwnd": cc.congestion_window,
        "ssthresh": cc.ssthresh,
        "smoothed_rtt_us": int(loss._rtt_smoothed * 1e6),
        "latest_rtt_us": int(loss._rtt_latest * 1e6),
        "min_rtt_us": None if min_rtt == float("inf") else int(min_rtt * 1e6),
        "packets_sent": quic._packet_number,
        "packets_lost": protocol.packets_lost,
        "pto_count": loss._pto_count,
    }
