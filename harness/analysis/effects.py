"""Arm and order effects of paired runs, with paired bootstrap intervals (scipy).

In block ``b`` the runs of a level and of its baseline are a pair; their difference
``d_b = x_level - x_baseline`` (the one sign convention: positive means the level is
slower) equals ``arm + order`` when the level ran second and ``arm - order`` when it ran
first. With counterbalanced blocks both occur, and

    arm = (mean d | second + mean d | first) / 2
    order = (mean d | second - mean d | first) / 2

The interval of the arm effect resamples whole pairs (scipy.stats.bootstrap, paired=True),
so it carries the pairing the estimate uses; an unpaired interval would not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tbcore.stats import CONFIDENCE, paired_ci, quantile

__all__ = ["CONFIDENCE", "PairedEffect", "balanced_arm", "paired_effect", "quantile"]


def balanced_arm(differences: np.ndarray, level_second: np.ndarray) -> float:
    """The arm effect balanced over both orders (the mean of all differences when only one
    order occurs)."""
    d = np.asarray(differences, dtype=float)
    second = np.asarray(level_second, dtype=float) > 0.5
    if d.size == 0:
        return math.nan
    if second.any() and (~second).any():
        return float((d[second].mean() + d[~second].mean()) / 2.0)
    return float(d.mean())


@dataclass(frozen=True)
class PairedEffect:
    pairs: int
    arm_s: float
    """Balanced arm effect, level minus baseline (positive: the level is slower)."""
    ci_low_s: float
    ci_high_s: float
    """Paired percentile bootstrap interval of :attr:`arm_s` (NaN below two pairs)."""
    order_s: float
    """Second-position minus first-position effect; NaN when every pair has one order."""


def paired_effect(
    level_s: Sequence[float],
    baseline_s: Sequence[float],
    level_second: Sequence[bool],
    *,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> PairedEffect:
    """The effect of a level against its baseline from paired runs (one pair per block)."""
    x = np.asarray(level_s, dtype=float)
    y = np.asarray(baseline_s, dtype=float)
    second = np.asarray(level_second, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    d, second = (x - y)[keep], second[keep]
    if d.size == 0:
        return PairedEffect(0, math.nan, math.nan, math.nan, math.nan)
    both = bool((second > 0.5).any() and (second <= 0.5).any())
    order = float((d[second > 0.5].mean() - d[second <= 0.5].mean()) / 2.0) if both else math.nan
    low, high = paired_ci((d, second), balanced_arm, seed=seed, confidence=confidence)
    return PairedEffect(
        pairs=int(d.size),
        arm_s=balanced_arm(d, second),
        ci_low_s=low,
        ci_high_s=high,
        order_s=order,
    )
