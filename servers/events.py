"""Server-side event log: one :class:`tbcore.records.ServerEvent` per JSON line, times on
``time.monotonic()``.

``time.monotonic()`` is CLOCK_MONOTONIC on Linux, shared by every process on the host, so
client, server and link timestamps line up. Each line has ``t`` (seconds), ``event``,
``proto`` (``h2``/``h3``), ``conn`` (a per-process connection number), ``stream`` (or None),
the event's details (the other fields of ServerEvent) and the schema tag.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

from tbcore.records import SERVER_EVENT_NAMES, SERVER_EVENTS, ServerEventKind

EVENT_NAMES = SERVER_EVENT_NAMES


class JsonlLog:
    """An append-only, line-buffered JSONL file (``path=None``: nothing is kept)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._handle: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("a", buffering=1, encoding="utf-8")

    def write(self, data: dict[str, Any]) -> dict[str, Any]:
        """One line of ``data``; returns it."""
        if self._handle is not None:
            self._handle.write(json.dumps(data, separators=(",", ":")) + "\n")
        return data

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class EventLog(JsonlLog):
    """The server's events. An unknown event or detail raises even with ``path=None``."""

    def emit(
        self,
        event: str,
        *,
        proto: str | None = None,
        conn: int | None = None,
        stream: int | None = None,
        now: float | None = None,
        **details: Any,
    ) -> dict[str, Any]:
        """Write one event of the kind ``event`` names, with ``details`` (only those that
        kind has: tbcore.records.SERVER_EVENTS); ``now`` defaults to ``time.monotonic()``.
        Returns the record as written. An unknown event name or detail raises ValueError."""
        kind = SERVER_EVENTS.get(event)
        if kind is None:
            raise ValueError(f"unknown event name {event!r}")
        try:
            made = kind(proto=proto, conn=conn, stream=stream, **details)
        except TypeError as err:
            raise ValueError(f"event {event!r}: {err}") from None
        return self.write_event(made, now)

    def write_event(self, event: ServerEventKind, now: float | None = None) -> dict[str, Any]:
        """Write one event of its own kind (tbcore.records.SERVER_EVENTS) at ``now``
        (default ``time.monotonic()``); returns the line as written."""
        return self.write(event.record(time.monotonic() if now is None else now).to_dict())


def read_events(path: Path) -> list[dict[str, Any]]:
    """All events of a log file as dicts (a torn line is skipped)."""
    records = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
