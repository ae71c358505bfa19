"""The lower bound on a link whose capacity follows a recorded trace (docs/models.md section 14).

A capacity trace (:mod:`netem.trace`, Mahimahi's format) offers
:data:`~netem.trace.OPPORTUNITY_BYTES` at each of its delivery opportunities. The earliest
that ``S`` bytes (headers included) can have left the bottleneck, starting at ``t0``, is the
instant of the opportunity at which those offered in ``[t0, t]`` first add up to ``S``:
the ``ceil(S / 1500)``-th opportunity at or after ``t0``. Add the propagation delay and the
processing time as in section 1. A whole request (:func:`trace_request_time`) runs the round
model of sections 4 and 6 through each direction's
:class:`~harness.bounds.bottleneck.Bottleneck`.

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
from dataclasses import dataclass, field
from typing import Unpack

from harness.bounds.base import (
    BITS_PER_BYTE,
    INITCWND_SEGMENTS,
    RequestArgs,
    _count,
    _loss,
    _non_negative,
)
from harness.bounds.bottleneck import Bottleneck
from harness.bounds.request import RequestParts
from harness.bounds.retransmission import retransmission_rounds
from harness.bounds.setup import setup_rtts
from netem.linkspec import DirectionSpec
from netem.trace import OPPORTUNITY_BYTES, CapacityTrace
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.settings import Settings

DEFAULT_SETTINGS = Settings()
"""The settings the default packet size is read from (tbcore.kinds ``mss``)."""


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
    left a bottleneck that follows ``trace`` from ``offset_s`` in (docs/models.md section 14)."""
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


# --- a request across a path with a capacity trace (sections 1, 4, 6 and 14) ---------------


@dataclass(frozen=True)
class TraceRequestBound(RequestParts):
    """The lower bound of one request whose path follows a capacity trace on one direction
    or both, by part, in seconds from the request's start. The round model is
    :func:`harness.bounds.request.direction_rounds`' (a window's successor leaves when the
    ACK of its first segment is back), each window's bytes served by the direction's
    :class:`~harness.bounds.bottleneck.Bottleneck` in order, so the rates are those the trace
    offered at the moment each byte could leave."""

    protocol: str
    connection: str
    rtt_s: float
    """Round-trip propagation (the least delays of both directions)."""
    upload_bytes: int
    download_bytes: int
    up_position_s: float | None
    """Where the uplink's trace was at the request's start (None: a fixed rate)."""
    down_position_s: float | None
    up_offered_bps: float
    """The mean rate the uplink offered while the upload's bytes left (0 without bytes)."""
    down_offered_bps: float
    up_rounds: int
    down_rounds: int
    setup_s: float
    feedback_s: float
    """Idle time waiting for ACKs between windows, both directions."""
    serialisation_s: float
    """Time the bottlenecks spent carrying the bytes (waits for opportunities included)."""
    propagation_s: float
    processing_s: float
    retransmission_s: float
    """Expected extra rounds of ideal selective retransmission (section 9), times rtt_s."""
    upload_done_s: float = 0.0
    """When the upload's last byte has left the uplink's bottleneck, from the start."""
    propagation_up_s: float = 0.0
    """The one-way delay up (part of ``propagation_s``)."""
    window_s: float = 0.0
    """Kept for the row's columns: capped windows' waits are in ``feedback_s`` here."""
    total_s: float = field(init=False)
    expected_s: float = field(init=False)


@dataclass(frozen=True)
class _Leg:
    """One direction's transfer through its bottleneck."""

    done_s: float
    feedback_s: float
    busy_s: float
    rounds: int


def _leg(
    bottleneck: Bottleneck,
    size_bytes: int,
    start_s: float,
    rtt_s: float,
    *,
    window_bytes: float,
    cap_bytes: float,
    mss_bytes: int,
) -> _Leg:
    """Windows of ``size_bytes`` from ``start_s``: each doubles (up to ``cap_bytes``) and
    leaves when the ACK of its predecessor's first segment is back."""
    if size_bytes == 0:
        return _Leg(start_s, 0.0, 0.0, 0)
    window = min(window_bytes, cap_bytes)
    remaining, offer_s, feedback, rounds = float(size_bytes), start_s, 0.0, 0
    while True:
        sent = min(window, remaining)
        head = min(float(mss_bytes), sent)
        first_s = bottleneck.serve(head, offer_s)
        done_s = bottleneck.serve(sent - head, offer_s) if sent > head else first_s
        remaining -= sent
        rounds += 1
        if remaining <= 0:
            return _Leg(done_s, feedback, done_s - start_s - feedback, rounds)
        next_s = first_s + rtt_s
        feedback += max(0.0, next_s - done_s)
        offer_s = next_s
        window = min(window * 2, cap_bytes)


def trace_request_time(
    *,
    up: Bottleneck,
    down: Bottleneck,
    up_delay_s: float,
    down_delay_s: float,
    up_loss: float = 0.0,
    down_loss: float = 0.0,
    start_s: float = 0.0,
    **request: Unpack[RequestArgs],
) -> TraceRequestBound:
    """The request's lower bound across two bottlenecks: set-up (section 4, ``setup_rtts``
    round trips of the least delays), the upload in slow-start windows through ``up``,
    one-way up, processing, the response through ``down``, one-way down. ``start_s``: when
    the request starts on the bottlenecks' clock (a task of several requests passes the same
    bottlenecks on); the parts are durations from it. On a one-line trace equal to a fixed
    rate it agrees with :func:`harness.bounds.request.request_time` within one opportunity
    per window."""
    rtt = _non_negative("up_delay_s", up_delay_s) + _non_negative("down_delay_s", down_delay_s)
    protocol, connection = request["protocol"], request["connection"]
    setup = setup_rtts(protocol, connection) * rtt
    upload = _count("upload_bytes", request["upload_bytes"])
    download = _count("download_bytes", request["download_bytes"])
    processing = _non_negative("processing_s", request.get("processing_s", 0.0))
    mss_bytes = request.get("mss_bytes")
    if mss_bytes is None:  # the protocol's full packet at the default settings
        mss_bytes = kinds.protocol(protocol).mss(DEFAULT_SETTINGS)
    mss = _count("mss_bytes", mss_bytes, minimum=1)
    iw = _count("initcwnd_segments", request.get("initcwnd_segments", INITCWND_SEGMENTS), minimum=1)
    cap = math.inf
    window_bytes = request.get("window_bytes")
    if window_bytes is not None:
        cap = float(_count("window_bytes", window_bytes, minimum=1))
    first = math.inf if connection == "reused" else float(iw * mss)
    shape = {"window_bytes": first, "cap_bytes": cap, "mss_bytes": mss}
    begin = _non_negative("start_s", start_s)
    going = _leg(up, upload, begin + setup, rtt, **shape)  # type: ignore[arg-type]
    answer_s = going.done_s + up_delay_s + processing
    coming = _leg(down, download, answer_s, rtt, **shape)  # type: ignore[arg-type]
    k_up = retransmission_rounds(-(-upload // mss), _loss("up_loss", up_loss))
    k_down = retransmission_rounds(-(-download // mss), _loss("down_loss", down_loss))
    return TraceRequestBound(
        protocol=protocol,
        connection=connection,
        rtt_s=rtt,
        upload_bytes=upload,
        download_bytes=download,
        up_position_s=None if up.trace is None else up.position_s,
        down_position_s=None if down.trace is None else down.position_s,
        up_offered_bps=_rate(upload, going.busy_s),
        down_offered_bps=_rate(download, coming.busy_s),
        up_rounds=going.rounds,
        down_rounds=coming.rounds,
        setup_s=setup,
        feedback_s=going.feedback_s + coming.feedback_s,
        serialisation_s=going.busy_s + coming.busy_s,
        upload_done_s=going.done_s - begin,
        propagation_s=rtt,
        processing_s=processing,
        propagation_up_s=up_delay_s,
        retransmission_s=(max(0.0, k_up - 1) + max(0.0, k_down - 1)) * rtt,
    )


def _rate(size_bytes: int, busy_s: float) -> float:
    return size_bytes * BITS_PER_BYTE / busy_s if busy_s > 0 else 0.0


def direction_bottleneck(
    spec: DirectionSpec, position_s: float | None = None, share: float = 1.0
) -> Bottleneck:
    """The bottleneck of a direction with a fixed rate or a capacity trace; ``position_s``:
    where its trace is at the moment the caller counts from (default: its offset, where the
    traces start when the spec is applied)."""
    if spec.rate_trace is not None:
        where = spec.trace_offset_s if position_s is None else position_s
        return Bottleneck(trace=spec.rate_trace.capacity, position_s=where, share=share)
    if spec.rate_bps is None:
        raise SpecError("rate", "the bound needs a rate or a capacity trace on both directions")
    return Bottleneck(rate_bps=spec.rate_bps, share=share)
