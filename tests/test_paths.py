"""Writable-path checks made before anything is created (tbcore.paths)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tbcore.errors import SpecError
from tbcore.paths import (
    check_writable_dir,
    check_writable_file,
    read_regular_file,
    read_regular_text,
)

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


# -- the bounded reader of input files --------------------------------------------------------


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_bytes(b"a = 1\n")
    assert read_regular_file(path, "experiment", 6) == b"a = 1\n"
    assert read_regular_text(str(path), "experiment", 100) == "a = 1\n"
    (tmp_path / "empty").write_bytes(b"")
    assert read_regular_file(tmp_path / "empty", "experiment", 0) == b""


def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: an open() without O_NONBLOCK would wait for ever
    cases = {fifo: "a FIFO", Path("/dev/zero"): "a character device", tmp_path: "a directory"}
    for path, kind in cases.items():
        with pytest.raises(SpecError, match=kind) as err:
            read_regular_file(path, "experiment", 1 << 20)
        assert err.value.field == "experiment" and "\n" not in str(err.value)


def test_files_over_the_limit_and_missing_ones_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    with pytest.raises(SpecError, match="101 bytes, more than the 100 allowed"):
        read_regular_file(path, "manifest", 100)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for bad, words in (
        (tmp_path / "missing", "No such file"),
        (tmp_path / "loop", "symbolic links"),
        ("", "empty path"),
        ("a\0b", "null byte"),
    ):
        with pytest.raises(SpecError, match=words):
            read_regular_file(bad, "manifest", 100)
    (tmp_path / "latin1").write_bytes(b"caf\xe9")
    with pytest.raises(SpecError, match="not UTF-8 text"):
        read_regular_text(tmp_path / "latin1", "manifest", 100)


def test_a_file_that_grows_while_it_is_read_stops_at_the_limit() -> None:
    """/proc/self/status reports st_size 0 and yet has bytes: the read itself is bounded."""
    with pytest.raises(SpecError, match="grew past the 10 bytes"):
        read_regular_file("/proc/self/status", "field", 10)
