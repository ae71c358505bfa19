"""A stop asked for by a signal (SIGTERM, SIGINT), remembered as well as raised.

The harness's handlers raise KeyboardInterrupt where the signal lands. Python runs a
signal's handler between any two bytecodes of the main thread, and an exception raised
inside a finaliser (``__del__``, a weakref callback) is printed and dropped there: the
interrupt is then lost and the experiment would go on to its end. So the handler also
notes the signal here, and the loops that start work (the runner's runs, a campaign's
experiments) call :func:`check` before each: a stop is never lost, only delayed to the
next run at most."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterable, Iterator
from types import FrameType

_requested: list[int] = []
_deferring = 0


def request(signum: int) -> None:
    """Note that ``signum`` asked this process to stop."""
    _requested.append(signum)


def requested() -> int | None:
    """The first stop signal noted (None: none)."""
    return _requested[0] if _requested else None


def check() -> None:
    """Raise KeyboardInterrupt if a stop was asked for (and perhaps swallowed since)."""
    if _requested:
        raise KeyboardInterrupt(f"signal {_requested[0]}")


def clear() -> None:
    """Forget noted stops (a test's, or a process that handled one and goes on)."""
    _requested.clear()


def install(signals: Iterable[int]) -> None:
    """In this process's main thread: each of ``signals`` notes a stop and raises
    KeyboardInterrupt; a process forked from this one (the link's emulator) that receives
    it dies as it would have without the handler, never unwinding its parent's stack."""
    main_pid = os.getpid()

    def handler(signum: int, _frame: FrameType | None) -> None:
        if os.getpid() != main_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        request(signum)
        if _deferring:
            return  # raised where the deferred block ends (:func:`deferred`)
        raise KeyboardInterrupt(f"signal {signum}")

    for signum in signals:
        signal.signal(signum, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block a stop must not break (making a child process and recording it): a stop
    signal that comes inside it is noted and raised as KeyboardInterrupt where it ends.
    Blocking the signal in this thread is not enough: another thread of the process may take
    it, and Python then runs the handler in the main thread at its next bytecode, inside
    ``subprocess.Popen`` after the child exists and before anyone holds it (seen: a client
    that outlived the harness)."""
    global _deferring
    before = len(_requested)
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    if not _deferring and len(_requested) > before:
        raise KeyboardInterrupt(f"signal {_requested[before]}")


PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a process gets when the thread that started it ends."""


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Have ``signum`` sent to this process when the thread that started it ends (a killed
    campaign or Dask worker): a child making runs then unwinds and takes its link down
    instead of running on as an orphan (prctl(2), Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
