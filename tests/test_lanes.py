"""harness.campaign.lanes: which experiments share the host, and the lanes that run them (a
real process pool, with a standard-library task in place of an experiment)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.campaign import lanes
from harness.spec import experiment as specmod

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def test_agent_experiments_share_and_one_request_ones_do_not() -> None:
    specs = [specmod.load(EXPERIMENTS / f"{n}.toml") for n in ("connection", "agent-rate")]
    alone, sharing = lanes.split(specs)
    assert [s.name for s in alone] == ["connection"]
    assert [s.name for s in sharing] == ["agent-rate"]


def test_an_agent_without_idle_time_does_not_share(tmp_path: Path) -> None:
    path = tmp_path / "busy-agent.toml"
    path.write_text(
        'name = "busy-agent"\nquestion = "q"\nrepetitions = 1\n'
        '[fixed]\nworkload = "agent"\nprotocol = "h2"\nagent_rounds = 2\nagent_local = "0s"\n'
        'link = "rtt=20ms,rate=10mbit"\n'
        '[factor]\nname = "model"\nsettings = ["agent_model"]\nlevels = [\n'
        '  { name = "none", agent_model = "0s" },\n  { name = "some", agent_model = "1s" },\n]\n',
        encoding="utf-8",
    )
    spec = specmod.load(path)
    assert not spec.shares_host  # one level without idle time keeps the file exclusive


def test_lanes_run_every_task_in_processes_of_their_own_and_report_each() -> None:
    heard: list[tuple[str, str | None, str | None]] = []
    started: list[str] = []

    def result_dir_of(spec: str) -> str:
        started.append(spec)
        return "dir"

    def done(spec: str, path: str | None, error: BaseException | None) -> None:
        heard.append((spec, path, type(error).__name__ if error else None))

    specs = ["a", "b", 7]  # 7: os.path.join raises TypeError in its lane
    lanes.run_lanes(specs, result_dir_of, "", 2, done, task=os.path.join)  # type: ignore[arg-type]
    assert started == specs
    expected = [
        ("a", os.path.join("a", "dir", ""), None),
        ("b", os.path.join("b", "dir", ""), None),
        (7, None, "TypeError"),
    ]
    assert sorted(heard, key=str) == sorted(expected, key=str)


def test_progress_lines_name_the_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    progress = lanes.LaneProgress("agent-rate")
    progress("plan", None, {"left": 2, "total": 12, "dir": "/r"})

    class Run:
        run_id = "0001-x-r0"

    progress("done", Run(), {"total_s": 12.5, "valid": True})
    progress("retry", Run(), {"total_s": None, "valid": False, "invalid_reason": "disturbance"})
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "agent-rate: 2 of 12 runs to make -> /r",
        "agent-rate: 0001-x-r0: 12.500 s, valid",
        "agent-rate: 0001-x-r0: no time, INVALID (disturbance)",
    ]
