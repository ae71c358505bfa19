"""Debian's gtlsclient (ngtcp2 0.12.1's example client) as the interoperability peer of the
testbed's native HTTP/3 server (tests/test_servers_ngtcp2.py, tests/test_peers.py): it makes
the requests; its qlog becomes RequestRecords. Until issue 39 it was the ngtcp2 arm itself;
``quic_stack = "ngtcp2"`` now runs the testbed's own endpoints (clients/h3native.py).

The edge (:func:`run_requests`): one gtlsclient per request (warm-ups first, each a new
connection, as ``connection = "new"`` means for aioquic), in the client's namespace at the
priority it was started with; the response body to a file (``--download``), the qlog to the
run's qlog directory. The moment gtlsclient creates its qlog file is the connection's start
(proto.filewatch: it takes its start time in the same breath); that anchors the qlog's
relative whole-millisecond times on CLOCK_MONOTONIC (proto.qlogseq), and is written into
the file as its reference time so that harness.collect.acks reads it like aioquic's.

The core (:func:`request_record`, sans-I/O): from the client's qlog of one connection,

- ``connect_start``: the connection's start; ``handshake_done``: the client's Finished sent
  (proto.ngtcp2.client_handshake_done_ms);
- ``request_first_byte`` / ``request_last_byte``: the first packet carrying the request
  stream, the first that reached its final size;
- ``response_first_byte``: the response stream's offset 0 (its HEADERS frame) received;
  ``response_last_byte``: every byte of the response stream received (retransmissions
  included);
- ``quic``: the sender state logged up to the last response byte (RTTs in whole ms).

Each event time is the middle of the millisecond ngtcp2 logged it in (±0.5 ms).

What gtlsclient does not say with ``-q`` (its debug output triples its CPU): the HTTP
status. The body tells it: a body that is the workload byte for byte (length and SHA-256)
is gtlsserver's 200 (it serves a file only with 200, and only these files exist); any other
body is one of its error pages, whose title carries the status (``<title>404 Not Found``).
An upload is the workload file itself (tbcore.workloads checks it against a fresh
generation) sent with ``--data``; gtlsserver answers only after the request's end (no
``--early-response``) and nghttp3 refuses a body whose length differs from its
content-length, so a 200 with the expected answer means the server read exactly the body.
The server cannot echo its SHA-256 as the testbed's own server does.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clients.config import ClientConfig
from proto import ngtcp2, ngtcp2edge, qlogseq
from proto.filewatch import CreationWatch
from tbcore import kinds, quicstack, workloads
from tbcore.records import QuicRecovery, QuicSample, RequestRecord, write_csv, write_jsonl
from tbcore.routes import HttpRoute

CLIENT_MARGIN_S = 5.0
"""Beyond the run's timeout, how long a gtlsclient may live before it is killed (its own
handshake and idle timeouts are the run's timeout)."""
QLOG_CREATE_WAIT_S = 0.005
"""How often the edge looks at the child while it waits for the qlog file to appear."""
ERROR_PAGE_TITLE = re.compile(rb"<title>(\d{3})[ <]")
"""gtlsserver's error pages: ``<html><head><title>404 Not Found</title>...``."""
ERROR_PAGE_MAX_BYTES = 4096
"""An error page is small: only a body this short is read for its status."""
HASH_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class Body:
    """What came back, as the client's file holds it."""

    size_bytes: int
    sha256: str
    head: bytes
    """The first :data:`ERROR_PAGE_MAX_BYTES` (an error page is read for its status)."""


@dataclass(frozen=True)
class Attempt:
    """One gtlsclient: how it ended and what it left."""

    exit_code: int | None
    """None: killed after the run's timeout."""
    start_s: float | None
    """When its connection began (its qlog file's creation), CLOCK_MONOTONIC."""
    qlog: qlogseq.QlogSeq | None
    body: Body | None
    stderr: str


def expected_body(route: HttpRoute) -> tuple[int, str]:
    """The length and SHA-256 of the answer the route must get."""
    if route.download is None:
        return len(quicstack.NGTCP2_ACK_BODY), hashlib.sha256(quicstack.NGTCP2_ACK_BODY).hexdigest()
    return workloads.get_workload(route.download).size_bytes, workloads.workload_sha256(
        route.download
    )


def response_status(route: HttpRoute, body: Body | None) -> tuple[int | None, bool]:
    """(HTTP status, whether the body is the expected one): the module docstring's rule."""
    if body is None:
        return None, False
    size, sha = expected_body(route)
    if body.size_bytes == size and body.sha256 == sha:
        return 200, True
    found = ERROR_PAGE_TITLE.search(body.head) if body.size_bytes <= ERROR_PAGE_MAX_BYTES else None
    return (int(found.group(1)) if found else None), False


def _failure(attempt: Attempt, route: HttpRoute, status: int | None) -> str | None:
    if attempt.exit_code is None:
        return "gtlsclient timed out (killed after the run's timeout)"
    if attempt.exit_code != 0:
        return f"gtlsclient exited {attempt.exit_code}: {attempt.stderr}".strip()
    if attempt.qlog is None:
        return "gtlsclient wrote no qlog"
    if status != 200 or attempt.body is None:
        size, _ = expected_body(route)
        got = "no body" if attempt.body is None else f"{attempt.body.size_bytes} bytes"
        return f"status {status}: the answer is not the expected {size} bytes ({got})"
    return None


def request_record(
    attempt: Attempt,
    route: HttpRoute,
    settings: Any,
    *,
    request_id: int,
    warmup: bool,
) -> RequestRecord:
    """The RequestRecord of one gtlsclient (module docstring)."""
    status, body_ok = response_status(route, attempt.body)
    error = _failure(attempt, route, status)
    common: dict[str, Any] = {
        "request_id": request_id,
        "protocol": "h3",
        "connection": settings.connection,
        "workload": settings.workload,
        "warmup": warmup,
        "conn_index": request_id,
        "stream_id": ngtcp2.REQUEST_STREAM_ID,
        "up_bytes": workloads.get_workload(route.upload).size_bytes if route.upload else 0,
        "down_bytes": attempt.body.size_bytes if attempt.body else 0,
        "status": status,
        "sha256_ok": body_ok and attempt.exit_code == 0,
        "error": error,
    }
    if attempt.qlog is None or attempt.start_s is None:
        return RequestRecord(**common)
    return RequestRecord(**common, **qlog_times(attempt.qlog.events, attempt.start_s))


def qlog_times(events: list[dict[str, Any]], start_s: float) -> dict[str, Any]:
    """The record's times and sender state from the client's qlog events."""
    sent = ngtcp2.sent_flow(events, ngtcp2.REQUEST_STREAM_ID)
    received = ngtcp2.received_flow(events, ngtcp2.REQUEST_STREAM_ID)

    def at(ms: float | None) -> float | None:
        return None if ms is None else qlogseq.event_time_s(start_s, ms)

    state = ngtcp2.recovery_at(events, received.complete_ms)
    return {
        "connect_start": start_s,
        "handshake_done": at(ngtcp2.client_handshake_done_ms(events)),
        "request_first_byte": at(sent.first_ms),
        "request_last_byte": at(sent.complete_ms),
        "response_first_byte": at(received.first_ms),
        "response_last_byte": at(received.complete_ms),
        "resumed": False,
        "early_data_accepted": None,
        "quic": QuicRecovery(**state),
    }


def client_argv(
    settings: Any, route: HttpRoute, host: str, port: int, qlog_dir: Path, out: Path
) -> list[str]:
    """gtlsclient for one request of ``route`` (proto.ngtcp2.common_flags for the rest)."""
    timeout = ngtcp2.duration_flag(settings.timeout_s)
    argv = [ngtcp2.CLIENT_BINARY, *ngtcp2.common_flags(settings, str(qlog_dir))]
    argv += [
        f"--timeout={timeout}",
        f"--handshake-timeout={timeout}",
        "--exit-on-all-streams-close",
        f"--download={out}",
    ]
    if route.upload is not None:
        argv += [f"--http-method={route.method}", f"--data={workloads.workload_path(route.upload)}"]
    return [*argv, host, str(port), f"https://{host}:{port}{route.path}"]


# --- the edge ------------------------------------------------------------------------------


def _read_body(path: Path) -> Body | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    head = b""
    size = 0
    with path.open("rb") as handle:
        while block := handle.read(HASH_BLOCK_BYTES):
            if not head:
                head = block[:ERROR_PAGE_MAX_BYTES]
            digest.update(block)
            size += len(block)
    return Body(size_bytes=size, sha256=digest.hexdigest(), head=head)


def _wait(proc: subprocess.Popen, watch: CreationWatch, deadline: float) -> int | None:
    """Wait for the child, stamping its qlog file's creation on the way (None: killed)."""
    while not watch.created and time.monotonic() < deadline:
        if watch.wait(QLOG_CREATE_WAIT_S) or proc.poll() is not None:
            break
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    finally:
        watch.drain()


def run_one(config: ClientConfig, route: HttpRoute, qlog_dir: Path, work: Path) -> Attempt:
    """One gtlsclient, its qlog anchored and its body read."""
    out = Path(tempfile.mkdtemp(dir=work))
    argv = client_argv(config.settings, route, config.host, config.port, qlog_dir, out)
    stderr_path = out.parent / f"{out.name}.stderr"
    deadline = time.monotonic() + config.settings.timeout_s + CLIENT_MARGIN_S
    with CreationWatch(qlog_dir) as watch, stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=ngtcp2edge.keylog_env(config.keylog_path),
        )
        code = _wait(proc, watch, deadline)
    mine = [(t, n) for n, t in watch.created.items() if n.endswith(qlogseq.SEQ_SUFFIX)]
    start_s, name = min(mine) if mine else (None, None)
    seq = ngtcp2edge.anchor_qlog(qlog_dir / name, start_s) if name and start_s else None
    return Attempt(
        exit_code=code,
        start_s=start_s,
        qlog=seq,
        body=_read_body(out / route.file_name),
        stderr=ngtcp2edge.stderr_tail(stderr_path),
    )


def run_requests(config: ClientConfig) -> list[RequestRecord]:
    """The warm-ups then the measured requests, one gtlsclient each (module docstring);
    the records (and samples) written where the config says."""
    settings = config.settings
    route = kinds.ngtcp2_route(settings)
    if route.upload is not None:
        workloads.workload_bytes(route.upload)  # the file on disk checked, before it is sent
    records: list[RequestRecord] = []
    samples: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="tb-ngtcp2-client-") as tmp:
        work = Path(tmp)
        qlog_dir = config.qlog_dir or (work / "qlog")
        qlog_dir.mkdir(parents=True, exist_ok=True)
        buffers = (
            ngtcp2edge.namespace_udp_buffers(config.udp_buffer_bytes)
            if not set(ngtcp2edge.UDP_BUFFER_SYSCTLS) & set(settings.sysctls)
            else contextlib.nullcontext(False)
        )
        with buffers:
            for index in range(settings.warmup_requests + settings.requests):
                attempt = run_one(config, route, qlog_dir, work)
                record = request_record(
                    attempt,
                    route,
                    settings,
                    request_id=index,
                    warmup=index < settings.warmup_requests,
                )
                records.append(record)
                samples += _samples(attempt, index)
    if config.records_path is not None:
        write_jsonl(config.records_path, records)
    if config.samples_path is not None:
        write_csv(config.samples_path, QuicSample, samples)
    return records


def _samples(attempt: Attempt, index: int) -> list[Any]:
    """The client's sender state at each of its qlog's metrics updates (samples.csv)."""
    if attempt.qlog is None or attempt.start_s is None:
        return []
    return [
        QuicSample(t=qlogseq.event_time_s(attempt.start_s, t), request_id=str(index), **state)
        for t, state in ngtcp2.metric_samples(attempt.qlog.events)
    ]
