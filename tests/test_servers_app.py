"""The sans-I/O request handling shared by both servers."""

from __future__ import annotations

import itertools
import json

import pytest

from proto.http import RequestHead
from servers.app import AppConfig, Exchange, ResponsePlan
from tbcore import workloads

CONFIG = AppConfig(processing_audio_s=0.03, processing_image_s=0.3, max_body_bytes=1_000_000)


def exchange(method: str, path: str, length: int | None = None) -> Exchange:
    return Exchange(RequestHead(method, path, length), CONFIG)


def test_unknown_path_is_404() -> None:
    ex = exchange("GET", "/nope")
    assert ex.early is not None and ex.early.status == 404
    assert ex.finish().status == 404


def test_wrong_method_is_405_with_allow() -> None:
    ex = exchange("GET", "/asr")
    assert ex.early is not None and ex.early.status == 405
    assert ("allow", "POST") in ex.early.headers


def test_declared_body_over_limit_is_413_before_any_byte() -> None:
    ex = exchange("POST", "/asr", 2_000_000)
    assert ex.early is not None and ex.early.status == 413
    assert ex.early.stop_reading
    assert ex.feed(b"x" * 10) is None  # not read further
    assert ex.received_bytes == 0


def test_running_body_over_limit_is_413() -> None:
    ex = exchange("POST", "/asr")
    assert ex.feed(b"x" * 600_000) is None
    plan = ex.feed(b"x" * 600_000)
    assert plan is not None and plan.status == 413


def test_truncated_upload_is_400_and_flagged() -> None:
    ex = exchange("POST", "/asr", 1000)
    ex.feed(b"x" * 400)
    assert ex.truncated
    plan = ex.finish()
    assert plan.status == 400
    assert "truncated upload: 400 of 1000" in (plan.error or "")


def test_asr_checks_the_upload() -> None:
    audio = workloads.workload_bytes("audio")
    ex = exchange("POST", "/asr", len(audio))
    ex.feed(audio[:1000])
    ex.feed(audio[1000:])
    plan = ex.finish()
    assert plan.status == 200
    assert plan.processing_s == pytest.approx(0.03)
    answer = json.loads(plan.body)
    assert answer["upload_sha256"] == workloads.workload_sha256("audio")
    assert answer["upload_length"] == len(audio)


def test_asr_with_wrong_bytes_is_422() -> None:
    ex = exchange("POST", "/asr", 10)
    ex.feed(b"0123456789")
    plan = ex.finish()
    assert plan.status == 422
    assert json.loads(plan.body)["upload_ok"] is False


def test_tts_returns_the_audio() -> None:
    plan = exchange("GET", "/tts").finish()
    assert plan.status == 200
    assert plan.body == workloads.workload_bytes("audio")
    assert dict(plan.headers)["x-sha256"] == workloads.workload_sha256("audio")


def test_retouch_wrong_upload_is_422_and_right_one_gets_5mb() -> None:
    ex = exchange("POST", "/retouch", 3)
    ex.feed(b"abc")
    assert ex.finish().status == 422
    big = AppConfig(max_body_bytes=64_000_000)
    image = workloads.workload_bytes("image")
    ex = Exchange(RequestHead("POST", "/retouch", len(image)), big)
    ex.feed(image)
    plan = ex.finish()
    assert plan.status == 200
    assert len(plan.body) == 5_000_000
    assert dict(plan.headers)["x-upload-sha256"] == workloads.workload_sha256("image")


def test_a_lossless_image_is_decoded_as_it_arrives_and_checked_pixel_for_pixel() -> None:
    encoded = workloads.workload_bytes("photo-deflate")
    ex = Exchange(RequestHead("POST", "/retouch-lossless", len(encoded)), AppConfig())
    for start in range(0, len(encoded), 1 << 20):  # as the body arrives, a megabyte at a time
        ex.feed(encoded[start : start + (1 << 20)])
    plan = ex.finish()
    assert plan.status == 200 and len(plan.body) == 5_000_000
    headers = dict(plan.headers)
    assert headers["x-upload-sha256"] == workloads.workload_sha256("photo-deflate")
    assert 0.0 <= float(headers["x-decode-s"]) < 10.0
    # the same length, one byte changed: the DEFLATE stream or the pixels no longer match
    bad = bytearray(encoded)
    bad[len(bad) // 2] ^= 0x55
    ex = Exchange(RequestHead("POST", "/retouch-lossless", len(bad)), AppConfig())
    ex.feed(bytes(bad))
    assert ex.finish().status == 422


@pytest.mark.parametrize(
    ("query", "status"), [("chunks=3", 200), ("chunks=0", 400), ("chunks=x", 400)]
)
def test_stream_chunk_count(query: str, status: int) -> None:
    plan = exchange("GET", f"/stream?{query}").finish()
    assert plan.status == status
    if status == 200:
        assert plan.stream_chunks == 3
        assert plan.body_length == 3 * 960
        assert dict(plan.headers)["x-sha256"] == workloads.stream_sha256(3)


@pytest.mark.parametrize(
    ("query", "status", "late"),
    [
        ("chunks=5&late=3&late_ms=45", 200, (2, 0.045)),
        ("chunks=5", 200, (None, 0.0)),
        ("chunks=5&late=6&late_ms=45", 400, None),
        ("chunks=5&late=0&late_ms=45", 400, None),
        ("chunks=5&late=3&late_ms=-1", 400, None),
        ("chunks=5&late=3&late_ms=x", 400, None),
        ("chunks=5&late=3&late_ms=10001", 400, None),
    ],
)
def test_a_late_chunk_is_asked_for_by_number(
    query: str, status: int, late: tuple[int | None, float] | None
) -> None:
    plan = exchange("GET", f"/stream?{query}").finish()
    assert plan.status == status
    if late is not None:
        assert (plan.late_chunk_index, plan.late_chunk_s) == late


@pytest.mark.parametrize(
    ("query", "status", "size"),
    [("chunks=3&rate=16000", 200, 640), ("chunks=3&rate=24000", 200, 960),
     ("chunks=3&rate=22050", 400, None), ("chunks=3&rate=x", 400, None)],
)  # fmt: skip
def test_a_stream_at_16_khz_has_640_byte_chunks(query: str, status: int, size: int | None) -> None:
    plan = exchange("GET", f"/stream?{query}").finish()
    assert plan.status == status
    if size is not None:
        assert plan.stream_chunk_bytes == size and plan.body_length == 3 * size
        assert dict(plan.headers)["x-sha256"] == workloads.stream_sha256(3, size)
        assert f"rate={size * 25}" in dict(plan.headers)["content-type"]


def test_request_head_parsing() -> None:
    head = RequestHead.from_headers(
        [(b":method", b"POST"), (b":path", b"/asr"), (b"content-length", b"12")]
    )
    assert head == RequestHead("POST", "/asr", 12)
    with pytest.raises(ValueError):
        RequestHead.from_headers([(b":method", b"GET")])
    with pytest.raises(ValueError):
        RequestHead.from_headers(
            [(b":method", b"GET"), (b":path", b"/"), (b"content-length", b"-1")]
        )


def _agent_exchange(op: str, body: bytes) -> ResponsePlan:
    head = RequestHead("POST", f"/agent?op={op}&round=0", len(body))
    ex = Exchange(head, AppConfig(agent_model_s=0.5))
    ex.feed(body)
    return ex.finish()


def test_agent_round_executes_once_per_operation_id() -> None:
    import json as _json

    first = _agent_exchange("test-replay-a0-r0", b"screen" * 100)
    assert first.status == 200 and first.processing_s == pytest.approx(0.5, abs=0.05)
    assert ("x-agent-executed", "1") in first.headers
    second = _agent_exchange("test-replay-a0-r0", b"screen" * 100)
    assert ("x-agent-executed", "0") in second.headers
    assert second.body == first.body and second.processing_s <= first.processing_s
    assert _json.loads(first.body)["round"] == 0
    bad = _agent_exchange("", b"x")
    assert bad.status == 400


@pytest.mark.parametrize(
    ("query", "weights"),
    [("tiles=3", ()), ("tiles=3&result=1,2,2", (1, 2, 2)), ("tiles=2&result=3,1", (3, 1))],
)
def test_a_tiled_result_is_cut_in_the_asked_proportions(query: str, weights: tuple) -> None:
    ex = exchange("POST", f"/retouch?{query}")
    assert ex.early is None and ex.tile_results == weights
    plan = ex.tiled_plan()
    parts = [plan.part_bounds(i) for i in range(plan.tiles)]
    assert parts[0][0] == 0 and parts[-1][1] == len(plan.body)  # every byte, once
    assert all(a[1] == b[0] for a, b in itertools.pairwise(parts))
    if weights == (1, 2, 2):
        assert [e - s for s, e in parts] == [1_000_000, 2_000_000, 2_000_000]


@pytest.mark.parametrize("result", ["1,2", "1,2,2,2", "0,1,1", "a,b,c", "1,,2", "1,2,101"])
def test_a_bad_result_split_is_400_in_one_line(result: str) -> None:
    ex = exchange("POST", f"/retouch?tiles=3&result={result}")
    assert ex.early is not None and ex.early.status == 400
    assert ex.early.error is not None and ex.early.error.startswith("result: ")
    assert "\n" not in ex.early.error
