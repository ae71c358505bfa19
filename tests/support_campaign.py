"""A campaign directory from synthetic results (no runs): the connection experiment with
valid runs and its report and plots, the ack experiment failed; for the reproduction report's
tests."""

from __future__ import annotations

import json
from pathlib import Path

from harness.plan.planner import plan_runs
from harness.report.build import build_report
from harness.store.resultdir import ResultDir, atomic_write_json
from tbcore.runrow import RunRow

TOTALS = {"h2-new": [1.449, 1.452, 1.447], "h2-reused": [0.2412, 0.2415, 0.2410]}
"""Medians 1.449 s (the chapter's 1185.3 ms: +22 %) and 0.2412 s (240.9 ms: +0.1 %)."""


def synthetic_campaign(root: Path, below: bool = False, reps: int = 3) -> Path:
    """A chapter campaign of ``reps`` runs a level (the medians of :data:`TOTALS`, spread by
    +-0.1 % about them from the fourth run on)."""
    result = ResultDir.create(root, "connection")
    result.write_manifest(
        {
            "resolved": {
                "name": "connection",
                "question": "q?",
                "seed": 1,
                "levels": [{"name": n, "baseline": "h2-new"} for n in TOTALS],
            }
        }
    )
    for run in plan_runs(list(TOTALS), reps):
        spread = TOTALS[run.level]
        total = spread[run.rep] if run.rep < 3 else spread[0] * (1 + 0.001 * (-1) ** run.rep)
        bound = 1.4334 if run.level == "h2-new" else 0.2385
        result.fresh_run_dir(run.run_id)
        row = RunRow(
            **run.to_dict(), total_s=total, bound_s=bound, ratio=total / bound, valid=True,
            below_bound="0.500 x the bound: premise not met: none" if below and run.rep == 0
            else None,
        )  # fmt: skip
        atomic_write_json(result.run_dir(run.run_id) / "row.json", row.to_dict())
    result.write_tables()
    build_report(result.path)
    campaign = root / "campaign" / "20261204T000000Z"
    campaign.mkdir(parents=True)
    entries = [
        {"name": "connection", "status": "finished", "result_dir": str(result.path), "runs": 6,
         "invalid": 0},
        {"name": "ack", "status": "failed", "error": "RuntimeError: the link went away"},
    ]  # fmt: skip
    index = {"started_utc": "20261204T000000Z", "finished_utc": "20261204T003000Z",
             "quick": True, "chapter": True, "wall_s": 1800.0, "entries": entries}  # fmt: skip
    (campaign / "campaign.json").write_text(json.dumps(index))
    return campaign
