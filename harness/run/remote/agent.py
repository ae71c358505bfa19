"""The remote host's side of the control channel (issue 18): ``testbed remote agent``.

The harness starts it over ssh (``ssh HOST testbed remote agent``) and talks to it with
:mod:`tbcore.control` lines on its stdin and stdout. It answers clock exchanges on its
CLOCK_MONOTONIC (harness.run.remote.clocksync) and holds a lease: when no request renews the
lease in time, or stdin ends (the ssh session is gone, the local harness was killed), the agent
exits. Nothing is left behind by a lost connection: that is the lease's job.

:class:`AgentCore` is sans-I/O (a line and a clock in, a reply out); :func:`serve` is the
blocking stdio loop around it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import select
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from harness import __version__
from harness.run.stacks import (
    SERVER_START_TIMEOUT_S,
    SERVER_STOP_TIMEOUT_S,
    popen_endpoint,
    testbed_argv,
    wait_listening,
)
from netem import probe, sysctl
from netem.readiness import wait_for_marker
from tbcore.control import (
    DIR_PLACEHOLDER,
    MAX_LINE_BYTES,
    REFUSED_OP,
    ControlReply,
    ControlRequest,
    encode,
    parse_line,
)
from tbcore.errors import SpecError, clip
from tbcore.processes import stop_process

LEASE_DEFAULT_S = 30.0
"""How long the agent lives without hearing from the harness, unless a lease says."""
TOOLS = ("iperf3",)
"""Programs the agent runs for the harness (the path probe's TCP transfers)."""
RUN_DIR_PREFIX = "tb-remote-"
"""A served run's directory there: ``$TMPDIR/tb-remote-XXXXXXXX``, removed when fetched
(testbed remote fetch) or when the agent exits."""
IPERF_PORT = 5201
"""iperf3's own default port, for an iperf_start without one."""
IPERF_EXIT_WAIT_S = 5.0
"""A one-test iperf3 server exits a moment after its test's client returns; a new server on
its port waits this long for it to let the port go (and then stops it)."""
LEASE_MIN_S = 1.0
LEASE_MAX_S = 3600.0
"""A lease is between these: a shorter one could not be renewed over a long path, a longer
one would keep an orphan listening for an hour."""
READ_BYTES = 65536


class Resources(Protocol):
    """What the agent starts on its host for the harness; all of it ends with the agent."""

    def session_addr(self) -> str | None:
        """The local address the ssh session arrived at (None outside ssh)."""

    def start_echo(self, addr: str, port: int) -> int:
        """The path probe's UDP echo on ``addr:port``; the port bound."""

    def stop_echo(self) -> int:
        """Stop the echo; the probes it received."""

    def start_iperf(self, addr: str, port: int) -> int:
        """An iperf3 server for one test on ``addr:port``; the port."""

    def serve(self, args: list[str], files: dict[str, str], dirs: list[str], expect: int) -> str:
        """``testbed serve ARGS`` in a new run directory, once it listens; the directory."""

    def stop(self, run_dir: str) -> tuple[int, str]:
        """Stop the server of ``run_dir``: its exit status and last stderr line."""

    def sysctl(self, name: str, value: str | None) -> str:
        """Sysctl ``name``'s value before; set it to ``value`` unless None."""

    def close(self) -> None:
        """Stop everything started."""


@dataclass
class AgentCore:
    """The agent's state: its lease, what it started, and whether it was told to stop."""

    clock: Callable[[], float]
    lease_s: float = LEASE_DEFAULT_S
    resources: Resources | None = None
    deadline_s: float = field(init=False)
    done: bool = field(init=False, default=False)
    refused: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.lease_s = check_lease(self.lease_s)
        self.deadline_s = self.clock() + self.lease_s

    def expired(self) -> bool:
        return self.clock() >= self.deadline_s

    def remaining_s(self) -> float:
        return max(0.0, self.deadline_s - self.clock())

    def handle(self, line: bytes, received_s: float) -> ControlReply:
        """The reply to one line that arrived at ``received_s``. Any line the harness sends
        renews the lease; a bad one is answered with its one-line error and counted."""
        self.deadline_s = received_s + self.lease_s
        try:
            request: ControlRequest = parse_line(line, ControlRequest)
        except SpecError as err:
            self.refused += 1
            return ControlReply(seq=-1, op=REFUSED_OP, error=str(err))
        try:
            return self._answer(request, received_s)
        except (SpecError, OSError) as err:
            self.refused += 1
            return ControlReply(seq=request.seq, op=request.op, error=clip(str(err)))

    def _answer(self, request: ControlRequest, received_s: float) -> ControlReply:
        if request.op == "lease":
            if request.lease_s is None:
                raise SpecError("control_request.lease_s", "missing for op lease")
            self.lease_s = check_lease(request.lease_s)
            self.deadline_s = received_s + self.lease_s
            return ControlReply(seq=request.seq, op="lease", lease_s=self.lease_s)
        if request.op == "bye":
            self.done = True
            return ControlReply(seq=request.seq, op="bye")
        if request.op in ("echo_start", "echo_stop", "iperf_start"):
            return self._resource(request)
        if request.op in ("serve", "stop", "sysctl"):
            return self._server(request)
        if request.op == "hello":
            return ControlReply(
                seq=request.seq,
                op="hello",
                version=__version__,
                uid=os.geteuid(),
                kernel=platform.release(),
                pid=os.getpid(),
                missing=[tool for tool in TOOLS if shutil.which(tool) is None],
                addr=self.resources.session_addr() if self.resources else None,
                lease_s=self.lease_s,
            )
        return ControlReply(
            seq=request.seq, op="time", received_s=received_s, replied_s=self.clock()
        )

    def _resource(self, request: ControlRequest) -> ControlReply:
        if self.resources is None:
            raise SpecError("control_request.op", f"{request.op}: this agent starts nothing")
        if request.op == "echo_stop":
            count = self.resources.stop_echo()
            return ControlReply(seq=request.seq, op=request.op, count=count)
        addr = request.addr or self.resources.session_addr()
        if addr is None:
            raise SpecError("control_request.addr", "missing, and no ssh session to take it from")
        start = (
            self.resources.start_echo if request.op == "echo_start" else self.resources.start_iperf
        )
        port = start(addr, request.port or 0)
        return ControlReply(seq=request.seq, op=request.op, addr=addr, port=port)

    def _server(self, request: ControlRequest) -> ControlReply:
        if self.resources is None:
            raise SpecError("control_request.op", f"{request.op}: this agent starts nothing")
        seq, op = request.seq, request.op
        if op == "sysctl":
            if request.name is None:
                raise SpecError("control_request.name", "missing for op sysctl")
            return ControlReply(
                seq=seq, op=op, value=self.resources.sysctl(request.name, request.value)
            )
        if op == "stop":
            if request.dir is None:
                raise SpecError("control_request.dir", "missing for op stop")
            status, tail = self.resources.stop(request.dir)
            return ControlReply(seq=seq, op=op, dir=request.dir, status=status, value=tail)
        if not request.args:
            raise SpecError("control_request.args", "missing for op serve")
        run_dir = self.resources.serve(
            request.args, request.files or {}, request.dirs or [], request.expect or 1
        )
        return ControlReply(seq=seq, op=op, dir=run_dir)


def check_lease(value: float) -> float:
    if not LEASE_MIN_S <= value <= LEASE_MAX_S:
        raise SpecError("lease_s", f"{value!r} s, expected {LEASE_MIN_S:g} to {LEASE_MAX_S:g}")
    return float(value)


def serve(core: AgentCore, stdin_fd: int = 0, stdout_fd: int = 1) -> str:
    """Answer lines on ``stdin_fd`` until bye, the end of stdin or the lease's end; return
    which of the three ended it. A line longer than any request is answered with its error
    once and dropped up to its end, so memory stays bounded."""
    pending = b""
    dropping = False
    while True:
        ready, _, _ = select.select([stdin_fd], [], [], core.remaining_s())
        if not ready:
            return "lease"
        chunk = os.read(stdin_fd, READ_BYTES)
        received_s = core.clock()
        if not chunk:
            return "eof"
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if dropping:
                dropping = False
                continue
            os.write(stdout_fd, encode(core.handle(line, received_s)))
            if core.done:
                return "bye"
        if len(pending) > MAX_LINE_BYTES and not dropping:
            os.write(stdout_fd, encode(core.handle(pending, received_s)))
            dropping = True
        if dropping:
            pending = b""


class HostResources:
    """The real :class:`Resources`: a :class:`netem.probe.Echo` thread and iperf3 servers
    as children of the agent, all stopped by :meth:`close`."""

    def __init__(self) -> None:
        self.echo: probe.Echo | None = None
        self.children: list[subprocess.Popen[bytes]] = []
        self.servers: dict[str, subprocess.Popen[bytes]] = {}
        self.iperf_by_port: dict[int, subprocess.Popen[bytes]] = {}
        self.run_dirs: list[Path] = []
        self.sysctls_before: dict[str, str] = {}

    def session_addr(self) -> str | None:
        # sshd sets SSH_CONNECTION to "client_ip client_port server_ip server_port"
        words = os.environ.get("SSH_CONNECTION", "").split()
        return words[2] if len(words) == 4 else None

    def start_echo(self, addr: str, port: int) -> int:
        if self.echo is not None:
            raise SpecError("control_request.op", "echo_start: an echo already runs")
        self.echo = probe.Echo(addr, port).__enter__()
        return int(self.echo.sock.getsockname()[1])

    def stop_echo(self) -> int:
        if self.echo is None:
            raise SpecError("control_request.op", "echo_stop: no echo runs")
        echo, self.echo = self.echo, None
        echo.close()
        return echo.received

    def start_iperf(self, addr: str, port: int) -> int:
        self.children = [c for c in self.children if c.poll() is None]
        port = port or IPERF_PORT
        previous = self.iperf_by_port.pop(port, None)
        if previous is not None and previous.poll() is None:
            try:  # the last test's server, still closing: its port is not free yet
                previous.wait(IPERF_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                stop_process(previous, 5.0)
        child = subprocess.Popen(
            ["iperf3", "-s", "-1", "--forceflush", "-B", addr, "-p", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.children.append(child)
        self.iperf_by_port[port] = child
        assert child.stdout is not None
        ready = wait_for_marker(child.stdout.fileno(), b"listening", time.monotonic() + 10)
        if not ready.ready:
            stop_process(child, 5.0)
            raise SpecError(
                "iperf", f"iperf3 did not listen: {clip(ready.seen.decode(errors='replace'))}"
            )
        return port

    def serve(self, args: list[str], files: dict[str, str], dirs: list[str], expect: int) -> str:
        run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
        self.run_dirs.append(run_dir)
        for name, text in files.items():
            (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / name).write_text(text, encoding="utf-8")
        for name in dirs:
            (run_dir / name).mkdir(parents=True, exist_ok=True)
        argv = [*testbed_argv(), "serve", *(a.replace(DIR_PLACEHOLDER, str(run_dir)) for a in args)]
        with open(run_dir / "server.stderr", "wb") as err:
            server = popen_endpoint(None, argv, stdout=subprocess.PIPE, stderr=err)
        try:
            wait_listening(server, expect, SERVER_START_TIMEOUT_S)
        except BaseException:
            stop_process(server, SERVER_STOP_TIMEOUT_S)
            raise
        self.servers[str(run_dir)] = server
        return str(run_dir)

    def stop(self, run_dir: str) -> tuple[int, str]:
        server = self.servers.pop(run_dir, None)
        if server is None:
            raise SpecError("control_request.dir", f"{run_dir!r}: no server of this agent")
        status = stop_process(server, SERVER_STOP_TIMEOUT_S)
        lines = (Path(run_dir) / "server.stderr").read_text(errors="replace").strip().splitlines()
        return (0 if status is None else status), clip(lines[-1] if lines else "")

    def sysctl(self, name: str, value: str | None) -> str:
        before = sysctl.read(None, name)
        if value is not None:
            self.sysctls_before.setdefault(name, before)
            sysctl.write(None, name, value)
        return before

    def close(self) -> None:
        """Stop the echo, the servers and iperf3; put the sysctls back; remove the run
        directories the harness did not fetch."""
        if self.echo is not None:
            self.echo.close()
            self.echo = None
        for child in [*self.children, *self.servers.values()]:
            stop_process(child, 5.0)
        self.children, self.servers = [], {}
        for name, value in self.sysctls_before.items():
            with contextlib.suppress(SpecError, OSError):
                sysctl.write(None, name, value)
        self.sysctls_before = {}
        for run_dir in self.run_dirs:
            shutil.rmtree(run_dir, ignore_errors=True)
        self.run_dirs = []


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(lease_s: float = LEASE_DEFAULT_S) -> int:
    """The agent on this host's stdio until bye, EOF, the lease's end or SIGTERM/SIGHUP;
    whatever it started is stopped on every one of those ways out."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    resources = HostResources()
    try:
        serve(AgentCore(clock=time.monotonic, lease_s=lease_s, resources=resources))
    finally:
        resources.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def fetchable(run_dir: str) -> Path:
    """A served run's directory on this host, or a one-line refusal: only the agent's own
    (``$TMPDIR/tb-remote-*``), so that fetch never reads or removes anything else."""
    path = Path(run_dir)
    if (
        not path.is_absolute()
        or path.resolve().parent != Path(tempfile.gettempdir()).resolve()
        or not path.name.startswith(RUN_DIR_PREFIX)
        or not path.is_dir()
    ):
        raise SpecError("dir", f"{run_dir!r} is not a served run's directory here")
    return path


def fetch(run_dir: str, out: BinaryIO) -> None:
    """Write the directory's files to ``out`` as a tar stream, then remove it."""
    path = fetchable(run_dir)
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for item in sorted(path.rglob("*")):
            tar.add(item, arcname=str(item.relative_to(path)), recursive=False)
    shutil.rmtree(path)
