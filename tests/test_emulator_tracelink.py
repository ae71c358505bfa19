"""The traced serialiser and delay of one direction, driven with a fake clock."""

from __future__ import annotations

import random
from collections import deque

import pytest

from netem.emulator.tracelink import DelayCurve, TraceServer
from netem.trace import OPPORTUNITY_BYTES, CapacityTrace, parse_capacity, parse_delay

MS = 1e-3


def capacity(text: str) -> CapacityTrace:
    return parse_capacity(text.encode(), "t")


def served(server: TraceServer, offers: list[tuple[float, int]]) -> list[float]:
    """Departure times (ms, rounded to ns) of packets offered as (time s, size)."""
    return [round(server.serve(t, size) / MS, 6) for t, size in offers]


def test_full_packets_leave_one_per_opportunity() -> None:
    server = TraceServer(capacity("1\n"), origin_s=0.0)
    assert served(server, [(0.0, 1500)] * 4) == [1, 2, 3, 4]


def test_small_packets_share_an_opportunity_and_a_large_one_spans_several() -> None:
    server = TraceServer(capacity("1\n"), origin_s=0.0)
    # 3 x 500 share ms 1; 4000 takes the rest of nothing, then ms 2, 3, 4 (500 left at 4);
    # a 400-byte packet queued meanwhile takes 400 of those 500
    offers = [(0.0, 500), (0.0, 500), (0.0, 500), (0.0, 4000), (0.0005, 400), (0.0006, 200)]
    assert served(server, offers) == [1, 1, 1, 4, 4, 5]


def test_an_idle_link_loses_the_unused_bytes_of_an_opportunity() -> None:
    server = TraceServer(capacity("1\n"), origin_s=0.0)
    assert served(server, [(0.0, 500), (1.5 * MS, 500)]) == [1, 2]
    assert server.busy_until_s == pytest.approx(2 * MS)


def test_a_packet_arriving_at_an_opportunitys_instant_may_use_it() -> None:
    server = TraceServer(capacity("1\n"), origin_s=0.0)
    assert served(server, [(3 * MS, 1500)]) == [3]


def test_repeated_stamps_and_the_wrap() -> None:
    server = TraceServer(capacity("0\n0\n5\n"), origin_s=10.0)
    # opportunities at 0 0 5 | 5 5 10 | 10 10 15 ms after the origin
    departures = served(server, [(10.0, 1500)] * 8)
    assert [round(d - 10_000, 6) for d in departures] == [0, 0, 5, 5, 5, 10, 10, 10]


def test_the_offset_starts_the_trace_part_way_in() -> None:
    server = TraceServer(capacity("2\n3\n10\n"), origin_s=0.0, offset_s=2.5 * MS)
    # positions 2.5 ms on: 3 (t=0.5), 10 (7.5), 12 (9.5), 13 (10.5), 20 (17.5)
    assert served(server, [(0.0, 1500)] * 5) == [0.5, 7.5, 9.5, 10.5, 17.5]


def test_an_offset_beyond_the_period_wraps() -> None:
    a = TraceServer(capacity("2\n3\n10\n"), origin_s=0.0, offset_s=2.5 * MS)
    b = TraceServer(capacity("2\n3\n10\n"), origin_s=0.0, offset_s=32.5 * MS)
    offers = [(0.0, 1500)] * 5
    assert served(a, offers) == served(b, offers)


def test_a_new_server_starts_after_the_packets_queued_before() -> None:
    server = TraceServer(capacity("1\n"), origin_s=0.0, busy_until_s=4.2 * MS)
    assert served(server, [(1 * MS, 1500)]) == [5]


def mm_link_departures(stamps: list[int], offers: list[tuple[int, int]]) -> list[int]:
    """A literal port of Mahimahi's ``LinkQueue::rationalize`` (src/frontend/link_queue.cc),
    in whole milliseconds, with 1,500-byte opportunities: ``offers`` are (arrival stamp,
    size), the departures are the delivery instants, in order."""
    period, n = stamps[-1], len(stamps)
    state = {"next": 0, "base": 0}
    queue: deque[list[int]] = deque()
    in_transit: list[int] | None = None
    out: list[int] = []

    def next_time() -> int:
        return stamps[state["next"]] + state["base"]

    def rationalize(now: int) -> None:
        nonlocal in_transit
        while next_time() <= now:
            this_delivery = next_time()
            left = OPPORTUNITY_BYTES
            state["next"] = (state["next"] + 1) % n
            if state["next"] == 0:
                state["base"] += period
            while left > 0:
                if in_transit is None:
                    if not queue:
                        break
                    in_transit = queue.popleft()
                in_transit[0] -= left
                left = 0
                if in_transit[0] <= 0:
                    left = -in_transit[0]
                    out.append(this_delivery)
                    in_transit = None

    for stamp, size in offers:
        rationalize(stamp)
        queue.append([size])
    while queue or in_transit is not None:  # on, one opportunity at a time, until all left
        rationalize(next_time())
    return out


@pytest.mark.parametrize("seed", range(20))
def test_departures_match_a_port_of_mm_link(seed: int) -> None:
    """Random traces (repeated stamps, wraps) and traffic (40-4000 bytes, bursts and idle
    spells). Arrivals half-way through a millisecond, where mm-link's whole-millisecond
    stamps and this continuous clock agree on which opportunities a packet may use."""
    rng = random.Random(seed)
    stamps = sorted(rng.randrange(0, 40) for _ in range(rng.randrange(1, 30)))
    stamps[-1] = max(stamps[-1], 1)
    offers, now = [], 0
    for _ in range(300):
        now += rng.choice((0, 0, 0, 1, 2, 7, 30))
        offers.append((now, rng.choice((40, 52, 600, 1200, 1500, 1500, 3000, 4000))))
    server = TraceServer(parse_capacity("\n".join(map(str, stamps)).encode(), "t"), 0.0)
    ours = [server.serve((stamp + 0.5) * MS, size) / MS for stamp, size in offers]
    assert [round(d, 6) for d in ours] == mm_link_departures(stamps, offers)


def test_delay_curve_steps_and_interpolates_on_the_trace_clock() -> None:
    trace = parse_delay(b"0 10\n10 20\n20 5\n", "d")
    step = DelayCurve(trace, origin_s=100.0, offset_s=5 * MS)
    linear = DelayCurve(trace, origin_s=100.0, offset_s=5 * MS, interp="linear")
    assert step.delay_s(100.0) == pytest.approx(10 * MS)  # position 5 ms
    assert step.delay_s(100.006) == pytest.approx(20 * MS)  # position 11 ms
    assert linear.delay_s(100.0) == pytest.approx(15 * MS)
    assert step.delay_s(100.0 + 0.030) == pytest.approx(10 * MS)  # wrapped to 5 ms
