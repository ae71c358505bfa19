"""``testbed clean --name``: nothing of a link survives, whatever was killed and when (root)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_link import BACKENDS, assert_rtt, probe_rtts

from netem import clean, names, nsexec, topology
from netem.link import Link, list_links

pytestmark = pytest.mark.timeout(120)

TESTBED = [sys.executable, "-m", "harness.cli"]


@pytest.fixture
def name() -> Iterator[str]:
    link = "ab50"
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


def _clean_cli(name: str) -> subprocess.CompletedProcess[str]:
    """``testbed clean --name`` run as another process would."""
    return subprocess.run(
        [*TESTBED, "clean", "--name", name], capture_output=True, text=True, timeout=60
    )


def _kill_link_up_then_clean(
    name: str,
    spec: str,
    backend: str,
    *,
    when: str,
    watched_node: str,
    up_timeout_s: float,
    once_up: Callable[[], None],
) -> None:
    """Start ``testbed link up``; kill it once ``watched_node``'s namespace exists (``when``
    is "namespaces"), or let it finish and call ``once_up`` (``when`` is "done"); then
    ``testbed clean --name`` must succeed and leave nothing of the link."""
    proc = subprocess.Popen(
        [*TESTBED, "link", "up", name, spec, "--backend", backend],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if when == "namespaces":
            assert _wait_for(lambda: topology.namespace_exists(names.namespace(name, watched_node)))
            proc.kill()
        else:
            assert proc.wait(timeout=up_timeout_s) == 0
            once_up()
    finally:
        proc.kill()
        proc.wait()
    result = _clean_cli(name)
    assert result.returncode == 0, result.stderr
    _nothing_left(name)


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

    def kill_the_emulator() -> None:
        assert name in list_links()
        if backend == "userspace":
            pid = Link.attach(name).state.emulator_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)

    _kill_link_up_then_clean(
        name,
        "rtt=20ms",
        backend,
        when=when,
        watched_node="client",
        up_timeout_s=60,
        once_up=kill_the_emulator,
    )


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
    other = "ab51"
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
    assert not clean.is_emulator(os.getpid(), "ab50")


@pytest.mark.root
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("when", ["namespaces", "done"])
def test_sigkill_of_a_multi_link_run_then_clean(name: str, backend: str, when: str) -> None:
    """A dual topology with an exit (three nodes, three edges): kill ``link up``
    while it builds, or every edge emulator once it is up; clean leaves nothing."""
    spec = "topology=dual;link=rtt=20ms,rate=20mbit;link_b=rtt=40ms;exit_link=rtt=2ms"

    def kill_every_edge_emulator() -> None:
        link = Link.attach(name)
        assert set(link.nodes) == {"client", "exit", "server"}
        if backend == "userspace":
            pids = [link.show()["edges"][e]["emulator_pid"] for e in link.topology.edge_names]
            assert len(set(pids)) == 3 and all(clean.is_emulator(p, name) for p in pids)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

    _kill_link_up_then_clean(
        name,
        spec,
        backend,
        when=when,
        watched_node="exit",
        up_timeout_s=90,
        once_up=kill_every_edge_emulator,
    )
    assert not list((names.STATE_DIR / "links").glob(f"{name}.*"))
    assert not [ns for ns in topology.list_namespaces() if ns.startswith(f"tb-{name}-")]


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def _state_of(link: str) -> Iterator[Path]:
    """The state file of ``link``, its folder made, removed afterwards (no namespaces: what
    the tests read is in the file alone)."""
    path = names.state_file(link)
    path.parent.mkdir(parents=True, exist_ok=True)
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def fake_state() -> Iterator[Path]:
    """A state file of link ab62 (ownership is read from the file alone)."""
    yield from _state_of("ab62")


@pytest.mark.root
def test_a_live_owner_keeps_its_link_and_a_dead_one_does_not(fake_state: Path) -> None:
    owner = _sleeper()
    try:
        fake_state.write_text(
            json.dumps(
                {
                    "owner_pid": owner.pid,
                    "owner_start_ticks": clean.start_ticks(owner.pid),
                    "persistent": False,
                }
            )
        )
        reason = clean.link_in_use("ab62")
        assert reason is not None and str(owner.pid) in reason
        report = clean.clean("ab62")
        assert report.skipped and "ab62" in report.skipped[0] and fake_state.exists()
        # a recycled pid (another start time) is no owner
        fake_state.write_text(
            json.dumps({"owner_pid": owner.pid, "owner_start_ticks": 1, "persistent": False})
        )
        assert clean.link_in_use("ab62") is None
    finally:
        owner.kill()
        owner.wait()
    fake_state.write_text(json.dumps({"owner_pid": owner.pid, "persistent": False}))
    assert clean.link_in_use("ab62") is None
    assert clean.clean("ab62").skipped == [] and not fake_state.exists()


@pytest.mark.root
def test_link_up_is_left_alone_while_its_emulator_runs() -> None:
    link = "ab61"
    clean.clean(link)
    up = subprocess.run(
        [*TESTBED, "link", "up", link, "rtt=10ms", "--backend", "userspace"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        assert up.returncode == 0, up.stderr
        result = _clean_cli(link)
        assert result.returncode == 0, result.stderr
        assert "skipped" in result.stdout and "emulator" in result.stdout
        assert link in list_links() and Link.attach(link).lost() is None
    finally:
        down = subprocess.run(
            [*TESTBED, "link", "down", link], capture_output=True, text=True, timeout=60
        )
    assert down.returncode == 0, down.stderr
    _nothing_left(link)


@pytest.mark.root
def test_a_link_taken_down_under_its_user_is_reported_lost() -> None:
    name = "ab63"
    clean.clean(name)
    with Link.up(name, "rtt=10ms", backend="userspace") as link:
        assert link.lost() is None
        # another process, as a careless clean would
        result = _clean_cli(name)
        assert "skipped" in result.stdout and link.lost() is None  # its owner lives: kept
        pid = link.state.emulator_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the path goes away under the link's user
        assert _wait_for(lambda: link.lost() is not None)
        reason = link.lost()
        assert reason is not None and ("gone" in reason or "exited" in reason)
    _nothing_left(name)


FOREIGN_LINK = "hos7"
"""A link name no test or run uses: the fake emulators below are named after it."""
FAKE_EMULATOR = "import time\nopen('/proc/self/comm', 'w').write('tb-hos7-emu')\ntime.sleep(120)\n"
"""What looks like an emulator of link hos7 to ``clean``: its thread name, and the module
and a namespace in its command line."""


CLEAN_INSIDE = (
    "from netem import clean\n"
    f"found = [p for p in clean.find_processes(None) if clean.is_emulator(p, {FOREIGN_LINK!r})]\n"
    f"report = clean.clean({FOREIGN_LINK!r})\n"
    "print('found:', *found, 'killed:', *report.killed)\n"
)
"""Run in a new PID and mount namespace that still sees the host's /proc: what its clean
would take for the fake emulator's link (nothing)."""


def _fake_emulator(*prefix: str) -> tuple[subprocess.Popen, int]:
    """A fake emulator (under ``prefix``, e.g. ``unshare``): the process and the fake's pid."""
    argv = [sys.executable, "-c", FAKE_EMULATOR, clean.EMULATOR_MODULE, f"tb-{FOREIGN_LINK}-client"]
    proc = subprocess.Popen([*prefix, *argv], start_new_session=True)
    fake: list[int] = []

    def named() -> bool:
        if not prefix:
            fake[:] = [proc.pid]
        else:  # unshare --fork: the fake is its child
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            with contextlib.suppress(OSError):
                fake[:] = [int(c) for c in children.read_text().split()]
        return bool(fake) and clean._comm(fake[0]) == f"tb-{FOREIGN_LINK}-emu"

    assert _wait_for(named, timeout_s=20), "the fake emulator did not start"
    return proc, fake[0]


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.mark.root
def test_a_process_of_another_pid_and_mount_namespace_is_not_cleaned() -> None:
    """As a container's emulator seen from the host: a link ``clean`` does not know, in a
    PID and mount namespace of its own. Its twin in this environment is cleaned."""
    proc, fake = _fake_emulator("unshare", "--fork", "--pid", "--mount")
    try:
        assert clean.is_emulator(fake, FOREIGN_LINK)  # it does look like one
        assert not clean.in_this_environment(fake)
        assert fake not in clean.find_processes(None)
        assert FOREIGN_LINK not in clean.known_links()
        report = clean.clean(FOREIGN_LINK)
        assert fake not in report.killed and report.ok, report
        assert clean._alive(fake) and clean.leftovers(FOREIGN_LINK) == []
    finally:
        _stop(proc)
    twin, pid = _fake_emulator()
    try:
        # the other way round: a clean in a PID and mount namespace of its own (a container
        # that even sees this /proc) does not take this environment's emulator for its own
        inside = subprocess.run(
            ["unshare", "--fork", "--pid", "--mount", sys.executable, "-c", CLEAN_INSIDE],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert inside.returncode == 0, inside.stderr
        assert inside.stdout.split() == ["found:", "killed:"], inside.stdout
        assert clean._alive(pid)
        assert clean.in_this_environment(pid) and FOREIGN_LINK in clean.known_links()
        assert pid in clean.clean(FOREIGN_LINK).killed
        assert twin.wait(timeout=10) is not None
    finally:
        if twin.poll() is None:
            _stop(twin)


# -- reaping what SIGKILLed runs left (issue 26) ------------------------------------------

OWNER = (
    "import sys, time\n"
    "from netem.link import Link\n"
    "Link.up(sys.argv[1], 'rtt=10ms', backend='userspace')\n"
    "print('up', flush=True)\n"
    "time.sleep(120)\n"
)
"""A process that owns a link (as ``testbed run`` does) and would hold it for two minutes."""


def _owner_of(link: str) -> subprocess.Popen[str]:
    """Start a link-owning process and return once its link is up."""
    proc = subprocess.Popen([sys.executable, "-c", OWNER, link], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready and proc.stdout.readline().strip() == "up", "the owner did not bring its link up"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=10)


def _orphan_traces(link: str) -> tuple[list[str], int | None]:
    """The namespaces of ``link`` that exist, and its emulator's pid if it runs."""
    spaces = [ns for ns in topology.link_namespaces(link) if topology.namespace_exists(ns)]
    try:
        state = Link.attach(link).state
    except Exception:
        return spaces, None
    pid = state.emulator_pid
    return spaces, pid if pid is not None and clean._alive(pid) else None


@pytest.mark.root
def test_links_of_sigkilled_owners_are_reaped_by_the_next_link_up() -> None:
    """Three owners of one name killed in turn, each next one brings the same name up (the
    re-run with the same --link-name); another link's up reaps the last."""
    name, other = "hos1", "hos2"
    clean.clean(name)
    clean.clean(other)
    previous: int | None = None
    try:
        for _ in range(3):
            owner = _owner_of(name)  # reaps the previous owner's link, then makes its own
            if previous is not None:
                assert not clean._alive(previous), "the orphan's emulator still runs"
            _kill(owner)
            spaces, previous = _orphan_traces(name)
            assert spaces and previous is not None  # SIGKILL leaves the link: an orphan
            assert clean.orphan_reason(name) is not None
        with Link.up(other, "rtt=10ms", backend="userspace") as link:
            reaped = link.state.extra.get("reaped", [])
            assert any(line.startswith(f"link {name} ") for line in reaped), reaped
            assert _orphan_traces(name) == ([], None)
            assert not clean._alive(previous)
            assert name not in list_links()
    finally:
        clean.clean(name)
        clean.clean(other)


@pytest.mark.root
def test_a_live_owner_and_a_link_left_up_on_purpose_are_not_reaped() -> None:
    alive, kept, new = "hos3", "hos4", "hos5"
    for link in (alive, kept, new):
        clean.clean(link, force=True)
    owner = _owner_of(alive)
    try:
        up = subprocess.run(
            [*TESTBED, "link", "up", kept, "rtt=10ms", "--backend", "userspace"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert up.returncode == 0, up.stderr
        assert clean.orphan_reason(alive) is None and clean.orphan_reason(kept) is None
        with Link.up(new, "rtt=10ms", backend="userspace") as link:
            assert not [r for r in link.state.extra.get("reaped", []) if "hos" in r]
            for held in (alive, kept):
                spaces, emulator = _orphan_traces(held)
                assert spaces and emulator is not None, held
    finally:
        _kill(owner)
        for link in (alive, kept, new):
            clean.clean(link, force=True)


@pytest.fixture
def orphan_state() -> Iterator[Path]:
    """A state file of link hos6 (orphans are told from the file alone)."""
    yield from _state_of("hos6")


@pytest.mark.root
@pytest.mark.parametrize(
    ("state", "orphan"),
    [
        ({"persistent": False}, True),  # a run's link, owner gone
        ({"persistent": True, "extra": {"status": "starting"}}, True),  # link up killed early
        ({"persistent": True, "extra": {"status": "up"}}, False),  # left up on purpose
        ({"persistent": False, "owner_start_ticks": 1}, True),  # a recycled pid
        ({"persistent": False, "owner_pid": "1"}, False),  # not an owner this can check
    ],
)
def test_orphans_are_links_whose_owner_is_gone(
    orphan_state: Path, state: dict, orphan: bool
) -> None:
    dead = _sleeper()
    dead.kill()
    dead.wait()
    orphan_state.write_text(json.dumps({"owner_pid": dead.pid, **state}))
    assert (clean.orphan_reason("hos6") is not None) is orphan
    live = _sleeper()
    try:
        fields = {"owner_pid": live.pid, "owner_start_ticks": clean.start_ticks(live.pid)}
        orphan_state.write_text(json.dumps({**state, **fields}))
        assert clean.orphan_reason("hos6") is None  # whatever else it says: its owner lives
    finally:
        live.kill()
        live.wait()
    orphan_state.write_text('{"owner_pid": ')  # being written: not known to be an orphan
    assert clean.orphan_reason("hos6") is None
