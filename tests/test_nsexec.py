"""netem.nsexec: a child started in a namespace, with the endpoints' scheduling (root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from netem import nsexec
from tbcore import procfs
from tbcore.errors import SpecError

pytestmark = pytest.mark.root

SHOW = (
    "import os, socket; from tbcore import procfs;"
    "print(procfs.process_sched(os.getpid()));"
    # empty in the default autogroup (a process whose session never called setsid, as CI's
    # runner): the kernel shows only real autogroups (sched(7))
    "print((open('/proc/self/autogroup').read().split() or ['none'])[-1]);"
    "print(os.getsid(0) == os.getpid());"
    "print(' '.join(sorted(n for _, n in socket.if_nameindex())))"
)


@pytest.fixture
def namespace() -> str:
    from pyroute2 import netns

    name = f"tb-nsx{os.getpid() % 100000}"
    netns.create(name)
    yield name
    netns.remove(name)


def test_a_child_runs_in_the_namespace_at_the_priority_asked(namespace: str) -> None:
    proc = nsexec.popen(
        namespace,
        [sys.executable, "-c", SHOW],
        nice=-10,
        rr_priority=1,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=30)
    sched, autogroup_nice, own_session, devices = out.splitlines()
    assert sched == "rr 1"
    assert autogroup_nice == "-10"  # its autogroup, a session of its own
    assert own_session == "True"
    assert devices == "lo"  # a fresh namespace has only its loopback


def test_without_a_priority_the_child_stays_in_the_parents_session(namespace: str) -> None:
    out = nsexec.run(
        namespace, [sys.executable, "-c", SHOW], capture_output=True, text=True, timeout=30
    ).stdout
    sched, _, own_session, _ = out.splitlines()
    assert sched == procfs.process_sched(os.getpid())
    assert own_session == "False"


def test_a_missing_namespace_is_a_one_line_error() -> None:
    with pytest.raises(SpecError, match="does not exist"):
        nsexec.popen("tb-no-such-namespace", ["true"])


def _blocked_signals(pid: int) -> int:
    """SigBlk of /proc/PID/status: the blocked-signal mask as a number."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigBlk")


def test_a_child_is_made_with_the_stop_signals_held_and_runs_without_them() -> None:
    proc = nsexec.popen(None, ["sleep", "30"])
    try:
        assert proc in nsexec._children
        # the parent held SIGINT and SIGTERM only while it made the child; the child has them
        assert _blocked_signals(proc.pid) & (1 << (signal.SIGTERM - 1)) == 0
        assert _blocked_signals(os.getpid()) & (1 << (signal.SIGTERM - 1)) == 0
    finally:
        proc.kill()
        proc.wait()


def test_stop_children_stops_one_nobody_holds() -> None:
    pid = nsexec.popen(None, ["sleep", "30"]).pid  # its caller "lost" it to a signal
    assert pid in nsexec.stop_children(timeout_s=5)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert nsexec.stop_children() == []
