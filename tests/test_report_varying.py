"""harness.report.varying: the sections appear when their data is there, and never raise on a
partial result."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.report.varying import varying_sections


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": ["t0", "t1", "t2", "c0"],
            "level": ["trace", "trace", "trace", "constant"],
            "rep": [0, 1, 2, 0],
            "warmup": False,
            "valid": [True, True, False, True],
            "total_s": [40.0, 47.0, 60.0, 37.5],
            "bound_s": [30.0, 33.0, 35.0, 34.1],
            "ratio": [1.33, 1.42, 1.7, 1.1],
            "deadline_s": 45.0,
            "trace_position_up_s": [5.0, 85.0, 120.0, None],
            "offered_up_bps": [5.2e6, 8e6, 3e6, 5.69e6],
            "offered_down_bps": 6.4e6,
        }
    )


def test_a_traced_agent_result_gets_its_deadline_rounds_and_starts(tmp_path: Path) -> None:
    rounds = pd.DataFrame(
        {
            "run_id": ["t0"] * 4 + ["t1"] * 4,
            "round": [1, 2, 3, 4] * 2,
            "attempt": 0,
            "network_s": [1, 1, 3, 3, 3, 3, 1, 1],
            "network_bound_s": [0.8] * 8,
            "offered_up_bps": [8e6, 8e6, 2e6, 2e6, 2e6, 2e6, 8e6, 8e6],
        }
    )
    rounds.to_csv(tmp_path / "round_trace.csv", index=False)
    text = "\n".join(varying_sections(tmp_path, _frame(), ["trace", "constant"]))
    assert "## The deadline over a link that varies" in text
    assert "| trace | 2 | 45.0 | 0.50 (1 of 2) | 0.01 to 0.99 |" in text
    assert "| constant | 1 | 45.0 | 1.00 (1 of 1) | 0.03 to 1.00 |" in text
    assert "## Slow rounds come in runs" in text
    assert "## Where each run started in its trace" in text
    assert "| trace | 1 | 85.00 | 8.00 / 6.40 |" in text
    assert "## Beside competing traffic" not in text


def test_a_result_without_these_columns_gets_none(tmp_path: Path) -> None:
    frame = pd.DataFrame({"run_id": ["a"], "level": ["x"], "total_s": [1.0], "valid": [True]})
    assert varying_sections(tmp_path, frame, ["x"]) == []
    assert varying_sections(tmp_path, pd.DataFrame(), ["x"]) == []
    (tmp_path / "round_trace.csv").write_text("")
    assert varying_sections(tmp_path, _frame(), ["trace"])  # unreadable table: no raise
