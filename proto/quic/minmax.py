"""A windowed running maximum (or minimum) of a measurement, in constant space (no I/O).

The same algorithm as Linux's ``lib/win_minmax.c`` (Kathleen Nichols' windowed min/max
tracker, used by BBR for its bandwidth filter and by TCP for its min RTT): it keeps the
best, second best and third best samples from successive parts of the window, so the
estimate of "the best value over the last ``window`` time units" is exact when samples are
dense and close to it otherwise, without storing every sample. Time is whatever unit the
caller counts in: BBR's bandwidth filter counts packet-timed round trips.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WindowedSample:
    """One measurement and when it was taken (the caller's time unit)."""

    time: float
    value: float


class WindowedFilter:
    """``win_minmax``: the best sample within ``window`` of the latest time, where "best"
    is the largest (:meth:`running_max`) or smallest (:meth:`running_min`)."""

    def __init__(self, window: float, *, time: float = 0.0, value: float = 0.0) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window!r}")
        self.window = window
        self._best: list[WindowedSample] = []
        self.reset(time, value)

    @property
    def value(self) -> float:
        """The current estimate (``minmax_get``)."""
        return self._best[0].value

    @property
    def samples(self) -> tuple[WindowedSample, WindowedSample, WindowedSample]:
        """The best, second and third choices (for tests and logs)."""
        first, second, third = self._best
        return first, second, third

    def reset(self, time: float, value: float) -> float:
        """Forget every sample but this one (``minmax_reset``)."""
        sample = WindowedSample(time, value)
        self._best = [sample, sample, sample]
        return value

    def running_max(self, time: float, value: float) -> float:
        """Take a sample and return the windowed maximum (``minmax_running_max``)."""
        return self._running(time, value, operator.ge)

    def running_min(self, time: float, value: float) -> float:
        """Take a sample and return the windowed minimum (``minmax_running_min``)."""
        return self._running(time, value, operator.le)

    def _running(self, time: float, value: float, better: Callable[[float, float], bool]) -> float:
        best = self._best
        if better(value, best[0].value) or time - best[2].time > self.window:
            return self.reset(time, value)  # a new best, or nothing left in the window
        sample = WindowedSample(time, value)
        if better(value, best[1].value):
            best[1] = best[2] = sample
        elif better(value, best[2].value):
            best[2] = sample
        return self._subwindow_update(sample)

    def _subwindow_update(self, sample: WindowedSample) -> float:
        """As time advances, promote the 2nd and 3rd choices (``minmax_subwin_update``)."""
        best = self._best
        elapsed = sample.time - best[0].time
        if elapsed > self.window:
            # the best has left the window: the 2nd becomes the best, the 3rd the 2nd; the
            # 2nd may have left too (the 3rd was checked on entry to lie in the window)
            best[0], best[1], best[2] = best[1], best[2], sample
            if sample.time - best[0].time > self.window:
                best[0], best[1], best[2] = best[1], best[2], sample
        elif best[1].time == best[0].time and elapsed > self.window / 4:
            # a quarter of the window without a new 2nd choice: take one from the 2nd quarter
            best[1] = best[2] = sample
        elif best[2].time == best[1].time and elapsed > self.window / 2:
            # half the window without a new 3rd choice: take one from the last half
            best[2] = sample
        return best[0].value
