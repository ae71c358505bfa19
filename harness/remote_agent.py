"""The remote host's side of the control channel (issue 18): ``testbed remote agent``.

The harness starts it over ssh (``ssh HOST testbed remote agent``) and talks to it with
:mod:`tbcore.control` lines on its stdin and stdout. It answers clock exchanges on its
CLOCK_MONOTONIC (harness.clocksync) and holds a lease: when no request renews the lease in
time, or stdin ends (the ssh session is gone, the local harness was killed), the agent
exits. Nothing is left behind by a lost connection: that is the lease's job.

:class:`AgentCore` is sans-I/O (a line and a clock in, a reply out); :func:`serve` is the
blocking stdio loop around it.
"""

from __future__ import annotations

import os
import platform
import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness import __version__
from tbcore.control import (
    MAX_LINE_BYTES,
    REFUSED_OP,
    ControlReply,
    ControlRequest,
    encode,
    parse_line,
)
from tbcore.errors import SpecError

LEASE_DEFAULT_S = 30.0
"""How long the agent lives without hearing from the harness, unless a lease says."""
LEASE_MIN_S = 1.0
LEASE_MAX_S = 3600.0
"""A lease is between these: a shorter one could not be renewed over a long path, a longer
one would keep an orphan listening for an hour."""
READ_BYTES = 65536


@dataclass
class AgentCore:
    """The agent's state: its lease and whether it was told to stop."""

    clock: Callable[[], float]
    lease_s: float = LEASE_DEFAULT_S
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
        except SpecError as err:
            self.refused += 1
            return ControlReply(seq=request.seq, op=request.op, error=str(err))

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
        if request.op == "hello":
            return ControlReply(
                seq=request.seq,
                op="hello",
                version=__version__,
                uid=os.geteuid(),
                kernel=platform.release(),
                lease_s=self.lease_s,
            )
        return ControlReply(
            seq=request.seq, op="time", received_s=received_s, replied_s=self.clock()
        )


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


def main(lease_s: float = LEASE_DEFAULT_S) -> int:
    core = AgentCore(clock=time.monotonic, lease_s=lease_s)
    serve(core)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
