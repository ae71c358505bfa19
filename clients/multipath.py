"""One upload over two paths (issue 14, docs/models.md section 12): the multipath arms.

``multipath = "single" | "mptcp" | "split" | "duplicate"``, all HTTP/2 over TLS 1.3 to the
server of a ``dual`` topology, whose client has one address per path (its ``link_b``
address routes over ``link_b`` by a source rule):

``single``     one TCP connection from the first path's address: the faster path alone.
``mptcp``      one Multipath TCP connection (IPPROTO_MPTCP); the kernel's path manager adds
               a subflow from the second address (netem.topology.configure_mptcp) and its
               scheduler spreads the bytes.
``split``      one connection per path; the payload divided in proportion to the path rates
               measured just before (a ``probe_bytes`` upload on each, concurrently), both
               parts sent at once; done when both are.
``duplicate``  one connection per path; the payload cut into chunks with ids, every chunk
               sent on both (``POST /chunk?upload=U&id=K&of=N``); the receiver keeps the
               first copy of each id (servers.chunks) and the upload is complete when it has
               every id once: the first complete copy wins, at twice the bytes.

Connections are opened (TCP + TLS) before the clock starts, so every arm's ``total_s`` is
the transfer itself, comparable with ``harness.bounds.split_time_s``; their windows start
cold (initcwnd), except ``split``'s, which its probe has grown. Times are CLOCK_MONOTONIC;
``duplicate``'s end is the receiver's own completion time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import uvloop

from clients import h3client
from clients.config import ClientConfig
from clients.h2client import H2Client, open_connection
from clients.workload import RequestSpec
from proto.quic.edge import make_udp_socket, quic_counters
from proto.tls import client_context
from tbcore import units, workloads
from tbcore.errors import SpecError
from tbcore.records import NO_APPLIED_LOG, AppliedLog, RequestRecord, TransferRecord
from tbcore.settings import MULTIPATH_MODES, Settings

DEFAULT_CHUNK_BYTES = 1_000_000
DEFAULT_PROBE_BYTES = 3_000_000
"""The split's rate probe per path: long enough that slow start is a small part of it (a
1 MB probe measured 13.6 and 8.3 Mbit/s on 20 and 10 Mbit/s paths, a 62/38 split)."""
PATH_OPEN_TIMEOUT_S = 3.0
"""duplicate: a path whose connection (TCP and TLS) is not up in 3 s is taken for down and
the upload goes on the others: TCP's first SYN time-out is 1 s (RFC 6298 section 2.1), so a
live path opens in time even when its first two SYNs are lost."""
DUPLICATE_INFLIGHT_CHUNKS = 4
"""Chunk requests in flight per path (HTTP/2 streams): enough to keep a path busy across
the round trip of each chunk's answer."""


@dataclass
class MultipathConfig:
    mode: str
    host: str
    port: int
    sources: tuple[str, str]
    """The client's address on ``link`` and on ``link_b``."""
    size_bytes: int = 30_000_000
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    probe_bytes: int = DEFAULT_PROBE_BYTES
    cc: str | None = None
    timeout_s: float = 300.0
    settings: Any = None
    """The run's settings (tbcore.settings.Settings), whose socket, HTTP/2 and QUIC knobs
    every connection of the upload takes; None: the knobs' defaults."""
    applied: AppliedLog = NO_APPLIED_LOG
    """Where the upload and its connections record what they put in force."""

    def __post_init__(self) -> None:
        if self.mode not in MULTIPATH_MODES:
            raise SpecError("multipath", f"{self.mode!r}: one of {', '.join(MULTIPATH_MODES)}")
        image = workloads.get_workload("image").size_bytes
        for name in ("size_bytes", "chunk_bytes", "probe_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= image:
                raise SpecError(name, f"must be a whole number in 1..{image}, got {value!r}")


@dataclass
class PathResult:
    source: str
    bytes_sent: int = 0
    start_s: float | None = None
    end_s: float | None = None
    chunks_first: int = 0
    """duplicate: chunks whose copy over this path was the one kept."""
    chunks_duplicate: int = 0
    error: str | None = None


@dataclass
class MultipathResult:
    mode: str
    size_bytes: int
    start_s: float
    end_s: float | None = None
    paths: list[PathResult] = field(default_factory=list)
    measured_rates_bps: list[float] | None = None
    """split: the goodput each path's probe measured."""
    fractions: list[float] | None = None
    error: str | None = None

    @property
    def total_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    @property
    def bytes_sent(self) -> int:
        return sum(p.bytes_sent for p in self.paths)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["total_s"] = self.total_s
        data["bytes_sent"] = self.bytes_sent
        return data


def payload(size_bytes: int) -> memoryview:
    return memoryview(workloads.workload_bytes("image"))[:size_bytes]


def _client_config(
    config: MultipathConfig, source: str | None, mptcp: bool = False, protocol: str = "h2"
) -> ClientConfig:
    """One connection's config: the run's knobs, this arm's protocol, socket and source."""
    base = config.settings if config.settings is not None else Settings()
    settings = base.replace(
        protocol=protocol,
        cc=config.cc or "cubic",
        multipath="mptcp" if mptcp else "single",
        timeout_s=config.timeout_s,
    )
    return ClientConfig(host=config.host, port=config.port, settings=settings, source_addr=source)


async def _opened(config: MultipathConfig, client: Any, index: int) -> Any:
    """``client`` (a new connection), its layers recorded as connection ``index``."""
    for layer, values in client.applied().items():
        config.applied.write(layer, values, index)
    return client


async def _post(client: H2Client, path: str, body: bytes, timeout_s: float) -> dict[str, Any]:
    """POST ``body`` and return the JSON answer; raises with a one-line reason on failure."""

    spec = RequestSpec(
        workload="sink",
        method="POST",
        path=path,
        body=body,
        expect_upload_sha256=hashlib.sha256(body).hexdigest(),
    )
    record = RequestRecord(
        request_id=0, protocol="h2", connection="reused", workload="sink", warmup=False
    )
    collector = await client.request(spec, record, timeout_s)
    if record.error is not None:
        raise ConnectionError(record.error)
    return json.loads(collector.body)


async def _send_part(
    client: H2Client, body: memoryview, result: PathResult, timeout_s: float
) -> None:
    result.start_s = time.monotonic()
    try:
        if len(body):
            await _post(client, "/sink", bytes(body), timeout_s)
        result.bytes_sent = len(body)
    except (ConnectionError, OSError, TimeoutError) as err:
        result.error = f"{type(err).__name__}: {err}"[:300]
    result.end_s = time.monotonic()


async def _send_chunks(
    client: H2Client,
    config: MultipathConfig,
    upload: str,
    result: PathResult,
    complete: asyncio.Future[float],
) -> None:
    body = payload(config.size_bytes)
    of = -(-config.size_bytes // config.chunk_bytes)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for chunk_id in range(of):
        queue.put_nowait(chunk_id)
    result.start_s = time.monotonic()

    async def worker() -> None:
        while not queue.empty():
            chunk_id = queue.get_nowait()
            start = chunk_id * config.chunk_bytes
            chunk = bytes(body[start : start + config.chunk_bytes])
            answer = await _post(
                client, f"/chunk?upload={upload}&id={chunk_id}&of={of}", chunk, config.timeout_s
            )
            result.bytes_sent += len(chunk)
            if answer.get("first"):
                result.chunks_first += 1
            else:
                result.chunks_duplicate += 1
            if answer.get("complete") and not complete.done():
                complete.set_result(float(answer["complete_t"]))

    try:
        await asyncio.gather(*(worker() for _ in range(DUPLICATE_INFLIGHT_CHUNKS)))
    except (ConnectionError, OSError, TimeoutError) as err:
        result.error = f"{type(err).__name__}: {err}"[:300]
    result.end_s = time.monotonic()


async def run_multipath(
    config: MultipathConfig, on_start: Callable[[float], None] | None = None
) -> MultipathResult:
    """One upload of ``config.size_bytes`` by the arm ``config.mode`` (see the module).
    ``on_start(t)`` is called when the timed transfer begins (connections up, probes done):
    a harness schedules a failover from that moment."""
    tls = client_context()
    mode = config.mode
    if mode in ("single", "mptcp"):
        sources: list[str | None] = [config.sources[0] if mode == "single" else None]
    else:
        sources = list(config.sources)
    values = {"multipath": mode, "size": config.size_bytes, "timeout": config.timeout_s}
    if mode == "duplicate":  # only duplication cuts the payload into numbered chunks
        values["chunk_size"] = config.chunk_bytes
    config.applied.write("upload", values)
    paths = [PathResult(source=s or "mptcp") for s in sources]
    if mode == "duplicate":
        return await _duplicate_over_open(config, tls, paths, on_start)
    clients = [
        await _opened(
            config, await open_connection(_client_config(config, s, mode == "mptcp"), tls), i
        )
        for i, s in enumerate(sources)
    ]
    try:
        body = payload(config.size_bytes)
        if mode in ("single", "mptcp"):
            result = MultipathResult(mode, config.size_bytes, time.monotonic(), paths=paths)
            if on_start is not None:
                on_start(result.start_s)
            await _send_part(clients[0], body, paths[0], config.timeout_s)
            result.end_s = paths[0].end_s if paths[0].error is None else None
            result.error = paths[0].error
            return result
        return await _split(config, clients, paths, body, on_start)
    finally:
        for client in clients:
            await client.close()


async def _open_path(config: MultipathConfig, tls: Any, path: PathResult, index: int) -> Any:
    """One duplicate path's connection, or None when it is not up within
    :data:`PATH_OPEN_TIMEOUT_S` (the path's error says why)."""
    try:
        client = await asyncio.wait_for(
            open_connection(_client_config(config, path.source), tls), PATH_OPEN_TIMEOUT_S
        )
    except (ConnectionError, OSError, TimeoutError) as err:
        path.error = f"not opened: {type(err).__name__}: {err}"[:300]
        return None
    return await _opened(config, client, index)


async def _duplicate_over_open(
    config: MultipathConfig,
    tls: Any,
    paths: list[PathResult],
    on_start: Callable[[float], None] | None,
) -> MultipathResult:
    """duplicate over the paths that open (at once): a path that does not is a failed copy,
    and with none open nothing is delivered (the result's error says so)."""
    opened = await asyncio.gather(
        *(_open_path(config, tls, path, i) for i, path in enumerate(paths))
    )
    live = [(c, p) for c, p in zip(opened, paths, strict=True) if c is not None]
    try:
        if not live:
            result = MultipathResult("duplicate", config.size_bytes, time.monotonic(), paths=paths)
            result.error = "no path opened: " + "; ".join(p.error or "" for p in paths)
            return result
        result = await _duplicate(config, [c for c, _ in live], [p for _, p in live], on_start)
        result.paths = paths  # every path, the unopened ones with their error
        return result
    finally:
        for client, _ in live:
            await client.close()


def _path_rate_bps(client: H2Client, size_bytes: int, probe: PathResult) -> float:
    """A path's rate: the kernel's delivery-rate estimate after the probe (TCP_INFO, what
    the last round trips delivered) when it has one, else the probe's goodput, which its
    slow start pulls down."""
    goodput = size_bytes * 8 / (probe.end_s - probe.start_s)  # type: ignore[operator]
    try:
        delivery = client.tcp_info().get("delivery_rate", 0) * 8
    except OSError:
        delivery = 0
    return float(max(goodput, delivery))


async def _split(
    config: MultipathConfig,
    clients: list[H2Client],
    paths: list[PathResult],
    body: memoryview,
    on_start: Callable[[float], None] | None,
) -> MultipathResult:
    probes = [PathResult(source=p.source) for p in paths]
    probe = payload(config.probe_bytes)
    await asyncio.gather(
        *(_send_part(c, probe, r, config.timeout_s) for c, r in zip(clients, probes, strict=True))
    )
    failed = [p.error for p in probes if p.error]
    if failed:
        return MultipathResult("split", config.size_bytes, time.monotonic(), error=failed[0])
    rates = [_path_rate_bps(c, len(probe), p) for c, p in zip(clients, probes, strict=True)]
    fractions = [r / sum(rates) for r in rates]
    first = round(config.size_bytes * fractions[0])
    parts = [body[:first], body[first:]]
    result = MultipathResult(
        "split",
        config.size_bytes,
        time.monotonic(),
        paths=paths,
        measured_rates_bps=rates,
        fractions=fractions,
    )
    if on_start is not None:
        on_start(result.start_s)
    await asyncio.gather(
        *(
            _send_part(c, part, r, config.timeout_s)
            for c, part, r in zip(clients, parts, paths, strict=True)
        )
    )
    errors = [p.error for p in paths if p.error]
    result.error = errors[0] if errors else None
    result.end_s = None if errors else max(p.end_s for p in paths)  # type: ignore[type-var]
    return result


async def _duplicate(
    config: MultipathConfig,
    clients: list[H2Client],
    paths: list[PathResult],
    on_start: Callable[[float], None] | None,
) -> MultipathResult:
    upload = os.urandom(8).hex()
    complete: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    result = MultipathResult("duplicate", config.size_bytes, time.monotonic(), paths=paths)
    if on_start is not None:
        on_start(result.start_s)
    tasks = [
        asyncio.create_task(_send_chunks(c, config, upload, r, complete))
        for c, r in zip(clients, paths, strict=True)
    ]
    pending: set[asyncio.Task[None]] = set(tasks)
    while pending:
        _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if pending and complete.done():
            # the other copy gets as long again as the first took; a dead path is then given
            # up (failover: the transfer has moved on without it)
            grace_s = max(1.0, time.monotonic() - result.start_s)
            _, pending = await asyncio.wait(pending, timeout=grace_s)
            for task in pending:
                task.cancel()
            for path in paths:
                if path.end_s is None:
                    path.error = "given up after the upload completed"
                    path.end_s = time.monotonic()
            break
    if complete.done():
        result.end_s = complete.result()
    else:
        result.error = "; ".join(p.error for p in paths if p.error) or "no complete copy"
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m clients.multipath --mode M --host H --port P --sources A,B [--size 30MB]
    [--chunk 1MB] [--probe 3MB] [--cc cubic]``: one upload. Prints ``{"started_s": T}`` when
    the timed transfer begins, then the result as one JSON line."""

    parser = argparse.ArgumentParser(prog="python -m clients.multipath")
    parser.add_argument(
        "--mode", required=True, choices=(*MULTIPATH_MODES, "h3-migrate"),
        help="an arm, or h3-migrate: HTTP/3 from the first address, moving to the second "
        "when the first path stops answering",
    )  # fmt: skip
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--sources", required=True, help="ADDR_LINK,ADDR_LINK_B")
    parser.add_argument("--size", default="30MB")
    parser.add_argument("--chunk", default="1MB")
    parser.add_argument("--probe", default="3MB")
    parser.add_argument("--cc", default=None)
    parser.add_argument("--timeout", default="300s")
    args = parser.parse_args(argv)
    try:
        sources = tuple(s.strip() for s in args.sources.split(","))
        if len(sources) != 2 or not all(sources):
            raise SpecError("sources", f"{args.sources!r}: two addresses, comma-separated")
        config = MultipathConfig(
            mode="single" if args.mode == "h3-migrate" else args.mode,
            host=args.host,
            port=args.port,
            sources=sources,  # type: ignore[arg-type]
            size_bytes=units.parse_size_bytes("size", args.size),
            chunk_bytes=units.parse_size_bytes("chunk", args.chunk),
            probe_bytes=units.parse_size_bytes("probe", args.probe),
            cc=args.cc,
            timeout_s=units.parse_duration_s("timeout", args.timeout),
        )
    except SpecError as err:
        print(f"multipath: error: {err}", file=sys.stderr)
        return 2

    # uvloop: asyncio's own sock_connect resolves with the socket's protocol, and
    # getaddrinfo refuses IPPROTO_MPTCP (EAI_SOCKTYPE)
    def started(t: float) -> None:
        print(json.dumps({"started_s": t}), flush=True)

    if args.mode == "h3-migrate":
        migrated = uvloop.run(run_quic_migration(config, started))
        print(json.dumps(migrated.to_dict()), flush=True)
        return 0 if migrated.error is None else 1
    result = uvloop.run(run_multipath(config, started))
    print(json.dumps(result.to_dict()), flush=True)
    return 0 if result.error is None else 1


# --- failover by QUIC connection migration (RFC 9000 section 9) ---------------------------

MIGRATION_WATCH_S = 0.005
"""How often the migrating client looks at its QUIC sender state."""
MIGRATION_PTO_COUNT = 2
"""Consecutive probe timeouts (RFC 9002 section 6.2) before the path is taken for dead: one
PTO happens on a live but loaded path (a run here migrated 2.6 s before any outage on its
first), a second in a row means nothing came back for about three PTO periods."""


@dataclass
class MigrationResult:
    """An HTTP/3 upload from the first path's address that moves to the second address
    when the first path stops answering (a probe timeout): what happened when."""

    size_bytes: int
    start_s: float
    end_s: float | None = None
    detected_s: float | None = None
    """The probe timeouts (PTO) that make the client take the path for dead."""
    migrated_s: float | None = None
    """The connection's packets leave from the second address (new connection ID)."""
    resumed_s: float | None = None
    """The first acknowledgement after the migration (PTO count back to 0)."""
    error: str | None = None

    @property
    def total_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["total_s"] = self.total_s
        data["bytes_sent"] = self.size_bytes
        data["paths"] = []
        data["fractions"] = None
        return data


async def run_quic_migration(
    config: MultipathConfig, on_start: Callable[[float], None] | None = None
) -> MigrationResult:
    """Upload over HTTP/3 from ``sources[0]``; after :data:`MIGRATION_PTO_COUNT` probe
    timeouts in a row move the connection to a
    socket bound to ``sources[1]`` (aioquic: a new UDP endpoint for the same protocol and
    ``change_connection_id``); the server validates the new path and follows."""

    client_config = _client_config(config, config.sources[0], protocol="h3")
    config.applied.write(
        "upload",
        {"multipath": "h3-migrate", "size": config.size_bytes, "timeout": config.timeout_s},
    )
    client = await _opened(config, await h3client.open_connection(client_config), 0)
    protocol = client.protocol
    body = bytes(payload(config.size_bytes))
    spec = RequestSpec(
        workload="sink",
        method="POST",
        path="/sink",
        body=body,
        expect_upload_sha256=hashlib.sha256(body).hexdigest(),
    )
    record = RequestRecord(
        request_id=0, protocol="h3", connection="new", workload="sink", warmup=False
    )
    result = MigrationResult(config.size_bytes, time.monotonic())
    if on_start is not None:
        on_start(result.start_s)
    task = asyncio.create_task(client.request(spec, record, config.timeout_s))
    loop = asyncio.get_running_loop()
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=MIGRATION_WATCH_S)
            pto = quic_counters(protocol)["pto_count"] or 0
            now = time.monotonic()
            if result.migrated_s is None and pto >= MIGRATION_PTO_COUNT:
                result.detected_s = now
                sock = make_udp_socket(config.sources[1], 0, client_config.udp_buffer_bytes)
                await loop.create_datagram_endpoint(lambda: protocol, sock=sock)
                if getattr(protocol, "gso_socket", None) is not None:
                    protocol.gso_socket = sock  # type: ignore[attr-defined]
                protocol.change_connection_id()  # aioquic's: new ID, then transmit
                result.migrated_s = time.monotonic()
            elif result.migrated_s is not None and result.resumed_s is None and pto == 0:
                result.resumed_s = now
        await task
        result.end_s = record.response_last_byte
        result.error = record.error
    except (ConnectionError, OSError, TimeoutError) as err:
        result.error = f"{type(err).__name__}: {err}"[:300]
    finally:
        with contextlib.suppress(OSError, TimeoutError):  # the result is already in hand
            await client.close()
    return result


# --- the harness's client of a dual topology (``testbed client`` with workload upload) ----


def transfer_record(result: MultipathResult | MigrationResult, mode: str) -> TransferRecord:
    """What ``testbed client`` writes for one upload over two paths."""
    if isinstance(result, MigrationResult):
        return TransferRecord(
            mode=mode, size_bytes=result.size_bytes, start_s=result.start_s,
            end_s=result.end_s, bytes_sent=result.size_bytes, detected_s=result.detected_s,
            migrated_s=result.migrated_s, resumed_s=result.resumed_s,
            sha256_ok=result.error is None and result.end_s is not None, error=result.error,
        )  # fmt: skip
    return TransferRecord(
        mode=mode, size_bytes=result.size_bytes, start_s=result.start_s, end_s=result.end_s,
        bytes_sent=result.bytes_sent, bytes_per_path=[p.bytes_sent for p in result.paths],
        fractions=result.fractions, measured_rates_bps=result.measured_rates_bps,
        sha256_ok=result.error is None and result.end_s is not None, error=result.error,
    )  # fmt: skip


def upload_config(
    settings: Any,
    host: str,
    port: int,
    sources: tuple[str, str],
    applied: AppliedLog = NO_APPLIED_LOG,
) -> MultipathConfig:
    """The upload a run's settings ask for (settings.multipath, settings.size, settings.cc,
    and the other knobs of each connection)."""
    return MultipathConfig(
        mode=settings.multipath,
        host=host,
        port=port,
        sources=sources,
        size_bytes=settings.size_bytes or workloads.IMAGE_SIZE_BYTES,
        chunk_bytes=settings.chunk_bytes or DEFAULT_CHUNK_BYTES,
        cc=settings.cc,
        timeout_s=settings.timeout_s,
        settings=settings,
        applied=applied,
    )


def run_transfer(
    settings: Any,
    host: str,
    port: int,
    sources: tuple[str, str],
    started: Callable[[float], None],
    applied: AppliedLog = NO_APPLIED_LOG,
) -> TransferRecord:
    """One upload over two paths as ``settings`` ask: HTTP/2 by ``settings.multipath``, or
    HTTP/3 from the first path migrating to the second (``protocol = h3``)."""

    config = upload_config(settings, host, port, sources, applied)
    run, label = TRANSFERS[settings.protocol]
    return transfer_record(uvloop.run(run(config, started)), label or config.mode)


TRANSFERS: dict[str, tuple[Callable[..., Any], str | None]] = {
    "h2": (run_multipath, None),
    "h3": (run_quic_migration, "h3-migrate"),
}
"""How each protocol that crosses two paths (tbcore.kinds.ProtocolKind.upload_mode) carries
the upload, and the mode its record names (None: the ``multipath`` arm)."""


if __name__ == "__main__":
    raise SystemExit(main())
