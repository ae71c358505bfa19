"""A block's run directories as one compressed archive (what a worker returns), and their
arrival in the client's one result directory: all of the block's runs or none.

The archive holds ``runs/<run_id>/...`` for the block's runs only (their re-runs included).
:func:`unpack_block` extracts it beside the result's ``runs/`` (a hidden staging directory
on the same file system), checks that every member belongs to the block, and only then
renames each run directory into place; a staging directory that a killed client left is
removed by the next :func:`unpack_block` or ``--resume`` (harness.cluster.submit).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from collections.abc import Collection
from pathlib import Path, PurePosixPath

from harness.plan.planner import planned_id
from tbcore.errors import SpecError

STAGING_PREFIX = ".incoming-block-"
"""Staging directories inside a result directory (removed once their block is in place)."""

COMPRESS_LEVEL = 6
"""gzip's default trade (RFC 1952 ``XFL`` 0): pcaps and CSV shrink several-fold."""


def pack_runs(result_dir: Path, run_ids: Collection[str]) -> bytes:
    """``result_dir/runs/<id>`` for each of ``run_ids`` as a gzip'd tar, in memory."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=COMPRESS_LEVEL) as tar:
        for run_id in sorted(run_ids):
            tar.add(result_dir / "runs" / run_id, arcname=f"runs/{run_id}")
    return buffer.getvalue()


def _member_run(name: str) -> str:
    """The run id of an archive member (``runs/<id>/...``); SpecError for anything else."""
    parts = PurePosixPath(name).parts
    if len(parts) < 2 or parts[0] != "runs" or parts[1] in ("", ".", ".."):
        raise SpecError("archive", f"member {name!r} is not under runs/<run_id>/")
    return parts[1]


def unpack_block(
    data: bytes, result_dir: Path, block: int, planned_ids: Collection[str]
) -> list[str]:
    """Put a block's archive into ``result_dir/runs``; returns its run ids. Every member must
    be a run (or a re-run) of ``planned_ids``: anything else refuses the whole archive."""
    staging = result_dir / f"{STAGING_PREFIX}{block}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            runs = {_member_run(m.name) for m in members}
            stray = sorted(r for r in runs if planned_id(r) not in planned_ids)
            if stray:
                raise SpecError("archive", f"run {stray[0]!r} is not of block {block}")
            tar.extractall(staging, filter="data")
        for run_id in sorted(runs):
            target = result_dir / "runs" / run_id
            if target.exists():  # a partial block a killed client left: replaced whole
                shutil.rmtree(target)
            os.replace(staging / "runs" / run_id, target)
        return sorted(runs)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def remove_staging(result_dir: Path) -> None:
    """Staging directories a killed client left."""
    for path in result_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(path, ignore_errors=True)
