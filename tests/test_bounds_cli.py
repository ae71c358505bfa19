"""``testbed bounds``: the worked-example table and one request's bound, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support_bounds import voice_request

from harness import bounds
from harness.cli import EXIT_USAGE, main

pytestmark = pytest.mark.timeout(60)

VOICE = [  # support_bounds.VOICE_REQUEST as flags
    "bounds",
    "request",
    "--protocol",
    "h2",
    "--connection",
    "reused",
    "--rtt",
    "200ms",
    "--rate",
    "333mbit",
    "--upload",
    "354640",
    "--processing",
    "30ms",
]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_bounds_prints_every_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["bounds"], capsys)
    assert code == 0, err
    for example in bounds.worked_examples():
        assert example.name in out
        assert example.rounded() in out
    for printed in ("12.8", "0.2385", "5.12", "46.9", "0.155", "18.3", "0.756", "1.24", "63"):
        assert printed in out


def test_bounds_request_help_renders(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse %-formats help strings: a bare "%" in one crashed -h with a traceback
    with pytest.raises(SystemExit) as exit_info:
        main(["bounds", "request", "--help"])
    assert exit_info.value.code == 0
    assert "e.g. 14%:" in capsys.readouterr().out


def test_bounds_json_is_computed_and_matches(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["bounds", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)
    examples = bounds.worked_examples()
    assert [row["name"] for row in rows] == [e.name for e in examples]
    assert [row["value"] for row in rows] == [e.value for e in examples]
    assert all(row["matches"] for row in rows)
    assert set(rows[0]) >= {"name", "inputs", "value", "unit"}


def test_request_json_equals_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*VOICE, "--json"], capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record == voice_request().to_dict()
    assert f"{record['total_s']:.4f}" == "0.2385"


def test_request_table_names_each_part(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*VOICE, "--connection", "new", "--loss", "14%", "--window", "1mb"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    for label in bounds_cli_labels():
        assert label in out
    assert "expected with loss" in out


def bounds_cli_labels() -> list[str]:
    from harness.cli.bounds import PART_LABELS

    return list(PART_LABELS.values())


def test_request_flags_override_a_link(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "bounds",
        "request",
        "--link",
        "dc-longhaul",
        "--protocol",
        "h3",
        "--connection",
        "0rtt",
        "--upload",
        "354640",
        "--download",
        "64kb",
        "--up-rate",
        "50mbit",
        "--mss",
        "1452",
        "--initcwnd",
        "20",
        "--json",
    ]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record["rtt_s"] == pytest.approx(0.2)
    assert record["up_bps"] == 50e6 and record["down_bps"] == 333e6
    assert record["up_loss"] == 0.0 and record["down_loss"] == pytest.approx(0.14)
    assert record["download_bytes"] == 64_000
    assert (record["mss_bytes"], record["initcwnd_segments"]) == (1452, 20)
    assert record["setup_s"] == 0.0 and record["retransmission_s"] > 0


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--protocol", "h1"], "--protocol"),
        (["--connection", "warm"], "--connection"),
        (["--rtt", "200"], "--rtt"),
        (["--rtt=-5ms"], "--rtt"),
        (["--rate", "333mbps"], "--rate"),
        (["--rate", "0mbit"], "--rate"),
        (["--up-rate", "fast"], "--up-rate"),
        (["--upload", "-1"], "--upload"),
        (["--download", "1.5"], "--download"),
        (["--processing", "30"], "--processing"),
        (["--initcwnd", "ten"], "--initcwnd"),
        (["--initcwnd", "0"], "--initcwnd"),
        (["--mss", "0"], "--mss"),
        (["--window", "0"], "--window"),
        (["--loss", "100%"], "--loss"),
        (["--down-loss", "1.2"], "--down-loss"),
        (["--link", "rtt=oops"], "--link"),
    ],
)
def test_bad_flag_gives_one_line_naming_it(
    extra: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*VOICE, *extra], capsys)
    assert code == EXIT_USAGE
    assert out == ""
    assert err.startswith(f"testbed bounds: error: {flag}: ")
    assert err.count("\n") == 1


REQUEST = ["bounds", "request"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([*REQUEST, "--connection", "new", "--rtt", "1ms", "--rate", "1mbit"], "--protocol"),
        ([*REQUEST, "--protocol", "h2", "--rtt", "1ms", "--rate", "1mbit"], "--connection"),
        ([*REQUEST, "--protocol", "h2", "--connection", "new", "--rate", "1mbit"], "--rtt"),
        ([*REQUEST, "--protocol", "h2", "--connection", "new", "--rtt", "1ms"], "--up-rate"),
        (
            [
                *REQUEST,
                "--protocol",
                "h2",
                "--connection",
                "new",
                "--rtt",
                "1ms",
                "--up-rate",
                "1mbit",
            ],
            "--down-rate",
        ),
    ],
)
def test_missing_flag_gives_one_line_naming_it(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(argv, capsys)
    assert code == EXIT_USAGE
    assert err.startswith(f"testbed bounds: error: {flag}: ")
    assert err.count("\n") == 1


def test_installed_entry_point_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", *VOICE, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"{json.loads(done.stdout)['total_s']:.4f}" == "0.2385"
