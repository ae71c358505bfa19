"""Playback analysis: measured chunks through the player next to docs/models.md sections 2-3."""

import pytest

from harness.analysis import playback
from harness.analysis.playback import ChunkTimes

TAU = 0.020


def test_prediction_follows_the_pipeline() -> None:
    fast = playback.predicted_arrivals(
        5, down_rate_bps=100e6, down_delay_s=0.1, up_delay_s=0.1, overhead_bytes=83
    )
    assert fast[0] == pytest.approx(0.1 + 0.012 + 1043 * 8 / 100e6 + 0.1)
    assert fast[4] - fast[3] == pytest.approx(TAU)
    # below 384 kbit/s the sender falls behind: arrivals spread wider than tau
    slow = playback.predicted_arrivals(
        5, down_rate_bps=300e3, down_delay_s=0.1, up_delay_s=0.1, overhead_bytes=83
    )
    assert slow[4] - slow[3] == pytest.approx(1043 * 8 / 300e3)


def test_a_bigger_buffer_removes_a_jitter_stall_but_not_a_shortfall() -> None:
    jitter = [ChunkTimes(i * TAU, 0.2 + i * TAU, 0.2 + i * TAU) for i in range(20)]
    late = jitter[6]
    jitter[6] = ChunkTimes(late.produced_s, late.arrived_s + 0.05, late.read_s + 0.05)
    rows = playback.playback_rows(jitter, [c.read_s for c in jitter], {"level": "jitter"})
    by_buffer = {r["initial_buffer_s"]: r for r in rows}
    assert by_buffer[0.040]["stall_count"] == 1
    assert by_buffer[0.040]["stall_cause"] == "not_arrived:1"
    assert by_buffer[0.120]["stall_count"] == 0
    assert by_buffer[0.040]["predicted_stall_s"] == pytest.approx(by_buffer[0.040]["stall_s"])

    gap = 0.0256  # 300 kbit/s: every chunk later than the last by more than tau
    short = [ChunkTimes(i * TAU, 0.2 + i * gap, 0.2 + i * gap) for i in range(40)]
    rows = playback.playback_rows(short, [c.read_s for c in short], {}, receive_bps=300e3)
    assert all(r["stall_count"] > 0 for r in rows)
    assert all(r["predicted_depletion_s"] is not None for r in rows)


def test_stall_causes_name_where_the_chunk_was() -> None:
    chunks = [ChunkTimes(i * TAU, 0.1 + i * TAU, 0.1 + i * TAU) for i in range(6)]
    chunks[2] = ChunkTimes(0.5, 0.6, 0.6)  # produced late
    chunks[4] = ChunkTimes(0.08, 0.16, 0.9)  # arrived early, read late
    causes = playback.stall_causes(chunks, TAU, 0.040)
    assert causes == ["not_produced", "not_read"]


def test_jitter_enters_the_prediction_as_one_worst_case_stall() -> None:
    chunks = [ChunkTimes(i * TAU, 0.2 + i * TAU, 0.2 + i * TAU) for i in range(10)]
    rows = playback.playback_rows(chunks, [c.read_s for c in chunks], {}, jitter_s=0.030)
    by_buffer = {r["initial_buffer_s"]: r["predicted_stall_s"] for r in rows}
    assert by_buffer[0.040] == pytest.approx(0.020)
    assert by_buffer[0.060] == 0.0 and by_buffer[0.120] == 0.0
