"""harness.run.remote.clocksync: the offset of a remote clock from NTP-style exchanges, on fake
clocks."""

from __future__ import annotations

import random

import pytest

from harness.run.remote import clocksync
from harness.run.remote.clocksync import ClockOffset, Exchange
from tbcore.errors import SpecError

TRUE_OFFSET_S = 1234.567  # the remote's monotonic clock started 20 min before ours


def exchange(at_s: float, up_s: float, hold_s: float, down_s: float) -> Exchange:
    """One exchange on two fake clocks ``TRUE_OFFSET_S`` apart: the request takes ``up_s``,
    the remote holds it ``hold_s``, the answer takes ``down_s``."""
    return Exchange(
        sent_s=at_s,
        received_s=at_s + up_s + TRUE_OFFSET_S,
        replied_s=at_s + up_s + hold_s + TRUE_OFFSET_S,
        returned_s=at_s + up_s + hold_s + down_s,
    )


def test_a_symmetric_exchange_gives_the_offset_exactly() -> None:
    one = exchange(10.0, 0.1, 0.002, 0.1)
    assert one.rtt_s == pytest.approx(0.2)
    assert one.offset_s == pytest.approx(TRUE_OFFSET_S)


def test_an_asymmetric_path_stays_within_half_the_round_trip() -> None:
    # 14 % loss one way and a queue the other: 180 ms up, 20 ms down
    estimate = clocksync.estimate([exchange(10.0, 0.18, 0.001, 0.02)])
    assert estimate.offset_s != pytest.approx(TRUE_OFFSET_S, abs=0.05)
    assert abs(estimate.offset_s - TRUE_OFFSET_S) <= estimate.error_s
    assert estimate.error_s == pytest.approx(0.1, abs=1e-5)


def test_the_smallest_round_trip_wins() -> None:
    rng = random.Random(7)
    exchanges = [
        exchange(10.0 + i, 0.1 + rng.uniform(0, 0.05), 0.001, 0.1 + rng.uniform(0, 0.08))
        for i in range(16)
    ]
    best = min(exchanges, key=lambda e: e.rtt_s)
    estimate = clocksync.estimate(exchanges)
    assert estimate.samples == 16
    assert estimate.min_rtt_s == pytest.approx(best.rtt_s)
    assert estimate.offset_s == pytest.approx(best.offset_s)
    assert abs(estimate.offset_s - TRUE_OFFSET_S) <= estimate.error_s


def test_the_bound_widens_with_age() -> None:
    estimate = clocksync.estimate([exchange(10.0, 0.1, 0.0, 0.1)])
    assert estimate.error_at(estimate.at_client_s + 100) == pytest.approx(
        estimate.error_s + 100 * clocksync.PHI_S_PER_S
    )


@pytest.mark.parametrize(
    ("stamps", "reason"),
    [
        ((10.0, 5.0, 5.1, 9.9), "came back before"),
        ((10.0, 5.1, 5.0, 10.2), "answered before"),
        ((10.0, 5.0, 5.5, 10.2), "longer than its round trip"),
    ],
)
def test_stamps_no_clock_can_give_are_refused(
    stamps: tuple[float, float, float, float], reason: str
) -> None:
    with pytest.raises(SpecError, match=reason):
        clocksync.estimate([Exchange(*stamps)])


def test_no_exchange_is_refused() -> None:
    with pytest.raises(SpecError, match=r"^exchanges: "):
        clocksync.estimate([])


def offset(error_s: float) -> ClockOffset:
    return ClockOffset(
        offset_s=TRUE_OFFSET_S, error_s=error_s, min_rtt_s=0.2, samples=8, at_client_s=0.0
    )


def test_one_way_delays_on_the_client_clock() -> None:
    clock = offset(0.001)
    up = clocksync.one_way_delay(1.0, clock.to_client_s(1.1 + TRUE_OFFSET_S), clock)
    down = clocksync.one_way_delay(clock.to_client_s(1.2 + TRUE_OFFSET_S), 1.3, clock)
    assert up.delay_s == pytest.approx(0.1) and down.delay_s == pytest.approx(0.1)
    assert not up.negative and not down.negative


def test_a_negative_one_way_delay_is_flagged_never_passed_on() -> None:
    # a 2 ms delay measured with a 5 ms offset error can come out at -1 ms: flagged, possible
    clock = offset(0.005)
    within = clocksync.one_way_delay(1.0, clock.to_client_s(0.999 + TRUE_OFFSET_S), clock)
    assert within.negative and not within.impossible
    # -20 ms with a 5 ms error: the clocks (or the estimate) are wrong
    beyond = clocksync.one_way_delay(1.0, clock.to_client_s(0.98 + TRUE_OFFSET_S), clock)
    assert beyond.negative and beyond.impossible
