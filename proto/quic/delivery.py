"""Delivery-rate estimation for a QUIC sender (no I/O; every call takes ``now``).

draft-cheng-iccrg-delivery-rate-estimation-02 as Linux implements it (net/ipv4/tcp_rate.c),
counted in bytes instead of segments:

- **On send** (:meth:`DeliveryRateEstimator.on_packet_sent`) a packet takes a snapshot of
  the connection's delivery state: bytes delivered so far (``delivered_bytes``), when the
  latest of them was acknowledged (``delivered_time_s``), the send time of the packet most
  recently acknowledged (``first_sent_time_s``) and whether the sender has a known "bubble"
  of application-limited silence in flight (``is_app_limited``). When nothing is in flight,
  both times restart at ``now``, so the next sample spans only the new flight.
- **On each acknowledged packet** (:meth:`on_packet_acked`) the delivered count grows, and
  the newest packet acknowledged by the ACK (latest send time, then highest packet number)
  gives the sample its start: ``prior_delivered``, ``prior_time``, its send phase
  (``send_elapsed``: its send time less its ``first_sent_time``) and ack phase
  (``ack_elapsed``: now less its ``delivered_time``).
- **Once per ACK** (:meth:`generate_rate_sample`) the sample is closed: ``delivered`` bytes
  over ``interval = max(send_elapsed, ack_elapsed)`` (the slower of the two pipeline
  phases, so an ACK compression burst cannot inflate it). An interval below the min RTT is
  not a valid sample (tcp_rate.c: there it comes from an ambiguous retransmission's ACK;
  QUIC's RTTs are never ambiguous, so the check is kept for the draft but cannot fire).
- **App-limited** (:meth:`on_app_limited`): the sender calls it when it had nothing to
  send, its window not full; the bubble lasts until everything then in flight (``delivered
  + in_flight`` bytes) has been delivered, and samples of packets sent meanwhile are
  flagged: they measure the application, not the path.

QUIC acknowledges each packet once (no SACK reneging, no retransmission of the same packet
number), so the skb bookkeeping Linux needs for those (``delivered_mstamp = 0`` once
SACKed, ``is_sack_reneg``) has no counterpart here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PacketSendState:
    """The connection's delivery state copied into a packet when it was sent (draft
    section 3.2, ``P.delivered`` ...; Linux ``TCP_SKB_CB(skb)->tx``)."""

    packet_number: int
    size_bytes: int
    sent_time_s: float
    delivered_bytes: int
    """``C.delivered`` when the packet was sent."""
    delivered_time_s: float
    """``C.delivered_time`` when the packet was sent."""
    first_sent_time_s: float
    """``C.first_sent_time`` when the packet was sent: the start of its send phase."""
    is_app_limited: bool
    """Sent while an application-limited bubble was in flight."""


@dataclass(frozen=True, slots=True)
class RateSample:
    """What one ACK says about delivery (Linux ``struct rate_sample``); bytes and seconds."""

    delivered_bytes: int
    """Bytes delivered over the interval (-1: no valid sample)."""
    interval_s: float
    """``max(send_elapsed_s, ack_elapsed_s)`` (-1: no valid sample)."""
    send_elapsed_s: float
    ack_elapsed_s: float
    prior_delivered_bytes: int
    """``C.delivered`` when the newest acknowledged packet was sent."""
    prior_time_s: float | None
    """``C.delivered_time`` then; None when the ACK acknowledged nothing in flight."""
    is_app_limited: bool
    acked_bytes: int
    """Bytes newly acknowledged by this ACK (Linux ``acked_sacked``)."""
    lost_bytes: int
    """Bytes newly declared lost while processing this ACK (Linux ``losses``)."""
    prior_in_flight_bytes: int
    """Bytes in flight before this ACK was processed."""
    rtt_s: float | None
    """RTT of the newest packet acknowledged (Linux ``rtt_us``, its ``ca_rtt``); None: none."""
    is_ack_delayed: bool
    """The ACK may have been delayed by the receiver: it acknowledges one runt packet sent
    with nothing else in flight (Linux ``FLAG_ACK_MAYBE_DELAYED``)."""

    @property
    def is_valid(self) -> bool:
        return self.delivered_bytes >= 0 and self.interval_s > 0

    @property
    def delivery_rate_bytes_per_s(self) -> float | None:
        """``delivered / interval`` (None for an invalid sample)."""
        if not self.is_valid:
            return None
        return self.delivered_bytes / self.interval_s


@dataclass(slots=True)
class _AckInProgress:
    """The newest packet seen so far in one ACK's acknowledged packets (``rs`` in
    tcp_rate_skb_delivered) and what the ACK added up to."""

    prior_in_flight_bytes: int
    acked_bytes: int = 0
    acked_packets: int = 0
    lost_bytes: int = 0
    newest: PacketSendState | None = None
    send_elapsed_s: float = 0.0
    ack_elapsed_s: float = 0.0
    rtt_s: float | None = None


@dataclass
class DeliveryRateEstimator:
    """The connection's delivery state (draft section 3.1, ``C.*``) and the rate sample of
    the ACK being processed."""

    max_datagram_size: int
    delivered_bytes: int = 0
    """``C.delivered``: bytes acknowledged so far."""
    delivered_time_s: float | None = None
    """``C.delivered_time``: when ``delivered_bytes`` last grew (or the flight restarted)."""
    first_sent_time_s: float | None = None
    """``C.first_sent_time``: send time of the packet most recently acknowledged."""
    app_limited_until_bytes: int = 0
    """``C.app_limited``: 0, or the delivered count that ends the current bubble."""
    lost_bytes: int = 0
    """Bytes declared lost so far (Linux ``tp->lost``, for BBR's policer detection)."""
    min_rtt_s: float = math.inf
    """Smallest RTT seen (Linux ``tcp_min_rtt``: a 300 s window, longer than any run)."""
    in_flight_bytes: int = 0
    """Bytes of packets sent and neither acknowledged, lost nor expired."""
    rate_delivered_bytes: int = 0
    rate_interval_s: float = 0.0
    """The last valid sample that was not app-limited, or an app-limited one at a higher
    rate (Linux ``tp->rate_delivered`` / ``rate_interval_us``: TCP_INFO's delivery_rate)."""
    rate_app_limited: bool = False
    _ack: _AckInProgress | None = field(default=None, repr=False)

    @property
    def is_app_limited(self) -> bool:
        return self.app_limited_until_bytes != 0

    @property
    def delivery_rate_bytes_per_s(self) -> float | None:
        """The rate TCP_INFO would report as ``delivery_rate`` (None before a sample)."""
        if self.rate_interval_s <= 0:
            return None
        return self.rate_delivered_bytes / self.rate_interval_s

    @property
    def newest_acked_sent_time_s(self) -> float | None:
        """The latest send time among the packets of the ACK being processed (None: none)."""
        if self._ack is None or self._ack.newest is None:
            return None
        return self._ack.newest.sent_time_s

    def on_packet_sent(self, *, packet_number: int, size_bytes: int, now: float) -> PacketSendState:
        """Snapshot the delivery state into a packet (``OnPacketSent``, tcp_rate_skb_sent)."""
        if self.in_flight_bytes == 0 or self.first_sent_time_s is None:
            # nothing in flight: any ACK after now shows what the network delivered since
            self.first_sent_time_s = now
            self.delivered_time_s = now
        assert self.delivered_time_s is not None
        self.in_flight_bytes += size_bytes
        return PacketSendState(
            packet_number=packet_number,
            size_bytes=size_bytes,
            sent_time_s=now,
            delivered_bytes=self.delivered_bytes,
            delivered_time_s=self.delivered_time_s,
            first_sent_time_s=self.first_sent_time_s,
            is_app_limited=self.is_app_limited,
        )

    def on_packet_acked(self, packet: PacketSendState, *, now: float) -> None:
        """One packet of the ACK being processed (``UpdateRateSample``,
        tcp_rate_skb_delivered): count it, and keep it as the sample's start if it is the
        newest packet acknowledged so far."""
        ack = self._begin_ack()
        self.in_flight_bytes -= packet.size_bytes
        self.delivered_bytes += packet.size_bytes
        self.delivered_time_s = now
        ack.acked_bytes += packet.size_bytes
        ack.acked_packets += 1
        if ack.newest is None or self._sent_after(packet, ack.newest):
            ack.newest = packet
            ack.send_elapsed_s = packet.sent_time_s - packet.first_sent_time_s
            ack.ack_elapsed_s = now - packet.delivered_time_s
            ack.rtt_s = now - packet.sent_time_s
            self.first_sent_time_s = packet.sent_time_s

    def on_packet_lost(self, packet: PacketSendState) -> None:
        """A packet declared lost; counted in the sample of the ACK being processed, if any
        (losses found by a timer between ACKs are not, as in Linux's ``rs->losses``)."""
        self.in_flight_bytes -= packet.size_bytes
        self.lost_bytes += packet.size_bytes
        if self._ack is not None:
            self._ack.lost_bytes += packet.size_bytes

    def on_packet_expired(self, packet: PacketSendState) -> None:
        """A packet that left the flight neither acknowledged nor lost (its space was
        discarded, or a probe timeout rescheduled its data)."""
        self.in_flight_bytes -= packet.size_bytes

    def on_app_limited(self) -> None:
        """The sender had nothing to send and room in its window: mark a bubble that lasts
        until everything in flight now is delivered (``CheckIfApplicationLimited``)."""
        self.app_limited_until_bytes = (self.delivered_bytes + self.in_flight_bytes) or 1

    def generate_rate_sample(self, *, now: float) -> RateSample:
        """Close the ACK being processed (``GenerateRateSample``, tcp_rate_gen)."""
        ack = self._ack if self._ack is not None else _AckInProgress(self.in_flight_bytes)
        self._ack = None
        if self.app_limited_until_bytes and self.delivered_bytes > self.app_limited_until_bytes:
            self.app_limited_until_bytes = 0  # the bubble has been delivered
        if ack.rtt_s is not None:
            self.min_rtt_s = min(self.min_rtt_s, ack.rtt_s)
        newest = ack.newest
        common = {
            "send_elapsed_s": ack.send_elapsed_s,
            "ack_elapsed_s": ack.ack_elapsed_s,
            "acked_bytes": ack.acked_bytes,
            "lost_bytes": ack.lost_bytes,
            "prior_in_flight_bytes": ack.prior_in_flight_bytes,
            "rtt_s": ack.rtt_s,
        }
        if newest is None:
            return RateSample(
                delivered_bytes=-1, interval_s=-1.0, prior_delivered_bytes=0,
                prior_time_s=None, is_app_limited=False, is_ack_delayed=False, **common,
            )  # fmt: skip
        delivered = self.delivered_bytes - newest.delivered_bytes
        interval = max(ack.send_elapsed_s, ack.ack_elapsed_s)
        if interval < self.min_rtt_s:
            interval = -1.0  # shorter than a round trip: not a physical delivery rate
        sample = RateSample(
            delivered_bytes=delivered,
            interval_s=interval,
            prior_delivered_bytes=newest.delivered_bytes,
            prior_time_s=newest.delivered_time_s,
            is_app_limited=newest.is_app_limited,
            is_ack_delayed=self._maybe_delayed(ack, newest, delivered),
            **common,
        )
        if sample.is_valid:
            self._record_rate(sample)
        return sample

    def _record_rate(self, sample: RateSample) -> None:
        """Keep the last sample that was not app-limited, or an app-limited one at least as
        fast as the one kept (the end of tcp_rate_gen)."""
        if (
            not sample.is_app_limited
            or sample.delivered_bytes * self.rate_interval_s
            >= self.rate_delivered_bytes * sample.interval_s
        ):
            self.rate_delivered_bytes = sample.delivered_bytes
            self.rate_interval_s = sample.interval_s
            self.rate_app_limited = sample.is_app_limited

    def _begin_ack(self) -> _AckInProgress:
        if self._ack is None:
            self._ack = _AckInProgress(prior_in_flight_bytes=self.in_flight_bytes)
        return self._ack

    def _sent_after(self, packet: PacketSendState, than: PacketSendState) -> bool:
        """``IsNewestPacket`` (tcp_skb_sent_after): later send time, then higher number."""
        if packet.sent_time_s != than.sent_time_s:
            return packet.sent_time_s > than.sent_time_s
        return packet.packet_number > than.packet_number

    def _maybe_delayed(self, ack: _AckInProgress, newest: PacketSendState, delivered: int) -> bool:
        """tcp_clean_rtx_queue's ``FLAG_ACK_MAYBE_DELAYED``: the ACK covers one packet
        smaller than a full one, and that packet was sent with nothing else undelivered."""
        return (
            ack.acked_packets == 1
            and newest.size_bytes < self.max_datagram_size
            and delivered == newest.size_bytes
            and ack.lost_bytes == 0
        )
