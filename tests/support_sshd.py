"""An OpenSSH server inside a tb- namespace playing a remote host (issue 18), with its own
host key, a client key for root and an ssh config file that reaches it: the harness is
handed that config and a host name, and does not know the host is local."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from netem import nsexec
from tbcore.processes import stop_process

SSHD = "/usr/sbin/sshd"
HOST_ALIAS = "tb-remote-host"
TESTBED_COMMAND = str(Path(sys.executable).with_name("testbed"))
"""The same install, reached as a remote host would reach its own."""


@dataclass(frozen=True)
class SshdHost:
    ssh_config: Path
    target: str
    addr: str


def needs_sshd() -> None:
    if shutil.which("ssh") is None or not Path(SSHD).exists():
        pytest.skip("needs openssh-client and openssh-server (harness/install.sh installs them)")


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        timeout=30,
    )


def _wait_listening(server: subprocess.Popen[bytes], log: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "Server listening on" in text:
            return
        if server.poll() is not None:
            raise RuntimeError(f"sshd exited {server.returncode}: {text.strip()[-300:]}")
        time.sleep(0.05)
    raise TimeoutError(f"sshd did not listen within {timeout_s:g} s")


@contextmanager
def sshd_in(
    ns: str, addr: str, workdir: Path, port: int = 22, alias: str = HOST_ALIAS
) -> Iterator[SshdHost]:
    """sshd listening on ``addr:port`` inside namespace ``ns`` until the block ends, reached
    as ``alias`` through the ssh config it writes (its host key already known there, so
    that asyncssh, which has no StrictHostKeyChecking, accepts it too)."""
    needs_sshd()
    workdir.mkdir(parents=True, exist_ok=True)
    _keygen(workdir / "host_key")
    _keygen(workdir / "id")
    shutil.copy(workdir / "id.pub", workdir / "authorized_keys")
    config = workdir / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress {addr}\nHostKey {workdir / 'host_key'}\n"
        f"AuthorizedKeysFile {workdir / 'authorized_keys'}\nPidFile {workdir / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\nLogLevel INFO\n"
        # the host's own name in its sessions: two "hosts" on one machine are told apart
        # (their runs still share the machine's run lock: one run at a time on its cores)
        f"SetEnv TESTBED_HOST={alias}\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    client_config = workdir / "ssh_config"
    host_key = (workdir / "host_key.pub").read_text().split()
    (workdir / "known_hosts").write_text(f"{alias},{addr} {host_key[0]} {host_key[1]}\n")
    client_config.write_text(
        f"Host {alias}\n  HostName {addr}\n  Port {port}\n  User root\n"
        f"  IdentityFile {workdir / 'id'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {workdir / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n"
        "  LogLevel ERROR\n"
    )
    log = workdir / "sshd.log"
    server = nsexec.popen(
        ns, [SSHD, "-D", "-E", str(log), "-f", str(config)], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_listening(server, log)
        yield SshdHost(ssh_config=client_config, target=f"root@{alias}", addr=addr)
    finally:
        stop_process(server, 10.0)


@contextmanager
def sshd_across(name: str, link: str, workdir: Path) -> Iterator[tuple[SshdHost, Any]]:
    """An emulated path ``link`` (userspace backend) whose server namespace runs sshd: the
    harness side runs in its client namespace (``link.client_ns``)."""
    from netem.link import Link

    needs_sshd()
    with (
        Link.up(name, link, backend="userspace") as up,
        sshd_in(up.server_ns, up.server_addr, workdir) as host,
    ):
        yield host, up


def remote_host(host: SshdHost, lease_s: float = 30.0) -> Any:
    from harness.run.remote.channel import RemoteHost

    return RemoteHost(host.target, TESTBED_COMMAND, lease_s, str(host.ssh_config))


@contextmanager
def two_ssh_hosts(prefix: str, workdir: Path) -> Iterator[tuple[str, list[SshdHost], Path]]:
    """Two tb- namespaces joined by a veth pair, each with its sshd (a lab of two hosts on
    one machine): yields the first namespace (where a client runs, as on the first lab
    host), both hosts and one ssh config that reaches both."""
    from netem import topology

    needs_sshd()
    spaces = [f"tb-{prefix}-a", f"tb-{prefix}-b"]
    addrs = ["198.18.97.1", "198.18.97.2"]
    for ns in spaces:
        topology.delete_namespace(ns)
        topology.create_namespace(ns)
    try:
        topology.create_veth(spaces[0], "tb-eth", spaces[1], "tb-eth", mtu_bytes=1500)
        for ns, addr in zip(spaces, addrs, strict=True):
            topology.add_address(ns, "tb-eth", addr, 24)
        with (
            sshd_in(spaces[0], addrs[0], workdir / "a", alias=f"tb-{prefix}1") as one,
            sshd_in(spaces[1], addrs[1], workdir / "b", alias=f"tb-{prefix}2") as two,
        ):
            config = workdir / "ssh_config"
            config.write_text(one.ssh_config.read_text() + two.ssh_config.read_text())
            yield spaces[0], [one, two], config
    finally:
        for ns in spaces:
            topology.delete_namespace(ns)
