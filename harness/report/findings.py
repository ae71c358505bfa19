"""How a finding of the chapter is measured in a campaign's results: the accessor of the
campaign's result directories and the measures the findings use (harness.report.chapter).

A measure reads the runs of one experiment (runs.csv: the valid measured runs of a level)
or one of its tables (streams.csv, chunks.csv, playback.csv, cancel.csv, overhead.csv) and
returns a :class:`Measured`: the text of the report's *measured* cell, the number compared
with the chapter's (in the finding's unit), or a yes/no for a finding that is an order or a
sign, not a number. What cannot be measured raises :class:`NotMeasured` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.levels import analysable
from tbcore.stats import MIN_RUNS_MEDIAN_CI, median_ci_order, median_difference_ci

UNIT_SCALE = {
    "s": 1.0,
    "ms": 1e3,
    "µs": 1e6,
    "Mbit/s": 1e-6,
    "kJ": 1e-3,
    "J": 1.0,
    "MB": 1e-6,
    "rounds": 1.0,
    "B": 1.0,
    "symbols": 1.0,
    "frames": 1.0,
    "": 1.0,
}
"""SI (s, bit/s, J, bytes) to each unit a finding is stated in."""


class NotMeasured(Exception):
    """The finding cannot be measured in these results; the message says why."""


@dataclass(frozen=True)
class Measured:
    text: str
    """The report's measured cell."""
    value: float | None = None
    """The number compared with the chapter's, in the finding's unit."""
    ok: bool | None = None
    """For an order or a sign: whether the chapter's held."""
    runs: int = 0
    """Valid runs it rests on: per arm (the smaller arm's) for a difference or an order."""
    reason: str = ""
    """What the data says about a difference (used when the finding names none)."""
    low: float = math.nan
    high: float = math.nan
    """The 95 % interval of ``value`` (NaN: too few runs for one)."""
    scaled: str = ""
    """Non-empty when ``value`` was scaled from fewer rounds than the chapter's task (a quick
    form): the value is indicative and judged inconclusive."""
    decide_runs: int | None = None
    """Runs that would decide an inconclusive row, where the measure knows (a proportion)."""


def fmt(value: float | None, unit: str) -> str:
    """``value`` (already in ``unit``) as the report prints it."""
    if value is None or not math.isfinite(value):
        return "–"
    size = abs(value)
    whole = unit in ("rounds", "J", "B", "frames")
    digits = 0 if whole else 1 if size >= 100 else 2 if size >= 1 else 3
    return f"{value:.{digits}f} {unit}".strip()


class Results:
    """A campaign's experiments: their result directories by name (missing: not run), and
    for an experiment whose file gained levels after it ran, the directories that measured
    those levels (``more``: read beside the first, each for the levels it alone has)."""

    def __init__(
        self,
        dirs: dict[str, Path],
        errors: dict[str, str] | None = None,
        more: dict[str, list[Path]] | None = None,
    ) -> None:
        self.dirs = {name: Path(path) for name, path in dirs.items()}
        self.errors = dict(errors or {})
        """Why an experiment of the campaign has no result (it failed, was interrupted)."""
        self.more = {name: [Path(p) for p in paths] for name, paths in (more or {}).items()}
        self.unreadable: dict[str, str] = {}
        """Why an experiment's runs could not be read (the report's summary shows it)."""
        self._frames: dict[str, pd.DataFrame] = {}

    def path(self, experiment: str) -> Path:
        if experiment not in self.dirs:
            why = self.errors.get(experiment, "not run in this campaign")
            raise NotMeasured(f"{experiment}: {why}")
        return self.dirs[experiment]

    def frame(self, experiment: str) -> pd.DataFrame:
        if experiment not in self._frames:
            from harness.store.resultdir import ResultDir

            frames = [ResultDir.open(self.path(experiment)).table_frame()]
            frames += [ResultDir.open(p).table_frame() for p in self.more.get(experiment, [])]
            self._frames[experiment] = _new_levels_only(frames)
        return self._frames[experiment]

    def runs(self, experiment: str, level: str) -> pd.DataFrame:
        """The valid measured runs of ``level``; NotMeasured (with why) when there are none."""
        frame = self.frame(experiment)
        if frame.empty or level not in set(frame["level"].astype(str)):
            raise NotMeasured(f"{experiment}: level {level} is not in this form of the file")
        good = analysable(frame)
        runs = good[good["level"].astype(str) == level]
        if runs.empty:
            mine = frame[frame["level"].astype(str) == level]
            reasons = "; ".join(sorted({str(r) for r in mine["invalid_reason"].dropna()}))
            raise NotMeasured(f"{experiment}/{level}: no valid run ({reasons or 'none finished'})")
        return runs

    def table(self, experiment: str, name: str) -> pd.DataFrame:
        """``<name>.csv`` of the experiment, valid runs only."""
        paths = [self.path(experiment), *self.more.get(experiment, [])]
        found = [p / f"{name}.csv" for p in paths if (p / f"{name}.csv").is_file()]
        if not found:
            raise NotMeasured(f"{experiment}: no {name}.csv")
        frame = _new_levels_only([pd.read_csv(p) for p in found])
        if "valid" in frame:
            frame = frame[frame["valid"].astype(bool)]
        if frame.empty:
            raise NotMeasured(f"{experiment}: no valid run in {name}.csv")
        return frame


def _new_levels_only(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The first frame, then from each later one the rows of levels no earlier one has: a
    level measured in two campaigns is read from the first (its runs are never pooled)."""
    kept, seen = [], set()
    for frame in frames:
        if "level" in frame and not frame.empty:
            levels = frame["level"].astype(str)
            frame = frame[~levels.isin(seen)]
            seen |= set(levels)
        kept.append(frame)
    kept = [f for f in kept if not f.empty] or kept[:1]
    return pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0]


Measure = Callable[[Results], Measured]


def reads(experiment: str, *levels: str) -> Callable[[Measure], Measure]:
    """Mark a measure with the experiment and levels it reads (``measure.levels``): the
    chapter campaign's quick forms must carry them (tests/test_chapter.py)."""

    def mark(measure: Measure) -> Measure:
        measure.levels = (experiment, levels)  # type: ignore[attr-defined]
        return measure

    return mark


def _column(runs: pd.DataFrame, column: str) -> pd.Series:
    if column not in runs:
        raise NotMeasured(f"no {column} in runs.csv")
    values = pd.to_numeric(runs[column], errors="coerce").dropna()
    if values.empty:
        raise NotMeasured(f"{column} empty in the valid runs")
    return values


def _per_task(runs: pd.DataFrame, rounds: int | None) -> tuple[pd.Series, str]:
    """A run's value times ``rounds`` / the rounds it ran (an agent quick form: 3 or 4
    rounds stand for the chapter's 20 or 30); the factor is 1 without ``rounds``."""
    if rounds is None:
        return pd.Series(1.0, index=runs.index), ""
    done = _column(runs, "agent_rounds_done").reindex(runs.index)
    factor = rounds / done
    note = "" if (factor == 1).all() else f"scaled from {int(done.median())} to {rounds} rounds"
    return factor, note


def level_value(
    experiment: str, level: str, column: str = "total_s", unit: str = "s", rounds: int | None = None
) -> Measure:
    """The median of ``column`` over the level's valid runs, with its 95 % interval."""

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        factor, note = _per_task(runs, rounds)
        values = _column(runs, column) * factor.reindex(_column(runs, column).index)
        values *= UNIT_SCALE[unit]
        low, high = median_ci_order(values.tolist())
        median = float(values.median())
        interval = f", 95 % CI {fmt(low, unit)} to {fmt(high, unit)}" if math.isfinite(low) else ""
        extra = f", {note}" if note else ""
        text = f"{fmt(median, unit)} ({experiment}/{level}{interval}, {len(values)} valid{extra})"
        return Measured(text, median, runs=len(values), low=low, high=high, scaled=note)

    return reads(experiment, level)(measure)


def rounds_span(experiment: str, level: str, first: int, count: int) -> Measure:
    """The time from the start of measured round ``first`` (1-based) to the end of the
    ``count``-th after it, per valid run of ``level`` (rounds.csv: each round's last attempt,
    warm-ups left out), its median and 95 % interval: part of a task, measured inside the
    whole task's runs, never scaled."""
    last = first + count - 1

    def measure(results: Results) -> Measured:
        runs = results.runs(experiment, level)
        rounds = results.table(experiment, "rounds")
        mine = rounds[rounds["run_id"].isin(set(runs["run_id"]))]
        mine = mine[~mine["warmup"].astype(str).eq("True")]
        spans = []
        for _run_id, one in mine.groupby("run_id"):
            final = one.sort_values("attempt").groupby("round").tail(1).sort_values("round")
            if len(final) < last:
                raise NotMeasured(
                    f"{experiment}/{level} ran {len(final)} rounds; rounds {first}-{last} need "
                    f"the whole task (the chapter form runs it)"
                )
            span = final.iloc[last - 1]["end_s"] - final.iloc[first - 1]["start_s"]
            spans.append(float(span))
        if not spans:
            raise NotMeasured(f"{experiment}/{level}: no rounds of a valid run in rounds.csv")
        low, high = median_ci_order(spans)
        median = float(pd.Series(spans).median())
        interval = f", 95 % CI {fmt(low, 's')} to {fmt(high, 's')}" if math.isfinite(low) else ""
        text = (f"{fmt(median, 's')} (rounds {first}-{last} of {experiment}/{level}{interval}, "
                f"{len(spans)} valid)")  # fmt: skip
        return Measured(text, median, runs=len(spans), low=low, high=high)

    return reads(experiment, level)(measure)


def level_difference(
    experiment: str,
    level: str,
    baseline: str,
    column: str = "total_s",
    unit: str = "s",
    rounds: int | None = None,
) -> Measure:
    """median(level) - median(baseline) of ``column``, with its bootstrap interval."""

    def measure(results: Results) -> Measured:
        sides = []
        notes = ""
        for name in (baseline, level):
            runs = results.runs(experiment, name)
            factor, notes = _per_task(runs, rounds)
            values = _column(runs, column)
            sides.append((values * factor.reindex(values.index) * UNIT_SCALE[unit]).tolist())
        point, low, high = median_difference_ci(sides[0], sides[1])
        arm = min(len(sides[0]), len(sides[1]))
        if arm < MIN_RUNS_MEDIAN_CI:  # a bootstrap of 2 or 3 values is no interval
            low = high = math.nan
        interval = f", 95 % CI {fmt(low, unit)} to {fmt(high, unit)}" if math.isfinite(low) else ""
        extra = f", {notes}" if notes else ""
        text = (
            f"{fmt(point, unit)} ({experiment}: {level} - {baseline}{interval}, "
            f"{len(sides[1])} + {len(sides[0])} valid{extra})"
        )
        return Measured(text, point, runs=arm, low=low, high=high, scaled=notes)

    return reads(experiment, level, baseline)(measure)


def runs_bound(results: Results, experiment: str, level: str, unit: str = "s") -> str:
    """The median bound of the level's valid runs, as text (empty when unknown)."""
    try:
        runs = results.runs(experiment, level)
        value = float(_column(runs, "bound_s").median()) * UNIT_SCALE[unit]
    except NotMeasured:
        return ""
    return f"runs' own bound {fmt(value, unit)}"


def table_medians(frame: pd.DataFrame, by: list[str], column: str) -> dict[Any, float]:
    """Per group of ``by``: the median over runs of ``column`` (a table's rows per run)."""
    if column not in frame:
        raise NotMeasured(f"no {column} in the table")
    values = frame.assign(_v=pd.to_numeric(frame[column], errors="coerce"))
    return {k: float(v) for k, v in values.groupby(by)["_v"].median().items()}
