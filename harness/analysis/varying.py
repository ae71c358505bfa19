"""Statistics of links that vary (issue 28), sans-I/O on the result tables.

- :func:`deadline` : a level's task times against its deadline: the distribution of T and
  P(T <= D) with its exact (Clopper-Pearson) 95 % interval, the runs' bounds from the rates
  their traces gave (docs/models.md sections 13 and 14).
- :func:`round_runs` : whether slow rounds come in runs: the lag-1 correlation of
  consecutive rounds' network times within each run (round_trace.csv), and how often a
  slow round (slower than the level's median round) follows a slow one.
- :func:`competition` : a level beside competing traffic (docs/models.md section 15): its time
  beside the one alone, its share of the bottleneck beside its fair share, its bound at
  that share behind the standing queue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
NAN = math.nan


def _valid(frame: pd.DataFrame, level: str) -> pd.DataFrame:
    rows = frame[frame["level"] == level]
    if "warmup" in rows.columns:
        rows = rows[~rows["warmup"].fillna(False).astype(bool)]
    if "valid" in rows.columns:
        rows = rows[rows["valid"].fillna(False).astype(bool)]
    return rows


def _number(values: pd.Series) -> np.ndarray:
    return pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=float)


@dataclass(frozen=True)
class Deadline:
    """One level's task times against its deadline."""

    level: str
    runs: int
    deadline_s: float
    met: int
    probability: float
    ci_low: float
    ci_high: float
    """Clopper-Pearson (exact binomial) 95 % interval of P(T <= deadline)."""
    min_s: float
    p10_s: float
    median_s: float
    p90_s: float
    max_s: float
    bound_median_s: float
    bound_min_s: float
    bound_max_s: float
    bound_met: int
    """Runs whose bound (the trace's rates) met the deadline: what no transport could beat."""
    ratio_median: float


def deadline(frame: pd.DataFrame, level: str, deadline_s: float) -> Deadline | None:
    """P(T <= ``deadline_s``) over the level's valid runs, with the distribution of T and of
    the bounds; None without a valid run."""
    rows = _valid(frame, level)
    times = _number(rows["total_s"]) if "total_s" in rows.columns else np.array([])
    if times.size == 0:
        return None
    met = int((times <= deadline_s).sum())
    interval = stats.binomtest(met, times.size).proportion_ci(CONFIDENCE, method="exact")
    bound = _number(rows["bound_s"]) if "bound_s" in rows.columns else np.array([])
    ratio = _number(rows["ratio"]) if "ratio" in rows.columns else np.array([])
    return Deadline(
        level=level,
        runs=int(times.size),
        deadline_s=deadline_s,
        met=met,
        probability=met / times.size,
        ci_low=float(interval.low),
        ci_high=float(interval.high),
        min_s=float(times.min()),
        p10_s=float(np.quantile(times, 0.1)),
        median_s=float(np.median(times)),
        p90_s=float(np.quantile(times, 0.9)),
        max_s=float(times.max()),
        bound_median_s=float(np.median(bound)) if bound.size else NAN,
        bound_min_s=float(bound.min()) if bound.size else NAN,
        bound_max_s=float(bound.max()) if bound.size else NAN,
        bound_met=int((bound <= deadline_s).sum()),
        ratio_median=float(np.median(ratio)) if ratio.size else NAN,
    )


@dataclass(frozen=True)
class RoundRuns:
    """Whether one level's slow rounds come in runs."""

    level: str
    runs: int
    rounds: int
    lag1: float
    """Pearson correlation of consecutive rounds' network times, pooled over runs (each
    run's pairs, centred on the run's own mean)."""
    lag1_offered: float
    """The same of the rates the trace offered the rounds' uploads (b_i and b_i+1)."""
    p_slow: float
    """Share of rounds slower than the level's median round."""
    p_slow_after_slow: float
    """Share of the rounds after a slow round that are slow too (p_slow when independent)."""
    ratio_median: float
    """Median over rounds of network time / its bound (the trace from the round's first byte)."""


def _pairs(per_run: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    firsts, seconds = [], []
    for values in per_run:
        if values.size < 2:
            continue
        centred = values - values.mean()
        firsts.append(centred[:-1])
        seconds.append(centred[1:])
    if not firsts:
        return np.array([]), np.array([])
    return np.concatenate(firsts), np.concatenate(seconds)


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    if a.size < 3 or np.std(a) == 0 or np.std(b) == 0:
        return NAN
    return float(np.corrcoef(a, b)[0, 1])


def round_runs(rounds: pd.DataFrame, runs: pd.DataFrame, level: str) -> RoundRuns | None:
    """From round_trace.csv (``rounds``, with run_id) and runs.csv (``runs``: level, valid)."""
    kept = set(_valid(runs, level)["run_id"])
    mine = rounds[rounds["run_id"].isin(kept)].sort_values(["run_id", "round", "attempt"])
    if mine.empty:
        return None
    times = [_number(g["network_s"]) for _, g in mine.groupby("run_id")]
    offered = [_number(g["offered_up_bps"]) for _, g in mine.groupby("run_id")]
    every = np.concatenate(times)
    median = float(np.median(every))
    slow_after = [
        (t[:-1] > median, t[1:] > median) for t in times if t.size >= 2
    ]  # (previous slow, this slow) per run
    previous = np.concatenate([p for p, _ in slow_after]) if slow_after else np.array([])
    current = np.concatenate([c for _, c in slow_after]) if slow_after else np.array([])
    after_slow = current[previous] if previous.size else np.array([])
    ratios = _number(mine["network_s"]) / _number(mine["network_bound_s"])
    return RoundRuns(
        level=level,
        runs=len(times),
        rounds=int(every.size),
        lag1=_correlation(*_pairs(times)),
        lag1_offered=_correlation(*_pairs(offered)),
        p_slow=float((every > median).mean()),
        p_slow_after_slow=float(after_slow.mean()) if after_slow.size else NAN,
        ratio_median=float(np.median(ratios)) if ratios.size else NAN,
    )


@dataclass(frozen=True)
class Competition:
    """One level beside competing traffic, against the level alone."""

    level: str
    cross: str
    runs: int
    median_s: float
    alone_s: float
    """The median of the level without competitors (NAN without one)."""
    slowdown: float
    """median_s / alone_s."""
    bound_s: float
    """The strict bound of the path alone."""
    fair_share: float
    request_share: float
    """Median over runs of the request's part of the bottleneck while it ran."""
    cross_bps: float
    standing_queue_s: float
    bound_fair_s: float
    ratio_fair: float


def _median(rows: pd.DataFrame, column: str) -> float:
    values = _number(rows[column]) if column in rows.columns else np.array([])
    return float(np.median(values)) if values.size else NAN


def competition(frame: pd.DataFrame, levels: Sequence[str]) -> list[Competition]:
    """Every level with competing traffic, beside the median of the levels without."""
    alone_rows = [_valid(frame, lv) for lv in levels]
    alone = [
        _number(r["total_s"])
        for r in alone_rows
        if not r.empty and "cross" in r.columns and r["cross"].isna().all()
    ]
    joined = np.concatenate(alone) if alone else np.array([])
    alone_s = float(np.median(joined)) if joined.size else NAN
    out = []
    for level in levels:
        rows = _valid(frame, level)
        if rows.empty or "cross" not in rows.columns or rows["cross"].isna().all():
            continue
        median = _median(rows, "total_s")
        out.append(
            Competition(
                level=level,
                cross=str(rows["cross"].dropna().iloc[0]),
                runs=len(rows),
                median_s=median,
                alone_s=alone_s,
                slowdown=median / alone_s if math.isfinite(alone_s) else NAN,
                bound_s=_median(rows, "bound_s"),
                fair_share=_median(rows, "fair_share"),
                request_share=_median(rows, "request_share"),
                cross_bps=_median(rows, "cross_bps"),
                standing_queue_s=_median(rows, "standing_queue_s"),
                bound_fair_s=_median(rows, "bound_fair_s"),
                ratio_fair=_median(rows, "ratio_fair"),
            )
        )
    return out
