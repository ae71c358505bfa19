"""``testbed run FILE --cluster ADDRESS``: one experiment's blocks over a Dask cluster, into
one result directory with the same plan, tables and report as ``testbed run`` makes.

The manifest's ``cluster`` records the scheduler, each host's fingerprint
(harness.cluster.hosts), each block's host, times and archive, and each session's measured
and planned makespan (harness.cluster.submit.planned_makespan_s); runs.csv's ``host`` and
``block`` say where each run was made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.cluster import submit
from harness.cluster.progress import BlockProgress
from harness.plan.planner import plan_for
from harness.run.lock import exclusive_run
from harness.run.runner import ExperimentResult, create_result, finish_tables, reopen_result
from harness.spec.experiment import ExperimentSpec
from harness.store.resultdir import ResultDir, utc_stamp


def dashboard_of(client: Any) -> str | None:
    """The Dask dashboard's address, None when the scheduler serves none."""
    try:
        link = client.dashboard_link
    except KeyError:  # the scheduler lists no dashboard service (bokeh missing, or none asked)
        return None
    return str(link) if link else None


def record_session(
    result: ResultDir,
    hosts: dict[str, dict[str, Any]],
    address: str,
    started: str,
    makespan_s: float,
    records: Sequence[dict[str, Any]],
    failures: Sequence[str],
) -> None:
    """The session's line in the manifest's ``cluster``: hosts, makespans, failures."""
    cluster = result.read_manifest().get("cluster", {})
    cluster["scheduler"] = address
    cluster.setdefault("hosts", {}).update(hosts)
    usable = [h for h, f in hosts.items() if not f.get("problems")]
    walls = [float(r["wall_s"]) for r in records]
    cluster.setdefault("sessions", []).append(
        {
            "started_utc": started,
            "finished_utc": utc_stamp(),
            "blocks": len(records),
            "hosts": usable,
            "makespan_s": makespan_s,
            "planned_makespan_s": submit.planned_makespan_s(walls, len(usable)),
            "serial_s": sum(walls),
            "failures": list(failures),
        }
    )
    result.update_manifest(cluster=cluster)


def finish(
    result: ResultDir,
    plan: Sequence[Any],
    attempts: int,
    report: bool,
    log: Callable,
    shared: bool = False,
) -> None:
    """Tables, the manifest's verdict and the report, as ``testbed run`` ends (``shared``: a
    sharing experiment's, harness.run.lock)."""
    finish_tables(result, plan, attempts, log, shared=shared)
    if report:
        from harness.report.build import build_report  # matplotlib: only when it reports

        with exclusive_run(log, shared=shared):
            build_report(result.path)


def run_on_cluster(
    spec: ExperimentSpec,
    options: submit.ClusterOptions,
    *,
    output: Path = Path("results"),
    resume: Path | None = None,
    argv: Sequence[str] | None = None,
    progress: BlockProgress | None = None,
    report: bool = True,
    client: Any = None,
) -> ExperimentResult:
    """Plan, make every block not yet made on the cluster's workers, write the tables and
    the report. ``client``: a ``distributed.Client`` already connected (else one to
    ``options.address``, closed at the end)."""
    progress = progress or BlockProgress(spec.name)
    own = client is None
    client = submit.connect(options.address) if own else client
    try:
        dashboard = dashboard_of(client)
        if dashboard:
            progress.note(f"dashboard: {dashboard}")
        workers, hosts = submit.usable_workers(client, options.backend, progress.note)
        plan = plan_for(spec)
        if resume is not None:
            result = reopen_result(spec, plan, resume)
        else:
            result = create_result(spec, plan, output, options.backend, argv)
        left = submit.blocks_left(plan, result, options.attempts)
        total = len({run.block for run in plan})
        progress.start(total, total - len(left), str(result.path))
        refused = len(workers) < len(client.scheduler_info(n_workers=-1)["workers"])
        futures = submit.submit(client, spec, result, left, workers if refused else None, options)
        started, t0 = utc_stamp(), time.monotonic()
        got = submit.gather_blocks(client, futures, progress).get(spec.name, submit.Gathered())
        records = got.records
        record_session(
            result, hosts, options.address, started, time.monotonic() - t0, records, got.failures
        )
    finally:
        progress.close()
        if own:
            client.close()
    finish(result, plan, options.attempts, report, progress.note, shared=spec.shares_host)
    made = [run for record in records for run in record["runs"]]
    rows = [row for row in result.rows() if row["run_id"] in set(made)]
    return ExperimentResult(result=result, rows=rows, skipped=len(plan) - len(made))
