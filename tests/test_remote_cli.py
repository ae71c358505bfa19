"""``testbed remote``: exit statuses and one-line output of check, clock and agent."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

TESTBED = [sys.executable, "-m", "harness.cli", "remote"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TESTBED, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("check", "-x", "--"), None),
        (("check", "--", "-oProxyCommand=sh"), "remote"),
        (("check", "ssh://root@127.0.0.1:9", "--remote-command", "testbed;id"), "remote_command"),
        (("clock", "ssh://root@127.0.0.1:9", "--lease", "0"), "lease_s"),
        (("agent", "--lease", "9999"), "lease_s"),
        (("agent", "--lease", "soon"), None),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], field: str | None) -> None:
    done = run(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    if field:
        assert done.stderr.startswith(f"testbed remote: error: {field}: ")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
@pytest.mark.parametrize("command", ["check", "clock"])
def test_a_host_ssh_cannot_reach_is_one_line_and_exit_1(command: str) -> None:
    done = run(command, "ssh://root@127.0.0.1:9")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        line for line in done.stdout.splitlines() if "ssh could not connect" in line
    ]
    assert len(done.stdout.splitlines()) == 1
