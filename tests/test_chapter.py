"""The chapter's findings as data: every ID of its index a row of the right kinds, in the
chapter's order, every shipped experiment among them, every level a finding reads carried by
its file's quick form, and the bounds beside the measured rows recomputing the chapter's
figures."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from harness.report import chapter
from harness.report.findings import Results
from harness.spec import experiment as specmod

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
INDEX = Path(__file__).resolve().parents[2] / "shared" / "chapter" / "FINDINGS.md"
"""The chapter's index of findings, beside the project where a clone has it (CI does)."""

WANTED = {"M": {"M"}, "C": {"C"}, "M/C": {"M", "C"}}


def test_every_id_of_the_index_has_its_rows() -> None:
    present: dict[str, set[str]] = {}
    for finding in chapter.all_findings():
        present.setdefault(finding.id, set()).add(finding.kind)
    assert set(present) == set(chapter.FINDINGS_IDS)
    for id_, kind in chapter.INDEX_KINDS.items():
        assert WANTED[kind] <= present[id_], (id_, kind, present[id_])


@pytest.mark.skipif(not INDEX.is_file(), reason="the chapter's index is not beside this clone")
def test_the_kinds_are_the_indexs() -> None:
    kinds = dict(re.findall(r"^- (F\d+) (M/C|M|C):", INDEX.read_text(), flags=re.M))
    assert kinds == chapter.INDEX_KINDS


def test_rows_come_in_the_chapters_order_and_measured_before_computed() -> None:
    rows = chapter.all_findings()
    keys = [(chapter.id_number(f.id), f.kind != "M") for f in rows]
    assert keys == sorted(keys)


def test_every_shipped_experiment_is_read_by_a_row() -> None:
    shipped = {p.stem for p in EXPERIMENTS.glob("*.toml")}
    assert set(chapter.CHAPTER_ORDER) == shipped


def test_a_row_without_a_level_says_what_is_missing() -> None:
    for finding in chapter.FINDINGS:
        if finding.experiment is None:
            assert len(finding.unmeasured) > 20, finding.id


def test_the_quick_forms_carry_every_level_a_finding_reads() -> None:
    quick = {n: specmod.load(EXPERIMENTS / f"{n}.toml").quick_form() for n in chapter.CHAPTER_ORDER}
    for finding in chapter.FINDINGS + chapter.TESTBED_QUESTIONS:
        if finding.experiment is None:
            continue
        experiment, levels = finding.measure.levels  # type: ignore[union-attr]
        assert experiment == finding.experiment
        names = {lv.name for lv in quick[experiment].levels}
        assert set(levels) <= names, (finding.id, finding.finding, set(levels) - names)


def test_the_chapter_forms_run_every_level_a_row_reads_six_times() -> None:
    """The signed form (testbed campaign --chapter): each level a row reads, with the runs a
    two-sided 95 % interval on its median needs, and nothing a row does not read."""
    from harness.report.verdict import MIN_RUNS

    read: dict[str, set[str]] = {}
    for finding in chapter.FINDINGS + chapter.TESTBED_QUESTIONS:
        if finding.experiment is not None:
            experiment, levels = finding.measure.levels  # type: ignore[union-attr]
            read.setdefault(experiment, set()).update(levels)
    for name in chapter.CHAPTER_ORDER:
        form = specmod.load(EXPERIMENTS / f"{name}.toml").chapter_form()
        assert {lv.name for lv in form.levels} == read[name], name
        assert form.repetitions >= MIN_RUNS, name


def test_an_effect_row_is_judged_with_half_the_chapters_effect() -> None:
    """A band that includes zero would call no effect at all reproduced."""
    for finding in chapter.FINDINGS:
        if finding.chapter.startswith("+") and finding.value is not None:
            low, _high = finding.tolerance.band(finding.value)
            assert low > 0, finding.id


BOUNDS = {
    ("F1", "12.8 s"): 12.80,
    ("F9", "105 s"): 105.4,
    ("F10", "about 83 s"): 83.8,
    ("F25", "12 s"): 12.00,
    ("F42", "240.9 ms"): 238.5,
    ("F26", "5.12 Mbit/s"): 5.12,
    ("F26", "46.9 s"): 46.88,
    ("F28", "5 rounds"): 5,
    ("F29", "14.36 s"): 14.41,
    ("F30", "1.38 MB"): 1.38,
    ("F33", "0.13-0.47 Mbit/s"): 0.155,
    ("F35", "0.756 s"): 0.756,
    ("F36", "241 ms"): 241.0,
    ("F37", "20 repair"): 20,
    ("F40", "238.5 ms"): 238.5,
    ("F46", "13.4 s"): 13.43,
    ("F46", "2.1 s"): 2.06,
    ("F49", "8 s"): 8.0,
    ("F50", "10 s"): 10.0,
    ("F49", "12 s"): 12.0,
    ("F54", "64.0 s"): 64.05,
    ("F54", "11.0 s"): 11.02,
    ("F54", "31.6 s"): 31.60,
    ("F57", "3.8 Mbit/s"): 3.83,
}
"""The first number of a measured row's bound for the chapter's parameters: the chapter's
figure, or (F29: every ACK byte counted at the data's rate) what our model gives."""


@pytest.mark.parametrize(("key", "expected"), BOUNDS.items(), ids=str)
def test_the_bounds_beside_the_measured_rows_recompute(
    key: tuple[str, str], expected: float
) -> None:
    finding = next(f for f in chapter.FINDINGS if (f.id, f.chapter) == key)
    text = finding.bound(Results({}))
    first = float(re.search(r"-?\d[\d,]*\.?\d*", text).group().replace(",", ""))  # type: ignore[union-attr]
    assert first == pytest.approx(expected, rel=0.002), text


def test_a_known_departure_says_which_way_it_moves() -> None:
    tiles = next(f for f in chapter.FINDINGS if f.chapter == "12.36 s")
    assert tiles.bound(Results({})).startswith("12.36 s")  # the chapter's 1, 2 and 2 MB
    assert "3.6 %" in tiles.departure.reason and tiles.departure.sign == 1  # type: ignore[union-attr]
    gain = next(f for f in chapter.FINDINGS if f.chapter == "-0.44 s")
    assert gain.bound(Results({})).startswith("-0.44 s")
    assert "HyStart" in gain.departure.reason and gain.departure.sign == 1  # type: ignore[union-attr]
    direct = [f for f in chapter.FINDINGS if (f.id, f.experiment) == ("F41", "connection")]
    assert direct[0].bound(Results({})).startswith("1233.4 ms")  # plain TCP: one RTT less
    assert direct[0].departure is None
    assert (
        direct[1].bound(Results({})).startswith("1433.4 ms")
        and "TLS 1.3" in direct[1].departure.reason
        and "h2c-new" in direct[1].departure.reason
    )  # type: ignore[union-attr]


def _agent_result(root: Path, rounds_per_run: int) -> Results:
    """agent-connection with 6 valid h2-reused runs whose rounds (one warm-up, then
    ``rounds_per_run``) each take 3.5 s, run r's round 3 redone once (its first attempt at 9 s)."""
    from harness.plan.planner import plan_runs
    from harness.store.resultdir import ResultDir, atomic_write_json
    from tbcore.runrow import RunRow

    result = ResultDir.create(root, "agent-connection")
    result.write_manifest({"resolved": {"name": "agent-connection", "question": "q?", "seed": 1,
                                        "levels": [{"name": "h2-reused"}]}})  # fmt: skip
    lines = ["run_id,round,attempt,warmup,start_s,end_s"]
    for run in plan_runs(["h2-reused"], 6):
        result.fresh_run_dir(run.run_id)
        row = RunRow(**run.to_dict(), total_s=3.5 * rounds_per_run, valid=True)
        atomic_write_json(result.run_dir(run.run_id) / "row.json", row.to_dict())
        t = 100.0 * run.rep
        lines.append(f"{run.run_id},0,0,True,{t},{t + 9}")  # the warm-up round
        t += 9
        for index in range(1, rounds_per_run + 1):
            if index == 3:  # a redone round: its last attempt is the one that counts
                lines.append(f"{run.run_id},{index},0,False,{t},{t + 9}")
                t += 9
            step = 3.5 + 0.01 * run.rep
            lines.append(f"{run.run_id},{index},1,False,{t},{t + step}")
            t += step
    result.write_tables()
    (result.path / "rounds.csv").write_text("\n".join(lines) + "\n")
    return Results({"agent-connection": result.path})


def test_a_part_of_a_task_is_measured_inside_the_whole_task(tmp_path: Path) -> None:
    from harness.report.findings import NotMeasured, rounds_span

    measure = rounds_span("agent-connection", "h2-reused", first=11, count=20)
    got = measure(_agent_result(tmp_path / "whole", 30))
    assert got.runs == 6 and got.value == pytest.approx(20 * 3.525, abs=0.06)
    assert got.low <= got.value <= got.high and not got.scaled
    first = rounds_span("agent-connection", "h2-reused", first=1, count=5)
    assert first(_agent_result(tmp_path / "first", 30)).value == pytest.approx(9 + 5 * 3.525,
                                                                              abs=0.06)  # fmt: skip
    with pytest.raises(NotMeasured, match="ran 3 rounds"):
        measure(_agent_result(tmp_path / "quick", 3))


def _deployment_result(root: Path, near_s: float, cloud_s: float) -> Results:
    """agent-deployment's two F59 levels, 6 valid 20-round runs each, at these task times
    (run r 0.01 s longer than run r - 1)."""
    from harness.plan.planner import plan_runs
    from harness.store.resultdir import ResultDir, atomic_write_json
    from tbcore.runrow import RunRow

    levels = ["near-2.83x", "cloud-2.83x-free-upload"]
    result = ResultDir.create(root, "agent-deployment")
    resolved = {"name": "agent-deployment", "question": "q?", "seed": 1,
                "levels": [{"name": n} for n in levels]}  # fmt: skip
    result.write_manifest({"resolved": resolved})
    for run in plan_runs(levels, 6):
        result.fresh_run_dir(run.run_id)
        base = near_s if run.level == levels[0] else cloud_s
        row = RunRow(**run.to_dict(), total_s=base + 0.01 * run.rep, valid=True,
                     agent_rounds_done=20)  # fmt: skip
        atomic_write_json(result.run_dir(run.run_id) / "row.json", row.to_dict())
    result.write_tables()
    return Results({"agent-deployment": result.path})


def test_the_crossover_rate_follows_the_two_measured_tasks(tmp_path: Path) -> None:
    """F59: 20 raw screenshots over the gap between the nearby site's task and the cloud's
    without its uploads (its 0.13 s of 1 Gbit/s uploads taken out): the chapter's 16.04 and
    14.29 s give about 73 Mbit/s; a cloud as slow as near gives no threshold."""
    from harness.report.chapter_measures import crossover_rate

    free_s = 20 * 798_720 * 8 / 1e9
    got = crossover_rate(_deployment_result(tmp_path / "a", 16.04, 14.29 + free_s))
    assert got.value == pytest.approx(20 * 798_720 * 8 / 1.75 / 1e6, rel=0.01)
    assert got.runs == 6 and got.low < got.value < got.high
    slow = crossover_rate(_deployment_result(tmp_path / "b", 16.04, 16.5))
    assert slow.value == math.inf and "no threshold" in slow.text
