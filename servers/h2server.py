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
from dataclasses import dataclass
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
from servers.priority import POLICY_NONE, PRIORITY_UPDATE_H2
from servers.session import ExchangeStreams
from servers.sockopts import apply_tcp_options, rearm_quickack
from servers.tls import ensure_certificate, server_context
from tbcore.tcpinfo import read_tcp_info

PROTO = "h2"
IDLE_CHECK_FRACTION = 4


SEND_LOWAT_BYTES = 64 * 1024
"""Under an ordering policy the pump writes while fewer bytes than this, and than half the
congestion window, are unsent below it (asyncio buffer + the kernel's not-sent queue): what
a newly urgent stream may wait behind (what TCP_NOTSENT_LOWAT is for). 64 KiB is 5 ms at
100 Mbit/s; in slow start half a window (7 KB of a 14.5 KB initial window) keeps it within
one round trip: with a fixed 64 KiB a media chunk waited 280 ms (3 RTT) behind the image."""
SLICE_BYTES = 16 * 1024
"""DATA written per scheduling decision under an ordering policy (RFC 9113's default
SETTINGS_MAX_FRAME_SIZE)."""
PUMP_POLL_MIN_S = 0.0005
PUMP_POLL_MAX_S = 0.010
"""A gated pump looks at the unsent bytes again after the time the excess takes to leave at
the socket's pacing rate (TCP_INFO), within these limits: the kernel gives no wake-up when
its not-sent queue drains below a level, and polling faster only burns CPU."""


@dataclass
class _Piece:
    """Body bytes of one stream waiting for the send pump."""

    body: memoryview
    end_stream: bool
    done: asyncio.Future[None]
    offset: int = 0
    reported: int = 0


async def _first(*waits: Any) -> None:
    """Wait until the first of several awaitables finishes; cancel the rest."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


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
        self.outbox: dict[int, list[_Piece]] = {}
        """Per stream, the body pieces the send pump has still to queue."""
        self.rotation: list[int] = []
        """Streams with something to send, the one served last at the end (round robin)."""
        self.body_bytes_written: dict[int, int] = {}
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None

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
        self._wake.set()
        if self._pump is not None:
            self._pump.cancel()
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
            self._drop_stream(event.stream_id)
            self._on_reset(event.stream_id, event.error_code, now)
        elif isinstance(event, h2.events.UnknownFrameReceived):
            frame = event.frame
            if frame.type == PRIORITY_UPDATE_H2 and len(frame.body) >= 4:
                # RFC 9218 section 7.1: 31-bit prioritized stream id, then the field value
                stream_id = int.from_bytes(frame.body[:4], "big") & 0x7FFFFFFF
                self._on_priority_update(stream_id, bytes(frame.body[4:]), now)
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
        elif plan.tiles:
            async for index, part, last in self._tiled_parts(stream_id, plan):
                await self._send_body(stream_id, part, end_stream=last)
                self._log("tile_sent", stream=stream_id, index=index)
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
        def send(chunk: bytes, last: bool) -> asyncio.Future[None]:
            return self._enqueue(stream_id, chunk, end_stream=last)

        await self._stream_chunks(
            stream_id, plan, send, lambda: self.body_bytes_written.get(stream_id, 0)
        )

    def _enqueue(self, stream_id: int, body: bytes, end_stream: bool) -> asyncio.Future[None]:
        """Hand ``body`` to the connection's send pump; the future is done once every byte
        of it is queued in DATA frames (under flow control and the send policy)."""
        if self._closed:
            raise ConnectionError("connection closed")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.outbox.setdefault(stream_id, []).append(_Piece(memoryview(body), end_stream, done))
        if stream_id not in self.rotation:
            self.rotation.append(stream_id)
        self._wake.set()
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run_pump())
        return done

    async def _send_body(self, stream_id: int, body: bytes, end_stream: bool = True) -> None:
        """:meth:`_enqueue` and wait until the body is in the transport."""
        done = self._enqueue(stream_id, body, end_stream)
        try:
            await done
        finally:
            if not done.done():  # cancelled: the piece is withdrawn
                self._drop_stream(stream_id)

    def _drop_stream(self, stream_id: int) -> None:
        for piece in self.outbox.pop(stream_id, []):
            if not piece.done.done():
                piece.done.cancel()
        if stream_id in self.rotation:
            self.rotation.remove(stream_id)

    def _ready_streams(self) -> list[int]:
        ready = []
        for stream_id in self.rotation:
            pieces = self.outbox.get(stream_id)
            if not pieces:
                continue
            try:
                window = self.h2.local_flow_control_window(stream_id)
            except h2.exceptions.StreamClosedError:
                self._fail_stream(stream_id, ConnectionError("stream closed"))
                continue
            if window > 0 or len(pieces[0].body) == 0:
                ready.append(stream_id)
        return ready

    def _fail_stream(self, stream_id: int, err: Exception) -> None:
        for piece in self.outbox.pop(stream_id, []):
            if not piece.done.done():
                piece.done.set_exception(err)

    def _unsent_wait_s(self) -> float:
        """0 when fewer than :data:`SEND_LOWAT_BYTES` (or half the congestion window, at
        least one slice) are written but not yet sent (the
        transport's buffer and the kernel's not-sent queue, TCP_INFO tcpi_notsent_bytes),
        else how long to wait before looking again."""
        assert self.transport is not None
        buffered = self.transport.get_write_buffer_size()
        try:
            info = read_tcp_info(self.sock)
        except OSError:
            return 0.0
        window = int(info.get("snd_cwnd") or 0) * int(info.get("snd_mss") or 0)
        lowat = min(SEND_LOWAT_BYTES, max(SLICE_BYTES, window // 2))
        excess = buffered + int(info.get("notsent_bytes") or 0) - lowat
        if excess < 0:
            return 0.0
        rate = info.get("pacing_rate") or info.get("delivery_rate") or 0
        wait = (excess + SLICE_BYTES) / rate if rate else PUMP_POLL_MAX_S
        return min(PUMP_POLL_MAX_S, max(PUMP_POLL_MIN_S, wait))

    async def _run_pump(self) -> None:
        """One writer per connection: each round, the stream the policy picks next gets one
        slice of DATA. Under any policy but ``none`` the pump writes only while less than
        :data:`SEND_LOWAT_BYTES` are unsent below it, so that the order of what leaves is
        decided here and not in a socket buffer full of the earlier stream."""
        gate = self.ctx.config.settings.send_policy != POLICY_NONE
        try:
            while not self._closed:
                ready = self._ready_streams()
                if not ready:
                    self._wake.clear()
                    self._window_changed.clear()
                    await _first(self._wake.wait(), self._window_changed.wait())
                    continue
                if not self._writable.is_set():
                    await self._writable.wait()
                    continue
                wait = self._unsent_wait_s() if gate else 0.0
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                stream_id = self.scheduler.order(ready)[0]
                self._write_slice(stream_id, gate)
                self.rotation.remove(stream_id)
                self.rotation.append(stream_id)
                await asyncio.sleep(0)
        finally:
            err = ConnectionError("connection closed")
            for stream_id in list(self.outbox):
                self._fail_stream(stream_id, err)

    def _write_slice(self, stream_id: int, gate: bool) -> None:
        pieces = self.outbox[stream_id]
        piece = pieces[0]
        total = len(piece.body)
        if total == 0:
            if piece.end_stream:
                self.h2.end_stream(stream_id)
        else:
            window = self.h2.local_flow_control_window(stream_id)
            limit = min(window, SLICE_BYTES) if gate else window
            piece.offset = queue_data(
                self.h2, stream_id, piece.body, piece.offset, limit, piece.end_stream
            )
        self._flush()
        self.body_bytes_written[stream_id] = self.body_bytes_written.get(stream_id, 0) + (
            piece.offset - piece.reported
        )
        piece.reported = piece.offset
        if piece.offset >= total:
            pieces.pop(0)
            if not piece.done.done():
                piece.done.set_result(None)
            if not pieces:
                del self.outbox[stream_id]

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
