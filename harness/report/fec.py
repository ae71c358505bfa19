"""The FEC section of a report (issue 12): completion quantiles per level beside docs/models.md
section 9 (retransmission rounds) and section 10 (the FEC bound), the repair symbols sent
against the binomial requirement at the realised loss, extra rounds and decode failures,
and the completion-time distribution per level on a log axis.

Pure functions of the runs frame (runs.csv as pandas); :func:`fec_section` is empty for an
experiment without a fec level.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness import bounds
from netem.linkspec import LinkSpec
from tbcore import fecmath, kinds
from tbcore.settings import TCP_DEFAULT_MSS_BYTES, Settings

QUANTILES = (0.5, 0.9, 0.99)
DEFAULT_SETTINGS = Settings()
"""The workloads' sizes and processing at the knobs' defaults (the frame has no settings)."""
FEC_TARGET = 0.999
"""docs/models.md section 10's target, for the path's own FEC bound (the runs' is in bound_s)."""


def _measured(frame: pd.DataFrame, level: str) -> pd.DataFrame:
    rows = frame[(frame["level"] == level) & (~frame["warmup"].astype(bool))]
    return rows[rows["total_s"].notna()]


def _valid_mask(runs: pd.DataFrame) -> pd.Series:
    if "valid" not in runs:
        return pd.Series(True, index=runs.index)
    return runs["valid"].fillna(False).astype(bool)


def _used(runs: pd.DataFrame) -> pd.DataFrame:
    """The level's valid runs, or every attempt when none of them is valid (the table marks
    that level): a busy host's attempts are not results (harness.validity.rules)."""
    valid = runs[_valid_mask(runs)]
    return valid if len(valid) else runs


def path_models(spec: LinkSpec, workload: str, processing_s: float) -> dict[str, float]:
    """For the path of a level: MODELS s9's retransmission completion (p50, p99) of the data
    direction at its mean loss, and s10's FEC bound (k + r symbols at the target)."""
    kind = kinds.workload(workload)
    up_bytes, down_bytes = kind.up_bytes(DEFAULT_SETTINGS), kind.down_bytes(DEFAULT_SETTINGS)
    upload = up_bytes > down_bytes
    size = max(up_bytes, down_bytes)
    direction = spec.up if upload else spec.down
    rate = direction.rate_bps or math.inf
    loss = direction.mean_loss
    base = bounds.serial_time(size, 0, rate, rate, spec.rtt_s, processing_s)
    packets = -(-size // TCP_DEFAULT_MSS_BYTES)
    out = {
        "retx_p50_s": bounds.retransmission_time_s(base, spec.rtt_s, packets, loss, 0.5)
        if loss
        else base,
        "retx_p99_s": bounds.retransmission_time_s(base, spec.rtt_s, packets, loss, 0.99)
        if loss
        else base,
    }
    k = -(-size // fecmath.FEC_SYMBOL_BYTES)
    r = fecmath.repair_symbols(k, min(loss, 0.99), FEC_TARGET) if k else 0
    out["fec_bound_s"] = bounds.serial_time(
        (k + r) * fecmath.FEC_SYMBOL_BYTES, 0, rate, rate, spec.rtt_s, processing_s
    )
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value * 1e3:.0f}"


def fec_table(
    frame: pd.DataFrame, levels: Sequence[str], links: Mapping[str, LinkSpec]
) -> list[list[str]]:
    rows = []
    for level in levels:
        attempts = _measured(frame, level)
        if attempts.empty:
            continue
        runs = _used(attempts)
        valid = int(_valid_mask(attempts).sum())
        first = runs.iloc[0]
        workload = str(first.get("workload"))
        processing = kinds.workload(workload).processing_s(DEFAULT_SETTINGS)
        models = path_models(links[level], workload, processing)
        totals = runs["total_s"].to_numpy(dtype=float)
        quant = [float(np.quantile(totals, q)) for q in QUANTILES]
        is_fec = first.get("protocol") == "fec"
        bound = float(runs["bound_s"].median()) if "bound_s" in runs else math.nan
        cells = [
            level if valid else f"{level} (no valid run: every attempt)",
            f"{len(attempts)} ({valid})",
            *[_ms(q) for q in quant],
            _ms(bound),
            f"{quant[2] / bound:.2f}" if bound and np.isfinite(bound) else "-",
            _ms(models["retx_p50_s"]),
            _ms(models["retx_p99_s"]),
            _ms(models["fec_bound_s"]),
        ]
        if is_fec and "fec_repair_symbols" in runs:
            r = runs["fec_repair_symbols"].dropna()
            need = runs.get("fec_repair_required", pd.Series(dtype=float)).dropna()
            cells += [
                f"{r.median():.0f}" if not r.empty else "-",
                f"{need.median():.0f}" if not need.empty else "-",
                str(int(runs["fec_extra_rounds"].fillna(0).sum())),
                str(int(runs["fec_decode_failures"].fillna(0).sum())),
            ]
        else:
            cells += ["-", "-", "-", "-"]
        rows.append(cells)
    return rows


HEADERS = [
    "level",
    "attempts (valid)",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "bound ms",
    "p99/bound",
    "s9 retx p50 ms",
    "s9 retx p99 ms",
    "s10 FEC bound ms",
    "r median",
    "r required (realised loss)",
    "extra rounds",
    "decode failures",
]


def plot_distribution(frame: pd.DataFrame, levels: Sequence[str], path: Path) -> None:
    """Empirical CDF of the completion time per level over its valid runs (every attempt
    where none is valid), log time axis (figure 12-18)."""
    fig, ax = plt.subplots(figsize=(8.0, 4.5))
    for level in levels:
        runs = _measured(frame, level)
        if runs.empty:
            continue
        runs = _used(runs)
        values = np.sort(runs["total_s"].to_numpy(dtype=float)) * 1e3
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=level)
    ax.set_xscale("log")
    ax.set_xlabel("completion time (ms, log)")
    ax.set_ylabel("fraction of runs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fec_section(
    frame: pd.DataFrame, levels: Sequence[str], plots_dir: Path, links: Mapping[str, LinkSpec]
) -> list[str]:
    """Markdown lines of the FEC section (and its plot); empty without a fec level."""
    if "protocol" not in frame or not (frame["protocol"] == "fec").any():
        return []
    plot_distribution(frame, levels, plots_dir / "completion_cdf.png")
    lines = [
        "## FEC against retransmission (docs/models.md sections 9 and 10)",
        "",
        "Quantiles and counts over the valid runs of each level (attempts made, valid ones "
        "in brackets; a level with no valid run shows every attempt and says so): an attempt "
        "the busy host made invalid is not a result (Validity). bound: the level's own "
        "bound (fec: the serial time of the symbols it sent, no retransmission round). s9: "
        "completion of ideal selective retransmission of the data at the path's loss; s10: "
        f"the FEC bound at the target {FEC_TARGET}. r required: MODELS s10's r for the "
        "run's k at the loss the "
        "link realised on the data direction.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "| " + " | ".join("---" for _ in HEADERS) + " |",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in fec_table(frame, levels, links)]
    lines += ["", "![completion time per level, log axis](plots/completion_cdf.png)", ""]
    return lines
