"""A congestion control driven through aioquic's interface by a packet-level path model on
a fake clock, without aioquic's connection: exact, fast, and every number known.

The sender sends full datagrams whenever the window and the pacer allow (the pacer is
strict: one datagram per ``size / pacing_rate``, and it reports its next departure to the
control as proto.quic.edge.ControlPacer does); a bottleneck serves them at ``rate`` (drop-tail
queue of ``queue_bytes``), a lost one (Bernoulli, seeded) never reaches it; each delivered
datagram is acknowledged by its own ACK one propagation RTT later; a lost datagram is
declared lost in the ACK that acknowledges the third datagram sent after it (RFC 9002's
packet threshold). Each ACK is reported as aioquic's recovery does: ``on_packet_acked``,
then ``on_rtt_measurement``, then ``on_packets_lost``, then the end of the ACK.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from aioquic.quic.packet import QuicPacketType
from aioquic.quic.packet_builder import QuicSentPacket
from aioquic.tls import Epoch

from proto.quic.bbr import BbrCongestionControl

PACKET_THRESHOLD = 3
"""RFC 9002 kPacketThreshold."""


def packet(number: int, size: int, now: float) -> QuicSentPacket:
    return QuicSentPacket(
        epoch=Epoch.ONE_RTT,
        in_flight=True,
        is_ack_eliciting=True,
        is_crypto_packet=False,
        packet_number=number,
        packet_type=QuicPacketType.ONE_RTT,
        sent_time=now,
        sent_bytes=size,
    )


@dataclass
class Pipe:
    cc: BbrCongestionControl
    rate_bytes_per_s: float
    rtt_s: float
    loss: float = 0.0
    queue_bytes: float = float("inf")
    seed: int = 1
    app_bytes: float = float("inf")
    """Bytes the application has left to send (inf: always backlogged)."""
    app_rate_bytes_per_s: float | None = None
    """When set, the application adds bytes to send at this rate (a trickle)."""
    drop: set[int] = field(default_factory=set)
    """Packet numbers lost on purpose (besides the random loss)."""
    policer_rate_bytes_per_s: float | None = None
    """A token-bucket policer before the bottleneck: drops what exceeds this rate..."""
    policer_burst_bytes: float = 0.0
    """...beyond this bucket."""
    now: float = 0.0
    sent_bytes: int = 0
    delivered_bytes: int = 0
    on_ack: Callable[[Pipe], None] | None = None
    """Called after each ACK's processing (for traces)."""
    _next_number: int = 0
    _next_send_s: float = 0.0
    _link_free_s: float = 0.0
    _acks: list[tuple[float, int, QuicSentPacket]] = field(default_factory=list)
    _lost: list[QuicSentPacket] = field(default_factory=list)
    _tokens: float = 0.0
    _tokens_at: float = 0.0
    _app_at: float = 0.0
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._tokens = self.policer_burst_bytes  # the bucket starts full

    @property
    def mds(self) -> int:
        return self.cc.max_datagram_size

    def queue_delay_s(self) -> float:
        return max(self._link_free_s - self.now, 0.0)

    def _can_send(self) -> bool:
        cc = self.cc
        return (
            self._has_data()
            and cc.congestion_window - cc.bytes_in_flight >= self.mds
            and self._next_send_s <= self.now
        )

    def _send(self) -> None:
        cc = self.cc
        sent = packet(self._next_number, self.mds, self.now)
        self._next_number += 1
        self.app_bytes -= self.mds
        self.sent_bytes += self.mds
        cc.on_packet_sent(packet=sent)
        rate = cc.pacing_rate_bytes_per_s
        self._next_send_s = max(self._next_send_s, self.now) + self.mds / rate
        cc.departure_time_s = self._next_send_s
        if (self.loss and self._rng.random() < self.loss) or sent.packet_number in self.drop:
            self._lost.append(sent)
            return
        if self.policer_rate_bytes_per_s is not None and not self._police(self.mds):
            self._lost.append(sent)
            return
        start = max(self.now, self._link_free_s)
        if (start - self.now) * self.rate_bytes_per_s > self.queue_bytes:
            self._lost.append(sent)  # drop-tail
            return
        self._link_free_s = start + self.mds / self.rate_bytes_per_s
        heapq.heappush(self._acks, (self._link_free_s + self.rtt_s, sent.packet_number, sent))

    def _has_data(self) -> bool:
        """A datagram's worth to send (a trickling application sends full ones only)."""
        return self.app_bytes >= (self.mds if self.app_rate_bytes_per_s else 1)

    def _police(self, size: int) -> bool:
        rate = self.policer_rate_bytes_per_s
        assert rate is not None
        self._tokens = min(
            self._tokens + (self.now - self._tokens_at) * rate, self.policer_burst_bytes
        )
        self._tokens_at = self.now
        if self._tokens < size:
            return False
        self._tokens -= size
        return True

    def _refill_app(self) -> None:
        if self.app_rate_bytes_per_s is not None:
            self.app_bytes += (self.now - self._app_at) * self.app_rate_bytes_per_s
            self._app_at = self.now

    def _deliver_ack(self) -> None:
        at, _number, acked = heapq.heappop(self._acks)
        self.now = at
        cc = self.cc
        cc.on_packet_acked(now=at, packet=acked)
        self.delivered_bytes += acked.sent_bytes
        cc.on_rtt_measurement(now=at, rtt=at - acked.sent_time)
        threshold = acked.packet_number - PACKET_THRESHOLD
        lost = [p for p in self._lost if p.packet_number <= threshold]
        if lost:
            self._lost = [p for p in self._lost if p.packet_number > threshold]
            cc.on_packets_lost(now=at, packets=lost)
        cc.on_ack_end(now=at)
        if self.on_ack is not None:
            self.on_ack(self)

    def _send_all(self) -> None:
        self._refill_app()
        while self._can_send():
            self._send()
        cc = self.cc
        if not self._has_data() and cc.congestion_window - cc.bytes_in_flight >= self.mds:
            cc.on_app_limited()  # nothing to send, room in the window

    def run(self, until_s: float, stop: Callable[[Pipe], bool] | None = None) -> None:
        """Advance the fake clock to ``until_s`` (or until ``stop(pipe)`` holds)."""
        while self.now < until_s:
            self._send_all()
            if stop is not None and stop(self):
                return
            events = []
            if self._acks:
                events.append(self._acks[0][0])
            cc = self.cc
            room = cc.congestion_window - cc.bytes_in_flight >= self.mds
            if self._has_data() and self._next_send_s > self.now and room:
                events.append(self._next_send_s)
            if self.app_rate_bytes_per_s and self.app_bytes < self.mds:
                wait = (self.mds - self.app_bytes) / self.app_rate_bytes_per_s
                events.append(self.now + max(wait, 1e-6))
            if not events:
                self.now = until_s
                return
            at = min(events)
            if at > until_s:
                self.now = until_s
                return
            if self._acks and self._acks[0][0] == at:
                self._deliver_ack()
            else:
                self.now = at


def bbr(mds: int = 1200, seed: int = 7) -> BbrCongestionControl:
    return BbrCongestionControl(max_datagram_size=mds, rng=random.Random(seed))
