"""Retransmission rounds of a TCP transfer, from the capture at its data sender: how many
times the request's most-resent data was sent (docs/models.md section 9's K for one run).

Section 9's ideal selective repeat resends every lost packet once a round trip after it was
sent, so its completion is ``base + (K - 1) * R`` with ``K`` the rounds until every packet
arrived. A run's ``K`` is the most times any of its data was sent: each original segment
(its first transmission's start) counts the transmissions that covered it, so a
retransmission that merges two lost segments (Linux's collapse) counts for both. What TCP
spent beyond the model's ``(K - 1) * R`` is then its time to detect each loss (SACK's
duplicate ACKs, RACK's reordering window, a retransmission time-out), not rounds it needed.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.collect.acks import SEQ_MOD, TCP_SYN, TcpSegment, data_senders, tcp_flow


@dataclass
class _Sent:
    """One connection's data as its sender sent it: where each original segment starts
    (relative bytes, in order) and how often it was sent."""

    isn: int | None = None
    snd_max: int = 0
    starts: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    counted: list[bool] = field(default_factory=list)
    """Whether the segment was first sent inside the window (only those count)."""

    def send(self, first: int, end: int, inside: bool) -> None:
        if first < self.snd_max:  # bytes sent before: every original segment they cover
            lo = max(0, bisect.bisect_right(self.starts, first) - 1)
            hi = bisect.bisect_left(self.starts, min(end, self.snd_max))
            for i in range(lo, hi):
                self.counts[i] += 1
        if end > self.snd_max:
            self.starts.append(max(first, self.snd_max))
            self.counts.append(1)
            self.counted.append(inside)
            self.snd_max = end

    def most(self) -> int | None:
        mine = [c for c, inside in zip(self.counts, self.counted, strict=True) if inside]
        return max(mine) if mine else None


def transmission_rounds(
    segments: Sequence[TcpSegment],
    *,
    clock_offset_s: float = 0.0,
    window: tuple[float | None, float | None] = (None, None),
) -> int | None:
    """The most times one byte of data first sent in ``window`` (capture time less
    ``clock_offset_s``; an open end is unbounded) was sent, over every connection's data
    sender in the capture (segments in capture order); 1: nothing resent; None: no data
    sent in the window."""
    senders = data_senders(segments)
    start_s, end_s = window
    conns: dict[tuple, _Sent] = {}
    for seg in segments:
        flow = tcp_flow(seg)
        if (seg.src, seg.sport) != senders[flow]:
            continue
        sent = conns.setdefault(flow, _Sent())
        if seg.flags & TCP_SYN or sent.isn is None:
            sent.isn = seg.seq if seg.flags & TCP_SYN else (seg.seq - 1) % SEQ_MOD
            if seg.flags & TCP_SYN:
                continue
        if not seg.payload_bytes:
            continue
        first = (seg.seq - sent.isn - 1) % SEQ_MOD
        at = seg.time_s - clock_offset_s
        inside = (start_s is None or at >= start_s) and (end_s is None or at <= end_s)
        sent.send(first, first + seg.payload_bytes, inside)
    most = [m for sent in conns.values() if (m := sent.most()) is not None]
    return max(most) if most else None
