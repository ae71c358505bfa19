"""harness.collect.traces: a run's trace clocks from run.json, where its traces were when its
work began, and what they offered while it ran."""

from __future__ import annotations

import pytest

from harness.collect.traces import positions_at, run_clocks, trace_columns
from harness.spec.paths import topology_of
from netem.traceclock import TraceClock
from tbcore.settings import Settings

PATH = topology_of(Settings(link="rtt=200ms,up.rate=trace:const-12mbit.up,down.rate=5mbit"), "test")


def test_the_primary_edges_clocks_from_run_json() -> None:
    run = {"traces": {"link": {"up": {"origin_s": 10.0, "offset_s": 1.0}}}}
    assert run_clocks(run) == {"up": TraceClock(10.0, 1.0)}
    assert run_clocks({}) == {} and run_clocks({"traces": {}}) == {}


def test_positions_at_a_moment() -> None:
    clocks = {"up": TraceClock(10.0, 1.0)}
    assert positions_at(clocks, 12.5) == {"up": 3.5}
    assert positions_at(clocks, None) == {}


def test_trace_columns_say_where_and_what_was_offered() -> None:
    clocks = {"up": TraceClock(10.0, 1.0)}
    out = trace_columns(PATH, clocks, 12.0, 14.0)
    assert out["trace_position_up_s"] == 3.0
    assert out["offered_up_bps"] == pytest.approx(12e6, rel=1e-3)
    assert out["offered_down_bps"] == pytest.approx(5e6)  # a fixed rate: itself
    assert "trace_position_down_s" not in out
    assert trace_columns(PATH, {}, 12.0, 14.0) == {}
    assert trace_columns(PATH, clocks, None, None) == {}


def test_a_handshake_may_wait_for_the_longest_gap_between_opportunities() -> None:
    from harness.collect.traces import handshake_slack_s

    assert handshake_slack_s(PATH) == pytest.approx(0.001)  # "1": one every millisecond
    slow = topology_of(
        Settings(link="rtt=200ms,up.rate=trace:cell-slow.up,down.rate=trace:cell-dips.down"),
        "t",
    )
    assert handshake_slack_s(slow) > 0.008  # 1.5 Mbit/s: 8 ms between opportunities
    assert handshake_slack_s(topology_of(Settings(link="rtt=200ms,rate=5mbit"), "t")) == 0.0
    assert handshake_slack_s(None) == 0.0
