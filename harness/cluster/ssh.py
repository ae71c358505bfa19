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
    """An SSHCluster: the scheduler on ``hosts[0]``, a worker on each of ``hosts``."""
    try:
        from distributed import SSHCluster
    except ImportError:
        raise SpecError("hosts", "needs distributed and asyncssh (harness/install.sh)") from None
    split = [target_options(h) for h in (hosts[0], *hosts)]  # the scheduler's host first
    base = connect_options(ssh_config)
    try:
        return SSHCluster(
            [host for host, _ in split],
            connect_options=[{**base, **own} for _, own in split],
            worker_options={"nthreads": 1, "n_workers": 1, "resources": {RESOURCE: 1}},
            scheduler_options={"port": scheduler_port, "dashboard_address": ":0"},
            remote_python=remote_python or sys.executable,
        )
    except Exception as err:  # asyncssh's and the scheduler's many errors: one line
        raise SpecError("hosts", f"could not start the cluster: {clip(str(err))}") from None
