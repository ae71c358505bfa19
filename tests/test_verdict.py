"""Verdicts as statistics: an interval inside, outside or across the tolerance band; too few
runs; decisions against a deadline; orders; computations at the chapter's precision."""

from __future__ import annotations

import math

import pytest

from harness.report import verdict as v

TEN = v.Tolerance(relative=0.10, reason="r")


def test_an_interval_inside_the_band_reproduces() -> None:
    out = v.judge_interval(10.0, v.Estimate(10.2, 9.8, 10.6, 8), TEN, "s")
    assert out.verdict == v.REPRODUCED and "inside the band 9 to 11 s" in out.detail


def test_an_interval_outside_the_band_differs_with_its_side() -> None:
    out = v.judge_interval(10.0, v.Estimate(12.5, 12.0, 13.0, 8), TEN, "s")
    assert out.verdict == v.DIFFERS and "above the band" in out.detail and "+25.0%" in out.detail
    below = v.judge_interval(10.0, v.Estimate(7.0, 6.5, 7.5, 8), TEN, "s")
    assert below.verdict == v.DIFFERS and "below the band" in below.detail


def test_a_straddling_interval_is_inconclusive_and_says_how_many_runs_decide() -> None:
    out = v.judge_interval(10.0, v.Estimate(10.5, 9.9, 11.3, 6), TEN, "s")
    assert out.verdict == v.INCONCLUSIVE and out.runs_needed is not None
    assert out.runs_needed > 6 and f"about {out.runs_needed} runs" in out.detail


def test_one_run_never_reproduces_however_close() -> None:
    out = v.judge_interval(10.0, v.Estimate(10.0, runs=1), TEN, "s")
    assert out.verdict == v.INCONCLUSIVE and out.runs_needed == v.MIN_RUNS
    assert out.detail.startswith("n = 1:")
    far = v.judge_interval(10.0, v.Estimate(20.0, runs=2), TEN, "s")
    assert far.verdict == v.INCONCLUSIVE


def test_no_run_is_not_measurable() -> None:
    assert v.judge_interval(10.0, v.Estimate(math.nan), TEN, "s").verdict == v.NOT_MEASURABLE


def test_runs_to_decide_shrinks_the_interval_by_the_square_root() -> None:
    # half-width 1.0, margin 0.5: four times the runs halve the half-width
    assert v.runs_to_decide(v.Estimate(10.5, 9.5, 11.5, 6), 9.0, 11.0) == 24
    assert v.runs_to_decide(v.Estimate(11.0, 10.0, 12.0, 6), 9.0, 11.0) is None


def test_a_decision_is_fragile_where_its_interval_crosses_the_deadline() -> None:
    meets = v.judge_decision(v.Estimate(34.0, 33.0, 35.0, 6), 45.0, chapter_meets=True)
    assert meets.verdict == v.REPRODUCED and meets.detail.startswith("meets 45 s")
    wrong = v.judge_decision(v.Estimate(44.0, 43.5, 44.5, 6), 45.0, chapter_meets=False)
    assert wrong.verdict == v.DIFFERS and "the chapter: misses" in wrong.detail
    fragile = v.judge_decision(v.Estimate(44.8, 44.0, 46.0, 6), 45.0, chapter_meets=True)
    assert fragile.verdict == v.INCONCLUSIVE and fragile.detail.startswith("fragile")
    few = v.judge_decision(v.Estimate(30.0, runs=2), 45.0, chapter_meets=True)
    assert few.verdict == v.INCONCLUSIVE


def test_an_order_needs_six_runs_an_arm() -> None:
    assert v.judge_order(True, 2, "x").verdict == v.INCONCLUSIVE
    assert v.judge_order(True, 6, "x").verdict == v.REPRODUCED
    assert v.judge_order(False, 6, "x").verdict == v.DIFFERS
    assert v.judge_order(True, 0, "x").verdict == v.NOT_MEASURABLE


@pytest.mark.parametrize(
    ("printed", "half"),
    [("0.179", 0.0005), ("84.8", 0.05), ("144", 0.5), ("39,554,832", 0.5), ("-3.7", 0.05)],
)
def test_the_precision_is_half_the_printed_last_digit(printed: str, half: float) -> None:
    assert v.precision_of(printed) == pytest.approx(half)


def test_a_computation_is_judged_at_the_chapters_precision() -> None:
    assert v.judge_computed(0.179, 0.17853, 0.0005, "s").verdict == v.REPRODUCED
    wrong = v.judge_computed(0.179, 0.1797, 0.0005, "s")
    assert wrong.verdict == v.DIFFERS and "precision ±0.0005" in wrong.detail
    assert v.judge_computed(1.0, math.nan, 0.05, "s").verdict == v.ERROR


def test_a_tolerance_says_its_size_and_reason() -> None:
    assert TEN.describe("s") == "±10% (r)"
    both = v.Tolerance(relative=0.05, absolute=4.0, reason="spread")
    assert both.band(10.0) == (6.0, 14.0) and both.describe("ms") == "±5% or ±4 ms (spread)"
