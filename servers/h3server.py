"""HTTP/3 over QUIC (aioquic): a UDP edge that demultiplexes datagrams to per-connection
protocols, each driving a ``QuicConnection`` and an ``H3Connection``.

This replaces ``aioquic.asyncio.serve`` so that the server can pick its own connection class
(:class:`servers.quic.FixedWindowQuicConnection` for fixed windows), raise the UDP socket
buffers, use ``time.monotonic()`` as aioquic's clock and log garbage datagrams.
"""

from __future__ import annotations

import asyncio
import time
from typing import IO, Any

from aioquic.buffer import Buffer
from aioquic.h3.connection import ErrorCode as H3ErrorCode
from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic import events as qevents
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE, QuicConfiguration
from aioquic.quic.packet import (
    QuicPacketType,
    encode_quic_version_negotiation,
    pull_quic_header,
)

from servers import app
from servers.context import ServerContext
from servers.quic import (
    WatchedProtocol,
    make_udp_socket,
    quic_configuration_of,
    quic_connection_of,
    quic_counters,
    stream_fully_sent,
)
from servers.session import ExchangeStreams, paced_chunks
from servers.tls import ensure_certificate

PROTO = "h3"
QUIC_LONG_HEADER_BIT = 0x80
"""RFC 9000 section 17.2: the first bit of a long-header packet."""
MAX_GARBAGE_LOG_LINES = 100
"""Garbage datagrams are counted; only the first ones get a log line each."""


class H3ServerProtocol(ExchangeStreams, WatchedProtocol):
    """One QUIC connection of the server."""

    proto = PROTO

    def __init__(self, quic: Any, *, ctx: ServerContext, conn_id: int) -> None:
        super().__init__(quic)
        self._init_streams(ctx, conn_id)
        self.h3 = H3Connection(quic)
        self.terminated = False

    def quic_event_received(self, event: qevents.QuicEvent) -> None:
        now = time.monotonic()
        if isinstance(event, qevents.HandshakeCompleted):
            self._log(
                "connection_open",
                now=now,
                alpn=event.alpn_protocol,
                resumed=event.session_resumed,
                early_data_accepted=event.early_data_accepted,
            )
        elif isinstance(event, qevents.StreamReset):
            self._on_reset(event.stream_id, event.error_code, now)
        elif isinstance(event, qevents.ConnectionTerminated):
            self._on_terminated(event, now)
            return
        try:
            h3_events = self.h3.handle_event(event)
        except Exception as err:  # H3 layer refused the peer's bytes: close, keep serving
            self._log("error", now=now, reason=f"h3 error, closing: {err!r}"[:300])
            self._quic.close(error_code=H3ErrorCode.H3_GENERAL_PROTOCOL_ERROR)
            self._transmit_soon()
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
                self._quic.reset_stream(event.stream_id, H3ErrorCode.H3_MESSAGE_ERROR)
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

    # -- responses -------------------------------------------------------------------------
    async def _respond(self, stream_id: int, plan: app.ResponsePlan) -> None:
        await self._process(stream_id, plan)
        if self.terminated:
            return
        body_length = plan.body_length
        sampling = self._sample_response(
            stream_id,
            lambda: quic_counters(self),
            lambda v: v.get("bytes_in_flight") == 0,
        )
        self.h3.send_headers(
            stream_id, _encode(app.response_head(plan, PROTO)), end_stream=body_length == 0
        )
        self.transmit()
        self._log("response_first_byte", stream=stream_id, status=plan.status)
        if plan.stream_chunks:
            async for index, chunk, last in paced_chunks(plan):
                if self.terminated:
                    return
                self.h3.send_data(stream_id, chunk, end_stream=last)
                self.transmit()
                self._log("chunk_sent", stream=stream_id, index=index)
        elif body_length:
            self.h3.send_data(stream_id, plan.body, end_stream=True)
        if body_length:

            def last_byte(t: float) -> None:
                self._log("response_last_byte", stream=stream_id, now=t, bytes=body_length)
                sampling[0] = True

            self.watch(lambda: stream_fully_sent(self._quic, stream_id), last_byte)
        else:
            self._log("response_last_byte", stream=stream_id, bytes=0)
            sampling[0] = True
        if self._still_reading(stream_id, plan):
            # HTTP/3 (RFC 9114 section 4.1): a complete response may precede the end of the
            # request; STOP_SENDING(H3_NO_ERROR) asks the client to stop sending the body.
            try:
                self._quic.stop_stream(stream_id, H3ErrorCode.H3_NO_ERROR)
            except Exception:
                pass
        self.transmit()


def _encode(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode()) for k, v in headers]


class H3Listener(asyncio.DatagramProtocol):
    """The UDP socket: routes datagrams by destination connection ID (as aioquic's
    ``QuicServer`` does, without Retry), creates connections on Initial packets, and
    counts and drops what is not QUIC."""

    def __init__(self, ctx: ServerContext, configuration: QuicConfiguration) -> None:
        self.ctx = ctx
        self.configuration = configuration
        self.protocols: dict[bytes, H3ServerProtocol] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self.sock: Any = None
        self.garbage_datagrams = 0
        self.tickets: dict[bytes, Any] = {}
        """Session tickets issued (single use, as in aioquic's example server): resumption
        and 0-RTT for clients that come back."""

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
        if protocol is None:
            if (
                len(data) < SMALLEST_MAX_DATAGRAM_SIZE
                or header.packet_type != QuicPacketType.INITIAL
            ):
                self._garbage(addr, "unknown connection ID")
                return
            protocol = self._new_connection(header.destination_cid)
        protocol.datagram_received(data, addr)

    def _new_connection(self, original_dcid: bytes) -> H3ServerProtocol:
        quic = quic_connection_of(
            self.configuration,
            self.ctx.config,
            original_destination_connection_id=original_dcid,
            session_ticket_fetcher=self.tickets.pop,
            session_ticket_handler=lambda ticket: self.tickets.__setitem__(ticket.ticket, ticket),
        )
        conn_id = self.ctx.next_conn_id()
        protocol = H3ServerProtocol(quic, ctx=self.ctx, conn_id=conn_id)
        protocol.connection_made(self.transport)  # type: ignore[arg-type]
        protocol.gso_socket = self.sock
        protocol.coalesce_transmit = self.sock is not None
        protocol._connection_id_issued_handler = lambda cid: self.protocols.__setitem__(
            cid, protocol
        )
        protocol._connection_id_retired_handler = lambda cid: self.protocols.pop(cid, None)

        def terminated() -> None:
            for cid, value in list(self.protocols.items()):
                if value is protocol:
                    del self.protocols[cid]

        protocol._connection_terminated_handler = terminated
        self.protocols[original_dcid] = protocol
        self.protocols[quic.host_cid] = protocol
        return protocol

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


async def start_h3(
    ctx: ServerContext, keylog: IO[str] | None = None
) -> tuple[H3Listener, tuple[str, int]]:
    """Listen for HTTP/3 on UDP; returns the listener and the bound address."""
    config = ctx.config
    paths = ensure_certificate(config.cert_dir)
    configuration = quic_configuration_of(
        config, is_client=False, keylog=keylog, idle_timeout_s=config.idle_timeout_s
    )
    configuration.load_cert_chain(paths.cert, paths.key)
    sock = make_udp_socket(config.bind, config.h3_port or 0, config.udp_buffer_bytes)
    loop = asyncio.get_running_loop()
    listener = H3Listener(ctx, configuration)
    listener.sock = sock if config.settings.quic_batching else None
    await loop.create_datagram_endpoint(lambda: listener, sock=sock)
    host, port = sock.getsockname()[:2]
    return listener, (host, port)
