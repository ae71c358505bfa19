"""Delivery-rate samples (proto.quic.delivery) against samples computed by hand from
draft-cheng-iccrg-delivery-rate-estimation-02's definitions, on a fake clock."""

from __future__ import annotations

import pytest

from proto.quic.delivery import DeliveryRateEstimator, PacketSendState

MDS = 1200


class Sender:
    """Packets numbered in send order, each ``size`` bytes, through one estimator."""

    def __init__(self) -> None:
        self.est = DeliveryRateEstimator(max_datagram_size=MDS)
        self.packets: dict[int, PacketSendState] = {}
        self.next_number = 0

    def send(self, now: float, size: int = 1000) -> int:
        number = self.next_number
        self.next_number += 1
        self.packets[number] = self.est.on_packet_sent(
            packet_number=number, size_bytes=size, now=now
        )
        return number

    def ack(self, now: float, *numbers: int, lost: tuple[int, ...] = ()):  # type: ignore[no-untyped-def]
        for number in numbers:
            self.est.on_packet_acked(self.packets.pop(number), now=now)
        for number in lost:
            self.est.on_packet_lost(self.packets.pop(number))
        return self.est.generate_rate_sample(now=now)


def test_samples_match_the_drafts_definitions() -> None:
    s = Sender()
    for i in range(4):  # P0..P3, 1000 bytes each, 10 ms apart, from an empty pipe
        s.send(0.01 * i)
    # P0 was sent with nothing in flight: first_sent = delivered_time = 0
    rs = s.ack(0.100, 0)
    assert rs.delivered_bytes == 1000
    assert rs.send_elapsed_s == pytest.approx(0.0)  # 0 - 0
    assert rs.ack_elapsed_s == pytest.approx(0.100)  # 0.100 - 0
    assert rs.interval_s == pytest.approx(0.100)
    assert rs.delivery_rate_bytes_per_s == pytest.approx(10_000)
    assert rs.rtt_s == pytest.approx(0.100) and rs.prior_in_flight_bytes == 4000
    # one ACK for P1 and P2: the newest (P2, sent at 0.02) starts the sample
    rs = s.ack(0.120, 1, 2)
    assert rs.acked_bytes == 2000
    assert rs.prior_delivered_bytes == 0  # P2 was sent before any delivery
    assert rs.send_elapsed_s == pytest.approx(0.02)  # 0.02 - P2's first_sent 0
    assert rs.ack_elapsed_s == pytest.approx(0.12)  # 0.12 - P2's delivered_time 0
    assert rs.delivered_bytes == 3000
    assert rs.delivery_rate_bytes_per_s == pytest.approx(3000 / 0.12)
    assert rs.rtt_s == pytest.approx(0.100)  # 0.12 - 0.02
    # P4 is sent after those ACKs: it carries delivered 3000 at 0.12, first_sent 0.02
    s.send(0.130)
    rs = s.ack(0.230, 3, 4)
    assert rs.prior_delivered_bytes == 3000 and rs.prior_time_s == pytest.approx(0.12)
    assert rs.send_elapsed_s == pytest.approx(0.13 - 0.02)
    assert rs.ack_elapsed_s == pytest.approx(0.23 - 0.12)
    assert rs.delivered_bytes == 2000
    assert rs.delivery_rate_bytes_per_s == pytest.approx(2000 / 0.11)


def test_the_slower_phase_is_the_interval() -> None:
    s = Sender()
    s.send(0.0)
    s.ack(0.1, 0)  # min RTT 0.1
    for i in range(10):  # P1..P10 every 5 ms from 0.1; P1 restarts the flight
        s.send(0.1 + 0.005 * i)
    rs = s.ack(0.2, 1, 2, 3, 4, 5)
    # newest P5 (sent 0.12; first_sent 0.1, delivered_time 0.1, delivered 1000)
    assert rs.send_elapsed_s == pytest.approx(0.02)
    assert rs.ack_elapsed_s == pytest.approx(0.1)
    assert rs.delivery_rate_bytes_per_s == pytest.approx(5000 / 0.1)  # the ACK phase
    for i in range(5):  # P11..P15 while P6..P10 are in flight: first_sent 0.12
        s.send(0.20 + 0.01 * i)
    s.ack(0.245, 6, 7, 8, 9, 10)
    # P11..P15 come back compressed into one ACK 60 ms after the last was sent
    rs = s.ack(0.30, 11, 12, 13, 14, 15)
    assert rs.send_elapsed_s == pytest.approx(0.24 - 0.12)
    assert rs.ack_elapsed_s == pytest.approx(0.30 - 0.20)
    assert rs.interval_s == pytest.approx(0.12)  # the send phase: the longer one
    assert rs.delivered_bytes == 16_000 - 6_000
    assert rs.delivery_rate_bytes_per_s == pytest.approx(10_000 / 0.12)


def test_the_interval_is_never_below_the_newest_packets_rtt() -> None:
    # the draft drops samples shorter than the min RTT (TCP: a spurious retransmission's
    # ACK); a QUIC packet number is never ambiguous, and the ack phase starts no later
    # than the newest packet's send time, so every sample spans at least its RTT
    s = Sender()
    s.send(0.0)
    s.ack(0.1, 0)
    s.send(0.2)
    s.send(0.2)
    rs = s.ack(0.25, 1)  # a faster path now: 50 ms
    assert rs.is_valid and rs.interval_s >= rs.rtt_s == pytest.approx(0.05)
    assert s.est.min_rtt_s == pytest.approx(0.05)


def test_an_ack_of_nothing_in_flight_is_no_sample() -> None:
    s = Sender()
    s.send(0.0)
    rs = s.est.generate_rate_sample(now=0.1)
    assert not rs.is_valid and rs.acked_bytes == 0 and rs.rtt_s is None


def test_app_limited_bubble_marks_samples_until_it_is_delivered() -> None:
    s = Sender()
    s.send(0.0)
    s.send(0.0)
    # nothing more to send, the window not full: a bubble of delivered + in flight
    s.est.on_app_limited()
    assert s.est.app_limited_until_bytes == 2000
    s.send(0.05)  # sent inside the bubble
    rs = s.ack(0.10, 0)
    assert not rs.is_app_limited  # P0 was sent before the bubble
    rs = s.ack(0.10 + 1e-9, 1)
    assert not rs.is_app_limited and s.est.is_app_limited  # delivered 2000: not beyond
    rs = s.ack(0.15, 2)
    assert rs.is_app_limited  # P2 carries the mark...
    assert not s.est.is_app_limited  # ...and delivering it ended the bubble (3000 > 2000)
    s.send(0.16)
    assert not s.ack(0.26, 3).is_app_limited


def test_app_limited_with_nothing_in_flight_still_marks() -> None:
    est = DeliveryRateEstimator(max_datagram_size=MDS)
    est.on_app_limited()
    assert est.app_limited_until_bytes == 1 and est.is_app_limited


def test_tcp_info_delivery_rate_keeps_the_last_unlimited_or_a_faster_limited_one() -> None:
    s = Sender()
    s.send(0.0)
    s.send(0.0)
    s.ack(0.1, 0, 1)  # 2000 bytes in 0.1 s: 20 kB/s, not app-limited
    assert s.est.delivery_rate_bytes_per_s == pytest.approx(20_000)
    s.est.on_app_limited()
    s.send(0.2)
    s.ack(0.3, 2)  # app-limited and slower (1000 in 0.1 s): not recorded
    assert s.est.delivery_rate_bytes_per_s == pytest.approx(20_000)
    s.est.on_app_limited()
    for _ in range(5):
        s.send(0.4)
    s.ack(0.5, 3, 4, 5, 6, 7)  # app-limited but faster (5000 in 0.1 s): recorded
    assert s.est.delivery_rate_bytes_per_s == pytest.approx(50_000)
    assert s.est.rate_app_limited


def test_losses_in_an_ack_count_in_its_sample_and_timer_losses_do_not() -> None:
    s = Sender()
    for i in range(5):
        s.send(0.001 * i)
    rs = s.ack(0.1, 3, 4, lost=(0,))
    assert rs.lost_bytes == 1000 and rs.acked_bytes == 2000
    assert s.est.in_flight_bytes == 2000 and s.est.lost_bytes == 1000
    s.est.on_packet_lost(s.packets.pop(1))  # declared lost by a timer between ACKs
    assert s.est.lost_bytes == 2000
    rs = s.ack(0.2, 2)
    assert rs.lost_bytes == 0


def test_a_lone_runt_ack_may_be_delayed() -> None:
    s = Sender()
    s.send(0.0, size=100)
    assert s.ack(0.1, 0).is_ack_delayed  # one small packet, nothing else outstanding
    s.send(0.2, size=MDS)
    assert not s.ack(0.3, 1).is_ack_delayed  # a full-sized one
    s.send(0.4, size=100)
    s.send(0.4, size=100)
    assert not s.ack(0.5, 2, 3).is_ack_delayed  # two packets


def test_same_send_time_ties_go_to_the_higher_packet_number() -> None:
    s = Sender()
    s.send(0.0)
    s.ack(0.1, 0)
    s.send(0.2)  # P1, with nothing in flight
    s.ack(0.25, 1)
    s.send(0.3)  # P2
    s.send(0.3)  # P3, in the same instant
    rs = s.ack(0.4, 3, 2)  # reported in any order: P3 is the newest
    assert rs.rtt_s == pytest.approx(0.1)
    assert s.est.first_sent_time_s == pytest.approx(0.3)


def test_expired_packets_leave_the_flight_without_counting() -> None:
    s = Sender()
    s.send(0.0)
    s.send(0.0)
    s.est.on_packet_expired(s.packets.pop(0))
    assert s.est.in_flight_bytes == 1000
    assert s.est.delivered_bytes == 0 and s.est.lost_bytes == 0
