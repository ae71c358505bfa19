"""The result directory of one experiment, written atomically.

Layout (docs/design.md, issue 5)::

    results/<experiment>/<UTC stamp>/
        manifest.json          the spec as given and resolved, plan, versions, environment
        runs.csv, runs.parquet one row per finished run (rebuilt after each run)
        runs/<run_id>/
            row.json           the run's row: written last, it marks the run finished
            events.jsonl       client and server events on one clock
            inflight.csv       sender samples
            client.pcapng, server.pcapng  the captures, TLS secrets inside (harness.run.capture)
            acks.csv           each ACK's arrival at the sender
            qlog/, keys.log
        report.md, plots/*.png

Every file is written to a temporary name in its directory, flushed and renamed, so a
reader (or a killed campaign) never sees half a file. ``runs.csv`` is derived from the
``row.json`` files, so it can always be rebuilt; a resumed campaign finds its finished runs
by their ``row.json`` and repeats none of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from harness.store.empty import empty_columns
from netem.topologyspec import Topology
from tbcore.errors import SpecError, clip
from tbcore.records import clean_json, mkstemp_beside
from tbcore.runrow import RunRow, run_columns

SCHEMA_VERSION = 2
"""Version of the directory layout (the rows carry their own: tbcore.runrow.RunRow)."""

RUN_COLUMNS: tuple[str, ...] = run_columns()
"""Columns of runs.csv, in order: the fields of :class:`tbcore.runrow.RunRow`."""

ROW_FILE = "row.json"
MANIFEST = "manifest.json"


def utc_stamp(now: datetime | None = None) -> str:
    """``20261202T154137Z``: sortable, no characters a shell or a file system minds."""
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = mkstemp_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


CAMPAIGN_FORMS = ("quick", "chapter", "full")
"""The forms a campaign runs each file in: ``[quick]`` (indicative), ``[chapter]`` (the
chapter's signed reproduction), the file as written."""


def campaign_form(index: dict[str, Any]) -> str:
    """The form a campaign index records (an index older than ``form`` has ``quick``)."""
    form = index.get("form")
    if form in CAMPAIGN_FORMS:
        return str(form)
    return "quick" if index.get("quick") else "full"


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(
        path, json.dumps(clean_json(data), indent=2, sort_keys=False, default=_json_default) + "\n"
    )


EMPTY_COLUMNS_FILE = "empty_columns.csv"
"""Beside runs.csv: every column no row filled, with why (harness.store.empty)."""


def atomic_write_frame(path: Path, frame: pd.DataFrame) -> None:
    """CSV or parquet by the suffix, atomically."""
    if path.suffix == ".parquet":
        data = frame.to_parquet(None, index=False)
    else:
        data = frame.to_csv(index=False).encode("utf-8")
    atomic_write_bytes(path, data)


MAX_SAME_STAMP = 1000
"""Result directories one experiment may start within one second (stamp-2 ... stamp-1000)."""


def _reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


@dataclass
class ResultDir:
    """One experiment's result directory."""

    path: Path

    @classmethod
    def create(cls, root: Path, experiment: str, stamp: str | None = None) -> ResultDir:
        """A new directory ``root/experiment/stamp`` (``stamp-2``, ``-3``... when taken),
        claimed with one ``mkdir``: of two runs started in the same second each gets its own
        (no check-then-create race). An unwritable ``root`` is a SpecError naming ``output``."""
        stamp = stamp or utc_stamp()
        if experiment in ("", ".", "..") or "/" in experiment or "\0" in experiment:
            raise SpecError("name", f"{clip(repr(experiment))} is not a directory's name")
        parent = Path(root) / experiment
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SpecError(
                "output", f"{clip(str(root))}: cannot create a result directory ({_reason(err)})"
            ) from None
        for suffix in range(1, MAX_SAME_STAMP + 1):
            path = parent / (stamp if suffix == 1 else f"{stamp}-{suffix}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            except OSError as err:
                raise SpecError(
                    "output", f"{clip(str(path))}: cannot create ({_reason(err)})"
                ) from None
            (path / "runs").mkdir()
            return cls(path)
        raise SpecError("output", f"{MAX_SAME_STAMP} result directories for stamp {stamp} exist")

    @classmethod
    def open(cls, path: Path) -> ResultDir:
        path = Path(path)
        if not (path / MANIFEST).is_file():
            raise SpecError("resume", f"{path} has no {MANIFEST}: not a result directory")
        check_layout(path)
        return cls(path)

    # --- manifest -----------------------------------------------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        atomic_write_json(self.manifest_path, {"schema_version": SCHEMA_VERSION, **manifest})

    def read_manifest(self) -> dict[str, Any]:
        return read_json_object(self.manifest_path, "manifest")

    def repair_tables(self) -> str | None:
        """runs.csv is derived from the runs' rows: when it does not parse, or names other
        runs than the rows, it is written again from them; the line that says so (None when
        it was whole)."""
        table = self.path / "runs.csv"
        if not table.exists() and not table.is_symlink():
            return None
        if table.is_symlink() or not table.is_file():
            raise SpecError("runs.csv", f"{table} is not a regular file; a result directory's is")
        rows = self.rows()
        try:
            found = pd.read_csv(table, usecols=["run_id"])["run_id"].astype(str).tolist()
            why = (
                None
                if sorted(found) == sorted(r["run_id"] for r in rows)
                else (f"names {len(found)} runs where {len(rows)} have rows")
            )
        except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as err:
            why = f"does not parse ({clip(str(err), 80)})"
        if why is None:
            return None
        self.write_tables()
        return f"{table} {why}: written again from the runs' rows"

    def update_manifest(self, **changes: Any) -> None:
        """Read, change and write the manifest as one step: the blocks of a sharing
        experiment (harness.campaign.lanes) note their environments from processes of their
        own, and an update made between another's read and write would be lost."""
        with self._locked():
            manifest = self.read_manifest()
            manifest.update(changes)
            atomic_write_json(self.manifest_path, manifest)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive ``flock`` on the directory itself (no lock file beside the results;
        the kernel drops it with its holder)."""
        handle = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)

    # --- runs ---------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> Path:
        if "/" in run_id or run_id.startswith("."):
            raise SpecError("run_id", f"{run_id!r} is not a plain name")
        return self.path / "runs" / run_id

    def fresh_run_dir(self, run_id: str) -> Path:
        """An empty directory for a run; leftovers of an unfinished attempt are removed."""
        path = self.run_dir(run_id)
        if (path / ROW_FILE).exists():
            raise SpecError("run_id", f"{run_id} already finished; it is never run twice")
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def discard_run(self, run_id: str) -> None:
        """Forget a run (its directory goes), so that ``--resume`` makes it again."""
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)
        self.write_tables()

    def finished(self) -> set[str]:
        runs = self.path / "runs"
        if not runs.is_dir():
            return set()
        return {p.name for p in runs.iterdir() if (p / ROW_FILE).is_file()}

    def save_row(self, row: RunRow) -> None:
        """Mark a run finished with its row, then rebuild the tables."""
        atomic_write_json(self.run_dir(row.run_id) / ROW_FILE, row.to_dict())
        self.write_tables()

    def rows(self) -> list[dict[str, Any]]:
        """Every finished run's row (checked against :class:`RunRow`), in plan order."""
        out = []
        for run_id in sorted(self.finished()):
            where = f"{run_id}/{ROW_FILE}"
            data = read_json_object(self.run_dir(run_id) / ROW_FILE, where)
            out.append(RunRow.from_dict(data, where).to_dict())
        out.sort(key=lambda r: (r.get("seq", 0), r["run_id"]))
        return out

    def frame(self) -> pd.DataFrame:
        return rows_frame(self.rows())

    def table_frame(self) -> pd.DataFrame:
        """The runs as runs.csv has them (the table users read, edit and share) where it
        parses and names the runs that have rows; else the rows themselves. A report rebuilt
        from a directory follows this table."""
        table = self.path / "runs.csv"
        rows = self.rows()
        if not table.is_file() or table.stat().st_size > MAX_TABLE_BYTES:
            return rows_frame(rows)
        try:
            frame = pd.read_csv(table)
        except (ValueError, UnicodeDecodeError, pd.errors.ParserError):
            return rows_frame(rows)
        if "run_id" not in frame or sorted(frame["run_id"].astype(str)) != sorted(
            r["run_id"] for r in rows
        ):
            return rows_frame(rows)
        return frame

    def write_tables(self) -> pd.DataFrame:
        """runs.csv and runs.parquet: every row, with the columns its experiment's kinds of
        run fill (the manifest's ``column_groups``; all of them when it names none), and every
        column any row filled."""
        frame = self.frame()
        written = frame
        manifest = self.read_manifest() if self.manifest_path.is_file() else {}
        groups = manifest.get("column_groups")
        if isinstance(groups, list):
            # a column some row filled stays whatever the groups say (a manifest written
            # before a group was split names the older group): the groups drop empty ones only
            kept = set(run_columns(groups)) | {c for c in frame.columns if frame[c].notna().any()}
            written = frame[[c for c in frame.columns if c in kept or c not in RUN_COLUMNS]]
        atomic_write_frame(self.path / "runs.csv", written)
        atomic_write_frame(self.path / "runs.parquet", written)
        self.write_empty_columns(written)
        self.write_run_tables()
        return frame

    def write_empty_columns(self, table: pd.DataFrame | None = None) -> None:
        """empty_columns.csv: the columns of runs.csv (``table``; default: as
        :meth:`table_frame` reads it) no row filled, each with why its runs give
        (harness.store.empty): an empty cell cannot say it."""
        table = self.table_frame() if table is None else table
        empty = pd.DataFrame(empty_columns(table), columns=["column", "reason"])
        atomic_write_frame(self.path / EMPTY_COLUMNS_FILE, empty)

    PER_RUN_TABLES = ("rounds.csv", "round_trace.csv", "cross.csv")
    """Tables a run may write in its directory (the agent's rounds, each round's share of a
    traced uplink, the competing flows' rates): gathered beside runs.csv with a run_id
    column, in plan order."""

    def write_run_tables(self) -> None:
        for name in self.PER_RUN_TABLES:
            parts = []
            for run_id in sorted(self.finished()):
                path = self.run_dir(run_id) / name
                if path.is_file() and path.stat().st_size > 0:
                    part = pd.read_csv(path)
                    part.insert(0, "run_id", run_id)
                    parts.append(part)
            if parts:
                atomic_write_frame(self.path / name, pd.concat(parts, ignore_index=True))

    def level_paths(self) -> dict[str, Topology]:
        """Each level's path as the experiment file set it (the manifest's resolved levels),
        every edge a LinkSpec: what the report's models are computed on."""
        out: dict[str, Topology] = {}
        for level in self.read_manifest().get("resolved", {}).get("levels", []):
            if isinstance(level, dict) and isinstance(level.get("topology"), dict):
                out[str(level["name"])] = Topology.from_dict(level["topology"])
        return out

    @property
    def plots_dir(self) -> Path:
        return self.path / "plots"


MAX_TABLE_BYTES = 256 << 20
"""A runs.csv above 256 MiB is not read as the table (the rows are)."""
MAX_JSON_BYTES = 64 << 20
"""A manifest or a row above 64 MiB is refused unread (a manifest is a few kB)."""
LAYOUT = (("runs", "directory"), (MANIFEST, "file"), ("report.md", "file"), ("plots", "directory"))
"""What a result directory's own entries are, when they exist (never symlinks)."""


def read_json_object(path: Path, field: str) -> dict[str, Any]:
    """A JSON object from a regular file of bounded size; SpecError naming ``field`` for
    anything else (not a file, too large, not UTF-8, not JSON, nested past Python's
    recursion limit, or JSON that is not an object)."""
    try:
        if not path.is_file():
            raise SpecError(field, f"{path}: not a regular file")
        if path.stat().st_size > MAX_JSON_BYTES:
            raise SpecError(field, f"{path}: above {MAX_JSON_BYTES} bytes")
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecError(field, f"{path}: {err}") from None
    except RecursionError:
        raise SpecError(field, f"{path}: JSON nested too deep") from None
    if not isinstance(data, dict):
        raise SpecError(field, f"{path}: a JSON {type(data).__name__}, not an object")
    return data


def check_layout(path: Path) -> None:
    """The result directory's own entries are what the testbed writes there: a symlink
    (``runs -> /``, a loop) or an entry of the other kind (``report.md`` a directory,
    ``plots`` a file) is refused in one line, not read through or written over."""
    for name, kind in LAYOUT:
        entry = path / name
        if entry.is_symlink():
            raise SpecError(name, f"{entry} is a symlink; a result directory has none")
        if not entry.exists():
            continue
        if (kind == "directory") != entry.is_dir():
            raise SpecError(name, f"{entry} is not a {kind}")


def rows_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows -> a frame with :data:`RUN_COLUMNS` first (missing ones as empty)."""
    frame = pd.DataFrame(list(rows))
    missing = [c for c in RUN_COLUMNS if c not in frame.columns]
    if missing:
        empty = pd.DataFrame(pd.NA, index=frame.index, columns=missing, dtype=object)
        frame = pd.concat([frame, empty], axis=1)
    extra = [c for c in frame.columns if c not in RUN_COLUMNS]
    frame = frame[[*RUN_COLUMNS, *extra]]
    # parquet needs one type per column: anything that is not numeric or bool becomes text
    for column in frame.columns:
        if frame[column].dtype == object:
            values = frame[column].dropna()
            if not values.map(lambda v: isinstance(v, (bool, int, float))).all():
                frame[column] = frame[column].map(
                    lambda v: None if v is None or v is pd.NA else str(v)
                )
    return frame


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    text = "".join(json.dumps(clean_json(dict(r)), default=_json_default) + "\n" for r in records)
    atomic_write_text(path, text)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a killed writer) is skipped, others fail."""
    out = []
    if not path.exists():
        return out
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if index == len(lines) - 1:
                continue
            raise SpecError(f"{path.name}:{index + 1}", "not a JSON line") from None
    return out
