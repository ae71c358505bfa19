"""One experiment from its file to its report: the runner's runs, then the report built
under the host's run lock (its tables and plots take seconds of CPU: never beside a run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.plan.planner import plan_for
from harness.report.build import build_report
from harness.run import runner
from harness.run.lock import exclusive_run
from harness.run.runner import ExperimentResult
from harness.spec.experiment import ExperimentSpec
from harness.store.resultdir import ResultDir


def run_reported(
    spec: ExperimentSpec, *, log: Callable[[str], None] = lambda _msg: None, **options: Any
) -> ExperimentResult:
    """:func:`harness.run.runner.run_experiment` with ``options``, then the experiment's
    report (report.md and its figures) in the result directory."""
    result = runner.run_experiment(spec, log=log, **options)
    _report(result.result.path, spec, log)
    return result


def _report(path: Path, spec: ExperimentSpec, log: Callable[[str], None]) -> None:
    """The experiment's report, under the host's run lock (shared for a sharing one)."""
    with exclusive_run(log, shared=spec.shares_host):
        build_report(path)


def finish_reported(
    spec: ExperimentSpec,
    result_dir: Path,
    attempts: int,
    log: Callable[[str], None] = lambda _msg: None,
) -> ExperimentResult:
    """The tables and report of an experiment whose runs were made block by block
    (harness.run.runner.make_part), once all of them are."""
    result = ResultDir.open(result_dir)
    runner.finish_tables(result, plan_for(spec), attempts, log, shared=spec.shares_host)
    _report(result.path, spec, log)
    return ExperimentResult(result=result)
