"""What both ngtcp2 ends share: the settings as flags, and the stream and sender views of a
qlog (synthetic events for the rules, the captured pair for the facts)."""

from __future__ import annotations

import gzip
from pathlib import Path

from proto import ngtcp2, qlogseq
from tbcore.settings import Settings

FIXTURE = Path(__file__).parent / "fixtures" / "ngtcp2-tts-loss"


def events_of(end: str) -> list[dict]:
    text = gzip.decompress((FIXTURE / f"{end}.sqlog.gz").read_bytes()).decode()
    return qlogseq.parse_qlog_seq(text).events


def level(**changes: object) -> Settings:
    base = {"protocol": "h3", "quic_stack": "ngtcp2", "workload": "tts", "processing_audio_s": 0}
    return Settings(**{**base, **changes})


def packet(name: str, time: float, *frames: dict, kind: str = "1RTT") -> dict:
    return {
        "time": time,
        "name": f"transport:packet_{name}",
        "data": {"header": {"packet_type": kind}, "frames": list(frames)},
    }


def stream(offset: int, length: int, fin: bool = False, stream_id: int = 0) -> dict:
    frame = {"frame_type": "stream", "stream_id": stream_id, "offset": offset, "length": length}
    return {**frame, "fin": True} if fin else frame


def test_the_flags_carry_the_control_the_datagram_size_and_the_qlog() -> None:
    flags = ngtcp2.common_flags(level(cc="bbr"), "/q")
    assert flags[:5] == [
        "-q",
        "--cc=bbr",
        "--max-udp-payload-size=1200",
        "--no-pmtud",
        "--qlog-dir=/q",
    ]
    assert not any(f.startswith("--max-window") for f in flags)
    fixed = ngtcp2.common_flags(
        level(max_datagram_size_bytes=1452, quic_max_data_bytes=65536), "/q"
    )
    assert "--max-udp-payload-size=1452" in fixed and "--cc=cubic" in fixed
    for name in ("max-data", "max-stream-data-bidi-local", "max-stream-data-bidi-remote"):
        assert f"--{name}=65536" in fixed
    assert "--max-window=65536" in fixed and "--max-stream-window=65536" in fixed


def test_durations_are_whole_milliseconds() -> None:
    assert ngtcp2.duration_flag(60.0) == "60000ms"
    assert ngtcp2.duration_flag(0.0001) == "1ms"


def test_ranges_merge_and_cover_from_zero_only() -> None:
    ranges = ngtcp2.RangeSet()
    ranges.add(100, 200)
    assert not ranges.covers(200)
    ranges.add(0, 50)
    ranges.add(50, 100)
    assert ranges.ranges == [[0, 200]] and ranges.covers(200) and not ranges.covers(201)
    ranges.add(300, 300)  # empty: nothing
    assert ranges.ranges == [[0, 200]] and ngtcp2.RangeSet().covers(0)


def test_a_received_stream_is_complete_when_its_hole_is_filled() -> None:
    events = [
        packet("received", 10, stream(0, 100)),
        packet("received", 11, stream(200, 50, fin=True)),  # offset 100-200 lost
        packet("received", 12, stream(0, 10, stream_id=3)),  # another stream
        packet("received", 40, stream(100, 100)),  # the retransmission
    ]
    flow = ngtcp2.received_flow(events, 0)
    assert (flow.first_ms, flow.complete_ms, flow.final_size) == (10, 40, 250)


def test_a_received_stream_starts_at_its_offset_zero_not_its_first_frame() -> None:
    events = [
        packet("received", 5, stream(100, 20, fin=True)),
        packet("received", 9, stream(0, 100)),
    ]
    flow = ngtcp2.received_flow(events, 0)
    assert (flow.first_ms, flow.complete_ms) == (9, 9)


def test_a_sent_stream_ends_when_it_first_reaches_its_final_size() -> None:
    events = [
        packet("sent", 1, stream(0, 100)),
        packet("sent", 2, stream(100, 100, fin=True)),
        packet("sent", 30, stream(0, 100)),  # a retransmission does not move the end
    ]
    flow = ngtcp2.sent_flow(events, 0)
    assert (flow.first_ms, flow.complete_ms, flow.final_size) == (1, 2, 200)
    assert ngtcp2.sent_flow(events[:1], 0).complete_ms is None  # no fin yet


def test_the_handshake_is_done_when_the_client_sends_its_finished() -> None:
    events = [
        packet("sent", 0, {"frame_type": "crypto", "offset": 0, "length": 300}, kind="initial"),
        packet("sent", 201, {"frame_type": "ack", "acked_ranges": [[0]]}, kind="handshake"),
        packet("sent", 203, {"frame_type": "crypto", "offset": 0, "length": 36}, kind="handshake"),
    ]
    assert ngtcp2.client_handshake_done_ms(events) == 203
    assert ngtcp2.client_handshake_done_ms(events[:2]) is None


def test_the_sender_state_keeps_each_metric_last_logged_before_the_end() -> None:
    events = [
        packet("sent", 0),
        {"time": 1, "name": "recovery:metrics_updated", "data": {"congestion_window": 12000}},
        {"time": 2, "name": "recovery:packet_lost", "data": {}},
        {
            "time": 3,
            "name": "recovery:metrics_updated",
            "data": {"min_rtt": 200, "bytes_in_flight": 5},
        },
        {"time": 9, "name": "recovery:metrics_updated", "data": {"congestion_window": 1}},
    ]
    state = ngtcp2.recovery_at(events, 5)
    assert state["cwnd"] == 12000 and state["min_rtt_us"] == 200_000
    assert (state["packets_sent"], state["packets_lost"], state["bytes_in_flight"]) == (1, 1, 5)
    assert ngtcp2.recovery_at(events, None)["cwnd"] == 1
    samples = ngtcp2.metric_samples(events)
    assert [t for t, _ in samples] == [1, 3, 9] and samples[1][1]["cwnd"] == 12000


def test_the_captured_download_moved_every_byte_once_the_losses_were_repaired() -> None:
    client, server = events_of("client"), events_of("server")
    received = ngtcp2.received_flow(client, ngtcp2.REQUEST_STREAM_ID)
    sent = ngtcp2.sent_flow(server, ngtcp2.REQUEST_STREAM_ID)
    # the response stream: the audio and its HTTP/3 framing, the same length at both ends
    assert sent.final_size == received.final_size and received.final_size > 354_640
    assert received.first_ms is not None and received.complete_ms is not None
    assert received.complete_ms > received.first_ms
    lost = ngtcp2.recovery_at(server, None)["packets_lost"]
    assert lost and lost > 10  # 14 % of several hundred datagrams
    # the client's handshake: one round trip of the 200 ms path (and the Finished after it)
    assert 200 <= (ngtcp2.client_handshake_done_ms(client) or 0) <= 210
