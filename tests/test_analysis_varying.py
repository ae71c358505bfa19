"""harness.analysis.varying: the deadline's probability with its exact interval, slow rounds
in runs, and the request beside competing traffic, on hand-made tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis.varying import competition, deadline, round_runs


def _runs(level: str, totals: list[float], **columns: list[object]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "run_id": [f"{level}-{i}" for i in range(len(totals))],
            "level": level,
            "total_s": totals,
            "valid": True,
            "warmup": False,
        }
    )
    for name, values in columns.items():
        frame[name] = values
    return frame


def test_the_deadlines_probability_and_its_clopper_pearson_interval() -> None:
    frame = _runs("trace", [30.0, 40.0, 44.0, 46.0, 50.0], bound_s=[28, 30, 31, 44, 46])
    frame.loc[4, "valid"] = False  # left out
    result = deadline(frame, "trace", 45.0)
    assert result is not None
    assert (result.runs, result.met, result.probability) == (4, 3, 0.75)
    # exact binomial interval of 3 of 4 (scipy's binomtest, method="exact")
    assert result.ci_low == pytest.approx(0.19412, abs=1e-4)
    assert result.ci_high == pytest.approx(0.99369, abs=1e-4)
    assert (result.median_s, result.max_s) == (42.0, 46.0)
    assert result.bound_met == 4
    assert deadline(frame, "other", 45.0) is None


def test_all_runs_meeting_it_still_leave_an_interval_below_one() -> None:
    result = deadline(_runs("c", [30.0] * 10), "c", 45.0)
    assert result is not None and result.probability == 1.0
    assert result.ci_high == 1.0
    assert result.ci_low == pytest.approx(0.025 ** (1 / 10))


def _rounds(run: str, times: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": run,
            "round": range(len(times)),
            "attempt": 0,
            "network_s": times,
            "network_bound_s": [t / 1.25 for t in times],
            "offered_up_bps": [8e6 / t for t in times],
        }
    )


def test_slow_rounds_in_runs_correlate_and_independent_ones_do_not() -> None:
    runs = _runs("trace", [1.0, 1.0])
    spells = pd.concat(
        [
            _rounds("trace-0", [1, 1, 1, 3, 3, 3, 1, 1, 1, 3, 3, 3]),
            _rounds("trace-1", [3, 3, 1, 1] * 3),
        ]
    )
    result = round_runs(spells, runs, "trace")
    assert result is not None and result.rounds == 24
    assert result.lag1 > 0.2
    assert result.p_slow_after_slow > result.p_slow
    assert result.ratio_median == pytest.approx(1.25)
    alternating = pd.concat([_rounds("trace-0", [1, 3] * 6), _rounds("trace-1", [3, 1] * 6)])
    flip = round_runs(alternating, runs, "trace")
    assert flip is not None and flip.lag1 < -0.9 and flip.p_slow_after_slow == 0.0


def test_competition_against_the_levels_alone() -> None:
    frame = pd.concat(
        [
            _runs("alone", [1.4, 1.5, 1.6], cross=[None] * 3),
            _runs(
                "cubic-1",
                [3.0, 3.2],
                cross=["tcp:1:cubic"] * 2,
                bound_s=[1.45, 1.45],
                fair_share=[0.5, 0.5],
                request_share=[0.02, 0.04],
                cross_bps=[48e6, 50e6],
                standing_queue_s=[0.07, 0.09],
                bound_fair_s=[2.0, 2.2],
                ratio_fair=[1.5, 1.45],
            ),
        ]
    )
    (result,) = competition(frame, ["alone", "cubic-1"])
    assert result.level == "cubic-1" and result.cross == "tcp:1:cubic"
    assert result.alone_s == 1.5 and result.slowdown == pytest.approx(3.1 / 1.5)
    assert result.request_share == pytest.approx(0.03)
    assert result.standing_queue_s == pytest.approx(0.08)
    assert competition(frame[frame["level"] == "cubic-1"], ["cubic-1"])[0].alone_s != 1.5
    assert math.isnan(competition(frame[frame["level"] == "cubic-1"], ["cubic-1"])[0].slowdown)
