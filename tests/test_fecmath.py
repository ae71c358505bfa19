"""tbcore.fecmath: the redundancy the FEC stack and the bound share."""

from __future__ import annotations

import math

import pytest

from harness import bounds
from tbcore import fecmath


def test_models_worked_example_and_bounds_agree() -> None:
    assert fecmath.repair_symbols(245, 0.14, 0.999) == 63
    assert bounds.fec_repair_symbols(245, 0.14, 0.999) == 63
    assert fecmath.repair_symbols(245, 0.0, 0.999) == 0


@pytest.mark.parametrize("k,p", [(1, 0.14), (30, 0.036), (245, 0.14), (251, 0.3)])
def test_repair_is_the_smallest_that_meets_the_target(k: int, p: float) -> None:
    r = fecmath.repair_symbols(k, p, 0.999)
    assert fecmath.binomial_cdf(r, k + r, p) >= 0.999
    assert r == 0 or fecmath.binomial_cdf(r - 1, k + r - 1, p) < 0.999


def test_markov_with_equal_transitions_is_the_binomial() -> None:
    for r in (10, 40, 63):
        assert fecmath.markov_loss_cdf(r, 308, 0.14, 0.14) == pytest.approx(
            fecmath.binomial_cdf(r, 308, 0.14), rel=1e-9
        )
    assert fecmath.markov_repair_symbols(245, 0.14, 0.14, 0.999) == 63


def test_bursts_need_more_repair_than_independent_loss_of_the_same_mean() -> None:
    b = 0.6
    a = 0.14 * (1 - b) / (1 - 0.14)  # stationary loss 0.14
    assert fecmath.markov_stationary_loss(a, b) == pytest.approx(0.14)
    assert fecmath.markov_repair_symbols(245, a, b, 0.999) > 63 + 20


def test_large_blocks_use_the_normal_approximation_sensibly() -> None:
    n = 20_000
    exact_mean = n * 0.14
    assert fecmath.markov_loss_cdf(math.floor(exact_mean), n, 0.14, 0.14) == pytest.approx(
        0.5, abs=0.02
    )


def test_extra_symbols_cover_the_shortfall() -> None:
    assert fecmath.extra_symbols(0, 0.14, 0.999) == 0
    x = fecmath.extra_symbols(20, 0.14, 0.999)
    assert x > 20 and fecmath.binomial_cdf(x - 20, x, 0.14) >= 0.999
