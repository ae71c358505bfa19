"""How a run's client records become the workload's columns of its row, by record kind.

A workload names the records its client writes (``tbcore.kinds.WorkloadKind.records``);
the collection looks the builder up in ``harness.collect.row.ROW_PARTS`` instead of
branching on workloads. A builder takes ``(settings, path, run_dir, error, fired_events,
clocks)`` and returns a :class:`RowPart`: the
columns (``total_s``, ``bound_s``, ``ratio``, bytes...), the run's error, the window of the
measured work on CLOCK_MONOTONIC (CPU, ACKs and validity are judged over it) and whether
every checksum matched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.store.files import RECORDS_FILE
from tbcore.records import Record, RecordError, read_jsonl


@dataclass
class RowPart:
    columns: dict[str, Any]
    error: str | None
    start_s: float | None
    end_s: float | None
    sha256_ok: bool | None


R = TypeVar("R", bound=Record)


def read_run_records(
    run_dir: Path, cls: type[R], error: str | None, what: str
) -> tuple[list[R], str | None]:
    """The run's records.jsonl as ``cls`` records, with the run's error: a file missing or
    unreadable leaves no records and, when the run had no error yet, the error ``no
    {what}: ...``."""
    try:
        return read_jsonl(run_dir / RECORDS_FILE, cls), error
    except (OSError, RecordError) as err:
        return [], error or f"no {what}: {err}"
