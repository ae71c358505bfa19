"""What each workload sends, and how responses are checked (no I/O)."""

from __future__ import annotations

import json

from clients.workload import ResponseCollector, request_spec
from tbcore import workloads


def test_tts_ok_and_short_and_corrupt() -> None:
    spec = request_spec("tts")
    audio = workloads.workload_bytes("audio")
    good = ResponseCollector(spec)
    good.on_headers([(b":status", b"200")], 1.0)
    good.on_data(audio[:1000], 1.1)
    good.on_data(audio[1000:], 1.2)
    assert good.verdict() == (True, None)
    assert good.first_byte_at == 1.0 and good.last_byte_at == 1.2
    short = ResponseCollector(spec)
    short.on_headers([(b":status", b"200")], 1.0)
    short.on_data(audio[:-1], 1.1)
    assert short.verdict() == (False, "received 354639 of 354640 bytes")
    corrupt = ResponseCollector(spec)
    corrupt.on_headers([(b":status", b"200")], 1.0)
    corrupt.on_data(bytes([audio[0] ^ 1]) + audio[1:], 1.1)
    assert corrupt.verdict() == (False, "response SHA-256 mismatch")


def test_asr_checks_the_echoed_upload() -> None:
    spec = request_spec("asr")
    answer = {"upload_sha256": workloads.workload_sha256("audio"), "upload_length": 354_640}
    good = ResponseCollector(spec)
    good.on_headers([(":status", "200")], 0.0)
    good.on_data(json.dumps(answer).encode(), 0.1)
    assert good.verdict() == (True, None)
    bad = ResponseCollector(spec)
    bad.on_headers([(":status", "200")], 0.0)
    bad.on_data(json.dumps({**answer, "upload_length": 5}).encode(), 0.1)
    ok, error = bad.verdict()
    assert not ok and "server received upload" in (error or "")


def test_status_other_than_200_is_an_error() -> None:
    collector = ResponseCollector(request_spec("tts"))
    collector.on_headers([(":status", "503")], 0.0)
    _ok, error = collector.verdict()
    assert error is not None and error.startswith("HTTP status 503")


def test_stream_chunk_arrival_times() -> None:
    spec = request_spec("stream", chunks=3)
    collector = ResponseCollector(spec)
    collector.on_headers([(":status", "200")], 0.0)
    data = b"".join(workloads.stream_chunk(i) for i in range(3))
    collector.on_data(data[:500], 0.01)  # half a chunk: no arrival yet
    collector.on_data(data[500:2000], 0.02)  # completes chunks 0 and 1
    collector.on_data(data[2000:], 0.04)
    assert collector.chunk_times == [0.02, 0.02, 0.04]
    assert collector.verdict() == (True, None)


def test_upload_specs() -> None:
    spec = request_spec("retouch")
    assert spec.method == "POST" and len(spec.body) == 30_000_000
    assert ("content-length", "30000000") in spec.headers("h:1")
    assert request_spec("stream", 7).path == "/stream?chunks=7"
