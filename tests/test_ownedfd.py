"""tbcore.ownedfd: the descriptor is closed once, by close() or by leaving a with block."""

from __future__ import annotations

import os

import pytest

from tbcore.ownedfd import OwnedFd


class _Pipe(OwnedFd):
    def __init__(self) -> None:
        self.fd, self.other = os.pipe()


def test_a_with_block_closes_the_descriptor_once() -> None:
    with _Pipe() as pipe:
        fd = pipe.fileno()
        os.fstat(fd)
    assert pipe.fd == -1
    with pytest.raises(OSError):
        os.fstat(fd)
    pipe.close()  # a second close is nothing (the number may be another file's by now)
    os.close(pipe.other)


def test_an_unopened_owner_closes_nothing() -> None:
    class Never(OwnedFd):
        pass

    Never().close()
    assert Never().fileno() == -1
