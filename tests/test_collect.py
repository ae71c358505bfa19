"""Collection: a real run's files (tests/fixtures/) in, its typed row out, without root."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from harness.collect.row import (
    bound_for,
    collect_run,
    opened_connections,
    request_phases,
    server_phases,
)
from harness.spec import experiment as specmod
from harness.spec.paths import topology_of
from tbcore.records import RequestRecord, ServerEvent

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def request(**values: object) -> RequestRecord:
    head = dict(request_id=0, protocol="h2", connection="new", workload="asr", warmup=False)
    return RequestRecord(**{**head, **values})


RECORD = request(
    connect_start=10.0,
    handshake_done=10.4,
    request_first_byte=10.401,
    request_last_byte=10.9,
    response_first_byte=11.4,
    response_last_byte=11.45,
)


def test_request_phases_of_a_new_and_a_reused_connection() -> None:
    new = request_phases(RECORD, opened_connection=True)
    assert new is not None and new.new_connection
    assert new.handshake_s == pytest.approx(0.4)
    assert new.total_s == pytest.approx(1.45)
    assert new.ttfb_s == pytest.approx(1.4)
    assert new.rel["t_request_first_s"] == pytest.approx(0.401)
    reused = request_phases(RECORD, opened_connection=False)
    assert reused is not None and not reused.new_connection
    assert reused.total_s == pytest.approx(1.049)
    assert "t_handshake_s" not in reused.rel
    assert request_phases(replace(RECORD, response_last_byte=None), True) is None


def test_server_phases_from_its_events() -> None:
    events = [
        ServerEvent(t=5.0, event="request_first_byte"),  # another request, outside the window
        ServerEvent(t=10.100, event="request_first_byte"),
        ServerEvent(t=10.113, event="request_last_byte"),
        ServerEvent(t=10.1135, event="processing_start"),
        ServerEvent(t=10.1435, event="processing_end"),
        ServerEvent(t=10.148, event="response_first_byte"),
        ServerEvent(t=10.149, event="response_last_byte"),
    ]
    phases = server_phases(events, 10.0, 10.25)
    assert phases["processing_s"] == pytest.approx(0.030)
    assert phases["server_receive_s"] == pytest.approx(0.013)
    assert phases["server_turnaround_s"] == pytest.approx(0.0045)
    assert phases["server_send_s"] == pytest.approx(0.001)
    plain = [e for e in events if not e.event.startswith("processing")]
    assert server_phases(plain, 10.0, 10.25)["server_turnaround_s"] == pytest.approx(0.035)
    early = [*plain[:2], ServerEvent(t=10.112, event="response_first_byte"), plain[2]]
    assert "server_turnaround_s" not in server_phases(early, 10.0, 10.25)  # not an answer to it


def test_opened_connections_marks_the_first_request_of_each_connection() -> None:
    records = [request(conn_index=0), request(conn_index=0), request(conn_index=1)]
    assert opened_connections(records) == [True, False, True]


def test_bound_for_uses_the_level_settings() -> None:
    spec = specmod.load(EXPERIMENTS / "connection.toml")
    new = spec.level("h2-new").settings
    reused = spec.level("h2-reused").settings
    link = topology_of(new, "test")
    b_new = bound_for(new, link, 354_640, 0)
    b_reused = bound_for(reused, link, 354_640, 0)
    assert b_reused is not None and b_new is not None
    # docs/models.md section 1: 0.2 + 0.030 + 0.00852 = 0.2385 s for the warm connection
    assert b_reused.total_s == pytest.approx(0.2385, abs=1e-4)
    assert b_new.setup_s == pytest.approx(0.4)
    assert b_new.total_s > b_reused.total_s


def test_bound_for_caps_the_window_each_protocol_honours() -> None:
    base = specmod.Settings(link="rtt=100ms,rate=20mbit", workload="retouch")
    link = topology_of(base, "test")
    up, down = 30_000_000, 5_000_000

    def window(**changes: object) -> int | None:
        bound = bound_for(replace(base, **changes), link, up, down)
        assert bound is not None
        return bound.window_bytes

    assert window(window_clamp_bytes=64_000) == 64_000
    # HTTP/2 flow control caps bytes in flight too, whichever is tighter
    assert window(window_clamp_bytes=640_000, h2_window_bytes=65_535) == 65_535
    assert window(h2_window_bytes=65_535) == 65_535
    # TCP_WINDOW_CLAMP does not reach QUIC; only its own flow-control window does
    assert window(protocol="h3", window_clamp_bytes=64_000) is None
    assert window(protocol="h3", window_clamp_bytes=64_000, quic_max_data_bytes=100_000) == 100_000


def test_a_real_h2_run_collects_to_the_row_it_was_given(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "run-h2-new", run_dir)
    expected = json.loads((run_dir / "expected-row.json").read_text())
    collected = collect_run(run_dir)
    row = collected.row
    assert collected.error is None
    assert row.run_id == expected["run_id"] and row.protocol == "h2"
    for name in ("total_s", "handshake_s", "ttfb_s", "bound_s", "processing_s", "lateness_p99_s"):
        assert getattr(row, name) == pytest.approx(expected[name]), name
    for name in ("acks", "retransmits", "requests", "up_bytes", "realised_loss_up"):
        assert getattr(row, name) == expected[name], name
    # the live bug: the client's own RTT floor, a few percent above the configured 200 ms
    assert row.client_min_rtt_s == pytest.approx(0.2, rel=0.02) and row.client_min_rtt_s >= 0.2
    assert row.measured_rtt_s == pytest.approx(0.2, rel=0.02)
    assert (run_dir / "acks.csv").exists() and (run_dir / "events.jsonl").exists()
    assert collected.start_s is not None and collected.end_s - collected.start_s == row.total_s
    assert collected.loss_checks["down"][0] == 0.0
    # the client end's capture: its 5 data segments in the request got 3 pure ACKs back
    # (Linux's delayed ACKs, against section 7's one per two), each ACK waiting < 1 ms
    assert (row.data_packets, row.ack_only_packets) == (5, 3)
    assert row.acks_per_packet == pytest.approx(0.6) and row.model_acks_per_packet == 0.5
    assert row.model_wire_bytes_ack == round(5 * 0.5 * 156 / 3)
    assert row.ack_delay_p50_s is not None and row.ack_delay_p50_s < 0.001


def test_a_run_without_its_records_is_an_error_not_a_crash(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "run-h2-new", run_dir)
    (run_dir / "records.jsonl").unlink()
    collected = collect_run(run_dir, error=None)
    assert collected.error == "no measured request completed"
    assert collected.row.total_s is None and collected.row.requests == 0


def test_fec_columns_bound_and_requirement() -> None:
    from harness.collect.row import fec_columns, fec_required
    from tbcore.records import FecFigures

    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/fec.toml")
    settings = spec.level("tts-l14-fecad").settings
    link = topology_of(settings, "test").link_spec
    k, r = 251, 64
    record = RequestRecord(
        request_id=0, protocol="fec", connection="reused", workload="tts", warmup=False,
        fec=FecFigures(
            request={"transfer_bytes": 40, "source_symbols": 1, "repair_symbols": 5},
            response={"transfer_bytes": 354_800, "source_symbols": k, "repair_symbols": r,
                      "extra_rounds": 0, "decode_failures": 0, "loss_estimate": 0.14,
                      "loss_model": "binomial"},
            session={"rate_bps": 333e6},
        ),
    )  # fmt: skip
    row = fec_columns(settings, link, record, {"total_s": 0.26})
    assert row["fec_source_symbols"] == k and row["fec_repair_symbols"] == r
    assert row["fec_data_direction"] == "down" and row["bound_retransmission_s"] == 0
    serial = (1 + 5 + k + r) * 1416 * 8 / 333e6
    assert row["bound_s"] == pytest.approx(0.2 + 0.030 + serial)
    assert row["ratio"] == pytest.approx(0.26 / row["bound_s"])
    assert fec_required(k, 0.14, 0.999) == 64 and fec_required(k, None, 0.999) is None
