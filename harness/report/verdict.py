"""Verdicts of the reproduction report, as statistics (plain code: numbers in, a verdict out).

A measured number is judged by its median's 95 % interval (distribution-free, from order
statistics: tbcore.stats.median_ci_order) against the chapter's figure widened by the row's
tolerance, the *band*:

- **reproduced**: the whole interval lies inside the band;
- **differs**: the whole interval lies outside it;
- **inconclusive**: the interval straddles an edge of the band, or there are too few runs
  for an interval at all (a two-sided 95 % interval on a median needs at least
  :data:`MIN_RUNS` runs). The verdict says how many runs would decide it.

An effect ("audio first is earlier by 3 s") is the same judgement applied to a difference
of medians and its interval. A decision ("the task meets 45 s") is judged from the measured
time's interval against the deadline, and marked *fragile* where the interval crosses it. A
computation (kind C) is judged at the chapter's stated precision: its figure rounded as the
chapter prints it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tbcore.stats import MIN_RUNS_MEDIAN_CI

MIN_RUNS = MIN_RUNS_MEDIAN_CI
"""Runs below which no 95 % interval on a median exists (TriScale, NSDI 2021, §4)."""

REPRODUCED, DIFFERS, INCONCLUSIVE = "reproduced", "differs", "inconclusive"
ERROR, NOT_MEASURABLE = "error", "not measurable"
VERDICTS = (REPRODUCED, DIFFERS, INCONCLUSIVE, ERROR, NOT_MEASURABLE)
"""Every verdict a row can have, in the report's order."""


@dataclass(frozen=True)
class Tolerance:
    """How far from the chapter's figure a measurement still reproduces it: the larger of
    ``relative`` x |figure| and ``absolute`` (in the row's unit), with why."""

    relative: float = 0.0
    absolute: float = 0.0
    reason: str = ""

    def half_width(self, figure: float) -> float:
        return max(abs(figure) * self.relative, self.absolute)

    def band(self, figure: float) -> tuple[float, float]:
        half = self.half_width(figure)
        return (figure - half, figure + half)

    def describe(self, unit: str) -> str:
        parts = []
        if self.relative:
            parts.append(f"±{self.relative:.0%}")
        if self.absolute:
            parts.append(f"±{self.absolute:g} {unit}".strip())
        size = " or ".join(parts) if parts else "exact"
        return f"{size} ({self.reason})" if self.reason else size


@dataclass(frozen=True)
class Estimate:
    """A median with its 95 % interval (NaN ends: no interval) and the runs behind it (the
    smaller arm's for a difference)."""

    median: float
    low: float = math.nan
    high: float = math.nan
    runs: int = 0
    decide_runs: int | None = None
    """The runs that would decide it where the measure knows better than a median's
    1/sqrt(n) (a proportion's binomial interval); None: :func:`runs_to_decide`'s."""

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    """One of :data:`VERDICTS`."""
    detail: str
    """Why, in one line: where the interval lies against the band, and what would decide."""
    runs_needed: int | None = None
    """For an inconclusive verdict: the runs (per arm) that would likely decide it."""


def runs_to_decide(estimate: Estimate, low_edge: float, high_edge: float) -> int | None:
    """Runs that would shrink the interval to fit between the median and the nearer edge of
    the band, were the spread the same (an interval's half-width falls as 1/sqrt(n)); None
    when the median sits on an edge (no number of runs decides it)."""
    if not estimate.has_interval:
        return MIN_RUNS
    margin = min(abs(estimate.median - low_edge), abs(estimate.median - high_edge))
    half = max(estimate.median - estimate.low, estimate.high - estimate.median)
    if margin <= 0:
        return None
    if half <= 0:
        return max(MIN_RUNS, estimate.runs)
    return max(estimate.runs + 1, math.ceil(estimate.runs * (half / margin) ** 2))


def judge_interval(figure: float, estimate: Estimate, tolerance: Tolerance, unit: str) -> Verdict:
    """A measured median (or difference of medians) with its interval against the chapter's
    figure and the row's tolerance."""
    low_edge, high_edge = tolerance.band(figure)
    band = f"band {_num(low_edge)} to {_num(high_edge)} {unit}".rstrip()
    if estimate.runs <= 0 or not math.isfinite(estimate.median):
        return Verdict(NOT_MEASURABLE, "no valid run")
    off = _deviation(figure, estimate.median)
    if not estimate.has_interval:
        need = max(MIN_RUNS, estimate.runs + 1)
        return Verdict(
            INCONCLUSIVE,
            f"n = {estimate.runs}: median {_num(estimate.median)} {unit} ({off}), no 95 % "
            f"interval below {MIN_RUNS} runs; {band}".replace("  ", " "),
            need,
        )
    interval = f"95 % CI {_num(estimate.low)} to {_num(estimate.high)} {unit}".rstrip()
    if low_edge <= estimate.low and estimate.high <= high_edge:
        return Verdict(REPRODUCED, f"{interval} inside the {band} ({off}, n = {estimate.runs})")
    if estimate.high < low_edge or estimate.low > high_edge:
        side = "below" if estimate.high < low_edge else "above"
        return Verdict(DIFFERS, f"{interval} {side} the {band} ({off}, n = {estimate.runs})")
    need = estimate.decide_runs or runs_to_decide(estimate, low_edge, high_edge)
    more = (
        f"about {need} runs would decide"
        if need is not None
        else "the median sits on the band's edge: more runs do not decide it"
    )
    return Verdict(
        INCONCLUSIVE, f"{interval} straddles the {band} ({off}, n = {estimate.runs}); {more}", need
    )


def judge_decision(
    estimate: Estimate, deadline: float, chapter_meets: bool, unit: str = "s"
) -> Verdict:
    """Whether the measured time meets ``deadline``, from its interval, against the
    chapter's decision: *fragile* (inconclusive) where the interval crosses the deadline."""
    if estimate.runs <= 0 or not math.isfinite(estimate.median):
        return Verdict(NOT_MEASURABLE, "no valid run")
    said = "meets" if chapter_meets else "misses"
    if not estimate.has_interval:
        ours = "meets" if estimate.median <= deadline else "misses"
        return Verdict(
            INCONCLUSIVE,
            f"n = {estimate.runs}: median {_num(estimate.median)} {unit} {ours} "
            f"{_num(deadline)} {unit} (the chapter: {said}); no 95 % interval below "
            f"{MIN_RUNS} runs",
            max(MIN_RUNS, estimate.runs + 1),
        )
    interval = f"95 % CI {_num(estimate.low)} to {_num(estimate.high)} {unit}"
    if estimate.low <= deadline <= estimate.high:
        need = runs_to_decide(estimate, deadline, deadline)
        return Verdict(
            INCONCLUSIVE,
            f"fragile: {interval} crosses the {_num(deadline)} {unit} deadline (the chapter: "
            f"{said}, n = {estimate.runs})",
            need,
        )
    ours = estimate.high < deadline
    verdict = REPRODUCED if ours == chapter_meets else DIFFERS
    word = "meets" if ours else "misses"
    return Verdict(
        verdict,
        f"{word} {_num(deadline)} {unit}: {interval} (the chapter: {said}, n = {estimate.runs})",
    )


def judge_order(holds: bool, runs: int, what: str) -> Verdict:
    """An order or a sign the chapter states without a size: reproduced only on at least
    :data:`MIN_RUNS` runs per arm; fewer is inconclusive whatever it shows."""
    if runs <= 0:
        return Verdict(NOT_MEASURABLE, "no valid run")
    if runs < MIN_RUNS:
        shown = "held" if holds else "did not hold"
        return Verdict(
            INCONCLUSIVE,
            f"n = {runs} per arm: {what} {shown}; at least {MIN_RUNS} runs per arm decide",
            MIN_RUNS,
        )
    return Verdict(
        REPRODUCED if holds else DIFFERS,
        f"{what} {'held' if holds else 'did not hold'} (n = {runs} per arm)",
    )


def precision_of(printed: str) -> float:
    """Half a unit of the last digit the chapter prints: "0.179" -> 0.0005, "84.8" -> 0.05,
    "144" -> 0.5, "39,554,832" -> 0.5."""
    number = printed.strip().replace(",", "")
    decimals = len(number.split(".", 1)[1]) if "." in number else 0
    return 0.5 * 10.0**-decimals


def judge_computed(figure: float, computed: float, precision: float, unit: str) -> Verdict:
    """A computation against the chapter's figure at the chapter's precision: reproduced
    when they agree to within ``precision`` (half a unit of the printed last digit, or what
    the chapter's "about" allows)."""
    if not math.isfinite(computed):
        return Verdict(ERROR, f"computed {computed}")
    gap = computed - figure
    where = f"computed {_num(computed)} {unit}".rstrip()
    if abs(gap) <= precision * (1 + 1e-9):
        return Verdict(
            REPRODUCED, f"{where}, within ±{precision:g} of the chapter's {_num(figure)}"
        )
    return Verdict(
        DIFFERS,
        f"{where}: {gap:+.4g} from the chapter's {_num(figure)} (precision ±{precision:g})",
    )


def _deviation(figure: float, value: float) -> str:
    if figure == 0:
        return f"{value - figure:+.3g} from 0"
    return f"{value / figure - 1.0:+.1%} from the chapter's {_num(figure)}"


def _num(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    if abs(value) >= 100_000:
        return f"{value:,.0f}"
    return f"{value:.5g}"
