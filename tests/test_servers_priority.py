"""RFC 9218 priority parsing and the send policies."""

from proto.priority import (
    POLICY_FIFO,
    POLICY_RFC9218,
    POLICY_RR,
    Priority,
    Scheduler,
    parse_priority,
)


def test_parse_priority_field_values() -> None:
    assert parse_priority("u=0") == Priority(0, False)
    assert parse_priority(b"u=5, i") == Priority(5, True)
    assert parse_priority("i=?0, u=2") == Priority(2, False)
    assert parse_priority(None) == Priority(3, False)
    # out-of-range or malformed members keep their defaults (RFC 9218 section 4)
    assert parse_priority("u=9") == Priority(3, False)
    assert parse_priority("u=x, i=?1") == Priority(3, True)
    assert Priority(1, True).field_value() == "u=1, i"


def _scheduler(policy: str) -> Scheduler:
    scheduler = Scheduler(policy)
    scheduler.add(0, parse_priority("u=4"))  # the image, first to arrive
    scheduler.add(4, parse_priority("u=0"))  # the audio, second
    return scheduler


def test_fifo_serves_in_arrival_order_whatever_the_signal() -> None:
    assert _scheduler(POLICY_FIFO).order([4, 0]) == [0, 4]


def test_rfc9218_serves_the_lowest_urgency_first() -> None:
    assert _scheduler(POLICY_RFC9218).order([0, 4]) == [4, 0]


def test_round_robin_keeps_the_rotation() -> None:
    assert _scheduler(POLICY_RR).order([4, 0]) == [4, 0]
    assert _scheduler(POLICY_RR).order([0, 4]) == [0, 4]


def test_unknown_streams_go_first_and_updates_apply() -> None:
    scheduler = _scheduler(POLICY_RFC9218)
    # HTTP/3 control stream 3 is not a request stream: it is never held back
    assert scheduler.order([0, 4, 3]) == [3, 4, 0]
    scheduler.update(0, Priority(0, False))
    assert scheduler.order([4, 0]) == [0, 4]  # same urgency: arrival order
