"""Scheduled link events: the spec, its string form, and the per-direction timeline."""

from __future__ import annotations

import math

import pytest
from support_inputs import assert_spec_error

from netem.events import (
    DirectionTimeline,
    LinkEvent,
    Outage,
    RateChange,
    ScheduledEvent,
    parse_event,
)
from tbcore.errors import SpecError


def test_outage_string_resolves_to_absolute_times() -> None:
    event = parse_event("outage:at=2s,for=1s")
    assert event == Outage(at_s=2.0, duration_s=1.0)
    scheduled = event.resolve(100.0)
    assert (scheduled.start_s, scheduled.end_s) == (102.0, 103.0)
    assert scheduled.directions == ("up", "down")
    assert scheduled.covers(102.0) and scheduled.covers(102.999) and not scheduled.covers(103.0)


def test_rate_event_for_good_and_one_direction() -> None:
    event = parse_event("rate:at=5s,rate=10mbit,dir=up")
    assert event.rate_bps == 10e6 and event.directions == ("up",)
    assert math.isinf(event.resolve(0.0).end_s)
    assert event.resolve(0.0).to_dict()["end_s"] is None


def test_spread_start_is_seeded() -> None:
    a = parse_event("outage:at=1s,spread=4s,for=1s,seed=7")
    b = parse_event("outage:at=1s,spread=4s,for=1s,seed=7")
    c = parse_event("outage:at=1s,spread=4s,for=1s,seed=8")
    assert a.resolve(0.0).start_s == b.resolve(0.0).start_s
    assert a.resolve(0.0).start_s != c.resolve(0.0).start_s
    assert 1.0 <= a.resolve(0.0).start_s < 5.0


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("outage:at=1s", "event.duration_s"),
        ("rate:at=1s", "event.rate_bps"),
        ("blackout:at=1s,for=1s", "event.kind"),
        ("outage:at=1s,for=0s", "event.duration_s"),
        ("outage:at=1s,for=1s,dir=left", "event.directions"),
        ("outage:at=1s,for=1s,dir=up+up", "event.directions"),
        ("outage:at=1,for=1s", "event.at"),
        ("outage:at=1s,for=1s,colour=red", "event.colour"),
        ("outage:at=1s,for=1s,at=2s", "event.at"),
        ("outage:at=1s,for=1s,rate=1mbit", "event.rate_bps"),
    ],
)
def test_bad_events_name_the_field(text: str, field: str) -> None:
    assert_spec_error(lambda: parse_event(text), field)


def test_dict_round_trip_and_unknown_keys() -> None:
    event = RateChange(at_s=1.0, duration_s=2.0, rate_bps=1e6, directions=("down",))
    assert LinkEvent.from_dict(event.to_dict()) == event
    with pytest.raises(SpecError, match="unknown event key"):
        LinkEvent.from_dict({"kind": "outage", "duration_s": 1.0, "when": 3})
    scheduled = event.resolve(10.0)
    assert ScheduledEvent.from_dict(scheduled.to_dict()) == scheduled


def test_timeline_outage_and_rate_windows() -> None:
    timeline = DirectionTimeline("up")
    outage = Outage(at_s=1.0, duration_s=1.0).resolve(0.0)
    assert timeline.add(outage)
    assert not timeline.add(RateChange(rate_bps=5e6, directions=("down",)).resolve(0.0))
    timeline.add(RateChange(at_s=3.0, duration_s=2.0, rate_bps=1e6).resolve(0.0))
    timeline.add(RateChange(at_s=4.0, rate_bps=2e6).resolve(0.0))
    assert timeline.outage_at(0.5) is None
    assert timeline.outage_at(1.5) is outage
    assert timeline.outage_at(2.0) is None
    assert timeline.rate_at(2.9, 20e6) == 20e6
    assert timeline.rate_at(3.5, 20e6) == 1e6
    assert timeline.rate_at(4.5, 20e6) == 2e6  # the later-starting event wins
    assert timeline.rate_at(9.0, 20e6) == 2e6  # and stays
    timeline.count_drop(outage)
    assert outage.dropped_packets == {"up": 1}


def test_end_events_ends_running_and_cancels_future_ones() -> None:
    from netem.events import end_events

    running = Outage(at_s=0.0, duration_s=10.0).resolve(0.0)
    future = Outage(at_s=20.0, duration_s=1.0).resolve(0.0)
    past = Outage(at_s=0.0, duration_s=1.0).resolve(0.0)
    timeline = DirectionTimeline("up")
    for event in (running, future, past):
        timeline.add(event)
    assert end_events([running, future, past], 5.0) == [running, future]
    timeline.refresh()
    assert (running.end_s, future.end_s, past.end_s) == (5.0, 20.0, 1.0)
    assert timeline.outage_at(4.9) is running
    assert timeline.outage_at(5.0) is None and timeline.outage_at(20.0) is None
