"""What a run's shared medium did (an ``air=`` link), beside the exchange model's bound.

From the emulator's medium accounts over the run (:class:`netem.stats.AirStats`, the
difference of the two snapshots that bracket the client): the row's columns and the run's
``air.json`` (per direction and frame kind: frames, IP bytes, measured and modelled medium
time, exchanges, waiting time, refused frames).

The bound is :func:`harness.bounds.airtime_bound` applied to the frames the medium carried:
the medium time they needed by the 802.11a exchange arithmetic, and the completion time no
request carrying them can beat. ``air_model_error`` compares the medium's own busy time
with the model; the two differ only by the mean-size rounding of the model (and by the
backoff, when it is on, which the model leaves out).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.bounds import airtime_bound
from harness.store.resultdir import atomic_write_json
from netem.air import AirSpec
from netem.linkspec import LinkSpec
from netem.stats import AIR_KEYS, AirStats, LinkStats
from tbcore import kinds
from tbcore.records import REQUIRED, Record, col, record

AIR_COLUMNS = (
    "air_busy_s",
    "air_frames",
    "air_time_data_s",
    "air_time_ack_s",
    "air_frames_data",
    "air_frames_ack",
    "air_frames_up",
    "air_frames_down",
    "air_bound_busy_s",
    "air_model_error",
    "air_bound_s",
)
"""runs.csv columns of an air= run (absent on other links)."""


@record("air", 1)
class AirRecord(Record):
    """A run's ``air.json``: the shared medium's accounts over the run and the model's."""

    air: dict = col(REQUIRED, doc="The medium's parameters (netem.air.AirSpec.to_dict()).")
    by_kind: dict = col(
        REQUIRED,
        doc="Per direction.kind (up.data, up.ack, down.data, down.ack): frames, ip_bytes, "
        "busy_s (the medium's own), model_s (the exchange model at the kind's mean size).",
    )
    exchanges: dict = col(REQUIRED, doc="Medium exchanges per direction.")
    wait_s: dict = col(REQUIRED, doc="Summed wait for the medium per direction.", unit="s")
    dropped: dict = col(REQUIRED, doc="Frames the medium queue refused, per direction.")
    busy_s: float = col(REQUIRED, doc="Medium occupied, both directions.", unit="s")
    bound: dict = col(
        REQUIRED,
        doc="harness.bounds.airtime_bound: busy_s, data_s, ack_s, processing_s, rtt_s, total_s.",
    )


def air_record(
    air_stats: AirStats, air: AirSpec, *, processing_s: float, rtt_s: float
) -> tuple[dict[str, Any], AirRecord]:
    """(row columns, the ``air.json`` record) of one run's medium accounts."""
    bound = airtime_bound(
        air_stats.frames, air_stats.ip_bytes, processing_s=processing_s, rtt_s=rtt_s, air=air
    )
    busy = {k: v / 1e9 for k, v in air_stats.busy_ns.items()}
    frames = air_stats.frames

    def total(values: dict[str, Any], part: str) -> Any:
        return sum(v for k, v in values.items() if part in k.split("."))

    row = {
        "air_busy_s": air_stats.charged_s,
        "air_frames": air_stats.frames_total,
        "air_time_data_s": total(busy, "data"),
        "air_time_ack_s": total(busy, "ack"),
        "air_frames_data": total(frames, "data"),
        "air_frames_ack": total(frames, "ack"),
        "air_frames_up": total(frames, "up"),
        "air_frames_down": total(frames, "down"),
        "air_bound_busy_s": bound.busy_s,
        "air_model_error": (air_stats.charged_s / bound.busy_s - 1.0 if bound.busy_s > 0 else None),
        "air_bound_s": bound.total_s,
    }
    doc = AirRecord(
        air=air.to_dict(),
        by_kind={
            key: {
                "frames": frames.get(key, 0),
                "ip_bytes": air_stats.ip_bytes.get(key, 0),
                "busy_s": busy.get(key, 0.0),
                "model_s": bound.medium_s.get(key, 0.0),
            }
            for key in AIR_KEYS
        },
        exchanges=dict(air_stats.exchanges),
        wait_s={k: v / 1e9 for k, v in air_stats.wait_ns.items()},
        dropped=dict(air_stats.dropped),
        busy_s=air_stats.charged_s,
        bound={
            "busy_s": bound.busy_s,
            "data_s": bound.data_s,
            "ack_s": bound.ack_s,
            "processing_s": bound.processing_s,
            "rtt_s": bound.rtt_s,
            "total_s": bound.total_s,
        },
    )
    return row, doc


def air_columns(stats_path: Path, out_path: Path, settings: Any, link: LinkSpec) -> dict[str, Any]:
    """The row's air columns of a run on an ``air=`` link, from its ``link_stats.json``
    (``stats_path``); writes the run's :class:`AirRecord` to ``out_path``. Empty otherwise."""
    if link.air is None or not stats_path.exists():
        return {}
    diff = LinkStats.from_dict(json.loads(stats_path.read_text(encoding="utf-8")))
    if diff.air is None:
        return {}
    row, doc = air_record(
        diff.air,
        link.air,
        processing_s=kinds.workload(settings.workload).processing_s(settings),
        rtt_s=link.rtt_s,
    )
    atomic_write_json(out_path, doc.to_dict())
    return row


REPORT_COLUMNS = (
    ("data frames", "air_frames_data", 1.0, "{:.0f}"),
    ("ACK-only frames", "air_frames_ack", 1.0, "{:.0f}"),
    ("ACKs per data frame", "air_acks_per_data", 1.0, "{:.3f}"),
    ("medium, data (s)", "air_time_data_s", 1.0, "{:.3f}"),
    ("medium, ACK-only (s)", "air_time_ack_s", 1.0, "{:.3f}"),
    ("medium busy (s)", "air_busy_s", 1.0, "{:.3f}"),
    ("model on frames (s)", "air_bound_busy_s", 1.0, "{:.3f}"),
    ("busy vs model (%)", "air_model_error", 100.0, "{:+.2f}"),
    ("completion (s)", "total_s", 1.0, "{:.3f}"),
    ("bound (s)", "air_bound_s", 1.0, "{:.3f}"),
)
"""The report's medium table: (header, runs.csv column, scale, format)."""


def air_report_lines(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """``## Shared medium``: per level, medians of the medium's accounts next to the
    completion time and the exchange-model bound; empty when no run had a medium."""
    if frame.empty or "air_busy_s" not in frame.columns:
        return []
    measured = frame[~frame["warmup"].fillna(False).astype(bool)].copy()
    measured = measured[pd.to_numeric(measured["air_busy_s"], errors="coerce").notna()]
    if measured.empty:
        return []
    data = pd.to_numeric(measured["air_frames_data"], errors="coerce")
    acks = pd.to_numeric(measured["air_frames_ack"], errors="coerce")
    measured["air_acks_per_data"] = acks / data.where(data > 0)
    valid = measured["valid"].astype(str).str.lower() == "true"
    rows = []
    for level in levels:
        runs = measured[measured["level"] == level]
        if runs.empty:
            continue
        good = runs[valid[runs.index]]
        used = good if not good.empty else runs
        cells = [level, f"{len(good)}/{len(runs)}"]
        for _, column, scale, fmt in REPORT_COLUMNS:
            values = pd.to_numeric(used.get(column, pd.Series(dtype=float)), errors="coerce")
            values = values.dropna()
            cells.append(fmt.format(values.median() * scale) if len(values) else "–")
        rows.append(cells)
    headers = ["level", "valid/runs", *(name for name, _, _, _ in REPORT_COLUMNS)]
    table = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    table += ["", *tradeoff_lines(measured[valid], levels)]
    return [
        "## Shared medium",
        "",
        "Medians per level over the valid measured runs (over all measured runs where a "
        "level has none valid: the medium's accounts are the emulator's scheduled times, "
        "exact under host load; the completion time is not). Medium time is what the "
        "emulator's medium was occupied while the client ran, by frame kind (ACK-only: a "
        "TCP segment without payload, or a non-TCP packet of at most 128 IP bytes); the "
        "model is harness.bounds.airtime_bound applied to the frames carried (802.11a "
        "exchanges at each kind's mean size); the bound is the completion time no request "
        "carrying those frames can beat (all exchanges one at a time, and no data exchange "
        "during the processing or the wired round trip).",
        "",
        *table,
        "",
    ]


def tradeoff_lines(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """The chapter's trade-off (§12.4.1): per protocol, each level against the one whose
    ACK-only frames held the medium longest (the most ACKs), the medium time its fewer ACKs
    freed beside the change in completion time (medians of valid runs)."""
    if frame.empty or "protocol" not in frame.columns:
        return []
    numbers = pd.DataFrame(
        {
            "protocol": frame["protocol"],
            "level": frame["level"],
            "ack_s": pd.to_numeric(frame["air_time_ack_s"], errors="coerce"),
            "total": pd.to_numeric(frame["total_s"], errors="coerce"),
        }
    )
    medians = numbers.groupby(["protocol", "level"])[["ack_s", "total"]].median()
    rows = []
    for protocol, group in medians.groupby(level=0):
        by_level = group.droplevel(0)
        most = by_level["ack_s"].idxmax()
        for level in (lv for lv in levels if lv in by_level.index and lv != most):
            freed = by_level.loc[most, "ack_s"] - by_level.loc[level, "ack_s"]
            changed = by_level.loc[level, "total"] - by_level.loc[most, "total"]
            rows.append(f"| {protocol} | {level} | {most} | {freed:.3f} | {changed:+.3f} |")
    if not rows:
        return []
    return [
        "Fewer ACKs against the most (per protocol): medium time freed and completion time "
        "changed.",
        "",
        "| protocol | level | against | ACK medium freed (s) | completion changed (s) |",
        "|---|---|---|---|---|",
        *rows,
    ]
