"""The run row: its columns documented in results/README.md, generated from the model."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

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
