"""harness.report.fec: the FEC table and plot from a runs frame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.report import fec as fecreport
from netem.linkspec import parse_link

LOSSY = parse_link("rtt=200ms,rate=333mbit,loss=14%")
LINKS = {"bbr": LOSSY, "fecad": LOSSY}


def frame() -> pd.DataFrame:
    rows = []
    for i in range(20):
        rows.append(
            {
                "level": "fecad",
                "warmup": False,
                "total_s": 0.25 + i * 1e-3,
                "valid": True,
                "protocol": "fec",
                "workload": "tts",
                "link": "rtt=200ms,rate=333mbit,loss=14%",
                "bound_s": 0.242,
                "fec_repair_symbols": 64,
                "fec_repair_required": 63,
                "fec_extra_rounds": 1 if i == 0 else 0,
                "fec_decode_failures": 1 if i == 0 else 0,
            }
        )
        rows.append(
            {
                "level": "bbr",
                "warmup": False,
                "total_s": 0.3 + i * 0.1,
                "valid": i % 2 == 0,
                "protocol": "h2",
                "workload": "tts",
                "link": "rtt=200ms,rate=333mbit,loss=14%",
                "bound_s": 0.2385,
            }
        )
    return pd.DataFrame(rows)  # fmt: skip


def test_path_models_reproduce_models_worked_examples() -> None:
    models = fecreport.path_models(LOSSY, "tts", 0.030)
    assert models["retx_p99_s"] == pytest.approx(1.2385, abs=1e-3)  # 6 rounds
    assert models["fec_bound_s"] == pytest.approx(0.2385 + 64 * 1416 * 8 / 333e6, abs=2e-3)


def test_table_and_plot(tmp_path: Path) -> None:
    lines = fecreport.fec_section(frame(), ["bbr", "fecad"], tmp_path, LINKS)
    text = "\n".join(lines)
    assert "| fecad | 20 (20) | 260 |" in text
    # bbr's quantiles are over its 10 valid runs (0.3 s + 0.2 s steps), not all 20 attempts
    assert "| bbr | 20 (10) | 1200 | 1920 | 2082 |" in text
    fec_row = next(line for line in lines if line.startswith("| fecad"))
    assert fec_row.rstrip(" |").endswith("64 | 63 | 1 | 1")
    assert (tmp_path / "completion_cdf.png").stat().st_size > 0
    h2_only = frame()[frame()["protocol"] == "h2"]
    assert fecreport.fec_section(h2_only, ["bbr"], tmp_path, LINKS) == []


def test_a_level_without_a_valid_run_shows_every_attempt_and_says_so(tmp_path: Path) -> None:
    runs = frame()
    runs.loc[runs["level"] == "bbr", "valid"] = False
    lines = fecreport.fec_section(runs, ["bbr", "fecad"], tmp_path, LINKS)
    assert any(
        line.startswith("| bbr (no valid run: every attempt) | 20 (0) | 1250 |") for line in lines
    )
