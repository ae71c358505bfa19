"""Statistics every package shares, from scipy: one quantile, bootstrap intervals, an
equivalence test, the binomial CDF.

scipy is imported where it is used: every ``testbed`` process (servers and clients too)
imports the bounds, and scipy.stats costs hundreds of milliseconds of start-up.

Sign convention everywhere: a difference is ``b - a`` with ``a`` the baseline (the level's
baseline, the emulator in a cross-validation), so a positive difference means ``b`` took
longer.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tbcore.errors import SpecError

CONFIDENCE = 0.95
"""Confidence level of every interval the testbed prints."""

BOOTSTRAP_RESAMPLES = 9999
"""scipy's default number of resamples: 2.5/97.5 % ends stable to about 1 % of the width."""

EQUIVALENCE_ALPHA = 0.05
"""Level of each one-sided test of a TOST (Schuirmann 1987): equivalence at 5 %."""


def finite(values: Sequence[float | None]) -> np.ndarray:
    """The finite numbers of ``values`` as a float array (None and NaN dropped)."""
    return np.asarray([v for v in values if v is not None and math.isfinite(float(v))], dtype=float)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default,
    R type 7); NaN when there is no finite value."""
    data = finite(values)
    if data.size == 0:
        return math.nan
    return float(np.quantile(data, q))


def _bootstrap(
    data: tuple[np.ndarray, ...],
    statistic: Callable[..., float],
    *,
    paired: bool,
    seed: int,
    confidence: float,
    vectorized: bool = False,
) -> tuple[float, float]:
    from scipy import stats as sps

    with warnings.catch_warnings():
        # a resample of identical values has no spread: scipy warns and returns NaN
        warnings.simplefilter("ignore")
        result = sps.bootstrap(
            data,
            statistic,
            paired=paired,
            vectorized=vectorized,
            n_resamples=BOOTSTRAP_RESAMPLES,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    low, high = result.confidence_interval
    return (float(low), float(high))


def median_ci(
    values: Sequence[float], *, seed: int = 0, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (scipy.stats.bootstrap); (NaN, NaN) with
    fewer than two values."""
    data = finite(values)
    if data.size < 2:
        return (math.nan, math.nan)
    if np.all(data == data[0]):
        return (float(data[0]), float(data[0]))
    return _bootstrap(
        (data,), np.median, paired=False, seed=seed, confidence=confidence, vectorized=True
    )


def median_difference_ci(
    a: Sequence[float], b: Sequence[float], *, seed: int = 0, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """median(b) - median(a) of two independent samples, with its percentile bootstrap
    interval (each sample resampled on its own); NaNs when either has fewer than two."""
    xa, xb = finite(a), finite(b)
    if xa.size == 0 or xb.size == 0:
        return (math.nan, math.nan, math.nan)
    point = float(np.median(xb) - np.median(xa))
    if xa.size < 2 or xb.size < 2:
        return (point, math.nan, math.nan)

    def difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(y, axis=axis) - np.median(x, axis=axis)

    low, high = _bootstrap(
        (xa, xb), difference, paired=False, seed=seed, confidence=confidence, vectorized=True
    )
    return (point, low, high)


def paired_ci(
    columns: tuple[Sequence[float], ...],
    statistic: Callable[..., float],
    *,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(*columns)`` resampling whole rows (the
    pairs stay together: scipy.stats.bootstrap with paired=True); NaNs below two rows."""
    data = tuple(np.asarray(c, dtype=float) for c in columns)
    if data[0].size < 2:
        return (math.nan, math.nan)
    return _bootstrap(data, statistic, paired=True, seed=seed, confidence=confidence)


@dataclass(frozen=True)
class Equivalence:
    """A two one-sided tests (TOST) verdict on the shift between two samples."""

    margin: float
    """The equivalence margin: shifts within (-margin, +margin) count as no difference."""
    p_value: float
    """The larger of the two one-sided p-values (NaN when a sample is empty)."""
    alpha: float = EQUIVALENCE_ALPHA

    @property
    def equivalent(self) -> bool:
        return math.isfinite(self.p_value) and self.p_value < self.alpha


def tost_shift(
    a: Sequence[float], b: Sequence[float], margin: float, *, alpha: float = EQUIVALENCE_ALPHA
) -> Equivalence:
    """Is ``b`` equivalent to ``a`` within a location shift of ``margin``? Two one-sided
    Mann-Whitney tests (scipy.stats.mannwhitneyu) on shifted samples: H0 ``b - a <=
    -margin`` against ``b + margin`` stochastically larger than ``a``, and H0 ``b - a >=
    margin`` against ``b - margin`` smaller; equivalent when both reject at ``alpha``."""
    from scipy import stats as sps

    xa, xb = finite(a), finite(b)
    if margin <= 0 or not math.isfinite(margin):
        raise ValueError(f"margin must be a positive number, got {margin!r}")
    if xa.size == 0 or xb.size == 0:
        return Equivalence(margin=margin, p_value=math.nan, alpha=alpha)
    lower = sps.mannwhitneyu(xb + margin, xa, alternative="greater").pvalue
    upper = sps.mannwhitneyu(xb - margin, xa, alternative="less").pvalue
    return Equivalence(margin=margin, p_value=float(max(lower, upper)), alpha=alpha)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p) (scipy.stats.binom)."""
    from scipy import stats as sps

    return float(sps.binom.cdf(k, n, p))


MIN_RUNS_MEDIAN_CI = 6
"""The fewest runs that give a two-sided 95 % distribution-free interval on a median: with
n runs the widest interval, from the smallest to the largest, misses the median with
probability 2 * 0.5**n, which is at most 5 % only from n = 6 (0.031; n = 5 gives 0.0625).
TriScale (Jacob et al., NSDI 2021, §4) sizes its runs by the same rule."""


def median_ci_order(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free interval of the median from order statistics: the narrowest
    symmetric pair (x_(k), x_(n-k+1)) whose coverage, from the binomial(n, 1/2) count of runs
    below the median, is at least ``confidence``; (NaN, NaN) below
    :data:`MIN_RUNS_MEDIAN_CI` runs, where no such pair exists."""
    from scipy import stats as sps

    data = np.sort(finite(values))
    n = int(data.size)
    if n < 2:
        return (math.nan, math.nan)
    alpha = 1.0 - confidence
    # k-th smallest (1-based) is the lower end: P(B < k) <= alpha / 2 for B ~ Binomial(n, 1/2)
    k = int(sps.binom.ppf(alpha / 2.0, n, 0.5))
    while k >= 1 and sps.binom.cdf(k - 1, n, 0.5) > alpha / 2.0:
        k -= 1
    if k < 1:
        return (math.nan, math.nan)
    return (float(data[k - 1]), float(data[n - k]))


WILSON_CONFIDENCE = 0.99
"""Of the Wilson score interval of every measured loss fraction (the link bench, the path probe)."""


def wilson_interval(lost: int, trials: int) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion at WILSON_CONFIDENCE (scipy's binomtest)."""
    if trials <= 0:
        raise SpecError("trials", "a proportion needs at least one trial")
    from scipy.stats import binomtest

    interval = binomtest(lost, trials).proportion_ci(WILSON_CONFIDENCE, method="wilson")
    return float(interval.low), float(interval.high)
