"""``testbed bench link --compare``'s options (what would change nothing is refused in one
line), the lines under the table, and the saved files (harness/bench/peercli.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness.bench.link import register
from harness.bench.peercli import check_options, conditions, save
from harness.bench.peers import PeerRun
from tbcore.errors import SpecError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    bench = commands.add_parser("bench").add_subparsers()
    register(commands, bench)
    return parser.parse_args(["bench", "link", *argv])


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (("--compare", "mahimahi", "--no-load"), "no_load"),
        (("--compare", "mahimahi", "--backend", "netem"), "backend"),
        (("--trace", "cell-markov.up"), "trace"),
        (("--rounds", "2"), "rounds"),
        (("--save", "x"), "save"),
        (("--mahimahi-bin", "/opt/mm/bin"), "mahimahi_bin"),
        (("--compare", "netem", "--mahimahi-bin", "/opt/mm/bin"), "mahimahi_bin"),
        (("--compare", "mahimahi", "--rounds", "0"), "rounds"),
        (("--compare", "dummynet"), "compare"),
    ],
)
def test_what_would_change_nothing_is_refused(argv: tuple[str, ...], field: str) -> None:
    with pytest.raises(SpecError) as err:
        check_options(parse(*argv))
    assert err.value.field == field and "\n" not in str(err.value)


def test_sensible_options_pass() -> None:
    check_options(parse())
    check_options(parse("--compare", "mahimahi,netem", "--mahimahi-bin", "/b", "--rounds", "5"))
    check_options(parse("--compare", "mahimahi", "--gro", "on", "--trace", "t", "--trace", "u"))


def _doc(guest: bool) -> dict:
    doc = {
        "host": {
            "cpu_model": "AMD EPYC",
            "cpus": 2,
            "kernel": "6.18",
            "date_utc": "2026-12-06T15:00:00Z",
            "loadavg_start": 0.1,
            "loadavg_end": 0.5,
        },
        "config": {"rounds": 3},
        "emulators": ["ours", "ours-gro", "mahimahi"],
        "tcp_congestion_control": "bbr",
        "mahimahi": {"mm-delay": "/b/mm-delay", "mm-link": "/b/mm-link"},
        "runs": [
            PeerRun(1, "udp 333 Mbit/s", "udp", e, 333e6, 333e6, cpu_cores=c).to_dict()
            for e, c in (("ours", 0.2), ("ours-gro", 0.2), ("mahimahi", 0.3))
        ],
    }
    if guest:
        doc["guest"] = {"kernel": "6.1.0-41-amd64", "vm_stage_s": 900.0}
    return doc


def test_the_conditions_name_the_host_the_settings_and_the_guest() -> None:
    lines = conditions(_doc(guest=True))
    assert lines["host"] == "AMD EPYC, 2 CPUs, Linux 6.18"
    assert "bbr" in lines["tcp"] and "ours-gro" in lines and "--gro on" in lines["ours-gro"]
    assert "QEMU" in lines["@guest"] and "6.1.0-41-amd64" in lines["@guest"]
    assert "@guest" not in conditions(_doc(guest=False))
    guest = {**_doc(guest=True), "emulators": ["ours", "mahimahi", "ours@guest", "netem@guest"]}
    lines = conditions(guest)
    assert lines["rounds"].endswith(
        "ours, mahimahi in turn here; ours@guest, netem@guest in turn in the guest)"
    )
    assert lines["netem, trace"].startswith("not measured: the kernel's netem has a rate")


def test_save_writes_the_table_and_every_run(tmp_path: Path) -> None:
    stem = tmp_path / "reference" / "link-compare"
    save(_doc(guest=False), str(stem))
    data = json.loads(stem.with_suffix(".json").read_text())
    assert len(data["runs"]) == 3
    text = stem.with_suffix(".md").read_text()
    assert "| udp 333 Mbit/s | mahimahi | 333.0 Mbit/s | 1 |" in text
    assert "- host: AMD EPYC, 2 CPUs, Linux 6.18" in text
