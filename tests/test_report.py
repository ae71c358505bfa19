"""The report: report.md and the four plots from a result directory."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from harness.plan.planner import plan_runs
from harness.report.build import build_report
from harness.store.resultdir import ResultDir
from tbcore.runrow import RunRow


def _result(tmp_path: Path) -> ResultDir:
    result = ResultDir.create(tmp_path, "connection")
    levels = ["h2-new", "h2-reused"]
    result.write_manifest(
        {
            "resolved": {
                "name": "connection",
                "question": "Does a reused, tuned connection reach the bound?",
                "seed": 1,
                "order": "alternate",
                "counterbalance": True,
                "repetitions": 3,
                "levels": [
                    {"name": "h2-new", "baseline": "h2-new", "overrides": {}},
                    {"name": "h2-reused", "baseline": "h2-new", "overrides": {}},
                ],
            },
            "environment": {"backend": "userspace", "kernel": "6.18"},
        }
    )
    for run in plan_runs(levels, 3):
        new = run.level == "h2-new"
        total = (1.19 if new else 0.241) + 0.001 * run.rep
        run_dir = result.fresh_run_dir(run.run_id)
        pd.DataFrame({"t_s": [0.0, 0.1, 0.2], "inflight_bytes": [0, 14480, 0]}).to_csv(
            run_dir / "inflight.csv", index=False
        )
        pd.DataFrame({"t_s": [0.2, 0.21], "acked": [14480, 28960]}).to_csv(
            run_dir / "acks.csv", index=False
        )
        valid = run.rep != 2 or new
        result.save_row(
            RunRow(
                **{
                    **run.to_dict(),
                    "protocol": "h2",
                    "connection": "new" if new else "reused",
                    "total_s": total,
                    "handshake_s": 0.4 if new else 0.0,
                    "ttfb_s": total - 0.001,
                    "bound_s": 0.9385 if new else 0.2385,
                    "ratio": total / (0.9385 if new else 0.2385),
                    "bound_setup_s": 0.4 if new else 0.0,
                    "bound_processing_s": 0.03,
                    "processing_s": 0.031,
                    "retransmits": 0,
                    "t_connect_s": 0.0,
                    "t_handshake_s": 0.4 if new else 0.0,
                    "t_request_first_s": 0.4 if new else 0.0,
                    "t_request_last_s": total - 0.13,
                    "t_response_first_s": total - 0.001,
                    "t_response_last_s": total,
                    "valid": valid,
                    "invalid_reason": None if valid else "cpu: client 97 % of a core",
                    "disturbance_s": 0.004 if valid else 0.009,
                    "disturbance_fraction": (0.004 if valid else 0.009) / total,
                    "disturbance_limit_s": 0.01 * total,
                }
            )
        )
    # the invalid run of h2-reused made again: a second, valid attempt
    (last,) = [r for r in plan_runs(levels, 3) if r.rep == 2 and r.level == "h2-reused"]
    again = last.next_attempt()
    result.fresh_run_dir(again.run_id)
    row = RunRow.from_dict(json.loads((result.run_dir(last.run_id) / "row.json").read_text()))
    planned = {k: v for k, v in again.to_dict().items() if k in RunRow.field_names()}
    result.save_row(replace(row, **planned, valid=True, invalid_reason=None, disturbance_s=0.001))
    return result


def test_report_has_question_answer_table_and_plots(tmp_path: Path) -> None:
    result = _result(tmp_path)
    report = build_report(result.path)
    text = report.read_text()
    assert "Does a reused, tuned connection reach the bound?" in text
    assert "## Answer" in text and "Fastest level: **h2-reused**" in text
    assert "| h2-reused | 4 | 3 |" in text  # four attempts, three valid
    assert "cpu: client 97 % of a core (1)" in text
    # attempts and the disturbance per level: planned, attempts, valid, invalid, most
    assert "| h2-reused | 3 | 4 | 3 | 25 % | 2 | 4.00 | 9.00 | 4.00 |" in text
    assert "| h2-new | 3 | 3 | 3 | 0 % | 1 |" in text
    # one effect: paired, level minus baseline, with its paired interval
    assert "| h2-reused | h2-new | 3 | -949.0 |" in text
    assert "paired arm" not in text
    assert "order effect" in text.lower()
    # every runs.csv column no run filled is named with why (empty_columns.csv)
    assert "## Empty columns" in text
    assert "| `below_bound` | no run finished below its bound" in text
    for name in ("levels", "timeline", "inflight", "acks"):
        png = result.path / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{name}.png" in text


def test_report_of_an_empty_result_says_so(tmp_path: Path) -> None:
    result = ResultDir.create(tmp_path, "x")
    result.write_manifest(
        {
            "resolved": {
                "name": "x",
                "question": "q?",
                "levels": [{"name": "a", "baseline": "a"}, {"name": "b", "baseline": "a"}],
            }
        }
    )
    text = build_report(result.path).read_text()
    assert "No valid measured run" in text


def test_the_answer_of_a_one_level_form_names_it_once() -> None:
    """A chapter form may run one level: no 'fastest' and 'slowest' of one."""
    import dataclasses
    import math

    from harness.analysis.levels import LevelSummary
    from harness.report.build import answer_text

    fields = {f.name: math.nan for f in dataclasses.fields(LevelSummary)}
    fields.update(level="l14", runs=6, valid=6, median_s=14.69, bound_s=1.433, median_ratio=10.25,
                  gap_part="none", invalid_reasons="")  # fmt: skip
    one = LevelSummary(**fields)
    text = answer_text([one], [])
    assert text.startswith("- One level ran: **l14**, median 14690.0 ms") and "Fastest" not in text
    two = answer_text([one, dataclasses.replace(one, level="l0", median_s=1.5)], [])
    assert "Fastest level: **l0**" in two and "Slowest: **l14**" in two


def test_a_report_of_a_stopped_experiment_says_how_much_of_its_plan_was_made(
    tmp_path: Path,
) -> None:
    result = _result(tmp_path)
    made = [{"run_id": r["run_id"]} for r in result.rows() if r.get("attempt", 1) == 1]
    plan = [*made, {"run_id": "0099-h2-new-r9"}]  # planned, never made
    result.update_manifest(plan=plan)
    text = build_report(result.path).read_text()
    assert f"**Unfinished.** {len(made)} of {len(plan)} planned runs were made" in text
    result.update_manifest(finished=True)
    assert "Unfinished" not in build_report(result.path).read_text()
