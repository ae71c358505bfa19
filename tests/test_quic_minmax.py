"""The windowed min/max filter (proto.quic.minmax): Linux lib/win_minmax.c's behaviour."""

from __future__ import annotations

import random

import pytest

from proto.quic.minmax import WindowedFilter


def test_a_new_maximum_replaces_everything() -> None:
    f = WindowedFilter(10, time=0, value=5.0)
    assert f.running_max(1, 7.0) == 7.0
    assert {s.value for s in f.samples} == {7.0}


def test_the_maximum_holds_for_the_window_then_the_next_best_takes_over() -> None:
    f = WindowedFilter(10)
    f.running_max(0, 100.0)
    for t in range(1, 11):  # lower samples inside the window: the max stays
        assert f.running_max(t, 50.0 + t) == 100.0
    # at t = 11 the max (t = 0) is more than 10 old: a later, lower choice takes over
    assert f.running_max(11, 40.0) < 100.0
    assert f.running_max(11, 40.0) >= 40.0


def test_the_estimate_is_the_max_of_the_last_window_when_samples_are_dense() -> None:
    rng = random.Random(3)
    window = 10
    f = WindowedFilter(window)
    history: list[tuple[int, float]] = []
    for t in range(400):
        value = rng.uniform(0, 100)
        history.append((t, value))
        estimate = f.running_max(t, value)
        in_window = [v for (ts, v) in history if t - ts <= window]
        # never above the true windowed max, and never below what the last part of the
        # window holds (the 3-sample approximation of win_minmax)
        assert estimate <= max(in_window)
        recent = [v for (ts, v) in history if t - ts <= window // 2]
        assert estimate >= max(recent) or estimate == pytest.approx(max(recent))


def test_nothing_left_in_the_window_resets_to_the_new_sample() -> None:
    f = WindowedFilter(10)
    f.running_max(0, 100.0)
    assert f.running_max(50, 1.0) == 1.0


def test_running_min_mirrors_running_max() -> None:
    f = WindowedFilter(10.0, time=0.0, value=0.2)
    assert f.running_min(1.0, 0.3) == 0.2
    assert f.running_min(2.0, 0.1) == 0.1
    assert f.running_min(12.5, 0.25) == 0.25  # the 0.1 of t = 2 is 10.5 old


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError):
        WindowedFilter(0)
