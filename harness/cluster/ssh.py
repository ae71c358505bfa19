"""``--hosts h1,h2``: a Dask cluster started over ssh (``distributed.SSHCluster``): the
scheduler on the first host, one worker on each host, each advertising one ``testbed``
resource and one thread, so that a host makes one block at a time.

SSHCluster speaks ssh through asyncssh with the user's keys; its options follow the
testbed's own ssh options (harness.run.remote.channel.SSH_OPTIONS): keys only (never a password
or keyboard prompt), a 10 s connect timeout and keep-alives every 5 s, three missed ones
ending the session; ``--ssh-config FILE`` is read as ssh -F would. The workers run the
testbed's Python on each host (``--remote-python``; default the path of this one, as a lab
with one checkout path everywhere has it); the client then checks each host's version as
``testbed remote check`` does (harness.cluster.hosts).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from harness.cluster.submit import RESOURCE
from harness.run.remote.channel import check_target
from tbcore.errors import SpecError, clip

CONNECT_TIMEOUT_S = 10
"""As ssh's ``ConnectTimeout=10`` in harness.run.remote.channel.SSH_OPTIONS."""
KEEPALIVE_INTERVAL_S = 5
"""As ``ServerAliveInterval=5``."""
KEEPALIVE_COUNT_MAX = 3
"""As ``ServerAliveCountMax=3``."""


def parse_hosts(text: str) -> list[str]:
    """``h1,h2,...`` as ssh targets (each checked as ``--remote`` checks its host)."""
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    if not hosts:
        raise SpecError("hosts", "give at least one host (h1,h2,...)")
    if len(set(hosts)) != len(hosts):
        raise SpecError("hosts", "a host is named twice: one worker per host")
    return [check_target(h) for h in hosts]


def target_options(target: str) -> tuple[str, dict[str, Any]]:
    """A target as asyncssh takes it: the host, and the user and port as connect options
    (asyncssh reads ``user@host`` as a host name; ssh's ``ssh://user@host:port`` too)."""
    rest = check_target(target).removeprefix("ssh://")
    user, _, host = rest.rpartition("@")
    options: dict[str, Any] = {"username": user} if user else {}
    if target.startswith("ssh://") and not host.endswith("]") and ":" in host:
        host, _, port = host.rpartition(":")
        options["port"] = int(port)
    return host.strip("[]"), options


def connect_options(ssh_config: str | None) -> dict[str, Any]:
    """asyncssh's connect options equivalent to the testbed's ssh options."""
    options: dict[str, Any] = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "keepalive_interval": KEEPALIVE_INTERVAL_S,
        "keepalive_count_max": KEEPALIVE_COUNT_MAX,
        "password": None,  # BatchMode=yes: keys only
        "kbdint_auth": False,
    }
    if ssh_config:
        options["config"] = [ssh_config]
    return options


def start_ssh_cluster(
    hosts: Sequence[str],
    *,
    ssh_config: str | None = None,
    remote_python: str | None = None,
    scheduler_port: int = 0,
) -> Any:
    """An SSHCluster, as ``distributed.SSHCluster`` builds it: the scheduler on ``hosts[0]``,
    a worker on each of ``hosts``; each listening on the address this host reached it at
    (``ssh -G``), which Dask would otherwise guess from a route to 8.8.8.8 that an isolated
    lab does not have (and then offer 127.0.0.1 to the other hosts)."""
    try:
        from distributed.deploy.spec import SpecCluster
        from distributed.deploy.ssh import Scheduler, Worker
    except ImportError:
        raise SpecError("hosts", "needs distributed and asyncssh (harness/install.sh)") from None
    base = connect_options(ssh_config)
    python = remote_python or sys.executable

    def options(target: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        host, own = target_options(target)
        listen = {**kwargs, "host": reached_address(target, ssh_config)}
        return {
            "address": host,
            "connect_options": {**base, **own},
            "kwargs": listen,
            "remote_python": python,
        }

    scheduler = {
        "cls": Scheduler,
        "options": options(hosts[0], {"port": scheduler_port, "dashboard_address": ":0"}),
    }
    worker = {"nthreads": 1, "n_workers": 1, "resources": {RESOURCE: 1}}
    workers = {
        i: {
            "cls": Worker,
            "options": {**options(target, worker), "worker_class": "distributed.Nanny"},
        }
        for i, target in enumerate(hosts)
    }
    try:
        return SpecCluster(workers, scheduler, name="SSHCluster")
    except Exception as err:  # asyncssh's and the scheduler's many errors: one line
        raise SpecError("hosts", f"could not start the cluster: {clip(str(err))}") from None


SSH_G_TIMEOUT_S = 10.0


def reached_address(target: str, ssh_config: str | None) -> str:
    """The address ssh reaches ``target`` at (its config's HostName, ``ssh -G``): where the
    process started there listens. The target's host itself when ssh cannot say."""
    host, _ = target_options(target)
    argv = ["ssh", "-G", *(["-F", ssh_config] if ssh_config else []), host]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SSH_G_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return host
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "hostname" and value.strip():
            return value.strip()
    return host
