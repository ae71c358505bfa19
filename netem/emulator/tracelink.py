"""The traced parts of one direction, sans-I/O: a capacity trace's serialiser, a delay trace.

Both run on the direction's *trace clock*: at CLOCK_MONOTONIC time ``t`` the traces are at
position ``offset_s + (t - origin_s)``, where ``origin_s`` is the moment the spec was applied
(link up, or each ``set_spec``: every run restarts its traces at the offset) and
``offset_s`` the spec's ``trace_offset_s``. The harness reads ``origin_s`` back (the
emulator's ``trace`` command) to compute a run's bound from the same positions.

:class:`TraceServer` replaces the fixed-rate serialiser (``tx_done = max(t, previous) +
size / rate``) with ``mm-link``'s delivery opportunities and byte accounting
(:mod:`netem.trace`; Mahimahi's ``LinkQueue::rationalize``):

* each opportunity carries :data:`~netem.trace.OPPORTUNITY_BYTES` at its instant;
* the packets queued at that instant take its bytes in FIFO order: several small packets
  share one opportunity, a large one takes bytes from several and leaves at the last;
* bytes no queued packet takes are lost (an idle link banks no credit): a packet that
  arrives after the opportunity its predecessor finished on starts at the first opportunity
  at or after its arrival;
* a packet leaves the bottleneck at the instant of the opportunity that completes it.

Since the queue is FIFO and the opportunities are known in advance, a packet's departure
is fixed when it is offered: :meth:`TraceServer.serve` returns it at once, and the core's
drop-tail byte queue, loss and delay line work on it as on a fixed rate.

Two differences from ``mm-link``, both from continuous time: ``mm-link`` stamps arrivals in
whole milliseconds and spends an opportunity before a packet stamped in its millisecond is
queued, so such a packet waits for the next one; here a packet arriving at or before an
opportunity's instant may use it. And ``mm-link`` counts 4 more bytes per packet (see
:data:`~netem.trace.OPPORTUNITY_BYTES`).

:class:`DelayCurve` gives the delay trace's one-way delay at a packet's departure from the
bottleneck (step or linear, :meth:`netem.trace.DelayTrace.delay_ms`). The core keeps packets
in order: a packet due before the one ahead of it (the delay fell by more than their spacing)
leaves right after it instead, so a falling delay never overtakes a packet in flight.
"""

from __future__ import annotations

import math

from netem.trace import OPPORTUNITY_BYTES, CapacityTrace, DelayTrace


class TraceServer:
    """The bottleneck of a capacity trace: when each offered packet has fully left it."""

    def __init__(
        self,
        trace: CapacityTrace,
        origin_s: float,
        offset_s: float = 0.0,
        *,
        busy_until_s: float = -math.inf,
    ) -> None:
        """``busy_until_s``: the last departure scheduled before (a ``set_spec`` while
        packets are queued): the trace's opportunities start after it."""
        self.trace = trace
        self.origin_s = origin_s
        self.offset_s = offset_s
        self._offset_ms = offset_s * 1e3
        self._next_k = trace.first_at_or_after(self.position_ms(max(origin_s, busy_until_s)))
        """The first opportunity no packet has used."""
        self._tx_done_s = busy_until_s
        """When the last packet left (the instant of the opportunity that completed it)."""
        self._left_bytes = 0
        """Bytes of that opportunity no packet has taken yet."""

    def position_ms(self, t: float) -> float:
        """Where the trace is at time ``t`` (ms from its start, before wrapping)."""
        return (t - self.origin_s) * 1e3 + self._offset_ms

    def instant_s(self, k: int) -> float:
        """The time of opportunity ``k``."""
        return self.origin_s + (self.trace.time_ms(k) - self._offset_ms) * 1e-3

    def serve(self, now: float, size_bytes: int) -> float:
        """Queue a packet of ``size_bytes`` offered at ``now``; when its last byte leaves."""
        need = size_bytes
        if now <= self._tx_done_s:  # the link is busy: this packet follows the last one
            take = min(self._left_bytes, need)
            self._left_bytes -= take
            need -= take
            if need == 0:
                return self._tx_done_s
        else:  # idle: the last opportunity's bytes are lost, start from now
            k = self.trace.first_at_or_after(self.position_ms(now))
            if k > self._next_k:
                self._next_k = k
        used = -(-need // OPPORTUNITY_BYTES)  # ceil
        last = self._next_k + used - 1
        self._next_k = last + 1
        self._left_bytes = used * OPPORTUNITY_BYTES - need
        self._tx_done_s = self.instant_s(last)
        return self._tx_done_s

    @property
    def busy_until_s(self) -> float:
        """When the last packet offered leaves (``-inf`` before the first)."""
        return self._tx_done_s


class DelayCurve:
    """The one-way delay of a delay trace on a direction's trace clock."""

    def __init__(
        self, trace: DelayTrace, origin_s: float, offset_s: float = 0.0, interp: str = "step"
    ) -> None:
        self.trace = trace
        self.origin_s = origin_s
        self.offset_s = offset_s
        self.interp = interp
        self._offset_ms = offset_s * 1e3

    def delay_s(self, t: float) -> float:
        """The delay a packet leaving the bottleneck at ``t`` gets."""
        position_ms = (t - self.origin_s) * 1e3 + self._offset_ms
        return self.trace.delay_ms(position_ms, self.interp) * 1e-3
