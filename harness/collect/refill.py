"""Columns a newer collection derives, added to rows made before it (``testbed report DIR
--recollect``).

Each run's row is collected again from the files its run left (harness.collect.row), and
only the columns the stored row lacks are taken from it: a value the run was judged on
(its times, validity, disturbance, attempts) never changes, since what the watchers saw
while it ran is not in its files. A run whose files no longer give a row keeps its row and
is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.collect.row import collect_run
from harness.store.resultdir import ROW_FILE, ResultDir, atomic_write_json
from tbcore.runrow import RunRow


@dataclass
class Refilled:
    """What :func:`refill` did: rows that gained columns, the columns, runs it could not
    collect (run id: reason)."""

    rows: int = 0
    columns: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        gained = ", ".join(sorted(self.columns)) or "none"
        text = f"{self.rows} rows gained columns ({gained})"
        if self.failed:
            first = next(iter(self.failed.items()))
            text += f"; {len(self.failed)} runs not collected (first: {first[0]}: {first[1]})"
        return text


def missing_columns(stored: dict, collected: dict) -> dict:
    """The collected values of the columns ``stored`` has no value for."""
    return {
        key: value
        for key, value in collected.items()
        if value is not None and stored.get(key) is None
    }


def refill(result: ResultDir, collect: Callable[[Path], RunRow] | None = None) -> Refilled:
    """Add the columns a collection of each run's files gives and its row lacks; the tables
    are rewritten once at the end. ``collect``: a run directory's row (default: this
    version's collection)."""
    collect = collect or (lambda run_dir: collect_run(run_dir).row)
    done = Refilled()
    for stored in result.rows():
        run_id = stored["run_id"]
        run_dir = result.run_dir(run_id)
        try:
            collected = collect(run_dir).to_dict()
        except Exception as err:  # named in the summary, the row kept
            done.failed[run_id] = f"{type(err).__name__}: {err}"[:200]
            continue
        gained = missing_columns(stored, collected)
        if not gained:
            continue
        row = RunRow.from_dict({**stored, **gained}, f"{run_id}/{ROW_FILE}")
        atomic_write_json(run_dir / ROW_FILE, row.to_dict())
        done.rows += 1
        done.columns.update(gained)
    if done.rows:
        result.write_tables()
    return done
