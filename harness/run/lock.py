"""One measured run at a time on a host.

Two experiments started on one host (two shells, a campaign beside a `testbed run`) would
otherwise measure at the same time: each run's stacks and emulator take CPU from the
other's, and on two cores that moves a 240 ms request by 1-3 % (issue 10's closing note:
h2-reused at 243-246 ms beside a running ack experiment against 241-243 ms alone). Like
iperf3, whose server refuses a second test while one runs, the testbed measures one run at
a time: each run holds an exclusive ``flock`` on one host-wide file while its link is set
and its processes run, and a second experiment's run waits for it. The experiments still
alternate their runs and both finish. The kernel drops the lock with its holder, however
that ends (SIGKILL included), so a stale lock cannot block a later run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

RUN_LOCK_PATH = Path("/run/lock/tb-run.lock")
"""The host-wide lock file (``/run/lock``: tmpfs, Filesystem Hierarchy Standard 3.0 §3.15
'lock files'; a container has its own)."""

RUN_LOCK_ENV = "TESTBED_RUN_LOCK"
"""Another lock file, or ``off`` to measure without waiting for other runs."""


def lock_path() -> Path | None:
    """The lock file this process uses (None: no lock), from :data:`RUN_LOCK_ENV`."""
    value = os.environ.get(RUN_LOCK_ENV, "").strip()
    if value.lower() == "off":
        return None
    return Path(value) if value else RUN_LOCK_PATH


@contextlib.contextmanager
def exclusive_run(
    log: Callable[[str], None],
    path: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[float]:
    """Hold the host's run lock for the block; yields the seconds waited for it. ``log``
    hears once, with the holder's pid, when another run holds it."""
    path = lock_path() if path is None else path
    if path is None:
        yield 0.0
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="ascii") as handle:
        waited = 0.0
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            log(f"waiting for another testbed run on this host (pid {holder}, lock {path})")
            start = clock()
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = clock() - start
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
