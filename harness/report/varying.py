"""The report's sections for links that vary (issue 28): a task's deadline over a traced
uplink (T's distribution, P(T <= D) with its interval, the bound per run from the trace's
rates), whether slow rounds come in runs, where each run started in its trace, and a request
beside competing traffic (docs/models.md sections 13 to 15). Each section appears only when its
columns or tables are there; none raises on a partial result (a section it cannot compute
says why in one line)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from harness.analysis import varying
from harness.store.files import ROUND_TRACE_FILE


def _s(value: float, digits: int = 1) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _ms(value: float) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 1e3:.1f}"


def _pct(value: float) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:.1f} %"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _present(frame: pd.DataFrame, column: str) -> bool:
    return column in frame.columns and frame[column].notna().any()


def deadline_lines(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """T's distribution and P(T <= D) per level with a deadline."""
    if not _present(frame, "deadline_s"):
        return []
    rows = []
    for level in levels:
        mine = frame[frame["level"] == level]
        if not _present(mine, "deadline_s"):
            continue
        result = varying.deadline(frame, level, float(mine["deadline_s"].dropna().iloc[0]))
        if result is None:
            rows.append([level, "0", "–", "no valid run", *["–"] * 6])
            continue
        rows.append(
            [
                level,
                str(result.runs),
                _s(result.deadline_s),
                f"{result.probability:.2f} ({result.met} of {result.runs})",
                f"{result.ci_low:.2f} to {result.ci_high:.2f}",
                f"{_s(result.min_s)} / {_s(result.p10_s)} / {_s(result.median_s)} / "
                f"{_s(result.p90_s)} / {_s(result.max_s)}",
                f"{_s(result.bound_min_s)} / {_s(result.bound_median_s)} / "
                f"{_s(result.bound_max_s)}",
                f"{result.bound_met} of {result.runs}",
                _s(result.ratio_median, 3),
            ]
        )
    return [
        "## The deadline over a link that varies (docs/models.md sections 13 and 14)",
        "",
        "T: the task's time (s) over the level's valid runs, min / p10 / median / p90 / max; "
        "P(T <= D) with its exact (Clopper-Pearson) 95 % interval: with n runs and none "
        "missing the deadline the interval still reaches down to 0.025^(1/n), so a platform "
        "that must show P >= 0.99 needs several hundred runs that all meet it. The bound of "
        "each run is the task at the rates its trace offered from where that run began (on "
        "a fixed rate, the same for every run): a run whose bound misses the deadline could "
        "not have met it with any transport.",
        "",
        *_table(
            [
                "level",
                "runs",
                "D (s)",
                "P(T <= D)",
                "95 % CI",
                "T min / p10 / median / p90 / max",
                "bound min / median / max",
                "bound meets D",
                "ratio",
            ],
            rows,
        ),
        "",
    ]


def round_lines(result_dir: Path, frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """Slow rounds in runs: round_trace.csv's per-round network times."""
    path = Path(result_dir) / ROUND_TRACE_FILE
    if not path.is_file():
        return []
    try:
        rounds = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return ["## Rounds on a traced uplink", "", "round_trace.csv could not be read.", ""]
    rows = []
    for level in levels:
        result = varying.round_runs(rounds, frame, level)
        if result is None:
            continue
        rows.append(
            [
                level,
                str(result.runs),
                str(result.rounds),
                _s(result.lag1, 2),
                _s(result.lag1_offered, 2),
                _pct(result.p_slow),
                _pct(result.p_slow_after_slow),
                _s(result.ratio_median, 3),
            ]
        )
    if not rows:
        return []
    return [
        "## Slow rounds come in runs",
        "",
        "Per round (round_trace.csv): its network time, from its first request byte to its "
        "action less the model's time, and the rate the uplink's trace offered its upload "
        "(b_i). lag-1: the correlation of consecutive rounds within a run (0 for independent "
        "rounds); slow: a round slower than the level's median round; after a slow round: "
        "how often the next is slow too (the share of slow rounds when they are "
        "independent). ratio: a round's network time over the least it could be (its "
        "screenshot through the trace from its first byte, one round trip, the reply).",
        "",
        *_table(
            [
                "level",
                "runs",
                "rounds",
                "lag-1 (time)",
                "lag-1 (b_i)",
                "slow",
                "slow after a slow round",
                "round ratio",
            ],
            rows,
        ),
        "",
    ]


def trace_lines(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """Where each traced run began and what its trace offered."""
    columns = [c for c in ("trace_position_up_s", "trace_position_down_s") if _present(frame, c)]
    if not columns:
        return []
    rows = []
    for row in frame.sort_values(["level", "rep"]).itertuples():
        if row.level not in levels or bool(getattr(row, "warmup", False)):
            continue
        positions = [getattr(row, c) for c in columns]
        if all(not isinstance(p, float) or not math.isfinite(p) for p in positions):
            continue
        offered = [getattr(row, f"offered_{d}_bps", math.nan) for d in ("up", "down")]
        rows.append(
            [
                row.level,
                str(row.rep),
                " / ".join(_s(p, 2) for p in positions),
                " / ".join(_s(o / 1e6, 2) for o in offered),
                _s(row.total_s, 3),
                _s(row.bound_s, 3),
                _s(row.ratio, 3),
                "yes" if bool(row.valid) else "no",
            ]
        )
    return [
        "## Where each run started in its trace",
        "",
        f"Trace position (s into the trace, {' / '.join(c.split('_')[2] for c in columns)}) "
        "when the measured work began, the mean capacity up / down offered while it ran "
        "(Mbit/s), the measured time, the bound from that trace position and their ratio.",
        "",
        *_table(
            ["level", "rep", "position", "offered", "total (s)", "bound (s)", "ratio", "valid"],
            rows,
        ),
        "",
    ]


def competition_lines(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """The request beside competing traffic, against itself alone."""
    if not _present(frame, "cross"):
        return []
    results = varying.competition(frame, levels)
    rows = [
        [
            r.level,
            r.cross,
            str(r.runs),
            _ms(r.median_s),
            _ms(r.alone_s),
            _s(r.slowdown, 2),
            _ms(r.bound_s),
            _pct(r.fair_share),
            _pct(r.request_share),
            _s(r.cross_bps / 1e6, 1),
            _ms(r.standing_queue_s),
            _ms(r.bound_fair_s),
            _s(r.ratio_fair, 3),
        ]
        for r in results
    ]
    return [
        "## Beside competing traffic (docs/models.md section 15)",
        "",
        "Medians over the valid runs, times in ms. slowdown: the level's median over the "
        "median of the levels without competitors. bound: the strict bound of the path "
        "alone. fair share: 1/(n+1) beside n TCP flows (beside a UDP stream, what it "
        "leaves); the request's share: its bytes over everything the bottleneck delivered "
        "in its direction while it ran (its slow start and its waits for ACKs leave the "
        "competitors the rest). standing queue: the least its data packets waited in the "
        "bottleneck's queue; fair bound: the request at its fair share of the rate with every "
        "round trip crossing that queue (a model of the settled competition, not a lower "
        "bound: a request that joins before the flows settle can get more).",
        "",
        *_table(
            [
                "level",
                "cross",
                "runs",
                "median",
                "alone",
                "slowdown",
                "bound",
                "fair share",
                "its share",
                "cross Mbit/s",
                "standing queue",
                "fair bound",
                "ratio to fair bound",
            ],
            rows,
        ),
        "",
    ]


def varying_sections(result_dir: Path, frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """Every section of this module that the result has the data for."""
    if frame.empty:
        return []
    return [
        *deadline_lines(frame, levels),
        *round_lines(result_dir, frame, levels),
        *trace_lines(frame, levels),
        *competition_lines(frame, levels),
    ]
