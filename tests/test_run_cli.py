"""``testbed run``, ``campaign`` and ``report``: flags, environment defaults, errors, and a
real quick campaign of one tiny experiment (root)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support_inputs import experiment_text

from harness.cli import EXIT_USAGE, main
from harness.cli.run import attempts_of, env_bool, env_int
from harness.run.lock import SHARE_SLOTS
from tbcore.errors import SpecError

TINY = experiment_text("tiny")


def test_environment_defaults_parse_or_fail_with_one_line() -> None:
    assert env_bool("X", {"X": "1"}) is True
    assert env_bool("X", {"X": "no"}) is False
    assert env_bool("X", {}) is False
    with pytest.raises(SpecError) as info:
        env_bool("TESTBED_QUICK", {"TESTBED_QUICK": "maybe"})
    assert info.value.field == "TESTBED_QUICK"
    assert env_int("R", {"R": "3"}) == 3
    assert env_int("R", {}) is None
    with pytest.raises(SpecError):
        env_int("TESTBED_REPS", {"TESTBED_REPS": "0"})
    with pytest.raises(SpecError):
        env_int("TESTBED_REPS", {"TESTBED_REPS": "x"})


def test_campaign_attempts_come_from_the_flag_then_the_environment() -> None:
    import argparse

    from harness.plan.planner import DEFAULT_ATTEMPTS

    given, unset = argparse.Namespace(attempts=2), argparse.Namespace(attempts=None)
    assert attempts_of(given, {"TESTBED_ATTEMPTS": "1"}) == 2
    assert attempts_of(unset, {"TESTBED_ATTEMPTS": "1"}) == 1
    assert attempts_of(unset, {}) == DEFAULT_ATTEMPTS
    with pytest.raises(SpecError) as info:
        attempts_of(unset, {"TESTBED_ATTEMPTS": "0"})
    assert info.value.field == "TESTBED_ATTEMPTS"


def test_a_bad_experiment_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace("initcwnd = 40 }", "initcwnd = 40, cc = 'bbr' }"))
    assert main(["run", str(bad), "--output", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "factor.levels.iw40.cc" in err
    assert main(["run", str(tmp_path / "missing.toml")]) == EXIT_USAGE


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--remote-addr", "198.18.2.2"], "remote_addr"),
        (["--ssh-config", "/etc/hostname"], "ssh_config"),
        (["--remote=-oProxyCommand=sh"], "remote"),
        (["--remote", "lab2", "--remote-addr", "lab2"], "remote_addr"),
        (["--remote", "lab2", "--remote-command", "testbed;id"], "remote_command"),
        (["--remote", "lab2", "--ssh-config", "/nonexistent/tb"], "ssh_config"),
        (["--remote-command", "testbed"], "remote_command"),
        (["--remote", "root@"], "remote"),
        (["--remote", "root@:22"], "remote"),
    ],
)
def test_bad_remote_flags_are_one_line_before_anything_starts(
    flags: list[str], field: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    experiment = str(Path(__file__).resolve().parent.parent / "experiments" / "connection.toml")
    # --output: a flag that stopped being refused must not run into the checkout's results/
    assert main(["run", experiment, *flags, "--output", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"testbed run: error: {field}: ") and err.count("\n") == 1


def test_unknown_campaign_experiment_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tiny.toml").write_text(TINY)
    code = main(
        [
            "campaign",
            "--experiments",
            "nope",
            "--experiments-dir",
            str(tmp_path),
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert code == EXIT_USAGE
    assert "'nope' is not one of tiny" in capsys.readouterr().err


def test_report_of_a_directory_without_manifest_is_refused(tmp_path: Path) -> None:
    assert main(["report", str(tmp_path)]) == EXIT_USAGE


@pytest.mark.parametrize("flag", ["--output", "--resume"])
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = str(Path(__file__).resolve().parent.parent / "experiments" / "connection.toml")
    with pytest.raises(SystemExit) as info:
        main(["run", experiment, flag, ""])
    assert info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "an empty path" in err and err.count("\n") == 1


def test_a_fifo_or_a_device_as_the_experiment_file_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "exp.toml"
    os.mkfifo(fifo)  # a read would block for ever
    for path in (str(fifo), "/dev/zero"):  # /dev/zero: an unbounded read
        assert main(["run", path, "--output", str(tmp_path)]) == EXIT_USAGE
        assert "not a regular file" in capsys.readouterr().err
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (2 << 20))
    assert main(["run", str(big), "--output", str(tmp_path)]) == EXIT_USAGE
    assert "above 1048576" in capsys.readouterr().err


def _result_dir(tmp_path: Path) -> Path:
    path = tmp_path / "res"
    (path / "runs").mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"resolved": {"name": "x"}}))
    return path


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda p: (p / "manifest.json").write_text("[1, 2]"), "not an object"),
        (lambda p: (p / "manifest.json").write_text("[" * 100_000 + "]" * 100_000), "too deep"),
        (lambda p: (p / "runs" / "r0").mkdir() or (p / "runs" / "r0" / "row.json").write_text(
            "{garbage"), "r0/row.json"),
        (lambda p: (p / "report.md").mkdir(), "report.md: "),
        (lambda p: (p / "plots").write_text("x"), "plots: "),
        (lambda p: (p / "runs").rmdir() or os.symlink(p / "runs", p / "runs"), "symlink"),
        (lambda p: (p / "runs").rmdir() or os.symlink("/", p / "runs"), "symlink"),
        (lambda p: os.mkfifo(p / "runs.csv"), "runs.csv: "),  # read_csv would wait forever
    ],
)  # fmt: skip
def test_report_of_a_damaged_result_directory_is_one_line(
    damage: Any, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _result_dir(tmp_path)
    damage(path)
    assert main(["report", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_report_rebuilds_a_corrupt_runs_csv_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _result_dir(tmp_path)
    (path / "runs.csv").write_text("run_id,level\n\x00\x01garbage,,,,\n")
    assert main(["report", str(path)]) == 0
    assert "written again from the runs' rows" in capsys.readouterr().err
    assert pd.read_csv(path / "runs.csv").empty


def test_attempts_must_be_a_positive_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tiny.toml").write_text(TINY)
    for bad in ("0", "x"):
        with pytest.raises(SystemExit) as info:
            main(["run", str(tmp_path / "tiny.toml"), "--attempts", bad])
        assert info.value.code == EXIT_USAGE
        assert "--attempts" in capsys.readouterr().err


def test_lanes_are_one_to_the_hosts_slots_and_not_with_a_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # an unknown experiment and --output: a value that stopped being refused fails here at
    # once instead of running a whole campaign into the checkout's results/ (it once did)
    guard = ["--experiments", "none-such", "--output", str(tmp_path)]
    for bad in ("0", str(SHARE_SLOTS + 1), "x"):
        with pytest.raises(SystemExit) as info:
            main(["campaign", "--lanes", bad, *guard])
        assert info.value.code == EXIT_USAGE
        assert "--lanes" in capsys.readouterr().err
    code = main(["campaign", "--lanes", "2", "--cluster", "tcp://127.0.0.1:1"])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "lanes" in err and "cluster" in err and len(err.strip().splitlines()) == 1


def _status(result: Path) -> int:
    """The exit status a run must give: 1 when some level has no valid measured run (on a
    busy host every attempt may be invalid), 0 otherwise."""
    from harness.analysis.levels import levels_without_valid

    return 1 if levels_without_valid(pd.read_csv(result / "runs.csv")) else 0


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_campaign_from_the_environment_then_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "tiny.toml").write_text(TINY)
    monkeypatch.setenv("TESTBED_QUICK", "1")
    monkeypatch.setenv("TESTBED_EXPERIMENTS", "tiny")
    out = tmp_path / "results"
    code = main(
        [
            "campaign",
            "--experiments-dir",
            str(experiments),
            "--output",
            str(out),
            "--link-name",
            "hn8",
            "--attempts",
            "1",
        ]
    )
    (index_path,) = out.glob("campaign/*/campaign.json")
    index = json.loads(index_path.read_text())
    assert index["quick"] is True
    (entry,) = index["entries"]
    assert entry["status"] == "finished" and entry["runs"] == 2
    result = Path(entry["result_dir"])
    assert code == _status(result), capsys.readouterr()
    assert entry["planned"] == 2 and entry["invalid"] in (0, 1, 2)
    frame = pd.read_csv(result / "runs.csv")
    assert list(frame["level"]) == ["iw10", "iw40"]  # quick: one repetition of each
    assert (result / "report.md").read_text().startswith("# Experiment `tiny`")
    assert (result / "plots" / "levels.png").is_file()
    # testbed report rewrites the report from the directory alone
    (result / "report.md").unlink()
    assert main(["report", str(result)]) == 0
    assert (result / "report.md").is_file()
    # resuming a finished campaign makes no run
    before = (result / "runs.csv").read_text()
    assert main(
        [
            "campaign",
            "--resume",
            str(index_path.parent),
            "--link-name",
            "hn8",
            "--experiments-dir",
            str(experiments),
            "--attempts",
            "1",
        ]
    ) == _status(result)
    assert (result / "runs.csv").read_text() == before


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_resume_continues_a_killed_experiment(tmp_path: Path) -> None:
    """A run directory with one finished run and one half-made run (as a SIGKILL leaves
    it): --resume makes the missing runs only and keeps the finished one as it was."""
    experiment = tmp_path / "tiny.toml"
    experiment.write_text(TINY)
    out = tmp_path / "results"
    once = ["--link-name", "hn9", "--attempts", "1"]
    code = main(["run", str(experiment), "--quick", "--output", str(out), *once])
    (result,) = out.glob("tiny/*")
    assert code == _status(result)
    first = json.loads((result / "runs" / "0000-iw10-r0" / "row.json").read_text())
    # undo the second run as if the campaign had been killed in the middle of it
    second = result / "runs" / "0001-iw40-r0"
    (second / "row.json").unlink()
    (second / "partial").write_text("half a run")
    code = main(["run", str(experiment), "--quick", "--resume", str(result), *once])
    assert code == _status(result)
    assert json.loads((result / "runs" / "0000-iw10-r0" / "row.json").read_text()) == first
    assert not (second / "partial").exists()
    frame = pd.read_csv(result / "runs.csv")
    assert list(frame["run_id"]) == ["0000-iw10-r0", "0001-iw40-r0"]


SHIPPED = sorted(
    p.stem for p in (Path(__file__).resolve().parent.parent / "experiments").glob("*.toml")
)
CI_FORMS: dict[str, tuple[str, ...] | None] = {
    "connection": None,  # request records, h2 and h3, new, reused and 0-RTT, a direct link
    "relay": None,  # the relay topology
    # two paths, transfer records; a path failed in every trial, and both (nothing delivered)
    "multipath": (
        "mptcp",
        "split",
        "h3-migrate-failover",
        "duplicate-chunks-link-down",
        "duplicate-chunks-both-down",
    ),
    "agent-compression": None,  # agent rounds
    "attempts": None,  # agent tasks whose attempts the model judges, a failed one redone
    "fec": None,  # the FEC protocol
    "playback": None,  # streamed chunks, the player, its contract
    "hol": None,  # several streams on one connection
    "airtime": ("tcp-delayed", "quic-ack-frequency", "quic-tack"),  # the medium; ACK policies
}
"""The shipped experiments the README's test command runs for real, each covering a kind of
run the others do not (a record kind, a topology, a protocol, a feature), with the levels
it runs (None: its whole quick form). ``pytest --full`` runs every shipped file's whole quick
form; every file's plan is checked in tests/test_cli_check.py either way. Competing traffic
runs for real in tests/test_run_cross.py."""


def _shipped_params() -> list[Any]:
    return [pytest.param(n, marks=() if n in CI_FORMS else pytest.mark.full) for n in SHIPPED]


def _ci_form(path: Path, levels: tuple[str, ...], tmp_path: Path) -> Path:
    """The file with its quick form cut to ``levels`` (the rest as it is)."""
    head, marker, quick = path.read_text().partition("\n[quick]\n")
    assert marker, f"{path.name} has no [quick] section"
    kept = [line for line in quick.splitlines() if not line.startswith("levels")]
    assert all("]" in line for line in quick.splitlines() if line.startswith("levels"))
    chosen = ", ".join(f'"{level}"' for level in levels)
    tmp_path.mkdir(parents=True, exist_ok=True)
    trimmed = tmp_path / path.name
    trimmed.write_text(f"{head}{marker}levels = [{chosen}]\n" + "\n".join(kept) + "\n")
    return trimmed


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", _shipped_params())
def test_every_shipped_experiment_runs_in_its_quick_form(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The issue's 'done when': each shipped experiment in --quick form, for real. Runs may
    be flagged invalid by the machine (CPU, steal), never by a failure of the harness. One
    attempt per run here: the re-runs of invalid runs are tested on their own above, and a
    busy CI host would otherwise triple the time. One repetition per level: what is tested
    is that each level runs and reports (the main job's quick form, four repetitions, runs
    whole in CI's container stage)."""
    path = Path(__file__).resolve().parent.parent / "experiments" / f"{name}.toml"
    levels = CI_FORMS.get(name)
    if levels is not None and not request.config.getoption("--full"):
        path = _ci_form(path, levels, tmp_path / "form")
    link = ["--link-name", f"hn{SHIPPED.index(name) + 20}"]
    once = [*link, "--attempts", "1", "--reps", "1"]
    code = main(["run", str(path), "--quick", "--output", str(tmp_path), *once])

    (result,) = tmp_path.glob(f"{name}/*")
    assert code == _status(result)
    frame = pd.read_csv(result / "runs.csv")
    from harness.spec import experiment as specmod

    quick = specmod.load(path).quick_form()
    assert (frame["attempt"] == 1).sum() == len(quick.levels)
    assert frame["attempt"].max() == 1
    for row in frame.itertuples():
        reason = str(row.invalid_reason)
        assert not reason.startswith(("error", "integrity", "harness")), (row.run_id, reason)
        if pd.notna(row.ratio):  # a streamed or multi-stream run has its bound elsewhere
            assert row.ratio > 0.9, (row.run_id, row.ratio)
    assert "## Answer" in (result / "report.md").read_text()
    if name in CONTRACT_CHECKS:
        CONTRACT_CHECKS[name](result)


def _playback_contract(result: Path) -> None:
    """Issue 11's output contract for playback.csv, and a rate shortfall that stalls."""
    frame = pd.read_csv(result / "playback.csv")
    columns = ["run_id", "level", "initial_buffer_s", "start_delay_s", "stall_count"]
    columns += ["stall_s", "predicted_stall_s", "stall_cause"]
    assert set(columns) <= set(frame.columns)
    assert frame["level"].str.contains("jitter|rate|chapter").all()
    # a rate shortfall stalls whatever the initial buffer, in the model and in the run
    short = frame[frame["level"].str.contains("rate")]
    assert (short["predicted_stall_s"] > 0).all() and (short["stall_count"] > 0).all()
    assert "## Playback" in (result / "report.md").read_text()


def _cancel_contract(result: Path) -> None:
    """cancel.csv: both protocols, and a server that learns of the cancel no sooner than
    about one one-way delay (100 ms) after it."""
    frame = pd.read_csv(result / "cancel.csv")
    assert set(frame["protocol"]) == {"h2", "h3"}
    assert (frame["server_learned_s"] > 0.09).all()
    assert (frame["bytes_sent_after_cancel"] >= 0).all()
    assert "## Cancel" in (result / "report.md").read_text()


CONTRACT_CHECKS = {"playback": _playback_contract, "cancel": _cancel_contract}
"""What a shipped experiment's quick form must write beyond runs.csv and report.md."""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode(errors="replace").replace("\0", " ")
    except OSError as err:
        return f"{pid}: {err}"


def _processes_naming(path: Path, *words: str) -> list[int]:
    """Pids of live processes whose command line names ``path`` (and every word)."""
    import os

    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        if any(str(path) in arg for arg in argv) and all(w in argv for w in words):
            pids.append(int(entry))
    return pids


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_mid_experiment_cleans_up_and_resume_finishes(tmp_path: Path) -> None:
    """SIGTERM in the middle of a run: the link goes down, finished runs stay; --resume
    then makes exactly the missing runs."""
    import os
    import signal
    import subprocess
    import sys
    import time

    experiment = tmp_path / "tiny.toml"
    experiment.write_text(TINY)
    out = tmp_path / "results"
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        str(experiment),
        "--reps",
        "3",
        "--output",
        str(out),
        "--link-name",
        "hn10",
        "--attempts",
        "1",
    ]
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        finished: list[Path] = []
        while time.monotonic() < deadline and not finished:
            time.sleep(0.2)
            finished = list(out.glob("tiny/*/runs/*/row.json"))
        assert finished, "no run finished within 120 s"
        while time.monotonic() < deadline and not _processes_naming(out, "client"):
            time.sleep(0.02)  # interrupt while a client is mid-request
        assert _processes_naming(out, "client"), "no client started within 120 s"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130, stderr.read_text()[-2000:]
        left = _processes_naming(out)  # no client or server outlives the harness
        assert left == [], [_cmdline(pid) for pid in left]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            main(["clean", "--name", "hn10"])
    assert not any(name.startswith("tb-hn10-") for name in os.listdir("/run/netns"))
    (result,) = out.glob("tiny/*")
    done_before = {p.parent.name for p in result.glob("runs/*/row.json")}
    assert 1 <= len(done_before) < 6
    resume = ["--resume", str(result), "--link-name", "hn10", "--attempts", "1"]
    code = main(["run", str(experiment), "--reps", "3", *resume])
    assert code == _status(result)
    frame = pd.read_csv(result / "runs.csv")
    assert len(frame) == 6 and frame["run_id"].is_unique


def test_the_campaigns_profile_comes_from_the_flags_then_the_environment() -> None:
    import argparse

    from harness.cli.run import campaign_profile

    def flags(**kw: bool) -> argparse.Namespace:
        return argparse.Namespace(**{"quick": False, "chapter": False, "full": False, **kw})

    assert campaign_profile(flags(chapter=True), {}) == ("chapter", True)  # the signed form
    assert campaign_profile(flags(chapter=True, quick=True), {}) == ("quick", True)
    assert campaign_profile(flags(chapter=True, full=True), {}) == ("full", True)
    assert campaign_profile(flags(quick=True), {"TESTBED_PROFILE": "chapter"}) == (
        "quick",
        False,
    )
    assert campaign_profile(flags(), {"TESTBED_PROFILE": "chapter"}) == ("chapter", True)
    assert campaign_profile(flags(), {"TESTBED_PROFILE": "chapter-quick"}) == ("quick", True)
    assert campaign_profile(flags(), {"TESTBED_PROFILE": "chapter-full"}) == ("full", True)
    assert campaign_profile(flags(), {"TESTBED_PROFILE": "quick", "TESTBED_QUICK": "0"}) == (
        "quick",
        False,
    )
    assert campaign_profile(flags(), {"TESTBED_QUICK": "1"}) == ("quick", False)
    assert campaign_profile(flags(), {}) == ("full", False)
    for bad, field in (
        (flags(full=True), "full"),
        (flags(full=True, quick=True, chapter=True), "full"),
    ):
        with pytest.raises(SpecError) as info:
            campaign_profile(bad, {})
        assert info.value.field == field
    with pytest.raises(SpecError) as info:
        campaign_profile(flags(), {"TESTBED_PROFILE": "everything"})
    assert info.value.field == "TESTBED_PROFILE"


def test_the_chapter_campaign_runs_every_file_in_the_chapters_order(tmp_path: Path) -> None:
    from harness.campaign.serial import experiment_files, run_campaign
    from harness.report.chapter import CHAPTER_ORDER

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    files = experiment_files(shipped, None, chapter=True)
    assert [p.stem for p in files] == list(CHAPTER_ORDER)
    subset = experiment_files(shipped, ["agent-rate", "tiles"], chapter=True)
    assert [p.stem for p in subset] == ["tiles", "agent-rate"]  # the chapter's order

    made = []

    def runner(spec, **_kw):  # a runner that runs nothing: the campaign's own bookkeeping
        made.append(spec.name)
        forms.append((spec.level_names, spec.repetitions))
        raise RuntimeError("no link here")

    forms: list[tuple[tuple[str, ...], int]] = []

    summary = run_campaign(
        experiments_dir=shipped, names=["initcwnd", "tiles"], reps=1, form="chapter",
        backend="userspace", output=tmp_path, runner=runner, chapter=True,
    )  # fmt: skip
    assert made == ["tiles", "initcwnd"] and not summary.ok
    assert forms == [(("whole-h2", "tiles-chapter-h2"), 1), (("iw10",), 1)]  # [chapter], --reps 1
    directory = summary.index_path.parent
    index = json.loads(summary.index_path.read_text())
    assert index["chapter"] is True and index["wall_s"] >= 0 and index["form"] == "chapter"
    assert (directory / "report.md").is_file() and (directory / "index.html").is_file()
    report = (directory / "report.md").read_text()
    assert "Form: chapter (the signed form" in report
    assert "not measurable: tiles: failed: RuntimeError: no link here" in report


def test_recollect_is_for_an_experiments_directory_not_a_campaigns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "campaign.json").write_text("{}")
    assert main(["report", str(tmp_path), "--recollect"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "recollect" in err and "experiment's result directory" in err
    assert err.count("\n") == 1


def test_report_says_why_each_column_is_empty_by_this_versions_rules(tmp_path: Path) -> None:
    from harness.store.resultdir import ResultDir
    from tbcore.runrow import RunRow

    result = ResultDir.create(tmp_path, "x")
    result.write_manifest({"resolved": {"name": "x"}})
    result.fresh_run_dir("0000-a-r0")
    result.save_row(RunRow(run_id="0000-a-r0", seq=0, block=0, position=0, level="a", rep=0,
                           warmup=False, link_seed=1, workload="asr", total_s=1.01,
                           bound_s=1.0, valid=True))  # fmt: skip
    (result.path / "empty_columns.csv").write_text("column,reason\nbelow_bound,an old rule\n")
    assert main(["report", str(result.path)]) == 0
    empty = pd.read_csv(result.path / "empty_columns.csv").set_index("column")["reason"]
    assert "least time / bound: 1.010" in empty["below_bound"]
    assert "least time / bound: 1.010" in (result.path / "report.md").read_text()
