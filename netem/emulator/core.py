"""One direction of the emulated link, sans-I/O: a queue, a serialiser, a delay line, loss.

Driven only through its methods, each of which takes ``now`` (CLOCK_MONOTONIC seconds):

* :meth:`LinkDirection.receive` offers a packet read from the sender's side;
* :meth:`LinkDirection.next_deadline` says when the next packet is due (or ``None``);
* :meth:`LinkDirection.pop_due` hands out the packets due by ``now``, in order, and records
  how late each is (``now`` minus its scheduled departure).

The pipeline of one packet of ``size`` bytes arriving at ``t``:

1. **Loss draw.** The loss model (:mod:`netem.emulator.loss`) draws once for every packet
   offered, so the k-th offered packet always meets the k-th draw, whatever the queue does.
2. **Drop-tail byte queue.** The packet is refused if the bytes not yet fully serialised
   (the packet on the wire included) plus ``size`` exceed the queue limit
   (``LinkSpec.queue_limit_bytes``, one BDP by default).
3. **Serialisation** at ``rate_bps``: it leaves the queue at
   ``tx_done = max(t, previous tx_done) + size * 8 / rate_bps``.
4. **Loss applied.** A packet drawn as lost is discarded here, after it has used its share
   of the queue and of the bottleneck: the loss sits on the path after the bottleneck, as
   the issue orders the stages (queue, then delay, then loss) and as the reference path
   was measured (independent loss at every offered rate below the knee; the delivered
   goodput of a saturated link is ``(1 - p) * rate``, docs/models.md section 8). netem decides
   loss at enqueue instead (a lost packet takes no queue space and no rate) and
   Mahimahi's ``mm-loss`` shell drops before the ``mm-link`` queue when nested outside it;
   both under-load the bottleneck by the loss rate.
5. **Propagation delay** ``delay_s``, plus a uniform draw in ``[-jitter_s, +jitter_s]``
   from its own generator; a packet never departs before the one ahead of it (jitter never
   reorders, as netem with a rate), which lifts the mean delay a little when jitter is
   large against the packet spacing.

Since departures never reorder, one FIFO per direction holds the delay line.

Traces (:mod:`netem.emulator.tracelink`): with a capacity trace, step 3's serialiser is a
:class:`~netem.emulator.tracelink.TraceServer` (Mahimahi's delivery opportunities and byte
accounting) and the queue in front of it is the same drop-tail byte queue; with a delay
trace, step 5's delay is the trace's at the packet's departure from the bottleneck (jitter is
refused with it), kept in order as above. Both start at the spec's ``trace_offset_s`` when
the spec is applied (``now`` of the constructor or of :meth:`LinkDirection.set_spec`).

Scheduled events (:mod:`netem.events`, added with :meth:`LinkDirection.add_event`): during an
outage a packet offered is dropped after its loss draw (so the draws stay aligned with the
offered packets), and a packet due to depart inside an outage is dropped at departure; a rate
event changes the serialisation rate of the packets offered while it is in force.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from netem.emulator.loss import jitter_rng, make_loss
from netem.emulator.tracelink import DelayCurve, TraceServer
from netem.events import DirectionTimeline, ScheduledEvent, ScheduledRate
from netem.linkspec import DirectionSpec
from netem.stats import LATENESS_BINS, DirectionStats, lateness_bin
from tbcore.errors import SpecError

DROP_QUEUE = "queue"
DROP_LOSS = "loss"
DROP_OUTAGE = "outage"


class PacketRecorder(Protocol):
    """Where the core reports each packet's fate when a packet log is running."""

    def departed(self, arrival_s: float, due_s: float, now_s: float, packet: bytes) -> None: ...

    def dropped(self, arrival_s: float, reason: str, packet: bytes) -> None: ...


def refuse_rate_events(direction: str, events: list[ScheduledEvent]) -> None:
    """SpecError if a rate change of ``events`` concerns ``direction``, whose capacity trace
    sets its rate (change the trace with set_spec instead)."""
    for event in events:
        if isinstance(event, ScheduledRate) and direction in event.directions:
            raise SpecError(
                f"{direction}.rate",
                "a capacity trace sets this direction's rate: a rate event cannot",
            )


class LinkDirection:
    """The queue, serialiser, loss and delay of one direction (``up`` or ``down``)."""

    def __init__(
        self,
        direction: str,
        spec: DirectionSpec,
        queue_limit_bytes: int | None,
        now: float = 0.0,
    ) -> None:
        self.direction = direction
        self.stats = DirectionStats(lateness_hist=[0] * LATENESS_BINS)
        self.recorder: PacketRecorder | None = None
        """Set to a :class:`PacketRecorder` to log every packet; None on the fast path."""
        self._queue: deque[tuple[float, int]] = deque()
        """(tx_done, size) of the packets not yet fully serialised."""
        self._backlog_bytes = 0
        self._tx_done = float("-inf")
        self._last_due = float("-inf")
        self._line: deque[tuple[float, float, bytes]] = deque()
        """(due, arrival, packet) of the packets in flight, in departure order."""
        self.timeline: DirectionTimeline | None = None
        """Scheduled outages and rate changes of this direction (None: none ever given)."""
        self.set_spec(spec, queue_limit_bytes, now)

    def set_spec(
        self, spec: DirectionSpec, queue_limit_bytes: int | None, now: float = 0.0
    ) -> None:
        """Take a new spec at ``now``; the loss and jitter generators restart from its seed,
        its traces from its offset (their origin is ``now``).

        Packets already in flight keep their departure times; a new trace's opportunities
        start once the packets queued before have left.
        """
        self.check_spec(spec, now)
        if (spec.rate_bps is not None or spec.rate_trace is not None) and queue_limit_bytes is None:
            queue_limit_bytes = 2**62
        self.spec = spec
        self.trace_origin_s = now
        """When this spec's traces were at their offset (CLOCK_MONOTONIC)."""
        self._server: TraceServer | None = None
        if spec.rate_trace is not None:
            self._server = TraceServer(
                spec.rate_trace.capacity, now, spec.trace_offset_s, busy_until_s=self._tx_done
            )
        self._delay_curve: DelayCurve | None = None
        if spec.delay_trace is not None:
            self._delay_curve = DelayCurve(
                spec.delay_trace.delay, now, spec.trace_offset_s, spec.delay_interp
            )
        self.queue_limit_bytes = queue_limit_bytes
        self._seconds_per_byte = None if spec.rate_bps is None else 8.0 / spec.rate_bps
        self._delay_s = spec.delay_s
        self._jitter_s = spec.jitter_s
        self._loss = make_loss(self.direction, spec)
        self._jitter_uniform = jitter_rng(self.direction, spec.seed).uniform

    def check_spec(self, spec: DirectionSpec, now: float) -> None:
        """Refuse a spec this direction cannot take at ``now``: a capacity trace while a rate
        event is in force or to come."""
        if spec.rate_trace is not None and self.timeline is not None:
            self._refuse_rate_events([e for e in self.timeline.rates if e.end_s > now])

    def check_event(self, event: ScheduledEvent) -> None:
        """Refuse an event this direction cannot honour: a rate change on a capacity trace
        (the trace is the rate; change it with set_spec)."""
        if self.spec.rate_trace is not None:
            self._refuse_rate_events([event])

    def _refuse_rate_events(self, events: list[ScheduledEvent]) -> None:
        refuse_rate_events(self.direction, events)

    def add_event(self, event: ScheduledEvent) -> bool:
        """Take a scheduled outage or rate change (absolute times); False if not ours."""
        self.check_event(event)
        if self.timeline is None:
            self.timeline = DirectionTimeline(self.direction)
        return self.timeline.add(event)

    # --- input ---------------------------------------------------------------------------

    def receive(self, now: float, packet: bytes) -> None:
        """Offer one IP packet that arrived from the sender at ``now``."""
        size = len(packet)
        st = self.stats
        st.packets_in += 1
        st.bytes_in += size
        lost = self._loss.lost()
        spb = self._seconds_per_byte
        timeline = self.timeline
        if timeline is not None:
            outage = timeline.outage_at(now)
            if outage is not None:
                timeline.count_drop(outage)
                st.dropped_outage += 1
                if self.recorder is not None:
                    self.recorder.dropped(now, DROP_OUTAGE, packet)
                return
            if timeline.has_rates:
                rate = timeline.rate_at(now, self.spec.rate_bps)
                spb = None if rate is None else 8.0 / rate
                if spb is not None and self.queue_limit_bytes is None:
                    self.queue_limit_bytes = 2**62
        if spb is None and self._server is None:
            tx_done = now
        else:
            queue = self._queue
            while queue and queue[0][0] <= now:
                self._backlog_bytes -= queue.popleft()[1]
            backlog = self._backlog_bytes + size
            if backlog > self.queue_limit_bytes:
                st.dropped_queue += 1
                st.bytes_dropped_queue += size
                if self.recorder is not None:
                    self.recorder.dropped(now, DROP_QUEUE, packet)
                return
            if self._server is not None:
                tx_done = self._server.serve(now, size)
            else:
                tx_done = (now if now > self._tx_done else self._tx_done) + size * spb
            self._tx_done = tx_done
            queue.append((tx_done, size))
            self._backlog_bytes = backlog
            if backlog > st.max_backlog_bytes:
                st.max_backlog_bytes = backlog
            if len(queue) > st.max_backlog_packets:
                st.max_backlog_packets = len(queue)
        if lost:
            st.dropped_loss += 1
            if self.recorder is not None:
                self.recorder.dropped(now, DROP_LOSS, packet)
            return
        due = tx_done + self._delay_s
        if self._delay_curve is not None:
            due += self._delay_curve.delay_s(tx_done)
        elif self._jitter_s:
            due += self._jitter_uniform(-self._jitter_s, self._jitter_s)
        if due < self._last_due:
            due = self._last_due
        self._last_due = due
        self._line.append((due, now, packet))

    # --- output --------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When the next packet is due to depart, or None when nothing is in flight."""
        return self._line[0][0] if self._line else None

    def pop_due(self, now: float) -> list[bytes]:
        """The packets due by ``now``, in order; each one's lateness (now - due) is recorded."""
        line = self._line
        out: list[bytes] = []
        if not line or line[0][0] > now:
            return out
        st = self.stats
        hist = st.lateness_hist
        recorder = self.recorder
        timeline = self.timeline
        while line and line[0][0] <= now:
            due, arrival, packet = line.popleft()
            if timeline is not None and (outage := timeline.outage_at(due)) is not None:
                timeline.count_drop(outage)
                st.dropped_outage += 1
                if recorder is not None:
                    recorder.dropped(arrival, DROP_OUTAGE, packet)
                continue
            late = now - due
            hist[lateness_bin(late)] += 1
            st.lateness_sum_s += late
            if late > st.lateness_max_s:
                st.lateness_max_s = late
            st.packets_out += 1
            st.bytes_out += len(packet)
            if recorder is not None:
                recorder.departed(arrival, due, now, packet)
            out.append(packet)
        return out

    @property
    def in_flight_packets(self) -> int:
        return len(self._line)

    def trace_info(self) -> dict[str, object] | None:
        """This direction's traces and their clock (JSON-ready), or None without one."""
        return trace_info(self.spec, self.trace_origin_s)


def trace_info(spec: DirectionSpec, origin_s: float) -> dict[str, object] | None:
    """A direction's traces and their clock started at ``origin_s`` (JSON-ready), or None
    without one: what the emulator's ``trace`` command answers, on either packet path."""
    if not spec.has_trace:
        return None
    return {
        "origin_s": origin_s,
        "offset_s": spec.trace_offset_s,
        "rate_trace": None if spec.rate_trace is None else spec.rate_trace.to_dict(),
        "delay_trace": None if spec.delay_trace is None else spec.delay_trace.to_dict(),
        "delay_interp": spec.delay_interp,
    }
