"""A campaign's sharing experiments beside each other (``testbed campaign --lanes N``).

An experiment whose every level shares the host (an agent's rounds: its processes sleep
through the model's and the device's time, tbcore.kinds.WorkloadKind.shares_host) holds the
host's run lock shared (harness.run.lock); the campaign runs its exclusive experiments one
after the other first, then the blocks of its sharing ones ``N`` at a time: each block (one
run of every level, in the plan's order, with the re-runs of its invalid runs after them) in
a process of its own, with its own link (its runs need a main thread: signals, the
emulator's fork), one block of each experiment in turn (:func:`interleaved`). A block, not an
experiment, is the unit: one experiment's six blocks of 30-round tasks (two levels of
105-133 s) would otherwise run one after the other for 26 min while the others had finished.
Every run is still judged for the disturbance its neighbours' processes could have caused it
(harness.validity), and a disturbed run is made again, as on a busy host.

The blocks write into the result directory the campaign made for their experiment (so the
index knows it before the first run, for ``--resume``); the experiment's tables and report
are made once its last block ends. Progress is plain lines on stderr, each naming the
experiment and block.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.run.lock import SHARE_SLOTS
from harness.spec.experiment import ExperimentSpec
from tbcore import stopping

DEFAULT_LANES = SHARE_SLOTS
"""Sharing blocks at once: the most the run lock lets run."""


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
    stopping.die_with_parent(signal.SIGTERM)


@dataclass(frozen=True)
class Part:
    """One block of a sharing experiment, made in a lane."""

    spec: ExperimentSpec
    result_dir: str
    block: int
    predicted_s: float
    """The block's runs at their lower bounds (harness.run.runner.run_seconds): the
    experiment with the most left goes first, so that the last to end is a short one."""

    @property
    def label(self) -> str:
        return f"{self.spec.name} block {self.block}"


def parts_of(spec: ExperimentSpec, result_dir: str, attempts: int) -> list[Part]:
    """The blocks of ``spec`` left to make in ``result_dir``, one :class:`Part` each."""
    from harness.plan.planner import plan_for
    from harness.run.runner import blocks_left, run_seconds
    from harness.store.resultdir import ResultDir

    seconds = {level.name: run_seconds(level) or 0.0 for level in spec.levels}
    per_block: dict[int, float] = {}
    for run in plan_for(spec):
        per_block[run.block] = per_block.get(run.block, 0.0) + seconds[run.level]
    left = blocks_left(spec, ResultDir.open(Path(result_dir)), attempts)
    return [Part(spec, result_dir, block, per_block.get(block, 0.0)) for block in left]


def interleaved(parts: Sequence[Part]) -> list[Part]:
    """``parts`` in the order the lanes take them: one block of each experiment in turn, the
    experiment with the most time left first, so that blocks side by side are of different
    experiments. Blocks of one experiment side by side run the same levels in the same
    order at the same time, their uploads and renders at the same moments: measured on
    2026-12-07, four agent-deployment blocks together had 16 of 19 runs judged disturbed
    (run-queue waits of 0.3-0.9 s on 35-50 s tasks), where three different experiments side
    by side had 10 of 118 the day before."""
    by_spec: dict[str, list[Part]] = {}
    for part in parts:
        by_spec.setdefault(part.spec.name, []).append(part)
    queues = sorted(by_spec.values(), key=lambda mine: -sum(part.predicted_s for part in mine))
    out: list[Part] = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out


def run_part(part: Part, options: dict[str, Any]) -> str:
    """One block in a lane's process, into its experiment's directory; returns the
    directory. ``options``: ``backend`` and ``attempts``."""
    from harness.run.runner import RunOptions, make_part
    from harness.store.resultdir import ResultDir

    progress = LaneProgress(part.label)
    run_options = RunOptions(
        backend=options["backend"],
        attempts=options["attempts"],
        progress=progress,
        log=progress.note,
    )
    make_part(part.spec, ResultDir.open(Path(part.result_dir)), [part.block], run_options)
    return part.result_dir


def run_lanes(
    parts: Sequence[Any],
    options: dict[str, Any],
    lanes: int,
    done: Callable[[Any, BaseException | None], None],
    task: Callable[[Any, dict[str, Any]], Any] = run_part,
) -> None:
    """Run ``task(part, options)`` for each of ``parts`` (:func:`run_part`), ``lanes`` at a
    time, each in a lane's process; ``done(part, error)`` hears each as it ends (in this
    process). An interrupt stops every lane (they unwind) and is raised."""
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=lanes, mp_context=context, initializer=_lane_start)
    futures: dict[Future[Any], Any] = {}
    try:
        for part in parts:
            futures[pool.submit(task, part, options)] = part
        for future in as_completed(futures):
            part = futures[future]
            try:
                future.result()
            except KeyboardInterrupt:
                raise
            except Exception as err:  # noted in the campaign's index by ``done``
                done(part, err)
            else:
                done(part, None)
            stopping.check()
    except BaseException:
        for process in multiprocessing.active_children():
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
