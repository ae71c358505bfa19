"""Where a link's traces are at a given moment: the clock the emulator reports.

A direction with a trace starts it at its offset when the link comes up and again at every
``set_spec`` (netem.emulator: the ``trace`` command and ``set_spec``'s reply). From then on,
at CLOCK_MONOTONIC time ``t``, the trace is at position ``offset_s + (t - origin_s)`` seconds
into it (positions wrap with the trace's period, netem.trace). Sans-I/O: a run records the
report, the harness turns it into :class:`TraceClock` values and asks them for positions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tbcore.errors import SpecError

DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class TraceClock:
    """One direction's trace clock."""

    origin_s: float
    """CLOCK_MONOTONIC when the direction's traces were at ``offset_s``."""
    offset_s: float
    """The position (seconds into the traces) at ``origin_s``."""

    def __post_init__(self) -> None:
        for name in ("origin_s", "offset_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SpecError(f"trace.{name}", f"must be a number of seconds, got {value!r}")
            if not math.isfinite(value):
                raise SpecError(f"trace.{name}", f"must be finite, got {value!r}")
        if self.offset_s < 0:
            raise SpecError("trace.offset_s", f"must be >= 0, got {self.offset_s!r}")

    def position_s(self, monotonic_s: float) -> float:
        """The traces' position at ``monotonic_s`` (never before 0: a moment before the
        origin is taken as the origin)."""
        return self.offset_s + max(0.0, monotonic_s - self.origin_s)

    def to_dict(self) -> dict[str, float]:
        return {"origin_s": self.origin_s, "offset_s": self.offset_s}


def clocks_of(report: Mapping[str, Any] | None) -> dict[str, TraceClock]:
    """The clocks of an emulator's trace report (``{"up": info or None, "down": ...}``):
    one per direction that has a trace."""
    out: dict[str, TraceClock] = {}
    if not report:
        return out
    for direction in DIRECTIONS:
        info = report.get(direction)
        if info is None:
            continue
        if not isinstance(info, Mapping) or "origin_s" not in info or "offset_s" not in info:
            raise SpecError(f"trace.{direction}", f"not a trace report: {info!r}")
        out[direction] = TraceClock(float(info["origin_s"]), float(info["offset_s"]))
    return out
