"""clients.h3native: the native HTTP/3 client (tb-h3 --client) making every workload's
requests against the native server, on loopback (no root: 127.0.0.1)."""

from __future__ import annotations

import asyncio
import csv
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import h3native
from clients.agent import run_agent_sync
from clients.api import run_requests_sync
from clients.config import ClientConfig
from proto import qlogseq
from servers.events import read_events
from servers.process import ServerProcess
from tbcore import workloads
from tbcore.settings import Settings

NATIVE = {"protocol": "h3", "quic_stack": "ngtcp2"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    tmp = tmp_path_factory.mktemp("native-server")
    document = tmp / "settings.json"
    document.write_text(Settings(**NATIVE, processing_audio_s=0.01, agent_model_s=0.01).to_json())
    log = tmp / "server.jsonl"
    args = ["--no-h2", "--h3-port", "0", "--settings", str(document), "--log", str(log)]
    args += ["--max-body", "40mb"]
    with ServerProcess(args) as proc:
        yield proc.ports["h3"], log


def run(port: int, tmp: Path | None = None, **knobs: object) -> list:
    settings = Settings(**{**NATIVE, **knobs})
    extra = {}
    if tmp is not None:
        extra = {"qlog_dir": tmp / "q", "keylog_path": tmp / "keys.log",
                 "samples_path": tmp / "samples.csv", "records_path": tmp / "r.jsonl"}  # fmt: skip
    return run_requests_sync(ClientConfig(port=port, settings=settings, **extra))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "knobs",
    [
        {"workload": "tts"},
        {"workload": "asr", "connection": "reused", "requests": 3, "warmup_requests": 1},
        {"workload": "retouch"},
        {"workload": "retouch-tiles3"},
        {"workload": "stream", "chunks": 10},
        {"workload": "image"},
        {"workload": "sink"},
        {"workload": "multi", "streams": "result,tts", "priority_signal": "update"},
    ],
    ids=lambda k: k["workload"],
)
def test_every_workload_is_carried_and_checked(server: tuple[int, Path], knobs: dict) -> None:
    records = run(server[0], **knobs)
    assert records and all(r.ok and r.sha256_ok and r.status == 200 for r in records), [
        r.error for r in records
    ]
    for record in records:
        assert record.connect_start <= record.request_first_byte <= record.response_first_byte
        assert record.response_first_byte <= record.response_last_byte
        assert record.request_last_byte is not None
    assert records[0].quic is not None  # the connection's state, on its first record


@pytest.mark.timeout(120)
def test_the_records_times_qlog_keys_and_samples(server: tuple[int, Path], tmp_path: Path) -> None:
    [record] = run(server[0], tmp_path, workload="tts")
    assert record.connect_start < record.handshake_done <= record.request_first_byte
    # the server waited its 10 ms before the answer's first byte
    assert record.response_first_byte - record.request_last_byte >= 0.010
    [path] = list((tmp_path / "q").glob("*.sqlog"))
    seq = qlogseq.parse_qlog_seq(path.read_text())
    assert seq.anchored and any(e.get("name") == "transport:packet_received" for e in seq.events)
    assert "CLIENT_HANDSHAKE_TRAFFIC_SECRET" in (tmp_path / "keys.log").read_text()
    with (tmp_path / "samples.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and any(r["cwnd"] and int(r["cwnd"]) > 0 for r in rows)
    assert record.quic.smoothed_rtt_us is not None and record.quic.packets_sent > 0


@pytest.mark.timeout(120)
def test_0rtt_sends_the_request_before_the_handshake_ends(server: tuple[int, Path]) -> None:
    records = run(server[0], workload="tts", connection="0rtt", requests=2, warmup_requests=1)
    measured = [r for r in records if not r.warmup]
    assert len(measured) == 2 and all(r.ok for r in measured)
    for record in measured:
        assert record.resumed and record.early_data_accepted
        assert record.request_first_byte < record.handshake_done


@pytest.mark.timeout(120)
def test_a_cancelled_stream_stops_at_the_chunks_read(server: tuple[int, Path]) -> None:
    port, log = server
    [record] = run(port, workload="stream", chunks=50, cancel_after_chunks=5)
    assert record.cancelled_at is not None and record.sha256_ok
    assert record.bytes_at_cancel == 5 * workloads.STREAM_CHUNK_BYTES
    time.sleep(0.3)
    assert any(e["event"] == "stream_cancelled" for e in read_events(log))


@pytest.mark.timeout(120)
def test_agent_rounds_on_one_connection(server: tuple[int, Path]) -> None:
    settings = Settings(**NATIVE, workload="agent", agent_rounds=3, connection="reused")
    rounds = run_agent_sync(ClientConfig(port=server[0], settings=settings))
    assert len(rounds) == 3 and all(r.error is None and r.executed for r in rounds)


@pytest.mark.timeout(120)
def test_a_connection_break_closes_the_connection_in_place_of_the_reply(
    server: tuple[int, Path],
) -> None:
    """outage_mode break: the engine closes the connection (CONNECTION_CLOSE) once the round
    is executed; the client loses that round at once and retries it from the store."""
    settings = Settings(
        **NATIVE, workload="agent", agent_rounds=2, connection="reused", outage_after_round=1,
        outage_s=0.2,
    )  # fmt: skip
    rounds = run_agent_sync(ClientConfig(port=server[0], settings=settings))
    assert [(r.round, r.error is None) for r in rounds] == [(0, True), (1, False), (1, True)]
    lost, retry = rounds[1], rounds[2]
    assert lost.broken and lost.detected_s - lost.start_s < 5.0
    assert retry.new_connection and retry.executed is False and retry.op_id == lost.op_id
    assert any(e["event"] == "connection_break" for e in read_events(server[1]))


@pytest.mark.timeout(60)
def test_the_engine_goes_with_its_edge() -> None:
    """A client killed before it could stop its engine leaves none behind: the engine reads
    the end of its control socket and exits."""

    async def main() -> int:
        stack = h3native.NativeStack(ClientConfig(port=9, settings=Settings(**NATIVE)))
        await stack._start()
        proc = stack.engine.proc
        stack.engine.transport.abort()
        return await asyncio.get_running_loop().run_in_executor(None, proc.wait, 5)

    assert asyncio.run(main()) == 0


@pytest.mark.timeout(60)
def test_a_server_that_is_not_there_fails_the_request_in_one_line() -> None:
    [record] = run(9, workload="tts", timeout_s=1.0)
    assert not record.ok and record.error and "\n" not in record.error


@pytest.mark.timeout(120)
def test_the_native_client_fetches_from_the_aioquic_server(tmp_path: Path) -> None:
    """Interoperability: the two stacks of the testbed against each other."""
    document = tmp_path / "settings.json"
    document.write_text(Settings(protocol="h3", processing_audio_s=0.0).to_json())
    args = ["--no-h2", "--h3-port", "0", "--settings", str(document)]
    with ServerProcess(args) as proc:
        records = run(proc.ports["h3"], workload="tts", requests=2, processing_audio_s=0.0)
    assert len(records) == 2 and all(r.ok and r.sha256_ok for r in records)


@pytest.mark.timeout(120)
def test_the_qlog_gives_each_streams_arrival(server: tuple[int, Path], tmp_path: Path) -> None:
    """The client's qlog carries the response frames (http:frame_parsed, written by the
    engine) beside ngtcp2's packets: the receiver's stream view (streams.csv) reads it."""
    from harness.collect import acks, streamview

    records = run(server[0], tmp_path, workload="multi", streams="result,tts")
    assert all(r.ok for r in records)
    traces = acks.read_qlog_traces(tmp_path / "q")
    arrivals = streamview.h3_stream_arrivals(traces, workloads.STREAM_CHUNK_BYTES)
    sizes = {a.body_bytes for a in arrivals.values() if a.last_byte_arrived_s is not None}
    assert sizes == {workloads.RETOUCHED_SIZE_BYTES, workloads.AUDIO_SIZE_BYTES}


@pytest.mark.timeout(120)
def test_resume_offers_the_last_ticket_on_each_new_connection(server: tuple[int, Path]) -> None:
    records = run(server[0], workload="tts", resume=True, requests=3)
    assert all(r.ok for r in records)
    assert [r.resumed for r in records] == [False, True, True]
    assert not any(r.early_data_accepted for r in records)  # resumption alone: no 0-RTT
