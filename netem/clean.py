"""Remove whatever the testbed left: processes, namespaces, devices, state files.

Works from the traces alone, so it also cleans up after a SIGKILL of anything: pid files
and link state files, a scan of /proc for emulator processes (command line with
``netem.emulator``, or a ``tb-...-emu``/``tb-...-dn`` thread name), every process whose network
namespace is one of the namespaces being removed (an iperf3 or tcpdump left inside would keep
the namespace, and its devices, alive after the unmount), then the namespaces themselves,
``tb-`` devices in the host namespace, and the files in ``/run/testbed/links``.

Only this environment's processes are candidates (issue 26): a process in another PID or
mount namespace (a container's, seen from the host, or the host's, from a container that
shares its PID namespace) is not this environment's leftover, whatever its name, so a host's
``clean`` leaves a container's runs alone and the other way round. The one exception to the
mount namespace is a process inside a network namespace that this environment's
``/run/netns`` names (``ip netns exec`` gives what it starts a mount namespace of its own).

With a name, only that link's traces are touched (tests use this so that they never touch
another test's link); without, everything named ``tb-`` that no living process owns.

Reaping (issue 26): :func:`reaped`, which ``Link.up`` (so ``testbed run``, ``--resume``
and ``testbed link up``) enters before it creates anything, removes every link whose state
file names an owner that is gone (pid and start time) and that is not a link left up on
purpose; under a lock, so that no two processes reap and re-create one name at once.

Ownership (issue 17): a link whose state file names a live owner (the ``testbed run`` or
test that brought it up, checked by pid and start time), or a link left up on purpose by
``testbed link up`` whose emulator still runs, is in use: ``clean`` skips it and says why,
unless ``force``. What a SIGKILLed run left (owner gone) is removed as before, and so is a
kernel-backend link (no process of its own). ``link down`` always removes its link.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyroute2 import NetlinkError

from netem import names, topology
from netem.backends.userspace import process_alive

TERM_TIMEOUT_S = 5.0
"""How long processes get after SIGTERM before SIGKILL."""

EMULATOR_MODULE = "netem.emulator"
STATE_SUFFIXES = (".json", ".sock", ".pid", ".log")


@dataclass
class CleanReport:
    """What :func:`clean` removed, and what it could not."""

    killed: list[int] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)
    """What each killed process was (``pid comm: command line``), read before the kill."""
    namespaces: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)
    """Anything still there afterwards (namespaces, live processes), one description each."""
    skipped: list[str] = field(default_factory=list)
    """Links left alone because a living process owns them (``link NAME: reason``)."""

    def merge(self, other: CleanReport) -> None:
        for name in ("killed", "processes", "namespaces", "devices", "files", "remaining"):
            getattr(self, name).extend(getattr(other, name))

    @property
    def ok(self) -> bool:
        return not self.remaining


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ns_inode(pid: int | str, kind: str) -> int | None:
    """The inode of a process's namespace of ``kind`` (``net``, ``pid``, ``mnt``)."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None
    match = re.fullmatch(kind + r":\[(\d+)\]", link)
    return int(match.group(1)) if match else None


def _net_inode(pid: int) -> int | None:
    return _ns_inode(pid, "net")


def in_this_environment(pid: int, netns_inodes: set[int] | frozenset[int] = frozenset()) -> bool:
    """Whether ``pid`` runs in this process's PID namespace and in its mount namespace, or
    (same PID namespace) inside one of ``netns_inodes``, the network namespaces this mount
    namespace's ``/run/netns`` names. Unreadable namespaces (the process is gone) are not."""
    pid_ns = _ns_inode(pid, "pid")
    if pid_ns is None or pid_ns != _ns_inode("self", "pid"):
        return False
    mnt_ns = _ns_inode(pid, "mnt")
    if mnt_ns is not None and mnt_ns == _ns_inode("self", "mnt"):
        return True
    return bool(netns_inodes) and _net_inode(pid) in netns_inodes


def _emulators(link: str | None) -> list[int]:
    """This environment's emulator processes (of ``link``, when given)."""
    return [pid for pid in _pids() if is_emulator(pid, link) and in_this_environment(pid)]


def describe(pid: int) -> str:
    return f"{pid} {_comm(pid)}: {' '.join(_cmdline(pid))[:200]}"


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _alive(pid: int) -> bool:
    """Running and not a zombie (our own exited children are reaped on the way)."""
    return process_alive(pid)


def is_emulator(pid: int, link: str | None) -> bool:
    """Whether ``pid`` is an emulator process (of link ``link``, when given)."""
    comm = _comm(pid)
    if link is None:
        if re.fullmatch(r"tb-[a-z0-9]+-(emu|dn)", comm):
            return True
        argv = _cmdline(pid)
        return EMULATOR_MODULE in argv and any(a.startswith(names.PREFIX) for a in argv)
    if comm in (f"tb-{link}-emu", f"tb-{link}-dn"):
        return True
    argv = _cmdline(pid)
    if EMULATOR_MODULE not in argv:
        return False
    # an edge emulator of a multi-link topology may join two nodes other than the client
    named = any(a == "--name" and b == link for a, b in itertools.pairwise(argv))
    return named or names.namespace(link, "client") in argv


def _pid_file_pids(link: str | None) -> list[int]:
    directory = names.STATE_DIR / "links"
    stems = [link] if link is not None else [p.stem for p in directory.glob("*")]
    if link is not None:  # the edge emulators of a multi-link topology: NAME.EDGE.pid
        stems += [p.name[: -len(".pid")] for p in directory.glob(f"{link}.*.pid")]
    pids: list[int] = []
    for stem in stems:
        with contextlib.suppress(OSError, ValueError):
            pids.append(int((directory / f"{stem}.pid").read_text().strip()))
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            pid = json.loads((directory / f"{stem}.json").read_text())["emulator_pid"]
            if pid:
                pids.append(int(pid))
    # a pid from a file is trusted only if it still is an emulator (pids get recycled)
    return [pid for pid in pids if is_emulator(pid, link if link is not None else None)]


def find_processes(link: str | None) -> list[int]:
    """Emulators of ``link`` (or of all links), and every process inside its namespaces."""
    me = os.getpid()
    if link is None:
        namespaces = topology.list_namespaces()
    else:
        namespaces = [ns for ns in topology.link_namespaces(link) if topology.namespace_exists(ns)]
    inodes = set()
    for ns in namespaces:
        with contextlib.suppress(OSError):
            inodes.add(os.stat(f"/run/netns/{ns}").st_ino)
    found = set(_pid_file_pids(link))
    for pid in _pids():
        if pid == me:
            continue
        if is_emulator(pid, link) or (inodes and _net_inode(pid) in inodes):
            found.add(pid)
    found.discard(me)
    # a zombie is already dead: its parent (init, once ours died) has only to reap it
    return sorted(pid for pid in found if _alive(pid) and in_this_environment(pid, inodes))


def kill_processes(pids: list[int], timeout_s: float = TERM_TIMEOUT_S) -> list[int]:
    """SIGTERM, then SIGKILL what is left after ``timeout_s``; returns the pids signalled."""
    signalled = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in signalled) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in signalled:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in signalled) and time.monotonic() < deadline:
        time.sleep(0.02)
    return signalled


def _host_devices(prefix: str) -> list[str]:
    with topology.ipr() as ip:
        return [
            link.get_attr("IFLA_IFNAME")
            for link in ip.get_links()
            if (link.get_attr("IFLA_IFNAME") or "").startswith(prefix)
        ]


def _delete_host_device(device: str) -> bool:
    with topology.ipr() as ip:
        found = ip.link_lookup(ifname=device)
        if not found:
            return False
        ip.link("del", index=found[0])
    return True


def start_ticks(pid: int) -> int | None:
    """A process's start time (/proc/PID/stat field 22), to tell it from a recycled pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rpartition(")")[2].split()[19])


def link_in_use(link: str) -> str | None:
    """Why ``link`` belongs to a living process (one line), or None when nothing living
    owns it. The calling process's own links are never "in use" (it may clean them)."""
    try:
        data = json.loads(names.state_file(link).read_text())
    except (OSError, ValueError):
        return None  # no state file, or unreadable: nothing can claim the link
    if not isinstance(data, dict):
        return None
    pid = data.get("owner_pid")
    if isinstance(pid, int) and pid > 0 and pid != os.getpid():
        ticks = data.get("owner_start_ticks")
        if process_alive(pid, ticks if isinstance(ticks, int) else None):
            return f"owned by live process {describe(pid)}"
    # state files written before the flag existed count as persistent: the safe side
    if not data.get("persistent", True):
        return None
    emulator = data.get("emulator_pid")
    if isinstance(emulator, int) and emulator > 0:
        ticks = data.get("emulator_start_ticks")
        if process_alive(emulator, ticks if isinstance(ticks, int) else None):
            return f"left up by testbed link up; its emulator {emulator} runs"
    # a kernel-backend link left up belongs to no process: what no living process owns goes
    return None


REAP_LOCK = "reap.lock"
"""In :data:`netem.names.STATE_DIR` (not in ``links/``, which a full clean empties): held
while orphans are reaped and a new link claims its name."""


def orphan_reason(link: str) -> str | None:
    """Why ``link`` is what a dead run left (one line), or None when it is not, or not
    certainly: its state file names an owner that is gone (pid and start time), and it is
    not a link ``testbed link up`` finished and left up on purpose (its owner exits by
    design). A state file that does not parse (being written, or foreign) is no orphan."""
    try:
        data = json.loads(names.state_file(link).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("owner_pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return None
    ticks = data.get("owner_start_ticks")
    if process_alive(pid, ticks if isinstance(ticks, int) else None):
        return None
    extra = data.get("extra")
    status = extra.get("status") if isinstance(extra, dict) else None
    if data.get("persistent", True) and status == "up":
        return None
    return f"its owner, pid {pid}, is gone"


def _orphans() -> dict[str, str]:
    directory = names.STATE_DIR / "links"
    if not directory.is_dir():
        return {}
    found = {}
    for path in sorted(directory.glob("*.json")):
        if names.LINK_NAME_RE.fullmatch(path.stem):
            reason = orphan_reason(path.stem)
            if reason is not None:
                found[path.stem] = reason
    return found


@contextlib.contextmanager
def reaped() -> Iterator[list[str]]:
    """Hold the reap lock, remove every orphan link (:func:`orphan_reason`) and yield one
    line per link removed; a new link claimed inside the block cannot be taken for an orphan
    by another process reaping at the same time."""
    names.STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(names.STATE_DIR / REAP_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        lines = []
        for link, reason in _orphans().items():
            report = _clean(link)
            lines.append(
                f"link {link} ({reason}): removed {len(report.namespaces)} namespaces, "
                f"{len(report.killed)} processes"
                + (f"; still there: {', '.join(report.remaining)}" if report.remaining else "")
            )
        yield lines
    finally:
        os.close(fd)  # releases the lock


LINK_OF_NAME = re.compile(r"tb-([a-z0-9]{1,10})-")
"""The link a namespace, device or thread name belongs to (``tb-NAME-...``)."""


def known_links() -> set[str]:
    """Every link name with a trace: state files, namespaces, emulator threads, devices."""
    found: set[str] = set()
    directory = names.STATE_DIR / "links"
    if directory.is_dir():
        for path in directory.iterdir():
            stem = path.name.split(".", 1)[0]
            if names.LINK_NAME_RE.fullmatch(stem):
                found.add(stem)
    traces = list(topology.list_namespaces())
    traces += [_comm(pid) for pid in _emulators(None)]
    with contextlib.suppress(OSError):
        traces += _host_devices(names.PREFIX)
    for trace in traces:
        match = LINK_OF_NAME.match(trace)
        if match:
            found.add(match.group(1))
    return found


def clean(link: str | None = None, *, force: bool = False) -> CleanReport:
    """Remove the traces of ``link`` (or of every ``tb-`` thing when None) that no living
    process owns; with ``force``, in use or not. Skipped links are listed in the report."""
    if link is not None:
        names.check_link_name(link)
        reason = None if force else link_in_use(link)
        if reason is not None:
            return CleanReport(skipped=[f"link {link}: {reason}"])
        return _clean(link)
    in_use = {} if force else {n: r for n in sorted(known_links()) if (r := link_in_use(n))}
    if not in_use:
        return _clean(None)
    report = CleanReport(skipped=[f"link {n}: {r}" for n, r in in_use.items()])
    for name in sorted(known_links() - in_use.keys()):
        report.merge(_clean(name))
    return report


def _clean(link: str | None) -> CleanReport:
    report = CleanReport()
    found = find_processes(link)
    report.processes = [describe(pid) for pid in found]
    report.killed = kill_processes(found)
    targets = topology.list_namespaces() if link is None else topology.link_namespaces(link)
    for ns in targets:
        if topology.delete_namespace(ns):
            report.namespaces.append(ns)
    prefix = names.PREFIX if link is None else f"{names.PREFIX}{link}-"
    with contextlib.suppress(OSError):
        for device in _host_devices(prefix):
            try:
                if _delete_host_device(device):
                    report.devices.append(device)
            except (NetlinkError, OSError) as err:  # still there: the report says so
                report.remaining.append(f"device {device}: {err}")
    directory = names.STATE_DIR / "links"
    if directory.is_dir():
        if link is None:
            paths = [p for p in directory.iterdir() if p.is_file() or p.is_socket()]
        else:
            paths = [directory / f"{link}{suffix}" for suffix in STATE_SUFFIXES]
            paths += list(directory.glob(f"{link}.json.tmp*"))
            # the per-edge files of a multi-link topology: NAME.EDGE.sock/.pid/.log
            paths += [p for p in directory.glob(f"{link}.*.*") if p.suffix in STATE_SUFFIXES]
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                report.files.append(str(path))
    report.remaining = leftovers(link)
    return report


def leftovers(link: str | None = None) -> list[str]:
    """What of ``link`` (or of any link) still exists: namespaces, processes, host devices."""
    out: list[str] = []
    if link is None:
        out += [f"namespace {ns}" for ns in topology.list_namespaces()]
    else:
        out += [
            f"namespace {ns}"
            for ns in topology.link_namespaces(link)
            if topology.namespace_exists(ns)
        ]
    out += [f"process {pid} ({_comm(pid)})" for pid in _emulators(link) if _alive(pid)]
    prefix = names.PREFIX if link is None else f"{names.PREFIX}{link}-"
    with contextlib.suppress(OSError):
        out += [f"device {d}" for d in _host_devices(prefix)]
    return out
