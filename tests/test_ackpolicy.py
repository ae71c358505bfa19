"""tbcore.ackpolicy: the written forms, and when each policy acknowledges, on a fake
clock (the times are arguments)."""

from __future__ import annotations

import pytest

from tbcore.ackpolicy import (
    DEFAULT,
    IMMEDIATE,
    MAX_ACK_DELAY_S,
    TACK_BETA,
    AckPolicy,
    AckScheduler,
    parse_ack_policy,
    requested_frequency,
)
from tbcore.errors import SpecError


def test_the_written_forms() -> None:
    assert parse_ack_policy("ack_policy", "default") is DEFAULT
    assert parse_ack_policy("ack_policy", " Immediate ") is IMMEDIATE
    every = parse_ack_policy("ack_policy", "every:2,max:10ms")
    assert every == AckPolicy("every", every_packets=2, max_delay_s=0.010)
    assert every.text == "every:2,max:10ms"


@pytest.mark.parametrize(
    "bad", ["", "every:0,max:10ms", "every:2,max:30ms", "every:2,max:0ms", "every:2", 3, "tack:4"]
)
def test_bad_policies_are_one_line_naming_the_field(bad: object) -> None:
    with pytest.raises(SpecError) as err:
        parse_ack_policy("ack_policy", bad)
    assert err.value.field == "ack_policy" and "\n" not in str(err.value)


def test_immediate_acknowledges_every_eliciting_packet_at_once() -> None:
    s = AckScheduler(IMMEDIATE)
    assert [s.on_packet(n, 1.0 + n) for n in range(3)] == [1.0, 2.0, 3.0]
    assert s.on_packet(3, 4.0, ack_eliciting=False) is None  # an ACK-only packet: none due


def test_every_two_or_at_most_ten_milliseconds() -> None:
    s = AckScheduler(parse_ack_policy("ack_policy", "every:2,max:10ms"))
    assert s.on_packet(0, 1.000) == pytest.approx(1.010)  # the first: the timer
    assert s.on_packet(1, 1.004) == 1.004  # the second: at once
    s.on_ack_sent()
    assert s.on_packet(2, 2.000) == pytest.approx(2.010)  # alone: 10 ms after it
    s.on_ack_sent()
    assert s.acks_sent == 2 and s.acks_per_packet == pytest.approx(2 / 3)


def test_a_gap_or_a_reordered_packet_is_acknowledged_at_once_whatever_the_policy() -> None:
    s = AckScheduler(parse_ack_policy("ack_policy", "every:8,max:25ms"))
    assert s.on_packet(0, 1.0) == pytest.approx(1.025)
    assert s.on_packet(2, 1.1) == 1.1  # packet 1 is missing
    s.on_ack_sent()
    assert s.on_packet(1, 1.2) == 1.2  # it arrived late
    s.on_ack_sent()
    assert s.on_packet(3, 1.3) == pytest.approx(1.325)  # in order again


def test_default_leaves_the_stack_its_rule() -> None:
    s = AckScheduler(DEFAULT)
    assert s.on_packet(0, 1.0) is None and s.on_packet(5, 2.0) is None
    assert s.eliciting_received == 2


def test_ack_frequency_waits_for_a_frame_then_follows_the_newest() -> None:
    s = AckScheduler(parse_ack_policy("ack_policy", "ack-frequency"))
    assert s.policy.text == "ack-frequency"
    assert s.on_packet(0, 1.0) is None  # no frame yet: the stack's own rule
    assert s.apply_frequency(0, 3, 0.010, 1)  # ACK after more than 3: every 4
    assert [s.on_packet(n, 2.0 + n / 100) for n in (1, 2, 3)] == pytest.approx([2.02] * 3)
    assert s.on_packet(4, 2.04) == 2.04
    assert not s.apply_frequency(0, 0, 0.001, 1)  # an old sequence number: ignored
    assert s.apply_frequency(2, 1, 0.005, 0) and s.followed == [
        "every:4,max:10ms",
        "every:2,max:5ms",
    ]
    s.on_ack_sent(2.05)
    assert s.on_packet(9, 3.0) == pytest.approx(3.005)  # reordering threshold 0: no IACK


def test_tack_acknowledges_per_l_packets_at_low_rate_and_per_period_at_high_rate() -> None:
    rtt = [0.040]
    s = AckScheduler(parse_ack_policy("ack_policy", "tack"), rtt_min_s=lambda: rtt[0])
    assert s.tack_period_s() == pytest.approx(0.040 / TACK_BETA)
    # slow: 50 ms between packets; the second of two is acknowledged at once
    assert s.on_packet(0, 0.0) == pytest.approx(MAX_ACK_DELAY_S)
    assert s.on_packet(1, 0.05) == 0.05
    s.on_ack_sent(0.05)
    # fast: a packet a millisecond; the ACK waits for RTT_min / beta since the last
    assert s.on_packet(2, 0.051) == pytest.approx(MAX_ACK_DELAY_S + 0.051)
    assert s.on_packet(3, 0.052) == pytest.approx(0.06)
    assert s.on_packet(5, 0.053) == 0.053  # a gap: TACK's IACK
    rtt[0] = float("inf")  # no estimate yet: at most max_ack_delay
    assert s.tack_period_s() == MAX_ACK_DELAY_S


def test_the_sender_asks_for_about_eight_acks_per_window_in_few_steps() -> None:
    assert requested_frequency(10 * 1200, 1200, 0.2, 0.001) == (1, 0.025)
    assert requested_frequency(100 * 1200, 1200, 0.04, 0.001) == (7, 0.005)
    assert requested_frequency(130 * 1200, 1200, 0.04, 0.001)[0] == 15
    assert requested_frequency(100 * 1200, 1200, 0.0001, 0.002)[1] == 0.002
