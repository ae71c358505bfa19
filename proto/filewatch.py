"""When files appear in a directory, on CLOCK_MONOTONIC: a thin edge over Linux inotify
(inotify(7), through libc with ctypes: Python 3.11's os module has no inotify).

ngtcp2's example binaries open a connection's qlog file in the same breath as they take
the connection's start time, and write 0 as the qlog's reference time
(proto.qlogseq); the moment the file is created is therefore the connection's start. A
reader blocked on the inotify descriptor wakes when the kernel queues IN_CREATE and stamps
it with ``time.monotonic()``: the stamp is late by that wake-up only (tens of
microseconds for a process at the endpoints' real-time priority), against the qlog's own
whole-millisecond event times.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import time
from collections.abc import Callable
from pathlib import Path

from tbcore.ownedfd import OwnedFd

IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
"""inotify(7) and <sys/inotify.h> constants."""
EVENT_HEADER = struct.Struct("iIII")
"""struct inotify_event: wd, mask, cookie, len (then ``len`` bytes of NUL-padded name)."""
READ_BYTES = 64 * 1024


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def parse_events(buffer: bytes) -> list[tuple[int, str]]:
    """The (mask, name) of every inotify_event in what one read() returned."""
    out = []
    offset = 0
    while offset + EVENT_HEADER.size <= len(buffer):
        _wd, mask, _cookie, length = EVENT_HEADER.unpack_from(buffer, offset)
        start = offset + EVENT_HEADER.size
        name = buffer[start : start + length].split(b"\0", 1)[0].decode(errors="replace")
        out.append((mask, name))
        offset = start + length
    return out


class CreationWatch(OwnedFd):
    """The files created in one directory and when (``created``: name -> CLOCK_MONOTONIC
    seconds), from the moment it is made until :meth:`close`."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.clock = clock
        self.created: dict[str, float] = {}
        libc = _libc()
        self.fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        mask = IN_CREATE | IN_MOVED_TO
        if libc.inotify_add_watch(self.fd, os.fsencode(self.directory), mask) < 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"inotify_add_watch {self.directory}: {os.strerror(err)}")

    def drain(self) -> list[str]:
        """Read what is queued (never blocks); the names created since the last call."""
        now = self.clock()
        new = []
        while True:
            try:
                buffer = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                return new
            for _mask, name in parse_events(buffer):
                if name and name not in self.created:
                    self.created[name] = now
                    new.append(name)

    def wait(self, timeout_s: float) -> list[str]:
        """Block up to ``timeout_s`` for a creation; the new names (maybe none)."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout_s))
        return self.drain() if ready else []
