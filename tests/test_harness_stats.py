"""harness.analysis.effects: arm and order effects of paired runs (level minus baseline)."""

from __future__ import annotations

import math

import pytest

from harness.analysis.effects import balanced_arm, paired_effect


def test_arm_and_order_are_separated_and_signed_level_minus_baseline() -> None:
    # 8 counterbalanced blocks: the level is 50 ms slower; the second run 20 ms slower
    level, baseline, second = [], [], []
    for block in range(8):
        level_second = block % 2 == 1
        drift = 0.3 * (block % 3)  # shared by both runs of the block
        level.append(1.05 + drift + (0.02 if level_second else 0.0))
        baseline.append(1.0 + drift + (0.0 if level_second else 0.02))
        second.append(level_second)
    effect = paired_effect(level, baseline, second)
    assert effect.pairs == 8
    assert effect.arm_s == pytest.approx(0.05)
    assert effect.order_s == pytest.approx(0.02)
    assert effect.ci_low_s <= effect.arm_s <= effect.ci_high_s
    assert effect.ci_high_s - effect.ci_low_s < 0.05  # the drift cancels in the pairs
    swapped = paired_effect(baseline, level, [not s for s in second])
    assert swapped.arm_s == pytest.approx(-0.05)


def test_one_order_or_one_pair() -> None:
    effect = paired_effect([1.1, 1.2], [1.0, 1.0], [True, True])
    assert effect.arm_s == pytest.approx(0.15) and math.isnan(effect.order_s)
    one = paired_effect([1.5], [1.0], [False])
    assert one.arm_s == pytest.approx(0.5) and math.isnan(one.ci_low_s)
    none = paired_effect([math.nan], [1.0], [False])
    assert none.pairs == 0 and math.isnan(none.arm_s)
    assert balanced_arm([0.1, 0.3], [1.0, 0.0]) == pytest.approx(0.2)
