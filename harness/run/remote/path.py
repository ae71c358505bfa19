"""A real path to a remote server host, in the place of the emulated link (issue 18).

:class:`RemotePath` is what a run uses of a ``netem.link.Link`` (the server's address,
the client's namespace, sysctls, counters, captures) for a server on another host reached
over ssh: the harness keeps one control channel to the agent there for the experiment;
each run's server is started by the agent (:class:`RemoteServer`, as much of
``subprocess.Popen`` as the run needs) and its files come back into the run's directory
when it stops, its event times put on this host's clock by the run's clock offset
(harness.run.remote.clocksync). The path is measured before each block and after the last
(harness.run.remote.pathprobe); the runs' bounds use the latest measurement.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import __version__
from harness.run.remote import clocksync, pathprobe
from harness.run.remote.channel import REPLY_TIMEOUT_S, ChannelError, ControlChannel, RemoteHost
from harness.run.remote.clocksync import ClockOffset
from harness.run.remote.pathprobe import MeasuredPath, ProbePlan
from harness.run.stacks import testbed_argv
from harness.store.files import PROBES_FILE, REMOTE_FILE, RUN_FILE
from harness.store.resultdir import atomic_write_json
from netem import capture, sysctl, topology
from netem.linkspec import LinkSpec
from tbcore import kinds
from tbcore.control import DIR_PLACEHOLDER
from tbcore.errors import SpecError
from tbcore.records import RequestRecord, ServerEvent, read_jsonl

BACKEND = "real"
SERVER_FILES_DIR = "server-files"
"""Where a run's server files land before they are merged into the run's directory."""
CLOCK_EXCHANGES_PER_RUN = 8


@dataclass
class RemoteServer:
    """The agent's server of one run. ``pid`` is None: its CPU is the other host's."""

    path: RemotePath
    remote_dir: str
    run_dir: Path
    offset: ClockOffset
    pid: None = None
    returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, _sig: int) -> None:
        """Stop it there (SIGTERM, then SIGKILL after a grace period: the agent's stop), and
        bring its files here."""
        if self.returncode is not None:
            return
        try:
            reply, _, _ = self.path.channel.request("stop", dir=self.remote_dir)
            self.returncode = reply.status if reply.status is not None else 0
            self.path.bring_back(self)
        except (ChannelError, SpecError, OSError) as err:
            # the run is flagged through the server's status and its stderr, never dropped
            self.returncode = self.returncode if self.returncode not in (None, 0) else 1
            with (self.run_dir / "server.stderr").open("a", encoding="utf-8") as stderr:
                stderr.write(f"remote: {err}\n")


@dataclass
class RemotePath:
    """The link-shaped view of a remote host (see the module's doc)."""

    host: RemoteHost
    channel: ControlChannel
    server_addr: str
    plan: ProbePlan
    client_ns: str | None = None
    log: Callable[[str], None] = lambda _msg: None
    name: str = "remote"
    backend: str = BACKEND
    server_ns: None = None
    measured: MeasuredPath | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    local_sysctls_before: dict[str, str] = field(default_factory=dict)

    @property
    def measured_spec(self) -> LinkSpec:
        if self.measured is None:
            raise SpecError("remote", "the path was not measured before the run")
        return self.measured.link_spec()

    @property
    def spec(self) -> LinkSpec:
        return self.measured_spec

    # --- what a run asks of a link ---------------------------------------------------------

    def lost(self) -> str | None:
        process = self.channel.process
        if process is None or process.poll() is not None:
            return f"the control channel to {self.host.target} ended"
        return None

    def set_spec(self, _spec: LinkSpec, *, edge: str | None = None) -> None:
        """The path is what it is: levels that would change it are refused up front."""

    def set_sysctls(self, values: Mapping[str, str], roles: Sequence[str]) -> None:
        for role in roles:
            for name, value in values.items():
                if role == "server":
                    self.channel.request("sysctl", name=name, value=str(value))
                    continue
                before = sysctl.read(self.client_ns, name)
                self.local_sysctls_before.setdefault(name, before)
                sysctl.write(self.client_ns, name, value)

    def set_route_metrics(self, role: str, **_metrics: Any) -> None:
        raise SpecError(
            "remote", "route metrics (initcwnd, initrwnd, quickack) are not set on a real path"
        )

    def sysctls(self, role: str, names: Sequence[str]) -> dict[str, str]:
        if role == "client":
            return sysctl.read_many(self.client_ns, names)
        return {n: str(self.channel.request("sysctl", name=n)[0].value) for n in names}

    def stats(self) -> None:
        """No emulator: no link counters (the probes measure the path instead)."""
        return None

    def capture(self, run_dir: Path, mode: str = "headers") -> Any:
        """client.pcap: tcpdump here on the interface toward the server, the run's port
        only (not the control channel). The server's vantage is on the other host: a
        download's ACK columns stay empty."""
        point = capture.CapturePoint(
            ns=self.client_ns,
            device=route_device(self.client_ns, self.server_addr),
            path=run_dir / "client.pcap",
            filter=f"host {self.server_addr} and port {run_port(run_dir)}",
        )
        return capture.tcpdump([point], snaplen_bytes=capture.snaplen_of(mode))

    def show(self) -> dict[str, Any]:
        return {
            "backend": BACKEND,
            "host": self.host.target,
            "server_addr": self.server_addr,
            "measured": self.measured.to_dict() if self.measured else None,
            "link": self.measured.link_string() if self.measured else None,
        }

    # --- the server ------------------------------------------------------------------------

    def start_server(self, argv: list[str], run_dir: Path) -> RemoteServer:
        """The run's server there, once it listens, with the clock offset of the run."""
        offset = self.channel.clock_offset(CLOCK_EXCHANGES_PER_RUN)
        args, files, dirs = remote_args(argv, run_dir)
        reply, _, _ = self.channel.request("serve", args=args, files=files, dirs=dirs, expect=1)
        if reply.dir is None:
            raise ChannelError(f"{self.host.target}: serve answered without its directory")
        return RemoteServer(self, reply.dir, run_dir, offset)

    def bring_back(self, server: RemoteServer) -> None:
        """The server's files into the run's directory: events on this clock, the key log
        appended to the client's, qlogs and stderr as they are; remote.json."""
        landing = server.run_dir / SERVER_FILES_DIR
        landing.mkdir(exist_ok=True)
        self.host.fetch(server.remote_dir, landing, self.client_ns)
        merge_server_files(landing, server.run_dir, server.offset)
        atomic_write_json(
            server.run_dir / REMOTE_FILE,
            run_remote_info(self.host.target, server.offset, server.run_dir),
        )

    # --- the path --------------------------------------------------------------------------

    def probe(self, *, after: int | None, before: int | None) -> MeasuredPath:
        """Measure the path once: after block ``after`` (naming how it moved since the
        probe before that block) and before block ``before`` (whose runs' bounds use it)."""
        measured = pathprobe.measure(self.channel, self.server_addr, self.plan, self.client_ns)
        said = [measured.link_string()]
        for block, when in ((after, "after"), (before, "before")):
            if block is None:
                continue
            moved = self._moved(block, measured) if when == "after" else []
            self.probes.append(
                {"block": block, "when": when, "measured": measured.to_dict(),
                 "link": measured.link_string(), "drift": moved}
            )  # fmt: skip
            if moved:
                said.append(f"block {block} moved: {'; '.join(moved)}")
        if before is not None:
            self.measured = measured
        self.log(f"path ({self.host.target}): " + "; ".join(said))
        return measured

    def _moved(self, block: int, measured: MeasuredPath) -> list[str]:
        first = next(
            (p for p in self.probes if p["when"] == "before" and p["block"] == block), None
        )
        if first is None:
            return []
        return pathprobe.drift(MeasuredPath(**_fields(first["measured"])), measured)

    def restore(self) -> None:
        for name, value in self.local_sysctls_before.items():
            with contextlib.suppress(SpecError, OSError):
                sysctl.write(self.client_ns, name, value)
        self.local_sysctls_before = {}


def route_device(ns: str | None, addr: str) -> str:
    """The interface the route to ``addr`` leaves by (pyroute2, RTM_GETROUTE)."""
    with topology.ipr(ns) as ip:
        routes = ip.route("get", dst=addr)
        if not routes:
            raise SpecError("remote_addr", f"{addr}: no route from here")
        index = routes[0].get_attr("RTA_OIF")
        return str(ip.get_links(index)[0].get_attr("IFLA_IFNAME"))


def run_port(run_dir: Path) -> int:
    """The run's server port, from the client's command line in run.json."""
    argv = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))["client_argv"]
    return int(argv[argv.index("--port") + 1])


def _fields(measured: dict[str, Any]) -> dict[str, Any]:
    names = MeasuredPath.__dataclass_fields__
    return {k: v for k, v in measured.items() if k in names}


def remote_args(argv: list[str], run_dir: Path) -> tuple[list[str], dict[str, str], list[str]]:
    """``testbed serve``'s arguments for the other host: this run directory becomes
    ``{dir}``; the settings document goes as a file, the qlog directory as a directory."""
    prefix = [*testbed_argv(), "serve"]
    if argv[: len(prefix)] != prefix:
        raise SpecError("remote", f"not a testbed serve command: {argv[:4]}")
    local = str(run_dir)
    args = [a.replace(local, DIR_PLACEHOLDER) for a in argv[len(prefix) :]]
    files: dict[str, str] = {}
    dirs: list[str] = []
    for arg in argv[len(prefix) :]:
        if not arg.startswith(local + "/"):
            continue
        relative = arg[len(local) + 1 :]
        path = Path(arg)
        if path.is_dir():
            dirs.append(relative)
        elif path.is_file():
            files[relative] = path.read_text(encoding="utf-8")
    return args, files, dirs


def merge_server_files(landing: Path, run_dir: Path, offset: ClockOffset) -> None:
    """Put what the server wrote where a local run's server writes it."""
    for item in sorted(landing.rglob("*")):
        relative = item.relative_to(landing)
        target = run_dir / relative
        if item.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif relative.name == "server.jsonl":
            target.write_text(on_this_clock(item.read_text(encoding="utf-8"), offset))
        elif relative.name == "keys.log":
            with target.open("a", encoding="utf-8") as keys:
                keys.write(item.read_text(encoding="utf-8"))
        elif relative.name != "server-settings.json":
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(item, target)
    shutil.rmtree(landing)


def on_this_clock(text: str, offset: ClockOffset) -> str:
    """The server's event log with every time moved onto this host's clock."""
    lines = []
    for line in text.splitlines():
        if line.strip():
            event = ServerEvent.from_dict(json.loads(line))
            lines.append(replace(event, t=offset.to_client_s(event.t)).to_json())
    return "".join(f"{line}\n" for line in lines)


def run_remote_info(host: str, offset: ClockOffset, run_dir: Path) -> dict[str, Any]:
    """remote.json: the clock offset and its error, and the one-way delays of the first
    measured request across the two clocks, flagged when negative (Pantheon issue 71)."""
    info: dict[str, Any] = {
        "host": host,
        "version": __version__,
        "clock_offset_s": offset.offset_s,
        "clock_error_s": offset.error_s,
        "clock_min_rtt_s": offset.min_rtt_s,
    }
    info.update(one_way_delays(run_dir, offset))
    return info


def _nearest(events: list[ServerEvent], name: str, stream: int | None, t: float) -> float | None:
    """The time of the server's ``name`` event on ``stream`` nearest to ``t``: the same
    stream id recurs on every connection and request of a run."""
    times = [e.t for e in events if e.event == name and e.stream == stream]
    return min(times, key=lambda x: abs(x - t)) if times else None


def one_way_delays(run_dir: Path, offset: ClockOffset) -> dict[str, Any]:
    """Client request first byte -> server's, server response first byte -> client's, for
    the first measured request (the events are already on this clock)."""
    try:
        records = read_jsonl(run_dir / "records.jsonl", RequestRecord)
        events = read_jsonl(run_dir / "server.jsonl", ServerEvent)
    except (OSError, ValueError, SpecError):
        return {}
    measured = next((r for r in records if not r.warmup), None)
    if measured is None or measured.request_first_byte is None:
        return {}
    stream = measured.stream_id
    server_in = _nearest(events, "request_first_byte", stream, measured.request_first_byte)
    client_in = measured.response_first_byte
    server_out = _nearest(events, "response_first_byte", stream, client_in) if client_in else None
    out: dict[str, Any] = {}
    for name, sent, received in (
        ("up", measured.request_first_byte, server_in),
        ("down", server_out, client_in),
    ):
        if sent is None or received is None:
            continue
        delay = clocksync.one_way_delay(sent, received, offset)
        out[f"one_way_{name}_s"] = delay.delay_s
        out[f"one_way_{name}_flag"] = (
            "impossible" if delay.impossible else "negative" if delay.negative else None
        )
    return out


@contextlib.contextmanager
def remote_path(
    host: RemoteHost,
    *,
    addr: str | None = None,
    netns: str | None = None,
    plan: ProbePlan | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> Iterator[RemotePath]:
    """The control channel to ``host`` for an experiment, checked (same testbed version,
    root), with the data address (``addr``, else the one ssh reached); on the way out the
    agent stops what it started and puts its sysctls back, and so do we here."""
    channel = host.channel(netns).open()
    path: RemotePath | None = None
    try:
        hello, _, _ = channel.request("hello")
        if hello.version != __version__:
            raise SpecError(
                "remote",
                f"{host.target} has testbed {hello.version}, this is {__version__}: "
                "install the same version there (harness/install.sh)",
            )
        if hello.uid != 0:
            raise SpecError("remote", f"{host.target}: the agent runs as uid {hello.uid}, not root")
        server_addr = addr or hello.addr
        if server_addr is None:
            raise SpecError(
                "remote_addr", f"{host.target}: no address to reach it on (give --remote-addr)"
            )
        path = RemotePath(host, channel, server_addr, plan or ProbePlan(), netns, log, host.target)
        with keep_alive(channel, host.lease_s):
            yield path
    finally:
        if path is not None:
            path.restore()
        channel.close()


@contextlib.contextmanager
def keep_alive(channel: ControlChannel, lease_s: float) -> Iterator[None]:
    """Renew the agent's lease every third of it while the block runs: a run longer than
    the lease (minutes of HTTP/3 at 14 % loss) sends no request of its own meanwhile."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease_s / 3):
            try:
                channel.request("lease", lease_s=lease_s)
            except (ChannelError, SpecError, OSError):
                return  # the run notices a lost channel itself (RemotePath.lost)

    thread = threading.Thread(target=renew, name="tb-remote-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=REPLY_TIMEOUT_S + 1)


@dataclass(frozen=True)
class RemoteRun:
    """``testbed run --remote``: the host, the address to reach it on (None: the one ssh
    reached), the probe's length."""

    host: RemoteHost
    addr: str | None = None
    plan: ProbePlan = field(default_factory=ProbePlan)

    def open(self, log: Callable[[str], None]) -> contextlib.AbstractContextManager[RemotePath]:
        return remote_path(self.host, addr=self.addr, plan=self.plan, log=log)

    def check(self, spec: Any) -> None:
        check_spec(spec)

    def prober(self, path: RemotePath, result_dir: Path) -> Callable[[int | None], None]:
        """A probe at each change of block (it is the one after the block before and the
        one before the next), and one after the last (``None``); kept in path_probes.json."""
        current: list[int] = []

        def at(block: int | None) -> None:
            if current and block == current[-1]:
                return
            path.probe(after=current[-1] if current else None, before=block)
            if block is not None:
                current.append(block)
            atomic_write_json(result_dir / PROBES_FILE, path.probes)

        return at


def check_spec(spec: Any) -> None:
    """What a real path cannot do, refused in one line before anything starts: levels
    with different links (the path is measured, not set), route metrics, link events."""

    links = {str(level.link) for level in spec.levels}
    if len(links) > 1:
        first, other = sorted(links)[:2]
        raise SpecError(
            "link",
            f"levels set different links ({first!r}, {other!r}): on a real path the link is "
            "measured, not set (run it on an emulated link, or one link for every level)",
        )
    for level in spec.levels:
        if not level.topology.one_link:
            raise SpecError(
                "remote",
                f"level {level.name!r} has a {level.topology.kind} topology: a real path is "
                "one direct path (relay and two paths run on emulated links)",
            )
        settings = level.settings
        if (
            settings.initcwnd is not None
            or settings.initrwnd is not None
            or settings.quickack_route
            or settings.tcp_delack_max_s is not None
        ):
            raise SpecError(
                "remote",
                f"level {level.name!r} sets route metrics or TCP's delayed-ACK ceiling, which a "
                "real path does not take",
            )
        if kinds.workload(settings.workload).link_events(settings):
            raise SpecError(
                "remote",
                f"level {level.name!r} schedules link events, which a real path does not take",
            )
        if settings.cross is not None:
            raise SpecError(
                "remote",
                f"level {level.name!r} sets cross: competing flows run in the testbed's own "
                "namespaces (an emulated link), not on a real path",
            )
