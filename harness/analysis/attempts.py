"""Independent attempts (the chapter's §12.5.2, docs/models.md section 18): what a task
costs when each attempt succeeds with probability p and a failed one is redone whole.

From the rounds of runs made with ``task_success`` (rounds.csv): per task, its time (the
first round's start to the action that ended its successful attempt), its attempts, and
their times. The mean task time over the mean attempt time is E / C, the chapter's 1 / p;
its 95 % interval is a percentile bootstrap over tasks (each task resampled with its
attempts: tbcore.stats.paired_ci), so the time between attempts and any attempt that costs
more than another are in it, not assumed away; widened, where it is narrower, to the exact
interval of the attempts' count at the measured time per attempt (a resample of tasks that
met no failure has no spread at all).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from tbcore.stats import CONFIDENCE, paired_ci

BOOTSTRAP_SEED = 64
"""Fixed, so that a report rebuilt from the same runs gives the same interval."""


@dataclass(frozen=True)
class AttemptCosts:
    tasks: int
    attempts: int
    runs: int
    task_s: float
    """Mean time of a task, its failed attempts included (E)."""
    attempt_s: float
    """Mean time of one attempt (C)."""
    ratio: float
    """E / C."""
    low: float
    high: float
    """The 95 % interval of :attr:`ratio` (NaN below two tasks)."""


def task_table(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per task of each run (``run_id``, ``task``): ``task_s``, ``attempts`` and
    ``attempts_s`` (the sum of its attempts' own times) from acknowledged measured rounds
    that carry a task; a task without a successful attempt (no round judged done) is left
    out, as unfinished."""
    need = {"run_id", "task", "attempt", "start_s", "end_s", "task_outcome"}
    missing = sorted(need - set(rounds.columns))
    if missing:
        raise ValueError(f"rounds.csv lacks {', '.join(missing)} (a run before task_success)")
    done = rounds[rounds["task"].notna() & rounds["end_s"].notna()].copy()
    if "warmup" in done:
        done = done[~done["warmup"].astype(str).eq("True")]
    done["task"] = done["task"].astype(int)
    per_attempt = done.groupby(["run_id", "task", "attempt"]).agg(
        start_s=("start_s", "min"), end_s=("end_s", "max")
    )
    per_attempt["attempt_s"] = per_attempt["end_s"] - per_attempt["start_s"]
    ended = done[done["task_outcome"].astype(str).eq("done")]
    ended = ended.groupby(["run_id", "task"])["end_s"].max()
    tasks = per_attempt.groupby(["run_id", "task"]).agg(
        start_s=("start_s", "min"), attempts=("attempt_s", "size"), attempts_s=("attempt_s", "sum")
    )
    tasks = tasks.join(ended.rename("done_s"), how="inner")
    tasks["task_s"] = tasks["done_s"] - tasks["start_s"]
    return tasks.reset_index()[["run_id", "task", "task_s", "attempts", "attempts_s"]]


def _ratio(task_s: np.ndarray, attempts: np.ndarray, attempts_s: np.ndarray) -> float:
    """E / C of resampled tasks: their mean time over the mean time of their attempts."""
    return float(task_s.mean() / (attempts_s.sum() / attempts.sum()))


def attempt_costs(tasks: pd.DataFrame) -> AttemptCosts:
    """E / C of :func:`task_table`'s tasks with its interval (the bootstrap's, widened to the
    count's exact one)."""
    if tasks.empty:
        raise ValueError("no finished task")
    task_s = tasks["task_s"].to_numpy(dtype=float)
    attempts = tasks["attempts"].to_numpy(dtype=float)
    attempts_s = tasks["attempts_s"].to_numpy(dtype=float)
    ratio = float(_ratio(task_s, attempts, attempts_s))
    low, high = paired_ci((task_s, attempts, attempts_s), _ratio, seed=BOOTSTRAP_SEED)
    if len(tasks) >= 2:
        # the failures are rare events a resample cannot show when none (or few) were drawn:
        # the exact interval of the attempts' count, at the measured time per attempt, too
        time_factor = ratio / (attempts.sum() / len(tasks))
        count_low, count_high = count_ratio_ci(len(tasks), int(attempts.sum()))
        low = min(low, time_factor * count_low)
        high = max(high, time_factor * count_high)
    return AttemptCosts(
        tasks=len(tasks),
        attempts=int(attempts.sum()),
        runs=int(tasks["run_id"].nunique()),
        task_s=float(task_s.mean()),
        attempt_s=float(attempts_s.sum() / attempts.sum()),
        ratio=ratio,
        low=low,
        high=high,
    )


def count_ratio_ci(tasks: int, attempts: int) -> tuple[float, float]:
    """The 95 % interval of attempts per task, 1 / p: ``tasks`` successes among ``attempts``
    independent attempts, p's exact (Clopper-Pearson) interval inverted. With no failure
    drawn (100 tasks, 100 attempts) it still reaches 1.037: a run that met no failure does
    not show that failures cost nothing."""
    interval = scipy_stats.binomtest(tasks, attempts).proportion_ci(CONFIDENCE, method="exact")
    return 1.0 / interval.high, 1.0 / interval.low


def tasks_to_decide(success: float, half_width: float) -> int:
    """Tasks whose mean attempt count has a 95 % interval of +-``half_width``: the count is
    geometric, of variance (1 - p) / p^2 (normal approximation)."""
    z = float(scipy_stats.norm.ppf(0.5 + CONFIDENCE / 2))
    variance = (1.0 - success) / (success * success)
    return max(2, math.ceil(z * z * variance / (half_width * half_width)))
