"""Writable-path checks made before anything is created (tbcore.paths)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tbcore.errors import SpecError
from tbcore.paths import check_writable_dir, check_writable_file

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/proc/x", "cannot create"),
        ("/dev/null", "not a directory"),
        ("/etc/hostname", "not a directory"),
        ("/" + "x" * 300, "too long"),
    ],
)
def test_unusable_output_directories(path: str, words: str) -> None:
    with pytest.raises(SpecError, match=words) as err:
        check_writable_dir("output", path)
    assert err.value.field == "output"


def test_a_directory_to_be_made_is_checked_without_making_it(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    check_writable_dir("output", target)
    check_writable_file("log", target / "events.jsonl")
    assert list(tmp_path.iterdir()) == []  # the probe left nothing behind


def test_unusable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot create"):
        check_writable_file("log", "/proc/x/y")
    with pytest.raises(SpecError, match="is a directory"):
        check_writable_file("log", tmp_path)
    check_writable_file("log", "/dev/null")  # a device one may write is fine
