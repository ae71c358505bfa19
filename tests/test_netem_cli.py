"""``testbed link up/show/list/down`` and ``testbed clean`` as a user types them (root)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from test_link import BACKENDS, assert_rtt, probe_rtts

from netem import clean
from netem.link import Link, list_links

pytestmark = pytest.mark.timeout(120)

TESTBED = [sys.executable, "-m", "harness.cli"]


def run_testbed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TESTBED, *args], capture_output=True, text=True, timeout=90)


@pytest.fixture
def name() -> Iterator[str]:
    link = "ab64"
    clean.clean(link, force=True)  # this test's own link, whoever left it
    yield link
    clean.clean(link, force=True)


@pytest.mark.root
@pytest.mark.parametrize("backend", BACKENDS)
def test_link_round_trip(name: str, backend: str) -> None:
    up = run_testbed(
        "link",
        "up",
        name,
        "dc-longhaul-clean,rtt=100ms",
        "--backend",
        backend,
        "--slow-start-after-idle",
        "0",
    )
    assert up.returncode == 0, up.stderr
    assert f"link {name} up ({backend})" in up.stdout
    # the link outlives the command that made it
    listed = run_testbed("link", "list", "--json")
    assert name in [row["name"] for row in json.loads(listed.stdout)]
    show = run_testbed("link", "show", name, "--json")
    assert show.returncode == 0, show.stderr
    info = json.loads(show.stdout)
    assert info["backend"] == backend
    assert (info["client_addr"], info["server_addr"]) == ("198.18.1.2", "198.18.2.2")
    assert (info["client_ns"], info["server_ns"]) == (f"tb-{name}-client", f"tb-{name}-server")
    assert info["spec_dict"]["up"]["rate_bps"] == 333e6
    assert info["sysctls"]["client"]["net.ipv4.tcp_slow_start_after_idle"] == "0"
    text = run_testbed("link", "show", name)
    assert f"client_ns: tb-{name}-client" in text.stdout
    assert_rtt(probe_rtts(Link.attach(name), count=5), 0.1)
    down = run_testbed("link", "down", name)
    assert down.returncode == 0, down.stderr
    assert name not in list_links() and not clean.leftovers(name)
    again = run_testbed("link", "down", name)
    assert again.returncode == 2
    assert (
        again.stderr.strip()
        == f"testbed link: error: name: no link {name!r} is up (see: testbed link list)"
    )


@pytest.mark.root
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["rtt=-5ms"], "up.rtt"),
        (["rtt=200ms,loss=100%"], "up.loss"),
        (["rate=0mbit"], "up.rate"),
        (["nonsense=1"], "nonsense"),
        (["rtt=10ms", "--sysctl", "vm.swappiness=1"], "sysctl"),
        (["rtt=10ms", "--sysctl", "novalue"], "sysctl"),
    ],
)
def test_link_up_bad_input_one_line(name: str, args: list[str], field: str) -> None:
    result = run_testbed("link", "up", name, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"testbed link: error: {field}"), lines
    assert not clean.leftovers(name) and name not in list_links()


def test_bad_link_name_one_line() -> None:
    result = run_testbed("link", "up", "Bad_Name", "rtt=10ms")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("testbed link: error: name:")


@pytest.mark.root
def test_clean_by_name_json(name: str) -> None:
    assert run_testbed("link", "up", name, "rtt=10ms", "--backend", "userspace").returncode == 0
    kept = json.loads(run_testbed("clean", "--name", name, "--json").stdout)
    assert kept["namespaces"] == [] and "emulator" in kept["skipped"][0]  # link up's, in use
    assert run_testbed("link", "down", name).returncode == 0
    result = run_testbed("clean", "--name", name, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["skipped"] == [] and data["remaining"] == []
    assert not clean.leftovers(name)
