"""The report's section on the path's shape: what each edge of a relay or of two paths
carried per level, a failover's cost, and published medians (``[reference]``) beside ours.
Empty for an experiment on one direct link without references."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

EDGE_COLUMNS = ("bytes_near_link", "bytes_link", "bytes_link_b", "bytes_exit_link")


def _valid(frame: pd.DataFrame, level: str) -> pd.DataFrame:
    rows = frame[(frame["level"] == level) & (frame["warmup"] != True)]  # noqa: E712
    return rows[rows["valid"] == True]  # noqa: E712


def _median(values: pd.Series) -> float | None:
    numbers = pd.to_numeric(values, errors="coerce").dropna()
    return float(numbers.median()) if not numbers.empty else None


def _edges_cell(rows: pd.DataFrame) -> str:
    parts = []
    for column in EDGE_COLUMNS:
        if column in rows.columns:
            value = _median(rows[column])
            if value is not None:
                parts.append(f"{column[6:]} {value / 1e6:.2f} MB")
    return ", ".join(parts) or "–"


def _ms(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 1e3:.1f}"


def paths_section(
    frame: pd.DataFrame, levels: Sequence[str], reference_ms: Mapping[str, float]
) -> list[str]:
    """Per level: its shape, median time and bound of the valid runs, the published
    median, bytes per edge; then every failover's recovery."""
    shaped = "topology" in frame.columns and frame["topology"].isin(["relay", "dual"]).any()
    if not shaped and not reference_ms:
        return []
    rows_out = []
    for level in levels:
        rows = _valid(frame, level)
        every = frame[frame["level"] == level]
        if every.empty:
            continue
        ref = reference_ms.get(level)
        rows_out.append(
            [
                level,
                str(every["topology"].iloc[0]) if "topology" in every else "direct",
                f"{len(rows)} of {len(every)}",
                _ms(_median(rows["total_s"])),
                _ms(_median(every["bound_s"])),
                "–" if ref is None else f"{ref:.1f}",
                _edges_cell(rows),
            ]
        )
    lines = ["## The path's shape", ""]
    lines += [
        "Medians of the valid runs (ms) beside the bound and a published median "
        "(`[reference]`), and the bytes each edge carried upstream.",
        "",
        "| level | topology | valid | median | bound | reference | bytes per edge |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *("| " + " | ".join(r) + " |" for r in rows_out),
        "",
    ]
    return lines + _failover_lines(frame)


def _failover_lines(frame: pd.DataFrame) -> list[str]:
    if "recovery_s" not in frame.columns:
        return []
    lines = []
    for _, row in frame[pd.to_numeric(frame["recovery_s"], errors="coerce").notna()].iterrows():
        lines.append(
            f"- failover {row['run_id']}: the link went down {_s(row, 'outage_after_start_s')} "
            f"into the transfer; {_s(row, 'total_s')} against {_s(row, 'bound_s')} for an ideal "
            f"continuation: recovery cost {_s(row, 'recovery_s')}"
        )
    return ["Failovers:", "", *lines, ""] if lines else []


def _s(row: Any, column: str) -> str:
    value = pd.to_numeric(pd.Series([row.get(column)]), errors="coerce").iloc[0]
    return "–" if pd.isna(value) else f"{float(value):.2f} s"
