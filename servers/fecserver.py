"""The FEC server: a TLS 1.3 control channel on TCP that opens sessions, and one UDP socket
that carries every session's authenticated datagrams.

A client connects over TLS (ALPN ``tb-fec``); the server draws a session id and a 32-byte
secret, answers one JSON line ``{"session", "secret", "symbol_bytes", "udp_port"}`` and keeps
the session while the TLS connection stays open (closing it ends the session). Requests
arrive as FEC transfers (:mod:`proto.fec.message`) and go through the same request handling
as HTTP/2 and HTTP/3 (:mod:`servers.app`, :class:`servers.session.ExchangeStreams`, with the
transfer id as the stream id); the response is a transfer back with the same id, and a
streamed response one small transfer per chunk. Datagrams of no known session are counted
and dropped (:attr:`FecListener.dropped`), as are those a session refuses (its endpoint's
counters); neither closes anything.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import secrets
import time
from typing import Any

from proto.fec import message as fecmessage
from proto.fec import wire
from proto.fec.io import DatagramIO, EndpointDriver, make_fec_socket
from proto.fec.loss import Redundancy
from proto.fec.session import (
    Event,
    FecEndpoint,
    TransferDelivered,
    TransferFailed,
    TransferReceived,
    TransferStats,
    fec_in_force,
)
from proto.fec.wire import ALPN_FEC
from proto.tls import ensure_certificate, server_context
from servers import app
from servers.context import ServerContext
from servers.session import ExchangeStreams, paced_chunks
from tbcore.errors import SpecError

PROTO = "fec"
CHUNK_TRANSFER_BASE = 1 << 31
"""Transfer ids of streamed chunks: the upper half, so that they never meet the ids of the
client's requests (which the responses reuse)."""
MAX_SESSIONS = 64
"""Sessions at once (each bounded by the endpoint's own limits)."""
HELLO_TIMEOUT_S = 10.0
MAX_GARBAGE_LOG_LINES = 100


class FecServerSession(ExchangeStreams):
    """One client session: its endpoint and the requests on it."""

    proto = PROTO

    def __init__(self, ctx: ServerContext, conn_id: int, endpoint: FecEndpoint) -> None:
        self._init_streams(ctx, conn_id)
        self.endpoint = endpoint
        self.driver: EndpointDriver | None = None
        self.closed = False
        self.chunk_transfers = 0
        self.received: dict[int, TransferStats] = {}
        """Receiver-side figures of each request, told back in ``x-fec-received``."""

    def on_event(self, event: Event) -> None:
        now = time.monotonic()
        if isinstance(event, TransferReceived):
            self._on_request(event, now)
        elif isinstance(event, TransferFailed):
            self._log("error", stream=event.transfer, now=now, reason=event.reason)
        elif isinstance(event, TransferDelivered):
            self._log(
                "response_last_byte",
                stream=event.stats.transfer,
                now=now,
                reason="acknowledged",
                fec=event.stats.to_dict(),
            )

    def _on_request(self, event: TransferReceived, now: float) -> None:
        stats = event.stats
        tid = stats.transfer
        try:
            head, body = fecmessage.unpack_request(event.data)
        except ValueError as err:
            self._log("error", stream=tid, now=now, reason=f"bad request message: {err}")
            return
        if stats.first_at is not None:
            self._log_request_head(tid, head, stats.first_at)
        exchange = app.Exchange(head=head, config=self.ctx.app_config)
        self.exchanges[tid] = exchange
        if exchange.early is None and body:
            self._log("request_body_first_byte", stream=tid, now=stats.first_at)
        plan = exchange.feed(body) if exchange.early is None else exchange.early
        if plan is None:
            plan = exchange.finish()
        else:
            exchange.finished = True
        self._log_request_end(tid, exchange, now, fec=stats.to_dict())
        self.received[tid] = stats
        self._start_response(tid, plan, now)

    async def _respond(self, stream_id: int, plan: app.ResponsePlan) -> None:
        await self._process(stream_id, plan)
        driver = self.driver
        if self.closed or driver is None:
            return
        headers = app.response_head(plan, PROTO)[1:]
        received = self.received.pop(stream_id, None)
        if received is not None:
            headers.append(("x-fec-received", json.dumps(_receiver_summary(received))))
        if plan.stream_chunks:
            headers.append(("x-stream-chunks", str(plan.stream_chunks)))
        message = fecmessage.pack_response(plan.status, headers, plan.body)
        stats = self.endpoint.send(message, time.monotonic(), transfer=stream_id)
        driver.service()
        self._log("response_first_byte", stream=stream_id, status=plan.status)
        body_length = plan.body_length

        def sent(t: float) -> None:
            if not plan.stream_chunks:
                self._log("response_last_byte", stream=stream_id, now=t, bytes=body_length)

        driver.watch(lambda: stats.round_sent_at is not None, sent)
        if plan.stream_chunks:
            async for index, chunk, last, _produced in paced_chunks(plan):
                if self.closed:
                    return
                chunk_message = fecmessage.pack_response(
                    200, [("x-chunk-of", str(stream_id)), ("x-chunk", str(index))], chunk
                )
                self.chunk_transfers += 1
                self.endpoint.send(
                    chunk_message,
                    time.monotonic(),
                    transfer=CHUNK_TRANSFER_BASE + self.chunk_transfers,
                )
                driver.service()
                self._log("chunk_sent", stream=stream_id, index=index)
                if last:
                    self._log("response_last_byte", stream=stream_id, bytes=body_length)

    def close(self, now: float) -> None:
        if self.closed:
            return
        self.closed = True
        self._close_streams(now)
        if self.driver is not None:
            self.driver.close()
        self._log(
            "connection_closed",
            now=now,
            fec={
                "dropped": dict(self.endpoint.dropped),
                "received_datagrams": self.endpoint.received_datagrams,
                "sent_datagrams": self.endpoint.sent_datagrams,
            },
        )


def _receiver_summary(stats: TransferStats) -> dict[str, object]:
    """What the client cannot see of its request: how it arrived and decoded."""
    return {
        "received_symbols": stats.received_symbols,
        "extra_rounds": stats.extra_rounds,
        "decode_failures": stats.decode_failures,
        "rate_bps": stats.rate_bps,
        "decode_s": None
        if stats.done_at is None or stats.first_at is None
        else stats.done_at - stats.first_at,
    }


class FecListener:
    """The UDP socket and the TLS control listener."""

    def __init__(self, ctx: ServerContext, sock: Any) -> None:
        self.ctx = ctx
        config = ctx.config
        self.redundancy = Redundancy.parse(
            config.settings.fec_redundancy, config.settings.fec_target
        )
        self.sessions: dict[bytes, FecServerSession] = {}
        self.dropped: collections.Counter[str] = collections.Counter()
        loop = asyncio.get_running_loop()
        self._touched: set[FecServerSession] = set()
        self.io = DatagramIO(sock, self._datagram, loop, self._batch_end)
        self.tcp: asyncio.AbstractServer | None = None

    def _datagram(self, data: bytes, arrival: float, addr: Any) -> None:
        head = wire.peek_session(data)
        session = self.sessions.get(head[1]) if head is not None else None
        if session is None or session.driver is None:
            self._garbage(addr, "short datagram" if head is None else "unknown session")
            return
        session.driver.receive(data, arrival, addr, service=False)
        self._touched.add(session)

    def _batch_end(self) -> None:
        touched, self._touched = self._touched, set()
        for session in touched:
            if session.driver is not None:
                session.driver.service()

    def _garbage(self, addr: Any, reason: str) -> None:
        self.dropped[reason] += 1
        total = sum(self.dropped.values())
        if total <= MAX_GARBAGE_LOG_LINES:
            self.ctx.log.emit(
                "error",
                proto=PROTO,
                peer=f"{addr[0]}:{addr[1]}",
                reason=f"dropped datagram: {reason}",
                count=total,
            )

    async def handle_control(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One TLS control connection = one session, for as long as it stays open."""
        now = time.monotonic()
        conn_id = self.ctx.next_conn_id()
        if len(self.sessions) >= MAX_SESSIONS:
            self.ctx.log.emit("error", proto=PROTO, conn=conn_id, reason="too many sessions")
            writer.close()
            return
        session_id = os.urandom(wire.SESSION_ID_BYTES)
        secret = secrets.token_bytes(wire.SECRET_BYTES)
        endpoint = FecEndpoint(
            is_client=False,
            session=session_id,
            secret=secret,
            cap_bps=self.ctx.config.settings.fec_rate_bps,  # type: ignore[arg-type]
            redundancy=self.redundancy,
            now=now,
        )
        session = FecServerSession(self.ctx, conn_id, endpoint)
        self.ctx.applied.write("fec", fec_in_force(endpoint), conn_id)
        loop = asyncio.get_running_loop()
        session.driver = EndpointDriver(endpoint, self.io, None, session.on_event, loop)
        self.sessions[session_id] = session
        session._log(
            "connection_open", now=now, alpn=ALPN_FEC, fec={"redundancy": str(self.redundancy)}
        )
        try:
            hello = {
                "session": session_id.hex(),
                "secret": secret.hex(),
                "symbol_bytes": wire.SYMBOL_BYTES,
                "udp_port": self.io.sock.getsockname()[1],
            }
            writer.write((json.dumps(hello) + "\n").encode())
            await writer.drain()
            while await reader.read(4096):
                pass  # the client says nothing more; EOF ends the session
        except (ConnectionError, OSError):
            pass
        finally:
            self.sessions.pop(session_id, None)
            session.close(time.monotonic())
            writer.close()

    def close(self) -> None:
        now = time.monotonic()
        for session in list(self.sessions.values()):
            session.close(now)
        self.sessions.clear()
        if self.tcp is not None:
            self.tcp.close()
        self.io.close()


async def start_fec(ctx: ServerContext) -> tuple[FecListener, tuple[str, int]]:
    """Listen for FEC sessions: TLS control on TCP and datagrams on UDP, the same port."""
    config = ctx.config
    if not config.settings.fec_rate_bps:
        raise SpecError("fec-rate", "the FEC server needs the path's rate (e.g. 333mbit)")
    tls = server_context(ensure_certificate(config.cert_dir))
    tls.set_alpn_protocols([ALPN_FEC])
    # the UDP port first (a free one when 0), then TLS on TCP with the same number
    sock = make_fec_socket(config.bind, config.fec_port or 0, config.udp_buffer_bytes)
    port = sock.getsockname()[1]
    try:
        listener = FecListener(ctx, sock)
    except BaseException:
        sock.close()
        raise
    try:
        listener.tcp = await asyncio.start_server(
            listener.handle_control, config.bind, port, ssl=tls, reuse_address=True
        )
    except BaseException:
        listener.close()
        raise
    return listener, (config.bind, port)
