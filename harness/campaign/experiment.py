"""One experiment from its file to its report: the runner's runs, then the report built
under the host's run lock (its tables and plots take seconds of CPU: never beside a run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.report.build import build_report
from harness.run import runner
from harness.run.lock import exclusive_run
from harness.run.runner import ExperimentResult
from harness.spec.experiment import ExperimentSpec


def run_reported(
    spec: ExperimentSpec, *, log: Callable[[str], None] = lambda _msg: None, **options: Any
) -> ExperimentResult:
    """:func:`harness.run.runner.run_experiment` with ``options``, then the experiment's
    report (report.md and its figures) in the result directory."""
    result = runner.run_experiment(spec, log=log, **options)
    with exclusive_run(log, shared=spec.shares_host):
        build_report(result.result.path)
    return result
