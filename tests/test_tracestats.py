"""Per-window capacity and delay of a trace, and their time-weighted percentiles."""

from __future__ import annotations

import random

import numpy as np
import pytest

from netem.trace import parse_capacity, parse_delay
from netem.tracestats import (
    Series,
    capacity_series,
    delay_series,
    share_below,
    summarise_capacity,
    summarise_delay,
    weighted_percentile,
)
from tbcore.errors import SpecError


def two_rates() -> str:
    """1 s at 12 Mbit/s (stamps 1..1000), then 1 s at 6 Mbit/s (1002, 1004, ..., 2000)."""
    return "".join(f"{i}\n" for i in [*range(1, 1001), *range(1002, 2001, 2)])


def test_windows_hold_every_opportunity_of_the_period_once() -> None:
    for text in (two_rates(), "0\n0\n5\n", "1\n", "2\n3\n10\n"):
        trace = parse_capacity(text.encode(), "t")
        series = capacity_series(trace, 0.003)
        counts = series.values * series.weights_s / 12_000
        assert round(counts.sum()) == trace.count


def test_a_two_rate_trace_has_the_rates_of_its_halves() -> None:
    trace = parse_capacity(two_rates().encode(), "t")
    summary = summarise_capacity(trace, 0.1, below_bps=10e6)
    assert summary.mean_bps == 9e6
    assert summary.p5_bps == pytest.approx(6e6, rel=0.03)
    assert summary.p95_bps == pytest.approx(12e6, rel=0.01)
    assert summary.share_below == pytest.approx(0.5)
    # half-open windows: the first holds stamps 1..99, the 11th 1000 and 1002..1098, the
    # last 1900..1998 and the period's end, 2000
    values = capacity_series(trace, 0.1).values / 12_000 * 0.1
    assert [round(v) for v in (values[0], values[1], values[10], values[-1])] == [99, 100, 50, 51]


def test_a_period_shorter_than_the_window_is_one_window() -> None:
    summary = summarise_capacity(parse_capacity(b"1\n", "t"), 0.1)
    assert (summary.p5_bps, summary.p50_bps, summary.min_window_bps) == (12e6, 12e6, 12e6)


def test_weighted_percentiles_are_numpys_for_equal_weights() -> None:
    rng = random.Random(1)
    values = np.array([rng.uniform(0, 10) for _ in range(101)])
    series = Series(np.arange(101.0), values, np.ones(101))
    for q in (5, 50, 95):
        assert weighted_percentile(series, q) == pytest.approx(np.percentile(values, q), rel=0.05)
    heavy = Series(np.arange(2.0), np.array([1.0, 2.0]), np.array([9.0, 1.0]))
    # the centres of the masses, 0.45 and 0.95, interpolated (numpy's linear rule)
    assert [weighted_percentile(heavy, q) for q in (5, 50, 95)] == [1.0, pytest.approx(1.1), 2.0]
    assert share_below(heavy, 1.5) == 0.9


def test_delay_series_and_summary_step_and_linear() -> None:
    trace = parse_delay(b"0 10\n10 20\n20 5\n", "d")
    series = delay_series(trace)
    assert len(series.values) == 30 and series.values[12] == 0.020
    step = summarise_delay(trace)
    assert (step.min_s, step.max_s, step.p50_s) == (0.005, 0.020, 0.010)
    assert step.mean_s == pytest.approx(35 / 3 / 1e3)
    assert summarise_delay(trace, "linear").mean_s == pytest.approx(35 / 3 / 1e3)


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(SpecError, match="window"):
        capacity_series(parse_capacity(b"1\n", "t"), 0.0)
    with pytest.raises(SpecError, match="10 million"):
        capacity_series(parse_capacity(b"86400000\n", "t"), 0.001)
