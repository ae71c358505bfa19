"""clients.player_edge: a collector's cancel reaches the stack's reset, flushing the player
first when the response is played; chunks drive the player on the event loop."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from clients import player_edge


@dataclass
class _Spec:
    stream_chunks: int | None
    player_buffer_s: float | None


class _Collector:
    def __init__(self, spec: _Spec) -> None:
        self.spec = spec
        self.on_chunk: Any = None
        self.on_cancel: Any = None


def test_without_a_player_the_cancel_is_the_stacks_own() -> None:
    calls: list[tuple[str, float]] = []
    collector = _Collector(_Spec(stream_chunks=None, player_buffer_s=None))
    assert player_edge.attach(collector, lambda now: calls.append(("reset", now))) is None
    collector.on_cancel(1.5)
    assert calls == [("reset", 1.5)] and collector.on_chunk is None
    # a streamed response without a buffer asked for has no player either
    streamed = _Collector(_Spec(stream_chunks=10, player_buffer_s=None))
    assert player_edge.attach(streamed, lambda now: None) is None


def test_a_played_response_is_flushed_before_the_reset() -> None:
    calls: list[str] = []
    collector = _Collector(_Spec(stream_chunks=10, player_buffer_s=0.06))
    edge = player_edge.attach(collector, lambda now: calls.append(f"reset {edge.flushed_at}"))
    assert edge is not None and collector.on_chunk == edge.on_chunk
    collector.on_cancel(2.0)
    assert calls == ["reset 2.0"]  # the player had stopped when the stack reset the stream
    assert edge.result()["flushed_at"] == 2.0
    assert [e["kind"] for e in edge.result()["events"]][-1] == "flushed"


def test_chunks_play_on_the_event_loop() -> None:
    async def main() -> dict[str, Any]:
        collector = _Collector(_Spec(stream_chunks=3, player_buffer_s=0.02))
        edge = player_edge.attach(collector, lambda now: None)
        assert edge is not None
        for index in range(3):
            collector.on_chunk(index, time.monotonic())
        await asyncio.wait_for(edge.drain(2.0), 3.0)
        return edge.result()

    result = asyncio.run(main())
    assert result["flushed_at"] is None
    assert result["summary"]["played"] == 3  # all three chunks, none dropped
    assert result["summary"]["dropped"] == 0
