"""gtlsclient as the testbed's client: its command line, and its record made from the qlog
captured once (tests/fixtures/ngtcp2-tts-loss) and from what it downloaded."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import pytest

from clients import ngtcp2 as client
from proto import qlogseq
from tbcore import kinds, quicstack, workloads
from tbcore.settings import Settings

FIXTURE = Path(__file__).parent / "fixtures" / "ngtcp2-tts-loss"
START_S = 500.0
"""A connection start on the monotonic clock (the fixture's own is in its records)."""


def level(**changes: object) -> Settings:
    base = {"protocol": "h3", "quic_stack": "ngtcp2", "workload": "tts", "processing_audio_s": 0}
    return Settings(**{**base, **changes})


def fixture_qlog() -> qlogseq.QlogSeq:
    text = gzip.decompress((FIXTURE / "client.sqlog.gz").read_bytes()).decode()
    return qlogseq.parse_qlog_seq(text)


def body_of(data: bytes) -> client.Body:
    return client.Body(len(data), hashlib.sha256(data).hexdigest(), data[:4096])


AUDIO = client.Body(workloads.AUDIO_SIZE_BYTES, workloads.workload_sha256("audio"), b"\x00" * 16)


def attempt(**changes: object) -> client.Attempt:
    values = {"exit_code": 0, "start_s": START_S, "qlog": fixture_qlog(), "body": AUDIO}
    return client.Attempt(**{**values, "stderr": "", **changes})


def test_a_download_is_a_get_of_the_workloads_path_into_a_directory(tmp_path: Path) -> None:
    settings = level(cc="bbr", timeout_s=30.0)
    argv = client.client_argv(
        settings, kinds.ngtcp2_route(settings), "198.18.2.2", 20001, tmp_path / "q", tmp_path
    )
    assert argv[0] == "gtlsclient" and "--cc=bbr" in argv and f"--download={tmp_path}" in argv
    assert "--timeout=30000ms" in argv and "--handshake-timeout=30000ms" in argv
    assert "--exit-on-all-streams-close" in argv
    assert not any(a.startswith("--data") for a in argv)
    assert argv[-3:] == ["198.18.2.2", "20001", "https://198.18.2.2:20001/tts"]


def test_an_upload_posts_the_workload_file(tmp_path: Path) -> None:
    settings = level(workload="asr")
    argv = client.client_argv(
        settings, kinds.ngtcp2_route(settings), "127.0.0.1", 4433, tmp_path, tmp_path
    )
    assert "--http-method=POST" in argv
    assert f"--data={workloads.workload_path('audio')}" in argv
    assert argv[-1] == "https://127.0.0.1:4433/asr"


def test_the_expected_body_is_the_workload_or_the_short_answer() -> None:
    assert client.response_status(kinds.ngtcp2_routes()["tts"], AUDIO) == (200, True)
    ack = body_of(quicstack.NGTCP2_ACK_BODY)
    assert client.response_status(kinds.ngtcp2_routes()["asr"], ack) == (200, True)
    assert client.response_status(kinds.ngtcp2_routes()["tts"], ack) == (None, False)


def test_an_error_page_gives_its_status() -> None:
    page = b"<html><head><title>404 Not Found</title></head><body><h1>404</h1></body></html>"
    assert client.response_status(kinds.ngtcp2_routes()["tts"], body_of(page)) == (404, False)
    assert client.response_status(kinds.ngtcp2_routes()["tts"], None) == (None, False)


def test_the_record_carries_the_qlogs_times_on_the_clock() -> None:
    settings = level()
    record = client.request_record(
        attempt(), kinds.ngtcp2_route(settings), settings, request_id=0, warmup=False
    )
    assert record.ok and record.error is None and record.status == 200
    assert (record.protocol, record.connection, record.stream_id) == ("h3", "new", 0)
    assert record.connect_start == START_S and record.down_bytes == 354_640
    assert record.up_bytes == 0
    # 200 ms path: the handshake is one round trip, the request leaves with the Finished
    handshake = record.handshake_done - record.connect_start
    assert 0.200 <= handshake <= 0.210
    assert record.request_first_byte == record.request_last_byte  # a GET: one frame
    assert record.request_first_byte >= record.handshake_done
    # the response's first byte at least a round trip later, its last byte after it
    assert record.response_first_byte - record.request_first_byte >= 0.200
    assert record.response_last_byte > record.response_first_byte
    # every time is the middle of a logged millisecond
    for value in (record.handshake_done, record.response_last_byte):
        assert round((value - START_S) * 1e3 - 0.5, 6) % 1 == 0
    assert record.quic.min_rtt_us == 200_000 and record.quic.packets_sent > 0
    assert record.min_rtt_s == pytest.approx(0.2)


def test_the_fixture_record_is_what_the_run_wrote() -> None:
    # the run that captured the fixture wrote its record with this code's rules
    from tbcore.records import RequestRecord, read_jsonl

    written = read_jsonl(FIXTURE / "records.jsonl", RequestRecord)[0]
    settings = level(cc="bbr")
    again = client.request_record(
        attempt(start_s=written.connect_start),
        kinds.ngtcp2_route(settings),
        settings,
        request_id=0,
        warmup=False,
    )
    for name in ("handshake_done", "request_first_byte", "response_first_byte"):
        assert getattr(again, name) == pytest.approx(getattr(written, name), abs=1e-9)
    assert again.response_last_byte == pytest.approx(written.response_last_byte, abs=1e-9)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"exit_code": 1, "stderr": "handshake timeout"}, "gtlsclient exited 1: handshake timeout"),
        ({"exit_code": None}, "timed out"),
        ({"qlog": None, "start_s": None}, "no qlog"),
        ({"body": None}, "no body"),
        ({"body": client.Body(10, "0" * 64, b"x" * 10)}, "status None: .*354640 bytes .*10 bytes"),
    ],
)
def test_a_failed_request_says_why_in_one_line(changes: dict, reason: str) -> None:
    settings = level()
    record = client.request_record(
        attempt(**changes), kinds.ngtcp2_route(settings), settings, request_id=2, warmup=True
    )
    assert not record.ok and record.warmup and record.conn_index == 2
    assert record.error is not None and "\n" not in record.error
    assert re.search(reason, record.error), record.error


def test_an_upload_counts_its_body_up() -> None:
    settings = level(workload="asr")
    record = client.request_record(
        attempt(body=body_of(quicstack.NGTCP2_ACK_BODY)),
        kinds.ngtcp2_route(settings),
        settings,
        request_id=0,
        warmup=False,
    )
    assert record.up_bytes == 354_640 and record.down_bytes == len(quicstack.NGTCP2_ACK_BODY)
    assert record.sha256_ok and record.status == 200
