"""Per level statistics against the bound, arm and order effects. Plain functions on frames.

Input is the ``runs.csv`` frame (harness.store.resultdir.RUN_COLUMNS). Warm-up runs are never
analysed; invalid runs are counted and shown but left out of the statistics (they are
kept in the table with their reason, never dropped from the record).

- :func:`level_summary`: per level n, median ``total_s`` with a percentile bootstrap 95 %
  interval (scipy: tbcore.stats.median_ci), p95, the median bound, the median ratio to the
  bound, and the part of the bound where the median gap falls (set-up, processing, or
  transfer: window/feedback rounds or loss recovery), from the measured phases next to the
  bound's parts.
- :func:`effects`: for each level against its baseline, the arm effect and, from the
  counterbalanced blocks, the order (second-versus-first position) effect next to it, as
  docs/design.md asks: on a real path the order was once worth 158 ms when the change
  under test was worth 2.4 ms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from harness.analysis.effects import paired_effect
from tbcore.plain import AsDict
from tbcore.stats import median_ci, quantile

GAP_PARTS = ("setup", "processing", "transfer", "none")
"""Where a measured gap can fall. ``transfer`` is the rest of the request after set-up and
processing: window growth and ACK feedback when there was no retransmission, loss recovery
when there was."""

NEGLIGIBLE_GAP_S = 0.002
"""A gap below this is measurement noise on this testbed (the emulator's p99 RTT error is
about 1 ms, docs/machine.md), so it is named ``none``."""


def analysable(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured (not warm-up), valid runs with a total time."""
    if frame.empty:
        return frame
    mask = ~frame["warmup"].fillna(False).astype(bool)
    mask &= frame["valid"].fillna(False).astype(bool)
    mask &= pd.to_numeric(frame["total_s"], errors="coerce").notna()
    return frame[mask]


def _median_of(runs: pd.DataFrame, column: str) -> float:
    """The median of a column the frame may lack (NaN then)."""
    return median_of(runs[column]) if column in runs.columns else math.nan


@dataclass(frozen=True)
class LevelSummary(AsDict):
    level: str
    runs: int
    """Measured runs of this level (warm-up excluded), valid or not."""
    valid: int
    median_s: float
    ci_low_s: float
    ci_high_s: float
    p95_s: float
    bound_s: float
    median_ratio: float
    handshake_s: float
    ttfb_s: float
    gap_s: float
    """Median total minus the median bound."""
    gap_part: str
    """Where the gap falls: one of GAP_PARTS."""
    gap_setup_s: float
    gap_processing_s: float
    gap_transfer_s: float
    retransmits: float
    invalid_reasons: str
    expected_s: float = math.nan
    """Median bound with the expected retransmission rounds (docs/models.md section 9)."""
    mathis_s: float = math.nan
    """Median Mathis-rate time (docs/models.md section 8), NaN without loss."""
    min_rwnd_bytes: float = math.nan
    """Median over runs of the smallest receive window the receiver advertised during the
    request (TCP): far below the bytes one round needs, the receiver held the sender."""
    own_wait_s: float = math.nan
    """CPU: the endpoints: median wait of their main threads on the critical path for the
    run's own processes (the emulator, the peer stack on the same cores)."""
    endpoint_cpu_s: float = math.nan
    """CPU: the endpoints: median CPU seconds client and server computed in the request."""


def _num(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


def median_of(series: pd.Series) -> float:
    values = _num(series).dropna()
    return float(values.median()) if len(values) else math.nan


def attribute_gap(
    *,
    total_s: float,
    handshake_s: float,
    processing_s: float,
    bound_total_s: float,
    bound_setup_s: float,
    bound_processing_s: float,
    retransmits: float = 0.0,
    link_drops: float | None = None,
    paced: bool = False,
) -> dict[str, float | str]:
    """Split a measured time's excess over the bound into set-up, processing and transfer.

    Set-up is the measured handshake against the bound's set-up part; processing the
    server's measured processing against the bound's; transfer is what remains of each.
    The part with the largest excess names the gap; ``transfer`` is labelled
    ``transfer (loss recovery)`` when the run retransmitted and the link dropped packets
    (``link_drops``: loss plus queue drops; None when unknown), ``transfer (sender pacing)``
    when the sender paces (``paced``: the bound assumes each window leaves at the path rate,
    a pacer spreads it over up to a round trip), ``transfer (spurious retransmission)`` when
    it retransmitted although the link dropped nothing, and ``transfer (window/feedback)``
    otherwise, so that a report can say which mechanism to look at.
    """
    # a bound without parts (a transfer over connections already up: docs/models.md s12) is all
    # transfer: no set-up and no processing of its own
    bound_setup_s = bound_setup_s if math.isfinite(bound_setup_s) else 0.0
    bound_processing_s = bound_processing_s if math.isfinite(bound_processing_s) else 0.0
    handshake_s = 0.0 if not math.isfinite(handshake_s) else handshake_s
    processing_s = bound_processing_s if not math.isfinite(processing_s) else processing_s
    setup_gap = handshake_s - bound_setup_s
    processing_gap = processing_s - bound_processing_s
    transfer_gap = (total_s - handshake_s - processing_s) - (
        bound_total_s - bound_setup_s - bound_processing_s
    )
    gaps = {"setup": setup_gap, "processing": processing_gap, "transfer": transfer_gap}
    total_gap = total_s - bound_total_s
    if not math.isfinite(total_gap) or total_gap < NEGLIGIBLE_GAP_S:
        part = "none"
    else:
        part = max(gaps, key=lambda k: gaps[k])
        if part == "transfer":
            resent = retransmits is not None and math.isfinite(retransmits) and retransmits > 0
            dropped = link_drops is None or not math.isfinite(link_drops) or link_drops > 0
            if resent and dropped:
                part = "transfer (loss recovery)"
            elif paced:
                part = "transfer (sender pacing)"
            elif resent:
                part = "transfer (spurious retransmission)"
            else:
                part = "transfer (window/feedback)"
    return {
        "gap_s": total_gap,
        "gap_part": part,
        "gap_setup_s": setup_gap,
        "gap_processing_s": processing_gap,
        "gap_transfer_s": transfer_gap,
    }


def _link_drops(runs: pd.DataFrame) -> float | None:
    """Median packets the link dropped per run (loss and queue), None when not recorded."""
    columns = [
        c
        for c in ("dropped_loss_up", "dropped_loss_down", "queue_drops_up", "queue_drops_down")
        if c in runs.columns
    ]
    if "dropped_loss_up" not in columns or "dropped_loss_down" not in columns:
        return None  # loss drops not recorded: unknown
    total = sum(_num(runs[c]).fillna(0) for c in columns)
    return float(total.median()) if len(total) else None


def _all_paced(runs: pd.DataFrame) -> bool:
    """True when every run of the level had a pacing sender (older records: unknown, False)."""
    if "paced" not in runs.columns or runs.empty:
        return False
    return bool(runs["paced"].fillna(False).astype(bool).all())


def setup_before_request(runs: pd.DataFrame) -> float:
    """Median set-up time on the request's critical path: the handshake, but only up to
    the first request byte (0-RTT sends its request before the handshake completes)."""
    handshake = _num(runs["handshake_s"])
    if "t_request_first_s" in runs.columns:
        first = _num(runs["t_request_first_s"])
        handshake = (
            pd.concat([handshake, first], axis=1).min(axis=1, skipna=False).fillna(handshake)
        )
    values = handshake.dropna()
    return float(values.median()) if len(values) else math.nan


def _reason_kind(reason: str) -> str:
    """A reason as the report counts it: every disturbance above its limit is one kind (the
    amounts are in runs.csv and the attempts table), any other reason as written."""
    return "disturbance above its limit" if reason.startswith("disturbance:") else reason


def level_summary(
    frame: pd.DataFrame, levels: Sequence[str] | None = None, *, seed: int = 0
) -> list[LevelSummary]:
    """One summary per level, in ``levels`` order (default: first appearance)."""
    if frame.empty:
        return []
    measured = frame[~frame["warmup"].fillna(False).astype(bool)]
    good = analysable(frame)
    order = list(levels) if levels is not None else list(dict.fromkeys(frame["level"]))
    out = []
    for index, level in enumerate(order):
        all_runs = measured[measured["level"] == level]
        runs = good[good["level"] == level]
        totals = _num(runs["total_s"]).dropna().tolist()
        low, high = median_ci(totals, seed=seed + index)
        median = quantile(totals, 0.5)
        p95 = quantile(totals, 0.95)
        bound = median_of(runs["bound_s"])
        processing = median_of(runs["processing_s"]) if "processing_s" in runs.columns else math.nan
        gap = attribute_gap(
            total_s=median,
            handshake_s=setup_before_request(runs),
            processing_s=processing,
            bound_total_s=bound,
            bound_setup_s=median_of(runs["bound_setup_s"]),
            bound_processing_s=median_of(runs["bound_processing_s"]),
            retransmits=median_of(runs["retransmits"]),
            link_drops=_link_drops(runs),
            paced=_all_paced(runs),
        )
        reasons = all_runs.loc[~all_runs["valid"].fillna(False).astype(bool), "invalid_reason"]
        counts = pd.Series(
            [_reason_kind(part) for r in reasons.fillna("unknown") for part in r.split("; ")],
            dtype=object,
        ).value_counts()
        out.append(
            LevelSummary(
                level=level,
                runs=len(all_runs),
                valid=len(runs),
                median_s=median,
                ci_low_s=low,
                ci_high_s=high,
                p95_s=p95,
                bound_s=bound,
                median_ratio=median_of(runs["ratio"]),
                handshake_s=median_of(runs["handshake_s"]),
                ttfb_s=median_of(runs["ttfb_s"]),
                gap_s=float(gap["gap_s"]),
                gap_part=str(gap["gap_part"]),
                gap_setup_s=float(gap["gap_setup_s"]),
                gap_processing_s=float(gap["gap_processing_s"]),
                gap_transfer_s=float(gap["gap_transfer_s"]),
                retransmits=median_of(runs["retransmits"]),
                invalid_reasons="; ".join(f"{r} ({n})" for r, n in counts.items()),
                expected_s=median_of(runs["bound_expected_s"])
                if "bound_expected_s" in runs.columns
                else math.nan,
                mathis_s=median_of(runs["bound_mathis_s"])
                if "bound_mathis_s" in runs.columns
                else math.nan,
                min_rwnd_bytes=_median_of(runs, "min_rwnd_bytes"),
                own_wait_s=_median_of(runs, "own_wait_s"),
                endpoint_cpu_s=_median_of(runs, "endpoint_cpu_s"),
            )
        )
    return out


@dataclass(frozen=True)
class Effect(AsDict):
    level: str
    baseline: str
    pairs: int
    """Blocks where both levels have a valid measured run."""
    arm_s: float
    """Level minus baseline from the paired runs, balanced over both orders (positive: the
    level is slower; harness.analysis.effects.paired_effect)."""
    arm_ci_low_s: float
    arm_ci_high_s: float
    """Paired bootstrap 95 % interval of ``arm_s`` (NaN below two pairs)."""
    order_s: float
    """Second-position minus first-position effect, from the paired differences of blocks
    with each order; NaN when every block has the same order (not separable)."""


def effects(frame: pd.DataFrame, baselines: Mapping[str, str], *, seed: int = 0) -> list[Effect]:
    """Arm and order effects of each level against its baseline, from the blocks where both
    have a valid measured run (:func:`harness.analysis.effects.paired_effect`)."""
    good = analysable(frame)
    out = []
    for index, (level, baseline) in enumerate(baselines.items()):
        if level == baseline:
            continue
        a = good[good["level"] == level].set_index("block")
        b = good[good["level"] == baseline].set_index("block")
        blocks = sorted(set(a.index) & set(b.index))
        effect = paired_effect(
            [float(_num(pd.Series([a.loc[k, "total_s"]])).iloc[0]) for k in blocks],
            [float(_num(pd.Series([b.loc[k, "total_s"]])).iloc[0]) for k in blocks],
            [int(a.loc[k, "position"]) > int(b.loc[k, "position"]) for k in blocks],
            seed=seed + index,
        )
        out.append(
            Effect(
                level=level,
                baseline=baseline,
                pairs=effect.pairs,
                arm_s=effect.arm_s,
                arm_ci_low_s=effect.ci_low_s,
                arm_ci_high_s=effect.ci_high_s,
                order_s=effect.order_s,
            )
        )
    return out


def position_effect(frame: pd.DataFrame) -> pd.DataFrame:
    """Median deviation from the level's median by position in the block (all levels)."""
    good = analysable(frame).copy()
    if good.empty:
        return pd.DataFrame(columns=["position", "runs", "median_deviation_s"])
    good["total_s"] = _num(good["total_s"])
    good["deviation_s"] = good["total_s"] - good.groupby("level")["total_s"].transform("median")
    table = (
        good.groupby("position")["deviation_s"]
        .agg(runs="count", median_deviation_s="median")
        .reset_index()
    )
    return table


def median_run(frame: pd.DataFrame, level: str) -> pd.Series | None:
    """The valid measured run of ``level`` whose total is closest to the level's median."""
    good = analysable(frame)
    runs = good[good["level"] == level]
    if runs.empty:
        return None
    totals = _num(runs["total_s"])
    index = (totals - totals.median()).abs().idxmin()
    return runs.loc[index]


@dataclass(frozen=True)
class LevelAttempts:
    """What it took to get a level's valid runs, and the disturbance its runs carried."""

    level: str
    planned: int
    """Measured runs in the plan."""
    attempts: int
    """Measured attempts made (planned runs and their re-runs)."""
    valid: int
    most_attempts: int
    """The most attempts one planned run needed (or used up)."""
    disturbance_median_s: float
    disturbance_max_s: float
    """Over every measured attempt, valid or not (NaN where not estimated)."""
    disturbance_valid_max_s: float
    """The largest disturbance a valid run of the level kept."""
    fraction_median: float
    """Median disturbance / measured time."""
    limit_median_s: float

    @property
    def invalid_fraction(self) -> float:
        return math.nan if self.attempts == 0 else 1.0 - self.valid / self.attempts


def level_attempts(frame: pd.DataFrame, levels: Sequence[str] | None = None) -> list[LevelAttempts]:
    """Per level: planned runs, attempts, valid runs and the disturbance estimates."""
    if frame.empty:
        return []
    measured = frame[~frame["warmup"].fillna(False).astype(bool)]
    order = list(levels) if levels is not None else list(dict.fromkeys(frame["level"]))
    out = []
    for level in order:
        runs = measured[measured["level"] == level]
        attempt = _num(runs["attempt"]).fillna(1) if "attempt" in runs else pd.Series(1.0)
        valid = runs["valid"].fillna(False).astype(bool)
        disturbance = _num(runs.get("disturbance_s", pd.Series(dtype=float))).dropna()
        kept = _num(runs.loc[valid, "disturbance_s"]).dropna() if "disturbance_s" in runs else []
        out.append(
            LevelAttempts(
                level=level,
                planned=int((attempt == 1).sum()),
                attempts=len(runs),
                valid=int(valid.sum()),
                most_attempts=int(attempt.max()) if len(runs) else 0,
                disturbance_median_s=float(disturbance.median()) if len(disturbance) else math.nan,
                disturbance_max_s=float(disturbance.max()) if len(disturbance) else math.nan,
                disturbance_valid_max_s=float(max(kept)) if len(kept) else math.nan,
                fraction_median=median_of(runs.get("disturbance_fraction", pd.Series(dtype=float))),
                limit_median_s=median_of(runs.get("disturbance_limit_s", pd.Series(dtype=float))),
            )
        )
    return out


def levels_without_valid(frame: pd.DataFrame, levels: Sequence[str] | None = None) -> list[str]:
    """The levels (of ``levels``, default every level in the frame) that have no valid
    measured run: the experiment answers nothing about them."""
    if levels is None:
        levels = list(dict.fromkeys(frame["level"])) if not frame.empty else []
    good = answered(frame)
    have = set(good["level"]) if not good.empty else set()
    return [lv for lv in levels if lv not in have]


def answered(frame: pd.DataFrame) -> pd.DataFrame:
    """The analysable runs and the valid measured trials whose outcome is a failure (a
    drawn path failure that left nothing delivered: no time, an answer all the same)."""
    if frame.empty or "delivered" not in frame:
        return analysable(frame)
    failed = ~frame["warmup"].fillna(False).astype(bool)
    failed &= frame["valid"].fillna(False).astype(bool)
    failed &= frame["delivered"].astype("boolean").eq(False).fillna(False)
    return frame[failed | frame.index.isin(analysable(frame).index)]
