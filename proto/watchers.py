"""Callbacks waiting for a condition of a sender's state, checked after each transmit: the
HTTP/3 stack's "last byte of this stream sent" and the FEC driver's "round sent"."""

from __future__ import annotations

from collections.abc import Callable

Condition = Callable[[], bool]
Callback = Callable[[float], None]


class Watchers:
    """Pending (condition, callback) pairs; :meth:`fire` calls each callback whose condition
    holds, once, with the time of the check, and keeps the others."""

    def __init__(self) -> None:
        self._pending: list[tuple[Condition, Callback]] = []

    def add(self, condition: Condition, callback: Callback) -> None:
        self._pending.append((condition, callback))

    def __bool__(self) -> bool:
        return bool(self._pending)

    def fire(self, now: float) -> None:
        keep = []
        for condition, callback in self._pending:
            if condition():
                callback(now)
            else:
                keep.append((condition, callback))
        self._pending = keep
