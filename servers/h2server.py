"""HTTP/2 over TLS 1.3 (ALPN ``h2``): a thin asyncio edge around ``h2.H2Connection``.

One :class:`H2ServerProtocol` per TCP connection. Requests are handled by
:class:`servers.app.Exchange`; responses respect HTTP/2 flow control and the transport's
write buffer. Events go to the server's :class:`~servers.events.EventLog`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import hyperframe.frame

from proto.http2 import H2_MAX_FRAME_BYTES, WRITE_BUFFER_HIGH_BYTES, queue_data, start_connection
from proto.priority import POLICY_NONE, PRIORITY_UPDATE_H2
from proto.sockopts import (
    apply_tcp_options,
    hold_window_clamp,
    read_tcp_options,
    rearm_quickack,
    tcp_socket,
)
from proto.tls import ensure_certificate, server_context
from servers import app
from servers.context import ServerContext
from servers.guard import (
    RATE_LIMITED_SOURCES,
    Admission,
    H2AbuseGuard,
    H2Limits,
    H2WireScanner,
    HeadDeadline,
    SourceRateLimiter,
)
from servers.session import ExchangeStreams
from tbcore.tcpinfo import read_bbr_info, read_tcp_info

PROTO = "h2"
LINGER_RESET = struct.pack("ii", 1, 0)
"""SO_LINGER on, zero seconds: close() resets the connection (socket(7))."""
IDLE_CHECK_FRACTION = 4
FEED_SLICE_BYTES = 16 * 1024
"""Bytes handed to h2 at once: the abuse verdicts are checked between slices, so a 64 KB
read of 2,000 HEADERS+RST_STREAM pairs is not all parsed after the connection is condemned."""
H2_FRAME_TYPE_OFFSET = 3
"""RFC 9113 section 4.1: the frame type follows the 24-bit length."""
H2_DATA_FRAME = 0x0
ABUSE_LINGER_S = 2.0
"""After GOAWAY(ENHANCE_YOUR_CALM), the connection is aborted this much later."""
ABUSE_PENALTY_S = 10.0
"""After a connection is closed for abuse, its source's next connection is refused (before
TLS) for this long: the reconnect loop of a rapid-reset attacker costs an accept, not a
handshake. One window of the reset counters (guard.RESET_WINDOW_S)."""
ADMITS_PER_WAKEUP = 64
"""Connections admitted (TLS started) per readiness event of the listening socket; then
other work runs."""
MAX_ACCEPTS_PER_WAKEUP = 2_048
"""Connections accepted per readiness event, refused ones included: a refusal is an accept
and a close (~10 us), so a flood of refused connections is drained at once instead of
standing in the accept queue in front of a normal client's."""


class GuardedH2Connection(h2.connection.H2Connection):
    """``H2Connection`` that reports DATA on closed streams (h2 answers it with RST_STREAM
    and credits the connection window, so a peer may go on sending for ever), every frame
    before it is processed (``on_frame_received`` may raise to stop the parse there) and
    every frame queued for sending."""

    on_closed_stream_data: Any = None
    on_frame_received: Any = None
    on_frames_sent: Any = None
    on_stream_error: Any = None

    def _handle_data_on_closed_stream(self, events: Any, exc: Any, frame: Any) -> Any:
        if self.on_closed_stream_data is not None:
            self.on_closed_stream_data(frame.stream_id, frame.flow_controlled_length)
        return super()._handle_data_on_closed_stream(events, exc, frame)

    def _receive_frame(self, frame: Any) -> Any:
        if self.on_frame_received is not None:
            self.on_frame_received(frame)
        return super()._receive_frame(frame)

    def _prepare_for_sending(self, frames: Any) -> None:
        if self.on_frames_sent is not None and frames:
            self.on_frames_sent(frames)
        super()._prepare_for_sending(frames)

    def _receive_headers_frame(self, frame: Any) -> Any:
        """RFC 9113 section 5.4: a stream's offence resets that stream, the connection goes
        on. A stream over SETTINGS_MAX_CONCURRENT_STREAMS is refused (REFUSED_STREAM, section
        5.1.2) after its header block is decoded, as HPACK's state must be (section 4.3); a
        new stream whose head breaks section 8.2 (an uppercase name, a connection-specific
        field) is reset with PROTOCOL_ERROR. A header block that does not decode stays a
        connection error (COMPRESSION_ERROR)."""
        existed = frame.stream_id in self.streams
        try:
            return super()._receive_headers_frame(frame)
        except h2.exceptions.TooManyStreamsError:
            self.decoder.decode(frame.data, raw=True)
            self.highest_inbound_stream_id = max(self.highest_inbound_stream_id, frame.stream_id)
            return [self._reset_frame(frame.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)], []
        except h2.exceptions.ProtocolError as err:
            stream = self.streams.get(frame.stream_id)
            if (
                existed
                or stream is None
                or err.error_code == h2.errors.ErrorCodes.COMPRESSION_ERROR
            ):
                raise
            if self.on_stream_error is not None:
                self.on_stream_error(frame.stream_id, str(err))
            stream.state_machine.process_input(h2.stream.StreamInputs.SEND_RST_STREAM)
            return [self._reset_frame(frame.stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)], []

    @staticmethod
    def _reset_frame(stream_id: int, code: Any) -> Any:
        frame = hyperframe.frame.RstStreamFrame(stream_id)
        frame.error_code = code
        return frame

    def _acknowledge_settings(self) -> Any:
        """The peer's SETTINGS_HEADER_TABLE_SIZE is the most our encoder may use, not what it
        must (RFC 7541 section 4.2): the table stays at :data:`MAX_ENCODER_TABLE_BYTES`, as
        nginx and h2o keep theirs, so a client cannot make every response's lookup scan a
        table of 2^32 - 1 bytes."""
        frames = super()._acknowledge_settings()
        if self.encoder.header_table_size > MAX_ENCODER_TABLE_BYTES:
            self.encoder.header_table_size = MAX_ENCODER_TABLE_BYTES
        return frames

    def release(self) -> None:
        """Once the connection is closed: drop the callbacks into the protocol object (bound
        methods) and h2's own table of bound methods, the two reference cycles, so that the
        connection, its buffers and its protocol go with their last reference instead of
        waiting for a full collection. Nothing may be fed to it afterwards."""
        self.on_closed_stream_data = self.on_frame_received = self.on_frames_sent = None
        self.on_stream_error = None
        self._frame_dispatch_table = {}


MAX_ENCODER_TABLE_BYTES = 4096
"""RFC 7541 section 6.5.2: SETTINGS_HEADER_TABLE_SIZE's initial value, the size our HPACK
encoder keeps whatever larger size a client allows."""


class _Condemned(Exception):
    """Raised from inside h2's parse when a frame passes an abuse budget: nothing after it
    is processed."""


H2_FLAG_BITS = {"END_STREAM": 0x1, "ACK": 0x1, "END_HEADERS": 0x4, "PADDED": 0x8, "PRIORITY": 0x20}
"""RFC 9113 section 6: every flag a frame type defines, by hyperframe's name."""


def _flag_bits(frame: Any) -> int:
    """A hyperframe frame's flags as the wire's bits (per frame: a loop over the flags set,
    none for most DATA frames)."""
    bits = 0
    for name in frame.flags:
        bits |= H2_FLAG_BITS.get(name, 0)
    return bits


def _content_bytes(frame: Any) -> int:
    """DATA's data or a header block fragment, padding excluded; 0 for other frames."""
    return len(getattr(frame, "data", b""))


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

    def __init__(self, ctx: ServerContext, on_lost: Any = None) -> None:
        self._init_streams(ctx, ctx.next_conn_id())
        self.h2 = GuardedH2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.h2.on_closed_stream_data = self._on_closed_stream_data
        self.h2.on_frame_received = self._on_frame_received
        self.h2.on_frames_sent = self._on_frames_sent
        self.h2.on_stream_error = self._on_stream_error
        self.guard = H2AbuseGuard(H2Limits(), ctx.config.settings.h2_window_bytes)
        self.scanner = H2WireScanner(H2_MAX_FRAME_BYTES, head_timeout_s=ctx.config.head_timeout_s)
        self._verdict: str | None = None
        """An abuse verdict reached while h2 queued frames, acted on after the parse."""
        self.head_deadline = HeadDeadline(ctx.config.head_timeout_s)
        self._head_handle: asyncio.TimerHandle | None = None
        self._abuse: str | None = None
        self._on_lost = on_lost
        self.on_abuse: Any = None
        """Called once when the connection is condemned (the listener penalises its source)."""
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
        self._record_applied()
        ssl_object = transport.get_extra_info("ssl_object")
        self._log(
            "connection_open",
            peer=f"{peer[0]}:{peer[1]}" if peer else None,
            tls_version=ssl_object.version() if ssl_object else None,
            resumed=bool(ssl_object.session_reused) if ssl_object else None,
        )
        self._schedule_idle_check()

    def _record_applied(self) -> None:
        """The connection's socket options as the kernel has them, TCP_QUICKACK re-arming,
        HTTP/2 connection window and the send order of its response streams (AppliedRecord)."""
        settings = self.ctx.config.settings
        applied, conn = self.ctx.applied, self.conn_id
        if self.sock is not None:
            tcp = {
                **read_tcp_options(self.sock),
                "quickack": settings.quickack_socket,
                "ack_policy": settings.ack_policy,
            }
            applied.write("tcp", tcp, conn)
        tls = self.transport is not None and self.transport.get_extra_info("ssl_object") is not None
        applied.write("h2", {"h2_window": self.h2.inbound_flow_control_window, "tls": tls}, conn)
        gated = settings.send_policy != POLICY_NONE  # the pump's gate (_run_pump)
        applied.write("streams", {"send_policy": self.scheduler.policy if gated else None}, conn)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self._last_activity = now
        if self.ctx.config.settings.quickack_socket and self.sock is not None:
            rearm_quickack(self.sock)
        hold_window_clamp(self.sock, self.ctx.config.settings.window_clamp_bytes)
        if self._abuse is not None or self._closed:
            return
        reason = self.scanner.feed(data, now)
        if reason is not None:
            return self._condemn(reason, now)
        if self.scanner.protocol_error is not None:
            return self._frame_size_error(now, self.scanner.protocol_error)
        view = memoryview(data)
        for offset in range(0, len(view), FEED_SLICE_BYTES):
            if self._abuse is not None or self._closed:
                return  # condemned: the rest is not even parsed
            try:
                events = self.h2.receive_data(view[offset : offset + FEED_SLICE_BYTES])
            except h2.exceptions.ProtocolError as err:
                self._protocol_error(now, err)
                return
            except _Condemned as verdict:
                return self._condemn(str(verdict), now)
            for event in events:
                if self._abuse is not None:
                    return
                self._handle_event(event, now)
            if self._verdict is not None:
                return self._condemn(self._verdict, now)
            self._flush()
        self._update_head_deadline(now)

    # -- abuse -----------------------------------------------------------------------------
    def _partial_head(self) -> bool:
        """An incomplete connection preface, header block or non-DATA frame is buffered.
        A partial DATA frame is not a head: a 1 MiB frame takes 8 s at 1 Mbit/s."""
        buf = self.h2.incoming_buffer
        if buf._preamble_len or buf._headers_buffer:
            return True
        data = buf._data
        if not data:
            return False
        return len(data) <= H2_FRAME_TYPE_OFFSET or data[H2_FRAME_TYPE_OFFSET] != H2_DATA_FRAME

    def _update_head_deadline(self, now: float) -> None:
        deadline = self.head_deadline
        deadline.update(self._partial_head(), now)
        dues = [d for d in (deadline.due_at(), self.scanner.partial_due_at()) if d is not None]
        if not dues or self._head_handle is not None:
            return
        due = min(dues)
        loop = asyncio.get_running_loop()
        self._head_handle = loop.call_at(
            loop.time() + (due - now) + 0.001, self._check_head_deadline
        )

    def _check_head_deadline(self) -> None:
        self._head_handle = None
        if self._closed:
            return
        now = time.monotonic()
        frame_due = self.scanner.partial_due_at()
        if self.head_deadline.expired(now):
            self._condemn(
                f"request head not complete {self.head_deadline.timeout_s:g} s after its "
                "first byte (slowloris)",
                now,
            )
        elif frame_due is not None and now > frame_due:
            self._condemn(
                f"a frame still partial at {self.scanner.min_rate_Bps:g} B/s after the head "
                "deadline (a trickled frame)",
                now,
            )
        else:
            self._update_head_deadline(now)

    def _on_frame_received(self, frame: Any) -> None:
        reason = self.guard.on_frame_received(
            frame.type, _flag_bits(frame), _content_bytes(frame), time.monotonic()
        )
        if reason is not None:
            raise _Condemned(reason)

    def _on_frames_sent(self, frames: Any) -> None:
        if self._abuse is not None:
            return  # the GOAWAY and what h2 still queues after the verdict
        now = time.monotonic()
        for frame in frames:
            reason = self.guard.on_frame_sent(frame.type, _flag_bits(frame), now)
            if reason is not None and self._verdict is None:
                self._verdict = reason

    def _on_stream_error(self, stream_id: int, reason: str) -> None:
        self._log("error", stream=stream_id, reason=f"stream reset: {reason}"[:300])

    def _on_closed_stream_data(self, stream_id: int, size_bytes: int) -> None:
        if self._abuse is None:
            reason = self.guard.on_data_after_reset(stream_id, size_bytes)
            if reason is not None:
                self._condemn(reason, time.monotonic())

    def _condemn(self, reason: str, now: float) -> None:
        """GOAWAY(ENHANCE_YOUR_CALM), stop reading, close (as the h2 servers answered
        CVE-2023-44487): nothing more from this peer is parsed or answered."""
        if self._abuse is not None:
            return
        self._abuse = reason
        self._goaway = f"abuse: {reason}"
        if self.on_abuse is not None:
            self.on_abuse()
        self._log("abuse", now=now, reason=reason)
        if self.transport is not None and not self.transport.is_closing():
            try:
                self.transport.pause_reading()
            except (RuntimeError, AttributeError):
                pass
        try:
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        except h2.exceptions.ProtocolError:
            pass
        self._truncate_open(now, f"abuse: {reason}")
        self._flush()
        self._close()
        transport = self.transport
        if transport is not None:
            # a TLS close waits for the peer's close_notify, which a paused reader never
            # reads: give the GOAWAY a moment to leave, then drop the connection
            asyncio.get_running_loop().call_later(ABUSE_LINGER_S, transport.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        now = time.monotonic()
        self._close_streams(now)
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        if self._head_handle is not None:
            self._head_handle.cancel()
        if self._on_lost is not None:
            self._on_lost()
            self._on_lost = None
        self._window_changed.set()
        self._writable.set()
        self._wake.set()
        if self._pump is not None:
            self._pump.cancel()
        self._log("connection_closed", now=now, reason=str(exc) if exc else self._goaway)
        self.h2.release()
        self.on_abuse = None

    def pause_writing(self) -> None:
        self._writable.clear()
        self.guard.on_writing_paused()

    def resume_writing(self) -> None:
        self._writable.set()
        self.guard.on_writing_resumed()

    # -- h2 events -----------------------------------------------------------------------
    def _handle_event(self, event: h2.events.Event, now: float) -> None:
        if isinstance(event, h2.events.RequestReceived):
            reason = self.guard.on_stream_opened(now)
            if reason is not None:
                return self._condemn(reason, now)
            self._on_request(event, now)
        elif isinstance(event, h2.events.DataReceived):
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self._on_data(event.stream_id, event.data, now)
            if event.stream_ended is not None:
                self._on_end(event.stream_id, now)
        elif isinstance(event, h2.events.StreamEnded):
            self._on_end(event.stream_id, now)
        elif isinstance(event, h2.events.StreamReset):
            # the peer's RST_STREAM frames are counted as they arrive (_on_frame_received)
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
        if plan.reset:
            self._break(stream_id)
            return
        sampling = self._sample_response(stream_id)
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
                self._log("tile_sent", stream=stream_id, index=index, bytes=len(part))
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

    def _reset_connection(self) -> None:
        # SO_LINGER of zero: the close sends RST (RFC 9293 section 3.10.7.1), no FIN
        if self.sock is not None:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
            except OSError as err:  # the socket already gone: the peer sees its end anyway
                self._log("error", reason=f"connection break: {err}")
        if self.transport is not None:
            self.transport.abort()

    def _sender_state(self) -> dict[str, Any]:
        # TCP_INFO, and the kernel BBR's model (bw, min_rtt, gains) beside it as aioquic's
        # BBR reports its own: the congestion-control trace compares the two (issue 25)
        return {**read_tcp_info(self.sock), **read_bbr_info(self.sock)}

    def _sender_drained(self, state: dict[str, Any]) -> bool:
        return state.get("unacked") == 0 and state.get("notsent_bytes") == 0

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

    def _frame_size_error(self, now: float, reason: str) -> None:
        """A frame longer than we allow, refused at its header (before h2 would buffer it):
        GOAWAY(FRAME_SIZE_ERROR) and close, as a protocol error, not an abuse verdict."""
        self._log("error", now=now, reason=f"protocol error, closing: {reason}"[:300])
        self._truncate_open(now, "protocol error: frame size")
        try:
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.FRAME_SIZE_ERROR)
        except h2.exceptions.ProtocolError:
            pass
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
    sock = tcp_socket(family, ctx.config.settings.multipath == "mptcp")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        apply_tcp_options(sock, ctx.tcp_options, listening=True)
        sock.bind((config.bind, config.h2_port or 0))
        sock.listen(config.listen_backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class H2Listener:
    """Accepts TCP connections itself so that the connection caps apply before the TLS
    handshake (a refused connection costs an accept and a close, not a key exchange)."""

    def __init__(self, ctx: ServerContext, sock: socket.socket, tls: ssl.SSLContext | None) -> None:
        self.ctx = ctx
        self.sock = sock
        self.tls = tls
        self.admission = Admission(
            ctx.config.max_connections, ctx.config.max_connections_per_source
        )
        self.protocols: set[H2ServerProtocol] = set()
        self._pending: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._accept)
        self._refusals_logged = 0
        self.penalised_sources: set[str] = set()
        self.penalty = SourceRateLimiter(
            rate_per_s=1.0 / ABUSE_PENALTY_S, burst=1.0, max_sources=RATE_LIMITED_SOURCES
        )
        """A source whose connection was closed for abuse waits ABUSE_PENALTY_S before the
        next is accepted (else each reconnect buys another TLS handshake and 200 resets)."""

    def _accept(self) -> None:
        admitted = 0
        for _ in range(MAX_ACCEPTS_PER_WAKEUP):
            if admitted >= ADMITS_PER_WAKEUP:
                return
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # EMFILE and the like: log, keep serving
                self.ctx.log.emit("error", proto=PROTO, reason=f"accept: {err}")
                return
            source = str(addr[0])
            refused = self._penalised(source) or self.admission.admit(source)
            if refused is not None:
                conn.close()
                if self._refusals_logged < MAX_REFUSAL_LOG_LINES:
                    self._refusals_logged += 1
                    self.ctx.log.emit(
                        "error", proto=PROTO, peer=f"{addr[0]}:{addr[1]}", reason=refused
                    )
                continue
            admitted += 1
            conn.setblocking(False)
            task = self._loop.create_task(self._start(conn, source))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    def _penalised(self, source: str) -> str | None:
        if source not in self.penalised_sources:
            return None
        if self.penalty.allow(source, time.monotonic()):
            self.penalised_sources.discard(source)
            return None
        return f"{source} closed for abuse less than {ABUSE_PENALTY_S:g} s ago"

    def _abused(self, source: str) -> None:
        self.penalised_sources.add(source)
        self.penalty.allow(source, time.monotonic())  # take the token: the wait starts now
        while len(self.penalised_sources) > RATE_LIMITED_SOURCES:
            self.penalised_sources.pop()

    async def _start(self, conn: socket.socket, source: str) -> None:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.admission.release(source)

        protocol = H2ServerProtocol(self.ctx, on_lost=release)
        protocol.on_abuse = lambda: self._abused(source)
        # tls None: cleartext HTTP/2 (settings.tls false; RFC 9113 section 3.3)
        handshake: dict[str, Any] = {}
        if self.tls is not None:
            handshake = {
                "ssl": self.tls,
                "ssl_handshake_timeout": self.ctx.config.handshake_timeout_s,
            }
        try:
            await self._loop.connect_accepted_socket(lambda: protocol, conn, **handshake)
        except (TimeoutError, OSError, ssl.SSLError, ConnectionError) as err:
            release()
            conn.close()
            self.ctx.log.emit("error", proto=PROTO, reason=f"TLS handshake: {err!r}"[:300])
            return
        except BaseException:
            release()
            conn.close()
            raise
        if protocol._closed:
            return  # lost already (connection_lost released the slot)

        def lost() -> None:
            release()
            self.protocols.discard(protocol)

        self.protocols.add(protocol)
        protocol._on_lost = lost

    def close(self) -> None:
        self._loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for task in list(self._pending):
            task.cancel()
        for protocol in list(self.protocols):
            protocol._close()


MAX_REFUSAL_LOG_LINES = 100
"""Refused connections are counted; only the first ones get a log line each."""


async def start_h2(ctx: ServerContext) -> tuple[H2Listener, tuple[str, int]]:
    """Listen for HTTP/2 over TLS 1.3 (in cleartext when ``settings.tls`` is false);
    returns the listener and the bound address."""
    tls: ssl.SSLContext | None = None
    if ctx.config.settings.tls:
        paths = ensure_certificate(ctx.config.cert_dir)
        tls = server_context(paths, ctx.config.keylog_path)
    sock = make_listen_socket(ctx)
    host, port = sock.getsockname()[:2]
    return H2Listener(ctx, sock, tls), (host, port)
