"""``testbed trace make`` and ``testbed trace show`` as a user types them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from netem.trace import SHIPPED_DIR

SHIPPED = {
    "cell-markov.down": ["markov", "--duration", "20s", "--seed", "1"],
    "cell-markov.up": [
        "markov",
        "--states",
        "12mbit:2s,6mbit:1.5s,3mbit:1s,1mbit:0.5s",
        "--duration",
        "40s",
        "--seed",
        "2",
    ],
    "cell-slow.up": [
        "markov",
        "--states",
        "10mbit:6s,6mbit:5s,3mbit:4s,1.5mbit:3s",
        "--duration",
        "160s",
        "--seed",
        "4",
    ],
    "cell-dips.down": [
        "markov",
        "--states",
        "8mbit:3s,2mbit:2s,0.4mbit:1.5s,0.1mbit:1s",
        "--duration",
        "60s",
        "--seed",
        "3",
    ],
    "leo.delay": ["leo"],
    "const-12mbit.up": ["constant", "--rate", "12mbit", "--duration", "1ms"],
}
"""The commands netem/traces/README.md gives for each shipped trace."""


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_documented_command_remakes_each_shipped_trace(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, *options = SHIPPED[name]
    assert main(["trace", "make", model, str(tmp_path / name), *options]) == 0
    assert (tmp_path / name).read_bytes() == (SHIPPED_DIR / name).read_bytes()
    assert "sha256" in capsys.readouterr().out
    readme = (SHIPPED_DIR / "README.md").read_text()
    assert " ".join(["testbed trace make", model, name, *options]) in readme


def test_show_prints_the_percentiles_and_writes_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "p.png"
    paths = [str(SHIPPED_DIR / "cell-markov.up"), str(SHIPPED_DIR / "leo.delay")]
    assert main(["trace", "show", *paths, "--below", "6mbit", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "rate mean 7.329  p5 1.080  p50 6.000  p95 12.000 Mbit/s" in out
    assert "below 6mbit: 23.5 % of the time" in out
    assert "delay mean 30.423" in out and f"plot: {plot}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_show_takes_every_trace_the_link_parser_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A delay trace whose period is far below a window (``0 0`` / ``1e-10 5``) is shown, as
    the link parser accepts it (it raised IndexError here)."""
    from netem.trace import load

    path = tmp_path / "tiny.delay"
    path.write_text("0 0\n1e-10 5\n")
    load(str(path), "delay")  # what a link string's delay trace goes through
    assert main(["trace", "show", str(path), "--no-plot"]) == 0
    assert "period" in capsys.readouterr().out


def test_show_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(SHIPPED_DIR / "const-12mbit.up")
    assert main(["trace", "show", path, "--json", "--no-plot"]) == 0
    data = json.loads(capsys.readouterr().out)
    (only,) = data["traces"]
    assert only["kind"] == "capacity" and only["mean_bps"] == 12e6 and data["plot"] is None
    assert len(only["sha256"]) == 64


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["trace", "show", "{bad}", "--no-plot"], ("line 2", "whole number")),
        (["trace", "show", "{missing}", "--no-plot"], ("cannot read",)),
        (["trace", "show", "{empty}", "--no-plot"], ("empty",)),
        (["trace", "show", "{good}", "--window", "0ms", "--no-plot"], ("window",)),
        (["trace", "show", "{good}", "--plot", "{missing}/p.png"], ("plot", "cannot write")),
        (["trace", "make", "constant", "{good}", "--rate", "1mbit"], ("exists", "--force")),
        (["trace", "make", "markov", "{new}", "--states", "8mbit"], ("RATE:MEAN_HOLD",)),
        (["trace", "make", "markov", "{new}", "--states", "8mbit:0s"], ("mean_hold_s",)),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: tuple[str, ...]
) -> None:
    (tmp_path / "bad").write_text("1\nx\n")
    (tmp_path / "empty").write_text("")
    (tmp_path / "good").write_text("1\n")
    names = {k: str(tmp_path / k) for k in ("bad", "missing", "empty", "good", "new")}
    assert main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("testbed trace: error:")
    for word in words:
        assert word in err
