"""The client library's entry point for the harness.

``async def run_requests(config: ClientConfig) -> list[RequestRecord]``

runs ``settings.warmup_requests`` warm-up requests then ``settings.requests`` measured ones
of ``settings.workload`` (asr, tts, retouch, stream) over ``settings.protocol`` (h2, h3):

- ``connection="new"``: a fresh connection per request (warm-ups too). With
  ``resume=True`` (h2) each connection resumes the TLS session of the previous one;
  h3 always offers the newest session ticket it holds when ``resume`` is set.
- ``connection="reused"``: one connection; the warm-ups run on it first (recorded with
  ``warmup=True``), then the measured requests. A connection that dies is reopened and the
  record says so in ``extra["reconnected"]``.
- ``connection="0rtt"`` (h3 only): a first connection obtains a session ticket (and carries
  the warm-ups, if any); then every measured request opens a new connection and sends the
  request as 0-RTT early data with the newest ticket (``early_data_accepted`` tells whether
  the server took it).

Every request gets a record, failed ones too (``error`` is a one-line reason). Nothing waits
longer than ``settings.timeout_s`` per connect or request. With ``samples_path`` the sender
state is sampled at ``sample_hz`` while each request is in flight (TCP_INFO for h2, aioquic
recovery state for h3) and written as CSV (``t,request_id,<fields>``); with
``records_path`` the records are written as JSONL (always, even when requests failed).
All times are ``time.monotonic()`` (CLOCK_MONOTONIC).

The same as a command: ``testbed client --protocol h2|h3 --host ADDR --port P --workload
asr|tts|retouch|stream [--chunks N] --requests N [--warmup K] --connection new|reused|0rtt
[--resume] [--cc ...] [--quic-cc ...] [--max-datagram-size N] [--records FILE.jsonl]
[--samples FILE.csv] [--sample-hz 1000] [--qlog-dir DIR] [--keylog FILE] [--timeout 60s]
[--window-clamp B] [--sndbuf B] [--rcvbuf B] [--max-pacing-rate RATE] [--notsent-lowat B]
[--quickack] [--quic-max-data B] [--h2-window B] [--quic-pacing cwnd|off|RATE]
[--no-batching]`` (exit status 1 when any measured request failed; see clients/cli.py).
The workloads ``image`` (30 MB down) and ``sink`` (30 MB up) exist for ``bench stacks``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import IO, Any

import uvloop

from clients import fecclient, h2client, h3client, h3native
from clients.config import ClientConfig
from clients.workload import RequestSpec, exchange_specs
from proto.quic.edge import quic_counters
from proto.tls import client_context
from tbcore.records import (
    SAMPLE_RECORDS,
    AppliedLog,
    QuicRecovery,
    RequestRecord,
    tcp_info_of,
    write_jsonl,
)
from tbcore.sampler import Sampler
from tbcore.tcpinfo import read_tcp_info

TICKET_WAIT_S = 2.0
"""How long the 0-RTT priming connection waits for a session ticket."""


def _one_line(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    if isinstance(err, TimeoutError):
        text = "timed out"
    return f"{type(err).__name__}: {text}".replace("\n", " ")[:300]


class _Run:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        settings = config.settings
        self.specs = exchange_specs(settings)
        self.applied = AppliedLog(config.applied_path, "client")
        """What this client puts in force, as it does (tbcore.records.AppliedRecord)."""
        self.offered = False
        """Whether the connection being opened offered a saved TLS session or ticket."""
        self.records: list[RequestRecord] = []
        sample = SAMPLE_RECORDS[config.settings.protocol]
        self.sampler = Sampler(sample, config.sample_hz) if config.samples_path else None
        self.keylog: IO[str] | None = None
        self.conn_index = -1
        self.close_pending: str | None = None
        self.tls = None
        self.session: Any = None
        self.ticket: Any = None
        self.native: h3native.NativeStack | None = None
        """The native HTTP/3 engine of this run (``quic_stack = "ngtcp2"``), once started."""

    def new_record(self, index: int) -> RequestRecord:
        config = self.config
        record = RequestRecord(
            request_id=index,
            protocol=config.settings.protocol,
            connection=config.settings.connection,
            workload=config.settings.workload,
            warmup=index < config.settings.warmup_requests,
            close_error=self.close_pending,
        )
        self.close_pending = None
        return record

    # -- connections -----------------------------------------------------------------------
    async def connect(self, early: bool = False) -> Any:
        self.conn_index += 1
        self.offered = False
        conn = await OPENERS[self.config.settings.protocol](self, early)
        self.applied.write("connection", {"resume": self.offered, "early": early}, self.conn_index)
        for layer, values in conn.applied().items():
            self.applied.write(layer, values, self.conn_index)
        return conn

    def record_workload(self, total: int, mode: str) -> None:
        """The workload layer: the requests as built (what goes on the wire) and the loop
        that makes them (``total`` requests, warm-ups first, ``mode`` connections)."""
        settings = self.config.settings
        specs = self.specs
        streamed = [s for s in specs if s.stream_chunks]
        self.applied.write(
            "workload",
            {
                "workload": [s.workload for s in specs],
                "streams": [s.workload for s in specs if s.shared],
                "chunks": [s.stream_chunks for s in streamed],
                "cancel_after": [s.cancel_after_chunks for s in streamed],
                "player_buffer": [s.player_buffer_s for s in streamed],
                "late_chunk": [s.late_chunk for s in streamed],
                "sample_rate": [s.sample_rate_hz for s in streamed],
                "late_chunk_delay": [s.late_chunk_s for s in streamed if s.late_chunk],
                "priority_signal": [s.priority for s in specs],
                "connection": mode,
                "requests": total - settings.warmup_requests,
                "warmup_requests": settings.warmup_requests,
                "timeout": settings.timeout_s,
            },
        )

    async def open_fec(self, early: bool) -> Any:
        del early
        return await fecclient.open_connection(self.config)

    async def open_h2(self, early: bool) -> Any:
        del early
        config = self.config
        if not config.settings.tls:  # cleartext HTTP/2, prior knowledge (RFC 9113 s3.3)
            self.offered = False
            return await h2client.open_connection(config, None)
        if self.tls is None:
            self.tls = client_context(config.keylog_path)
        session = self.session if config.settings.resume else None
        self.offered = session is not None
        return await h2client.open_connection(config, self.tls, session)

    async def open_h3(self, early: bool) -> Any:
        config = self.config
        if self.keylog is None and config.keylog_path is not None:
            config.keylog_path.parent.mkdir(parents=True, exist_ok=True)
            self.keylog = config.keylog_path.open("a", buffering=1)
        use_ticket = config.settings.resume or config.settings.connection == "0rtt"
        ticket = self.ticket if use_ticket else None
        self.offered = ticket is not None
        if ticket is not None:
            # a ticket is single use (RFC 8446 section 8.1, and the server keeps none it took):
            # once offered it is spent, and only a ticket the server sends later is offered next
            self.ticket = None
        if config.settings.quic_stack == "ngtcp2":
            if self.native is None:
                self.native = h3native.NativeStack(config)
            return await self.native.connect(ticket, early)
        return await h3client.open_connection(config, ticket, early=early, keylog=self.keylog)

    def stamp_connection(self, record: RequestRecord, conn: Any) -> None:
        record.conn_index = self.conn_index
        record.connect_start = conn.connect_start
        if isinstance(conn, (h2client.H2Client, fecclient.FecClient)):
            record.tcp_connected = conn.tcp_connected
            record.handshake_done = conn.handshake_done
            record.resumed = False if isinstance(conn, fecclient.FecClient) else conn.resumed
            record.early_data_accepted = False
        else:
            record.handshake_done = conn.protocol.handshake_done
            record.resumed = conn.protocol.resumed
            record.early_data_accepted = conn.protocol.early_data_accepted

    def probe(self, conn: Any) -> Callable[[], dict[str, Any]]:
        if isinstance(conn, fecclient.FecClient):
            return conn.sample
        if isinstance(conn, h2client.H2Client):
            sock = conn.protocol.sock
            return lambda: read_tcp_info(sock)
        if isinstance(conn, h3native.NativeH3Client):
            return conn.counters
        protocol = conn.protocol
        return lambda: quic_counters(protocol)

    async def exchange(self, conn: Any, record: RequestRecord) -> list[RequestRecord]:
        """One request on ``conn`` (or, for ``multi``, one group of requests sent at once,
        each with its own record, ``record`` the first); errors go into the records."""
        if self.sampler is not None:
            if isinstance(conn, h3native.NativeH3Client):
                # the engine pushes its connection state every sample period: no thread
                conn.sample_into = (self.sampler, record.request_id)
            else:
                self.sampler.start(record.request_id, self.probe(conn))
        records = [record]
        for _extra in range(1, len(self.specs)):
            records.append(self.new_record(record.request_id))
        if isinstance(conn, (h3client.H3Client, h3native.NativeH3Client)):
            conn.priority_update = self.config.settings.priority_signal == "update"

        async def one(spec: RequestSpec, rec: RequestRecord, position: int) -> None:
            if spec.shared:
                rec.stream_workload = spec.workload
                rec.stream_index = position
            try:
                await conn.request(spec, rec, self.config.settings.timeout_s)
            except Exception as err:
                if rec.error is None or not rec.error.startswith(type(err).__name__):
                    reason = _one_line(err)
                    rec.error = reason if rec.error is None else f"{reason}; {rec.error}"

        try:
            # each request's HEADERS leave before its first await: the order is the list's
            await asyncio.gather(
                *(
                    one(spec, rec, i)
                    for i, (spec, rec) in enumerate(zip(self.specs, records, strict=True))
                )
            )
        finally:
            if self.sampler is not None:
                self.sampler.stop()
                if isinstance(conn, h3native.NativeH3Client):
                    conn.sample_into = None
                record.sample_error = self.sampler.failures.pop(record.request_id, None)
        for rec in records[1:]:
            self.stamp_connection(rec, conn)
        # stamp after the request: h3 0-RTT handshakes finish during it
        self.stamp_connection(record, conn)
        try:
            if isinstance(conn, fecclient.FecClient):
                pass  # the request put its figures in record.fec
            elif isinstance(conn, h2client.H2Client):
                record.tcp_info = tcp_info_of(conn.tcp_info())
                if conn.session is not None:
                    self.session = conn.session
            else:
                record.quic = QuicRecovery(**conn.counters())
                if conn.protocol.tickets:
                    self.ticket = conn.protocol.tickets[-1]
        except OSError:
            pass
        return records

    async def close(self, conn: Any, last: RequestRecord | None) -> None:
        """Close ``conn``; a close that fails or times out is written into ``last`` (the
        connection's last record) or, for a connection that carried none, the next record."""
        try:
            await asyncio.wait_for(conn.close(), self.config.settings.timeout_s)
        except (OSError, TimeoutError, ConnectionError) as err:
            reason = f"connection {self.conn_index}: {_one_line(err)}"
            if last is None:
                self.close_pending = reason
            else:
                last.close_error = reason

    def failed(self, index: int, err: BaseException) -> RequestRecord:
        record = self.new_record(index)
        record.conn_index = self.conn_index
        record.error = _one_line(err)
        record.sha256_ok = False
        return record

    # -- modes -------------------------------------------------------------------------------
    async def run(self) -> list[RequestRecord]:
        config = self.config
        total = config.settings.warmup_requests + config.settings.requests
        mode = config.settings.connection
        self.record_workload(total, mode)
        await MODES[mode](self, total)
        return self.records

    async def run_new(self, total: int) -> None:
        for index in range(total):
            await self.run_on_new(index)

    async def run_on_new(self, index: int, early: bool = False) -> None:
        try:
            conn = await self.connect(early=early)
        except Exception as err:
            self.records.append(self.failed(index, err))
            return
        record = self.new_record(index)
        records = [record]
        try:
            records = await self.exchange(conn, record)
        finally:
            self.records.extend(records)
            await self.close(conn, records[-1])

    async def run_reused(self, total: int) -> None:
        conn = None
        reconnected = False
        try:
            for index in range(total):
                if conn is None:
                    try:
                        conn = await self.connect()
                    except Exception as err:
                        self.records.append(self.failed(index, err))
                        reconnected = True
                        continue
                record = self.new_record(index)
                if reconnected:
                    record.reconnected = True
                self.records.extend(await self.exchange(conn, record))
                if record.error is not None and _connection_dead(conn):
                    await self.close(conn, self.records[-1])
                    conn = None
                    reconnected = True
        finally:
            if conn is not None:
                await self.close(conn, self.records[-1] if self.records else None)

    async def run_0rtt(self, total: int) -> None:
        config = self.config
        # priming connection: obtains the ticket; carries the warm-ups if any
        try:
            conn = await self.connect()
        except Exception as err:
            for index in range(total):
                self.records.append(self.failed(index, err))
            return
        try:
            for index in range(config.settings.warmup_requests):
                record = self.new_record(index)
                self.records.extend(await self.exchange(conn, record))
            ticket = await conn.wait_ticket(TICKET_WAIT_S)
            if ticket is not None:
                self.ticket = ticket
        finally:
            await self.close(conn, self.records[-1] if self.records else None)
        for index in range(config.settings.warmup_requests, total):
            await self.run_on_new(index, early=True)


MODES: dict[str, Callable[[_Run, int], Awaitable[None]]] = {
    "new": _Run.run_new,
    "reused": _Run.run_reused,
    "0rtt": _Run.run_0rtt,
}
"""How the client makes ``total`` requests for each ``connection`` mode."""

OPENERS: dict[str, Callable[[_Run, bool], Awaitable[Any]]] = {
    "h2": _Run.open_h2,
    "h3": _Run.open_h3,
    "fec": _Run.open_fec,
}
"""How the client opens a connection of each protocol (tbcore.kinds.PROTOCOLS), given the
run (its TLS context, session, ticket) and whether to send early data."""


def _connection_dead(conn: Any) -> bool:
    if isinstance(conn, fecclient.FecClient):
        return conn.writer.is_closing() or conn.failed is not None
    if isinstance(conn, h2client.H2Client):
        return conn.transport.is_closing()
    return conn.protocol.terminated_reason is not None


async def run_requests(config: ClientConfig) -> list[RequestRecord]:
    """Run the configured requests; see the module docstring. Never raises for a failed
    request (its record carries the error); writes records and samples if asked."""
    run = _Run(config)
    try:
        return await run.run()
    finally:
        if run.native is not None:
            await run.native.stop()
        if config.records_path is not None:
            write_jsonl(config.records_path, run.records)
        if run.sampler is not None and config.samples_path is not None:
            run.sampler.write_csv(config.samples_path)
        if run.keylog is not None:
            run.keylog.close()
        run.applied.close()


def run_requests_sync(config: ClientConfig) -> list[RequestRecord]:
    """:func:`run_requests` on a fresh uvloop event loop."""
    return uvloop.run(run_requests(config))


def measured(records: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup]


async def single_request(config: ClientConfig, spec: RequestSpec) -> RequestRecord:
    """One request of an arbitrary :class:`RequestSpec` on a new connection (for tests and
    probes: any method, path or declared length). Errors go into the record."""
    run = _Run(config)
    run.specs = [spec]
    try:
        await run.run_on_new(0)
    finally:
        if run.native is not None:
            await run.native.stop()
    return run.records[0]
