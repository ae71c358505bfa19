"""The server's JSONL event log."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from servers.events import EventLog, read_events
from tbcore.records import SERVER_EVENTS, ServerEvent, TileSent


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


def test_a_detail_of_another_kind_is_refused() -> None:
    log = EventLog(None)
    log.emit("response_last_byte", stream=1, bytes=10)
    with pytest.raises(ValueError, match="response_first_byte"):
        log.emit("response_first_byte", stream=1, bytes=10)  # bytes belongs to the last byte


def test_a_kind_written_as_its_dataclass_is_the_same_line(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    by_name = log.emit("tile_sent", proto="h2", conn=1, stream=3, index=2, now=5.0)
    by_kind = log.write_event(TileSent(proto="h2", conn=1, stream=3, index=2), now=5.0)
    log.close()
    assert by_name == by_kind and by_kind["event"] == "tile_sent"


def test_the_log_line_holds_every_kinds_details_and_nothing_else() -> None:
    """ServerEvent (the line) is the union of the kinds: a column no kind has is dead, a
    detail no column holds could not be written."""
    line = set(ServerEvent.field_names()) - {"t", "event"}
    details = {f.name for kind in SERVER_EVENTS.values() for f in dataclasses.fields(kind)}
    assert line == details
