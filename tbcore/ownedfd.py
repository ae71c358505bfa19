"""A kernel object held by one file descriptor (a timerfd, an inotify instance): the owner
closes it once, by :meth:`OwnedFd.close` or on leaving a ``with`` block, and ``select``
reads it through :meth:`OwnedFd.fileno`."""

from __future__ import annotations

import os
from typing import Self


class OwnedFd:
    """Base of a class whose ``fd`` it alone closes (-1 once closed)."""

    fd: int = -1

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
