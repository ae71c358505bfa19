"""Per-stream, per-chunk and cancel rows from a run's records, events and transport view."""

import pytest

from harness.collect import streams
from harness.collect.streamview import StreamArrival


def _views() -> streams.RunViews:
    records = [
        {
            "request_id": 0,
            "stream_id": 1,
            "stream_workload": "result",
            "request_first_byte": 10.0,
            "response_body_first_byte": 10.1,
            "response_last_byte": 11.0,
            "down_bytes": 5_000_000,
            "sha256_ok": True,
            "error": None,
            "priority": "u=4",
        },
        {
            "request_id": 0,
            "stream_id": 3,
            "stream_workload": "stream",
            "request_first_byte": 10.001,
            "response_body_first_byte": 10.2,
            "response_last_byte": 11.1,
            "down_bytes": 1920,
            "sha256_ok": True,
            "error": None,
            "chunk_times": [10.2, 11.1],
        },
    ]
    events = [
        {"t": 10.05, "event": "chunk_produced", "stream": 3, "index": 0},
        {"t": 10.06, "event": "chunk_sent", "stream": 3, "index": 0},
        {"t": 10.07, "event": "chunk_produced", "stream": 3, "index": 1},
        {"t": 10.08, "event": "chunk_sent", "stream": 3, "index": 1},
    ]
    arrivals = {
        1: StreamArrival(1, 5_000_000, 10.9, []),
        3: StreamArrival(3, 1920, 10.5, [10.15, 10.5]),
    }
    return streams.RunViews(records, events, arrivals)


def test_stream_rows_carry_arrival_delivery_and_the_wait() -> None:
    rows = streams.stream_rows(_views(), {"run_id": "r1", "level": "fifo", "protocol": "h2"})
    image, audio = rows
    assert image["stream"].startswith("image") and audio["stream"].startswith("audio")
    assert image["last_byte_arrived_s"] == pytest.approx(0.9)
    assert image["delivered_s"] == pytest.approx(1.0)
    assert audio["hol_wait_s"] == pytest.approx(0.6)
    assert image["bytes"] == 5_000_000


def test_chunk_rows_and_the_deadline() -> None:
    rows = streams.chunk_rows(_views(), {"run_id": "r1"})
    assert [r["chunk"] for r in rows] == [0, 1]
    assert rows[0]["produced_s"] == pytest.approx(0.05)
    assert rows[0]["arrived_s"] == pytest.approx(0.15)
    assert rows[0]["on_time"] is True  # read at 0.2 s, due at 0.4 s
    assert rows[1]["on_time"] is False  # read at 1.1 s, due at 0.42 s


def test_cancel_rows_measure_from_the_clients_cancel() -> None:
    views = _views()
    views.records[1].update(cancelled_at=10.3, bytes_at_cancel=960)
    views.events.extend(
        [
            {"t": 10.35, "event": "stream_cancelled", "stream": 3},
            {"t": 10.351, "event": "chunk_production_stopped", "stream": 3, "next_index": 2},
            {"t": 10.352, "event": "response_stopped", "stream": 3, "bytes": 1920},
        ]
    )
    (row,) = streams.cancel_rows(views, {})
    assert row["server_learned_s"] == pytest.approx(0.05)
    assert row["bytes_sent_after_cancel"] == 960
    assert row["cancel_after_chunks"] == 1
