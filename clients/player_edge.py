"""The player's real-clock edge: chunks handed to the application feed a
:class:`clients.player.Player`, and a timer wakes it at each slot (``next_wake``).

On a cancel the queued chunks are flushed and playback stops at once (``flushed`` event).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from clients.player import Flushed, Player
from tbcore.workloads import STREAM_CHUNK_DURATION_S


def attach(collector: Any, cancel: Callable[[float], None]) -> PlayerEdge | None:
    """Wire a :class:`clients.workload.ResponseCollector`: its cancel calls ``cancel`` (the
    stack's stream reset), and a streamed response whose spec asks for a player feeds one,
    which the cancel flushes first. Returns the player, if any."""
    collector.on_cancel = cancel
    spec = collector.spec
    if not spec.stream_chunks or spec.player_buffer_s is None:
        return None
    edge = PlayerEdge(Player(STREAM_CHUNK_DURATION_S, spec.player_buffer_s, spec.stream_chunks))
    collector.on_chunk = edge.on_chunk
    collector.on_cancel = lambda now: (edge.flush(now), cancel(now))
    return edge


class PlayerEdge:
    """Drives a Player on CLOCK_MONOTONIC inside the client's event loop."""

    def __init__(self, player: Player) -> None:
        self.player = player
        self._handle: asyncio.TimerHandle | None = None
        self.flushed_at: float | None = None

    def on_chunk(self, index: int, now: float) -> None:
        if self.flushed_at is not None:
            return
        self.player.on_chunk(index, now)
        self._arm()

    def flush(self, now: float) -> None:
        """Stop playing now and drop whatever is queued (a cancel)."""
        if self.flushed_at is None:
            self.flushed_at = now
            self.player.events.append(Flushed(now, self.player._next))
        if self._handle is not None:
            self._handle.cancel()

    def _arm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        wake = self.player.next_wake()
        if wake is None or self.flushed_at is not None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, wake - time.monotonic())
        self._handle = loop.call_later(delay, self._tick)

    def _tick(self) -> None:
        self._handle = None
        self.player.poll(time.monotonic())
        self._arm()

    async def drain(self, timeout_s: float) -> None:
        """Wait until the last chunk has played (or the timeout)."""
        deadline = time.monotonic() + timeout_s
        while not self.player.finished and self.flushed_at is None:
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(self.player.chunk_s)
            self.player.poll(time.monotonic())

    def result(self) -> dict[str, Any]:
        return {
            "summary": asdict(self.player.summary()),
            "events": [e.to_dict() for e in self.player.events],
            "flushed_at": self.flushed_at,
        }
