"""Analysis: medians with bootstrap intervals, ratios, gap parts, arm and order effects."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.analysis.levels import (
    attribute_gap,
    effects,
    level_attempts,
    level_summary,
    levels_without_valid,
    median_run,
    position_effect,
)
from harness.plan.planner import plan_runs


def synthetic(arm_s: float, order_s: float, reps: int = 8, noise_s: float = 0.0) -> pd.DataFrame:
    """Runs of levels a and b in counterbalanced blocks: b is ``arm_s`` slower than a and any
    run in second position ``order_s`` slower than in first."""
    rng = np.random.default_rng(1)
    rows = []
    for run in plan_runs(["a", "b"], reps, warmup_runs=1):
        total = 0.240 + (arm_s if run.level == "b" else 0.0) + order_s * run.position
        total += float(rng.normal(0, noise_s)) if noise_s else 0.0
        rows.append(
            {
                "run_id": run.run_id,
                "seq": run.seq,
                "block": run.block,
                "position": run.position,
                "level": run.level,
                "rep": run.rep,
                "warmup": run.warmup,
                "total_s": total if not run.warmup else 9.0,
                "handshake_s": 0.0,
                "ttfb_s": total - 0.01,
                "bound_s": 0.2385,
                "ratio": total / 0.2385,
                "bound_setup_s": 0.0,
                "bound_processing_s": 0.03,
                "processing_s": 0.03,
                "retransmits": 0,
                "valid": True,
                "invalid_reason": None,
            }
        )
    return pd.DataFrame(rows)


def test_level_interval_is_the_bootstrap_of_the_median() -> None:
    frame = synthetic(arm_s=0.0, order_s=0.0, reps=8, noise_s=0.01)
    summary = level_summary(frame, ["a", "b"])[0]
    assert summary.ci_low_s <= summary.median_s <= summary.ci_high_s
    assert summary.ci_high_s - summary.ci_low_s > 0


def test_level_summary_excludes_warmup_and_invalid_but_counts_them() -> None:
    frame = synthetic(arm_s=0.0, order_s=0.0, reps=4)
    bad = frame.index[(frame["level"] == "a") & ~frame["warmup"]][0]
    frame.loc[bad, "valid"] = False
    frame.loc[bad, "invalid_reason"] = "cpu: client 95 %"
    frame.loc[bad, "total_s"] = 50.0
    summaries = {s.level: s for s in level_summary(frame, ["a", "b"])}
    assert summaries["a"].runs == 4 and summaries["a"].valid == 3
    assert summaries["a"].median_s == pytest.approx(0.240, abs=1e-3)
    assert summaries["a"].median_ratio == pytest.approx(0.240 / 0.2385, abs=5e-3)
    assert "cpu: client 95 %" in summaries["a"].invalid_reasons
    assert summaries["b"].invalid_reasons == ""


def test_order_effect_is_separated_from_the_arm_effect() -> None:
    frame = synthetic(arm_s=0.0024, order_s=0.158, reps=8)
    (effect,) = effects(frame, {"a": "a", "b": "a"})
    assert effect.pairs == 8
    assert effect.order_s == pytest.approx(0.158, abs=1e-9)
    assert effect.arm_s == pytest.approx(0.0024, abs=1e-9)


def test_without_counterbalance_the_order_is_not_separable() -> None:
    rows = []
    for run in plan_runs(["a", "b"], 4, counterbalance=False):
        rows.append({**run.to_dict(), "total_s": 1.0 + 0.1 * run.position, "valid": True})
    (effect,) = effects(pd.DataFrame(rows), {"a": "a", "b": "a"})
    assert math.isnan(effect.order_s)
    assert effect.arm_s == pytest.approx(0.1)


def test_arm_interval_is_paired_level_minus_baseline() -> None:
    # noise shared by both runs of a block cancels in the pairs: a tight interval around
    # the effect, which an unpaired interval of the two medians would not give
    frame = synthetic(arm_s=0.050, order_s=0.0, reps=8)
    drift = {block: 0.1 * (block % 3) for block in frame["block"].unique()}
    frame["total_s"] = frame["total_s"] + frame["block"].map(drift)
    (effect,) = effects(frame, {"a": "a", "b": "a"})
    assert effect.arm_s == pytest.approx(0.050)
    assert effect.arm_ci_low_s == pytest.approx(0.050) and effect.arm_ci_high_s == pytest.approx(
        0.050
    )
    (reverse,) = effects(frame, {"b": "b", "a": "b"})
    assert reverse.arm_s == pytest.approx(-0.050)  # level minus its baseline


def test_attempts_and_levels_without_a_valid_run() -> None:
    frame = synthetic(arm_s=0.0, order_s=0.0, reps=2)
    frame["attempt"] = 1
    frame["disturbance_s"] = 0.001
    frame["disturbance_fraction"] = 0.004
    frame["disturbance_limit_s"] = 0.0024
    retry = frame[(frame["level"] == "b") & ~frame["warmup"]].iloc[[0]].copy()
    frame.loc[retry.index, ["valid", "disturbance_s"]] = [False, 0.005]
    retry["attempt"], retry["run_id"] = 2, retry["run_id"] + "-a2"
    frame = pd.concat([frame, retry], ignore_index=True)
    rows = {a.level: a for a in level_attempts(frame, ["a", "b"])}
    assert (rows["a"].planned, rows["a"].attempts, rows["a"].valid) == (2, 2, 2)
    assert (rows["b"].planned, rows["b"].attempts, rows["b"].valid) == (2, 3, 2)
    assert rows["b"].most_attempts == 2 and rows["b"].invalid_fraction == pytest.approx(1 / 3)
    assert rows["b"].disturbance_max_s == pytest.approx(0.005)
    assert rows["b"].disturbance_valid_max_s == pytest.approx(0.001)
    assert levels_without_valid(frame, ["a", "b"]) == []
    frame.loc[frame["level"] == "a", "valid"] = False
    assert levels_without_valid(frame) == ["a"]


def test_one_run_per_arm_has_an_effect_but_no_interval() -> None:
    (effect,) = effects(synthetic(arm_s=0.5, order_s=0.0, reps=1), {"a": "a", "b": "a"})
    assert effect.arm_s == pytest.approx(0.5)
    assert math.isnan(effect.arm_ci_low_s) and math.isnan(effect.arm_ci_high_s)


def gap(**measured: Any) -> dict[str, float | str]:
    """The gap of a run measured as ``measured`` against a 1 s bound with 0.4 s of set-up;
    unless told otherwise the run's handshake and processing match the bound's."""
    matching = dict(handshake_s=0.4, processing_s=0.03)
    bound = dict(bound_total_s=1.0, bound_setup_s=0.4, bound_processing_s=0.03)
    return attribute_gap(**{**matching, **bound, **measured})


@pytest.mark.parametrize(
    ("measured", "part"),
    [
        (dict(total_s=1.2, handshake_s=0.6), "setup"),
        (dict(total_s=1.2), "transfer (window/feedback)"),
        (dict(total_s=3.0, retransmits=12), "transfer (loss recovery)"),
        (dict(total_s=3.0, retransmits=2, link_drops=0), "transfer (spurious retransmission)"),
        (dict(total_s=1.2, retransmits=2, link_drops=0, paced=True), "transfer (sender pacing)"),
        # a pacer does not explain resending what the link dropped
        (dict(total_s=3.0, retransmits=12, paced=True), "transfer (loss recovery)"),
        (dict(total_s=1.0005), "none"),
    ],
)
def test_gap_falls_in_setup_processing_or_transfer(measured: dict[str, Any], part: str) -> None:
    assert gap(**measured)["gap_part"] == part


def test_gap_sizes_of_a_slow_handshake_and_of_loss() -> None:
    assert gap(total_s=1.2, handshake_s=0.6)["gap_s"] == pytest.approx(0.2)
    assert gap(total_s=3.0, retransmits=12)["gap_transfer_s"] == pytest.approx(2.0)


def test_zero_rtt_handshake_off_the_critical_path_is_not_setup() -> None:
    frame = synthetic(arm_s=0.0, order_s=0.0, reps=2)
    frame["handshake_s"] = 0.2  # the handshake ran alongside the early data
    frame["t_request_first_s"] = 0.001
    frame["bound_setup_s"] = 0.0
    frame["total_s"] = frame["total_s"] + 0.1
    (a, _b) = level_summary(frame, ["a", "b"])
    assert a.gap_part.startswith("transfer")
    assert a.gap_setup_s == pytest.approx(0.001)


def test_median_run_and_position_effect() -> None:
    frame = synthetic(arm_s=0.1, order_s=0.02, reps=4)
    run = median_run(frame, "b")
    assert run is not None and run["level"] == "b"
    table = position_effect(frame)
    assert list(table["position"]) == [0, 1]
    assert table["median_deviation_s"].iloc[1] > table["median_deviation_s"].iloc[0]
    assert median_run(frame, "zzz") is None
