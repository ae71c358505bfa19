"""netem.traceclock: positions from the emulator's trace report."""

from __future__ import annotations

import pytest

from netem.traceclock import TraceClock, clocks_of
from tbcore.errors import SpecError


def test_a_position_is_the_offset_plus_the_time_since_the_origin() -> None:
    clock = TraceClock(origin_s=100.0, offset_s=12.5)
    assert clock.position_s(100.0) == 12.5
    assert clock.position_s(103.25) == 15.75
    assert clock.position_s(99.0) == 12.5  # before the origin: the origin


def test_the_report_gives_a_clock_per_traced_direction() -> None:
    report = {"up": {"origin_s": 5.0, "offset_s": 1.0, "rate_trace": {}}, "down": None}
    clocks = clocks_of(report)
    assert set(clocks) == {"up"} and clocks["up"] == TraceClock(5.0, 1.0)
    assert clocks_of({}) == {} and clocks_of(None) == {}


@pytest.mark.parametrize(
    "report",
    [{"up": {"origin_s": 1.0}}, {"up": "x"}, {"down": {"origin_s": "a", "offset_s": 0}}],
)
def test_a_bad_report_is_refused(report: dict) -> None:
    with pytest.raises((SpecError, ValueError)):
        clocks_of(report)


def test_a_clock_checks_its_numbers() -> None:
    with pytest.raises(SpecError, match="offset_s"):
        TraceClock(1.0, -1.0)
    with pytest.raises(SpecError, match="origin_s"):
        TraceClock(float("nan"), 0.0)


@pytest.mark.root
@pytest.mark.timeout(120)
def test_a_live_link_reports_where_its_traces_restarted() -> None:
    """Link.set_spec restarts a traced direction at its offset and returns its clock;
    Link.trace() reports the same clock; a direction without a trace has none."""
    import time

    from netem import clean
    from netem.link import Link
    from netem.linkspec import resolve_link

    name = "tbxtrc"
    clean.clean(name, force=True)
    spec = resolve_link("rtt=20ms,up.rate=trace:cell-markov.up,down.rate=10mbit")
    try:
        with Link.up(name, spec, backend="userspace") as link:
            before = time.monotonic()
            moved = resolve_link(
                "rtt=20ms,up.rate=trace:cell-markov.up,up.trace_offset=7s,down.rate=10mbit"
            )
            clocks = link.set_spec(moved)
            assert set(clocks) == {"up"}
            assert clocks["up"].offset_s == 7.0
            assert before <= clocks["up"].origin_s <= time.monotonic()
            assert link.trace() == clocks
            assert clocks["up"].position_s(clocks["up"].origin_s + 1.5) == 8.5
    finally:
        clean.clean(name, force=True)
