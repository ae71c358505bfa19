"""harness.analysis.attempts: tasks and their attempts from rounds.csv, E / C with its
bootstrap interval over tasks, and the tasks a mean of attempts needs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis import attempts


def _rounds(tasks: list[list[tuple[float, str]]], run_id: str = "r0") -> pd.DataFrame:
    """One-round tasks, one after the other: per task its attempts' (time, verdict)."""
    rows, now, attempt = [], 100.0, 0
    rows.append(dict(run_id=run_id, round=0, attempt=0, task=None, task_outcome=None,
                     warmup=True, start_s=99.0, end_s=99.5))  # fmt: skip
    for task, tries in enumerate(tasks):
        for took, verdict in tries:
            rows.append(dict(run_id=run_id, round=task + 1, attempt=attempt, task=task,
                             task_outcome=verdict, warmup=False, start_s=now,
                             end_s=now + took))  # fmt: skip
            now += took + 0.001  # the client's own step between attempts
            attempt += 1
    return pd.DataFrame(rows)


def test_a_task_is_its_attempts_and_the_time_between_them() -> None:
    frame = _rounds([[(1.0, "failed"), (1.0, "done")], [(2.0, "done")]])
    tasks = attempts.task_table(frame)
    assert list(tasks["attempts"]) == [2, 1]
    assert list(tasks["task_s"]) == pytest.approx([2.001, 2.0])
    assert list(tasks["attempts_s"]) == pytest.approx([2.0, 2.0])


def test_e_over_c_is_the_mean_task_over_the_mean_attempt() -> None:
    """Equal attempts, one task in four failing once: E / C = 5 / 4, with an interval."""
    tasks = [[(1.0, "failed"), (1.0, "done")]] + [[(1.0, "done")]] * 3
    costs = attempts.attempt_costs(attempts.task_table(_rounds(tasks * 10)))
    assert (costs.tasks, costs.attempts, costs.runs) == (40, 50, 1)
    assert costs.attempt_s == pytest.approx(1.0)
    assert costs.ratio == pytest.approx(1.25, abs=1e-3)
    assert costs.low < 1.25 < costs.high and costs.high - costs.low < 0.5


def test_an_unfinished_task_is_left_out_and_no_task_is_an_error() -> None:
    frame = _rounds([[(1.0, "done")], [(1.0, "failed")]])
    assert len(attempts.task_table(frame)) == 1
    with pytest.raises(ValueError, match="no finished task"):
        attempts.attempt_costs(attempts.task_table(_rounds([[(1.0, "failed")]])))
    one = attempts.attempt_costs(attempts.task_table(_rounds([[(1.0, "done")]])))
    assert math.isnan(one.low)


def test_rounds_without_tasks_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="task_outcome"):
        attempts.task_table(pd.DataFrame({"run_id": [], "task": [], "attempt": []}))


def test_tasks_to_decide_follow_the_geometric_variance() -> None:
    """1.96^2 (1 - p) / (p h)^2: about 1,570 tasks for +-0.005 at 99 %, 308 for +-0.0625
    at 80 %."""
    assert attempts.tasks_to_decide(0.99, 0.005) == pytest.approx(1568, abs=2)
    assert attempts.tasks_to_decide(0.8, 0.0625) == pytest.approx(308, abs=2)


def test_tasks_that_met_no_failure_still_get_an_interval_of_their_count() -> None:
    """100 tasks and no failure drawn (what p = 0.99 gives 37 % of the time): the
    bootstrap alone would say E / C is exactly 1; the exact interval of the count says
    up to 1.037."""
    costs = attempts.attempt_costs(attempts.task_table(_rounds([[(0.5, "done")]] * 100)))
    assert costs.ratio == pytest.approx(1.0) and costs.low == pytest.approx(1.0)
    assert costs.high == pytest.approx(1.0 / 0.96378, abs=1e-4)
    low, high = attempts.count_ratio_ci(2400, 3004)
    assert low < 3004 / 2400 < high and high - low < 0.05
