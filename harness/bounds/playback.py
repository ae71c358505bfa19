"""docs/models.md section 3: playback continuity (stalls, buffer depletion)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.base import _non_negative, _positive, _sequence


@dataclass(frozen=True)
class Playback:
    """When each chunk starts playing, and how long the player waited for late chunks."""

    start_s: list[float]
    """Start time of each chunk: ``p_0 = r_0 + J``, ``p_i = max(r_i, p_{i-1} + tau)``."""
    stall_s: float
    """Total stall added after playback began: the sum of ``r_i - (p_{i-1} + tau)`` where > 0."""
    stall_count: int
    """How many chunks arrived after their slot (each is one stall)."""


def playback(arrivals_s: Sequence[float], chunk_s: float, initial_buffer_s: float) -> Playback:
    """Section 3: a player that waits ``initial_buffer_s`` and never drops a late chunk."""
    arrivals = _sequence("arrivals_s", arrivals_s, _non_negative)
    tau = _positive("chunk_s", chunk_s)
    buffer = _non_negative("initial_buffer_s", initial_buffer_s)
    # Slots are anchor + j * tau from the last stall, not a running sum of tau: the same
    # recurrence without accumulated rounding (a chunk exactly on time is never "late").
    anchor = arrivals[0] + buffer
    anchor_index = 0
    starts = [anchor]
    stall = 0.0
    stalls = 0
    for index in range(1, len(arrivals)):
        slot = anchor + (index - anchor_index) * tau
        arrival = arrivals[index]
        if arrival > slot:
            stall += arrival - slot
            stalls += 1
            anchor, anchor_index = arrival, index
            starts.append(arrival)
        else:
            starts.append(slot)
    return Playback(start_s=starts, stall_s=stall, stall_count=stalls)


def buffer_depletion_s(buffered_bits: float, play_bps: float, receive_bps: float) -> float:
    """Section 3: seconds until a buffer of ``b`` bits empties, ``b / (P - Q)``.

    ``math.inf`` when the receive rate keeps up. ``receive_bps`` may be 0 (an outage).
    """
    bits = _non_negative("buffered_bits", buffered_bits)
    play = _positive("play_bps", play_bps)
    receive = _non_negative("receive_bps", receive_bps)
    if receive >= play:
        return math.inf
    return bits / (play - receive)
