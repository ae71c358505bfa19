"""netem.procsys: net.* sysctls written where /proc/sys is a read-only mount, as in a
container without ``systempaths=unconfined``.

The read-only /proc/sys is made as the engines make it (a bind mount of /proc/sys over
itself, remounted read-only), in a private mount namespace of a child process
(``unshare -m``), so the host's /proc/sys is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from netem import procsys

pytestmark = [pytest.mark.timeout(60), pytest.mark.root]

READ_ONLY_PROC_SYS = "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys"


def in_container_like_mounts(code: str) -> subprocess.CompletedProcess:
    script = f"{READ_ONLY_PROC_SYS} && exec {sys.executable} -c '{code}'"
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


def test_host_proc_sys_is_writable_here() -> None:
    assert not procsys.is_read_only()


def test_sysctls_of_a_new_namespace_through_a_read_only_proc_sys() -> None:
    ns = f"tb-ctps{os.getpid() % 10000}"
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from netem import procsys, sysctl, topology
        assert procsys.is_read_only()
        try:
            Path("/proc/sys/net/ipv4/tcp_no_metrics_save").write_text("1")
        except OSError as err:
            print("plain write:", err.errno)
        host = sysctl.read_host("net.ipv4.tcp_no_metrics_save")
        topology.create_namespace("{ns}")
        try:
            sysctl.write("{ns}", "net.ipv4.tcp_no_metrics_save", "1")
            print("ns:", sysctl.read("{ns}", "net.ipv4.tcp_no_metrics_save"),
                  sysctl.read("{ns}", "net.ipv6.conf.all.disable_ipv6"))
            print("host:", host == sysctl.read_host("net.ipv4.tcp_no_metrics_save"))
            print("still read-only:", procsys.is_read_only())
        finally:
            topology.delete_namespace("{ns}")
        """
    ).replace("'", '"')
    done = in_container_like_mounts(code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "plain write: 30" in lines  # EROFS: the mount is read-only, as in a container
    assert "ns: 1 1" in lines  # both the isolation sysctl and the link one were written
    assert "host: True" in lines  # the host's value did not change
    assert "still read-only: True" in lines  # only the helper thread's view was writable


def test_remount_refused_without_sys_admin() -> None:
    code = "from netem import procsys; print(procsys.can_remount())"
    drop = "setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin"
    script = f"{READ_ONLY_PROC_SYS} && exec {drop} {sys.executable} -c '{code}'"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("(False, ")
