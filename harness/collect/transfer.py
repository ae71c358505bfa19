"""The row of an upload over two paths (TransferRecord, the dual topology): its time, what
each path carried, the failover's timeline, and its bound from docs/models.md section 12
(harness.bounds: split, duplicate, failover) with the outage where the run had it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import bounds
from harness.collect.rowparts import RowPart, read_run_records
from harness.store.files import FAILURES_FILE
from netem.topologyspec import Topology
from tbcore import kinds
from tbcore.records import RecordError, TransferRecord
from tbcore.settings import Settings


def path_rates(path: Topology) -> tuple[float, float, float | None]:
    """The upload rates of ``link`` and ``link_b``, and of the shared exit (None: none)."""
    a, b = path.edge("link").spec.up.rate_bps, path.edge("link_b").spec.up.rate_bps
    if a is None or b is None:
        raise RecordError("link", "two paths need an up rate on link and link_b for a bound")
    exit_bps = path.edge("exit_link").spec.up.rate_bps if "exit_link" in path.edge_names else None
    return a, b, exit_bps


def transfer_bound_s(
    settings: Settings,
    path: Topology,
    size: int,
    outage_at: float | None,
    down: Sequence[str] = (),
) -> float | None:
    """The upload's lower bound: the paths in proportion (split), the faster copy
    (duplicate; over the paths ``down`` left, None when they left none or took the shared
    exit), or the ideal continuation after the outage of ``link`` at ``outage_at`` seconds
    into the transfer (a failover)."""
    a, b, exit_bps = path_rates(path)
    carries = kinds.protocol(settings.protocol).upload_mode
    if carries is None:
        raise RecordError("protocol", f"{settings.protocol} carries no upload over two paths")
    mode = carries(settings)
    if down:
        live = [rate for rate, edge in ((a, "link"), (b, "link_b")) if edge not in down]
        if "exit_link" in down or not live:
            return None
        return bounds.duplicate_time_s(size, live, exit_bps)
    if outage_at is not None:
        at = max(0.0, outage_at)
        if mode == "duplicate":  # the surviving copy never shared the work
            return bounds.duplicate_failover_time_s(size, [a, b], at, 0, exit_bps)
        if mode == kinds.MIGRATE:  # one path until the outage, then the other
            return bounds.failover_time_s(size, [a], at, b, exit_bps)
        return bounds.failover_time_s(size, [a, b], at, b, exit_bps)
    if mode in ("single", kinds.MIGRATE):
        return bounds.split_time_s(size, [a], exit_bps)
    if mode == "duplicate":
        return bounds.duplicate_time_s(size, [a, b], exit_bps)
    return bounds.split_time_s(size, [a, b], exit_bps)


def transfer_part(
    settings: Settings,
    path: Topology,
    run_dir: Path,
    error: str | None,
    fired: Sequence[dict[str, Any]],
    clocks: Any = None,
) -> RowPart:
    """The transfer workload's columns (``clocks``: unused, a transfer is never traced)."""
    records, error = read_run_records(run_dir, TransferRecord, error, "transfer record")
    if not records:
        return RowPart({"up_bytes": settings.size_bytes or 0, "down_bytes": 0}, error or
                       "no transfer record", None, None, None)  # fmt: skip
    record = records[-1]
    down = drawn_down(run_dir) if settings.path_failures is not None else None
    if down is None:
        error = error or record.error
    out: dict[str, Any] = {
        "up_bytes": record.size_bytes,
        "down_bytes": 0,
        "requests": 1 if record.end_s is not None else 0,
        "total_s": record.total_s,
        "bytes_sent_app": record.bytes_sent,
        "split_fraction_link": (record.fractions or [None])[0],
    }
    outages = [f for f in fired if f.get("kind") == "outage" and "start_s" in f]
    outage_at = outages[0]["start_s"] - record.start_s if outages else None
    if settings.outage_at_s is not None:
        if outage_at is None:
            error = error or "the failover's outage was never given to the link"
        out["outage_after_start_s"] = outage_at
        for name in ("detected_s", "resumed_s"):
            value = getattr(record, name)
            if value is not None and outages:
                out[name.replace("_s", "_after_outage_s")] = value - outages[0]["start_s"]
    sha256_ok = record.sha256_ok
    if down is not None:  # drawn failures: an undelivered upload is the trial's outcome
        out.update(paths_down="+".join(down) or "none", delivered=record.end_s is not None)
        if record.end_s is None:
            sha256_ok = None
    bound = transfer_bound_s(settings, path, record.size_bytes, outage_at, down or ())
    out["bound_s"] = bound
    if record.total_s is not None and bound is not None:
        out["ratio"] = record.total_s / bound
        if outage_at is not None:
            out["recovery_s"] = record.total_s - bound
    return RowPart(out, error, record.start_s, record.end_s, sha256_ok)


def drawn_down(run_dir: Path) -> tuple[str, ...] | None:
    """The edges the run's path_failures drew down (failures.json, harness.run.failures);
    None when the run never got as far as drawing them."""
    where = run_dir / FAILURES_FILE
    if not where.is_file():
        return None
    data = json.loads(where.read_text(encoding="utf-8"))
    return tuple(str(edge) for edge in data.get("down", []))
