"""What a trace offers over time: per-window capacity and delay, their percentiles.

Both are computed over one period of the trace (it repeats after that). Capacity: the
opportunities in each window of ``window_s`` times 1,500 bytes, as a rate; the mean is the
trace's mean over its period, the percentiles (p5, p50, p95, linear interpolation) and the
share of time below a rate are over the windows, a last partial window weighted by its
length. Delay: the delay curve sampled every :data:`DELAY_SAMPLE_S` (step or linear),
time-weighted alike.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from netem.trace import OPPORTUNITY_BYTES, CapacityTrace, DelayTrace
from tbcore.errors import SpecError

DEFAULT_WINDOW_S = 0.1
"""100 ms: the window of the issue's fidelity check, and short enough to show a 0.3-s spell."""
DELAY_SAMPLE_S = 0.001
"""The delay curve is sampled every millisecond (a LEO trace has a point per 10 ms)."""
MAX_SAMPLES = 10_000_000
"""At most this many windows or samples per period (a day at 10 ms is 8.6 million)."""
MAX_DELAY_SAMPLES = 1_000_000
"""Samples of a delay curve per period at most (a second of Python per million)."""
PERCENTILES = (5, 50, 95)


@dataclass(frozen=True)
class Series:
    """A trace over one period: window (or sample) start times and values."""

    times_s: np.ndarray
    values: np.ndarray
    weights_s: np.ndarray
    """Each window's length (the last one may be partial)."""


def _windows(period_s: float, window_s: float) -> np.ndarray:
    if not math.isfinite(window_s) or window_s <= 0:
        raise SpecError("window", f"must be > 0 s, got {window_s!r}")
    count = max(1, math.ceil(round(period_s / window_s, 9)))  # a period shorter than a window: one
    if count > MAX_SAMPLES:
        raise SpecError("window", f"{window_s:g} s makes {count} windows: more than 10 million")
    return np.arange(count) * window_s


def capacity_series(trace: CapacityTrace, window_s: float = DEFAULT_WINDOW_S) -> Series:
    """The rate (bit/s) each window of one period offers."""
    starts = _windows(trace.period_s, window_s)
    # shared edges (rounded to a nanosecond), so that the windows tile the period exactly
    edges_ms = [*np.round(starts * 1e3, 6), float(trace.period_ms)]
    firsts = [trace.first_at_or_after(edge) for edge in edges_ms]
    counts = np.diff(firsts).astype(float)
    # the period's last stamps sit at its very end: count them in the last window, so the
    # windows hold the period's opportunities exactly once
    counts[-1] += trace.count - bisect.bisect_left(trace.stamps_ms, trace.period_ms)
    weights = np.round(np.diff(edges_ms), 6) / 1e3
    return Series(starts, counts * OPPORTUNITY_BYTES * 8 / weights, weights)


def delay_series(trace: DelayTrace, interp: str = "step") -> Series:
    """The delay (s) every :data:`DELAY_SAMPLE_S` of one period (coarser for a period of
    more than :data:`MAX_DELAY_SAMPLES` ms)."""
    step_s = max(DELAY_SAMPLE_S, trace.period_s / MAX_DELAY_SAMPLES)
    starts = _windows(trace.period_s, step_s)
    values = np.array([trace.delay_ms(t * 1e3, interp) / 1e3 for t in starts])
    weights = np.minimum(starts + step_s, trace.period_s) - starts
    return Series(starts, values, weights)


def weighted_percentile(series: Series, q: float) -> float:
    """The ``q``-th percentile of the values, each weighted by its window's length."""
    order = np.argsort(series.values, kind="stable")
    values = series.values[order]
    cumulative = np.cumsum(series.weights_s[order])
    # the value at the centre of each weight's mass, interpolated (as numpy's 'linear' is
    # for equal weights)
    centres = (cumulative - series.weights_s[order] / 2) / cumulative[-1]
    return float(np.interp(q / 100.0, centres, values))


RELATIVE_TOLERANCE = 1e-9
"""A window's rate that is the threshold up to rounding is not below it."""


def share_below(series: Series, threshold: float) -> float:
    """The share of the period whose value is below ``threshold`` (by more than rounding)."""
    below = series.weights_s[series.values < threshold * (1 - RELATIVE_TOLERANCE)].sum()
    return float(below / series.weights_s.sum())


@dataclass(frozen=True)
class CapacitySummary:
    period_s: float
    opportunities: int
    window_s: float
    mean_bps: float
    p5_bps: float
    p50_bps: float
    p95_bps: float
    min_window_bps: float
    max_window_bps: float
    below_bps: float | None
    share_below: float | None
    """The share of time whose window rate is below ``below_bps``."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "capacity", **asdict(self)}


def summarise_capacity(
    trace: CapacityTrace, window_s: float = DEFAULT_WINDOW_S, below_bps: float | None = None
) -> CapacitySummary:
    series = capacity_series(trace, window_s)
    p5, p50, p95 = (weighted_percentile(series, q) for q in PERCENTILES)
    return CapacitySummary(
        period_s=trace.period_s,
        opportunities=trace.count,
        window_s=window_s,
        mean_bps=trace.mean_rate_bps,
        p5_bps=p5,
        p50_bps=p50,
        p95_bps=p95,
        min_window_bps=float(series.values.min()),
        max_window_bps=float(series.values.max()),
        below_bps=below_bps,
        share_below=None if below_bps is None else share_below(series, below_bps),
    )


@dataclass(frozen=True)
class DelaySummary:
    period_s: float
    points: int
    interp: str
    mean_s: float
    min_s: float
    p5_s: float
    p50_s: float
    p95_s: float
    max_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "delay", **asdict(self)}


def summarise_delay(trace: DelayTrace, interp: str = "step") -> DelaySummary:
    series = delay_series(trace, interp)
    p5, p50, p95 = (weighted_percentile(series, q) for q in PERCENTILES)
    return DelaySummary(
        period_s=trace.period_s,
        points=len(trace.times_ms),
        interp=interp,
        mean_s=trace.mean_delay_ms(interp) / 1e3,
        min_s=trace.min_delay_ms / 1e3,
        p5_s=p5,
        p50_s=p50,
        p95_s=p95,
        max_s=trace.max_delay_ms / 1e3,
    )
