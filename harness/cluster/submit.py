"""The client of a cluster run: the plan's blocks as Dask tasks, their archives into one
result directory.

Each block not yet made is submitted as one task (harness.cluster.block.run_block) that
needs the workers' ``testbed`` resource: a worker advertises one (``dask worker
--resources testbed=1``), so a host makes one block at a time, and the scheduler's own
retry gives a block whose worker died to another worker (Dask's ``allowed-failures``).
Nothing here schedules, retries or moves bytes: Dask does.

A block is made when none of its planned runs has an attempt left to make
(harness.plan.planner.remaining); ``--resume`` removes whatever a block not made has in the
directory (what a killed client had begun to unpack) and submits it whole again, so no
partial block is kept and none is made twice.
"""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import __version__
from harness.cluster import archive
from harness.cluster.block import BlockJob, BlockResult, run_block
from harness.cluster.hosts import check_host
from harness.cluster.progress import BlockProgress
from harness.plan.planner import DEFAULT_ATTEMPTS, Outcome, PlannedRun, planned_id, remaining
from harness.spec.experiment import ExperimentSpec
from harness.store.resultdir import ResultDir
from tbcore.errors import SpecError, clip

RESOURCE = "testbed"
"""The worker resource a block needs (one per host: ``dask worker --resources testbed=1``)."""

CONNECT_TIMEOUT_S = 30.0
"""How long the client waits for the scheduler at ``--cluster ADDRESS``."""


@dataclass(frozen=True)
class ClusterOptions:
    """How a cluster run is made."""

    address: str
    """The scheduler (``tcp://host:8786``), or a running ``distributed.Client``'s cluster."""
    backend: str = "auto"
    attempts: int = DEFAULT_ATTEMPTS


def connect(address: str) -> Any:
    """A ``distributed.Client`` of the scheduler at ``address`` (SpecError when none
    answers)."""
    try:
        from distributed import Client
    except ImportError:
        raise SpecError(
            "cluster", "needs the distributed package (harness/install.sh installs it)"
        ) from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as err:
        raise SpecError("cluster", f"no scheduler at {address}: {clip(str(err))}") from None


def usable_workers(
    client: Any, backend: str, log: Callable[[str], None]
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The workers that may get blocks, and every checked host's fingerprint; a worker that
    cannot run the testbed (or offers no ``testbed`` resource) is named in one line."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    prints = client.run(check_host, __version__, backend)
    good: list[str] = []
    hosts: dict[str, dict[str, Any]] = {}
    for address in sorted(workers):
        fingerprint = prints.get(address) or {"host": address, "problems": ["did not answer"]}
        problems = list(fingerprint.get("problems") or [])
        if not workers[address].get("resources", {}).get(RESOURCE):
            problems.append(f"offers no {RESOURCE} resource (dask worker --resources {RESOURCE}=1)")
        hosts[str(fingerprint["host"])] = fingerprint
        if problems:
            log(f"host {fingerprint['host']} ({address}) gets no work: {'; '.join(problems)}")
        else:
            good.append(address)
    if not good:
        raise SpecError("cluster", f"no worker at {client.scheduler.address} can run the testbed")
    return good, hosts


def blocks_left(
    plan: Sequence[PlannedRun], result: ResultDir, attempts: int
) -> dict[int, list[PlannedRun]]:
    """The blocks still to make (their planned runs by block); what a block not made left
    in the directory goes."""
    archive.remove_staging(result.path)
    outcomes = {r["run_id"]: Outcome.of_row(r) for r in result.rows()}
    todo = {run.planned_id for run in remaining(plan, outcomes, attempts)}
    blocks: dict[int, list[PlannedRun]] = {}
    for run in plan:
        blocks.setdefault(run.block, []).append(run)
    left = {n: runs for n, runs in blocks.items() if any(r.run_id in todo for r in runs)}
    ids = {r.run_id for runs in left.values() for r in runs}
    runs_dir = result.path / "runs"
    for path in sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []:
        if planned_id(path.name) in ids:
            result.discard_run(path.name)
    return left


@dataclass(frozen=True)
class Pending:
    """A submitted block: where its runs go."""

    experiment: str
    result: ResultDir
    block: int
    run_ids: frozenset[str]
    """Its planned runs (its archive may hold nothing else)."""


def submit(
    client: Any,
    spec: ExperimentSpec,
    result: ResultDir,
    blocks: dict[int, list[PlannedRun]],
    workers: list[str] | None,
    options: ClusterOptions,
) -> dict[Any, Pending]:
    """One task per block, each needing one ``testbed`` resource; futures -> block."""
    data = pickle.dumps(spec)
    futures = {}
    for block, runs in sorted(blocks.items()):
        job = BlockJob(
            spec=data,
            block=block,
            runs=tuple(r.to_dict() for r in runs),
            backend=options.backend,
            attempts=options.attempts,
            version=__version__,
        )
        future = client.submit(
            run_block,
            job,
            key=f"tb-{spec.name}-block-{block}-{uuid.uuid4().hex[:8]}",
            resources={RESOURCE: 1},
            workers=workers,
            allow_other_workers=False,
            pure=False,
        )
        ids = frozenset(r.run_id for r in runs)
        futures[future] = Pending(spec.name, result, block, ids)
    return futures


def block_record(done: BlockResult, arrived_s: float) -> dict[str, Any]:
    """What the manifest keeps of a finished block (its ``cluster.blocks`` entry)."""
    return {
        "block": done.block,
        "host": done.host,
        "worker": done.worker,
        "runs": done.run_ids,
        "valid": done.valid,
        "started_utc": done.started_utc,
        "finished_utc": done.finished_utc,
        "wall_s": done.wall_s,
        "lock_wait_s": done.lock_wait_s,
        "arrived_s": arrived_s,
        "archive_bytes": len(done.archive),
    }


def planned_makespan_s(walls_s: Sequence[float], hosts: int) -> float | None:
    """The makespan the blocks' work allows on ``hosts`` hosts: their wall times spread
    evenly, never below the longest block (the lower bound of any schedule of whole
    blocks)."""
    if not walls_s or hosts < 1:
        return None
    return max(sum(walls_s) / hosts, max(walls_s))


@dataclass
class Gathered:
    """What came back of one experiment's blocks."""

    records: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def gather_blocks(
    client: Any, futures: dict[Any, Pending], progress: BlockProgress
) -> dict[str, Gathered]:
    """Each block's archive into its result directory as it arrives (the manifest records
    it); by experiment, the block records and the failures (one line each)."""
    from distributed import as_completed

    t0 = time.monotonic()
    out: dict[str, Gathered] = {p.experiment: Gathered() for p in futures.values()}
    many = len(out) > 1
    for future in as_completed(list(futures), loop=client.loop):
        pending = futures[future]
        mine = out[pending.experiment]
        label = f"{pending.experiment} block {pending.block}" if many else f"block {pending.block}"
        if future.status != "finished":
            error = future.exception()
            mine.failures.append(f"{label}: {type(error).__name__}: {clip(str(error))}")
            progress.note(mine.failures[-1])
            continue
        done: BlockResult = future.result()
        archive.unpack_block(done.archive, pending.result.path, pending.block, pending.run_ids)
        record = block_record(done, time.monotonic() - t0)
        mine.records.append(record)
        _record_block(pending.result, record, done.environments)
        future.release()
        progress.block_done(label, done.host, len(done.run_ids), done.valid, done.wall_s)
    return out


def _record_block(result: ResultDir, record: dict[str, Any], envs: list[dict[str, Any]]) -> None:
    cluster = result.read_manifest().get("cluster", {})
    cluster.setdefault("blocks", {})[str(record["block"])] = record
    host_envs = cluster.setdefault("environments", {})
    if envs and record["host"] not in host_envs:
        host_envs[record["host"]] = envs[0]
    result.update_manifest(cluster=cluster)
    result.write_tables()
