"""HTTP/3 over QUIC (aioquic): a UDP edge that demultiplexes datagrams to per-connection
protocols, each driving a ``QuicConnection`` and an ``H3Connection``.

This replaces ``aioquic.asyncio.serve`` so that the server can pick its own connection class
(:class:`proto.quic.adapter.FixedWindowQuicConnection` for fixed windows), raise the UDP socket
buffers, use ``time.monotonic()`` as aioquic's clock and log garbage datagrams.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import IO, Any

from aioquic.buffer import Buffer
from aioquic.h3.connection import ErrorCode as H3ErrorCode
from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic import events as qevents
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE, QuicConfiguration
from aioquic.quic.packet import (
    QuicErrorCode,
    QuicPacketType,
    encode_quic_retry,
    encode_quic_version_negotiation,
    pull_quic_header,
)
from aioquic.quic.retry import QuicRetryTokenHandler

from proto.priority import POLICY_NONE
from proto.quic import edge
from proto.quic.adapter import is_first_flight, stream_fully_sent
from proto.tls import ensure_certificate
from servers import app
from servers.context import ServerContext
from servers.guard import Admission, RetryPolicy, SourceRateLimiter
from servers.h3scan import H3StreamScanner
from servers.session import BREAK_REASON, ExchangeStreams
from tbcore.bounded import BoundedStore

PROTO = "h3"
QUIC_LONG_HEADER_BIT = 0x80
"""RFC 9000 section 17.2: the first bit of a long-header packet."""
MAX_GARBAGE_LOG_LINES = 100
"""Garbage datagrams are counted; only the first ones get a log line each."""
MAX_TICKETS = 4096
"""Session tickets kept (a ticket is a few hundred bytes): the oldest go first."""
MAX_TICKET_AGE_S = 3600.0
"""A ticket older than an hour is forgotten (its client makes a full handshake)."""
RETRY_CID_BYTES = 8
"""The Retry's source connection ID (aioquic's own length for the IDs it chooses)."""


class H3ServerProtocol(ExchangeStreams, edge.WatchedProtocol):
    """One QUIC connection of the server."""

    proto = PROTO

    def __init__(self, quic: Any, *, ctx: ServerContext, conn_id: int) -> None:
        super().__init__(quic)
        self._init_streams(ctx, conn_id)
        self.h3 = PriorityH3Connection(quic, on_priority_update=self._priority_update)
        self.terminated = False
        self.admitted_source: str | None = None
        """The source address whose admission slot this connection holds."""
        self.handshake_deadline: asyncio.TimerHandle | None = None
        self.on_handshake_done: Any = None
        if ctx.config.settings.send_policy != POLICY_NONE:
            quic.scheduler = self.scheduler

    def _priority_update(self, stream_id: int, value: bytes) -> None:
        self._on_priority_update(stream_id, value, time.monotonic())

    def quic_event_received(self, event: qevents.QuicEvent) -> None:
        now = time.monotonic()
        if isinstance(event, qevents.HandshakeCompleted):
            if self.on_handshake_done is not None:
                self.on_handshake_done()
            self._log(
                "connection_open",
                now=now,
                alpn=event.alpn_protocol,
                resumed=event.session_resumed,
                early_data_accepted=event.early_data_accepted,
            )
        elif isinstance(event, qevents.StreamReset):
            self._on_reset(event.stream_id, event.error_code, now)
        elif isinstance(event, qevents.StopSendingReceived):
            # RFC 9000 section 3.5: aioquic has already reset the sending part (no more
            # STREAM frames, RESET_STREAM queued); the response stops producing too
            self._on_cancel(event.stream_id, event.error_code, now, "stop_sending")
        elif isinstance(event, qevents.ConnectionTerminated):
            self._on_terminated(event, now)
            return
        try:
            h3_events = self.h3.handle_event(event)
        except Exception as err:  # H3 layer refused the peer's bytes: close, keep serving
            self._log("error", now=now, reason=f"h3 error, closing: {err!r}"[:300])
            self.quic.close(error_code=H3ErrorCode.H3_GENERAL_PROTOCOL_ERROR)
            self.transmit_soon()
            return
        for h3_event in h3_events:
            self._on_h3_event(h3_event, now)

    # -- requests ------------------------------------------------------------------------
    def _on_h3_event(self, event: H3Event, now: float) -> None:
        if isinstance(event, HeadersReceived):
            if event.stream_id in self.exchanges:
                return  # trailers: ignored
            head = self._parse_head(event.stream_id, event.headers, now)
            if head is None:
                self.quic.reset_stream(event.stream_id, H3ErrorCode.H3_MESSAGE_ERROR)
                return
            self._open_exchange(event.stream_id, head, now, event.stream_ended)
            if event.stream_ended:
                self._on_end(event.stream_id, now)
        elif isinstance(event, DataReceived):
            self._on_data(event.stream_id, event.data, now)
            if event.stream_ended:
                self._on_end(event.stream_id, now)

    def _on_terminated(self, event: qevents.ConnectionTerminated, now: float) -> None:
        if self.terminated:
            return
        self.terminated = True
        self._close_streams(now)
        if event.error_code:
            self._log(
                "error",
                now=now,
                reason=f"connection closed with error {event.error_code}: {event.reason_phrase}",
            )
        self._log(
            "connection_closed",
            now=now,
            error_code=event.error_code,
            reason=event.reason_phrase or None,
        )

    def _reset_connection(self) -> None:
        # CONNECTION_CLOSE (RFC 9000 section 10.2): the peer drops the connection at once
        self.close(error_code=H3ErrorCode.H3_INTERNAL_ERROR, reason_phrase=BREAK_REASON)

    # -- responses -------------------------------------------------------------------------
    async def _respond(self, stream_id: int, plan: app.ResponsePlan) -> None:
        await self._process(stream_id, plan)
        if self.terminated:
            return
        if plan.reset:
            self._break(stream_id)
            return
        body_length = plan.body_length
        sampling = self._sample_response(stream_id)
        self.h3.send_headers(
            stream_id, _encode(app.response_head(plan, PROTO)), end_stream=body_length == 0
        )
        self.transmit()
        self._log("response_first_byte", stream=stream_id, status=plan.status)
        if plan.stream_chunks:
            handed = [0]

            def send(chunk: bytes, last: bool) -> None:
                if self.terminated:
                    raise ConnectionError("connection terminated")
                self.h3.send_data(stream_id, chunk, end_stream=last)
                handed[0] += len(chunk)
                self.transmit()

            await self._stream_chunks(stream_id, plan, send, lambda: handed[0])
        elif plan.tiles:
            async for index, part, last in self._tiled_parts(stream_id, plan):
                if self.terminated:
                    return
                self.h3.send_data(stream_id, part, end_stream=last)
                self.transmit()
                self._log("tile_sent", stream=stream_id, index=index, bytes=len(part))
        elif body_length:
            self.h3.send_data(stream_id, plan.body, end_stream=True)
        if body_length:

            def last_byte(t: float) -> None:
                self._log("response_last_byte", stream=stream_id, now=t, bytes=body_length)
                sampling[0] = True

            self.watch(lambda: stream_fully_sent(self.quic, stream_id), last_byte)
        else:
            self._log("response_last_byte", stream=stream_id, bytes=0)
            sampling[0] = True
        if self._still_reading(stream_id, plan):
            # HTTP/3 (RFC 9114 section 4.1): a complete response may precede the end of the
            # request; STOP_SENDING(H3_NO_ERROR) asks the client to stop sending the body.
            try:
                self.quic.stop_stream(stream_id, H3ErrorCode.H3_NO_ERROR)
            except ValueError:  # the stream is already gone (reset or discarded): nothing to stop
                pass
        self.transmit()

    def _sender_state(self) -> dict[str, Any]:
        return edge.quic_counters(self)

    def _sender_drained(self, state: dict[str, Any]) -> bool:
        return state.get("bytes_in_flight") == 0


class PriorityH3Connection(H3Connection):
    """aioquic's H3Connection behind a scanner of the client's streams
    (:class:`servers.h3scan.H3StreamScanner`): RFC 9218 PRIORITY_UPDATE frames are read from
    the control stream as they arrive (aioquic discards control frames other than SETTINGS
    and MAX_PUSH_ID unseen), and a frame longer than its type allows closes the connection
    with H3_EXCESSIVE_LOAD before aioquic buffers it."""

    def __init__(self, quic: Any, *, on_priority_update: Callable[[int, bytes], None]) -> None:
        super().__init__(quic)
        self.quic_connection = quic
        self._on_priority_update = on_priority_update
        self.scanner = H3StreamScanner()
        self.refused: str | None = None
        """Why the connection was closed for a frame, once it was."""

    def handle_event(self, event: qevents.QuicEvent) -> list[H3Event]:
        if self.refused is not None:
            return []
        if isinstance(event, qevents.StreamDataReceived):
            scan = self.scanner.feed(event.stream_id, event.data, event.end_stream)
            for element, value in scan.priority_updates:
                self._on_priority_update(element, value)
            if scan.verdict is not None:
                self.refused = scan.verdict.reason
                self.quic_connection.close(
                    error_code=scan.verdict.error_code, reason_phrase=scan.verdict.reason
                )
                return []
        elif isinstance(event, qevents.StreamReset):
            self.scanner.forget(event.stream_id)
        return super().handle_event(event)


def _encode(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode()) for k, v in headers]


class H3Listener(asyncio.DatagramProtocol):
    """The UDP socket: routes datagrams by destination connection ID (as aioquic's
    ``QuicServer`` does), creates connections on Initial packets, and counts and drops what
    is not QUIC.

    Under abuse (issue 17): a new connection is kept only once its first Initial decrypts
    (a forged one costs one decryption, nothing stays); under load or always (``quic_retry``)
    a client must first echo a Retry token (RFC 9000 section 8.1.2: address validation,
    stateless, with aioquic's ``QuicRetryTokenHandler``); connections are capped per source
    address and in total; a handshake must finish within ``handshake_timeout_s``; and a
    connection's teardown removes only its own connection IDs (no scan of the table)."""

    def __init__(self, ctx: ServerContext, configuration: QuicConfiguration) -> None:
        self.ctx = ctx
        self.configuration = configuration
        config = ctx.config
        self.protocols: dict[bytes, H3ServerProtocol] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self.sock: Any = None
        self.garbage_datagrams = 0
        self.tickets: BoundedStore[Any] = BoundedStore(MAX_TICKETS, MAX_TICKET_AGE_S)
        """Session tickets issued (single use, as in aioquic's example server): resumption
        and 0-RTT for clients that come back; bounded by count and age."""
        self.admission = Admission(config.max_connections, config.max_connections_per_source)
        self.retry_policy = RetryPolicy(config.quic_retry, config.quic_retry_threshold)
        self.retry_tokens = QuicRetryTokenHandler()
        self.initial_limiter = SourceRateLimiter()
        self.handshaking: set[H3ServerProtocol] = set()
        self.retries_sent = 0
        self.refused = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if data and not data[0] & QUIC_LONG_HEADER_BIT:
            # fast path, most datagrams: a short header has the destination connection ID
            # right after its first byte (RFC 9000 section 17.3); aioquic parses it again
            protocol = self.protocols.get(data[1 : 1 + self.configuration.connection_id_length])
            if protocol is not None:
                protocol.datagram_received(data, addr)
                return
        buf = Buffer(data=data)
        try:
            header = pull_quic_header(buf, host_cid_length=self.configuration.connection_id_length)
        except ValueError as err:
            self._garbage(addr, f"not a QUIC packet: {err}")
            return
        if (
            header.packet_type != QuicPacketType.VERSION_NEGOTIATION
            and header.version is not None
            and header.version not in self.configuration.supported_versions
        ):
            assert self.transport is not None
            self.transport.sendto(
                encode_quic_version_negotiation(
                    source_cid=header.destination_cid,
                    destination_cid=header.source_cid,
                    supported_versions=self.configuration.supported_versions,
                ),
                addr,
            )
            return
        protocol = self.protocols.get(header.destination_cid)
        if protocol is not None:
            protocol.datagram_received(data, addr)
            return
        if len(data) < SMALLEST_MAX_DATAGRAM_SIZE or header.packet_type != QuicPacketType.INITIAL:
            self._garbage(addr, "unknown connection ID")
            return
        self._initial(data, addr, header)

    def _initial(self, data: bytes, addr: Any, header: Any) -> None:
        """An Initial for no known connection: validate, admit, then try to decrypt it."""
        now = time.monotonic()
        if not self.initial_limiter.allow(addr[0], now):
            self.garbage_datagrams += 1  # no log line: this is the cheap path of a flood
            return
        self.retry_policy.note_attempt(now)
        original_dcid = header.destination_cid
        retry_scid: bytes | None = None
        if header.token:
            try:
                original_dcid = self.retry_tokens.validate_token(
                    address=addr,
                    destination_cid=header.destination_cid,
                    token=header.token,
                    now=now,
                )
            except ValueError as err:
                # RFC 9000 section 8.1.3 allows dropping it; a reply would be amplification
                self._garbage(addr, f"invalid Retry token: {err}")
                return
            retry_scid = header.destination_cid
        elif self.retry_policy.required(len(self.handshaking), now):
            self._send_retry(addr, header, now)
            return
        source = str(addr[0])
        refused = self.admission.admit(source)
        if refused is not None:
            self.refused += 1
            self._garbage(addr, refused)
            return
        try:
            protocol = self._new_connection(original_dcid, retry_scid, data, addr, now, source)
        except BaseException:
            self.admission.release(source)
            raise
        if protocol is None:
            self.admission.release(source)

    def _send_retry(self, addr: Any, header: Any, now: float) -> None:
        assert self.transport is not None
        source_cid = os.urandom(RETRY_CID_BYTES)
        token = self.retry_tokens.create_token(
            address=addr,
            original_destination_connection_id=header.destination_cid,
            retry_source_connection_id=source_cid,
            now=now,
        )
        self.transport.sendto(
            encode_quic_retry(
                version=header.version,
                source_cid=source_cid,
                destination_cid=header.source_cid,
                original_destination_cid=header.destination_cid,
                retry_token=token,
            ),
            addr,
        )
        self.retries_sent += 1

    def _fetch_ticket(self, label: bytes) -> Any:
        """The ticket a client offers, once (single use); None for one unknown, spent or
        expired, and aioquic then makes a full handshake (a KeyError here left the client
        with no answer until it timed out)."""
        return self.tickets.pop(label, time.monotonic())

    def _store_ticket(self, ticket: Any) -> None:
        self.tickets.put(ticket.ticket, ticket, time.monotonic())

    def _new_connection(
        self,
        original_dcid: bytes,
        retry_scid: bytes | None,
        data: bytes,
        addr: Any,
        now: float,
        source: str,
    ) -> H3ServerProtocol | None:
        """A connection for a first Initial, kept only if that Initial decrypts."""
        quic = edge.quic_connection_of(
            self.configuration,
            self.ctx.config,
            original_destination_connection_id=original_dcid,
            retry_source_connection_id=retry_scid,
            session_ticket_fetcher=self._fetch_ticket,
            session_ticket_handler=self._store_ticket,
        )
        quic.receive_datagram(data, addr, now=now)
        if is_first_flight(quic):
            # nothing decrypted: a forged or corrupt Initial; nothing of it is kept
            self._garbage(addr, "Initial did not decrypt")
            return None
        conn_id = self.ctx.next_conn_id()
        protocol = H3ServerProtocol(quic, ctx=self.ctx, conn_id=conn_id)
        protocol.connection_made(self.transport)  # type: ignore[arg-type]
        protocol.gso_socket = self.sock
        protocol.coalesce_transmit = self.sock is not None
        self.ctx.applied.write("quic", edge.quic_in_force(protocol), conn_id)
        scheduler = getattr(quic, "scheduler", None)
        policy = {"send_policy": scheduler.policy if scheduler is not None else None}
        self.ctx.applied.write("streams", policy, conn_id)
        cids: set[bytes] = set()

        def issued(cid: bytes) -> None:
            cids.add(cid)
            self.protocols[cid] = protocol

        def retired(cid: bytes) -> None:
            cids.discard(cid)
            self.protocols.pop(cid, None)

        def terminated() -> None:
            # O(own connection IDs), not a scan of every connection's
            for cid in cids:
                if self.protocols.get(cid) is protocol:
                    del self.protocols[cid]
            cids.clear()
            self.handshaking.discard(protocol)
            if protocol.admitted_source is not None:
                self.admission.release(protocol.admitted_source)
                protocol.admitted_source = None
            if protocol.handshake_deadline is not None:
                protocol.handshake_deadline.cancel()

        protocol.set_connection_handlers(issued=issued, retired=retired, terminated=terminated)
        protocol.admitted_source = source
        protocol.on_handshake_done = lambda: self._handshake_done(protocol)
        issued(header_cid_of(original_dcid, retry_scid))
        issued(quic.host_cid)
        self.handshaking.add(protocol)
        loop = asyncio.get_running_loop()
        protocol.handshake_deadline = loop.call_later(
            self.ctx.config.handshake_timeout_s, self._handshake_timeout, protocol
        )
        protocol.process_events()
        protocol.transmit()
        return protocol

    def _handshake_done(self, protocol: H3ServerProtocol) -> None:
        self.handshaking.discard(protocol)
        if protocol.handshake_deadline is not None:
            protocol.handshake_deadline.cancel()
            protocol.handshake_deadline = None

    def _handshake_timeout(self, protocol: H3ServerProtocol) -> None:
        protocol.handshake_deadline = None
        if protocol in self.handshaking and not protocol.terminated:
            protocol._log("error", reason="handshake not complete in time, closing")
            protocol.quic.close(error_code=QuicErrorCode.CONNECTION_REFUSED)
            protocol.transmit()

    def _garbage(self, addr: Any, reason: str) -> None:
        self.garbage_datagrams += 1
        if self.garbage_datagrams <= MAX_GARBAGE_LOG_LINES:
            self.ctx.log.emit(
                "error",
                proto=PROTO,
                peer=f"{addr[0]}:{addr[1]}",
                reason=f"dropped datagram: {reason}",
                count=self.garbage_datagrams,
            )

    def close(self) -> None:
        for protocol in set(self.protocols.values()):
            protocol.close()
        self.protocols.clear()
        if self.transport is not None:
            self.transport.close()


def header_cid_of(original_dcid: bytes, retry_scid: bytes | None) -> bytes:
    """The connection ID the client's Initials carry: the one it chose, or after a Retry
    the Retry's source connection ID."""
    return original_dcid if retry_scid is None else retry_scid


async def start_h3(
    ctx: ServerContext, keylog: IO[str] | None = None
) -> tuple[H3Listener, tuple[str, int]]:
    """Listen for HTTP/3 on UDP; returns the listener and the bound address."""
    config = ctx.config
    paths = ensure_certificate(config.cert_dir)
    configuration = edge.quic_configuration_of(
        config, is_client=False, keylog=keylog, idle_timeout_s=config.idle_timeout_s
    )
    configuration.load_cert_chain(paths.cert, paths.key)
    sock = edge.make_udp_socket(config.bind, config.h3_port or 0, config.udp_buffer_bytes)
    loop = asyncio.get_running_loop()
    listener = H3Listener(ctx, configuration)
    listener.sock = sock if config.settings.quic_batching else None
    await loop.create_datagram_endpoint(lambda: listener, sock=sock)
    host, port = sock.getsockname()[:2]
    return listener, (host, port)
