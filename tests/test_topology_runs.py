"""Topology experiment files: what they may say, checked before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.run import topology_runs
from tbcore.errors import SpecError

RELAY = """
name = "r"
repetitions = 3
[fixed]
topology = "relay"
near_link = "rtt=2ms"
link = "dc-longhaul-clean"
[factor]
name = "path"
levels = [
  { name = "direct-new", route = "direct", connection = "new" },
  { name = "relay-new", route = "relay", connection = "new" },
]
[quick]
repetitions = 1
levels = ["relay-new"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.toml"
    path.write_text(text)
    return path


def test_the_shipped_experiments_load() -> None:
    for name in ("relay", "multipath"):
        path = Path("experiments") / f"{name}.toml"
        assert topology_runs.is_topology_file(path)
        assert topology_runs.load(path).levels
        assert topology_runs.load(path, quick=True).repetitions <= 2
    assert not topology_runs.is_topology_file(Path("experiments/connection.toml"))


def test_quick_form_and_bounds(tmp_path: Path) -> None:
    experiment = topology_runs.load(write(tmp_path, RELAY), quick=True)
    assert experiment.repetitions == 1 and [lv["name"] for lv in experiment.levels] == ["relay-new"]
    level = experiment.levels[0]
    topo = topology_runs.topology_of_level(experiment, level)
    relay = topology_runs.relay_bound_s(experiment, level, topo)
    direct = topology_runs.relay_bound_s(experiment, {**level, "route": "direct"}, topo)
    assert 0.24 < relay < 0.26 and direct > 4 * relay


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("relay", "ring"), "fixed.topology"),
        (('route = "relay"', 'route = "tunnel"'), "level.route"),
        (
            (
                'connection = "new" },\n  { name = "relay',
                'connection = "0rtt" },\n  { name = "relay',
            ),
            "level.connection",
        ),
        (('link = "dc-longhaul-clean"', 'link = "rtt=2"'), "link.up.rtt"),
        (("repetitions = 3", "repetitions = 0"), "repetitions"),
        (('levels = ["relay-new"]', 'levels = ["nope"]'), "quick.levels"),
        (("[fixed]", "colour = 1\n[fixed]"), "colour"),
        (('near_link = "rtt=2ms"', 'near_link = "rtt=2ms"\ncc = "vegas"'), "fixed.cc"),
    ],
)
def test_bad_files_name_the_key(tmp_path: Path, change: tuple[str, str], field: str) -> None:
    with pytest.raises(SpecError) as err:
        topology_runs.load(write(tmp_path, RELAY.replace(*change, 1)))
    assert err.value.field == field


def test_the_relay_runs_the_sides_its_levels_use() -> None:
    h2 = {"name": "a", "protocol": "h2", "route": "relay", "connection": "new"}
    h3 = {"name": "b", "protocol": "h3", "route": "relay", "connection": "new"}
    direct_h3 = {"name": "c", "protocol": "h3", "route": "direct", "connection": "new"}
    assert topology_runs._relay_protocols([h2]) == ["h2"]
    assert topology_runs._relay_protocols([h2, h3, direct_h3]) == ["h2", "h3"]
    assert topology_runs._relay_protocols([h3]) == ["h3"]
    assert topology_runs._relay_protocols([direct_h3]) == ["h2"]  # none through it


def test_only_a_run_the_host_spoiled_is_made_again() -> None:
    assert topology_runs._rerun({"valid": False, "error": None})  # late emulator
    assert not topology_runs._rerun({"valid": False, "error": "HTTP status 502"})
    assert not topology_runs._rerun({"valid": True, "error": None})
