"""testbed compare A B: medians side by side, B - A with a bootstrap interval, and which
levels moved beyond their noise; experiment or campaign directories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.analysis import compare
from harness.cli import main
from harness.plan.planner import plan_runs
from harness.store.resultdir import ResultDir, atomic_write_json
from tbcore.errors import SpecError
from tbcore.runrow import RunRow


def _result(root: Path, name: str, totals: dict[str, list[float]]) -> Path:
    """A result directory whose level ``lv`` has valid runs with the totals given."""
    result = ResultDir.create(root, name)
    result.write_manifest({"resolved": {"name": name, "levels": [{"name": n} for n in totals]}})
    reps = max(len(v) for v in totals.values())
    for run in plan_runs(list(totals), reps):
        values = totals[run.level]
        if run.rep >= len(values):
            continue
        result.fresh_run_dir(run.run_id)
        row = RunRow(**run.to_dict(), total_s=values[run.rep], valid=True)
        atomic_write_json(result.run_dir(run.run_id) / "row.json", row.to_dict())
    result.write_tables()
    return result.path


def test_levels_that_moved_beyond_their_noise(tmp_path: Path) -> None:
    base = [1.000, 1.002, 0.998, 1.001, 0.999]
    a = _result(tmp_path / "a", "connection", {"new": base, "reused": base, "once": [0.24]})
    b = _result(
        tmp_path / "b",
        "connection",
        {"new": [t + 0.05 for t in base], "reused": [t + 0.0005 for t in base], "once": [0.25]},
    )
    result = compare.compare_dirs(a, b)
    by_level = {c.level: c for c in result.levels}
    new = by_level["new"]
    assert (new.runs_a, new.runs_b) == (5, 5)
    assert new.difference_s == pytest.approx(0.05)
    assert new.ci_low_s > 0 and new.moved == "slower"
    assert by_level["reused"].moved == "no"  # inside the noise floor
    once = by_level["once"]
    assert once.moved == "no interval: fewer than two valid runs a side"
    assert once.difference_s == pytest.approx(0.01) and math.isnan(once.ci_low_s)
    text = compare.markdown(result)
    assert "Moved: 1 of 3 levels: connection/new (slower)" in text
    assert "| connection | new | 5 | 5 | 1000.0 | 1050.0 | 50.0 |" in text


def test_campaigns_compare_the_experiments_both_have(tmp_path: Path) -> None:
    runs = {"x": [1.0, 1.1], "y": [2.0, 2.1]}
    for side in ("a", "b"):
        root = tmp_path / side / "results"
        dirs = {n: _result(root, n, runs) for n in (["loss", "ack"] if side == "a" else ["ack"])}
        index = root / "campaign" / "20261204T000000Z" / "campaign.json"
        index.parent.mkdir(parents=True)
        entries = [
            {"name": n, "result_dir": str(p.relative_to(root.parent))} for n, p in dirs.items()
        ]
        index.write_text(json.dumps({"entries": entries}))
    # recorded relative to where the campaign ran: found under the campaign's results root
    result = compare.compare_dirs(
        tmp_path / "a/results/campaign/20261204T000000Z",
        tmp_path / "b/results/campaign/20261204T000000Z",
    )
    assert {c.experiment for c in result.levels} == {"ack"}
    assert result.only_a == ["loss"] and result.only_b == []
    assert all(c.moved == "no" for c in result.levels)


def test_the_command_prints_the_table_and_refuses_what_is_not_a_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _result(tmp_path / "a", "ack", {"delayed": [1.0, 1.01], "quick": [1.2, 1.21]})
    b = _result(tmp_path / "b", "ack", {"delayed": [1.0, 1.01], "quick": [1.3, 1.31]})
    assert main(["compare", str(a), str(b), "--csv", str(tmp_path / "c.csv")]) == 0
    out = capsys.readouterr().out
    assert "| ack | quick | 2 | 2 | 1205.0 | 1305.0 | 100.0 |" in out
    assert (tmp_path / "c.csv").read_text().startswith("experiment,level,")
    assert main(["compare", str(a), str(tmp_path)]) == 2
    assert "neither a result directory" in capsys.readouterr().err
    other = _result(tmp_path / "c", "loss", {"l0": [1.0], "l14": [2.0]})
    with pytest.raises(SpecError, match="not the experiment of A"):
        compare.compare_dirs(a, other)
