"""Server-side event log: one JSON object per line, times on ``time.monotonic()``.

``time.monotonic()`` is CLOCK_MONOTONIC on Linux, shared by every process on the host, so
client, server and link timestamps line up. Each line has ``t`` (seconds), ``event``,
``proto`` (``h2``/``h3``), ``conn`` (a per-process connection number), ``stream`` (or None)
and event-specific details.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

EVENT_NAMES = frozenset(
    {
        "listening",
        "connection_open",
        "connection_closed",
        "request_first_byte",
        "request_body_first_byte",
        "request_last_byte",
        "upload_truncated",
        "processing_start",
        "processing_end",
        "response_first_byte",
        "response_last_byte",
        "chunk_produced",
        "tile_received",
        "tile_sent",
        "chunk_sent",
        "chunk_production_stopped",
        "response_stopped",
        "stream_cancelled",
        "priority_update",
        "stream_reset",
        "error",
    }
)


class EventLog:
    """Append-only JSONL writer. ``path=None`` keeps nothing (but still validates names)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._handle: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("a", buffering=1, encoding="utf-8")

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
        """Write one event; ``now`` defaults to ``time.monotonic()``. Returns the record."""
        if event not in EVENT_NAMES:
            raise ValueError(f"unknown event name {event!r}")
        record: dict[str, Any] = {
            "t": time.monotonic() if now is None else now,
            "event": event,
            "proto": proto,
            "conn": conn,
            "stream": stream,
        }
        record.update(details)
        if self._handle is not None:
            self._handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        return record

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def read_events(path: Path) -> list[dict[str, Any]]:
    """All events of a log file (a torn last line is skipped)."""
    records = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
