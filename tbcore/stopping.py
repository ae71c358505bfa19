"""A stop asked for by a signal (SIGTERM, SIGINT), remembered as well as raised.

The harness's handlers raise KeyboardInterrupt where the signal lands. Python runs a
signal's handler between any two bytecodes of the main thread, and an exception raised
inside a finaliser (``__del__``, a weakref callback) is printed and dropped there: the
interrupt is then lost and the experiment would go on to its end. So the handler also
notes the signal here, and the loops that start work (the runner's runs, a campaign's
experiments) call :func:`check` before each: a stop is never lost, only delayed to the
next run at most."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from types import FrameType

_requested: list[int] = []


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
        raise KeyboardInterrupt(f"signal {signum}")

    for signum in signals:
        signal.signal(signum, handler)
