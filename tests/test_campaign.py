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

    def fake_lanes(specs, result_dir_of, options, lanes, done, task=None):
        lanes_asked.append(lanes)
        for spec in specs:
            order.append(spec.name)
            path = result_dir_of(spec)
            assert Path(path).is_dir()  # made before the lane starts, for --resume
            index = json.loads(next(tmp_path.glob("campaign/*/campaign.json")).read_text())
            entry = {e["name"]: e for e in index["entries"]}[spec.name]
            assert entry["status"] == "running" and entry["result_dir"] == path
            done(spec, None, RuntimeError("lane failed"))

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
