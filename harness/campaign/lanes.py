"""A campaign's sharing experiments beside each other (``testbed campaign --lanes N``).

An experiment whose every level shares the host (an agent's rounds: its processes sleep
through the model's and the device's time, tbcore.kinds.WorkloadKind.shares_host) holds the
host's run lock shared (harness.run.lock); the campaign runs its exclusive experiments one
after the other first, then its sharing ones ``N`` at a time, each in a process of its own
(its runs need a main thread: signals, the emulator's fork). Every run is still judged for
the disturbance its neighbours' processes could have caused it (harness.validity), and a
disturbed run is made again, as on a busy host.

Each lane's experiment writes into the result directory the campaign made for it (so the
index knows it before the first run, for ``--resume``); its progress is plain lines on
stderr, each with the experiment's name.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from harness.run.lock import SHARE_SLOTS
from harness.spec.experiment import ExperimentSpec
from tbcore import stopping

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a lane gets when the campaign that started it ends (as
harness.cluster.block's children; the campaign may not import the cluster)."""

DEFAULT_LANES = SHARE_SLOTS
"""Sharing experiments at once: the most the run lock lets run."""


def split(specs: Sequence[ExperimentSpec]) -> tuple[list[ExperimentSpec], list[ExperimentSpec]]:
    """(exclusive, sharing) experiments, each in the campaign's order."""
    sharing = [s for s in specs if s.shares_host]
    return [s for s in specs if not s.shares_host], sharing


class LaneProgress:
    """A lane's progress as lines on stderr, each naming its experiment."""

    def __init__(self, label: str) -> None:
        self.label = label

    def note(self, message: str) -> None:
        print(f"{self.label}: {message}", file=sys.stderr, flush=True)

    def __call__(self, what: str, run: Any, data: dict[str, Any] | None) -> None:
        data = data or {}
        if what == "plan":
            left, total = data.get("left"), data.get("total")
            self.note(f"{left} of {total} runs to make -> {data.get('dir')}")
        elif what in ("done", "retry"):
            total = data.get("total_s")
            time_text = f"{total:.3f} s" if isinstance(total, float) else "no time"
            status = "valid" if data.get("valid") else f"INVALID ({data.get('invalid_reason')})"
            self.note(f"{run.run_id}: {time_text}, {status}")


def _lane_start() -> None:
    """In each lane's process: stop (unwinding, the links down) on SIGTERM, on SIGINT unless
    the campaign ignores it, and when the campaign dies."""
    wanted = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        wanted.append(signal.SIGINT)
    stopping.install(wanted)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def run_lane(spec: ExperimentSpec, result_dir: str, options: dict[str, Any]) -> str:
    """One sharing experiment in a lane's process, into ``result_dir``; returns it."""
    from harness.campaign.experiment import run_reported

    progress = LaneProgress(spec.name)
    run_reported(spec, resume=Path(result_dir), progress=progress, log=progress.note, **options)
    return result_dir


def run_lanes(
    specs: Sequence[ExperimentSpec],
    result_dir_of: Callable[[ExperimentSpec], str],
    options: dict[str, Any],
    lanes: int,
    done: Callable[[ExperimentSpec, str | None, BaseException | None], None],
    task: Callable[[Any, str, dict[str, Any]], str] = run_lane,
) -> None:
    """Run ``specs`` ``lanes`` at a time, each ``task(spec, result_dir, options)`` in a lane's
    process (:func:`run_lane`); ``done(spec, result_dir, error)`` hears each as it ends (in
    this process). An interrupt stops every lane (they unwind) and is raised."""
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=lanes, mp_context=context, initializer=_lane_start)
    futures: dict[Future[str], ExperimentSpec] = {}
    try:
        for spec in specs:
            futures[pool.submit(task, spec, result_dir_of(spec), options)] = spec
        for future in as_completed(futures):
            spec = futures[future]
            try:
                done(spec, future.result(), None)
            except KeyboardInterrupt:
                raise
            except Exception as err:  # noted in the campaign's index by ``done``
                done(spec, None, err)
            stopping.check()
    except BaseException:
        for process in multiprocessing.active_children():
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
