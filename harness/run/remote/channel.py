"""The harness's side of a remote host (issue 18): the control channel to its agent over the
system's OpenSSH client, the clock exchanges, and ``testbed remote check``.

ssh runs with the user's own keys and config, in batch mode (never a password prompt), and
contacts only the named host. The agent on the other side (harness.run.remote.agent) lives on
a lease the channel renews; when the channel dies the agent's stdin ends and it exits.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.run.remote import agent as remote_agent
from harness.run.remote import clocksync
from harness.run.remote.clocksync import ClockOffset, Exchange
from netem import nsexec
from tbcore.control import ControlReply, ControlRequest, encode, parse_line
from tbcore.errors import HostUnreachable, SpecError, clip

SSH_OPTIONS = (
    "-T",  # no terminal: the channel is a pipe of control lines
    "-o", "BatchMode=yes",  # keys only: a password prompt would hang a run
    "-o", "ConnectTimeout=10",
    "-o", "ServerAliveInterval=5",  # a dead path ends the session in 15 s, not hours
    "-o", "ServerAliveCountMax=3",
)  # fmt: skip
DEFAULT_REMOTE_COMMAND = "testbed"
"""The testbed command on the remote host (``--remote-command`` for another path, such as
a clone's ``.venv/bin/testbed``)."""
REPLY_TIMEOUT_S = 20.0
"""How long a control request waits for its reply (ssh's own connection time included)."""
CLOCK_EXCHANGES = 16
"""Exchanges per clock estimate: the minimum round trip of 16 is within a few percent of
the path's floor on a quiet path (RFC 5905's clock filter keeps 8)."""
EXIT_SSH_FAILED = 255
"""ssh's exit status when it could not connect or authenticate (ssh(1), EXIT STATUS)."""
EXIT_NOT_FOUND = 127
"""A shell's status for a command it cannot find."""

_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")
_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.%A-Za-z]+\]")
_PORT = re.compile(r"[0-9]{1,5}")


def check_target(target: str) -> str:
    """A host as ssh takes it (``host``, ``user@host``, ``ssh://user@host:port``), never an
    option and never shell syntax: a user before ``@`` when there is one, a host name, an IPv4
    address or a bracketed IPv6 address, and a port only in the ``ssh://`` form."""
    url = target.startswith("ssh://")
    rest = target.removeprefix("ssh://")
    user, at, host = rest.rpartition("@")
    port = ""
    if url and not host.endswith("]") and ":" in host:
        host, _, port = host.rpartition(":")
    bad = (
        (at and not _USER.fullmatch(user))
        or not _HOST.fullmatch(host)
        or (port and (not _PORT.fullmatch(port) or not 0 < int(port) < 65536))
    )
    if bad:
        raise SpecError("remote", f"{target!r} is not a host name or user@host")
    return target


def check_command(command: str) -> tuple[str, ...]:
    """The remote testbed command as words (no shell syntax: it is run as given)."""
    words = tuple(command.split())
    if not words or any(not re.fullmatch(r"[A-Za-z0-9_./=+-]+", w) for w in words):
        raise SpecError("remote_command", f"{command!r}: words of letters, digits, _ . / = + -")
    return words


def ssh_argv(target: str, remote: Sequence[str], ssh_config: str | None = None) -> list[str]:
    """ssh's command line; ``ssh_config``: a config file in place of the user's (ssh -F)."""
    config = ["-F", ssh_config] if ssh_config else []
    return ["ssh", *config, *SSH_OPTIONS, check_target(target), "--", *remote]


class ChannelError(HostUnreachable):
    """The control channel failed: ``str(err)`` is one line naming the host and why."""


@dataclass
class ControlChannel:
    """A running agent, reached through ``argv`` (ssh, or the agent itself on this host)."""

    argv: list[str]
    name: str
    netns: str | None = None
    """The network namespace ssh runs in (None: the harness's own)."""
    process: subprocess.Popen[bytes] | None = None
    seq: int = 0
    _buffer: bytes = b""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def open(self) -> ControlChannel:
        pipes: dict[str, Any] = {
            "stdin": subprocess.PIPE,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "start_new_session": True,  # Ctrl-C reaches the harness, which says bye
        }
        self.process = nsexec.popen(self.netns, self.argv, **pipes)  # None: this namespace
        return self

    def __enter__(self) -> ControlChannel:
        return self.open()

    def request(self, op: str, **fields: Any) -> tuple[ControlReply, float, float]:
        """Send one request (``fields``: its optional fields, tbcore.control); its reply and
        the local send and return times. One request at a time (a keep-alive thread shares
        the channel)."""
        with self._lock:
            return self._request(op, **fields)

    def _request(self, op: str, **fields: Any) -> tuple[ControlReply, float, float]:
        assert self.process is not None and self.process.stdin is not None
        self.seq += 1
        line = encode(ControlRequest(seq=self.seq, op=op, **fields))
        sent_s = time.monotonic()
        try:
            self.process.stdin.write(line)
            self.process.stdin.flush()
        except BrokenPipeError:
            raise ChannelError(self._failure()) from None
        deadline_s = time.monotonic() + REPLY_TIMEOUT_S
        while True:  # a request cut short (Ctrl-C while it waited) left its reply behind
            reply: ControlReply = parse_line(self._read_line(deadline_s), ControlReply)
            if reply.seq >= self.seq:
                break
        returned_s = time.monotonic()
        if reply.seq != self.seq:
            raise ChannelError(f"{self.name}: reply {reply.seq} to request {self.seq}")
        if reply.error:
            raise ChannelError(f"{self.name}: the agent refused {op}: {reply.error}")
        return reply, sent_s, returned_s

    def _read_line(self, deadline_s: float) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left_s = deadline_s - time.monotonic()
                if left_s <= 0 or not selector.select(left_s):
                    raise ChannelError(f"{self.name}: no reply within {REPLY_TIMEOUT_S:g} s")
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ChannelError(self._failure())
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _failure(self) -> str:
        """Why the channel ended, in one line, from the exit status and stderr."""
        assert self.process is not None
        try:
            status = self.process.wait(timeout=REPLY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"{self.name}: the channel closed its output"
        err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
        last = clip(err.strip().splitlines()[-1]) if err.strip() else "no message"
        if status == EXIT_SSH_FAILED:
            return f"{self.name}: ssh could not connect: {last}"
        if status == EXIT_NOT_FOUND:
            return f"{self.name}: command not found there ({' '.join(self.argv[-3:])}): {last}"
        return f"{self.name}: the agent exited with status {status}: {last}"

    def close(self, *_exc: object) -> None:
        """Say bye (the agent stops what it started) and wait for the channel to end."""
        if self.process is None:
            return
        try:
            if self.process.poll() is None:
                self.request("bye")
        except (ChannelError, SpecError, OSError):
            pass
        finally:
            for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
                if pipe is not None:
                    pipe.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    __exit__ = close

    def exchange(self) -> Exchange:
        reply, sent_s, returned_s = self.request("time")
        if reply.received_s is None or reply.replied_s is None:
            raise ChannelError(f"{self.name}: a time reply without its stamps")
        return Exchange(sent_s, reply.received_s, reply.replied_s, returned_s)

    def clock_offset(self, exchanges: int = CLOCK_EXCHANGES) -> ClockOffset:
        """The remote clock's offset from this one (harness.run.remote.clocksync), from
        ``exchanges`` exchanges back to back."""
        return clocksync.estimate([self.exchange() for _ in range(exchanges)])


@dataclass(frozen=True)
class RemoteHost:
    """How to reach a server host: ssh's target, the testbed command there, the agent's
    lease, and an ssh config file (None: the user's own)."""

    target: str
    command: str = DEFAULT_REMOTE_COMMAND
    lease_s: float = remote_agent.LEASE_DEFAULT_S
    ssh_config: str | None = None

    def __post_init__(self) -> None:
        check_target(self.target)
        check_command(self.command)
        remote_agent.check_lease(self.lease_s)
        if self.ssh_config is not None and not os.path.isfile(self.ssh_config):
            raise SpecError("ssh_config", f"{self.ssh_config!r} is not a file")

    def argv(self, *args: str) -> list[str]:
        """ssh's command line for ``testbed ARGS`` there."""
        return ssh_argv(self.target, [*check_command(self.command), *args], self.ssh_config)

    def agent_argv(self) -> list[str]:
        return self.argv("remote", "agent", "--lease", f"{self.lease_s:g}")

    def fetch(self, run_dir: str, into: Path, netns: str | None = None) -> list[str]:
        """Bring a served run's files into ``into`` (testbed remote fetch there: a tar
        stream, the remote copy removed); the names written. Members are extracted with
        tarfile's ``data`` filter: no absolute paths, links out or devices."""
        argv = self.argv("remote", "fetch", run_dir)
        kwargs: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        child = nsexec.popen(netns, argv, **kwargs)
        assert child.stdout is not None
        try:
            with tarfile.open(fileobj=child.stdout, mode="r|") as tar:
                names = []
                for member in tar:
                    tar.extract(member, into, filter="data")
                    names.append(member.name)
        except tarfile.TarError as err:
            child.kill()
            raise ChannelError(f"{self.target}: fetch of {run_dir}: {err}") from None
        finally:
            stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
            child.wait(timeout=REPLY_TIMEOUT_S)
        if child.returncode != 0:
            raise ChannelError(
                f"{self.target}: fetch of {run_dir}: {clip(stderr) or child.returncode}"
            )
        return names

    def channel(self, netns: str | None = None) -> ControlChannel:
        return ControlChannel(self.agent_argv(), name=self.target, netns=netns)


def check(channel: ControlChannel) -> list[str]:
    """What the remote side lacks, one line each (empty: ready)."""
    if shutil.which(channel.argv[0]) is None:
        return [f"{channel.argv[0]}: not found here (Debian: apt install openssh-client)"]
    problems = []
    try:
        with channel:
            hello, _, _ = channel.request("hello")
    except (ChannelError, SpecError, OSError) as err:
        return [clip(str(err))]
    if hello.version != __version__:
        problems.append(
            f"{channel.name}: testbed {hello.version} there, {__version__} here: install the "
            "same version there (harness/install.sh)"
        )
    for tool in hello.missing or []:
        problems.append(
            f"{channel.name}: {tool} is not installed there (harness/install.sh installs it)"
        )
    if hello.uid != 0:
        problems.append(
            f"{channel.name}: the agent runs as uid {hello.uid}; the server side needs root "
            "(ssh root@host, or a key for root)"
        )
    return problems
