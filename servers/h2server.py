"""HTTP/2 over TLS 1.3 (ALPN ``h2``): a thin asyncio edge around ``h2.H2Connection``.

One :class:`H2ServerProtocol` per TCP connection. Requests are handled by
:class:`servers.app.Exchange`; responses respect HTTP/2 flow control and the transport's
write buffer. Events go to the server's :class:`~servers.events.EventLog`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from servers import app
from servers.context import ServerContext
from servers.http2 import WRITE_BUFFER_HIGH_BYTES, queue_data, start_connection
from servers.session import ExchangeStreams, paced_chunks
from servers.sockopts import apply_tcp_options, rearm_quickack
from servers.tls import ensure_certificate, server_context
from tbcore.tcpinfo import read_tcp_info

PROTO = "h2"
IDLE_CHECK_FRACTION = 4


class H2ServerProtocol(ExchangeStreams, asyncio.Protocol):
    proto = PROTO

    def __init__(self, ctx: ServerContext) -> None:
        self._init_streams(ctx, ctx.next_conn_id())
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.transport: asyncio.Transport | None = None
        self.sock: Any = None
        self._window_changed = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        self._goaway: str | None = None
        self._last_activity = time.monotonic()
        self._idle_handle: asyncio.TimerHandle | None = None

    # -- asyncio edge ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        self.sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        try:
            apply_tcp_options(self.sock, self.ctx.tcp_options)
        except Exception as err:  # a knob the kernel refuses: say so, keep serving
            self._log("error", reason=f"socket option: {err}")
        start_connection(self.h2, self.ctx.config.settings.h2_window_bytes)
        self._flush()
        ssl_object = transport.get_extra_info("ssl_object")
        self._log(
            "connection_open",
            peer=f"{peer[0]}:{peer[1]}" if peer else None,
            tls_version=ssl_object.version() if ssl_object else None,
            resumed=bool(ssl_object.session_reused) if ssl_object else None,
        )
        self._schedule_idle_check()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self._last_activity = now
        if self.ctx.config.settings.quickack and self.sock is not None:
            rearm_quickack(self.sock)
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as err:
            self._protocol_error(now, err)
            return
        for event in events:
            self._handle_event(event, now)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        now = time.monotonic()
        self._close_streams(now)
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        self._window_changed.set()
        self._writable.set()
        self._log("connection_closed", now=now, reason=str(exc) if exc else self._goaway)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- h2 events -----------------------------------------------------------------------
    def _handle_event(self, event: h2.events.Event, now: float) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._on_request(event, now)
        elif isinstance(event, h2.events.DataReceived):
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self._on_data(event.stream_id, event.data, now)
            if event.stream_ended is not None:
                self._on_end(event.stream_id, now)
        elif isinstance(event, h2.events.StreamEnded):
            self._on_end(event.stream_id, now)
        elif isinstance(event, h2.events.StreamReset):
            self._on_reset(event.stream_id, event.error_code, now)
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._window_changed.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._goaway = f"GOAWAY {event.error_code!r} from peer"
            self._close()

    def _on_request(self, event: h2.events.RequestReceived, now: float) -> None:
        stream_id = event.stream_id
        head = self._parse_head(stream_id, event.headers, now)
        if head is None:
            self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)
            return
        self._open_exchange(stream_id, head, now, event.stream_ended is not None)

    # -- responses -------------------------------------------------------------------------
    async def _respond(self, stream_id: int, plan: app.ResponsePlan) -> None:
        await self._process(stream_id, plan)
        if self._closed:
            return
        sock = self.sock
        sampling = self._sample_response(
            stream_id,
            lambda: read_tcp_info(sock),
            lambda v: v.get("unacked") == 0 and v.get("notsent_bytes") == 0,
        )
        self.h2.send_headers(
            stream_id,
            app.response_head(plan, PROTO),
            end_stream=plan.body_length == 0,
        )
        self._flush()
        self._log("response_first_byte", stream=stream_id, status=plan.status)
        if plan.stream_chunks:
            await self._send_chunks(stream_id, plan)
        elif plan.body:
            await self._send_body(stream_id, plan.body)
        self._log("response_last_byte", stream=stream_id, bytes=plan.body_length)
        sampling[0] = True
        if self._still_reading(stream_id, plan):
            # RFC 9113 section 8.1: a complete response before the request ended;
            # RST_STREAM(NO_ERROR) asks the client to stop sending the body.
            try:
                self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
            except h2.exceptions.StreamClosedError:
                pass
            self._flush()

    async def _send_chunks(self, stream_id: int, plan: app.ResponsePlan) -> None:
        async for index, chunk, last in paced_chunks(plan):
            await self._send_body(stream_id, chunk, end_stream=last)
            self._log("chunk_sent", stream=stream_id, index=index)

    async def _send_body(self, stream_id: int, body: bytes, end_stream: bool = True) -> None:
        view = memoryview(body)
        offset = 0
        total = len(body)
        while offset < total:
            if self._closed:
                raise ConnectionError("connection closed")
            if not self._writable.is_set():
                await self._writable.wait()
                continue
            window = self.h2.local_flow_control_window(stream_id)
            if window <= 0:
                self._window_changed.clear()
                await self._window_changed.wait()
                continue
            offset = queue_data(self.h2, stream_id, view, offset, window, end_stream)
            self._flush()
            if offset < total:
                await asyncio.sleep(0)
        if total == 0 and end_stream:
            self.h2.end_stream(stream_id)
            self._flush()

    # -- helpers ---------------------------------------------------------------------------
    def _protocol_error(self, now: float, err: Exception) -> None:
        self._log("error", now=now, reason=f"protocol error, closing: {err!r}"[:300])
        if isinstance(err, h2.exceptions.InvalidBodyLengthError):
            # RFC 9113 8.1.1: DATA shorter than content-length is malformed; h2 raises before
            # it hands over the stream's events, so the stream is not known here
            self._log(
                "upload_truncated",
                now=now,
                received_bytes=err.actual_length,
                content_length=err.expected_length,
                reason="body shorter than content-length",
            )
            return self._finish_protocol_error()
        self._truncate_open(now, f"protocol error: {type(err).__name__}")
        self._finish_protocol_error()

    def _finish_protocol_error(self) -> None:
        self._flush()
        self._close()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self._last_activity = time.monotonic()

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _schedule_idle_check(self) -> None:
        timeout = self.ctx.config.idle_timeout_s
        loop = asyncio.get_running_loop()
        self._idle_handle = loop.call_later(timeout / IDLE_CHECK_FRACTION, self._idle_check)

    def _idle_check(self) -> None:
        if self._closed:
            return
        # nothing received or sent for that long (a response blocked by a peer that never
        # opens its window counts as idle): close, so that no connection lingers forever
        if time.monotonic() - self._last_activity > self.ctx.config.idle_timeout_s:
            self._goaway = "idle timeout"
            self.h2.close_connection()
            self._flush()
            self._close()
            return
        self._schedule_idle_check()


def make_listen_socket(ctx: ServerContext) -> socket.socket:
    """The listening TCP socket with the knobs accepted sockets inherit set before listen()."""
    config = ctx.config
    family = socket.AF_INET6 if ":" in config.bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        apply_tcp_options(sock, ctx.tcp_options, listening=True)
        sock.bind((config.bind, config.h2_port or 0))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def start_h2(ctx: ServerContext) -> tuple[asyncio.AbstractServer, tuple[str, int]]:
    """Listen for HTTP/2 over TLS 1.3; returns the server and the bound address."""
    paths = ensure_certificate(ctx.config.cert_dir)
    tls: ssl.SSLContext = server_context(paths, ctx.config.keylog_path)
    sock = make_listen_socket(ctx)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: H2ServerProtocol(ctx),
        sock=sock,
        ssl=tls,
        ssl_handshake_timeout=ctx.config.handshake_timeout_s,
    )
    host, port = sock.getsockname()[:2]
    return server, (host, port)
