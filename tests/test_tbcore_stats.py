"""tbcore.stats: scipy's bootstrap, an equivalence test and the binomial CDF."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from tbcore.errors import SpecError
from tbcore.stats import (
    binomial_cdf,
    median_ci,
    median_difference_ci,
    paired_ci,
    quantile,
    tost_shift,
    wilson_interval,
)


def test_quantile_matches_numpy_and_skips_missing_values() -> None:
    values = [3.0, 1.0, 2.0, 10.0]
    for q in (0.0, 0.25, 0.5, 0.99, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
    assert quantile([1.0, None, math.nan, 3.0], 0.5) == 2.0
    assert math.isnan(quantile([], 0.5))


def test_median_interval_contains_the_median_narrows_with_n_and_is_seeded() -> None:
    rng = np.random.default_rng(0)
    small = rng.normal(1.0, 0.1, 10).tolist()
    large = rng.normal(1.0, 0.1, 400).tolist()
    lo_s, hi_s = median_ci(small, seed=1)
    lo_l, hi_l = median_ci(large, seed=1)
    assert lo_s <= float(np.median(small)) <= hi_s
    assert hi_l - lo_l < hi_s - lo_s
    assert median_ci(small, seed=3) == median_ci(small, seed=3)
    assert all(math.isnan(v) for v in median_ci([2.0]))  # one run: no interval
    assert median_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)


def test_difference_of_medians_is_b_minus_a() -> None:
    a = [1.0, 1.2, 1.1, 1.3, 0.9, 1.05, 1.15, 1.25]
    b = [x + 0.5 for x in a]
    point, low, high = median_difference_ci(a, b)
    assert point == pytest.approx(0.5) and low <= point <= high
    assert median_difference_ci(b, a)[0] == pytest.approx(-0.5)
    assert all(math.isnan(v) for v in median_difference_ci([], b))
    assert math.isnan(median_difference_ci([1.0], b)[1])


def test_paired_interval_keeps_pairs_together() -> None:
    base = np.array([1.0, 5.0, 2.0, 8.0, 3.0, 6.0])  # large spread between pairs
    level = base + 0.1  # the same shift in every pair
    low, high = paired_ci((level, base), lambda x, y: float(np.mean(x - y)))
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)
    assert all(math.isnan(v) for v in paired_ci(([1.0], [2.0]), lambda x, y: 0.0))


def test_tost_shows_equivalence_only_within_the_margin() -> None:
    a = [10.0, 10.2, 9.9, 10.1, 10.3, 10.05, 9.95, 10.15]
    close = [x + 0.1 for x in a]
    far = [x + 2.0 for x in a]
    assert tost_shift(a, close, margin=1.0).equivalent
    assert not tost_shift(a, far, margin=1.0).equivalent
    assert not tost_shift(a, close, margin=0.05).equivalent
    assert not tost_shift([], close, margin=1.0).equivalent
    with pytest.raises(ValueError):
        tost_shift(a, close, margin=0.0)


def test_binomial_cdf_is_scipys() -> None:
    assert binomial_cdf(3, 10, 0.14) == pytest.approx(float(sps.binom.cdf(3, 10, 0.14)))
    assert binomial_cdf(10, 10, 0.5) == 1.0


def test_the_order_statistics_interval_needs_six_runs_and_covers_the_median() -> None:
    from tbcore.stats import MIN_RUNS_MEDIAN_CI, median_ci_order

    assert all(math.isnan(x) for x in median_ci_order([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert median_ci_order([float(x) for x in range(MIN_RUNS_MEDIAN_CI)]) == (0.0, 5.0)
    low, high = median_ci_order([float(x) for x in range(20)])
    assert (low, high) == (5.0, 14.0)  # the 6th and 15th of 20 (coverage 95.9 %)
    assert median_ci_order([3.0, float("nan"), 1.0, 2.0, 5.0, 4.0, 6.0]) == (1.0, 6.0)


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(14, 100)
    assert low == pytest.approx(0.0731, abs=1e-3) and high == pytest.approx(0.2527, abs=1e-3)
    low, high = wilson_interval(1400, 10_000)
    assert low < 0.14 < high and high - low == pytest.approx(0.0179, abs=5e-4)
    assert wilson_interval(0, 50)[0] == 0.0
    with pytest.raises(SpecError, match="trials"):
        wilson_interval(0, 0)
