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
   goodput of a saturated link is ``(1 - p) * rate``, MODELS.md section 8). netem decides
   loss at enqueue instead (a lost packet takes no queue space and no rate) and
   Mahimahi's ``mm-loss`` shell drops before the ``mm-link`` queue when nested outside it;
   both under-load the bottleneck by the loss rate.
5. **Propagation delay** ``delay_s``, plus a uniform draw in ``[-jitter_s, +jitter_s]``
   from its own generator; a packet never departs before the one ahead of it (jitter never
   reorders, as netem with a rate), which lifts the mean delay a little when jitter is
   large against the packet spacing.

Since departures never reorder, one FIFO per direction holds the delay line.

Scheduled events (:mod:`netem.events`, added with :meth:`LinkDirection.add_event`): during an
outage a packet offered is dropped after its loss draw (so the draws stay aligned with the
offered packets), and a packet due to depart inside an outage is dropped at departure; a rate
event changes the serialisation rate of the packets offered while it is in force.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from netem.emulator.loss import jitter_rng, make_loss
from netem.events import DirectionTimeline, ScheduledEvent
from netem.linkspec import DirectionSpec
from netem.stats import LATENESS_BINS, DirectionStats, lateness_bin

DROP_QUEUE = "queue"
DROP_LOSS = "loss"
DROP_OUTAGE = "outage"


class PacketRecorder(Protocol):
    """Where the core reports each packet's fate when a packet log is running."""

    def departed(self, arrival_s: float, due_s: float, now_s: float, packet: bytes) -> None: ...

    def dropped(self, arrival_s: float, reason: str, packet: bytes) -> None: ...


class LinkDirection:
    """The queue, serialiser, loss and delay of one direction (``up`` or ``down``)."""

    def __init__(self, direction: str, spec: DirectionSpec, queue_limit_bytes: int | None) -> None:
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
        self.set_spec(spec, queue_limit_bytes)

    def set_spec(self, spec: DirectionSpec, queue_limit_bytes: int | None) -> None:
        """Take a new spec; the loss and jitter generators restart from its seed.

        Packets already in flight keep their departure times.
        """
        if spec.rate_bps is not None and queue_limit_bytes is None:
            queue_limit_bytes = 2**62
        self.spec = spec
        self.queue_limit_bytes = queue_limit_bytes
        self._seconds_per_byte = None if spec.rate_bps is None else 8.0 / spec.rate_bps
        self._delay_s = spec.delay_s
        self._jitter_s = spec.jitter_s
        self._loss = make_loss(self.direction, spec)
        self._jitter_uniform = jitter_rng(self.direction, spec.seed).uniform

    def add_event(self, event: ScheduledEvent) -> bool:
        """Take a scheduled outage or rate change (absolute times); False if not ours."""
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
        if spb is None:
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
        if self._jitter_s:
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
