"""harness.spec.traces: where each run starts in its traces (trace_start), and what is refused."""

from __future__ import annotations

import pytest

from harness.spec.experiment import loads
from harness.spec.paths import topology_of
from harness.spec.traces import run_path, start_shift_s
from tbcore.errors import SpecError
from tbcore.settings import Settings

TRACED = "rtt=200ms,up.rate=trace:cell-markov.up,down.rate=10mbit"


def _settings(**values: object) -> Settings:
    return Settings.from_table({"link": TRACED, **values}, "fixed")


def _file(fixed: str, levels: str, repetitions: int = 4, quick: str = "") -> str:
    return f"""
name = "t"
question = "q"
repetitions = {repetitions}
[fixed]
{fixed}
[factor]
name = "f"
settings = ["link", "trace_start"]
levels = [{levels}]
{quick}
"""


def test_spread_starts_repetition_r_of_r_at_r_over_r_of_the_period() -> None:
    settings = _settings(trace_start="spread")
    path = topology_of(settings, "fixed")  # cell-markov.up: a 40 s period
    assert [start_shift_s(settings, path, r, 4) for r in range(4)] == [0.0, 10.0, 20.0, 30.0]
    assert start_shift_s(settings, path, -1, 4) == 0.0  # a warm-up run: at the offset
    moved = run_path(path, settings, 3, 4)
    assert moved.link_spec.up.trace_offset_s == 30.0
    assert moved.link_spec.down == path.link_spec.down  # no trace there: untouched
    assert run_path(path, settings, 0, 4) is path


def test_fixed_keeps_every_run_at_the_links_offset() -> None:
    settings = Settings.from_table({"link": TRACED + ",up.trace_offset=5s"}, "fixed")
    path = topology_of(settings, "fixed")
    assert run_path(path, settings, 3, 4) is path
    assert path.link_spec.up.trace_offset_s == 5.0


def test_spread_adds_to_the_offset_a_link_gives() -> None:
    settings = Settings.from_table(
        {"link": TRACED + ",up.trace_offset=5s", "trace_start": "spread"}, "fixed"
    )
    path = topology_of(settings, "fixed")
    assert run_path(path, settings, 1, 2).link_spec.up.trace_offset_s == 25.0


def test_spread_without_a_trace_or_over_one_repetition_is_refused() -> None:
    levels = (
        '{ name = "a", link = "up.rate=trace:cell-markov.up", trace_start = "spread" }, '
        '{ name = "b", link = "up.rate=5mbit", trace_start = "spread" }'
    )
    with pytest.raises(SpecError, match=r"factor.levels.b.trace_start: spread has no effect"):
        loads(_file('link = "rtt=200ms,rate=10mbit"', levels))
    good = (
        '{ name = "a", link = "up.rate=trace:cell-markov.up", trace_start = "spread" }, '
        '{ name = "b", link = "up.rate=5mbit", trace_start = "fixed" }'
    )
    spec = loads(_file('link = "rtt=200ms,rate=10mbit"', good))
    assert spec.level("a").settings.trace_start == "spread"
    with pytest.raises(SpecError, match=r"^repetitions: trace_start = spread needs at least 2"):
        loads(_file('link = "rtt=200ms,rate=10mbit"', good, repetitions=1))
    quick = "[quick]\nrepetitions = 1"
    with pytest.raises(SpecError, match=r"^quick\.repetitions: trace_start = spread"):
        loads(_file('link = "rtt=200ms,rate=10mbit"', good, quick=quick))
    # --reps 1 on the command line is taken as given: the one run starts at the offset
    assert spec.with_repetitions(1).repetitions == 1
