"""What the input tests share: how a refusal of user input must look."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tbcore.errors import SpecError


def assert_spec_error(call: Callable[[], object], field: str, *words: str) -> SpecError:
    """``call()`` refuses with one line, ``"<field>: <reason>"``, that names ``field`` and
    says every one of ``words``; returns the error for further checks."""
    with pytest.raises(SpecError) as info:
        call()
    err = info.value
    assert isinstance(err, ValueError)
    assert err.field == field, str(err)
    assert str(err).startswith(f"{field}: ")
    assert "\n" not in str(err)
    for word in words:
        assert word in str(err)
    return err


EXPERIMENT_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "experiments"
"""Experiment files the tests write into their run directories (data, kept as files)."""


def experiment_text(name: str) -> str:
    """The text of ``tests/fixtures/experiments/<name>.toml``."""
    return (EXPERIMENT_FIXTURES / f"{name}.toml").read_text()
