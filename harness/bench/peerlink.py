"""``testbed bench link --compare mahimahi[,netem]``: the emulators side by side, on this host.

The plan and the arithmetic are :mod:`harness.bench.peers`; this module brings each emulator
up for one case, runs the workload through it and reads its CPU.

* **ours**: a :class:`netem.link.Link` on the userspace backend (its default packet path).
* **mahimahi**: ``mm-delay D mm-link UP DOWN`` with a constant trace of the rate (or the
  trace case's trace) in both directions and drop-tail queues of the case's bytes, started in
  a namespace of the testbed (``tb-NAME-mm``, with an address of 198.18.0.0/15 on its
  loopback for the server side) as the unprivileged user ``nobody`` (Mahimahi refuses root;
  its tools must be setuid root, as its package and ../shared/peers' build script make
  them). Its own nested namespaces (10.0.0.0/8 inside, NAT to the outer one) live inside
  that namespace: nothing reaches the host's. Each Mahimahi shell checks that IP forwarding
  is on in its namespace; a namespace made by another inherits the initial namespace's
  settings unless ``net.core.devconf_inherit_init_net`` is 3 (inherit from the namespace it
  is made in), so that sysctl is 3 while Mahimahi runs and put back after. The command
  inside waits for a go file while the client side's namespace gets the same socket
  sysctls as ours (``ip netns attach``, then :func:`netem.sysctl.link_sysctls`).
* **netem**: a :class:`netem.link.Link` on the kernel backend, where this kernel has
  sch_netem; otherwise the netem comparison (ours beside netem, alternated the same way)
  runs inside the stock-kernel QEMU guest (:mod:`harness.bench.guest`), its rows marked
  ``@guest`` and divided by ours in the guest: under QEMU's software CPU, its rates and
  CPU times compare within the guest only.

Both sides' workload commands run as ``nobody`` for every emulator, so that privileges
differ nowhere. CPU: the emulator's processes (``ours``: the emulator daemon; Mahimahi: every
``mm-*`` process under the shell, all threads), user + system time from /proc/PID/stat over
the measured window. What that holds, and what Linux lets be separated: a TUN ``write()``
hands the packet to the receiving stack, whose softirq work then mostly runs in the writer's
own context (when it re-enables bottom halves) and is charged to the writer's system time,
for both userspace emulators alike; on a kernel that samples CPU time per tick (this one:
CONFIG_TICK_CPU_ACCOUNTING, no IRQ_TIME_ACCOUNTING), a tick taken in softirq goes both to the
task that was running and to /proc/stat's ``softirq``. No interface says which task's softirq
time it was, so the host's softirq time over the same window is reported beside the
emulator's CPU (``softirq_cores``), overlapping it, never subtracted; netem has no process and
shows there only.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from harness.bench.guest import STAGE, guest_path, run_in_guest
from harness.bench.peers import (
    DEFAULT_TRACE,
    GUEST_SUFFIX,
    ONE_WAY_DELAY_S,
    UDP_PAYLOAD_BYTES,
    PeerCase,
    PeerConfig,
    PeerRun,
    delivered_ip_bps,
    fit_trace,
    plan_cases,
    schedule,
    trace_case,
)
from harness.bench.udpblast import Sink
from netem import names, nsexec, sysctl, topology
from netem.emulator.options import EmulatorOptions
from netem.link import Link
from netem.linkspec import parse_link
from netem.probe import Echo
from netem.trace import load as load_trace
from netem.trace import resolve_path
from netem.tracegen import constant_trace
from tbcore import procfs
from tbcore.errors import SpecError

SCHEMA_VERSION = 1
"""Version of the comparison's JSON (bump on an incompatible change)."""
MAHIMAHI_TOOLS = ("mm-delay", "mm-link")
UNPRIVILEGED_USER = "nobody"
DEVCONF_SYSCTL = Path("/proc/sys/net/core/devconf_inherit_init_net")
DEVCONF_INHERIT_CURRENT = "3"
"""net.core.devconf_inherit_init_net = 3: a new namespace inherits the settings of the one it
is made in (Documentation/admin-guide/sysctl/net.rst)."""
GUEST_RESULT = "peers-netem.json"
GUEST_TIMEOUT_S = 5400.0
"""The guest part's limit: under QEMU's software CPU every slot is slower than here."""
SERVER_ADDR = "198.18.9.1"
"""The server side's address in Mahimahi's outer namespace (on its loopback)."""
IPERF_PORT = 5203
PROBE_PORT = 7208
SINK_PORT = 7209
SETUP_TIMEOUT_S = 15.0
GO_POLL_S = 0.02
CONSTANT_TRACE_S = 1.0
"""A constant rate for mm-link: one second of opportunities, repeated (1 ms grain)."""


class Session(Protocol):
    """One emulator, configured for one case."""

    emulator: str
    server_ns: str
    server_addr: str
    python: list[str]
    """The argv prefix of the client side's Python commands (:func:`inner_python`)."""

    def client(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` on the client side as the unprivileged user."""
        ...

    def cpu_s(self) -> float | None:
        """The emulator's own CPU seconds so far (None: it has no process)."""
        ...


def endpoint_sysctls(case: PeerCase) -> dict[str, str]:
    """What every endpoint namespace of every emulator gets for ``case``: the link's socket
    sysctls (buffers of twice the BDP). The congestion control is the namespaces' default,
    the host's (a child namespace may not default to one the host does not allow, and the
    unprivileged client may not set one on its socket): the same for every emulator."""
    return sysctl.link_sysctls(parse_link(case.ours_link()))


REPO_ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
"""Debian's own interpreter (python3): outside any user's home, runnable by every user."""
CLIENT_MODULES = (
    "netem/__init__.py",
    "netem/nsexec.py",
    "netem/probe.py",
    "tbcore/__init__.py",
    "tbcore/errors.py",
    "tbcore/stopping.py",
    "harness/__init__.py",
    "harness/bench/__init__.py",
    "harness/bench/udpblast.py",
)
"""What the client side runs as the unprivileged user (the probe's sender, the UDP sender):
standard library only, closed under its own imports (tests/test_bench_peerlink.py)."""


def client_tree(work: Path) -> Path:
    """A copy of :data:`CLIENT_MODULES` under ``work`` that any user can read, whatever the
    permissions of the repository's own folder (a clone under root's home, say)."""
    tree = work / "client"
    for name in CLIENT_MODULES:
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / name, target)
    for path in [tree, *tree.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tree


def inner_python(tree: Path) -> list[str]:
    """The interpreter the client side's Python commands run under: the system's ``python3``
    (else the PATH's), which an unprivileged user can run (a virtual environment under a
    private home may not be), on the modules of :func:`client_tree`."""
    python = SYSTEM_PYTHON if os.access(SYSTEM_PYTHON, os.X_OK) else shutil.which("python3")
    if python is None:
        raise SpecError("compare", "no python3 on the PATH for the unprivileged side")
    return ["env", f"PYTHONPATH={tree}", python]


def check_inner_python(tree: Path) -> None:
    """Refuse in one line when the unprivileged user cannot run the client side's modules."""
    code = "import netem.probe, harness.bench.udpblast"
    argv = [*unprivileged(), *inner_python(tree), "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SpecError(
            "compare",
            f"user {UNPRIVILEGED_USER} cannot run the client side's modules in {tree} with "
            f"python3: {last}",
        )


def unprivileged() -> list[str]:
    """The argv prefix that runs a command as :data:`UNPRIVILEGED_USER`."""
    user = pwd.getpwnam(UNPRIVILEGED_USER)
    return [
        "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--clear-groups",
    ]


# --- ours and netem -------------------------------------------------------------------------


@dataclass
class LinkSession:
    """The testbed's link (userspace: ours; kernel: netem)."""

    emulator: str
    link: Link
    python: list[str] = field(default_factory=list)

    @property
    def server_ns(self) -> str:
        return self.link.server_ns

    @property
    def server_addr(self) -> str:
        return self.link.server_addr

    def client(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        return nsexec.popen(self.link.client_ns, [*unprivileged(), *argv], **kwargs)

    def cpu_s(self) -> float | None:
        pid = self.link.state.emulator_pid
        return None if pid is None else procfs.process_cpu_s(pid)


@contextlib.contextmanager
def link_session(
    emulator: str, name: str, case: PeerCase, options: EmulatorOptions | None = None
) -> Iterator[LinkSession]:
    """The case's link on the userspace backend (ours, with ``options``) or the kernel's."""
    backend = "userspace" if emulator == "ours" else "netem"
    spec = parse_link(case.ours_link())
    with Link.up(
        name, spec, backend=backend, emulator=options if backend == "userspace" else None
    ) as link:
        yield LinkSession(emulator, link)


def netem_here() -> tuple[bool, str]:
    """Whether this kernel has sch_netem (the kernel backend's own probe)."""
    from netem.backends.kernel import probe_netem

    return probe_netem()


# --- Mahimahi -------------------------------------------------------------------------------


def find_mahimahi(bin_dir: str | None) -> dict[str, str]:
    """``mm-delay`` and ``mm-link`` from ``bin_dir`` (``--mahimahi-bin``) or the PATH, checked
    to be setuid root (Mahimahi needs it to make its namespaces as an ordinary user)."""
    tools = {}
    for tool in MAHIMAHI_TOOLS:
        path = os.path.join(bin_dir, tool) if bin_dir is not None else shutil.which(tool) or ""
        where = f"in {bin_dir}" if bin_dir is not None else "on the PATH"
        if not path or not os.access(path, os.X_OK):
            raise SpecError(
                "mahimahi_bin",
                f"no {tool} {where}: Mahimahi is not shipped; build it (docs/measurements.md, "
                '"The emulator beside its peers") and give --mahimahi-bin DIR',
            )
        info = os.stat(path)
        if info.st_uid != 0 or not info.st_mode & stat.S_ISUID:
            raise SpecError(
                "mahimahi_bin",
                f"{path} is not setuid root: Mahimahi needs it (chown root; chmod 4755)",
            )
        tools[tool] = path
    return tools


@contextlib.contextmanager
def devconf_inherit_current() -> Iterator[None]:
    """``net.core.devconf_inherit_init_net`` at 3 inside the block, its old value after."""
    try:
        before = DEVCONF_SYSCTL.read_text().strip()
    except FileNotFoundError:
        raise SpecError(
            "compare",
            "this kernel has no net.core.devconf_inherit_init_net: Mahimahi's nested shells "
            "would need IP forwarding on in the host's own namespace, which the testbed does "
            "not change",
        ) from None
    DEVCONF_SYSCTL.write_text(DEVCONF_INHERIT_CURRENT)
    try:
        yield
    finally:
        DEVCONF_SYSCTL.write_text(before)


@dataclass
class MahimahiHost:
    """The testbed's namespace that Mahimahi runs in, for the whole comparison."""

    tools: dict[str, str]
    ns: str
    work: Path
    traces: dict[float, Path] = field(default_factory=dict)

    def constant_trace(self, rate_bps: float) -> Path:
        """The constant trace of ``rate_bps`` (written once, readable by the user)."""
        if rate_bps not in self.traces:
            path = self.work / f"const-{rate_bps:.0f}.trace"
            path.write_text(constant_trace(rate_bps, CONSTANT_TRACE_S))
            path.chmod(0o644)
            self.traces[rate_bps] = path
        return self.traces[rate_bps]


@contextlib.contextmanager
def mahimahi_host(name: str, bin_dir: str | None) -> Iterator[MahimahiHost]:
    """Mahimahi's outer namespace (IP forwarding on, the server's address on its loopback),
    a scratch directory the unprivileged user can read, and the sysctl that lets the nested
    shells inherit the forwarding."""
    tools = find_mahimahi(bin_dir)
    ns = f"{names.PREFIX}{name}-mm"
    topology.create_namespace(ns)
    work = Path(tempfile.mkdtemp(prefix="tb-peers-"))
    try:
        work.chmod(0o755)
        topology.add_address(ns, "lo", SERVER_ADDR, 32)
        sysctl.write(ns, "net.ipv4.ip_forward", "1")
        with devconf_inherit_current():
            yield MahimahiHost(tools=tools, ns=ns, work=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        topology.delete_namespace(ns)


def mahimahi_argv(host: MahimahiHost, case: PeerCase, inner: Sequence[str]) -> list[str]:
    """``mm-delay D mm-link UP DOWN --*-queue=droptail ... -- inner``."""
    if case.kind == "trace":
        assert case.trace_path is not None
        trace = case.trace_path
    else:
        trace = str(host.constant_trace(case.link_rate_bps))
    queue = f"bytes={case.queue_bytes}"
    return [
        host.tools["mm-delay"],
        f"{ONE_WAY_DELAY_S * 1e3:.0f}",
        host.tools["mm-link"],
        trace,
        trace,
        "--uplink-queue=droptail",
        f"--uplink-queue-args={queue}",
        "--downlink-queue=droptail",
        f"--downlink-queue-args={queue}",
        "--",
        *inner,
    ]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class MahimahiSession:
    """One case through Mahimahi (its shell is started by :meth:`client`)."""

    host: MahimahiHost
    case: PeerCase
    name: str
    emulator: str = "mahimahi"
    server_addr: str = SERVER_ADDR
    shell: subprocess.Popen[bytes] | None = None
    mm_pids: list[int] = field(default_factory=list)
    python: list[str] = field(default_factory=list)

    @property
    def server_ns(self) -> str:
        return self.host.ns

    def client(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        go = self.host.work / f"go-{time.monotonic_ns()}"
        marker = f"tb-peers-wait-{go.name}"
        inner = [
            "sh",
            "-c",
            f'while [ ! -e {go} ]; do sleep {GO_POLL_S}; done; exec "$@"',
            marker,
            *argv,
        ]
        self.shell = nsexec.popen(
            self.host.ns, [*unprivileged(), *mahimahi_argv(self.host, self.case, inner)], **kwargs
        )
        waiter = self._waiter(marker)
        inner_ns = f"{names.PREFIX}{self.name}-mmi"
        subprocess.run(["ip", "netns", "attach", inner_ns, str(waiter)], check=True)
        try:
            sysctl.apply_link_sysctls(inner_ns, endpoint_sysctls(self.case))
        finally:
            subprocess.run(["ip", "netns", "delete", inner_ns], check=False)
        self.mm_pids = [
            p for p in procfs.descendant_pids(self.shell.pid) if _comm(p).startswith("mm-")
        ]
        self.mm_pids.insert(0, self.shell.pid)
        go.touch()
        return self.shell

    def _waiter(self, marker: str) -> int:
        """The pid of the shell waiting for its go file, inside Mahimahi's innermost namespace."""
        assert self.shell is not None
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.shell.poll() is not None:
                _, err = self.shell.communicate()
                tail = (err or b"").decode(errors="replace").strip().splitlines()[:1]
                raise OSError(f"mahimahi exited during set-up: {' '.join(tail) or 'no message'}")
            for pid in procfs.descendant_pids(self.shell.pid):
                with contextlib.suppress(OSError):
                    if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                        return pid
            time.sleep(GO_POLL_S)
        raise OSError(f"mahimahi's shell did not start within {SETUP_TIMEOUT_S:g} s")

    def cpu_s(self) -> float | None:
        times = [procfs.process_cpu_s(pid) for pid in self.mm_pids]
        return sum(t for t in times if t is not None)

    def close(self) -> None:
        if self.shell is not None and self.shell.poll() is None:
            self.shell.terminate()
            try:
                self.shell.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.shell.kill()
                self.shell.wait()


@contextlib.contextmanager
def mahimahi_session(host: MahimahiHost, name: str, case: PeerCase) -> Iterator[MahimahiSession]:
    session = MahimahiSession(host, case, name)
    sysctl.apply_link_sysctls(host.ns, endpoint_sysctls(case))
    try:
        yield session
    finally:
        session.close()


# --- the window's CPU -------------------------------------------------------------------------


@dataclass
class Window:
    """CPU over a measured window: the emulator's, and the host's busy, steal and softirq."""

    started: float
    emulator_s: float | None
    host: procfs.HostCpu

    @classmethod
    def open(cls, session: Session) -> Window:
        return cls(time.monotonic(), session.cpu_s(), procfs.host_cpu())

    def close(self, session: Session) -> dict[str, float | None]:
        wall = time.monotonic() - self.started
        now = session.cpu_s()
        host = procfs.host_cpu() - self.host
        cpu = None if now is None or self.emulator_s is None else (now - self.emulator_s) / wall
        return {
            "window_s": wall,
            "cpu_cores": cpu,
            "softirq_cores": host.softirq_s / wall,
            "host_busy": host.busy_s / host.total_s if host.total_s > 0 else None,
            "host_steal": host.steal_fraction,
        }


# --- the workloads ----------------------------------------------------------------------------


def _finish(proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> bytes:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise OSError(f"{what} did not finish within {timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = (err or b"").decode(errors="replace").strip().splitlines()[:1]
        raise OSError(f"{what} exited {proc.returncode}: {' '.join(tail) or 'no message'}")
    return out


def iperf_argv(session: Session, case: PeerCase, config: PeerConfig) -> list[str]:
    """iperf3's client: the server sends (``-R``) for the measured time after its omit."""
    argv = ["iperf3", "-c", session.server_addr, "-p", str(IPERF_PORT), "-R", "-J"]
    argv += ["-t", f"{config.duration_s:g}", "-O", f"{config.omit_s:g}"]
    if case.kind == "udp":
        argv += ["-u", "-b", f"{case.offered_bps:.0f}", "-l", str(UDP_PAYLOAD_BYTES)]
    return argv


def measure_iperf(session: Session, case: PeerCase, config: PeerConfig) -> dict[str, Any]:
    server = nsexec.popen(
        session.server_ns,
        ["iperf3", "-s", "-1", "-B", session.server_addr, "-p", str(IPERF_PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        client = session.client(
            iperf_argv(session, case, config), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        time.sleep(config.omit_s + 1.0)
        window = Window.open(session)
        time.sleep(max(0.5, config.duration_s - 1.5))
        load = window.close(session)
        out = _finish(client, config.duration_s + config.omit_s + 60, "iperf3")
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait(timeout=10)
    try:
        goodput = float(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    except (ValueError, KeyError, TypeError) as err:
        raise OSError(f"iperf3 gave no receiver result ({err})") from None
    return {
        "goodput_bps": goodput,
        "delivered_bps": delivered_ip_bps(goodput, case.kind),
        **load,
    }


def measure_rtt(session: Session, case: PeerCase, config: PeerConfig) -> dict[str, Any]:
    """The probe's sender on the client side, its echo on the server side: idle round trips."""
    configured_ms = 2 * ONE_WAY_DELAY_S * 1e3
    argv = [*session.python, "-m", "netem.probe", "send", "--addr", "0.0.0.0"]
    argv += ["--to", session.server_addr, "--port", str(PROBE_PORT)]
    argv += ["--count", str(config.probes), "--interval-ms", f"{config.probe_interval_s * 1e3:g}"]
    argv += ["--rtt-ms", f"{configured_ms:g}"]
    with Echo(session.server_addr, PROBE_PORT, session.server_ns):
        sender = session.client(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        window = Window.open(session)
        out = _finish(sender, config.probes * config.probe_interval_s + 30, "the probe")
        load = window.close(session)
    summary = json.loads(out)
    configured_s = configured_ms / 1e3
    p50, p99 = summary.get("rtt_p50_s"), summary.get("rtt_p99_s")
    if p50 is None or p99 is None:
        raise OSError("the probe got no reply")
    return {
        "rtt_err_p50_s": p50 - configured_s,
        "rtt_err_p99_s": p99 - configured_s,
        "probes": summary.get("received"),
        **load,
    }


def measure_trace(session: Session, case: PeerCase, config: PeerConfig) -> dict[str, Any]:
    """UDP above the trace's peak from the client side; arrivals stamped at the server side."""
    assert case.trace_path is not None
    argv = [*session.python, "-m", "harness.bench.udpblast", "--to", session.server_addr]
    argv += ["--port", str(SINK_PORT), "--rate-bps", f"{case.offered_bps:.0f}"]
    argv += ["--duration-s", f"{config.trace_duration_s:g}"]
    with Sink(session.server_addr, SINK_PORT, session.server_ns) as sink:
        sender = session.client(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.0)
        window = Window.open(session)
        time.sleep(max(0.5, config.trace_duration_s - 1.5))
        load = window.close(session)
        _finish(sender, config.trace_duration_s + 30, "the UDP sender")
        time.sleep(2 * ONE_WAY_DELAY_S + 0.3)
    _, parsed = load_trace(case.trace_path, "capacity")
    # the first second fills the queue: the fit starts once the bottleneck is saturated
    start = sink.arrivals_s[0] + 1.0 if sink.arrivals_s else 0.0
    arrivals = [t for t in sink.arrivals_s if t >= start]
    fit = fit_trace(arrivals, list(parsed.stamps_ms))
    window_s = fit.windows * 0.1
    return {
        "delivered_bps": fit.delivered_packets * 1500 * 8 / window_s,
        "trace_delivered_ratio": fit.delivered_ratio,
        "trace_err_p50": fit.err_p50,
        "trace_err_p99": fit.err_p99,
        **load,
    }


MEASURES: dict[str, Callable[[Session, PeerCase, PeerConfig], dict[str, Any]]] = {
    "rtt": measure_rtt,
    "tcp": measure_iperf,
    "udp": measure_iperf,
    "trace": measure_trace,
}


# --- the comparison ---------------------------------------------------------------------------


@dataclass
class Peers:
    """What the comparison brings up once: Mahimahi's namespace, if compared."""

    name: str
    mahimahi: MahimahiHost | None = None
    options: EmulatorOptions | None = None
    """Ours: the packet path's options (``--path`` and the rest), if any."""
    python: list[str] = field(default_factory=list)
    """The client side's Python (:func:`inner_python`), the same for every emulator."""

    @contextlib.contextmanager
    def session(self, emulator: str, case: PeerCase) -> Iterator[Session]:
        with self._session(emulator, case) as session:
            session.python = self.python
            yield session

    @contextlib.contextmanager
    def _session(self, emulator: str, case: PeerCase) -> Iterator[Session]:
        if emulator == "mahimahi":
            assert self.mahimahi is not None
            with mahimahi_session(self.mahimahi, self.name, case) as session:
                yield session
        elif emulator == "ours-gro":
            options = replace(self.options or EmulatorOptions(), gro=True)
            with link_session("ours", f"{self.name}g", case, options) as session:
                session.emulator = emulator
                yield session
        else:
            name = f"{self.name}{emulator[0]}"
            with link_session(emulator, name, case, self.options) as session:
                yield session


def measure_slot(
    peers: Peers, emulator: str, case: PeerCase, config: PeerConfig, round_: int
) -> PeerRun:
    """One case through one emulator; a failure is the slot's record, not the run's end."""
    base = PeerRun(
        round=round_, case=case.name, kind=case.kind, emulator=emulator, rate_bps=case.rate_bps
    )
    try:
        with peers.session(emulator, case) as session:
            values = MEASURES[case.kind](session, case, config)
    except (OSError, RuntimeError, SpecError, subprocess.SubprocessError, ValueError) as err:
        return replace(base, error=f"{type(err).__name__}: {err}".splitlines()[0])
    return replace(base, **values)


def host_description() -> dict[str, Any]:
    """The machine a table was made on."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "loadavg_start": round(os.getloadavg()[0], 2),
    }


def guest_netem() -> bool:
    """Whether netem must be compared in the QEMU guest (this kernel has no sch_netem);
    refused in one line when the repository's VM stage is not there either."""
    present, why = netem_here()
    if present:
        return False
    if not STAGE.exists():
        raise SpecError("compare", f"netem: {why}, and no {STAGE} to run it in a guest")
    return True


def run_compare(
    emulators: Sequence[str],
    config: PeerConfig,
    *,
    name: str = "bench",
    traces: Sequence[str] = (DEFAULT_TRACE,),
    mahimahi_bin: str | None = None,
    emulator: EmulatorOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every slot of the schedule (:func:`harness.bench.peers.schedule`) here; netem, where
    this kernel has none, in the stock-kernel QEMU guest with ours beside it there
    (emulators marked :data:`~harness.bench.peers.GUEST_SUFFIX`). The JSON document."""
    say = progress or (lambda _msg: None)
    in_guest = "netem" in emulators and guest_netem()
    here = [e for e in emulators if not (in_guest and e == "netem")]
    if in_guest and here == [e for e in emulators if e.startswith("ours")]:
        here = []  # no peer left to compare with here: ours runs beside netem in the guest
    doc = measure_here(
        here,
        config,
        name=name,
        traces=traces,
        mahimahi_bin=mahimahi_bin,
        emulator=emulator,
        say=say,
    )
    if in_guest:
        guest = [*(e for e in emulators if e.startswith("ours")), "netem"]
        say(f"netem: not in this kernel; {', '.join(guest)} in the stock-kernel QEMU guest")
        argv = [sys.executable, "-m", "harness.bench.peerlink", "--emulators", ",".join(guest)]
        argv += ["--config", json.dumps(asdict(config)), "--out", guest_path(GUEST_RESULT)]
        argv += [arg for trace in traces for arg in ("--trace", resolve_path(trace))]
        part, host = run_in_guest(argv, GUEST_RESULT, GUEST_TIMEOUT_S)
        doc["guest"] = {**part["host"], **host}
        doc["emulators"] += [e + GUEST_SUFFIX for e in part["emulators"]]
        doc["runs"] += [{**r, "emulator": r["emulator"] + GUEST_SUFFIX} for r in part["runs"]]
    return doc


def measure_here(
    emulators: Sequence[str],
    config: PeerConfig,
    *,
    name: str,
    traces: Sequence[str],
    mahimahi_bin: str | None,
    emulator: EmulatorOptions | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Every slot of the schedule on this host (none for no emulator: the host described)."""
    trace_cases = []
    for trace in traces:
        path = resolve_path(trace)
        _, parsed = load_trace(path, "capacity")
        trace_cases.append(trace_case(path, list(parsed.stamps_ms)))
    cases = plan_cases(config, trace_cases)
    slots = schedule(cases, emulators, config.rounds) if emulators else []
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "host": host_description(),
        "config": asdict(config),
        "emulators": list(emulators),
        "tcp_congestion_control": sysctl.read_host("net.ipv4.tcp_congestion_control"),
        "ours_path": "the userspace emulator, "
        + ("its default packet path" if emulator is None else f"options {emulator}"),
        "runs": [],
    }
    with contextlib.ExitStack() as stack:
        if not slots:
            doc["host"]["loadavg_end"] = doc["host"]["loadavg_start"]
            return doc
        work = Path(tempfile.mkdtemp(prefix="tb-peers-client-"))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        work.chmod(0o755)
        tree = client_tree(work)
        check_inner_python(tree)
        peers = Peers(name, options=emulator, python=inner_python(tree))
        if "mahimahi" in emulators:
            peers.mahimahi = stack.enter_context(mahimahi_host(name, mahimahi_bin))
            doc["mahimahi"] = peers.mahimahi.tools
        for index, slot in enumerate(slots, 1):
            say(f"[{index}/{len(slots)}] round {slot.round}: {slot.case.name} via {slot.emulator}")
            run = measure_slot(peers, slot.emulator, slot.case, config, slot.round)
            if run.error is not None:
                say(f"  failed: {run.error}")
            doc["runs"].append(run.to_dict())
    doc["host"]["loadavg_end"] = round(os.getloadavg()[0], 2)
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.bench.peerlink``: one machine's part (the guest runs it), written
    as JSON to ``--out``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.bench.peerlink")
    parser.add_argument("--emulators", required=True, help="e.g. ours,ours-gro,netem")
    parser.add_argument("--config", required=True, help="PeerConfig as JSON")
    parser.add_argument("--trace", action="append", default=[], help="a capacity trace")
    parser.add_argument("--out", required=True, help="where the JSON goes")
    args = parser.parse_args(argv)
    try:
        raw = json.loads(args.config)
        config = PeerConfig(**{**raw, "rates_bps": tuple(raw["rates_bps"])})
        doc = measure_here(
            args.emulators.split(","),
            config,
            name="guest",
            traces=args.trace,
            mahimahi_bin=None,
            emulator=None,
            say=lambda msg: print(msg, flush=True),
        )
    except (SpecError, ValueError, KeyError, TypeError) as err:
        print(f"peerlink: error: {err}", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
