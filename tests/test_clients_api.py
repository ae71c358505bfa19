"""The client library and `testbed client` against our server: connection modes, resumption,
records and samples on disk, errors recorded and reflected in the exit status."""

from __future__ import annotations

import csv
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support_servers import client_config

from clients.api import run_requests
from clients.config import ClientConfig
from servers.process import ServerProcess
from tbcore.records import RequestRecord, read_jsonl

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    with ServerProcess(["--processing-audio", "5ms"]) as proc:
        yield proc


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_new_connection_per_request(server: ServerProcess, protocol: str) -> None:
    records = await run_requests(
        client_config(server, protocol, requests=3, warmup_requests=1, connection="new")
    )
    assert [r.conn_index for r in records] == [0, 1, 2, 3]
    assert [r.warmup for r in records] == [True, False, False, False]
    assert all(r.ok for r in records)
    # every request paid its own handshake, after its own connect
    assert all(r.connect_start < r.handshake_done < r.request_first_byte for r in records)


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_reused_connection(server: ServerProcess, protocol: str) -> None:
    records = await run_requests(
        client_config(server, protocol, requests=2, warmup_requests=2, connection="reused")
    )
    assert {r.conn_index for r in records} == {0}
    assert all(r.ok for r in records)
    assert len({r.handshake_done for r in records}) == 1
    assert records[-1].request_first_byte > records[0].response_last_byte


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_resumption(server: ServerProcess, protocol: str) -> None:
    records = await run_requests(
        client_config(server, protocol, requests=3, connection="new", resume=True)
    )
    assert [r.resumed for r in records] == [False, True, True]
    assert all(r.ok for r in records)


async def test_h2_without_resume_never_resumes(server: ServerProcess) -> None:
    records = await run_requests(client_config(server, "h2", requests=2, connection="new"))
    assert [r.resumed for r in records] == [False, False]


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_records_and_samples_written(
    server: ServerProcess, protocol: str, tmp_path: Path
) -> None:
    records_path = tmp_path / "records.jsonl"
    samples_path = tmp_path / "samples.csv"
    records = await run_requests(
        client_config(
            server,
            protocol,
            workload="tts",
            requests=2,
            connection="reused",
            records_path=records_path,
            samples_path=samples_path,
        )
    )
    assert read_jsonl(records_path, RequestRecord) == records
    with samples_path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows, "no samples"
    assert {row["request_id"] for row in rows} <= {"0", "1"}
    column = "snd_cwnd" if protocol == "h2" else "cwnd"
    assert all(int(row[column]) > 0 for row in rows)
    times = [float(row["t"]) for row in rows]
    assert times == sorted(times)


async def test_failed_requests_are_recorded_not_raised(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once closed
    records_path = tmp_path / "r.jsonl"
    records = await run_requests(
        ClientConfig.of(
            protocol="h2", port=port, requests=2, timeout_s=2.0, records_path=records_path
        )
    )
    assert len(records) == 2
    assert all(r.error and "ConnectionRefused" in r.error for r in records)
    assert len(read_jsonl(records_path, RequestRecord)) == 2


def test_cli_exit_status_and_records(server: ServerProcess, tmp_path: Path) -> None:
    records_path = tmp_path / "ok.jsonl"
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "client",
            "--protocol",
            "h3",
            "--port",
            str(server.ports["h3"]),
            "--workload",
            "asr",
            "--requests",
            "1",
            "--records",
            str(records_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert read_jsonl(records_path, RequestRecord)[0].ok
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bad_path = tmp_path / "bad.jsonl"
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "client",
            "--protocol",
            "h2",
            "--port",
            str(port),
            "--records",
            str(bad_path),
            "--timeout",
            "2s",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1
    assert "1 of 1 measured requests failed" in bad.stderr
    assert read_jsonl(bad_path, RequestRecord)[0].error is not None


def test_cli_refuses_0rtt_over_h2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "client", "--protocol", "h2", "--connection", "0rtt"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "testbed client: error: connection: 0rtt needs h3"
    )


@pytest.mark.parametrize("protocol", ["h2", "h3"])
@pytest.mark.parametrize(
    ("workload", "size"),
    [
        ("features-upload", 8_192_000),
        ("screenshot-upload", 800_000),
        ("text-prefix", 66_207),
        ("text-kept", 10_193),
        ("migrate", 67_108_864),
    ],
)
async def test_the_fixed_uploads_go_up_whole(
    server: ServerProcess, protocol: str, workload: str, size: int
) -> None:
    """§12.2.2's two uploads, §12.5.2's text prefixes and §12.2.3's migrated state: every
    byte arrives and its SHA-256 is the one sent."""
    (record,) = await run_requests(client_config(server, protocol, workload=workload))
    assert record.ok, record.error
    assert record.up_bytes == size and record.sha256_ok


async def test_h2_in_cleartext_has_no_tls_handshake(tmp_path: Path) -> None:
    """tls = false (RFC 9113 section 3.3, prior knowledge): the server speaks HTTP/2 from the
    connection preface on, both ends record tls false, no record of the client's shows a TLS
    round trip (handshake done when TCP's is), and a TLS client is not served there."""
    from tbcore.records import AppliedRecord
    from tbcore.settings import Settings

    document = tmp_path / "settings.json"
    document.write_text(Settings(tls=False, processing_audio_s=0.005).to_json())
    applied = tmp_path / "server-applied.jsonl"
    args = ["--no-h3", "--settings", str(document), "--applied", str(applied)]
    with ServerProcess(args) as proc:
        config = client_config(proc, "h2", requests=2, connection="new", tls=False)
        records = await run_requests(config)
        assert all(r.ok and r.sha256_ok for r in records)
        assert all(r.handshake_done - r.tcp_connected < 0.005 for r in records)
        assert not any(r.resumed for r in records)
        tls_client = await run_requests(client_config(proc, "h2", requests=1))
        assert tls_client[0].error is not None
    seen = [r.values.get("tls") for r in read_jsonl(applied, AppliedRecord) if r.layer == "h2"]
    assert seen and not any(seen)


async def test_a_late_chunk_arrives_late_and_nothing_overtakes_it(server: ServerProcess) -> None:
    """late_chunk 3, 60 ms: chunk 3 arrives at least 60 ms after its slot (20 ms after chunk
    2), chunk 4 not before it, and the stream is whole and in order."""
    (record,) = await run_requests(
        client_config(server, "h2", workload="stream", chunks=5, late_chunk=3,
                      late_chunk_delay_s=0.06)
    )  # fmt: skip
    assert record.ok and record.sha256_ok, record.error
    times = record.chunk_times
    assert times[2] - times[1] >= 0.06 + 0.02 - 0.005
    assert times[3] >= times[2] and times[1] - times[0] < 0.05


async def test_a_16_khz_stream_has_640_byte_chunks(server: ServerProcess) -> None:
    """sample_rate 16000: 20 ms chunks of 640 bytes, every one timed, the whole checked."""
    (record,) = await run_requests(
        client_config(server, "h2", workload="stream", chunks=4, sample_rate_hz=16_000)
    )
    assert record.ok and record.sha256_ok, record.error
    assert record.down_bytes == 4 * 640 and len(record.chunk_times) == 4
