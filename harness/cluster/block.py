"""One block of an experiment on one host: the function a Dask worker calls.

A block is one planned run of every level in the planner's order for that block, with the
re-runs of its invalid runs after the others (harness.run.runner.make_block): made on one
host, so every arm difference inside it is a within-host difference. The worker's task
(:func:`run_block`) starts the block in a child process of its own (``python -m
harness.cluster.block JOB``): the runs need a main thread (signals, the emulator's fork) and
a Dask task runs in a worker's thread pool. The child makes its own link (its own
namespaces and emulator), takes the host's run lock for each run as ``testbed run`` does,
writes into a temporary directory and leaves the block's run directories as one archive.
The child dies with the worker (``PR_SET_PDEATHSIG``): a killed worker leaves no block
running, and the scheduler gives the block to another worker; nothing of a block that did
not finish reaches the client.

A host runs one block at a time (:data:`BLOCK_LOCK_SUFFIX`): a block whose client went away
still finishes, and the next one waits for it instead of interleaving its runs. Blocks of
experiments that share the host (harness.run.lock) run beside each other, never beside
another's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.store.resultdir import atomic_write_bytes, utc_stamp
from tbcore import stopping
from tbcore.errors import SpecError, clip

BLOCK_LOCK_SUFFIX = ".block"
"""Beside the host's run lock (harness.run.lock): held for a whole block."""

JOB_FILE = "job.pickle"
RESULT_FILE = "result.pickle"
ERROR_TAIL_CHARS = 2000
"""The end of a failed block's stderr that its error carries back to the client."""


@dataclass(frozen=True)
class BlockJob:
    """What a worker needs to make one block."""

    spec: bytes
    """The experiment (harness.spec.experiment.ExperimentSpec), pickled: the worker needs
    neither the file nor its traces."""
    block: int
    runs: tuple[dict[str, Any], ...]
    """The block's planned runs (PlannedRun.to_dict), in their order."""
    backend: str
    attempts: int
    version: str
    """The client's testbed version: a worker with another refuses the block."""


@dataclass(frozen=True)
class BlockResult:
    """A finished block, as the worker returns it."""

    block: int
    host: str
    archive: bytes
    """The block's run directories (harness.cluster.archive)."""
    run_ids: list[str]
    valid: int
    """Its valid runs (warm-ups included)."""
    started_utc: str
    finished_utc: str
    wall_s: float
    """From the child's start to its archive (the link's set-up included)."""
    lock_wait_s: float
    """How long the block waited for another block on its host."""
    environments: list[dict[str, Any]] = field(default_factory=list)
    """The host's environment as its runs saw it (the manifest's ``environments``)."""
    worker: str | None = None
    """The Dask worker that made it (its address)."""


class BlockFailed(RuntimeError):
    """A block's child ended without a finished block (its stderr's end in the message)."""


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the worker's thread that started it ends (a
    killed worker): the runs unwind and take their link down."""
    stopping.die_with_parent(signal.SIGTERM)


def run_block(job: BlockJob) -> BlockResult:
    """The worker's task: make the block in a child process, return its result."""
    workdir = Path(tempfile.mkdtemp(prefix="tb-block-"))
    try:
        atomic_write_bytes(workdir / JOB_FILE, pickle.dumps(job))
        with open(workdir / "stderr.log", "wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-m", "harness.cluster.block", str(workdir / JOB_FILE)],
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                preexec_fn=_die_with_parent,
            )
            code = child.wait()
        if code != 0 or not (workdir / RESULT_FILE).is_file():
            tail = (workdir / "stderr.log").read_text(errors="replace")[-ERROR_TAIL_CHARS:]
            raise BlockFailed(f"block {job.block}: exit {code}: {clip(tail.strip())}")
        done: BlockResult = pickle.loads((workdir / RESULT_FILE).read_bytes())
        return replace(done, worker=_worker_address())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _worker_address() -> str | None:
    """The address of the Dask worker running this task (None outside one)."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return None


@contextlib.contextmanager
def one_block_at_a_time(shared: bool = False) -> Iterator[float]:
    """Hold the host's block lock (beside its run lock); yields the seconds waited.
    ``shared``: a sharing experiment's block, beside other such blocks (harness.run.lock: its
    runs then take a sharing slot each)."""
    from harness.run.lock import lock_path

    path = lock_path()
    if path is None:
        yield 0.0
        return
    block_path = path.with_name(path.name + BLOCK_LOCK_SUFFIX)
    block_path.parent.mkdir(parents=True, exist_ok=True)
    with open(block_path, "a+", encoding="ascii") as handle:
        start = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield time.monotonic() - start
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def make_block(job: BlockJob, workdir: Path) -> BlockResult:
    """The child's work: the block's runs into ``workdir/out``, then their archive."""
    from harness import __version__
    from harness.cluster.archive import pack_runs
    from harness.plan.planner import PlannedRun, plan_for
    from harness.run.environment import host_label
    from harness.run.runner import RunOptions, create_result
    from harness.run.runner import make_block as make_runs

    if job.version != __version__:
        raise SpecError("cluster", f"testbed {__version__} here, {job.version} on the client")
    spec = pickle.loads(job.spec)
    runs = [PlannedRun(**r) for r in job.runs]
    planned = [r for r in plan_for(spec) if r.block == job.block]
    if [r.run_id for r in planned] != [r.run_id for r in runs]:
        raise SpecError("cluster", f"block {job.block} differs from this host's plan")
    wall0, started = time.monotonic(), utc_stamp()
    with one_block_at_a_time(spec.shares_host) as waited:
        result = create_result(spec, runs, workdir / "out", job.backend, argv=None)
        options = RunOptions(
            backend=job.backend,
            link_name=f"dk{os.getpid() % 100_000_000}",
            attempts=job.attempts,
            log=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
        rows = make_runs(spec, result, runs, options)
    run_ids = sorted(result.finished())
    return BlockResult(
        block=job.block,
        host=host_label(),
        archive=pack_runs(result.path, run_ids),
        run_ids=run_ids,
        valid=sum(1 for row in rows if row.get("valid")),
        started_utc=started,
        finished_utc=utc_stamp(),
        wall_s=time.monotonic() - wall0,
        lock_wait_s=waited,
        environments=result.read_manifest().get("environments", []),
    )


def main(argv: list[str]) -> int:
    """``python -m harness.cluster.block JOB``: SIGTERM unwinds (the link comes down)."""

    parent = os.getppid()
    stopping.install([signal.SIGTERM])
    job_file = Path(argv[0])
    job: BlockJob = pickle.loads(job_file.read_bytes())
    try:
        out = make_block(job, job_file.parent)
    except BaseException:
        # nothing of an unfinished block is kept; with the worker gone (PR_SET_PDEATHSIG
        # brought us here), nobody else removes its directory
        shutil.rmtree(job_file.parent / "out", ignore_errors=True)
        if os.getppid() != parent:
            shutil.rmtree(job_file.parent, ignore_errors=True)
        raise
    atomic_write_bytes(job_file.parent / RESULT_FILE, pickle.dumps(out))
    return 0


if __name__ == "__main__":  # through the module's own name: pickles name its classes by it
    from harness.cluster.block import main as block_main

    sys.exit(block_main(sys.argv[1:]))
