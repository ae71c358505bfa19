"""``testbed check FILE``: every shipped file's plan, without running it; a bad file is one
line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import EXIT_USAGE, main

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
SHIPPED = sorted(p.name for p in EXPERIMENTS.glob("*.toml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_file_prints_its_plan(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXPERIMENTS / name), "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nlevel ") >= 1 and "  path " in out and "  ignored: " in out
    assert "\norder: " in out and "\nestimate: " in out


def test_the_plan_names_what_a_level_ignores_and_counts_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.toml"
    path.write_text(
        'name = "x"\nquestion = "q?"\nrepetitions = 3\n[fixed]\nworkload = "tts"\n'
        'link = "rtt=20ms,rate=100mbit"\nslow_start_after_idle = false\n'
        '[factor]\nname = "protocol"\nlevels = [{ name = "a", protocol = "h2" },'
        ' { name = "b", protocol = "h3" }]\n'
    )
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ignored: slow_start_after_idle: takes effect on protocol h2 only" in out
    assert "estimate: 6 runs" in out


def test_a_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\nquestion = "q?"\n[fixed]\nlink = "rtt=oops"\n')
    assert main(["check", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
