"""ngtcp2's JSON-SEQ qlog: a real pair captured once (a TTS download with ngtcp2 bbr at both
ends, 200 ms, 333 Mbit/s, 14 % loss on the download; tests/fixtures/ngtcp2-tts-loss), and
the clock the testbed writes into it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from harness.collect import acks
from proto import qlogseq
from tbcore.errors import SpecError

FIXTURE = Path(__file__).parent / "fixtures" / "ngtcp2-tts-loss"
RS = qlogseq.RECORD_SEPARATOR


def fixture_text(end: str) -> str:
    return gzip.decompress((FIXTURE / f"{end}.sqlog.gz").read_bytes()).decode()


def test_the_captured_files_are_json_seq_0_3_of_one_connection_from_both_ends() -> None:
    client = qlogseq.parse_qlog_seq(fixture_text("client"))
    server = qlogseq.parse_qlog_seq(fixture_text("server"))
    assert (client.vantage, server.vantage) == ("client", "server")
    # both ends name the connection by the client's original destination connection ID
    assert client.group_id == server.group_id and len(client.group_id or "") == 36
    assert client.anchored and server.anchored
    names = {e["name"] for e in server.events}
    assert {"transport:packet_sent", "transport:packet_received"} <= names
    assert {"recovery:metrics_updated", "recovery:packet_lost"} <= names
    # whole milliseconds since the connection began, never going back
    times = [e["time"] for e in client.events]
    assert all(isinstance(t, int) for t in times) and times == sorted(times)


def test_the_server_began_one_way_delay_after_the_client() -> None:
    # each file's reference time is its own end's connection start (the file's creation):
    # the server's begins when the client's first Initial arrives, 100 ms later
    client = qlogseq.parse_qlog_seq(fixture_text("client"))
    server = qlogseq.parse_qlog_seq(fixture_text("server"))
    gap_ms = server.reference_time_ms - client.reference_time_ms
    assert 100.0 <= gap_ms <= 103.0


def test_reference_time_is_written_into_the_header_only() -> None:
    text = RS + '{"qlog_format":"JSON-SEQ","qlog_version":"0.3","trace":{"vantage_point":'
    text += '{"type":"client"},"common_fields":{"time_format":"relative","reference_time":0}}}\n'
    text += RS + '{"time":3,"name":"transport:packet_sent","data":{}}\n'
    assert not qlogseq.parse_qlog_seq(text).anchored
    anchored = qlogseq.with_reference_time(text, 1234.5)
    seq = qlogseq.parse_qlog_seq(anchored)
    assert seq.reference_time_ms == 1234.5 and seq.events == [
        {"time": 3, "name": "transport:packet_sent", "data": {}}
    ]
    assert anchored.endswith(text.split("\n", 1)[1])


def test_reference_time_is_the_middle_of_the_first_millisecond() -> None:
    # start 10 s monotonic, realtime 1000 s ahead: 1,010,000 ms plus half a tick
    assert qlogseq.reference_time_ms(10.0, 1000.0) == pytest.approx(1_010_000.5)
    assert qlogseq.event_time_s(10.0, 7) == pytest.approx(10.0075)


def test_an_unanchored_file_is_refused_where_times_are_needed() -> None:
    seq = qlogseq.QlogSeq(vantage="server", group_id=None, reference_time_ms=0.0)
    with pytest.raises(SpecError, match="reference_time"):
        qlogseq.aioquic_trace(seq)


def test_not_json_seq_or_another_version_is_one_line() -> None:
    with pytest.raises(SpecError, match="JSON-SEQ"):
        qlogseq.parse_qlog_seq(RS + json.dumps({"qlog_format": "JSON", "qlog_version": "0.3"}))
    with pytest.raises(SpecError, match="empty"):
        qlogseq.parse_qlog_seq("")
    with pytest.raises(SpecError, match="record 1"):
        qlogseq.parse_qlog_seq(fixture_text("client").replace('"time":', "time", 1) + RS + "{}")


def test_a_last_record_cut_short_is_dropped() -> None:
    text = fixture_text("client")
    whole = qlogseq.parse_qlog_seq(text)
    cut = qlogseq.parse_qlog_seq(text + RS + '{"time":99,"name":"transport:pac')
    assert cut.events == whole.events


def test_the_trace_reads_like_aioquics_and_gives_acks(tmp_path: Path) -> None:
    (tmp_path / "a.sqlog").write_text(fixture_text("server"))
    traces = acks.read_qlog_traces(tmp_path)
    assert len(traces) == 1 and traces[0]["vantage_point"]["type"] == "server"
    metrics = [e for e in traces[0]["events"] if e["name"] == "recovery:metrics_updated"]
    assert any("cwnd" in e["data"] for e in metrics)
    assert not any("congestion_window" in e["data"] for e in metrics)
    seq = qlogseq.parse_qlog_seq(fixture_text("server"))
    offset_s = 1000.0
    result = acks.quic_acks(traces, clock_offset_s=offset_s, vantage="server")
    assert result.connections == 1 and result.lost_packets > 0 and result.rows
    # on the realtime clock less the offset: from the connection's start to its last event
    start_s = seq.reference_time_ms / 1e3 - offset_s
    end_s = start_s + seq.events[-1]["time"] / 1e3
    assert all(start_s <= r.time_s <= end_s + 1e-3 for r in result.rows)
    assert acks.qlog_min_rtt_s(traces) == pytest.approx(0.2)
    inflight = acks.quic_inflight(traces, clock_offset_s=offset_s, vantage="server")
    assert max(s.inflight_bytes for s in inflight) > 0 and inflight[0].cwnd_bytes is not None
