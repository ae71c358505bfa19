"""harness.campaign.lanes: which experiments share the host, and the lanes that run them (a
real process pool, with a standard-library task in place of an experiment)."""

from __future__ import annotations

import os
from dataclasses import replace
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
    heard: list[tuple[object, str | None]] = []

    def done(part: object, error: BaseException | None) -> None:
        heard.append((part, type(error).__name__ if error else None))

    parts = ["a", "b", 7]  # 7: os.path.join raises TypeError in its lane
    lanes.run_lanes(parts, "dir", 2, done, task=os.path.join)  # type: ignore[arg-type]
    assert sorted(heard, key=str) == sorted([("a", None), ("b", None), (7, "TypeError")], key=str)


def _agent_spec(tmp_path: Path) -> specmod.ExperimentSpec:
    path = tmp_path / "two-agents.toml"
    path.write_text(
        'name = "two-agents"\nquestion = "q"\nrepetitions = 3\n'
        '[fixed]\nworkload = "agent"\nprotocol = "h2"\nagent_rounds = 2\n'
        'agent_local = "0.3s"\nlink = "rtt=20ms,rate=10mbit"\n'
        '[factor]\nname = "model"\nsettings = ["agent_model"]\nlevels = [\n'
        '  { name = "short", agent_model = "1s" },\n  { name = "long", agent_model = "5s" },\n]\n',
        encoding="utf-8",
    )
    return specmod.load(path)


def test_parts_are_the_blocks_left_and_experiments_take_turns(tmp_path: Path) -> None:
    from harness.plan.planner import plan_for
    from harness.run.runner import create_result
    from tbcore.runrow import RunRow

    spec = _agent_spec(tmp_path)
    assert spec.shares_host
    plan = plan_for(spec)
    result = create_result(spec, plan, tmp_path / "out", "userspace", argv=[])
    first = [run for run in plan if run.block == 0]
    for run in first:  # block 0 made and valid: nothing of it is left
        result.save_row(RunRow(**run.to_dict(), valid=True))
    parts = lanes.parts_of(spec, str(result.path), attempts=3)
    assert sorted(part.block for part in parts) == [1, 2]
    assert all(part.predicted_s > 2 * 5.0 for part in parts)  # both levels' rounds
    assert {part.label for part in parts} == {"two-agents block 1", "two-agents block 2"}
    other = replace(spec, name="other")
    small = [lanes.Part(other, "d", block, 1.0) for block in range(3)]
    order = lanes.interleaved([*small, *parts])
    assert [p.spec.name for p in order] == ["two-agents", "other"] * 2 + ["other"]
    assert [p.block for p in order if p.spec.name == "other"] == [0, 1, 2]  # plan's order
    again = first[0]  # an invalid attempt with attempts left makes its block a part again
    result.save_row(RunRow(**again.to_dict(), valid=False, invalid_reason="disturbance"))
    assert 0 in {part.block for part in lanes.parts_of(spec, str(result.path), attempts=3)}


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
