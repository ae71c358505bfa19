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

A run whose processes sleep most of its time (an agent's rounds: the model's 2 s, the
device's 0.3 s, tbcore.kinds.WorkloadKind.shares_host) may instead hold the lock *shared*,
beside at most :data:`SHARE_SLOTS` - 1 other such runs and never beside an exclusive one:
``testbed campaign --lanes N`` runs the sharing experiments of a campaign that way, after
its exclusive ones. A neighbour's processes are foreign to a run, so the run is judged for
what they could have cost it (harness.validity), as for any other disturbance.
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

SHARE_SLOTS = 3
"""At most three sharing runs at once on two cores: an agent run's client and server use 2-5 %
of one core over its task and its emulator 1-5 %, but in bursts (a round's render, its
upload's encryption); three runs of different experiments side by side cost the median run
70 ms of judged disturbance, 0.2 % of its task, against a limit of 1 % (10 of 118 runs made
again, 2026-12-07), and four cost more (16 of 19 judged disturbed, with blocks of one
experiment side by side: harness.campaign.lanes.interleaved)."""

SLOT_POLL_S = 0.2
"""How often a sharing run looks for a free slot when all are taken."""

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
    shared: bool = False,
) -> Iterator[float]:
    """Hold the host's run lock for the block; yields the seconds waited for it. ``log``
    hears once, with the holder's pid, when another run holds it. ``shared``: beside other
    sharing runs, in one of :data:`SHARE_SLOTS` slots (the module's docstring)."""
    path = lock_path() if path is None else path
    if path is None:
        yield 0.0
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="ascii") as handle:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        waited = 0.0
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            log(f"waiting for another testbed run on this host (pid {holder}, lock {path})")
            start = clock()
            fcntl.flock(handle, mode)
            waited = clock() - start
        try:
            if shared:
                with _slot(path, log, clock) as slot_wait_s:
                    yield waited + slot_wait_s
            else:
                handle.seek(0)
                handle.truncate()
                handle.write(str(os.getpid()))
                handle.flush()
                yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def slot_paths(path: Path) -> list[Path]:
    """The sharing runs' slot files beside the lock file ``path``."""
    return [path.with_name(f"{path.name}.slot{i}") for i in range(SHARE_SLOTS)]


@contextlib.contextmanager
def _slot(path: Path, log: Callable[[str], None], clock: Callable[[], float]) -> Iterator[float]:
    """One free slot of :func:`slot_paths` held for the block (polled while all are taken);
    yields the seconds waited for it."""
    start, told = clock(), False
    while True:
        for slot in slot_paths(path):
            handle = open(slot, "a+", encoding="ascii")  # noqa: SIM115 - held across the yield
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield clock() - start if told else 0.0
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if not told:
            log(f"waiting for one of {SHARE_SLOTS} sharing slots on this host ({path})")
            told = True
        time.sleep(SLOT_POLL_S)
