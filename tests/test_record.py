"""The result directory: layout, atomic writes, finished runs, tables."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from harness.store.resultdir import (
    RUN_COLUMNS,
    ResultDir,
    atomic_write_frame,
    atomic_write_text,
    read_jsonl,
    utc_stamp,
    write_jsonl,
)
from tbcore.errors import SpecError
from tbcore.records import RecordError
from tbcore.runrow import RunRow


def test_create_makes_experiment_and_stamp_directories(tmp_path: Path) -> None:
    one = ResultDir.create(tmp_path, "connection", stamp="20261202T000000Z")
    two = ResultDir.create(tmp_path, "connection", stamp="20261202T000000Z")
    assert one.path == tmp_path / "connection" / "20261202T000000Z"
    assert two.path != one.path
    assert (one.path / "runs").is_dir()
    assert len(utc_stamp()) == len("20261202T000000Z")


@pytest.mark.parametrize("name", ["..", ".", "", "a/b"])
def test_create_refuses_a_name_that_is_not_one_directory(tmp_path: Path, name: str) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(SpecError, match=r"^name: "):
        ResultDir.create(tmp_path / "out", name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing beside OUTPUT
    assert not any((tmp_path / "out").iterdir())


def test_manifest_round_trip_and_open(tmp_path: Path) -> None:
    result = ResultDir.create(tmp_path, "x")
    result.write_manifest({"plan": [1, 2], "nan": float("nan")})
    data = json.loads((result.path / "manifest.json").read_text())
    assert data["schema_version"] >= 1 and data["nan"] is None
    result.update_manifest(finished=True)
    assert ResultDir.open(result.path).read_manifest()["finished"] is True
    with pytest.raises(SpecError) as info:
        ResultDir.open(tmp_path)
    assert info.value.field == "resume"


def row(**values: object) -> RunRow:
    plan = dict(run_id="0000-a-r0", seq=0, block=0, position=0, level="a", rep=0)
    return RunRow(**{**plan, "warmup": False, "link_seed": 1, **values})


def test_a_row_with_an_undeclared_or_missing_column_fails_loudly(tmp_path: Path) -> None:
    result = ResultDir.create(tmp_path, "x")
    result.write_manifest({})
    result.fresh_run_dir("0000-a-r0")
    result.save_row(row(total_s=0.25))
    path = result.run_dir("0000-a-r0") / "row.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "extra_column": 1}))
    with pytest.raises(RecordError, match="extra_column: unknown field"):
        result.rows()
    del data["total_s"]
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match="total_s: missing"):
        result.rows()


def test_a_run_is_finished_only_when_its_row_is_saved(tmp_path: Path) -> None:
    result = ResultDir.create(tmp_path, "x")
    result.write_manifest({})
    run = result.fresh_run_dir("0000-a-r0")
    (run / "partial.bin").write_bytes(b"half")
    assert result.finished() == set()
    # an unfinished attempt is cleared when the run is made again
    run = result.fresh_run_dir("0000-a-r0")
    assert not (run / "partial.bin").exists()
    result.save_row(row(run_id="0000-a-r0", seq=0, level="a", total_s=0.25))
    assert result.finished() == {"0000-a-r0"}
    with pytest.raises(SpecError):
        result.fresh_run_dir("0000-a-r0")


def test_tables_have_the_issue_columns_first_and_agree(tmp_path: Path) -> None:
    result = ResultDir.create(tmp_path, "x")
    result.write_manifest({})
    for seq, level in enumerate(["a", "b"]):
        result.fresh_run_dir(f"000{seq}-{level}-r0")
        result.save_row(
            row(
                run_id=f"000{seq}-{level}-r0",
                seq=seq,
                level=level,
                total_s=0.2 + seq,
                valid=seq == 0,
                invalid_reason=None if seq == 0 else "cpu: server 97 %",
            )
        )
    csv = pd.read_csv(result.path / "runs.csv")
    parquet = pd.read_parquet(result.path / "runs.parquet")
    assert list(csv.columns) == list(RUN_COLUMNS)
    assert set(csv["schema"]) == {RunRow.schema_tag()}
    assert list(csv["level"]) == ["a", "b"] == list(parquet["level"])
    assert list(parquet["invalid_reason"])[1] == "cpu: server 97 %"
    for column in (
        "run_id",
        "seq",
        "level",
        "rep",
        "protocol",
        "connection",
        "workload",
        "up_bytes",
        "down_bytes",
        "rtt_s",
        "loss",
        "up_bps",
        "down_bps",
        "handshake_s",
        "ttfb_s",
        "total_s",
        "bound_s",
        "ratio",
        "retransmits",
        "acks",
        "valid",
        "invalid_reason",
    ):
        assert column in RUN_COLUMNS


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    target = tmp_path / "a" / "file.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]


def test_written_files_are_readable_by_others_as_open_makes_them(tmp_path: Path) -> None:
    """./results is written by the container's root and read by the lab user: 0644 under
    umask 022, as open() would make it, not mkstemp's 0600."""
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "report.md", "x")
        frame = pd.DataFrame({"a": [1]})
        atomic_write_frame(tmp_path / "runs.csv", frame)
        atomic_write_frame(tmp_path / "runs.parquet", frame)
        os.umask(0o077)
        atomic_write_text(tmp_path / "private.md", "x")
    finally:
        os.umask(old)
    for name in ("report.md", "runs.csv", "runs.parquet"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    assert stat.S_IMODE((tmp_path / "private.md").stat().st_mode) == 0o600


def test_jsonl_skips_only_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    write_jsonl(path, [{"t": 1.0}, {"t": 2.0}])
    assert [r["t"] for r in read_jsonl(path)] == [1.0, 2.0]
    path.write_text('{"t": 1}\n{"t": 2')
    assert read_jsonl(path) == [{"t": 1}]
    path.write_text('{"t": 1\n{"t": 2}\n')
    with pytest.raises(SpecError):
        read_jsonl(path)
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_run_ids_must_be_plain_names(tmp_path: Path) -> None:
    result = ResultDir.create(tmp_path, "x")
    with pytest.raises(SpecError):
        result.run_dir("../evil")


def test_the_groups_drop_empty_columns_but_never_a_filled_one(tmp_path: Path) -> None:
    """A manifest from before a group was split (``trace`` once held both trace positions)
    names the older group: the filled position stays, the empty grouped columns go."""
    result = ResultDir.create(tmp_path, "x")
    result.write_manifest({"column_groups": ["trace"]})
    result.fresh_run_dir("0000-a-r0")
    result.save_row(row(run_id="0000-a-r0", seq=0, level="a", trace_position_up_s=3.5))
    csv = pd.read_csv(result.path / "runs.csv")
    assert list(csv["trace_position_up_s"]) == [3.5]
    assert "trace_position_down_s" not in csv and "quic_stack" not in csv
    assert "offered_up_bps" in csv  # the trace group's own columns, empty or not
