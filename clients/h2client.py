"""HTTP/2 over TLS 1.3 client: a thin asyncio edge around ``h2.H2Connection``.

:func:`open_connection` creates the TCP socket itself (so the knobs that matter at SYN time,
receive buffer and window clamp, are set before ``connect``), times the TCP and the TLS
handshakes separately, and can resume a TLS session. :meth:`H2Client.request` runs one
exchange and fills a :class:`~clients.records.RequestRecord`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from clients import player_edge
from clients.config import ClientConfig
from clients.workload import RequestSpec, ResponseCollector
from proto.http2 import WRITE_BUFFER_HIGH_BYTES, queue_data, start_connection
from proto.sockopts import (
    apply_tcp_options,
    hold_window_clamp,
    read_tcp_options,
    rearm_quickack,
    tcp_socket,
)
from proto.tls import ALPN_H2
from tbcore.records import RequestRecord
from tbcore.tcpinfo import read_tcp_info


@dataclass
class _Pending:
    collector: ResponseCollector
    done: asyncio.Future[None]


class H2ClientProtocol(asyncio.Protocol):
    def __init__(
        self,
        window_bytes: int,
        quickack: bool,
        window_clamp_bytes: int | None = None,
        ack_policy: str = "default",
    ) -> None:
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.window_bytes = window_bytes
        self.quickack = quickack
        self.ack_policy = ack_policy
        """The receiver's ACK policy over TCP (default or immediate: tbcore.ackpolicy)."""
        self.window_clamp_bytes = window_clamp_bytes
        self.transport: asyncio.Transport | None = None
        self.sock: Any = None
        self.pending: dict[int, _Pending] = {}
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._window_changed = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        self.sock = transport.get_extra_info("socket")
        hold_window_clamp(self.sock, self.window_clamp_bytes)  # the handshake's data reset it
        start_connection(self.h2, self.window_bytes, {h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self._flush()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if self.quickack and self.sock is not None:
            rearm_quickack(self.sock)
        hold_window_clamp(self.sock, self.window_clamp_bytes)
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as err:
            self._fail_all(f"HTTP/2 protocol error: {err!r}")
            self._close()
            return
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                pending = self.pending.get(event.stream_id)
                if pending is not None:
                    pending.collector.on_headers(event.headers, now)
            elif isinstance(event, h2.events.TrailersReceived):
                pass
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                pending = self.pending.get(event.stream_id)
                if pending is not None:
                    pending.collector.on_data(event.data, now)
            elif isinstance(event, h2.events.StreamEnded):
                pending = self.pending.get(event.stream_id)
                if pending is not None and not pending.done.done():
                    pending.done.set_result(None)
            elif isinstance(event, h2.events.StreamReset):
                pending = self.pending.get(event.stream_id)
                if pending is not None and not pending.done.done():
                    if pending.collector.status is not None and event.error_code == 0:
                        # RFC 9113 8.1: a complete response, then "stop sending"
                        pending.done.set_result(None)
                    else:
                        pending.done.set_exception(
                            ConnectionError(f"stream reset by server ({event.error_code!r})")
                        )
                self._window_changed.set()
            elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                self._window_changed.set()
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._fail_all(f"GOAWAY from server ({event.error_code!r})")
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(f"connection lost: {exc!r}" if exc else "connection closed by server")
        self._window_changed.set()
        self._writable.set()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def _fail_all(self, reason: str) -> None:
        for pending in self.pending.values():
            if not pending.done.done():
                pending.done.set_exception(ConnectionError(reason))

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    async def send_body(self, stream_id: int, body: bytes, pending: _Pending) -> int:
        """Send the body under flow control; returns the bytes handed to the transport
        (fewer than the body when the server answered first, e.g. 413)."""
        view = memoryview(body)
        offset = 0
        total = len(body)
        while offset < total:
            if pending.done.done():
                return offset  # the server answered (e.g. 413) or the stream died: stop
            if self.transport is None or self.transport.is_closing():
                raise ConnectionError(f"connection closed after {offset} of {total} body bytes")
            if not self._writable.is_set():
                await self._writable.wait()
                continue
            try:
                window = self.h2.local_flow_control_window(stream_id)
            except h2.exceptions.StreamClosedError:
                return offset
            if window <= 0:
                self._window_changed.clear()
                await self._window_changed.wait()
                continue
            offset = queue_data(self.h2, stream_id, view, offset, window, end_stream=True)
            self._flush()
            if offset < total:
                await asyncio.sleep(0)
        return offset


@dataclass
class H2Client:
    """One open HTTP/2 connection and its handshake times."""

    protocol: H2ClientProtocol
    transport: asyncio.Transport
    connect_start: float
    tcp_connected: float
    handshake_done: float
    resumed: bool
    authority: str
    scheme: str = "https"
    """``http`` on a cleartext connection (RFC 9113 section 8.3.1)."""

    @property
    def session(self) -> ssl.SSLSession | None:
        ssl_object = self.transport.get_extra_info("ssl_object")
        return ssl_object.session if ssl_object is not None else None

    def tcp_info(self) -> dict[str, int]:
        return read_tcp_info(self.protocol.sock)

    def applied(self) -> dict[str, dict[str, Any]]:
        """What this connection runs with, by layer (tbcore.records.AppliedRecord): its
        socket's options as the kernel has them, TCP_QUICKACK re-arming, the HTTP/2
        connection window (its SETTINGS take effect only once acknowledged)."""
        proto = self.protocol
        return {
            "tcp": {
                **read_tcp_options(proto.sock),
                "quickack": proto.quickack,
                "ack_policy": proto.ack_policy,
            },
            "h2": {
                "h2_window": proto.h2.inbound_flow_control_window,
                "tls": proto.transport is not None
                and proto.transport.get_extra_info("ssl_object") is not None,
            },
        }

    async def request(
        self, spec: RequestSpec, record: RequestRecord, timeout_s: float
    ) -> ResponseCollector:
        """Run one exchange; fills the record's request/response times, bytes and checks.
        Raises on failure (the caller records the error)."""
        proto = self.protocol
        if proto.transport is None or proto.transport.is_closing():
            raise ConnectionError("connection is closed")
        loop = asyncio.get_running_loop()
        stream_id = proto.h2.get_next_available_stream_id()
        pending = _Pending(ResponseCollector(spec), loop.create_future())
        proto.pending[stream_id] = pending
        record.stream_id = stream_id

        def cancel(_now: float) -> None:
            # RFC 9113 section 8.7: the client abandons the response with RST_STREAM(CANCEL)
            try:
                proto.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.StreamClosedError:
                pass
            proto._flush()
            if not pending.done.done():
                pending.done.set_result(None)

        player = player_edge.attach(pending.collector, cancel)
        try:
            async with asyncio.timeout(timeout_s):
                proto.h2.send_headers(
                    stream_id, spec.headers(self.authority, self.scheme), end_stream=not spec.body
                )
                record.request_first_byte = time.monotonic()
                proto._flush()
                if spec.body:
                    record.up_bytes = await proto.send_body(stream_id, spec.body, pending)
                record.request_last_byte = time.monotonic()
                await pending.done
                if player is not None:
                    await player.drain(timeout_s)
        finally:
            proto.pending.pop(stream_id, None)
            _fill(record, pending.collector, player)
        return pending.collector

    async def close(self) -> None:
        proto = self.protocol
        if not self.transport.is_closing():
            try:
                proto.h2.close_connection()
                proto._flush()
            except h2.exceptions.ProtocolError:
                pass
            self.transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(proto.closed), 2.0)
        except TimeoutError:
            self.transport.abort()


def _fill(
    record: RequestRecord,
    collector: ResponseCollector,
    player: player_edge.PlayerEdge | None = None,
) -> None:
    """The exchange's outcome into the record: the collector's and, if one played the
    response, the player's."""
    record.status = collector.status
    record.priority = collector.spec.priority
    record.response_body_first_byte = collector.body_first_byte_at
    if collector.cancelled_at is not None:
        record.cancelled_at = collector.cancelled_at
        record.bytes_at_cancel = collector.bytes_at_cancel
    record.response_first_byte = collector.first_byte_at
    record.response_last_byte = collector.last_byte_at or collector.first_byte_at
    record.down_bytes = collector.down_bytes
    if collector.spec.stream_chunks:
        record.chunk_times = collector.chunk_times
    sha_ok, error = collector.verdict()
    record.sha256_ok = sha_ok
    if error is not None and record.error is None:
        record.error = error
    if player is not None:
        record.player = player.result()


async def open_connection(
    config: ClientConfig, tls: ssl.SSLContext | None, session: ssl.SSLSession | None = None
) -> H2Client:
    """TCP connect, then the TLS 1.3 handshake (resuming ``session`` if given); ``tls``
    None: HTTP/2 in cleartext from the connection preface on (prior knowledge, RFC 9113
    section 3.3)."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = tcp_socket(family, config.settings.multipath == "mptcp")
    try:
        apply_tcp_options(sock, config.settings)
        if config.source_addr is not None:
            sock.bind((config.source_addr, 0))
        sock.setblocking(False)
        connect_start = time.monotonic()
        async with asyncio.timeout(config.settings.timeout_s):
            await loop.sock_connect(sock, (config.host, config.port))
            tcp_connected = time.monotonic()

            def make() -> H2ClientProtocol:
                return H2ClientProtocol(
                    config.settings.h2_window_bytes,
                    config.settings.quickack_socket,
                    config.settings.window_clamp_bytes,
                    config.settings.ack_policy,
                )

            if tls is None:
                transport, protocol = await loop.create_connection(make, sock=sock)
            else:
                tls.session = session  # type: ignore[attr-defined]
                transport, protocol = await loop.create_connection(
                    make,
                    sock=sock,
                    ssl=tls,
                    server_hostname=config.server_name,
                    ssl_handshake_timeout=config.settings.timeout_s,
                )
        handshake_done = time.monotonic()
    except BaseException:
        sock.close()
        raise
    ssl_object = transport.get_extra_info("ssl_object")
    if tls is not None and (ssl_object is None or ssl_object.selected_alpn_protocol() != ALPN_H2):
        transport.close()
        raise ConnectionError("server did not negotiate ALPN h2")
    port = config.port
    authority = f"[{config.host}]:{port}" if ":" in config.host else f"{config.host}:{port}"
    return H2Client(
        protocol=protocol,  # type: ignore[arg-type]
        transport=transport,  # type: ignore[arg-type]
        connect_start=connect_start,
        tcp_connected=tcp_connected,
        handshake_done=handshake_done,
        resumed=bool(ssl_object is not None and ssl_object.session_reused),
        authority=authority,
        scheme="https" if tls is not None else "http",
    )
