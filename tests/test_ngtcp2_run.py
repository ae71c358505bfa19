"""The native stack (``quic_stack = "ngtcp2"``: tb-h3 on ngtcp2 and nghttp3) at both ends of
a real run (root): one TTS download with the chapter's 30 ms of processing across an
emulated 200 ms, 333 Mbit/s link, through the harness like any other stack; the record's
times checked against the link's own capture, and the bytes against their SHA-256."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support_inputs import experiment_text

from harness.run.runner import run_experiment
from harness.spec import experiment as specmod
from netem.pcapng import read_capture
from tbcore import workloads
from tbcore.records import RequestRecord, read_jsonl

ONE_DOWNLOAD = experiment_text("ngtcp2-run")

CLIENT_ADDR = "198.18.1.2"


def first_udp_from(capture: Path, source: str, offset_s: float) -> float:
    """CLOCK_MONOTONIC of the first UDP datagram from ``source`` in a raw-IP capture (the
    run's pcapng)."""
    for ts_ns, packet, _ in read_capture(capture).packets:
        if packet[9] == 17 and ".".join(str(b) for b in packet[12:16]) == source:
            return ts_ns * 1e-9 - offset_s
    raise AssertionError(f"no UDP from {source} in {capture}")


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_tts_download_with_the_native_stack_at_both_ends(tmp_path: Path) -> None:
    result = run_experiment(specmod.loads(ONE_DOWNLOAD), output=tmp_path, link_name="ngtcp2r")
    frame = pd.read_csv(result.result.path / "runs.csv")
    assert set(frame["quic_stack"]) == {"ngtcp2"} and set(frame["protocol"]) == {"h3"}
    assert sorted(frame["cc"]) == ["bbr", "cubic"]
    for row in frame.itertuples():
        assert row.sha256_ok and row.down_bytes == workloads.AUDIO_SIZE_BYTES
        # a new connection: one round trip of set-up, not two (a Retry or a second flight
        # would take 0.4 s); the rest is the peers' crypto and scheduling on a shared host
        assert 0.200 <= row.handshake_s < 0.300
        assert row.total_s >= row.bound_s * 0.99 and row.ratio < 2.0
        assert row.acks > 0 and row.measured_rtt_s == pytest.approx(0.2)
    run_dir = next((result.result.path / "runs").glob("*-bbr-*"))
    record = read_jsonl(run_dir / "records.jsonl", RequestRecord)[0]
    assert record.ok and record.sha256_ok and record.status == 200
    offset_s = json.loads((run_dir / "run.json").read_text())["clock_offset_s"]
    # the client's first Initial crossed the capture just after the connection's start
    # (when the engine made it); the server's connection opened (its handshake done) when
    # the client's Finished arrived, a round trip after the Initial
    initial_s = first_udp_from(run_dir / "client.pcapng", CLIENT_ADDR, offset_s)
    # (a few ms of a busy host's scheduling are allowed; a wrong clock offset is seconds)
    assert 0.0 <= initial_s - record.connect_start <= 0.010
    arrived_s = first_udp_from(run_dir / "server.pcapng", CLIENT_ADDR, offset_s)
    opened = [
        json.loads(line)
        for line in (run_dir / "server.jsonl").read_text().splitlines()
        if '"connection_open"' in line
    ]
    assert len(opened) == 1 and 0.200 <= opened[0]["t"] - arrived_s <= 0.210
    # the last response byte: after the path's round trips and the processing
    assert record.response_last_byte - record.request_first_byte >= 0.430
    processing = [
        json.loads(line)["t"]
        for line in (run_dir / "server.jsonl").read_text().splitlines()
        if '"processing_' in line
    ]
    assert len(processing) == 2 and processing[1] - processing[0] >= 0.030
    assert (run_dir / "acks.csv").is_file() and (run_dir / "inflight.csv").is_file()
