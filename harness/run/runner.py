"""One run, and one experiment of runs, over a real emulated link with the real stacks.

A run is one client process invocation: the level's settings are applied to the link and
the namespaces, a server starts in the server namespace, the client in the client
namespace (warm-up requests first, in the same process), the link captures both of its
ends, and afterwards the harness collects the client's records, the server's events, the
link's counters over the run, the CPU of client, server and emulator, and the host's steal
time. Every run gets a row, valid or not: a run that fails in any way is kept and flagged
with its reason, never dropped.

The pure parts (harness.collect.row, harness.validity.rules, :func:`effect_scales`) take plain
values and are tested without a link; :func:`execute_run` and :func:`run_experiment` are
the I/O edge.
"""

from __future__ import annotations

import collections
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.collect.row import bound_for, collect_run, label_columns
from harness.plan.planner import (
    DEFAULT_ATTEMPTS,
    Outcome,
    PlannedRun,
    next_attempt,
    plan_for,
    remaining,
)
from harness.run import machine
from harness.run.backends import RunPaths, open_paths
from harness.run.capture import capture_plan
from harness.run.environment import environment, host_label, versions
from harness.run.execute import ERROR_CHARS, RunEnvironment, run_processes
from harness.run.lock import exclusive_run
from harness.run.machine import CpuWatch
from harness.spec.experiment import ExperimentSpec, Level
from harness.spec.traces import run_path as path_at_start
from harness.store.resultdir import ResultDir, utc_stamp
from harness.validity.judge import judge
from tbcore import agent, kinds, stopping
from tbcore.errors import LinkLost, SpecError
from tbcore.runrow import RunRow

if TYPE_CHECKING:
    from harness.run.remote.path import RemoteRun


def execute_run(
    env: RunEnvironment, planned: PlannedRun, effect_s: float | None = None
) -> dict[str, Any]:
    """Make one run (one attempt) and return its judged row (also saved as its row.json).
    ``effect_s``: the arm effect the run's comparison is about (:func:`effect_scales`).
    The run holds the host's run lock (harness.run.lock) until its row is made: another
    experiment's collection (pcap parsing, seconds of CPU) would otherwise load this one."""
    level = env.spec.level(planned.level)
    path = path_at_start(
        env.paths.path_of(level, planned.link_seed),
        level.settings,
        planned.rep,
        env.spec.repetitions,
    )
    run_dir = env.result.fresh_run_dir(planned.run_id)
    wall0 = time.monotonic()
    watch = CpuWatch()
    with exclusive_run(env.log, shared=env.spec.shares_host) as lock_wait_s:
        error = run_processes(env, planned, level, path, run_dir, watch)
        try:
            row = judge(collect_run(run_dir, error), watch, effect_s)
        except Exception as err:  # the files did not make a row: kept, flagged
            reason = f"harness: collecting failed: {type(err).__name__}: {err}"[:ERROR_CHARS]
            labels = label_columns(level.settings, path)
            row = RunRow(**planned.to_dict(), **labels, valid=False, invalid_reason=reason)
    row = replace(row, wall_s=time.monotonic() - wall0, lock_wait_s=lock_wait_s, host=host_label())
    env.result.save_row(row)
    return row.to_dict()


def effect_scales(
    spec: ExperimentSpec,
    measured_s: Mapping[str, float] | None = None,
    predicted_s: Mapping[str, float | None] | None = None,
) -> dict[str, float | None]:
    """Per level, the arm effect its comparisons are about: the difference to its baseline,
    and for a baseline the smallest difference to the levels compared with it; None
    without any. A difference is the largest of the bounds' prediction, the level's
    ``expected_effect`` (what its comparison asks about, where the bounds do not model it)
    and the one the runs so far show (``measured_s``: each level's median time): a tenth of
    an effect the runs already show can neither flip it nor move it by more than 10 %,
    however small the bounds predicted it (they do not model the stacks' own costs:
    whole-image HTTP/3 ran 0.75 s behind HTTP/2, where its bound differs by 45 ms).
    ``predicted_s``: the levels' bounds (:func:`bound_times`) when already computed."""
    predicted = bound_times(spec) if predicted_s is None else predicted_s
    measured = dict(measured_s or {})
    scales: dict[str, list[float]] = {lv.name: [] for lv in spec.levels}
    for lv in spec.levels:
        if lv.baseline == lv.name:
            continue
        effects = [
            abs(times[lv.name] - times[lv.baseline])
            for times in (predicted, measured)
            if times.get(lv.name) is not None and times.get(lv.baseline) is not None
        ]
        if lv.expected_effect_s is not None:
            effects.append(lv.expected_effect_s)
        effect = max(effects, default=0.0)
        if not effect > 0:
            continue
        scales[lv.name].append(effect)
        scales[lv.baseline].append(effect)
    return {name: min(values) if values else None for name, values in scales.items()}


def bound_times(spec: ExperimentSpec) -> dict[str, float | None]:
    """Each level's bound of what a run's ``total_s`` measures (harness.bounds): one request,
    or an agent's whole task (its measured rounds: a run's total is the task's); None where
    the request bound does not apply."""
    out: dict[str, float | None] = {}
    for lv in spec.levels:
        bound = _request_bound(lv)
        if bound is None:
            out[lv.name] = None
        elif kinds.workload(lv.settings.workload).records == "agent_round":
            out[lv.name] = _rounds_s(lv.settings, bound.total_s, _task_rounds(lv.settings))
        else:
            out[lv.name] = bound.total_s
    return out


def run_seconds(level: Level) -> float | None:
    """One run's requests (warm-ups included) at the level's lower bound, or its workload's
    run time limit where the request bound does not cover the workload."""
    settings = level.settings
    workload = kinds.workload(settings.workload)
    bound = _request_bound(level)
    warmups = settings.warmup_requests or 0
    if bound is not None and workload.records == "agent_round":
        return _rounds_s(settings, bound.total_s, _task_rounds(settings) + warmups)
    if bound is not None:
        return ((getattr(settings, "requests", 1) or 1) + warmups) * bound.total_s
    limit = workload.run_limit_s(settings)
    return float(limit) if limit else None


def _request_bound(level: Level) -> Any:
    """The bound of one request of ``level`` (harness.collect.row.bound_for), None where it
    does not apply or cannot be computed for these settings."""
    settings = level.settings
    workload = kinds.workload(settings.workload)
    up, down = workload.up_bytes(settings), workload.down_bytes(settings)
    try:
        return bound_for(settings, level.topology, up, down)
    except ValueError:
        return None


def _task_rounds(settings: Any) -> float:
    """The measured rounds of a run of ``settings`` (every task's, attempts redone)."""
    return agent.expected_rounds(settings.agent_rounds, settings.agent_tasks, settings.task_success)


def _rounds_s(settings: Any, request_s: float, rounds: float) -> float:
    """An agent's ``rounds``: each its request at the bound (the model's time is its
    processing) after the device's own time."""
    return rounds * (request_s + settings.agent_local_s)


def measured_times(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each level's median measured time over the attempts made so far (valid or not: a
    disturbance within the limits cannot make an effect of its own size)."""
    times: dict[str, list[float]] = {}
    for row in rows:
        total = row.get("total_s")
        if isinstance(total, int | float) and math.isfinite(total) and total > 0:
            times.setdefault(str(row.get("level")), []).append(float(total))
    return {level: statistics.median(values) for level, values in times.items()}


@dataclass
class ExperimentResult:
    result: ResultDir
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


ProgressHook = Callable[[str, PlannedRun | None, dict[str, Any] | None], None]
"""Called with ("start", run, None), ("retry", run, row) for an invalid attempt made again,
("done", run, row) and ("plan", None, {"total", "left"})."""


def _check_paths(paths: RunPaths, result: ResultDir, run_id: str, *, before: bool) -> None:
    """Stop (LinkLost) if a path was taken down under the run; a run made on a vanishing
    path is discarded, not recorded as invalid, so that ``--resume`` makes it again."""
    lost = paths.lost()
    if lost is None:
        return
    if not before:
        result.discard_run(run_id)
    raise LinkLost(
        f"{lost} (taken down under the run); stopped at run {run_id}, "
        f"results so far in {result.path} (testbed run --resume {result.path} goes on)"
    )


def same_plan(result: ResultDir, plan: Sequence[PlannedRun]) -> bool:
    """Whether ``result``'s manifest planned ``plan`` (a manifest without a plan: any)."""
    planned_ids = [r["run_id"] for r in result.read_manifest().get("plan", [])]
    return not planned_ids or planned_ids == [r.run_id for r in plan]


def _reopen(spec: ExperimentSpec, plan: Sequence[PlannedRun], resume: Path) -> ResultDir:
    """The result directory of an interrupted campaign of the same experiment and plan."""
    result = ResultDir.open(resume)
    manifest = result.read_manifest()
    if manifest.get("resolved", {}).get("name") != spec.name:
        raise SpecError(
            "resume",
            f"{resume} holds experiment "
            f"{manifest.get('resolved', {}).get('name')!r}, not {spec.name!r}",
        )
    if not same_plan(result, plan):
        raise SpecError(
            "resume",
            "the plan differs from the one in the manifest "
            "(changed file or flags?): start a new directory",
        )
    return result


def _create(
    spec: ExperimentSpec,
    plan: Sequence[PlannedRun],
    output: Path,
    backend: str,
    argv: Sequence[str] | None,
    remote: bool = False,
) -> ResultDir:
    """A new result directory with its manifest (the spec, plan, seeds, versions)."""
    result = ResultDir.create(Path(output), spec.name)
    result.write_manifest(
        {
            "experiment_file": spec.path,
            "experiment_source": spec.source,
            "resolved": spec.resolved(),
            "plan": [r.to_dict() for r in plan],
            "seeds": {"plan": spec.seed, "link": sorted({r.link_seed for r in plan})},
            "versions": versions(),
            "command": list(argv) if argv is not None else sys.argv,
            "started_utc": utc_stamp(),
            "backend_requested": backend,
            "column_groups": spec.column_groups(remote),
            "capture": {lv.name: capture_plan(lv.settings).to_dict() for lv in spec.levels},
        }
    )
    return result


def _make_runs(
    spec: ExperimentSpec,
    result: ResultDir,
    left: Sequence[PlannedRun],
    by_id: dict[str, PlannedRun],
    outcomes: dict[str, Outcome],
    options: RunOptions,
    earlier: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Bring the paths up (emulated links, or the remote host's path) and make the runs
    ``left`` in order; an invalid one is made again after the others (until it is valid or
    has had ``attempts``); returns the rows made. ``earlier``: rows made before (other
    blocks'), whose medians size the arm effects from the first run on."""
    name = options.link_name or f"r{os.getpid() % 100000}"
    levels = [run.level for run in left]
    rows: list[dict[str, Any]] = []
    opened = open_paths(
        spec, levels, name=name, backend=options.backend, result_dir=result.path,
        remote=options.remote, log=options.log,
    )  # fmt: skip
    with opened as paths:
        paths.probe(left[0].block)  # a real path's bounds need it before the environment
        env = _environment(spec, result, paths, options.log)
        predicted = bound_times(spec)
        queue = collections.deque(left)
        while queue:
            stopping.check()  # a stop a finaliser swallowed ends the experiment here
            run = queue.popleft()
            paths.probe(run.block)
            if run.attempt > 1:
                _wait_for_low_steal(options.log)
            _check_paths(paths, result, run.run_id, before=True)
            if options.progress:
                options.progress("start", run, None)
            scales = effect_scales(spec, measured_times([*earlier, *rows]), predicted)
            row = execute_run(env, run, scales.get(run.level))
            _check_paths(paths, result, run.run_id, before=False)
            rows.append(row)
            outcomes[run.run_id] = Outcome.of_row(row)
            again = next_attempt(by_id[run.planned_id], outcomes.values(), options.attempts)
            if again is not None:
                # at the end of the queue: a host's disturbance comes in bursts (another
                # job's busy phase), and the runs in between let it pass
                queue.append(again)
            if options.progress:
                options.progress("done" if again is None else "retry", run, row)
        paths.probe(None)  # after the last block
    return rows


def _wait_for_low_steal(log: Callable[[str], None]) -> None:
    """Before a re-run: let a spell of hypervisor steal pass (harness.run.machine), and say so
    when it had to wait."""
    waited, steal = machine.wait_for_low_steal()
    if waited > (machine.QUIET_WINDOWS + 1) * machine.QUIET_WINDOW_S:
        shown = "unknown" if steal is None else f"{steal * 100:.1f} %"
        log(f"re-run waited {waited:.0f} s for the host's steal to fall (last second: {shown})")


def _environment(
    spec: ExperimentSpec, result: ResultDir, paths: RunPaths, log: Callable[[str], None]
) -> RunEnvironment:
    """What every run of the experiment shares (the paths, the sysctl defaults to restore),
    with the host's environment noted in the manifest."""
    keys = sorted({k for lv in spec.levels for k in lv.settings.sysctls})
    link = paths.primary
    env = RunEnvironment(
        paths=paths,
        result=result,
        spec=spec,
        set_route_metrics=any(
            lv.settings.initcwnd is not None
            or lv.settings.initrwnd is not None
            or lv.settings.quickack_route
            for lv in spec.levels
        ),
        log=log,
        sysctl_defaults={r: link.sysctls(r, keys) for r in ("client", "server")} if keys else {},
    )
    manifest = result.read_manifest()
    envs = manifest.get("environments", [])
    envs.append({"at_utc": utc_stamp(), **environment(link, paths.backend)})
    result.update_manifest(environments=envs, environment=envs[0])
    return env


@dataclass(frozen=True)
class RunOptions:
    """How an experiment's runs are made: the path's backend and link name, the attempts
    per planned run, and who hears of them."""

    backend: str = "auto"
    link_name: str | None = None
    attempts: int = DEFAULT_ATTEMPTS
    remote: RemoteRun | None = None
    progress: ProgressHook | None = None
    log: Callable[[str], None] = lambda _msg: None


def run_experiment(
    spec: ExperimentSpec,
    *,
    output: Path = Path("results"),
    backend: str = "auto",
    resume: Path | None = None,
    link_name: str | None = None,
    progress: ProgressHook | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    argv: Sequence[str] | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
    remote: RemoteRun | None = None,
) -> ExperimentResult:
    """Plan, run every run not yet finished (an invalid measured run again, up to
    ``attempts`` attempts in all), write the tables (the report is its caller's:
    harness.campaign.experiment.run_reported). ``remote``: the server
    on another host, over a real path (harness.run.remote.path), instead of an emulated link."""
    if remote is not None:
        remote.check(spec)
    plan = plan_for(spec)
    if resume is not None:
        result = _reopen(spec, plan, resume)
    else:
        result = _create(spec, plan, output, backend, argv, remote is not None)
    by_id = {run.run_id: run for run in plan}
    outcomes = {r["run_id"]: Outcome.of_row(r) for r in result.rows()}
    left = remaining(plan, outcomes, attempts)
    if progress:
        progress("plan", None, {"total": len(plan), "left": len(left), "dir": str(result.path)})
    rows: list[dict[str, Any]] = []
    if left:
        options = RunOptions(backend, link_name, attempts, remote, progress, log)
        rows = _make_runs(spec, result, left, by_id, outcomes, options)
    finish_tables(result, plan, attempts, log, shared=spec.shares_host)
    return ExperimentResult(result=result, rows=rows, skipped=len(plan) - len(left))


def finish_tables(
    result: ResultDir,
    plan: Sequence[PlannedRun],
    attempts: int,
    log: Callable[[str], None],
    shared: bool = False,
) -> None:
    """The experiment's tables and its manifest's verdict (finished: no run left to try),
    under the host's run lock (the tables take seconds of CPU: not beside a run; ``shared``:
    a sharing experiment's, beside sharing runs only, which judge it as a disturbance)."""
    with exclusive_run(log, shared=shared):
        result.write_tables()
        outcomes = {r["run_id"]: Outcome.of_row(r) for r in result.rows()}
        result.update_manifest(
            finished_utc=utc_stamp(),
            finished=not remaining(plan, outcomes, attempts),
            attempts=attempts,
        )


def make_block(
    spec: ExperimentSpec, result: ResultDir, runs: Sequence[PlannedRun], options: RunOptions
) -> list[dict[str, Any]]:
    """Make one block of the plan (``runs``, in their order) on this host, with the re-runs
    of its invalid runs after the others, into ``result`` (harness.cluster runs a block per
    worker this way); returns the rows made."""
    by_id = {run.run_id: run for run in runs}
    return _make_runs(spec, result, runs, by_id, {}, options)


def blocks_left(spec: ExperimentSpec, result: ResultDir, attempts: int) -> list[int]:
    """The blocks of ``spec``'s plan that still have a run to make in ``result`` (a planned
    run without a row, or an invalid one with attempts left), in the plan's order."""
    outcomes = {r["run_id"]: Outcome.of_row(r) for r in result.rows()}
    return list(dict.fromkeys(run.block for run in remaining(plan_for(spec), outcomes, attempts)))


def make_part(
    spec: ExperimentSpec, result: ResultDir, blocks: Sequence[int], options: RunOptions
) -> list[dict[str, Any]]:
    """Make what is left of ``blocks`` of the plan into ``result``, an experiment's directory
    that other processes fill with its other blocks at the same time (a sharing experiment's
    blocks side by side: harness.campaign.lanes); the re-runs of its invalid runs after the
    others, as in :func:`run_experiment`. Returns the rows made; the tables are the
    caller's, once every block is made (:func:`finish_tables`)."""
    plan = plan_for(spec)
    by_id = {run.run_id: run for run in plan}
    made = result.rows()
    outcomes = {r["run_id"]: Outcome.of_row(r) for r in made}
    wanted = set(blocks)
    left = [run for run in remaining(plan, outcomes, options.attempts) if run.block in wanted]
    return _make_runs(spec, result, left, by_id, outcomes, options, made) if left else []


def create_result(
    spec: ExperimentSpec,
    plan: Sequence[PlannedRun],
    output: Path,
    backend: str,
    argv: Sequence[str] | None,
) -> ResultDir:
    """A new result directory of ``spec`` with its manifest (as ``testbed run`` makes it)."""
    return _create(spec, plan, output, backend, argv)


def reopen_result(spec: ExperimentSpec, plan: Sequence[PlannedRun], resume: Path) -> ResultDir:
    """The result directory of an interrupted run of the same experiment and plan."""
    return _reopen(spec, plan, resume)
