"""servers.h3native: the native HTTP/3 server (tb-h3 --server) behind the same request edge
as aioquic's: the routes' answers and refusals, the event log, the send order, and
interoperation with the aioquic client (loopback, no root)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.api import run_requests_sync, single_request
from clients.config import ClientConfig
from clients.workload import RequestSpec
from servers.events import read_events
from servers.process import ServerProcess
from tbcore import workloads
from tbcore.settings import Settings

NATIVE = {"protocol": "h3", "quic_stack": "ngtcp2"}


def serve(tmp: Path, **knobs: object) -> ServerProcess:
    document = tmp / "settings.json"
    document.write_text(Settings(**{**NATIVE, **knobs}).to_json())
    args = ["--no-h2", "--h3-port", "0", "--settings", str(document)]
    args += ["--log", str(tmp / "server.jsonl"), "--max-body", "1mb"]
    return ServerProcess(args)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    tmp = tmp_path_factory.mktemp("native")
    with serve(tmp, processing_audio_s=0.02) as proc:
        yield proc.ports["h3"], tmp / "server.jsonl"


@pytest.mark.timeout(120)
def test_the_aioquic_client_gets_the_audio_with_its_processing(server: tuple[int, Path]) -> None:
    port, log = server
    settings = Settings(protocol="h3", workload="tts", requests=2)
    records = run_requests_sync(ClientConfig(port=port, settings=settings))
    assert all(r.ok and r.sha256_ok for r in records)
    events = read_events(log)
    names = [e["event"] for e in events]
    for name in ("connection_open", "request_first_byte", "request_last_byte",
                 "processing_start", "processing_end", "response_first_byte",
                 "response_last_byte", "connection_closed"):  # fmt: skip
        assert name in names
    start = next(e["t"] for e in events if e["event"] == "processing_start")
    end = next(e["t"] for e in events if e["event"] == "processing_end")
    assert end - start >= 0.020
    last = next(e for e in events if e["event"] == "response_last_byte")
    assert last["bytes"] == workloads.AUDIO_SIZE_BYTES


async def _one(port: int, spec: RequestSpec) -> object:
    config = ClientConfig(port=port, settings=Settings(**NATIVE, workload="tts"))
    return await single_request(config, spec)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/nothing", b"", 404),
        ("DELETE", "/tts", b"", 405),
        ("POST", "/sink", b"x" * 2_000_000, 413),
        ("POST", "/asr", b"not the audio", 422),
    ],
)
def test_the_routes_refusals(server: tuple[int, Path], method: str, path: str, body: bytes,
                             status: int) -> None:  # fmt: skip
    import asyncio

    record = asyncio.run(_one(server[0], RequestSpec("x", method, path, body=body)))
    assert record.status == status


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("policy", "first"), [("fifo", "result"), ("rfc9218", "tts")])
def test_the_send_policy_orders_the_streams(tmp_path: Path, policy: str, first: str) -> None:
    """fifo: each stream to its end in order (the 5 MB result first); rfc9218: the client's
    urgencies (audio u=0 before image u=4)."""
    with serve(tmp_path, send_policy=policy, processing_audio_s=0.0) as proc:
        settings = Settings(**NATIVE, workload="multi", streams="result,tts", send_policy=policy)
        records = run_requests_sync(ClientConfig(port=proc.ports["h3"], settings=settings))
    assert all(r.ok for r in records)
    done = sorted(records, key=lambda r: r.response_last_byte)
    assert done[0].stream_workload == first


@pytest.mark.timeout(120)
def test_the_engine_reports_are_the_responses_samples(tmp_path: Path) -> None:
    """server-samples.csv: ngtcp2's connection state as the engine pushes it (every 10 ms
    at most), from the response's start until its last byte is sent and acknowledged or the
    connection ends."""
    import csv

    document = tmp_path / "settings.json"
    document.write_text(Settings(**NATIVE, processing_audio_s=0.0).to_json())
    samples = tmp_path / "server-samples.csv"
    args = ["--no-h2", "--h3-port", "0", "--settings", str(document)]
    args += ["--samples", str(samples), "--sample-hz", "100"]
    with ServerProcess(args) as proc:
        settings = Settings(**NATIVE, workload="result")
        [record] = run_requests_sync(ClientConfig(port=proc.ports["h3"], settings=settings))
    assert record.ok
    with samples.open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {r["request_id"] for r in rows} == {"h3:1:0"}
    assert all(r["proto"] == "h3" for r in rows) and any(int(r["cwnd"] or 0) > 0 for r in rows)
    # one every 10 ms at most (--sample-hz 100), from the response on
    times = [float(r["t"]) for r in rows]
    assert all(b - a >= 0.009 for a, b in itertools.pairwise(times))
