"""Writing ``/proc/sys`` where a container engine mounted it read-only.

Docker and podman bind ``/proc/sys`` read-only over itself in a container unless it runs
with ``security_opt: systempaths=unconfined``, which also unmasks /proc/kcore, /proc/keys
and the rest. The testbed only writes ``net.*`` sysctls of network namespaces it made
itself, and the process that makes them already holds CAP_SYS_ADMIN (naming a namespace is
a bind mount). So instead of asking for that option, a write that meets a read-only
``/proc/sys`` is retried from a short-lived thread that has a mount namespace of its own
(``unshare(CLONE_NEWNS)``, everything made private), where the same mount is remounted
writable; the thread then enters the target network namespace, writes, and exits, and its
mount namespace goes with it. The container's own ``/proc/sys`` stays read-only, and no
other process sees a change.

Only a thread's view changes: ``unshare(CLONE_NEWNS)`` implies ``CLONE_FS``, which a single
thread may unshare, and a network namespace is entered per thread as well
(:mod:`netem.nsexec`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from netem.nsexec import _libc, enter

PROC_SYS = Path("/proc/sys")

CLONE_NEWNS = 0x00020000
"""linux/sched.h: a new mount namespace."""
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_RELATIME = 0x200000
"""linux/mount.h flags of mount(2)."""

KEPT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
"""statvfs(2) bits of the mount that a remount must keep (a remount that clears a flag the
engine locked is refused), each with its mount(2) flag."""

THREAD_TIMEOUT_S = 10.0
"""A remount and one write take microseconds; a thread stuck this long is a kernel hang."""

T = TypeVar("T")


def is_read_only(path: Path = PROC_SYS) -> bool:
    """Whether ``path`` is on a read-only mount (a container's default for /proc/sys)."""
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def _mount(source: str | None, target: str, flags: int) -> None:
    src = None if source is None else source.encode()
    if _libc.mount(src, target.encode(), None, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _writable_view(target: Path) -> None:
    """In the calling thread only: a private mount namespace where ``target`` is writable."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
    _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing done here reaches another namespace
    have = os.statvfs(target).f_flag
    keep = 0
    for st_bit, ms_bit in KEPT_FLAGS:
        if have & st_bit:
            keep |= ms_bit
    _mount(None, str(target), MS_REMOUNT | MS_BIND | keep)


def _in_private_thread(job: Callable[[], T]) -> T:
    """Run ``job`` in a new thread with a writable /proc/sys view; its result or error."""
    outcome: dict[str, object] = {}

    def worker() -> None:
        try:
            _writable_view(PROC_SYS)
            outcome["value"] = job()
        except BaseException as err:  # handed to the caller, raised there
            outcome["error"] = err

    thread = threading.Thread(target=worker, name="tb-procsys")
    thread.start()
    thread.join(THREAD_TIMEOUT_S)
    if thread.is_alive():
        raise OSError(errno.ETIMEDOUT, "remounting /proc/sys did not finish")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def write_in_namespace(ns: str, path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (under /proc/sys) inside network namespace ``ns``, through a
    private writable view of /proc/sys. Raises OSError as a plain write would (EPERM, EINVAL);
    EROFS or EACCES from the remount means the process lacks CAP_SYS_ADMIN or an LSM
    (AppArmor) forbids mount(2)."""

    def job() -> None:
        enter(ns)
        path.write_text(text)

    _in_private_thread(job)


def can_remount() -> tuple[bool, str]:
    """Whether :func:`write_in_namespace` can work here: try the remount, write nothing."""
    try:
        _in_private_thread(lambda: None)
    except OSError as err:
        return False, err.strerror or str(err)
    return True, "remounted writable in a private mount namespace"
