"""The lower bound on a link whose capacity follows a recorded trace (MODELS.md section 14).

A capacity trace (:mod:`netem.trace`, Mahimahi's format) offers
:data:`~netem.trace.OPPORTUNITY_BYTES` at each of its delivery opportunities. The earliest
that ``S`` bytes (headers included) can have left the bottleneck, starting at ``t0``, is the
instant of the opportunity at which those offered in ``[t0, t]`` first add up to ``S``:
the ``ceil(S / 1500)``-th opportunity at or after ``t0``. Add the propagation delay and the
processing time as in section 1.

The clock: times are seconds since the trace's *origin*, the moment the link's traces were
at their offset (link up or the ``set_spec`` before the run; the emulator's ``trace``
command reports it on CLOCK_MONOTONIC); at time ``t`` the trace is at position
``offset_s + t``. The emulator's serialiser (:class:`netem.emulator.tracelink.TraceServer`)
departs no packet before this bound: the bytes of a transfer offered all at ``t0`` leave at
exactly this time, and any later or spread offer leaves later (an opportunity no packet is
queued for is lost).
"""

from __future__ import annotations

import math

from netem.linkspec import DirectionSpec
from netem.trace import OPPORTUNITY_BYTES, CapacityTrace
from tbcore.errors import SpecError


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(name, f"must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise SpecError(name, f"must be >= 0 s, got {value!r}")
    return float(value)


def _bytes(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(name, f"must be a whole number of bytes >= 0, got {value!r}")
    return value


def trace_transfer_done_s(
    trace: CapacityTrace, size_bytes: int, start_s: float, offset_s: float = 0.0
) -> float:
    """The earliest time ``size_bytes`` (headers included) offered at ``start_s`` can have
    left a bottleneck that follows ``trace`` from ``offset_s`` in (MODELS.md section 14)."""
    size = _bytes("size_bytes", size_bytes)
    start = _seconds("start_s", start_s)
    offset = _seconds("offset_s", offset_s)
    if not isinstance(trace, CapacityTrace):
        raise SpecError("trace", f"must be a CapacityTrace, got {type(trace).__name__}")
    if size == 0:
        return start
    first = trace.first_at_or_after((offset + start) * 1e3)
    last = first + -(-size // OPPORTUNITY_BYTES) - 1
    return trace.time_ms(last) / 1e3 - offset


def trace_offered_bytes(
    trace: CapacityTrace, start_s: float, end_s: float, offset_s: float = 0.0
) -> int:
    """The bytes the trace offers in ``[start_s, end_s)`` (the integral of its
    opportunities): what a run could at most have sent in that time."""
    start = _seconds("start_s", start_s)
    end = _seconds("end_s", end_s)
    offset = _seconds("offset_s", offset_s)
    if end < start:
        raise SpecError("end_s", f"{end!r} is before start_s {start!r}")
    count = trace.opportunities_between((offset + start) * 1e3, (offset + end) * 1e3)
    return count * OPPORTUNITY_BYTES


def direction_transfer_done_s(spec: DirectionSpec, size_bytes: int, start_s: float) -> float:
    """:func:`trace_transfer_done_s` on a direction with a capacity trace, at its
    ``trace_offset_s`` (``start_s`` on the direction's trace clock, see the module)."""
    if spec.rate_trace is None:
        raise SpecError("rate_trace", "this direction has no capacity trace")
    return trace_transfer_done_s(spec.rate_trace.capacity, size_bytes, start_s, spec.trace_offset_s)
