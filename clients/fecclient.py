"""FEC client: opens a session over TLS, measures the path, then runs requests as transfers.

:func:`open_connection` connects the TLS 1.3 control channel (``tcp_connected``,
``handshake_done``), reads the session id and secret, opens a UDP socket to the server's
datagram port and runs the path probe (``probe_done``); the session is then "measured".
:meth:`FecClient.request` sends the request as one transfer and waits for the response
transfer (or, for a streamed response, its head and then one transfer per chunk), feeding
the same :class:`~clients.workload.ResponseCollector` as the other protocols, and stores
both transfers' FEC figures in ``record.fec``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from clients.config import ClientConfig
from clients.h2client import _fill
from clients.workload import RequestSpec, ResponseCollector
from proto.fec import message as fecmessage
from proto.fec import wire
from proto.fec.io import DatagramIO, EndpointDriver, make_fec_socket
from proto.fec.loss import Redundancy
from proto.fec.session import (
    Event,
    FecEndpoint,
    ProbeDone,
    TransferDelivered,
    TransferFailed,
    TransferReceived,
    TransferStats,
    fec_in_force,
)
from proto.fec.wire import ALPN_FEC
from proto.tls import client_context
from tbcore.records import FecFigures, RequestRecord
from tbcore.workloads import STREAM_CHUNK_BYTES

HELLO_MAX_BYTES = 4096


@dataclass
class _Pending:
    collector: ResponseCollector
    done: asyncio.Future[None]
    chunks_expected: int | None = None
    chunks: dict[int, bytes] = field(default_factory=dict)
    response: TransferStats | None = None


@dataclass
class FecClient:
    endpoint: FecEndpoint
    driver: EndpointDriver
    io: DatagramIO
    writer: asyncio.StreamWriter
    connect_start: float
    tcp_connected: float
    handshake_done: float
    probe_done: float | None = None
    probe_event: asyncio.Future[None] | None = None
    pending: dict[int, _Pending] = field(default_factory=dict)
    delivered: dict[int, TransferStats] = field(default_factory=dict)
    failed: str | None = None

    # -- events ------------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        now = time.monotonic()
        if isinstance(event, ProbeDone):
            if self.probe_done is None:
                self.probe_done = now
            if self.probe_event is not None and not self.probe_event.done():
                self.probe_event.set_result(None)
        elif isinstance(event, TransferDelivered):
            self.delivered[event.stats.transfer] = event.stats
        elif isinstance(event, TransferFailed):
            if event.transfer == 0 and self.probe_event is not None and not self.probe_event.done():
                self.probe_event.set_exception(ConnectionError(event.reason))
            pending = self.pending.get(event.transfer)
            if pending is not None and not pending.done.done():
                pending.done.set_exception(ConnectionError(f"transfer failed: {event.reason}"))
        elif isinstance(event, TransferReceived):
            self._on_message(event, now)

    def _on_message(self, event: TransferReceived, now: float) -> None:
        try:
            status, headers, body = fecmessage.unpack_response(event.data)
        except ValueError:
            return
        values = dict(headers)
        chunk_of = values.get("x-chunk-of")
        if chunk_of is not None:
            pending = self.pending.get(int(chunk_of))
            if pending is not None:
                pending.chunks[int(values.get("x-chunk", "-1"))] = body
                self._drain_chunks(pending, event.stats.first_at or now)
            return
        pending = self.pending.get(event.stats.transfer)
        if pending is None or pending.response is not None:
            return
        pending.response = event.stats
        first = event.stats.first_at or now
        pending.collector.on_headers([(":status", str(status)), *headers], first)
        if "x-stream-chunks" in values:
            pending.chunks_expected = int(values["x-stream-chunks"])
            self._drain_chunks(pending, now)
            return
        pending.collector.on_data(body, now)
        if not pending.done.done():
            pending.done.set_result(None)

    def _drain_chunks(self, pending: _Pending, now: float) -> None:
        """Hand chunks to the collector in order (a later chunk may decode first)."""
        if pending.chunks_expected is None:
            return
        collector = pending.collector
        while True:
            index = collector.down_bytes // STREAM_CHUNK_BYTES
            chunk = pending.chunks.pop(index, None)
            if chunk is None:
                break
            collector.on_data(chunk, now)
        if len(collector.chunk_times) >= pending.chunks_expected and not pending.done.done():
            pending.done.set_result(None)

    # -- requests ----------------------------------------------------------------------------
    def sample(self) -> dict[str, Any]:
        """The sampler's columns (tbcore.records.FEC_SAMPLE_FIELDS), as integers."""
        endpoint = self.endpoint
        return {
            "rate_bps": int(endpoint.rate_bps or 0),
            "rtt_us": int(endpoint.rtt_s * 1e6),
            "sent_datagrams": endpoint.sent_datagrams,
            "received_datagrams": endpoint.received_datagrams,
            "loss_ppm": int(endpoint.peer_loss.loss * 1e6),
        }

    def applied(self) -> dict[str, dict[str, Any]]:
        """What this session runs with (tbcore.records.AppliedRecord)."""
        return {"fec": fec_in_force(self.endpoint)}

    def counters(self) -> dict[str, Any]:
        endpoint = self.endpoint
        return {
            "rate_bps": endpoint.rate_bps,
            "rate_source": endpoint.rate_source,
            "rtt_s": endpoint.rtt_s,
            "peer_loss": endpoint.peer_loss.loss,
            "sent_datagrams": endpoint.sent_datagrams,
            "received_datagrams": endpoint.received_datagrams,
            "dropped": dict(endpoint.dropped),
        }

    async def request(self, spec: RequestSpec, record: RequestRecord, timeout_s: float) -> None:
        if self.failed is not None:
            raise ConnectionError(self.failed)
        loop = asyncio.get_running_loop()
        message = fecmessage.pack_request(spec.method, spec.path, spec.body, spec.declared_length)
        collector = ResponseCollector(spec)
        record.request_first_byte = time.monotonic()
        stats = self.endpoint.send(message, record.request_first_byte)
        pending = _Pending(collector, loop.create_future())
        self.pending[stats.transfer] = pending
        record.stream_id = stats.transfer
        self.driver.service()
        try:
            async with asyncio.timeout(timeout_s):
                await pending.done
        finally:
            self.pending.pop(stats.transfer, None)
            if stats.first_at is not None:
                record.request_first_byte = stats.first_at
            record.request_last_byte = stats.round_sent_at
            record.up_bytes = len(spec.body) if stats.round_sent_at is not None else 0
            _fill(record, collector)
            response = pending.response
            received = collector.headers.get("x-fec-received")
            record.fec = FecFigures(
                request=stats.to_dict(),
                request_received=None if received is None else json.loads(received),
                response=None if response is None else response.to_dict(),
                session=self.counters(),
                probe_done=self.probe_done,
            )

    async def close(self) -> None:
        self.driver.close()
        self.io.close()
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)
        except (TimeoutError, ConnectionError, OSError, ssl.SSLError):
            pass


async def open_connection(config: ClientConfig) -> FecClient:
    """TLS control channel, session keys, UDP socket and the path probe."""
    loop = asyncio.get_running_loop()
    connect_start = time.monotonic()
    tls = client_context(config.keylog_path)
    tls.set_alpn_protocols([ALPN_FEC])
    raw = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
    raw.setblocking(False)
    try:
        await asyncio.wait_for(
            loop.sock_connect(raw, (config.host, config.port)), config.settings.timeout_s
        )
    except BaseException:
        raw.close()
        raise
    tcp_connected = time.monotonic()
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(sock=raw, ssl=tls, server_hostname=config.server_name),
        config.settings.timeout_s,
    )
    try:
        handshake_done = time.monotonic()
        line = await asyncio.wait_for(reader.readline(), config.settings.timeout_s)
        if not line or len(line) > HELLO_MAX_BYTES:
            raise ConnectionError("FEC server closed the control channel before its hello")
        hello = json.loads(line)
        session = bytes.fromhex(hello["session"])
        secret = bytes.fromhex(hello["secret"])
        udp_port = int(hello["udp_port"])
        if int(hello["symbol_bytes"]) != wire.SYMBOL_BYTES:
            raise ConnectionError(f"server symbol size {hello['symbol_bytes']} differs")
        endpoint = FecEndpoint(
            is_client=True,
            session=session,
            secret=secret,
            cap_bps=config.settings.fec_rate_bps,  # type: ignore[arg-type]
            redundancy=Redundancy.parse(config.settings.fec_redundancy, config.settings.fec_target),
            now=handshake_done,
        )
        endpoint.set_rtt(tcp_connected - connect_start)
        bind_host = "::" if ":" in config.host else "0.0.0.0"
        sock = make_fec_socket(bind_host, 0, config.udp_buffer_bytes)
        box: list[FecClient] = []
        io = DatagramIO(
            sock,
            lambda d, t, a: box[0].driver.receive(d, t, a, service=False),
            loop,
            lambda: box[0].driver.service(),
        )
        driver = EndpointDriver(
            endpoint, io, (config.host, udp_port), lambda e: box[0].on_event(e), loop
        )
        client = FecClient(
            endpoint=endpoint,
            driver=driver,
            io=io,
            writer=writer,
            connect_start=connect_start,
            tcp_connected=tcp_connected,
            handshake_done=handshake_done,
            probe_event=loop.create_future(),
        )
        box.append(client)
    except BaseException:
        writer.close()
        raise
    try:
        endpoint.start_probe(time.monotonic())
        driver.service()
        assert client.probe_event is not None
        await asyncio.wait_for(client.probe_event, config.settings.timeout_s)
    except BaseException:
        await client.close()
        raise
    return client
