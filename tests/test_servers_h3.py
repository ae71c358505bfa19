"""The HTTP/3 server as a subprocess: every workload with checksums, 0-RTT, qlog and key
log, and bad input (404/405/413, resets, garbage datagrams, HTTP/3 garbage)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import pytest
from support_servers import assert_workload_verified

from clients.api import run_requests, single_request
from clients.config import ClientConfig
from clients.workload import RequestSpec
from servers.events import read_events
from servers.process import ServerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("h3")
    args = [
        "--no-h2",
        "--log",
        str(root / "events.jsonl"),
        "--max-body",
        "40mb",
        "--qlog-dir",
        str(root / "qlog"),
        "--keylog",
        str(root / "keys.log"),
        "--max-datagram-size",
        "1452",
    ]
    with ServerProcess(args) as proc:
        proc.root = root  # type: ignore[attr-defined]
        proc.log = root / "events.jsonl"  # type: ignore[attr-defined]
        yield proc


def config(port: int, **kw: object) -> ClientConfig:
    return ClientConfig.of(protocol="h3", port=port, timeout_s=30.0, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("workload", ["asr", "tts", "retouch", "stream"])
async def test_every_workload_verified(server: ServerProcess, workload: str) -> None:
    (record,) = await run_requests(
        config(
            server.ports["h3"],
            workload=workload,
            requests=1,
            chunks=5,
            max_datagram_size_bytes=1452,
        )
    )
    assert_workload_verified(record, workload, chunks=5)
    assert record.tcp_connected is None
    assert (
        record.connect_start
        <= record.handshake_done
        <= record.request_first_byte
        <= record.response_first_byte
        <= record.response_last_byte
    )
    assert record.request_last_byte is not None
    assert record.quic is not None and record.quic.packets_sent > 0


async def test_reused_connection_with_warmups(server: ServerProcess) -> None:
    records = await run_requests(
        config(
            server.ports["h3"], workload="asr", requests=3, warmup_requests=2, connection="reused"
        )
    )
    assert [r.warmup for r in records] == [True, True, False, False, False]
    assert len({r.conn_index for r in records}) == 1
    assert all(r.ok for r in records)


async def test_unpaced_burst_times_are_ordered(server: ServerProcess) -> None:
    records = await run_requests(
        config(
            server.ports["h3"],
            workload="asr",
            requests=2,
            warmup_requests=1,
            connection="reused",
            quic_pacing="off",
            max_datagram_size_bytes=1452,
        )
    )
    for record in records:
        assert record.ok
        assert record.request_first_byte <= record.request_last_byte <= record.response_first_byte


async def test_0rtt_early_data_accepted(server: ServerProcess) -> None:
    records = await run_requests(
        config(server.ports["h3"], workload="tts", requests=2, connection="0rtt")
    )
    assert all(r.ok for r in records)
    for record in records:
        assert record.resumed and record.early_data_accepted
        # the request left before the handshake ended: that is 0-RTT
        assert record.request_first_byte < record.handshake_done


async def test_qlog_and_keylog_written(server: ServerProcess, tmp_path: Path) -> None:
    qlog = tmp_path / "qlog"
    keys = tmp_path / "keys.log"
    (record,) = await run_requests(
        config(server.ports["h3"], workload="asr", qlog_dir=qlog, keylog_path=keys)
    )
    assert record.ok
    traces = list(qlog.glob("*.qlog"))
    assert len(traces) == 1
    data = json.loads(traces[0].read_text())
    assert data["qlog_version"] == "0.3"
    events = data["traces"][0]["events"]
    assert any(e["name"] == "transport:packet_sent" for e in events)
    labels = {line.split()[0] for line in keys.read_text().splitlines()}
    assert "CLIENT_TRAFFIC_SECRET_0" in labels and "SERVER_HANDSHAKE_TRAFFIC_SECRET" in labels


async def test_404_405_413(server: ServerProcess) -> None:
    port = server.ports["h3"]
    assert (await single_request(config(port), RequestSpec("x", "GET", "/nope"))).status == 404
    assert (await single_request(config(port), RequestSpec("x", "PATCH", "/tts"))).status == 405
    body = b"\0" * 45_000_000
    record = await single_request(config(port), RequestSpec("x", "POST", "/retouch", body=body))
    assert record.status == 413
    assert record.up_bytes < len(body)


async def test_stream_reset_mid_upload_is_truncated(server: ServerProcess) -> None:
    from clients import h3client

    conn = await h3client.open_connection(config(server.ports["h3"]))
    proto = conn.protocol
    quic = proto._quic
    stream_id = quic.get_next_available_stream_id()
    proto.h3.send_headers(
        stream_id,
        [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", b"x"),
            (b":path", b"/retouch"),
            (b"content-length", b"30000000"),
        ],
    )
    proto.h3.send_data(stream_id, b"z" * 10_000, end_stream=False)
    proto.transmit()
    await asyncio.sleep(0.2)
    quic.reset_stream(stream_id, 0x10C)  # H3_REQUEST_CANCELLED
    proto.transmit()
    await asyncio.sleep(0.3)
    await conn.close()
    events = [e for e in read_events(server.log) if e["t"] >= conn.connect_start]  # type: ignore[attr-defined]
    truncated = [e for e in events if e["event"] == "upload_truncated"]
    assert truncated and truncated[0]["reason"] == "stream reset by peer"
    assert truncated[0]["received_bytes"] == 10_000


async def test_garbage_datagrams_are_dropped_and_service_goes_on(server: ServerProcess) -> None:
    from clients import h3client
    from clients.workload import request_spec
    from tbcore.records import RequestRecord

    port = server.ports["h3"]
    conn = await h3client.open_connection(config(port))
    server_cid = conn.protocol._quic._peer_cid.cid
    spray = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for size in (1, 20, 500, 1200, 1452):
            spray.sendto(os.urandom(size), ("127.0.0.1", port))
        # a short-header packet naming a live connection's ID, with junk for a payload:
        # it fails authentication and is discarded (RFC 9000 section 12.2)
        for _ in range(5):
            spray.sendto(bytes([0x40]) + server_cid + os.urandom(200), ("127.0.0.1", port))
    finally:
        spray.close()
    record = RequestRecord(0, "h3", "reused", "tts", False)
    await conn.request(request_spec("tts"), record, 10.0)
    await conn.close()
    assert record.ok
    (other,) = await run_requests(config(port, workload="asr"))
    assert other.ok
    errors = [e for e in read_events(server.log) if e["event"] == "error"]  # type: ignore[attr-defined]
    assert any("dropped datagram" in e["reason"] for e in errors)


async def test_http3_garbage_closes_only_that_connection(server: ServerProcess) -> None:
    from clients import h3client

    port = server.ports["h3"]
    bad = await h3client.open_connection(config(port))
    quic = bad.protocol._quic
    stream_id = quic.get_next_available_stream_id()
    # a DATA frame before HEADERS on a request stream: H3_FRAME_UNEXPECTED (RFC 9114 4.1)
    quic.send_stream_data(stream_id, b"\x00\x05hello", end_stream=True)
    bad.protocol.transmit()
    await asyncio.wait_for(bad.protocol.wait_closed(), 5.0)
    assert bad.protocol.terminated_reason is not None
    bad.transport.close()
    (good,) = await run_requests(config(port, workload="asr"))
    assert good.ok
