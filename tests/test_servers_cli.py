"""`testbed serve` and `testbed workload` as commands."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from servers.events import read_events
from servers.process import LISTEN_LINE, ServerProcess
from tbcore import workloads


def test_serve_prints_one_line_per_listener_and_stops_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "ev.jsonl"
    server = ServerProcess(["--log", str(log)]).start()
    assert len(server.lines) == 2
    assert all(LISTEN_LINE.match(line) for line in server.lines)
    assert set(server.ports) == {"h2", "h3"}
    assert server.stop() == 0
    assert {e["proto"] for e in read_events(log) if e["event"] == "listening"} == {"h2", "h3"}


def test_serve_on_sigint_exits_cleanly() -> None:
    server = ServerProcess(["--no-h3"]).start()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(10) == 0
    server.stop()


def test_serve_bad_flag_is_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "serve", "--max-datagram-size", "99999"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("testbed serve: error: max-datagram-size:")


def test_workload_path_and_sha256() -> None:
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "harness.cli", "workload", *a],
        capture_output=True,
        text=True,
        timeout=60,
    )
    path = run("path", "audio")
    assert path.returncode == 0
    assert Path(path.stdout.strip()).stat().st_size == 354_640
    sha = run("sha256", "audio")
    assert sha.stdout.strip() == workloads.workload_sha256("audio")
    assert run("sha256", "video").returncode == 2


def test_serve_writes_sender_samples_on_stop(tmp_path: Path) -> None:
    import asyncio
    import csv
    import time

    from clients.api import run_requests
    from clients.config import ClientConfig

    samples = tmp_path / "server-samples.csv"
    server = ServerProcess(["--samples", str(samples), "--processing-audio", "1ms"]).start()
    try:
        for protocol in ("h3", "h2"):
            config = ClientConfig.of(protocol=protocol, port=server.ports[protocol], workload="tts")
            (record,) = asyncio.run(run_requests(config))
            assert record.ok
        time.sleep(1.0)
    finally:
        assert server.stop() == 0
    with samples.open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["proto"] for row in rows} == {"h2", "h3"}
    assert all(row["request_id"].count(":") == 2 for row in rows)
    assert any(int(row["snd_cwnd"]) > 0 for row in rows if row["proto"] == "h2")
    assert any(int(row["cwnd"]) > 0 for row in rows if row["proto"] == "h3")
    # sampling stops once the response is acknowledged (or its connection closes), not
    # when the server does
    h2_times = [float(row["t"]) for row in rows if row["proto"] == "h2"]
    assert record.response_last_byte is not None
    assert max(h2_times) < record.response_last_byte + 0.5
