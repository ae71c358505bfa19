"""HTTP/3 server on the native stack (``quic_stack = "ngtcp2"``): ``tb-h3 --server``
(proto/native/tbh3.c, ngtcp2 0.12 and nghttp3 0.8) listens and does every datagram's work;
each of its connections is a :class:`NativeH3Connection` here, which keeps the requests
with the same :class:`servers.session.ExchangeStreams` as the aioquic and HTTP/2 edges:
the routes and their checks (servers/app.py), the processing, the streamed chunks, the tiles,
the agent's operations, the event log and the in-flight samples.

Times in the log are the engine's (CLOCK_MONOTONIC when it read the packet that carried the
event, or put the response's last byte and FIN in a packet: ``response_last_byte``).
Response order among streams: nghttp3's scheduler (RFC 9218 from the client's priority
signals) unless ``send_policy`` names rr (one urgency, incremental: round robin) or fifo
(one urgency, not incremental: each stream to its end, in order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proto import ngtcp2edge
from proto.native import engine as native
from proto.native import wire
from proto.tls import ensure_certificate
from servers import app, guard, h3scan
from servers.context import ServerContext
from servers.session import ExchangeStreams
from tbcore.records import BBR_COUNTERS

PROTO = "h3"
H3_MESSAGE_ERROR = 0x010E
H3_INTERNAL_ERROR = 0x0102
"""RFC 9114 section 8.1: the code a connection break (ResponsePlan.reset) closes with."""
"""RFC 9114 section 8.1: a malformed request head."""


class NativeH3Connection(ExchangeStreams):
    """One QUIC connection of the engine."""

    proto = PROTO

    def __init__(self, listener: NativeH3Listener, engine_conn: int) -> None:
        self.listener = listener
        self.engine: native.Engine = listener.engine
        self.engine_conn = engine_conn
        self._init_streams(listener.ctx, listener.ctx.next_conn_id())
        self.terminated = False
        self.stats: dict[str, int | None] = {}
        self.last_sent: dict[int, float] = {}
        self.sent_waiters: dict[int, Any] = {}
        self.sampling: dict[str, list[bool]] = {}
        """Responses being sampled, by sample key: their done flag."""
        settings = self.ctx.config.settings
        self.ctx.applied.write("quic", native.in_force(settings), self.conn_id)
        # none: nghttp3's own order (RFC 9218 from the client's signals)
        self.ctx.applied.write("streams", {"send_policy": settings.send_policy}, self.conn_id)

    # -- events -------------------------------------------------------------------------------
    def on_event(self, event: wire.Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _handshake(self, event: wire.Handshake) -> None:
        self._log("connection_open", now=event.t, alpn="h3", resumed=event.resumed,
                  early_data_accepted=event.early_data_accepted)  # fmt: skip

    def _headers(self, event: wire.Headers) -> None:
        stream_id = event.stream
        if stream_id in self.exchanges or stream_id in self.started:
            return  # trailers: ignored
        head = self._parse_head(stream_id, event.headers, event.t)
        if head is None:
            self.engine.send(wire.Cmd.STOP, self.engine_conn, stream_id, a=H3_MESSAGE_ERROR,
                             b=wire.STOP_READING | wire.STOP_WRITING)  # fmt: skip
            return
        self._open_exchange(stream_id, head, event.t, event.ended)
        if event.ended:
            self._on_end(stream_id, event.t)

    def _data(self, event: wire.Data) -> None:
        self._on_data(event.stream, event.data, event.t)

    def _end(self, event: wire.End) -> None:
        self._on_end(event.stream, event.t)

    def _reset(self, event: wire.Reset) -> None:
        self._on_reset(event.stream, event.error_code, event.t)

    def _stop_sending(self, event: wire.StopSending) -> None:
        self._on_cancel(event.stream, event.error_code, event.t, "stop_sending")

    def _sent(self, event: wire.Sent) -> None:
        waiter = self.sent_waiters.pop(event.stream, None)
        if waiter is not None:
            waiter(event.t)
        else:
            self.last_sent[event.stream] = event.t

    def _stats(self, event: wire.Stats) -> None:
        self.stats = event.values
        sampler = self.ctx.sampler
        if sampler is None or not self.sampling:
            return
        state = self._sender_state()
        for key, done in list(self.sampling.items()):
            sampler.add(event.t, key, {"proto": PROTO, **state})
            if done[0] and self._sender_drained(state):
                del self.sampling[key]

    def _sample_response(self, stream_id: int) -> list[bool]:
        """The engine pushes its connection state every sample period: each report is a
        sample of the response (until its last byte is sent and nothing is in flight), with
        no sampling thread (servers.session's default)."""
        done = [False]
        if self.ctx.sampler is not None:
            self.sampling[f"{PROTO}:{self.conn_id}:{stream_id}"] = done
        return done

    def _qlog(self, event: wire.Qlog) -> None:
        self.listener.qlogs.append((event.path, event.t))

    def _error(self, event: wire.Error) -> None:
        self._log("error", now=event.t or None, reason=f"tb-h3: {event.reason}"[:300])

    def _on_closed(self, event: wire.Closed) -> None:
        if self.terminated:
            return
        self.terminated = True
        now = event.t or None
        self._close_streams(now or 0.0)
        if event.error_code not in native.CLEAN_CLOSE_CODES and event.reason != "closed by us":
            why = f"connection closed with error {event.error_code}: {event.reason}"
            self._log("error", now=now, reason=why)
        self._log(
            "connection_closed", now=now, error_code=event.error_code, reason=event.reason or None
        )
        self.listener.connections.pop(self.engine_conn, None)
        self.engine.handlers.pop(self.engine_conn, None)

    # -- responses ------------------------------------------------------------------------------
    def _when_sent(self, stream_id: int, callback: Any) -> None:
        """``callback(t)`` once the stream's last byte and FIN are in a packet."""
        if stream_id in self.last_sent:
            callback(self.last_sent.pop(stream_id))
        else:
            self.sent_waiters[stream_id] = callback

    def _reset_connection(self) -> None:
        # CONNECTION_CLOSE (RFC 9000 section 10.2) from the engine; its Closed event ends us
        self.engine.send(wire.Cmd.CLOSE, self.engine_conn, a=H3_INTERNAL_ERROR)

    async def _respond(self, stream_id: int, plan: app.ResponsePlan) -> None:
        await self._process(stream_id, plan)
        if self.terminated:
            return
        if plan.reset:
            self._break(stream_id)
            return
        engine, conn = self.engine, self.engine_conn
        body_length = plan.body_length
        sampling = self._sample_response(stream_id)
        head = wire.encode_headers(app.response_head(plan, PROTO))
        engine.send(wire.Cmd.RESPOND, conn, stream_id, b=int(body_length > 0), payload=head)
        self._log("response_first_byte", stream=stream_id, status=plan.status)
        if plan.stream_chunks:
            handed = [0]

            def send(chunk: bytes, last: bool) -> None:
                if self.terminated:
                    raise ConnectionError("connection terminated")
                engine.send_body(conn, stream_id, chunk, fin=last)
                handed[0] += len(chunk)

            await self._stream_chunks(stream_id, plan, send, lambda: handed[0])
        elif plan.tiles:
            async for index, part, last in self._tiled_parts(stream_id, plan):
                if self.terminated:
                    return
                engine.send_body(conn, stream_id, part, fin=last)
                self._log("tile_sent", stream=stream_id, index=index, bytes=len(part))
        elif body_length:
            engine.send_body(conn, stream_id, plan.body, fin=True)
        if body_length:

            def last_byte(t: float) -> None:
                self._log("response_last_byte", stream=stream_id, now=t, bytes=body_length)
                sampling[0] = True

            self._when_sent(stream_id, last_byte)
        else:
            self._log("response_last_byte", stream=stream_id, bytes=0)
            sampling[0] = True
        if self._still_reading(stream_id, plan):
            # RFC 9114 section 4.1: a complete response may precede the request's end;
            # STOP_SENDING(H3_NO_ERROR) asks the client to stop sending the body
            engine.send(wire.Cmd.STOP, conn, stream_id, a=native.H3_NO_ERROR,
                        b=wire.STOP_READING)  # fmt: skip

    def _sender_state(self) -> dict[str, Any]:
        stats = self.stats
        out: dict[str, Any] = dict.fromkeys(BBR_COUNTERS)
        out.update({k: stats.get(k) for k in ("bytes_in_flight", "cwnd", "ssthresh",
                    "smoothed_rtt_us", "latest_rtt_us", "min_rtt_us", "packets_sent",
                    "pto_count", "pacing_rate", "delivery_rate")})  # fmt: skip
        out["packets_lost"] = None
        return out

    def _sender_drained(self, state: dict[str, Any]) -> bool:
        return state.get("bytes_in_flight") == 0


_HANDLERS: dict[type, Any] = {
    wire.Handshake: NativeH3Connection._handshake,
    wire.Headers: NativeH3Connection._headers,
    wire.Data: NativeH3Connection._data,
    wire.End: NativeH3Connection._end,
    wire.Reset: NativeH3Connection._reset,
    wire.StopSending: NativeH3Connection._stop_sending,
    wire.Sent: NativeH3Connection._sent,
    wire.Stats: NativeH3Connection._stats,
    wire.Qlog: NativeH3Connection._qlog,
    wire.Error: NativeH3Connection._error,
    wire.Closed: NativeH3Connection._on_closed,
}
"""What each engine event does to a server connection."""


class NativeH3Listener:
    """The engine in server mode: a connection object per connection it reports."""

    def __init__(self, ctx: ServerContext, engine: native.Engine) -> None:
        self.ctx = ctx
        self.engine = engine
        self.connections: dict[int, NativeH3Connection] = {}
        self.qlogs: list[tuple[str, float]] = []
        engine.default = self._unrouted

    def _unrouted(self, event: wire.Event) -> None:
        if isinstance(event, wire.ConnOpen):
            conn = NativeH3Connection(self, event.conn)
            self.connections[event.conn] = conn
            self.engine.handlers[event.conn] = conn.on_event
        elif isinstance(event, wire.Qlog):
            self.qlogs.append((event.path, event.t))
        elif isinstance(event, wire.Error):
            self.ctx.log.emit("error", proto=PROTO, reason=f"tb-h3: {event.reason}"[:300])
        elif isinstance(event, wire.Dropped):
            why = f"dropped datagram: {event.reason}"
            self.ctx.log.emit(
                "error", proto=PROTO, now=event.t, peer=event.peer, reason=why, count=event.count
            )
        elif isinstance(event, wire.Closed) and event.conn == -1:
            self.ctx.log.emit("error", proto=PROTO, reason=f"tb-h3 ended: {event.reason}"[:300])
            for conn in list(self.connections.values()):
                conn._on_closed(event)

    async def close(self) -> None:
        await self.engine.stop()
        for path, start_s in self.qlogs:
            if Path(path).is_file():
                ngtcp2edge.anchor_qlog_file(Path(path), start_s)


def guard_flags(config: Any) -> list[str]:
    """The server's abuse limits (servers.guard and servers.h3scan, the same values as
    aioquic's edge): the connection caps, address validation by Retry, the per-source
    Initial rate, and each HTTP/3 frame's length by its type."""
    return [
        f"--max-connections={config.max_connections}",
        f"--max-per-source={config.max_connections_per_source}",
        f"--retry-mode={config.quic_retry}",
        f"--retry-threshold={config.quic_retry_threshold}",
        f"--initials-per-s={round(guard.MAX_INITIALS_PER_SOURCE_PER_S)}",
        f"--rate-limited-sources={guard.RATE_LIMITED_SOURCES}",
        *(f"--frame-cap={kind}:{size}" for kind, size in h3scan.MAX_FRAME_BYTES.items()),
        f"--unknown-frame-cap={h3scan.MAX_UNKNOWN_FRAME_BYTES}",
    ]


async def start_h3_native(ctx: ServerContext) -> tuple[NativeH3Listener, tuple[str, int]]:
    """Start the engine listening for HTTP/3; returns the listener and the bound address."""
    config = ctx.config
    paths = ensure_certificate(config.cert_dir)
    argv = ["--server", f"--bind={config.bind}", f"--port={config.h3_port or 0}",
            f"--key={paths.key}", f"--cert={paths.cert}",
            f"--udp-buffer={config.udp_buffer_bytes}",
            f"--send-policy={config.settings.send_policy}"]  # fmt: skip
    argv += native.engine_argv(
        config.settings,
        qlog_dir=config.qlog_dir,
        sample_hz=config.sample_hz if config.samples_path is not None else None,
        idle_timeout_s=config.idle_timeout_s,
        handshake_timeout_s=config.handshake_timeout_s,
    )
    argv += guard_flags(config)
    if config.qlog_dir is not None:
        config.qlog_dir.mkdir(parents=True, exist_ok=True)
    engine = native.Engine(argv, env=ngtcp2edge.keylog_env(config.keylog_path))
    listener = NativeH3Listener(ctx, engine)
    ready = await engine.start()
    return listener, (config.bind, ready.port)
