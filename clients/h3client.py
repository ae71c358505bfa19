"""HTTP/3 client over aioquic, with session tickets for resumption and 0-RTT.

:func:`open_connection` opens its own UDP socket (raised buffers), uses the testbed's
connection class (fixed windows when asked) and ``time.monotonic()`` as aioquic's clock.
With ``early=True`` and a ticket it returns before the handshake ends, so the first request
leaves as 0-RTT early data.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import IO, Any

from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import ErrorCode as H3ErrorCode
from aioquic.h3.connection import H3Connection, encode_frame
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic import events as qevents
from aioquic.tls import SessionTicket

from clients import player_edge
from clients.config import ClientConfig
from clients.h2client import _fill
from clients.workload import RequestSpec, ResponseCollector
from proto.priority import PRIORITY_UPDATE_H3
from proto.quic.adapter import send_h3_control_frame, stream_bytes_sent, stream_fully_sent
from proto.quic.edge import (
    WatchedProtocol,
    make_udp_socket,
    quic_configuration_of,
    quic_connection_of,
    quic_counters,
    quic_in_force,
)
from tbcore.records import RequestRecord

QLOG_CLOSE_WAIT_S = 5.0
"""With qlog on, wait this long at most for the connection to drain (the trace is written
when it ends)."""


@dataclass
class _Pending:
    collector: ResponseCollector
    done: asyncio.Future[None]


class H3ClientProtocol(WatchedProtocol):
    def __init__(self, quic: Any, **kwargs: Any) -> None:
        super().__init__(quic, **kwargs)
        self.h3 = H3Connection(quic)
        self.pending: dict[int, _Pending] = {}
        self.handshake_done: float | None = None
        self.handshake_event: asyncio.Future[None] = self.loop.create_future()
        self.resumed: bool | None = None
        self.early_data_accepted: bool | None = None
        self.tickets: list[SessionTicket] = []
        self.ticket_event = asyncio.Event()
        self.terminated_reason: str | None = None

    def on_ticket(self, ticket: SessionTicket) -> None:
        self.tickets.append(ticket)
        self.ticket_event.set()

    def quic_event_received(self, event: qevents.QuicEvent) -> None:
        now = time.monotonic()
        if isinstance(event, qevents.HandshakeCompleted):
            self.handshake_done = now
            self.resumed = event.session_resumed
            self.early_data_accepted = event.early_data_accepted
            if not self.handshake_event.done():
                self.handshake_event.set_result(None)
        elif isinstance(event, qevents.ConnectionTerminated):
            reason = f"connection closed: error {event.error_code} {event.reason_phrase}".strip()
            self.terminated_reason = reason
            if not self.handshake_event.done():
                self.handshake_event.set_exception(ConnectionError(reason))
            for pending in self.pending.values():
                if not pending.done.done():
                    pending.done.set_exception(ConnectionError(reason))
        elif isinstance(event, qevents.StreamReset):
            pending = self.pending.get(event.stream_id)
            if pending is not None and not pending.done.done():
                pending.done.set_exception(
                    ConnectionError(f"stream reset by server (error {event.error_code})")
                )
        elif isinstance(event, qevents.StopSendingReceived):
            pass  # the server answered early (413...): the response says why
        for h3_event in self.h3.handle_event(event):
            pending = self.pending.get(getattr(h3_event, "stream_id", -1))
            if pending is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                pending.collector.on_headers(h3_event.headers, now)
            elif isinstance(h3_event, DataReceived):
                pending.collector.on_data(h3_event.data, now)
            else:
                continue
            if h3_event.stream_ended and not pending.done.done():
                pending.done.set_result(None)


def send_priority_update(h3: H3Connection, stream_id: int, value: str) -> None:
    """RFC 9218 section 7.2: PRIORITY_UPDATE on the client's control stream."""
    payload = encode_uint_var(stream_id) + value.encode("ascii")
    send_h3_control_frame(h3, encode_frame(PRIORITY_UPDATE_H3, payload))


@dataclass
class H3Client:
    protocol: H3ClientProtocol
    transport: asyncio.DatagramTransport
    connect_start: float
    authority: str
    wait_close: bool
    priority_update: bool = False
    """Also signal each request's priority with a PRIORITY_UPDATE frame (RFC 9218 7.2)."""

    @property
    def handshake_done(self) -> float | None:
        return self.protocol.handshake_done

    def counters(self) -> dict[str, Any]:
        return quic_counters(self.protocol)

    def applied(self) -> dict[str, dict[str, Any]]:
        """What this connection runs with (tbcore.records.AppliedRecord), as aioquic has it."""
        return {"quic": quic_in_force(self.protocol)}

    async def wait_handshake(self, timeout_s: float) -> None:
        await asyncio.wait_for(asyncio.shield(self.protocol.handshake_event), timeout_s)

    async def wait_ticket(self, timeout_s: float) -> SessionTicket | None:
        """The newest session ticket from the server (they arrive after the handshake)."""
        if not self.protocol.tickets:
            try:
                await asyncio.wait_for(self.protocol.ticket_event.wait(), timeout_s)
            except TimeoutError:
                return None
        return self.protocol.tickets[-1]

    async def request(
        self, spec: RequestSpec, record: RequestRecord, timeout_s: float
    ) -> ResponseCollector:
        proto = self.protocol
        if proto.terminated_reason is not None:
            raise ConnectionError(proto.terminated_reason)
        loop = asyncio.get_running_loop()
        quic = proto.quic
        stream_id = quic.get_next_available_stream_id()
        pending = _Pending(ResponseCollector(spec), loop.create_future())
        proto.pending[stream_id] = pending
        record.stream_id = stream_id

        def cancel(_now: float) -> None:
            # RFC 9114 section 4.1.1: STOP_SENDING (and RESET_STREAM of the request side,
            # a no-op once its FIN is acknowledged) with H3_REQUEST_CANCELLED
            quic.stop_stream(stream_id, H3ErrorCode.H3_REQUEST_CANCELLED)
            quic.reset_stream(stream_id, H3ErrorCode.H3_REQUEST_CANCELLED)
            proto.transmit()
            if not pending.done.done():
                pending.done.set_result(None)

        player = player_edge.attach(pending.collector, cancel)
        last_sent: asyncio.Future[float] = loop.create_future()
        try:
            async with asyncio.timeout(timeout_s):
                headers = [(k.encode(), v.encode()) for k, v in spec.headers(self.authority)]
                proto.h3.send_headers(stream_id, headers, end_stream=not spec.body)
                if self.priority_update and spec.priority is not None:
                    send_priority_update(proto.h3, stream_id, spec.priority)
                if spec.body:
                    proto.h3.send_data(stream_id, spec.body, end_stream=True)
                proto.watch(
                    lambda: stream_fully_sent(quic, stream_id),
                    lambda t: last_sent.done() or last_sent.set_result(t),
                )
                # stamped as the transmit starts: a whole burst may leave inside it
                record.request_first_byte = time.monotonic()
                proto.transmit()
                await pending.done
                if player is not None:
                    await player.drain(timeout_s)
        finally:
            if last_sent.done():
                record.request_last_byte = last_sent.result()
                record.up_bytes = len(spec.body)
            else:
                # bytes of the stream put in packets (HTTP/3 framing included)
                record.up_bytes = min(len(spec.body), stream_bytes_sent(quic, stream_id))
            proto.pending.pop(stream_id, None)
            _fill(record, pending.collector, player)
        return pending.collector

    async def close(self) -> None:
        proto = self.protocol
        proto.close()
        if self.wait_close:
            try:
                await asyncio.wait_for(proto.wait_closed(), QLOG_CLOSE_WAIT_S)
            except TimeoutError:
                pass
        self.transport.close()


async def open_connection(
    config: ClientConfig,
    ticket: SessionTicket | None = None,
    early: bool = False,
    keylog: IO[str] | None = None,
) -> H3Client:
    """Open a QUIC connection; wait for the handshake unless ``early`` (0-RTT) is asked."""
    loop = asyncio.get_running_loop()
    configuration = quic_configuration_of(config, is_client=True, keylog=keylog)
    configuration.server_name = config.server_name
    configuration.verify_mode = ssl.CERT_NONE
    configuration.session_ticket = ticket
    protocol_box: list[H3ClientProtocol] = []
    quic = quic_connection_of(
        configuration,
        config,
        session_ticket_handler=lambda t: protocol_box[0].on_ticket(t) if protocol_box else None,
    )
    bind_host = "::" if ":" in config.host else "0.0.0.0"
    if config.source_addr is not None:  # one path of a dual topology (its source rule)
        bind_host = config.source_addr
    sock = make_udp_socket(bind_host, 0, config.udp_buffer_bytes)
    try:
        transport, protocol = await loop.create_datagram_endpoint(
            lambda: H3ClientProtocol(quic), sock=sock
        )
    except BaseException:
        sock.close()
        raise
    protocol_box.append(protocol)  # type: ignore[arg-type]
    if config.settings.quic_batching:
        protocol.gso_socket = sock  # type: ignore[attr-defined]
    else:
        protocol.coalesce_transmit = False  # type: ignore[attr-defined]
    authority = (
        f"[{config.host}]:{config.port}" if ":" in config.host else f"{config.host}:{config.port}"
    )
    client = H3Client(
        protocol=protocol,  # type: ignore[arg-type]
        transport=transport,  # type: ignore[arg-type]
        connect_start=time.monotonic(),
        authority=authority,
        wait_close=config.qlog_dir is not None,
    )
    protocol.connect((config.host, config.port), transmit=not early)  # type: ignore[attr-defined]
    if not early:
        try:
            await client.wait_handshake(config.settings.timeout_s)
        except BaseException:
            transport.close()
            raise
    return client
