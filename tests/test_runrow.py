"""The run row: its columns documented in results/README.md, generated from the model."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from tbcore.runrow import README_BEGIN, RunRow, columns_markdown, readme_with_columns, run_columns

README = Path(__file__).resolve().parent.parent / "results" / "README.md"


def test_the_results_readme_documents_every_column_as_the_model_says() -> None:
    text = README.read_text(encoding="utf-8")
    assert readme_with_columns(text) == text, "run: python -m tbcore.runrow results/README.md"
    for name in run_columns():
        assert f"| `{name}` |" in text


def test_every_column_has_a_meaning_and_units_sit_in_names() -> None:
    for item in fields(RunRow):
        assert item.metadata["doc"], item.name
        if item.metadata["unit"] == "s":
            assert item.name.endswith("_s"), item.name


def test_the_table_is_replaced_not_appended_twice() -> None:
    once = readme_with_columns("# x\n")
    assert readme_with_columns(once) == once and once.count(README_BEGIN) == 1
    assert columns_markdown() in once


def test_a_row_of_an_older_version_reads_with_the_columns_it_predates_empty() -> None:
    from tbcore.records import RecordError
    from tbcore.runrow import RunRow

    row = RunRow(
        run_id="0000-a-r0", seq=0, block=0, position=0, level="a", rep=0, warmup=False,
        link_seed=1, host="h1", lock_wait_s=0.5, total_s=1.0,
    ).to_dict()  # fmt: skip
    old = {k: v for k, v in row.items() if k not in ("host", "lock_wait_s")}
    old["schema"] = "run/4"
    back = RunRow.from_dict(old)
    assert (back.host, back.lock_wait_s, back.total_s) == (None, None, 1.0)
    with pytest.raises(RecordError, match=r"run\.bogus: unknown field"):
        RunRow.from_dict({**old, "bogus": 1})
    with pytest.raises(RecordError, match="missing"):
        RunRow.from_dict({k: v for k, v in row.items() if k != "host"})  # this version: strict


def test_an_older_rows_renamed_column_reads_under_its_new_name() -> None:
    from tbcore.runrow import RENAMED, RunRow

    row = RunRow(
        run_id="0000-a-r0", seq=0, block=0, position=0, level="a", rep=0, warmup=False,
        link_seed=1, total_s=1.0,
    ).to_dict()  # fmt: skip
    old = {k: v for k, v in row.items() if k not in RENAMED.values()}
    old.update(air_busy_ack_s=0.5, schema="run/5")
    assert RunRow.from_dict(old).air_time_ack_s == 0.5
