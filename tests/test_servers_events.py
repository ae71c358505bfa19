"""The server's JSONL event log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servers.events import EventLog, read_events
from tbcore.records import ServerEvent


def test_lines_are_json_on_the_monotonic_clock(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    log = EventLog(path)
    before = time.monotonic()
    log.emit("request_first_byte", proto="h2", conn=1, stream=3, path="/asr")
    log.emit("error", now=12.5, reason="x")
    log.close()
    first, second = read_events(path)
    assert before <= first["t"] <= time.monotonic()
    assert (
        first
        == ServerEvent(
            t=first["t"], event="request_first_byte", proto="h2", conn=1, stream=3, path="/asr"
        ).to_dict()
    )
    assert first["schema"] == ServerEvent.schema_tag()
    assert ServerEvent.from_dict(first).path == "/asr"
    assert second["t"] == 12.5 and second["conn"] is None


def test_an_undeclared_detail_is_refused() -> None:
    with pytest.raises(ValueError, match="colour"):
        EventLog(None).emit("error", colour="red")


def test_unknown_event_name_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        EventLog(None).emit("request_frist_byte")


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    path.write_text('{"t": 1, "event": "error"}\n{"t": 2, "ev')
    assert len(read_events(path)) == 1
