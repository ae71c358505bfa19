"""The campaign's summary: the invalid fraction per experiment, and its exit status."""

from __future__ import annotations

from pathlib import Path

from harness.campaign.serial import CampaignSummary


def test_summary_prints_the_invalid_fraction_and_fails_on_a_level_without_a_valid_run() -> None:
    entries = [
        {
            "name": "connection",
            "status": "finished",
            "result_dir": "r/c",
            "runs": 25,
            "planned": 20,
            "invalid": 5,
            "levels_without_valid": [],
        },
        {
            "name": "ack",
            "status": "finished",
            "result_dir": "r/a",
            "runs": 6,
            "planned": 2,
            "invalid": 6,
            "levels_without_valid": ["delayed", "quick"],
        },
    ]
    summary = CampaignSummary(index_path=Path("x"), entries=entries[:1])
    assert summary.ok
    assert summary.lines() == [
        "connection: finished -> r/c, 25 runs (20 planned), 5 invalid (20 %)"
    ]
    summary = CampaignSummary(index_path=Path("x"), entries=entries)
    assert not summary.ok
    assert summary.lines()[1] == (
        "ack: finished -> r/a, 6 runs (2 planned), 6 invalid (100 %); "
        "no valid run for delayed, quick"
    )
    failed = CampaignSummary(Path("x"), [{"name": "loss", "status": "failed", "error": "boom"}])
    assert not failed.ok
    assert failed.lines() == ["loss: failed -> -, 0 runs (0 planned), 0 invalid (boom)"]


def test_sharing_experiments_run_after_the_others_in_lanes_and_are_indexed(
    tmp_path: Path, monkeypatch
) -> None:
    import json

    from harness.campaign import serial

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    order: list[str] = []
    lanes_asked: list[int] = []

    def runner(spec, **_kw):  # the exclusive experiment: runs nothing
        order.append(spec.name)
        raise RuntimeError("no link here")

    def fake_lanes(parts, options, lanes, done, task=None):
        lanes_asked.append(lanes)
        index = json.loads(next(tmp_path.glob("campaign/*/campaign.json")).read_text())
        entries = {e["name"]: e for e in index["entries"]}
        for part in parts:
            if part.spec.name not in order:
                order.append(part.spec.name)
            assert Path(part.result_dir).is_dir()  # made before the lanes start, for --resume
            entry = entries[part.spec.name]
            assert entry["status"] == "running" and entry["result_dir"] == part.result_dir
            done(part, RuntimeError("lane failed"))

    monkeypatch.setattr(serial.lanes_mod, "run_lanes", fake_lanes)
    summary = serial.run_campaign(
        experiments_dir=shipped, names=["agent-rate", "initcwnd", "agent-trace"], reps=1,
        form="chapter", backend="userspace", output=tmp_path, runner=runner, chapter=True,
        lanes=2,
    )  # fmt: skip
    assert order[0] == "initcwnd" and sorted(order[1:]) == ["agent-rate", "agent-trace"]
    assert lanes_asked == [2]
    index = json.loads(summary.index_path.read_text())
    assert index["lanes"] == 2 and sorted(index["sharing"]) == ["agent-rate", "agent-trace"]
    failed = {e["name"]: e for e in index["entries"]}
    assert failed["agent-rate"]["status"] == "failed"
    assert "lane failed" in failed["agent-rate"]["error"]
    assert not summary.ok


def _result_dir(root: Path, name: str, levels: list[str], finished: bool = True) -> Path:
    from harness.store.resultdir import ResultDir

    result = ResultDir.create(root, name)
    plan = [{"run_id": f"{i:04d}-{lv}-r0", "level": lv} for i, lv in enumerate(levels)]
    result.write_manifest({"plan": plan, "finished": finished})
    return result.path


def _finished_campaign(root: Path, name: str, result_dir: Path) -> Path:
    """A chapter campaign's directory whose one experiment ``name`` finished in
    ``result_dir`` (what ``--resume`` reads)."""
    import json

    campaign = root / "campaign" / "x"
    campaign.mkdir(parents=True)
    index = {
        "form": "chapter", "reps": None, "backend": "userspace", "chapter": True,
        "entries": [{"name": name, "status": "finished", "result_dir": str(result_dir)}],
    }  # fmt: skip
    (campaign / "campaign.json").write_text(json.dumps(index))
    return campaign


def test_a_file_that_gained_levels_has_only_those_made_on_resume(tmp_path: Path) -> None:
    from harness.campaign.serial import added_levels
    from harness.spec import experiment as specmod

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    spec = specmod.load(shipped / "image.toml").in_form("chapter")
    first = _result_dir(tmp_path, "image", ["as-chapter", "processing-30ms", "uplink-100mbit"])
    entry = {"name": "image", "status": "finished", "result_dir": str(first)}
    sub_spec, previous = added_levels(spec, entry)
    assert sub_spec.level_names == ("lossless",) and previous is None
    assert sub_spec.level("lossless").baseline == "lossless"  # its baseline was left out
    assert sub_spec.repetitions == spec.repetitions
    unfinished = _result_dir(tmp_path, "image", ["lossless"], finished=False)
    entry["more_result_dirs"] = [str(unfinished)]
    sub_spec, previous = added_levels(spec, entry)
    assert sub_spec.level_names == ("lossless",) and previous == unfinished  # continued
    done = _result_dir(tmp_path / "b", "image", ["lossless"])
    entry["more_result_dirs"] = [str(done)]
    assert added_levels(spec, entry) is None
    assert added_levels(spec, {**entry, "status": "failed"}) is None


def test_resume_makes_the_added_levels_and_lists_their_directory(tmp_path: Path) -> None:
    import json

    from harness.campaign import serial

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    first = _result_dir(tmp_path, "image", ["as-chapter", "processing-30ms", "uplink-100mbit"])
    campaign = _finished_campaign(tmp_path, "image", first)
    made = []

    seen_output: list[Path] = []

    def runner(spec, *, resume=None, progress=None, output=None, **_kw):
        made.append((spec.level_names, resume))
        seen_output.append(Path(output))
        added = _result_dir(tmp_path / "added", spec.name, list(spec.level_names))
        progress("plan", None, {"total": 6, "left": 6, "dir": str(added)})
        raise RuntimeError("no link here")

    summary = serial.run_campaign(
        experiments_dir=shipped, names=None, reps=None, form="chapter", backend="userspace",
        output=Path("elsewhere"), resume=campaign, runner=runner, chapter=True,
    )  # fmt: skip
    assert made == [(("lossless",), None)]
    assert seen_output == [tmp_path.resolve()]  # beside the campaign's own, whatever the cwd
    entry = json.loads(summary.index_path.read_text())["entries"][0]
    assert len(entry["more_result_dirs"]) == 1 and "added" in entry["more_result_dirs"][0]
    assert "no link here" in entry["more_error"] and not summary.ok


def test_the_report_reads_an_added_level_from_its_own_directory(tmp_path: Path) -> None:
    import pandas as pd

    from harness.report.findings import Results, _new_levels_only

    first = tmp_path / "a"
    later = tmp_path / "b"
    for path, levels in ((first, ["x", "y"]), (later, ["y", "z"])):
        path.mkdir()
        pd.DataFrame({"run_id": levels, "level": levels, "valid": [True, True]}).to_csv(
            path / "playback.csv", index=False
        )
    results = Results({"e": first}, more={"e": [later]})
    table = results.table("e", "playback")
    assert list(table["level"]) == ["x", "y", "z"]  # y from the first only: never pooled
    merged = _new_levels_only([pd.DataFrame({"level": ["x"]}), pd.DataFrame({"level": []})])
    assert list(merged["level"]) == ["x"]


def test_the_summary_names_added_levels_and_their_failure() -> None:
    entry = {"name": "image", "status": "finished", "result_dir": "r/i", "runs": 18,
             "planned": 18, "invalid": 0, "levels_without_valid": [],
             "more_result_dirs": ["r/i2"], "more_error": "RuntimeError: boom"}  # fmt: skip
    summary = CampaignSummary(Path("x"), [entry])
    assert not summary.ok
    assert summary.lines() == [
        "image: finished -> r/i, 18 runs (18 planned), 0 invalid (0 %); added levels in r/i2; "
        "added levels failed: RuntimeError: boom"
    ]


def test_resume_makes_a_sharing_experiments_added_levels_in_the_lanes(
    tmp_path: Path, monkeypatch
) -> None:
    import json
    from types import SimpleNamespace

    import pandas as pd

    from harness.campaign import serial

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    first = _result_dir(tmp_path, "agent-rate", ["6-then-10mbit", "constant-8mbit"])
    campaign = _finished_campaign(tmp_path, "agent-rate", first)
    seen: list[tuple[str, ...]] = []

    def fake_lanes(parts, options, lanes, done, task=None):
        entry = json.loads((campaign / "campaign.json").read_text())["entries"][0]
        for part in parts:
            seen.append(part.spec.level_names)
            assert part.result_dir in entry["more_result_dirs"]  # noted before the lanes
            done(part, None)

    def finish_reported(spec, result_dir, attempts, log=None):
        levels = sorted(spec.level_names)  # the constant one without a valid run
        frame = pd.DataFrame(
            {
                "level": levels,
                "valid": [True, False],
                "warmup": [False] * 2,
                "total_s": [30.0, 30.0],
            }
        )
        return SimpleNamespace(result=SimpleNamespace(frame=lambda: frame, path=result_dir))

    def runner(spec, **_kw):
        raise AssertionError(f"{spec.name}: a sharing experiment's levels go to the lanes")

    monkeypatch.setattr(serial.lanes_mod, "run_lanes", fake_lanes)
    monkeypatch.setattr(serial.reported, "finish_reported", finish_reported)
    summary = serial.run_campaign(
        experiments_dir=shipped, names=None, reps=None, form="chapter", backend="userspace",
        output=Path("elsewhere"), resume=campaign, runner=runner, chapter=True, lanes=2,
    )  # fmt: skip
    added = {"6-then-10mbit-deep-queue", "constant-8mbit-deep-queue"}
    assert seen and {frozenset(names) for names in seen} == {
        frozenset(added)
    }  # one part a block, each of the added levels only
    entry = json.loads(summary.index_path.read_text())["entries"][0]
    assert len(entry["more_result_dirs"]) == 1
    assert entry.get("more_error") is None, entry.get("more_error")
    assert entry["levels_without_valid"] == ["constant-8mbit-deep-queue"]


def test_an_interrupted_campaign_keeps_the_time_it_measured(tmp_path: Path) -> None:
    import json

    import pytest

    from harness.campaign import serial

    shipped = Path(__file__).resolve().parent.parent / "experiments"

    def runner(spec, **_kw):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        serial.run_campaign(
            experiments_dir=shipped, names=["initcwnd"], reps=1, form="chapter",
            backend="userspace", output=tmp_path, runner=runner, chapter=True,
        )  # fmt: skip
    index = json.loads(next(tmp_path.glob("campaign/*/campaign.json")).read_text())
    assert index["entries"][0]["status"] == "interrupted"
    assert index["wall_s"] > 0  # a resume adds its own to it


def test_an_unfinished_experiment_goes_on_with_the_levels_its_directory_planned(
    tmp_path: Path,
) -> None:
    from harness.campaign.serial import continuing
    from harness.spec import experiment as specmod

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    spec = specmod.load(shipped / "agent-rate.toml").in_form("chapter")
    first = _result_dir(tmp_path, "agent-rate", ["6-then-10mbit", "constant-8mbit"], False)
    kept = continuing(spec, {"result_dir": str(first)}).level_names
    assert sorted(kept) == ["6-then-10mbit", "constant-8mbit"]  # in the file's order
    assert continuing(spec, {}) is spec  # not begun: the file as it is
    whole = _result_dir(tmp_path / "w", "agent-rate", list(spec.level_names), False)
    assert continuing(spec, {"result_dir": str(whole)}) is spec


def test_resume_with_more_attempts_goes_on_with_a_finished_experiments_invalid_runs(
    tmp_path: Path,
) -> None:
    import json

    from harness.campaign import serial
    from harness.plan.planner import plan_for
    from harness.spec import experiment as specmod
    from harness.store.resultdir import ResultDir
    from tbcore.runrow import RunRow

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    spec = specmod.load(shipped / "initcwnd.toml").in_form("chapter")
    result = ResultDir.create(tmp_path, "initcwnd")
    plan = plan_for(spec)
    result.write_manifest({"plan": [run.to_dict() for run in plan], "finished": True})
    for i, run in enumerate(plan):  # the first run invalid twice, the others valid
        for attempt in (1, 2) if i == 0 else (1,):
            run_id = run.run_id if attempt == 1 else f"{run.run_id}-a{attempt}"
            result.fresh_run_dir(run_id)
            fields = {**run.to_dict(), "run_id": run_id, "attempt": attempt}
            row = RunRow(**fields, total_s=1.0, valid=i != 0,
                         invalid_reason="disturbance: x" if i == 0 else None)  # fmt: skip
            result.save_row(row)
    campaign = _finished_campaign(tmp_path, "initcwnd", result.path)
    index = json.loads((campaign / "campaign.json").read_text())
    index.update(lanes=3, sharing=["agent-rate"])  # what the campaign's lanes were
    (campaign / "campaign.json").write_text(json.dumps(index))
    resumed: list[Path | None] = []

    def runner(spec, *, resume=None, **_kw):
        resumed.append(resume)
        raise RuntimeError("no link here")

    def resume_with(attempts: int) -> dict:
        serial.run_campaign(
            experiments_dir=shipped, names=None, reps=None, form="chapter",
            backend="userspace", output=tmp_path, resume=campaign, runner=runner,
            chapter=True, attempts=attempts,
        )  # fmt: skip
        return json.loads((campaign / "campaign.json").read_text())["entries"][0]

    assert resume_with(2)["status"] == "finished" and resumed == []  # its attempts are used
    entry = resume_with(3)  # one more for the invalid run: the directory goes on
    assert resumed == [result.path]
    assert entry["status"] == "failed" and "no link here" in entry["error"]
    index = json.loads((campaign / "campaign.json").read_text())
    assert index["lanes"] == 3 and index["sharing"] == ["agent-rate"]  # a resume without lanes


def test_finishing_a_directory_keeps_what_the_index_said_of_the_levels_made_elsewhere() -> None:
    from types import SimpleNamespace

    import pandas as pd

    from harness.campaign.serial import _finish
    from harness.spec import experiment as specmod

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    spec = specmod.load(shipped / "agent-rate.toml").in_form("chapter")
    first = spec.only_levels({"6-then-10mbit", "constant-8mbit"})
    frame = pd.DataFrame(
        {
            "level": ["6-then-10mbit", "constant-8mbit"],
            "valid": [True, False],
            "warmup": False,
            "total_s": 30.0,
        }
    )
    result = SimpleNamespace(result=SimpleNamespace(frame=lambda: frame, path=Path("r/a")))
    entry = {"levels_without_valid": ["6-then-10mbit", "constant-8mbit-deep-queue"]}
    _finish(entry, first, result)
    assert entry["status"] == "finished" and entry["runs"] == 2
    # its own levels as its directory has them now; the added level's as the index had it
    assert entry["levels_without_valid"] == ["constant-8mbit", "constant-8mbit-deep-queue"]


def test_resuming_a_whole_chapter_campaign_makes_an_experiment_the_chapter_gained(
    tmp_path: Path,
) -> None:
    """A chapter campaign begun without --experiments (``whole``) goes on with the chapter's
    experiments as the version resuming it has them: one it lacks is made, in the chapter's
    order; a campaign of named experiments keeps its own (the test above)."""
    import json

    from harness.campaign import serial
    from harness.report.chapter import CHAPTER_ORDER

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    first = _result_dir(tmp_path, "image", ["as-chapter", "processing-30ms", "uplink-100mbit",
                                            "lossless"])  # fmt: skip
    campaign = _finished_campaign(tmp_path, "image", first)
    index = json.loads((campaign / "campaign.json").read_text())
    (campaign / "campaign.json").write_text(json.dumps({**index, "whole": True}))
    made: list[str] = []

    def runner(spec, **_kw):
        made.append(spec.name)
        raise RuntimeError("no link here")

    summary = serial.run_campaign(
        experiments_dir=shipped, names=None, reps=None, form="chapter", backend="userspace",
        output=Path("elsewhere"), resume=campaign, runner=runner, chapter=True,
    )  # fmt: skip
    assert made == [n for n in CHAPTER_ORDER if n != "image"] and "attempts" in made
    names = [e["name"] for e in json.loads(summary.index_path.read_text())["entries"]]
    assert names == list(CHAPTER_ORDER)
