"""``testbed clean --name``: nothing of a link survives, whatever was killed and when (root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from test_link import BACKENDS, assert_rtt, probe_rtts

from netem import clean, names, nsexec, topology
from netem.link import Link, list_links

pytestmark = pytest.mark.timeout(120)

TESTBED = [sys.executable, "-m", "harness.cli"]


@pytest.fixture
def name() -> Iterator[str]:
    link = "tp50"
    clean.clean(link)
    yield link
    clean.clean(link)


def _nothing_left(link: str) -> None:
    assert clean.leftovers(link) == []
    assert link not in list_links()
    for suffix in clean.STATE_SUFFIXES:
        assert not (names.STATE_DIR / "links" / f"{link}{suffix}").exists()


def _wait_for(predicate, timeout_s: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


@pytest.mark.root
def test_sigkill_of_the_emulator(name: str) -> None:
    link = Link.up(name, "rtt=20ms", backend="userspace")
    pid = link.state.emulator_pid
    assert pid is not None and clean.is_emulator(pid, name)
    os.kill(pid, signal.SIGKILL)
    assert _wait_for(lambda: not clean._alive(pid))
    report = clean.clean(name)
    assert report.ok
    assert sorted(report.namespaces) == [link.client_ns, link.server_ns]
    _nothing_left(name)


@pytest.mark.root
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("when", ["namespaces", "done"])
def test_sigkill_of_link_up_then_clean(name: str, backend: str, when: str) -> None:
    """Kill ``testbed link up`` as soon as its namespaces exist, or once it is up."""
    proc = subprocess.Popen(
        [*TESTBED, "link", "up", name, "rtt=20ms", "--backend", backend],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if when == "namespaces":
            assert _wait_for(lambda: topology.namespace_exists(names.namespace(name, "client")))
            proc.kill()
        else:
            assert proc.wait(timeout=60) == 0
            assert name in list_links()
            if backend == "userspace":
                pid = Link.attach(name).state.emulator_pid
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    result = subprocess.run(
        [*TESTBED, "clean", "--name", name], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    _nothing_left(name)


@pytest.mark.root
def test_processes_inside_the_namespaces_are_ended(name: str) -> None:
    link = Link.up(name, "rtt=20ms", backend="userspace")
    sleeper = nsexec.popen(link.server_ns, ["sleep", "300"], start_new_session=True)
    try:
        report = clean.clean(name)
        assert sleeper.wait(timeout=10) is not None
        assert sleeper.pid in report.killed
        assert report.ok
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    _nothing_left(name)


@pytest.mark.root
def test_clean_by_name_leaves_other_links_alone(name: str) -> None:
    other = "tp51"
    clean.clean(other)
    try:
        with Link.up(other, "rtt=20ms", backend="userspace") as survivor:
            Link.up(name, "rtt=20ms", backend="userspace")
            assert clean.clean(name).ok
            _nothing_left(name)
            assert other in list_links()
            assert_rtt(probe_rtts(survivor, count=5), 0.02)
    finally:
        clean.clean(other)


@pytest.mark.root
def test_clean_of_nothing_is_a_no_op(name: str) -> None:
    report = clean.clean(name)
    assert report.ok
    assert (report.killed, report.namespaces, report.devices) == ([], [], []), report.processes


def test_is_emulator_matches_only_emulators() -> None:
    assert not clean.is_emulator(os.getpid(), None)
    assert not clean.is_emulator(os.getpid(), "tp50")


@pytest.mark.root
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("when", ["namespaces", "done"])
def test_sigkill_of_a_multi_link_run_then_clean(name: str, backend: str, when: str) -> None:
    """A dual topology with an exit (three nodes, three edges): kill ``link up``
    while it builds, or every edge emulator once it is up; clean leaves nothing."""
    spec = "topology=dual;link=rtt=20ms,rate=20mbit;link_b=rtt=40ms;exit_link=rtt=2ms"
    proc = subprocess.Popen(
        [*TESTBED, "link", "up", name, spec, "--backend", backend],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if when == "namespaces":
            assert _wait_for(lambda: topology.namespace_exists(names.namespace(name, "exit")))
            proc.kill()
        else:
            assert proc.wait(timeout=90) == 0
            link = Link.attach(name)
            assert set(link.nodes) == {"client", "exit", "server"}
            if backend == "userspace":
                pids = [link.show()["edges"][e]["emulator_pid"] for e in link.topology.edge_names]
                assert len(set(pids)) == 3 and all(clean.is_emulator(p, name) for p in pids)
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    result = subprocess.run(
        [*TESTBED, "clean", "--name", name], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    _nothing_left(name)
    assert not list((names.STATE_DIR / "links").glob(f"{name}.*"))
    assert not [ns for ns in topology.list_namespaces() if ns.startswith(f"tb-{name}-")]
