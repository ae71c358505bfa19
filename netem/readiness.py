"""Waiting for a child process to say on a pipe that it is ready.

Used for the userspace emulator (``ready`` on its ``--ready-fd`` pipe) and for tcpdump
(``listening on`` on its stderr): read what the child writes until the marker appears, the
child closes its end (EOF) or the deadline passes; the caller decides what each outcome means.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass

READ_CHUNK_BYTES = 4096


@dataclass(frozen=True)
class Readiness:
    """What :func:`wait_for_marker` saw."""

    ready: bool
    """The marker appeared."""
    eof: bool
    """The child closed its end first (exited, most likely)."""
    seen: bytes
    """Everything read, for the error message."""


def wait_for_marker(fd: int, marker: bytes, deadline: float) -> Readiness:
    """Read ``fd`` until ``marker`` appears, EOF, or ``deadline`` (``time.monotonic()``)."""
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, READ_CHUNK_BYTES)
        if not chunk:
            return Readiness(ready=False, eof=True, seen=seen)
        seen += chunk
        if marker in seen:
            return Readiness(ready=True, eof=False, seen=seen)
    return Readiness(ready=False, eof=False, seen=seen)
