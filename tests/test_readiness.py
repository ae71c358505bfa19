"""netem.readiness: a child's marker, its EOF and a deadline, on a real pipe."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from netem.readiness import wait_for_marker


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def test_the_marker_split_over_two_writes_is_seen(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, b"tcpdump: listen")
    os.write(write_fd, b"ing on tb-x, link-type EN10MB\n")
    seen = wait_for_marker(read_fd, b"listening on", time.monotonic() + 5)
    assert seen.ready and not seen.eof
    assert seen.seen.startswith(b"tcpdump: listening on")


def test_a_child_that_closes_its_end_is_eof_with_what_it_said(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, b"error: no such device\n")
    os.close(write_fd)
    seen = wait_for_marker(read_fd, b"ready", time.monotonic() + 5)
    assert seen.eof and not seen.ready
    assert seen.seen == b"error: no such device\n"


def test_silence_ends_at_the_deadline(pipe: tuple[int, int]) -> None:
    read_fd, _ = pipe
    start = time.monotonic()
    seen = wait_for_marker(read_fd, b"ready", start + 0.2)
    assert not seen.ready and not seen.eof and seen.seen == b""
    assert time.monotonic() - start >= 0.2
