"""One direction's bottleneck as a lower bound sees it: a first-in first-out server of bytes
at a fixed rate or at the opportunities of a capacity trace (docs/models.md sections 1 and 14),
optionally at a share of it (section 15: ``B / (n + 1)`` beside ``n`` flows).

The server is fluid: bytes offered at ``t`` leave at the rate (or with the opportunities at
or after ``t``) once the bytes offered before them have left, and a part of an opportunity
serves a part of a packet (mm-link's byte accounting lets a packet span opportunities and
several share one). An opportunity that finds nothing queued is lost, as in mm-link. The
bytes counted are payload bytes (headers left out, as in section 1): every figure is
therefore at or below what the emulator can do.

Times are seconds from a moment the caller chooses (a request's start); ``position_s`` says
where the trace is at that moment (netem.traceclock).
"""

from __future__ import annotations

import math

from harness.bounds.base import BITS_PER_BYTE, _non_negative, _open_unit, _positive
from netem.trace import OPPORTUNITY_BYTES, CapacityTrace
from tbcore.errors import SpecError

FRACTION_SLACK = 1e-9
"""Opportunities counted as used up to this fraction of one are taken as whole (float sums
of shares must not spill a transfer into one more opportunity)."""


class Bottleneck:
    """A FIFO fluid server of one direction; :meth:`serve` moves it on."""

    def __init__(
        self,
        *,
        rate_bps: float | None = None,
        trace: CapacityTrace | None = None,
        position_s: float = 0.0,
        share: float = 1.0,
    ) -> None:
        if (rate_bps is None) == (trace is None):
            raise SpecError("rate_bps", "a bottleneck has a rate or a capacity trace, one of them")
        if trace is not None and not isinstance(trace, CapacityTrace):
            raise SpecError("trace", f"must be a CapacityTrace, got {type(trace).__name__}")
        self.rate_bps = None if rate_bps is None else _positive("rate_bps", rate_bps)
        self.trace = trace
        self.position_s = _non_negative("position_s", position_s)
        self.share = _open_unit("share", share) if share != 1.0 else 1.0
        self._free_s = 0.0
        """Fixed rate: when the server has sent everything offered so far."""
        self._used = 0.0
        """Trace: opportunities (fractional, counted from the trace's start) used so far."""

    @property
    def opportunity_bytes(self) -> float:
        """What one opportunity carries for the bytes offered here (the share of 1,500)."""
        return OPPORTUNITY_BYTES * self.share

    def serve(self, size_bytes: float, at_s: float) -> float:
        """Offer ``size_bytes`` at ``at_s``; returns when the last of them has left."""
        size = _non_negative("size_bytes", size_bytes)
        at = _non_negative("at_s", at_s)
        if size == 0:
            return at
        if self.trace is None:
            assert self.rate_bps is not None
            start = max(at, self._free_s)
            self._free_s = start + size * BITS_PER_BYTE / (self.rate_bps * self.share)
            return self._free_s
        first = self.trace.first_at_or_after((self.position_s + at) * 1e3)
        begin = max(self._used, float(first))
        self._used = begin + size / self.opportunity_bytes
        # the opportunity that carries the last byte (never one before the first used)
        last = max(math.floor(begin), math.ceil(self._used - FRACTION_SLACK) - 1)
        return self.trace.time_ms(last) / 1e3 - self.position_s

    def offered_bytes(self, start_s: float, end_s: float) -> float:
        """What the server could carry in ``[start_s, end_s)`` (its share included)."""
        start = _non_negative("start_s", start_s)
        end = max(start, _non_negative("end_s", end_s))
        if self.trace is None:
            assert self.rate_bps is not None
            return (end - start) * self.rate_bps * self.share / BITS_PER_BYTE
        count = self.trace.opportunities_between(
            (self.position_s + start) * 1e3, (self.position_s + end) * 1e3
        )
        return count * self.opportunity_bytes
