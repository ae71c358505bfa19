"""The per-stream request handling both server edges share, driven in memory: a recording
edge stands in for the protocol (it answers nothing on the wire), the event log is real."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from proto.http import RequestHead
from servers import app
from servers.config import ServerConfig
from servers.context import ServerContext
from servers.events import EventLog, read_events
from servers.session import ExchangeStreams, paced_chunks
from tbcore import workloads

pytestmark = pytest.mark.timeout(30)


class RecordingEdge(ExchangeStreams):
    """An edge whose responses only record the plan they were given."""

    proto = "test"

    def __init__(self, ctx: ServerContext) -> None:
        self._init_streams(ctx, ctx.next_conn_id())
        self.responses: list[tuple[int, int]] = []

    async def _respond(self, stream_id: int, plan: app.ResponsePlan) -> None:
        await self._process(stream_id, plan)
        self.responses.append((stream_id, plan.status))


def make_edge(tmp_path: Path, **config: Any) -> tuple[RecordingEdge, Path]:
    path = tmp_path / "events.jsonl"
    ctx = ServerContext(ServerConfig.of(processing_audio_s=0.0, **config), EventLog(path))
    return RecordingEdge(ctx), path


def head(method: str, path: str, length: int | None = None) -> RequestHead:
    return RequestHead(method=method, path=path, content_length=length)


def events(edge: RecordingEdge, path: Path, name: str) -> list[dict[str, Any]]:
    edge.ctx.log.close()
    return [e for e in read_events(path) if e["event"] == name]


async def test_a_whole_upload_is_answered_once(tmp_path: Path) -> None:
    edge, log = make_edge(tmp_path)
    audio = workloads.workload_bytes("audio")
    edge._open_exchange(1, head("POST", "/asr", len(audio)), 1.0, stream_ended=False)
    edge._on_data(1, audio[:1000], 1.1)
    edge._on_data(1, audio[1000:], 1.2)
    edge._on_end(1, 1.3)
    edge._on_end(1, 1.4)  # a second end changes nothing
    await asyncio.sleep(0.05)
    assert edge.responses == [(1, 200)]
    assert not edge.tasks and not edge.exchanges  # both freed when the response ended
    (last,) = events(edge, log, "request_last_byte")
    assert last["received_bytes"] == len(audio) and last["proto"] == "test"
    assert last["upload_sha256"] == workloads.workload_sha256("audio")


async def test_a_refused_request_is_answered_before_its_body(tmp_path: Path) -> None:
    edge, log = make_edge(tmp_path)
    edge._open_exchange(1, head("POST", "/nowhere", 10), 1.0, stream_ended=False)
    edge._on_data(1, b"x" * 10, 1.1)  # not read: the 404 is already decided
    await asyncio.sleep(0.01)
    assert edge.responses == [(1, 404)]
    assert edge.exchanges[1].received_bytes == 0
    assert edge._still_reading(1, edge.exchanges[1].early)  # type: ignore[arg-type]
    assert not events(edge, log, "request_body_first_byte")


async def test_a_reset_upload_is_reported_once(tmp_path: Path) -> None:
    edge, log = make_edge(tmp_path)
    edge._open_exchange(1, head("POST", "/retouch", 5000), 1.0, stream_ended=False)
    edge._on_data(1, b"z" * 1000, 1.1)
    edge._open_exchange(5, head("POST", "/retouch", 5000), 1.0, stream_ended=False)
    edge._on_data(5, b"z" * 2000, 1.1)
    edge._on_reset(1, 0x10C, 1.2)
    edge._close_streams(1.3)
    edge._close_streams(1.4)
    truncated = events(edge, log, "upload_truncated")
    assert [(e["stream"], e["reason"], e["received_bytes"]) for e in truncated] == [
        (1, "stream reset by peer", 1000),
        (5, "connection closed", 2000),
    ]
    assert all(e["content_length"] == 5000 for e in truncated)


async def test_a_malformed_head_is_logged_and_refused(tmp_path: Path) -> None:
    edge, log = make_edge(tmp_path)
    assert edge._parse_head(3, [(b":method", b"GET")], 1.0) is None
    assert edge._parse_head(3, [(":method", "GET"), (":path", "/tts")], 1.0) == head("GET", "/tts")
    (error,) = events(edge, log, "error")
    assert error["stream"] == 3 and error["reason"].startswith("bad request head:")


async def test_chunks_leave_on_their_schedule() -> None:
    plan = app.ResponsePlan(
        status=200, headers=[], stream_chunks=3, chunk_interval_s=0.02, chunk_processing_s=0.01
    )
    start = time.monotonic()
    sent = [
        (i, chunk, last, time.monotonic() - start)
        async for i, chunk, last, _produced in paced_chunks(plan)
    ]
    assert [(i, c, last) for i, c, last, _ in sent] == [
        (i, workloads.stream_chunk(i), i == 2) for i in range(3)
    ]
    for index, *_rest, at in sent:
        assert at >= index * 0.02 + 0.01 - 1e-6  # never early


async def test_a_late_chunk_holds_itself_and_the_ones_after_it_not_their_production() -> None:
    """late_chunk_index 1 held 60 ms: chunk 1 leaves 60 ms after it was produced, chunk 2
    (due 20 ms later) leaves with it, not before; both report their scheduled production."""
    plan = app.ResponsePlan(
        status=200, headers=[], stream_chunks=4, chunk_interval_s=0.02, chunk_processing_s=0.01,
        late_chunk_index=1, late_chunk_s=0.06,
    )  # fmt: skip
    start = time.monotonic()
    sent = [
        (i, time.monotonic() - start, produced - start)
        async for i, _chunk, _last, produced in paced_chunks(plan)
    ]
    assert [i for i, *_ in sent] == [0, 1, 2, 3]
    at = {i: t for i, t, _ in sent}
    made = {i: p for i, _, p in sent}
    # chunks 1 and 2 were produced on their schedule, 20 ms apart, while chunk 1 was held
    assert made[2] - made[1] == pytest.approx(0.02, abs=1e-9) and made[1] >= 0.03 - 1e-6
    assert at[1] - made[1] >= 0.06 - 1e-6 and at[2] >= at[1]  # held; nothing overtakes it
    assert at[0] < at[1] - 0.05 and made[3] >= made[2] + 0.02 - 1e-6


def test_a_processing_sleep_lasts_its_time_on_the_clock_events_are_stamped_with() -> None:
    """uvloop's millisecond timers end some sleeps early by up to a millisecond of
    CLOCK_MONOTONIC; the server's processing never does (its events bracket it)."""
    import time as _time

    import uvloop

    from servers.session import sleep_at_least

    async def shortest() -> float:
        least = float("inf")
        for i in range(40):
            wanted = 0.0103 + 0.0007 * (i % 5)
            start = _time.monotonic()
            await sleep_at_least(wanted)
            least = min(least, _time.monotonic() - start - wanted)
        return least

    assert uvloop.run(shortest()) >= 0.0
