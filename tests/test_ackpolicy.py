"""tbcore.ackpolicy: the written forms, and when each policy acknowledges, on a fake
clock (the times are arguments)."""

from __future__ import annotations

import pytest

from tbcore.ackpolicy import DEFAULT, IMMEDIATE, AckPolicy, AckScheduler, parse_ack_policy
from tbcore.errors import SpecError


def test_the_written_forms() -> None:
    assert parse_ack_policy("ack_policy", "default") is DEFAULT
    assert parse_ack_policy("ack_policy", " Immediate ") is IMMEDIATE
    every = parse_ack_policy("ack_policy", "every:2,max:10ms")
    assert every == AckPolicy("every", every_packets=2, max_delay_s=0.010)
    assert every.text == "every:2,max:10ms"


@pytest.mark.parametrize(
    "bad", ["", "every:0,max:10ms", "every:2,max:30ms", "every:2,max:0ms", "every:2", 3, "tack"]
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
