"""harness.collect.feedback: the receiver's ACKs as they were, from its qlog or the capture
at its end (synthetic traces whose answers are known, and a real ngtcp2 run's qlog)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from harness.collect import acks as ackmod
from harness.collect.acks import TcpSegment
from harness.collect.feedback import quic_feedback, tcp_feedback
from proto import qlogseq

FIXTURE = Path(__file__).parent / "fixtures" / "ngtcp2-tts-loss"


def _packet(name: str, time_ms: float, number: int, frames: list[dict], length: int) -> dict:
    return {
        "time": time_ms,
        "name": name,
        "data": {
            "header": {"packet_type": "1RTT", "packet_number": number},
            "frames": frames,
            "raw": {"length": length},
        },
    }


def _ack(top: int) -> dict:
    return {"frame_type": "ack", "acked_ranges": [[0, top]], "ack_delay": 0.0}


def _receiver_trace(every: int, hold_ms: float) -> dict:
    """A receiver that got 10 data packets 1 ms apart and acknowledged every ``every``-th
    one ``hold_ms`` after it arrived (ACK-only packets of 40 bytes)."""
    events = []
    for n in range(10):
        events.append(_packet("transport:packet_received", n, n, [{"frame_type": "stream"}], 1200))
        if (n + 1) % every == 0:
            events.append(_packet("transport:packet_sent", n + hold_ms, n, [_ack(n)], 40))
    return {"vantage_point": {"type": "client"}, "events": events}


def test_quic_one_ack_per_packet_and_per_two_with_their_delays() -> None:
    each = quic_feedback([_receiver_trace(1, 0.0)], vantage="client").columns()
    assert each["acks_per_packet"] == 1.0
    assert each["ack_delay_p99_s"] == pytest.approx(0.0)
    two = quic_feedback([_receiver_trace(2, 0.5)], vantage="client").columns()
    assert two["acks_per_packet"] == 0.5
    assert two["ack_delay_p50_s"] == pytest.approx(0.0005)
    assert two["wire_bytes_data"] == 10 * (1200 + 28)
    assert two["wire_bytes_ack"] == 5 * (40 + 28)


def test_quic_counts_only_the_window_and_the_receivers_side() -> None:
    trace = _receiver_trace(1, 0.0)
    inside = quic_feedback([trace], vantage="client", window=(0.0035, 0.0065)).columns()
    assert inside["acks_per_packet"] == 1.0 and inside["wire_bytes_data"] == 3 * 1228
    assert quic_feedback([trace], vantage="server").columns()["acks_per_packet"] is None


def test_an_ack_riding_on_data_is_an_ack_but_not_ack_only_bytes() -> None:
    trace = _receiver_trace(1, 0.0)
    for event in trace["events"]:
        if event["name"] == "transport:packet_sent":
            event["data"]["frames"].append({"frame_type": "stream"})
    got = quic_feedback([trace], vantage="client")
    assert got.acks == 10 and got.ack_only_packets == 0 and got.wire_bytes_ack == 0


def _segment(t: float, src: str, dst: str, **kw: int) -> TcpSegment:
    base = {"sport": 443 if src == "s" else 5000, "dport": 5000 if src == "s" else 443}
    fields = {"seq": 0, "ack": 0, "flags": 0x10, "payload_bytes": 0, "window": 0}
    fields.update(kw)
    wire = 52 + fields["payload_bytes"]
    return TcpSegment(
        t, src, base["sport"], dst, base["dport"], sack_blocks=0, wire_bytes=wire, **fields
    )


def test_tcp_delayed_acks_from_the_receivers_capture() -> None:
    """Four 1,448-byte segments, an ACK after the second (2 ms later) and after the fourth."""
    segs = [_segment(0.0, "c", "s", flags=0x02)]
    for i in range(4):
        segs.append(_segment(0.010 + i * 0.001, "s", "c", seq=1 + i * 1448, payload_bytes=1448))
        if i % 2:
            segs.append(_segment(0.012 + i * 0.001, "c", "s", ack=1 + (i + 1) * 1448))
    got = tcp_feedback(segs, receiver="client").columns()
    assert got["acks_per_packet"] == 0.5
    assert got["ack_delay_p50_s"] == pytest.approx(0.002)
    assert got["wire_bytes_data"] == 4 * 1500 and got["wire_bytes_ack"] == 2 * 52


def test_tcp_without_the_handshake_says_nothing() -> None:
    segs = [_segment(0.0, "s", "c", seq=1, payload_bytes=100)]
    assert tcp_feedback(segs, receiver="client").columns()["acks_per_packet"] is None


def test_a_real_ngtcp2_download_acknowledges_some_packets_with_measured_delays(
    tmp_path: Path,
) -> None:
    text = gzip.decompress((FIXTURE / "client.sqlog.gz").read_bytes()).decode()
    (tmp_path / f"client{qlogseq.SEQ_SUFFIX}").write_text(text)
    traces = ackmod.read_qlog_traces(tmp_path)
    got = quic_feedback(traces, vantage="client")
    assert got.data_packets > 100
    assert 0.05 < got.acks / got.data_packets <= 1.0
    assert got.ack_delays_s and max(got.ack_delays_s) < 1.0
    assert got.wire_bytes_ack < got.wire_bytes_data


def test_tcp_an_ack_released_by_a_filled_hole_did_not_wait() -> None:
    """Segments 1 and 3 arrive, 2 is lost and comes again 200 ms later: the ACK right after
    it acknowledges all three and waited 0.1 ms, not the 200 ms since 3 arrived."""
    size = 1448
    segs = [_segment(0.0, "c", "s", flags=0x02)]
    segs.append(_segment(0.010, "s", "c", seq=1, payload_bytes=size))
    segs.append(_segment(0.0101, "c", "s", ack=1 + size))
    segs.append(_segment(0.012, "s", "c", seq=1 + 2 * size, payload_bytes=size))
    segs.append(_segment(0.0121, "c", "s", ack=1 + size))  # a duplicate ACK: no new delay
    segs.append(_segment(0.212, "s", "c", seq=1 + size, payload_bytes=size))
    segs.append(_segment(0.2121, "c", "s", ack=1 + 3 * size))
    got = tcp_feedback(segs, receiver="client")
    assert got.ack_delays_s == pytest.approx([0.0001, 0.0001])
