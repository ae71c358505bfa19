"""--hosts: the host list and SSHCluster's ssh options, as harness.run.remote's ssh is run."""

from __future__ import annotations

import pytest

from harness.cluster.ssh import connect_options, parse_hosts
from harness.cluster.submit import planned_makespan_s
from harness.run.remote.channel import SSH_OPTIONS
from tbcore.errors import SpecError


def test_hosts_are_ssh_targets_once_each() -> None:
    assert parse_hosts("root@lab1, lab2,ssh://root@lab3:2222") == [
        "root@lab1",
        "lab2",
        "ssh://root@lab3:2222",
    ]
    for bad in ("", " , ", "lab1,lab1", "-oProxyCommand=x", "lab1;rm"):
        with pytest.raises(SpecError):
            parse_hosts(bad)


def test_the_options_mirror_the_testbeds_ssh_options() -> None:
    options = connect_options(None)
    words = " ".join(SSH_OPTIONS)
    assert f"ConnectTimeout={options['connect_timeout']}" in words
    assert f"ServerAliveInterval={options['keepalive_interval']}" in words
    assert f"ServerAliveCountMax={options['keepalive_count_max']}" in words
    assert "BatchMode=yes" in words and options["password"] is None
    assert options["kbdint_auth"] is False and "config" not in options
    assert connect_options("/etc/lab_ssh_config")["config"] == ["/etc/lab_ssh_config"]


def test_planned_makespan_spreads_the_work_never_below_the_longest_block() -> None:
    assert planned_makespan_s([10.0, 10.0, 10.0, 10.0], 2) == pytest.approx(20.0)
    assert planned_makespan_s([30.0, 1.0, 1.0], 3) == pytest.approx(30.0)
    assert planned_makespan_s([], 2) is None
