"""tbcore.errors: one-line errors naming the field, and the schema check every reader uses."""

from __future__ import annotations

import pytest

from tbcore.errors import MAX_REASON_CHARS, SpecError, clip, require_schema


def test_an_error_is_one_line_naming_the_field() -> None:
    err = SpecError("link.rtt", "not a\nduration:  '5 parsecs'")
    assert str(err) == "link.rtt: not a duration: '5 parsecs'"


def test_a_long_reason_is_cut_and_says_its_length() -> None:
    text = "x" * (MAX_REASON_CHARS * 3)
    cut = clip(text)
    assert len(cut) < MAX_REASON_CHARS + 40
    assert cut.endswith(f"({len(text)} characters)")


def test_the_schema_read_passes_and_another_is_refused_naming_both() -> None:
    require_schema({"schema": 2}, "schema", 2, "state")
    with pytest.raises(SpecError) as err:
        require_schema({"schema": 1}, "schema", 2, "state")
    assert str(err.value) == "state: schema 1, this testbed reads 2"
    with pytest.raises(SpecError, match="schema None"):
        require_schema({}, "schema_version", 2, "settings.schema_version")
