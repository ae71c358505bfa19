"""``testbed campaign ... --cluster ADDRESS``: every experiment's blocks at once over the
cluster's workers, each experiment into its own result directory, one campaign index
(harness.campaign.serial's, with the same ``--resume``).

All the experiments' blocks are submitted together, so a worker that finishes one
experiment's last block takes the next experiment's first: the campaign's makespan is that
of its blocks, not the sum of its experiments' tails.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.campaign import serial
from harness.cluster import submit
from harness.cluster.experiment import dashboard_of, finish, record_session
from harness.cluster.progress import BlockProgress
from harness.plan.planner import plan_for
from harness.run.runner import ExperimentResult, create_result, reopen_result
from harness.spec.experiment import ExperimentSpec
from harness.store.resultdir import atomic_write_json, campaign_form, utc_stamp


def _result_of(
    spec: ExperimentSpec, entry: dict[str, Any], output: Path, backend: str, argv: Any
) -> Any:
    """The experiment's result directory: the index's (resumed), else a new one."""
    plan = plan_for(spec)
    previous = entry.get("result_dir")
    if previous and Path(previous).is_dir():
        return reopen_result(spec, plan, Path(previous))
    return create_result(spec, plan, output, backend, argv)


def _close_entry(
    spec: ExperimentSpec, entry: dict[str, Any], result: Any, got: submit.Gathered
) -> None:
    """The index entry of an experiment whose blocks all came back (or failed)."""
    entry.update(serial._finished_fields(spec, ExperimentResult(result=result)))
    if got.failures or not result.read_manifest().get("finished"):
        entry.update(status="failed", error="; ".join(got.failures)[:300] or "unfinished")


def run_campaign_on_cluster(
    *,
    experiments_dir: Path,
    names: Sequence[str] | None,
    reps: int | None,
    form: str,
    options: submit.ClusterOptions,
    chapter: bool = False,
    output: Path,
    resume: Path | None = None,
    argv: Sequence[str] | None = None,
    client: Any = None,
) -> serial.CampaignSummary:
    """Run the experiments' blocks on the cluster at ``options.address`` (or ``client``)."""
    index_path, index = serial._open_index(resume, output, form, reps, options.backend, chapter)
    if resume is not None:
        form, reps = campaign_form(index), index["reps"]
        chapter = bool(index.get("chapter", False))
        names = [e["name"] for e in index["entries"]]
    specs = serial._load_specs(experiments_dir, names, form, reps, chapter)
    entries = {e["name"]: e for e in index["entries"]}
    for spec in specs:
        entries.setdefault(spec.name, {"name": spec.name, "status": "pending"})
    index["entries"] = [entries[s.name] for s in specs]
    atomic_write_json(index_path, index)
    progress = BlockProgress("campaign")
    own = client is None
    client = submit.connect(options.address) if own else client
    try:
        if dashboard_of(client):
            progress.note(f"dashboard: {dashboard_of(client)}")
        workers, hosts = submit.usable_workers(client, options.backend, progress.note)
        refused = len(workers) < len(client.scheduler_info(n_workers=-1)["workers"])
        futures: dict[Any, submit.Pending] = {}
        made: dict[str, tuple[ExperimentSpec, Any]] = {}
        total = done = 0
        for spec in specs:
            entry = entries[spec.name]
            if entry.get("status") == "finished":
                continue
            result = _result_of(spec, entry, output, options.backend, argv)
            entry.update(result_dir=str(result.path), status="running")
            atomic_write_json(index_path, index)
            plan = plan_for(spec)
            left = submit.blocks_left(plan, result, options.attempts)
            blocks = len({r.block for r in plan})
            total, done = total + blocks, done + blocks - len(left)
            chosen = workers if refused else None
            futures.update(submit.submit(client, spec, result, left, chosen, options))
            made[spec.name] = (spec, result)
        progress.start(total, done, str(index_path.parent))
        started, t0 = utc_stamp(), time.monotonic()
        got = submit.gather_blocks(client, futures, progress)
        for name, (_, result) in made.items():
            mine = got.get(name, submit.Gathered())
            span = max((float(r["arrived_s"]) for r in mine.records), default=0.0)
            record_session(
                result, hosts, options.address, started, span, mine.records, mine.failures
            )
        total_s = time.monotonic() - t0
    finally:
        progress.close()
        if own:
            client.close()
    for name, (spec, result) in made.items():
        finish(result, plan_for(spec), options.attempts, True, progress.note, spec.shares_host)
        _close_entry(spec, entries[name], result, got.get(name, submit.Gathered()))
        atomic_write_json(index_path, index)
    index.update(finished_utc=utc_stamp(), cluster_makespan_s=total_s)
    atomic_write_json(index_path, index)
    index.update(serial.reproduction_report(index_path.parent))
    atomic_write_json(index_path, index)
    return serial.CampaignSummary(
        index_path=index_path,
        entries=index["entries"],
        report_errors=serial.report_errors_of(index),
    )
