"""HTTP/3 client on the native stack (``quic_stack = "ngtcp2"``): ``tb-h3 --client``
(proto/native/tbh3.c, ngtcp2 0.12 and nghttp3 0.8) carries the connections; this edge makes
the requests of clients.api from their :class:`clients.workload.RequestSpec`, as
clients.h3client does on aioquic, and fills the same records.

One engine per client run (:class:`NativeStack`), one UDP socket and QUIC connection per
:func:`NativeStack.connect`. Times are the engine's (CLOCK_MONOTONIC, taken when it handled
the packet that carried the event): ``connect_start`` when it made the connection,
``handshake_done`` when the handshake completed, ``request_first_byte`` when the request
was submitted to nghttp3, ``request_last_byte`` when the request's last byte and FIN went
into a packet, ``response_*`` when the response's head and bytes were read from packets.
Session tickets come back as opaque blobs (TLS session and the server's transport
parameters) and are offered on a later connection, with the request as 0-RTT data when
``early`` is asked.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clients import player_edge
from clients.config import ClientConfig
from clients.h2client import _fill
from clients.workload import RequestSpec, ResponseCollector
from proto import ngtcp2edge
from proto.native import engine as native
from proto.native import wire
from proto.priority import parse_priority
from tbcore.records import BBR_COUNTERS, RequestRecord

TICKET_SETTLE_S = 0.05
"""After a connection's first ticket, how long to wait for the server's newer ones."""


@dataclass
class _State:
    """What clients.api reads of an HTTP/3 connection (``conn.protocol``)."""

    handshake_done: float | None = None
    resumed: bool | None = None
    early_data_accepted: bool | None = None
    tickets: list[bytes] = field(default_factory=list)
    terminated_reason: str | None = None


@dataclass
class _Pending:
    collector: ResponseCollector
    done: asyncio.Future[None]
    last_sent: float | None = None
    stream: list[int] = field(default_factory=list)
    """Its stream id, once opened (a new one if the server refused its 0-RTT)."""
    record: RequestRecord | None = None


class NativeH3Client:
    """One connection of the engine (the interface of clients.h3client.H3Client)."""

    def __init__(self, stack: NativeStack, conn_id: int, authority: str) -> None:
        self.stack = stack
        self.conn_id = conn_id
        self.authority = authority
        self.protocol = _State()
        self.connect_start: float | None = None
        self.priority_update = False
        loop = asyncio.get_running_loop()
        self.handshake_event: asyncio.Future[None] = loop.create_future()
        self.ticket_event = asyncio.Event()
        self.closed_event = asyncio.Event()
        self.pending: dict[int, _Pending] = {}
        self.opening: dict[int, tuple[_Pending, asyncio.Future[tuple[int, float]]]] = {}
        """Requests whose stream the engine has not opened yet, by tag."""
        self.by_tag: dict[int, int] = {}
        """The stream each request's tag opened."""
        self.stats: dict[str, int | None] = {}
        self.qlog: tuple[Path, float] | None = None
        self.sample_into: tuple[Any, int] | None = None
        """(sampler, request id) while a request's in-flight samples are taken: each of the
        engine's reports is one (tbcore.sampler.Sampler.add)."""

    # -- events -------------------------------------------------------------------------------
    def on_event(self, event: wire.Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _conn_open(self, event: wire.ConnOpen) -> None:
        self.connect_start = event.t

    def _handshake(self, event: wire.Handshake) -> None:
        state = self.protocol
        state.handshake_done = event.t
        state.resumed = event.resumed
        state.early_data_accepted = event.early_data_accepted
        if not self.handshake_event.done():
            self.handshake_event.set_result(None)

    def _on_stream(self, event: wire.StreamOpened) -> None:
        # registered here, not where the request awaits it: the same batch of events may
        # carry the stream's SENT or its first response bytes
        pending, future = self.opening.pop(event.tag, (None, None))
        if pending is None:
            self._reopened(event)
            return
        self.by_tag[event.tag] = event.stream
        pending.stream[:] = [event.stream]
        self.pending[event.stream] = pending
        if future is not None and not future.done():
            future.set_result((event.stream, event.t))

    def _reopened(self, event: wire.StreamOpened) -> None:
        """A request the server refused as 0-RTT, made again in 1-RTT on a new stream."""
        old = self.by_tag.get(event.tag)
        pending = self.pending.pop(old, None) if old is not None else None
        if pending is None:
            return
        self.by_tag[event.tag] = event.stream
        pending.stream[:] = [event.stream]
        pending.last_sent = None
        self.pending[event.stream] = pending
        if pending.record is not None:
            pending.record.stream_id = event.stream

    def _headers(self, event: wire.Headers) -> None:
        pending = self.pending.get(event.stream)
        if pending is None:
            return
        pending.collector.on_headers(event.headers, event.t)
        if event.ended and not pending.done.done():
            pending.done.set_result(None)

    def _data(self, event: wire.Data) -> None:
        pending = self.pending.get(event.stream)
        if pending is not None:
            pending.collector.on_data(event.data, event.t)

    def _end(self, event: wire.End) -> None:
        pending = self.pending.get(event.stream)
        if pending is not None and not pending.done.done():
            pending.done.set_result(None)

    def _reset(self, event: wire.Reset) -> None:
        pending = self.pending.get(event.stream)
        if pending is not None and not pending.done.done():
            pending.done.set_exception(
                ConnectionError(f"stream reset by server (error {event.error_code})")
            )

    def _sent(self, event: wire.Sent) -> None:
        pending = self.pending.get(event.stream)
        if pending is not None:
            pending.last_sent = event.t

    def _stats(self, event: wire.Stats) -> None:
        self.stats = event.values
        if self.sample_into is not None:
            sampler, request_id = self.sample_into
            sampler.add(event.t, request_id, self.counters())

    def _ticket(self, event: wire.Ticket) -> None:
        self.protocol.tickets.append(event.blob)
        self.ticket_event.set()

    def _qlog(self, event: wire.Qlog) -> None:
        self.qlog = (Path(event.path), event.t)

    def _on_closed(self, event: wire.Closed) -> None:
        reason = f"connection closed: {event.reason}".strip()
        if event.error_code not in native.CLEAN_CLOSE_CODES:
            reason = f"connection closed: error {event.error_code} {event.reason}".strip()
        if self.protocol.terminated_reason is None:
            self.protocol.terminated_reason = reason
        failure = ConnectionError(reason)
        if not self.handshake_event.done():
            self.handshake_event.set_exception(failure)
        for pending in self.pending.values():
            if not pending.done.done():
                pending.done.set_exception(failure)
        for _, future in self.opening.values():
            if not future.done():
                future.set_exception(failure)
        self.closed_event.set()

    # -- what clients.api asks ----------------------------------------------------------------
    @property
    def handshake_done(self) -> float | None:
        return self.protocol.handshake_done

    def counters(self) -> dict[str, Any]:
        """The sender state in QuicRecovery's columns (tbcore.records), from the engine's
        newest ngtcp2_conn_stat; BBR's internals are not in it (None)."""
        stats = self.stats
        out: dict[str, Any] = dict.fromkeys(BBR_COUNTERS)
        out.update(
            bytes_in_flight=stats.get("bytes_in_flight"),
            cwnd=stats.get("cwnd"),
            ssthresh=stats.get("ssthresh"),
            smoothed_rtt_us=stats.get("smoothed_rtt_us"),
            latest_rtt_us=stats.get("latest_rtt_us"),
            min_rtt_us=stats.get("min_rtt_us"),
            packets_sent=stats.get("packets_sent"),
            packets_lost=None,
            pto_count=stats.get("pto_count"),
            pacing_rate=stats.get("pacing_rate"),
            delivery_rate=stats.get("delivery_rate"),
        )
        return out

    def applied(self) -> dict[str, dict[str, Any]]:
        return {"quic": native.in_force(self.stack.config.settings)}

    async def wait_handshake(self, timeout_s: float) -> None:
        await asyncio.wait_for(asyncio.shield(self.handshake_event), timeout_s)

    async def wait_ticket(self, timeout_s: float) -> bytes | None:
        if not self.protocol.tickets:
            try:
                await asyncio.wait_for(self.ticket_event.wait(), timeout_s)
            except TimeoutError:
                return None
            await asyncio.sleep(TICKET_SETTLE_S)
        return self.protocol.tickets[-1]

    async def _open_stream(self, spec: RequestSpec, pending: _Pending) -> tuple[int, float]:
        tag = next(self.stack.tags)
        future: asyncio.Future[tuple[int, float]] = asyncio.get_running_loop().create_future()
        self.opening[tag] = (pending, future)
        head = wire.encode_headers(spec.headers(self.authority))
        self.stack.engine.send(wire.Cmd.REQUEST, self.conn_id, a=tag, b=int(bool(spec.body)),
                               payload=head)  # fmt: skip
        return await future

    def _signal_priority(self, stream_id: int, value: str) -> None:
        """RFC 9218 section 7.2: PRIORITY_UPDATE on the control stream (nghttp3 sends it)."""
        priority = parse_priority(value)
        self.stack.engine.send(wire.Cmd.PRIORITY, self.conn_id, stream_id,
                               a=priority.urgency, b=int(priority.incremental))  # fmt: skip

    async def request(
        self, spec: RequestSpec, record: RequestRecord, timeout_s: float
    ) -> ResponseCollector:
        if self.protocol.terminated_reason is not None:
            raise ConnectionError(self.protocol.terminated_reason)
        loop = asyncio.get_running_loop()
        engine = self.stack.engine
        pending = _Pending(ResponseCollector(spec), loop.create_future(), record=record)
        stream_box = pending.stream

        def cancel(_now: float) -> None:
            # RFC 9114 section 4.1.1: STOP_SENDING and RESET_STREAM, H3_REQUEST_CANCELLED
            if stream_box:
                engine.send(wire.Cmd.STOP, self.conn_id, stream_box[0],
                            a=native.H3_REQUEST_CANCELLED,
                            b=wire.STOP_READING | wire.STOP_WRITING)  # fmt: skip
            if not pending.done.done():
                pending.done.set_result(None)

        player = player_edge.attach(pending.collector, cancel)
        try:
            async with asyncio.timeout(timeout_s):
                stream_id, submitted = await self._open_stream(spec, pending)
                record.stream_id = stream_id
                record.request_first_byte = submitted
                if self.priority_update and spec.priority is not None:
                    self._signal_priority(stream_box[0], spec.priority)
                if spec.body:
                    engine.send_body(self.conn_id, stream_box[0], spec.body, fin=True)
                await pending.done
                if player is not None:
                    await player.drain(timeout_s)
        finally:
            if pending.last_sent is not None:
                record.request_last_byte = pending.last_sent
                record.up_bytes = len(spec.body)
            if stream_box:
                self.pending.pop(stream_box[0], None)
            _fill(record, pending.collector, player)
        return pending.collector

    def abort(self) -> None:
        """Drop the connection at once (a round lost on a dead path): the engine closes it
        without waiting, and its requests fail now."""
        if self.protocol.terminated_reason is None and self.stack.engine.alive:
            self.stack.engine.send(wire.Cmd.CLOSE, self.conn_id, a=native.H3_NO_ERROR)
        self._on_closed(wire.Closed(self.conn_id, 0.0, 0, False, "aborted"))
        self.stack.closed(self)

    async def close(self) -> None:
        if self.protocol.terminated_reason is None and self.stack.engine.alive:
            self.stack.engine.send(wire.Cmd.CLOSE, self.conn_id, a=native.H3_NO_ERROR)
            await self.closed_event.wait()
        self.stack.closed(self)


_HANDLERS: dict[type, Any] = {
    wire.ConnOpen: NativeH3Client._conn_open,
    wire.Handshake: NativeH3Client._handshake,
    wire.StreamOpened: NativeH3Client._on_stream,
    wire.Headers: NativeH3Client._headers,
    wire.Data: NativeH3Client._data,
    wire.End: NativeH3Client._end,
    wire.Reset: NativeH3Client._reset,
    wire.Sent: NativeH3Client._sent,
    wire.Stats: NativeH3Client._stats,
    wire.Ticket: NativeH3Client._ticket,
    wire.Qlog: NativeH3Client._qlog,
    wire.Closed: NativeH3Client._on_closed,
}
"""What each engine event does to a client connection."""


class NativeStack:
    """The client run's engine: started at its first connection, stopped by :meth:`stop`."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.engine: Any = None
        self.ids = itertools.count()
        self.tags = itertools.count()
        self.qlogs: list[tuple[Path, float]] = []

    async def _start(self) -> None:
        config = self.config
        argv = [
            "--client",
            f"--host={config.host}",
            f"--port={config.port}",
            f"--sni={config.server_name}",
            f"--udp-buffer={config.udp_buffer_bytes}",
        ]
        argv += native.engine_argv(
            config.settings,
            qlog_dir=config.qlog_dir,
            sample_hz=config.sample_hz if config.samples_path else None,
        )
        if config.qlog_dir is not None:
            config.qlog_dir.mkdir(parents=True, exist_ok=True)
        self.engine = native.Engine(argv, env=ngtcp2edge.keylog_env(config.keylog_path))
        await self.engine.start()

    async def connect(self, ticket: bytes | None, early: bool) -> NativeH3Client:
        """A new connection (offering ``ticket``); waits for the handshake unless ``early``."""
        if self.engine is None:
            await self._start()
        config = self.config
        host = f"[{config.host}]" if ":" in config.host else config.host
        conn = NativeH3Client(self, next(self.ids), f"{host}:{config.port}")
        self.engine.handlers[conn.conn_id] = conn.on_event
        self.engine.send(wire.Cmd.CONNECT, conn.conn_id, a=int(early and ticket is not None),
                         payload=ticket or b"")  # fmt: skip
        if not early or ticket is None:
            try:
                await conn.wait_handshake(config.settings.timeout_s)
            except BaseException:
                await conn.close()
                raise
        return conn

    def closed(self, conn: NativeH3Client) -> None:
        if conn.qlog is not None:
            self.qlogs.append(conn.qlog)
        if self.engine is not None:
            self.engine.handlers.pop(conn.conn_id, None)

    async def stop(self) -> None:
        """Stop the engine, then anchor every qlog it wrote on the run's clock."""
        if self.engine is not None:
            await self.engine.stop()
        for path, start_s in self.qlogs:
            if path.is_file():
                ngtcp2edge.anchor_qlog_file(path, start_s)
