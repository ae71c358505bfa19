"""Entering network namespaces: for a child process, or for a block of the current thread.

Python 3.11 has no ``os.setns``; libc's ``setns(2)`` is reached through ctypes. A named
namespace is the file ``/run/netns/<name>`` that iproute2 and pyroute2 both create.
Only the network namespace is entered (not the mount namespace, as ``ip netns exec``
would), which is all a socket, a TUN device or ``/proc/sys/net`` needs: those files reflect
the namespace of the thread that opens them. ``/sys/class/net`` does not: sysfs shows the
namespace that mounted it, so list devices with pyroute2, never through /sys.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tbcore.errors import SpecError

NETNS_RUN_DIR = Path("/run/netns")
"""Where iproute2 and pyroute2 bind-mount named network namespaces."""

CLONE_NEWNET = 0x40000000
"""Namespace type flag for setns(2) (linux/sched.h)."""

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def netns_path(name: str) -> Path:
    path = NETNS_RUN_DIR / name
    if "/" in name or not path.exists():
        raise SpecError("namespace", f"{name!r} does not exist (is the link up?)")
    return path


def setns_fd(fd: int) -> None:
    """Move the calling thread into the network namespace open at ``fd``."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def enter(name: str) -> None:
    """Move the calling thread into namespace ``name`` for good (used in a child process)."""
    fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns_fd(fd)
    finally:
        os.close(fd)


@contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run a block of the current thread inside namespace ``name``, then come back.

    Sockets and TUN devices opened inside keep their namespace after the block.
    """
    home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        enter(name)
        try:
            yield
        finally:
            setns_fd(home)
    finally:
        os.close(home)


def _entering(ns: str) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the child into namespace ``ns`` before it execs."""
    path = netns_path(ns)

    def _enter() -> None:
        fd = os.open(path, os.O_RDONLY)
        setns_fd(fd)
        os.close(fd)

    return _enter


def popen(ns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """Start ``argv`` inside namespace ``ns`` (the child enters it before exec)."""
    return subprocess.Popen(list(argv), preexec_fn=_entering(ns), **kwargs)


def run(ns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """Like :func:`subprocess.run` (timeout, input, capture_output, check), inside ``ns``."""
    return subprocess.run(list(argv), preexec_fn=_entering(ns), **kwargs)
