"""Playback of a streamed response: measured arrivals through the player, next to docs/models.md
sections 2-3 applied to the link parameters alone.

For each initial buffer ``J`` (40, 45, 60, 120 ms by default) a run gets one row:

- measured: the chunks' read times (handed to the application) replayed through
  :class:`clients.player.Player` with the chapter's rule (wait for a missing chunk): start
  delay (first sample played, from the request start), stall count and total stall
  (WebRTC: concealment events, concealed duration), the time played before the first stall;
  the same with the drop rule; and with the wait rule started once the buffer holds ``J`` of
  audio (``filled_*``: the chapter's F8 counts its buffer so) instead of ``J`` after the
  first arrival;
- modelled: arrivals predicted by the chunk pipeline (section 2: chunk ``i`` ready at
  ``i * tau``, 12 ms processing, sent at the path rate with per-chunk header bytes, one-way
  delay) through the playback recurrence (section 3), and the buffer-depletion time of a
  rate shortfall;
- the cause of each stall: the chunk was not yet produced at its slot (the server's
  ``chunk_produced``), produced but not yet arrived at the transport, or arrived but not
  yet read by the application.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clients.player import RULE_DROP, RULE_WAIT, START_FILLED, StallStart, replay
from harness import bounds
from harness.bounds.bottleneck import Bottleneck
from tbcore.workloads import (
    STREAM_CHUNK_BYTES,
    STREAM_CHUNK_DURATION_S,
    STREAM_CHUNK_PROCESSING_S,
)

INITIAL_BUFFERS_S = (0.040, 0.045, 0.060, 0.120)
"""The initial buffers the issue asks for."""
TRACE_BUFFERS_S = (0.040, 0.120, 0.5, 1.0, 2.0, 4.0)
"""On a downlink that follows a capacity trace, slow spells last seconds: buffers up to 4 s
(issue 28's playback-trace)."""
STREAM_PLAY_BPS = STREAM_CHUNK_BYTES * 8 / STREAM_CHUNK_DURATION_S
"""384 kbit/s: what the 24 kHz 16-bit mono stream plays."""
CAUSE_NOT_PRODUCED = "not_produced"
CAUSE_NOT_ARRIVED = "not_arrived"
CAUSE_NOT_READ = "not_read"


@dataclass(frozen=True)
class ChunkTimes:
    """One chunk's life, seconds from the request start (None: not known)."""

    produced_s: float | None
    arrived_s: float | None
    read_s: float


def predicted_arrivals(
    chunks: int,
    *,
    down_delay_s: float,
    up_delay_s: float,
    overhead_bytes: int,
    down_rate_bps: float | None = None,
    down: Bottleneck | None = None,
    chunk_s: float = STREAM_CHUNK_DURATION_S,
    processing_s: float = STREAM_CHUNK_PROCESSING_S,
    chunk_bytes: int = STREAM_CHUNK_BYTES,
) -> list[float]:
    """Section 2 from the link alone: the request reaches the server after ``up_delay_s``;
    chunk ``i`` is ready at ``i * tau``, processed in ``processing_s``, sent in
    ``(960 + overhead) * 8 / rate`` and arrives ``down_delay_s`` later (seconds from the
    request start). ``down``: the downlink's bottleneck when it follows a capacity trace
    (harness.bounds.bottleneck, at the position it had at the request's start), used instead
    of ``down_rate_bps``: a chunk then leaves when the trace's opportunities have carried it
    after the chunks before it."""
    size = chunk_bytes + overhead_bytes
    if down is not None:
        ready_s = [up_delay_s + i * chunk_s for i in range(chunks)]
        return _through(down, size, ready_s, processing_s, down_delay_s)
    send_s = size * 8 / down_rate_bps if down_rate_bps else 0.0
    arrivals = bounds.pipeline(
        [i * chunk_s for i in range(chunks)],
        [processing_s] * chunks,
        [send_s] * chunks,
        [down_delay_s] * chunks,
    )
    return [up_delay_s + r for r in arrivals]


def _through(
    down: Bottleneck, size: int, ready_s: list[float], processing_s: float, down_delay_s: float
) -> list[float]:
    """:func:`predicted_arrivals` through a trace's bottleneck: chunks ready at ``ready_s``
    (at the server), processed one after another, then carried by ``down``."""
    arrivals = []
    processed = 0.0
    for ready in ready_s:
        processed = max(ready, processed) + processing_s
        arrivals.append(down.serve(size, processed) + down_delay_s)
    return arrivals


def stall_causes(
    chunks: Sequence[ChunkTimes], chunk_s: float, initial_buffer_s: float
) -> list[str]:
    """The cause of each stall of the wait rule: where the late chunk was at its slot."""
    player = replay([c.read_s for c in chunks], chunk_s, initial_buffer_s, RULE_WAIT)
    causes = []
    for event in player.events:
        if not isinstance(event, StallStart):
            continue
        chunk = chunks[event.index]
        slot = event.t
        if chunk.produced_s is not None and chunk.produced_s > slot:
            causes.append(CAUSE_NOT_PRODUCED)
        elif chunk.arrived_s is None or chunk.arrived_s > slot:
            causes.append(CAUSE_NOT_ARRIVED)
        else:
            causes.append(CAUSE_NOT_READ)
    return causes


def playback_rows(
    chunks: Sequence[ChunkTimes],
    predicted_s: Sequence[float],
    base: Mapping[str, Any],
    *,
    initial_buffers_s: Sequence[float] = INITIAL_BUFFERS_S,
    chunk_s: float = STREAM_CHUNK_DURATION_S,
    receive_bps: float | None = None,
    jitter_s: float = 0.0,
    play_bps: float = STREAM_PLAY_BPS,
) -> list[dict[str, Any]]:
    """One row per initial buffer: measured (wait and drop rules) next to modelled.

    The model's arrivals have no jitter; uniform delay jitter of +-``jitter_s`` (never
    reordering) adds at worst one stall of ``2 * jitter_s - J`` (the first chunk early by
    ``jitter_s``, a later one late by as much), which the prediction includes."""
    rows = []
    reads = [c.read_s for c in chunks]
    for buffer_s in initial_buffers_s:
        wait = replay(reads, chunk_s, buffer_s, RULE_WAIT).summary()
        drop = replay(reads, chunk_s, buffer_s, RULE_DROP).summary()
        filled = replay(reads, chunk_s, buffer_s, RULE_WAIT, START_FILLED).summary()
        model = bounds.playback(list(predicted_s), chunk_s, buffer_s)
        jitter_stall = max(0.0, 2 * jitter_s - buffer_s)
        causes = Counter(stall_causes(chunks, chunk_s, buffer_s))
        depletion = None
        if receive_bps is not None and receive_bps < play_bps:
            depletion = bounds.buffer_depletion_s(buffer_s * play_bps, play_bps, receive_bps)
        rows.append(
            {
                **base,
                "initial_buffer_s": buffer_s,
                "start_delay_s": (reads[0] + (wait.start_delay_s or 0.0) if reads else math.nan),
                "stall_count": wait.stall_count,
                "stall_s": wait.stall_s,
                "first_stall_s": wait.first_stall_s,
                "filled_stall_count": filled.stall_count,
                "filled_stall_s": filled.stall_s,
                "filled_first_stall_s": filled.first_stall_s,
                "predicted_start_delay_s": predicted_s[0] + buffer_s if predicted_s else None,
                "predicted_stall_count": model.stall_count + (1 if jitter_stall > 0 else 0),
                "predicted_stall_s": model.stall_s + jitter_stall,
                "predicted_depletion_s": depletion,
                "stall_cause": (";".join(f"{k}:{v}" for k, v in sorted(causes.items())) or "none"),
                "drop_concealed_count": drop.stall_count,
                "drop_concealed_s": drop.stall_s,
                "chunks": len(reads),
            }
        )
    return rows
