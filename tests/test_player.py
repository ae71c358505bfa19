"""The player core on a fake clock, against docs/models.md section 3 (harness.bounds.playback)."""

import pytest

from clients.player import RULE_DROP, RULE_WAIT, START_FILLED, Play, Player, replay
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


def test_a_filled_start_waits_for_the_buffers_audio_not_a_time() -> None:
    """The chapter's F8 counts its 60 ms buffer as audio in hand: the same shortfall, started
    once chunks 0-2 (60 ms) are in (at 78.8 ms), plays 0-2 at 78.8/98.8/118.8 ms, 3 and 4
    make their slots, 5 (due at 178.8 ms) arrives at 197 ms: dry 100 ms after the start,
    20 ms later than the wait counted from the first arrival."""
    arrivals = [i * 0.0394 for i in range(12)]
    player = replay(arrivals, TAU, 0.060, RULE_WAIT, START_FILLED)
    assert player.chunks_to_fill == 3
    summary = player.summary()
    assert summary.start_delay_s == pytest.approx(2 * 0.0394)
    assert summary.first_stall_s == pytest.approx(0.100)
    assert replay(arrivals, TAU, 0.045, RULE_WAIT, START_FILLED).chunks_to_fill == 3
    on_time = replay([i * TAU for i in range(12)], TAU, 0.060, RULE_WAIT, START_FILLED)
    assert on_time.summary().first_stall_s is None


def test_a_filled_start_needs_every_chunk_from_the_first() -> None:
    player = Player(TAU, 0.040, 6, RULE_WAIT, START_FILLED)
    assert player.on_chunk(1, 0.010) == []  # chunk 1 alone fills nothing
    assert player.next_wake() is None
    events = player.on_chunk(0, 0.030)  # now 40 ms of audio are in hand: play at once
    assert [(e.KIND, e.index, e.t) for e in events] == [("play", 0, 0.030)]
    with pytest.raises(SpecError):
        Player(TAU, 0.040, 6, RULE_WAIT, "sometime")


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
