"""The reproduction report: a row for every ID of the chapter's index in its order, each
judged by statistics (reproduced, differs, inconclusive, error, not measurable), report.md,
index.html and reproduction.json in the campaign's directory, and verdicts that follow the
data when the report is rebuilt."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from support_campaign import synthetic_campaign

from harness.analysis import attempts
from harness.report import chapter, chapter_measures, reproduction
from harness.report.findings import Measured, NotMeasured, Results
from harness.report.verdict import Tolerance


def _finding(**kw: object) -> chapter.Finding:
    base = dict(id="F1", section="§1.1", finding="f", chapter="10 s", experiment="x",
                value=10.0, unit="s")  # fmt: skip
    return chapter.Finding(**{**base, **kw})  # type: ignore[arg-type]


def _measured(median: float, low: float = math.nan, high: float = math.nan, runs: int = 8,
              **kw: object) -> Measured:  # fmt: skip
    return Measured("", median, low=low, high=high, runs=runs, **kw)  # type: ignore[arg-type]


def test_a_row_is_judged_by_its_interval_not_its_median() -> None:
    finding = _finding()
    assert reproduction.judge(finding, _measured(10.2, 9.8, 10.6)).verdict == "reproduced"
    assert reproduction.judge(finding, _measured(10.2, runs=2)).verdict == "inconclusive"
    assert reproduction.judge(finding, _measured(10.8, 9.5, 11.5)).verdict == "inconclusive"
    assert reproduction.judge(finding, _measured(13.0, 12.5, 13.5)).verdict == "differs"


def test_a_differs_names_its_departure_only_when_the_data_moved_its_way() -> None:
    slower = _finding(departure=chapter.Departure("TLS adds a round trip", +1))
    above = _measured(13.0, 12.5, 13.5)
    verdict = reproduction.judge(slower, above)
    assert reproduction.explain(slower, above, verdict).endswith("; TLS adds a round trip")
    below = _measured(7.0, 6.5, 7.5)
    text = reproduction.explain(slower, below, reproduction.judge(slower, below))
    assert "unexplained: the known departure (TLS adds a round trip) predicts a higher" in text
    plain = reproduction.explain(_finding(), above, reproduction.judge(_finding(), above))
    assert "no known departure explains it" in plain


def test_a_scaled_quick_form_is_only_indicative() -> None:
    out = reproduction.judge(_finding(), _measured(10.0, 9.9, 10.1, scaled="scaled from 3 to 30"))
    assert out.verdict == "inconclusive" and "scaled from 3 to 30" in out.detail


def test_a_decision_row_is_judged_against_its_deadline() -> None:
    finding = _finding(value=48.3, deadline_s=45.0, meets=False)
    assert reproduction.judge(finding, _measured(44.0, 43.5, 44.4)).verdict == "differs"
    assert reproduction.judge(finding, _measured(48.0, 47.0, 49.0)).verdict == "reproduced"


def test_a_measure_that_raises_is_an_error_row_and_not_measured_says_why() -> None:
    def broken(_r: Results) -> Measured:
        raise KeyError("total_s")

    def absent(_r: Results) -> Measured:
        raise NotMeasured("x: level a is not in this form of the file")

    row = reproduction.row_of(_finding(measure=broken), Results({}))
    assert (row.verdict, row.reason) == ("error", "KeyError: 'total_s'")
    row = reproduction.row_of(_finding(measure=absent), Results({}))
    assert row.verdict == "not measurable" and "not in this form" in row.reason


def test_every_computed_row_reproduces_the_chapters_figure() -> None:
    rows = [r for r in reproduction.build_rows(Results({})) if r.kind == "C"]
    assert len(rows) >= 60
    assert [r.id for r in rows if r.verdict != "reproduced"] == []


def test_a_wrong_bound_would_read_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    """F13 computed at LPDDR5X's 10.7 Gbit/s a pin instead of the SoC's 10.6: 85.6 GB/s."""
    import dataclasses

    from harness.bounds import device

    wrong = [
        dataclasses.replace(
            c, compute=lambda: device.memory_bandwidth_Bps(pin_rate_bps=10.7e9) / 1e9
        )
        if c.id == "F13"
        else c
        for c in reproduction.COMPUTATIONS
    ]
    monkeypatch.setattr(reproduction, "COMPUTATIONS", tuple(wrong))
    (row,) = [
        reproduction._computed_row(f, "") for f in chapter.computed_findings() if f.id == "F13"
    ]
    assert row.verdict == "differs" and "computed 85.6 GB/s" in row.reason


def test_a_campaign_gets_every_id_and_the_json_fields(tmp_path: Path) -> None:
    campaign = synthetic_campaign(tmp_path, below=True)
    written = reproduction.write_reproduction(campaign)
    text = written["md"].read_text()
    assert "| id | section | finding | chapter | bound | measured | verdict | experiment |" in text
    data = json.loads(written["json"].read_text())
    ids = {r["id"] for r in data}
    assert ids >= set(chapter.FINDINGS_IDS)
    for row in data:
        assert set(reproduction.JSON_FIELDS) <= set(row)
        assert row["verdict"] in (*reproduction.KINDS, reproduction.MEASURED)
    direct = next(r for r in data if r["id"] == "F41" and r["level"] == "h2-new")
    assert direct["verdict"] == "inconclusive" and direct["runs"] == 3
    assert direct["measured_median"] == pytest.approx(1449.0) and direct["ci_low"] is None
    assert "Form: quick" in text and "wall time 30.0 min" in text
    failed = next(r for r in data if r["id"] == "T7" and r["experiment"] == "ack")
    assert failed["verdict"] == "not measurable"
    assert "ack: failed: RuntimeError: the link went away" in failed["reason"]
    assert "Runs below their lower bound (runs.csv below_bound): 2 of 6 measured runs: " in text
    html = written["html"].read_text()
    assert "<th>verdict</th>" in html and "<script" not in html
    assert (campaign / "plots" / "connection-levels.png").is_file()
    assert reproduction.error_rows(campaign) == []


def _verdicts(campaign: Path) -> dict[str, str]:
    reproduction.write_reproduction(campaign)
    data = json.loads((campaign / "reproduction.json").read_text())
    # the synthetic campaign's two levels (its files have no h2c-new)
    return {
        r["id"]: r["verdict"]
        for r in data
        if r["experiment"] == "connection" and r["level"] in ("h2-new", "h2-reused")
    }


def test_verdicts_follow_runs_csv_when_the_report_is_rebuilt(tmp_path: Path) -> None:
    campaign = synthetic_campaign(tmp_path, reps=8)
    before = _verdicts(campaign)
    assert before == {"F41": "differs", "F42": "reproduced"}
    (runs_csv,) = (tmp_path / "connection").glob("*/runs.csv")
    frame = pd.read_csv(runs_csv)
    frame["total_s"] = frame["total_s"] * 1.3
    frame.to_csv(runs_csv, index=False)
    assert _verdicts(campaign) == {"F41": "differs", "F42": "differs"}


def test_the_cli_rebuilds_a_campaign_and_fails_on_an_error_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    campaign = synthetic_campaign(tmp_path)
    assert main(["report", str(campaign)]) == 0
    assert (campaign / "reproduction.json").is_file()

    def broken(_r: Results) -> Measured:
        raise ValueError("a measure's defect")

    finding = next(f for f in chapter.FINDINGS if f.id == "F42")
    broken_finding = chapter.Finding(**{**finding.__dict__, "measure": broken})
    monkeypatch.setattr(chapter, "FINDINGS", (*chapter.FINDINGS, broken_finding))
    monkeypatch.setattr(reproduction, "all_findings", chapter.all_findings)
    assert main(["report", str(campaign)]) == 1
    assert "error row F42: ValueError: a measure's defect" in capsys.readouterr().err


def test_tolerances_state_their_reason() -> None:
    for finding in chapter.FINDINGS:
        assert finding.tolerance.reason, finding.id
    assert Tolerance(relative=0.1).describe("s") == "±10%"


def _hol_results(tmp_path: Path, h2_held: list[int], h3_held: list[int]) -> Results:
    rows = []
    for level, held in (("h2-l3.6", h2_held), ("h3-l3.6", h3_held)):
        for rep, n in enumerate(held):
            for stream, chunks in (("audio:tts", 22), ("image:result", 306)):
                rows.append({"run_id": f"{level}-{rep}", "level": level, "stream": stream,
                             "chunks": chunks, "held_chunks": n if stream == "audio:tts" else 0,
                             "held_max_s": 0.15 * bool(n), "valid": True})  # fmt: skip
    (tmp_path / "hol").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / "hol" / "streams.csv", index=False)
    return Results({"hol": tmp_path / "hol"})


def test_hol_counts_audio_chunks_held_behind_the_image(tmp_path: Path) -> None:
    measured = chapter_measures.hol(_hol_results(tmp_path, [4, 6, 0], [0, 0, 0]))
    assert measured.ok and measured.runs == 3
    assert "4 of 22 on HTTP/2 (longest 150 ms), 0 of 22 on HTTP/3" in measured.text
    held_on_h3 = chapter_measures.hol(_hol_results(tmp_path / "b", [4], [1]))
    assert not held_on_h3.ok


def test_hol_without_the_levels_is_not_measured(tmp_path: Path) -> None:
    (tmp_path / "hol").mkdir()
    pd.DataFrame([{"run_id": "r", "level": "h2-l0", "stream": "audio:tts", "chunks": 22,
                   "held_chunks": 0, "held_max_s": 0.0, "valid": True}]).to_csv(
        tmp_path / "hol" / "streams.csv", index=False)  # fmt: skip
    with pytest.raises(NotMeasured, match=r"3\.6 % levels"):
        chapter_measures.hol(Results({"hol": tmp_path / "hol"}))


@pytest.mark.parametrize(
    "finding", chapter.all_findings() + chapter.TESTBED_QUESTIONS,
    ids=[f"{f.id} {f.finding[:30]}" for f in chapter.all_findings() + chapter.TESTBED_QUESTIONS],
)  # fmt: skip
def test_every_bound_is_computed_or_says_what_it_lacks(finding: chapter.Finding) -> None:
    """A bound that raises anything but NotMeasured (an import gone missing, a name moved)
    would read "error" in every campaign's report: none may."""
    try:
        text = finding.bound(Results({}))
    except NotMeasured:
        return
    assert isinstance(text, str) and text


def test_the_header_says_what_sharing_the_host_cost(tmp_path) -> None:
    import pandas as pd

    from harness.report.findings import Results
    from harness.report.reproduction import sharing_line

    results = Results({"agent-rate": tmp_path, "connection": tmp_path})
    results._frames["agent-rate"] = pd.DataFrame(
        {
            "warmup": [True, False, False, False],
            "valid": [True, True, True, False],
            "disturbance_s": [0.5, 0.002, 0.004, 0.9],
        }
    )
    results._frames["connection"] = pd.DataFrame(
        {"warmup": [False], "valid": [False], "disturbance_s": [7.0]}
    )
    assert sharing_line({"lanes": 1}, results) is None
    line = sharing_line({"lanes": 3, "sharing": ["agent-rate"]}, results)
    assert line is not None
    assert "agent-rate ran 3 at a time" in line
    assert "3 measured runs, 1 invalid" in line  # the warm-up and connection's run: not counted
    assert "median 4.0 ms, largest 900.0 ms" in line


def _trials_results(tmp_path: Path, trials: dict[str, list[tuple[str, bool]]]) -> Results:
    """multipath's runs: per level, (paths_down, delivered) a trial."""
    rows = [
        {"run_id": f"{level}-{i}", "level": level, "warmup": False, "valid": True,
         "total_s": 0.01 if delivered else None, "paths_down": down, "delivered": delivered}
        for level, outcomes in trials.items() for i, (down, delivered) in enumerate(outcomes)
    ]  # fmt: skip
    results = Results({"multipath": tmp_path})
    results._frames["multipath"] = pd.DataFrame(rows)
    return results


def test_duplication_failures_count_undelivered_trials_with_a_binomial_interval(
    tmp_path: Path,
) -> None:
    drawn = [("none", True)] * 38 + [("link", True)] + [("exit_link", False)]
    measure = chapter_measures.duplication_failures("multipath", "d", 0.025, 0.0125)
    measured = measure(_trials_results(tmp_path, {"d": drawn}))
    assert measured.value == pytest.approx(2.5) and measured.runs == 40
    assert 0.0 < measured.low < 2.5 < measured.high < 14.0  # exact: 0.06 to 13.2 %
    assert measured.decide_runs == 600  # 1.96^2 x 0.025 x 0.975 / 0.0125^2
    assert "40 of 40 as section 12" in measured.text
    row = reproduction.row_of(
        _finding(measure=measure, value=2.5, unit="%", tolerance=Tolerance(absolute=1.25)),
        _trials_results(tmp_path, {"d": drawn}),
    )
    assert row.verdict == "inconclusive" and "about 600 runs would decide" in row.reason


def test_duplication_outcomes_hold_only_when_each_forced_failure_gives_sections_12s(
    tmp_path: Path,
) -> None:
    forced = {
        "a": [("link", True)] * 6,
        "b": [("link_b", True)] * 6,
        "both": [("link+link_b", False)] * 6,
        "exit": [("exit_link", False)] * 6,
    }
    measure = chapter_measures.duplication_outcomes("multipath", tuple(forced))
    measured = measure(_trials_results(tmp_path, forced))
    assert measured.ok is True and measured.runs == 6
    assert "link+link_b down: 0 of 6 delivered" in measured.text
    forced["b"] = [("link_b", True)] * 5 + [("link_b", False)]  # a copy lost on a live path
    assert measure(_trials_results(tmp_path, forced)).ok is False
    with pytest.raises(NotMeasured):
        measure(_trials_results(tmp_path, {"a": forced["a"]}))


def test_attempt_cost_pools_the_tasks_of_a_levels_valid_runs(tmp_path: Path) -> None:
    """Two valid runs of ten one-round tasks, every attempt 1 s, the first two tasks of each
    run failing once (and a third run invalid, its tasks all failing twice): E / C = 1.2,
    on the 20 tasks of the valid runs, with its interval and the tasks that would decide."""
    rows = [{"run_id": f"r{i}", "level": "p", "warmup": False, "valid": i < 2, "total_s": 12.0}
            for i in range(3)]  # fmt: skip
    lines = ["run_id,round,attempt,task,task_outcome,warmup,start_s,end_s"]
    for i in range(3):
        t, attempt = 0.0, 0
        for task in range(10):
            fails = 2 if i == 2 else int(task < 2)
            for verdict in ["failed"] * fails + ["done"]:
                lines.append(f"r{i},{task},{attempt},{task},{verdict},False,{t},{t + 1.0}")
                t, attempt = t + 1.0, attempt + 1
    (tmp_path / "rounds.csv").write_text("\n".join(lines) + "\n")
    results = Results({"attempts": tmp_path})
    results._frames["attempts"] = pd.DataFrame(rows)
    measure = chapter_measures.attempt_cost("attempts", "p", 0.8, 0.025)
    measured = measure(results)
    assert measured.value == pytest.approx(1.2) and measured.runs == 20
    assert 1.0 <= measured.low < 1.2 < measured.high
    assert measured.decide_runs == attempts.tasks_to_decide(0.8, 0.025)
    assert "20 tasks" in measured.text and "2 valid runs" in measured.text
    with pytest.raises(NotMeasured):
        chapter_measures.attempt_cost("attempts", "q", 0.8, 0.025)(results)
