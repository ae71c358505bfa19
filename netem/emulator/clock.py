"""Sub-millisecond wake-ups: a ``timerfd`` on CLOCK_MONOTONIC, through ctypes.

uvloop's ``call_at`` and Python's epoll timeouts round to whole milliseconds, so a
departure schedule built on them is up to a millisecond late. A timerfd armed with an
absolute CLOCK_MONOTONIC time (``TFD_TIMER_ABSTIME``) is an hrtimer: watched with the
event loop's ``add_reader``, it wakes the loop within tens of microseconds. The process's
timer slack (50 µs by default, added to every hrtimer of a normal process) is set to
1 ns with ``prctl(PR_SET_TIMERSLACK)``.

Python 3.11 has no ``os.timerfd_create`` (3.13 has): libc is reached with ctypes.
``time.monotonic()`` reads the same CLOCK_MONOTONIC.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os

from tbcore.ownedfd import OwnedFd

CLOCK_MONOTONIC = 1
"""linux/time.h."""
TFD_TIMER_ABSTIME = 1
"""linux/timerfd.h: the expiry is an absolute time on the timer's clock."""
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
PR_SET_TIMERSLACK = 29
"""linux/prctl.h: set the calling thread's timer slack in nanoseconds."""
PR_SET_NAME = 15
"""linux/prctl.h: set the calling thread's name (``comm``, 15 characters)."""

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.timerfd_settime.argtypes = [
    ctypes.c_int,
    ctypes.c_int,
    ctypes.POINTER(_Itimerspec),
    ctypes.POINTER(_Itimerspec),
]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def set_timer_slack_ns(slack_ns: int) -> None:
    """Set this thread's timer slack (hrtimer expiries may be deferred by up to this much)."""
    _check(_libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(slack_ns), 0, 0, 0), "prctl")


def set_thread_name(name: str) -> None:
    """Set ``comm`` (what ``ps -o comm``, ``top`` and ``pgrep`` show), at most 15 bytes."""
    buf = ctypes.create_string_buffer(name.encode()[:15])
    _check(_libc.prctl(PR_SET_NAME, buf, 0, 0, 0), "prctl")


class Timerfd(OwnedFd):
    """A one-shot absolute CLOCK_MONOTONIC timer that is readable once it has expired."""

    def __init__(self) -> None:
        self.fd = _check(
            _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC), "timerfd_create"
        )
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self.armed_at: float | None = None
        """The monotonic time the timer is armed for, or None when disarmed."""

    def arm_at(self, when_s: float) -> None:
        """Expire at monotonic time ``when_s`` (at once if it is already past)."""
        frac, whole = math.modf(when_s)
        value = self._spec.it_value
        value.tv_sec = int(whole)
        value.tv_nsec = max(1, int(frac * 1e9)) if whole >= 0 else 1
        _check(
            _libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, self._spec_ref, None),
            "timerfd_settime",
        )
        self.armed_at = when_s

    def disarm(self) -> None:
        self._spec.it_value.tv_sec = 0
        self._spec.it_value.tv_nsec = 0
        _check(
            _libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, self._spec_ref, None),
            "timerfd_settime",
        )
        self.armed_at = None

    def drain(self) -> int:
        """Consume the expiry count (0 when it has not expired); call when readable."""
        try:
            return int.from_bytes(os.read(self.fd, 8), "little")
        except BlockingIOError:
            return 0
