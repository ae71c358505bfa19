"""Entering network namespaces: for a child process, or for a block of the current thread.

Python 3.11 has no ``os.setns``; libc's ``setns(2)`` is reached through ctypes. A named
namespace is the file ``/run/netns/<name>`` that iproute2 and pyroute2 both create.
Only the network namespace is entered (not the mount namespace, as ``ip netns exec``
would), which is all a socket, a TUN device or ``/proc/sys/net`` needs: those files reflect
the namespace of the thread that opens them. ``/sys/class/net`` does not: sysfs shows the
namespace that mounted it, so list devices with pyroute2, never through /sys.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tbcore import stopping
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
def in_netns(name: str | None) -> Iterator[None]:
    """Run a block of the current thread inside namespace ``name``, then come back (None:
    the thread's own namespace, where it stays).

    Sockets and TUN devices opened inside keep their namespace after the block.
    """
    if name is None:
        yield
        return
    home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        enter(name)
        try:
            yield
        finally:
            setns_fd(home)
    finally:
        os.close(home)


AUTOGROUP_PATH = "/proc/self/autogroup"
"""With sched_autogroup (CONFIG_SCHED_AUTOGROUP, on in Debian's and this host's kernels),
each session is a scheduling group and the CPU is shared between the groups first: a task's
nice counts only inside its own group, the group's nice (sched(7), "The autogroup feature")
against the others."""


def _entering(
    ns: str | None,
    nice: int | None = None,
    rr_priority: int | None = None,
    mask: set[signal.Signals] | None = None,
) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the child into namespace ``ns`` (None: it stays in the
    parent's) before it execs; with
    ``nice``, sets its nice value and that of its session's autogroup (the child is a session
    of its own: :func:`popen`); with ``rr_priority``, makes it SCHED_RR at that priority.
    Every thread it starts inherits them. What the host refuses (no CAP_SYS_NICE, an RT
    budget of 0 in a container) is left at the parent's: the caller reads back what the
    child got."""
    path = None if ns is None else netns_path(ns)

    def _enter() -> None:
        if mask is not None:
            # the parent held SIGINT and SIGTERM while it started us: the child runs with
            # the mask the parent had before, so that a stop signal reaches it
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if path is not None:
            fd = os.open(path, os.O_RDONLY)
            setns_fd(fd)
            os.close(fd)
        if nice is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, 0, nice)
                with open(AUTOGROUP_PATH, "w", encoding="ascii") as handle:
                    handle.write(str(nice))
            except OSError:
                pass
        if rr_priority is not None:
            try:
                os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(rr_priority))
            except OSError:
                pass

    return _enter


def popen(
    ns: str | None,
    argv: Sequence[str],
    nice: int | None = None,
    rr_priority: int | None = None,
    **kwargs: Any,
) -> subprocess.Popen:
    """Start ``argv`` inside namespace ``ns`` (the child enters it before exec); with
    ``nice`` or ``rr_priority``, as a session (and so a scheduling autogroup) of its own at
    that priority."""
    if nice is not None or rr_priority is not None:
        kwargs.setdefault("start_new_session", True)
    # A stop signal (Ctrl-C, SIGTERM: KeyboardInterrupt in the harness) that arrived while
    # the child was being made would leave it running with no Popen to stop it: the signals
    # wait until it is made and known, and stop_children() finds it whatever happens next.
    # Blocking them here is not enough when another thread takes the signal: the harness's
    # handler defers its KeyboardInterrupt to the end of this block (tbcore.stopping).
    with stopping.deferred():
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            proc = subprocess.Popen(
                list(argv), preexec_fn=_entering(ns, nice, rr_priority, previous), **kwargs
            )
            _children.difference_update([c for c in _children if c.returncode is not None])
            _children.add(proc)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return proc


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
"""The signals that stop the harness (KeyboardInterrupt, harness.cli.run's SIGTERM handler)."""
_children: set[subprocess.Popen] = set()
"""Every child :func:`popen` made and not yet seen reaped (held strongly: the child whose
caller lost it to a signal is the one to find)."""


def stop_children(timeout_s: float = 2.0) -> list[int]:
    """Stop every child of :func:`popen` still running (SIGTERM, then SIGKILL after
    ``timeout_s``): the harness calls it as it exits on a stop signal, for a child whose
    caller was interrupted before it could stop it. Returns their pids."""
    alive = [proc for proc in list(_children) if proc.poll() is None]
    for proc in alive:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    for proc in alive:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [proc.pid for proc in alive]


def run(ns: str | None, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """Like :func:`subprocess.run` (timeout, input, capture_output, check), inside ``ns``."""
    return subprocess.run(list(argv), preexec_fn=_entering(ns), **kwargs)
