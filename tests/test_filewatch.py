"""proto.filewatch: file creations stamped on the clock (a real inotify on a temporary
directory, a fake clock for the stamp)."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest

from proto.filewatch import IN_CREATE, CreationWatch, parse_events


def test_events_are_parsed_with_their_padded_names() -> None:
    one = struct.pack("iIII", 1, IN_CREATE, 0, 16) + b"abc.sqlog".ljust(16, b"\0")
    two = struct.pack("iIII", 1, IN_CREATE, 0, 0)
    assert parse_events(one + two) == [(IN_CREATE, "abc.sqlog"), (IN_CREATE, "")]
    assert parse_events(b"") == []


def test_a_creation_is_stamped_when_it_is_read(tmp_path: Path) -> None:
    now = [100.0]
    with CreationWatch(tmp_path, clock=lambda: now[0]) as watch:
        assert watch.wait(0.0) == []
        (tmp_path / "a.sqlog").write_text("x")
        now[0] = 101.5
        assert watch.wait(1.0) == ["a.sqlog"]
        (tmp_path / "a.sqlog").write_text("again")  # no new creation: not stamped again
        now[0] = 102.0
        assert watch.drain() == [] and watch.created == {"a.sqlog": 101.5}


def test_a_blocked_reader_wakes_at_the_creation(tmp_path: Path) -> None:
    with CreationWatch(tmp_path) as watch:
        made: list[float] = []

        def create() -> None:
            time.sleep(0.2)
            made.append(time.monotonic())
            (tmp_path / "b").touch()

        thread = threading.Thread(target=create)
        thread.start()
        assert watch.wait(5.0) == ["b"]
        thread.join()
    # stamped after the file was made, and not after a long sleep (the 5 s timeout)
    assert made[0] <= watch.created["b"] < made[0] + 1.0


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="inotify_add_watch"):
        CreationWatch(tmp_path / "nowhere")
