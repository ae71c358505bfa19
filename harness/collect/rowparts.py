"""How a run's client records become the workload's columns of its row, by record kind.

A workload names the records its client writes (``tbcore.kinds.WorkloadKind.records``);
the runner looks the builder up here instead of branching on workloads. A builder takes
``(settings, link_spec, run_dir, error, fired_events)`` and returns a :class:`RowPart`: the
columns (``total_s``, ``bound_s``, ``ratio``, bytes...), the run's error, the window of the
measured work on CLOCK_MONOTONIC (CPU, ACKs and validity are judged over it) and whether
every checksum matched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tbcore.records import Record, RecordError, read_jsonl


@dataclass
class RowPart:
    columns: dict[str, Any]
    error: str | None
    start_s: float | None
    end_s: float | None
    sha256_ok: bool | None


ROW_PARTS: dict[str, Callable[..., RowPart]] = {}


R = TypeVar("R", bound=Record)


def read_run_records(
    run_dir: Path, cls: type[R], error: str | None, what: str
) -> tuple[list[R], str | None]:
    """The run's records.jsonl as ``cls`` records, with the run's error: a file missing or
    unreadable leaves no records and, when the run had no error yet, the error ``no
    {what}: ...``."""
    try:
        return read_jsonl(run_dir / "records.jsonl", cls), error
    except (OSError, RecordError) as err:
        return [], error or f"no {what}: {err}"


def register_row_part(records: str, builder: Callable[..., RowPart]) -> None:
    if records in ROW_PARTS:
        raise ValueError(f"row part for {records!r} registered twice")
    ROW_PARTS[records] = builder
