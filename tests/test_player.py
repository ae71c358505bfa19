"""The player core on a fake clock, against docs/models.md section 3 (harness.bounds.playback)."""

import pytest

from clients.player import RULE_DROP, RULE_WAIT, Play, Player, replay
from harness import bounds
from tbcore.errors import SpecError

TAU = 0.020


def test_on_time_chunks_never_stall() -> None:
    arrivals = [0.1 + i * TAU for i in range(10)]
    player = replay(arrivals, TAU, 0.040)
    summary = player.summary()
    assert summary.stall_count == 0
    assert summary.played == 10
    assert summary.start_delay_s == pytest.approx(0.040)


@pytest.mark.parametrize("buffer_s", [0.040, 0.045, 0.060, 0.120])
def test_wait_rule_matches_the_model(buffer_s: float) -> None:
    # chunk 3 is 70 ms late, chunk 7 is 30 ms late
    arrivals = [0.1 + i * TAU for i in range(12)]
    arrivals[3] += 0.070
    arrivals[7] += 0.030
    player = replay(arrivals, TAU, buffer_s, RULE_WAIT)
    model = bounds.playback(arrivals, TAU, buffer_s)
    summary = player.summary()
    assert summary.stall_count == model.stall_count
    assert summary.stall_s == pytest.approx(model.stall_s)
    plays = [e.t for e in player.events if isinstance(e, Play)]
    assert plays == pytest.approx(model.start_s)


def test_a_bigger_buffer_removes_a_jitter_stall() -> None:
    arrivals = [i * TAU for i in range(10)]
    arrivals[4] += 0.050
    assert replay(arrivals, TAU, 0.040).summary().stall_count == 1
    assert replay(arrivals, TAU, 0.060).summary().stall_count == 0


def test_the_first_stall_is_timed_from_the_start_of_playback() -> None:
    """A shortfall: 20 ms chunks arriving every 39.4 ms (16 kHz audio at 130 kbit/s) behind a
    60 ms wait: the player starts at 60 ms, chunks 1-3 make their slots, chunk 4 (due at
    140 ms) arrives at 157.6 ms: the buffer ran dry 80 ms after playback began."""
    arrivals = [i * 0.0394 for i in range(8)]
    summary = replay(arrivals, TAU, 0.060).summary()
    assert summary.first_stall_s == pytest.approx(0.080)
    assert replay([i * TAU for i in range(8)], TAU, 0.060).summary().first_stall_s is None


def test_drop_rule_conceals_and_drops_the_late_chunk() -> None:
    arrivals = [i * TAU for i in range(6)]
    arrivals[2] += 0.100  # far past its slot at 0.040 + 2 * TAU
    player = replay(arrivals, TAU, 0.040, RULE_DROP)
    kinds = [(e.KIND, e.index) for e in player.events]
    assert ("conceal", 2) in kinds
    assert ("drop", 2) in kinds
    summary = player.summary()
    assert summary.stall_count == 1
    assert summary.stall_s == pytest.approx(TAU)
    # the schedule never moved: chunk 5 plays at its original slot
    last = next(e for e in player.events if isinstance(e, Play) and e.index == 5)
    assert last.t == pytest.approx(0.040 + 5 * TAU)


def test_poll_reports_a_stall_while_it_lasts() -> None:
    player = Player(TAU, 0.040, 3)
    player.on_chunk(0, 0.0)
    assert player.next_wake() == pytest.approx(0.040)
    events = player.poll(0.061)
    assert [e.KIND for e in events] == ["play", "stall_start"]
    assert player.next_wake() is None
    events = player.on_chunk(1, 0.100)
    assert [e.KIND for e in events] == ["stall_end", "play"]
    assert events[0].stall_s == pytest.approx(0.040)


def test_bad_input_is_refused() -> None:
    with pytest.raises(SpecError, match="rule"):
        Player(TAU, 0.04, 3, "skip")
    with pytest.raises(SpecError, match="index"):
        Player(TAU, 0.04, 3).on_chunk(3, 0.0)
