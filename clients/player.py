"""A streamed-audio player, without I/O: chunks in, play/stall/drop events out.

The player starts after an initial buffer ``J`` and plays chunks of ``tau`` seconds in order
(docs/models.md section 3). Two ways to count ``J`` (``start``):

- ``after`` (the chapter's F6 and F7, §12.1.2): ``J`` seconds after the first chunk's arrival,
  whatever has arrived by then;
- ``filled`` (the chapter's F8: "60 ms of buffer (15,360 bits)"): once the chunks in hand from
  the first on hold ``J`` of audio (``ceil(J / tau)`` chunks), at the arrival that fills it.
  The two agree while chunks arrive faster than they play; under a rate shortfall ``after``
  starts with less than ``J`` of audio in hand.

Two rules for a chunk that is not there when its slot comes:

- ``wait`` (the chapter's rule, docs/models.md section 3): stall until it arrives, then play it;
  every later slot moves by the stall. ``p_0 = r_0 + J``, ``p_i = max(r_i, p_{i-1} + tau)``.
- ``drop``: the slot plays concealment (silence) and the chunk, when it comes, is dropped;
  the schedule never moves. WebRTC counts these as concealment events.

Names follow WebRTC's receiver statistics (``RTCInboundRtpStreamStats``): a stall is a
*concealment event*, its length *concealed duration*; ``start_delay_s`` is the time from
the first arrival to the first sample played.

Drive it with :meth:`Player.on_chunk` (a chunk arrived at ``now``) and :meth:`Player.poll`
(the clock reached ``now``); both return the events that happened up to ``now``. The edge
(:func:`clients.player_edge` or a test's fake clock) calls ``poll`` at :meth:`next_wake`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from tbcore.errors import SpecError

RULE_WAIT = "wait"
RULE_DROP = "drop"
RULES = (RULE_WAIT, RULE_DROP)
START_AFTER = "after"
START_FILLED = "filled"
STARTS = (START_AFTER, START_FILLED)


@dataclass(frozen=True)
class PlayEvent:
    """Something the player did at ``t`` about chunk ``index``; one subclass per kind, as
    aioquic's and h2's events are (``KIND`` names it in the record)."""

    KIND: ClassVar[str] = ""
    t: float
    index: int

    def to_dict(self) -> dict[str, Any]:
        """The event as the record keeps it: its kind, then its fields."""
        return {"kind": self.KIND, **asdict(self)}


@dataclass(frozen=True)
class Play(PlayEvent):
    """Chunk ``index`` starts playing."""

    KIND: ClassVar[str] = "play"


@dataclass(frozen=True)
class StallStart(PlayEvent):
    """Chunk ``index`` is missing at its slot (wait rule: the player stalls)."""

    KIND: ClassVar[str] = "stall_start"


@dataclass(frozen=True)
class StallEnd(PlayEvent):
    """Chunk ``index`` arrived after a stall of ``stall_s``."""

    KIND: ClassVar[str] = "stall_end"
    stall_s: float = 0.0


@dataclass(frozen=True)
class Conceal(PlayEvent):
    """Drop rule: the slot of ``index`` played silence."""

    KIND: ClassVar[str] = "conceal"


@dataclass(frozen=True)
class Drop(PlayEvent):
    """Chunk ``index`` came after its slot and is thrown away."""

    KIND: ClassVar[str] = "drop"


@dataclass(frozen=True)
class End(PlayEvent):
    """The last chunk finished playing."""

    KIND: ClassVar[str] = "end"


@dataclass(frozen=True)
class Flushed(PlayEvent):
    """The edge stopped playing (a cancel): chunk ``index`` and later are not played."""

    KIND: ClassVar[str] = "flushed"


@dataclass
class Player:
    chunk_s: float
    initial_buffer_s: float
    chunks: int
    rule: str = RULE_WAIT
    start: str = START_AFTER
    arrivals: dict[int, float] = field(default_factory=dict)
    events: list[PlayEvent] = field(default_factory=list)
    _next: int = 0
    """Index of the next chunk to play."""
    _slot: float | None = None
    """When the next chunk's slot starts (None before the first arrival)."""
    _stalled_since: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise SpecError("rule", f"{self.rule!r} is not one of {', '.join(RULES)}")
        if self.start not in STARTS:
            raise SpecError("start", f"{self.start!r} is not one of {', '.join(STARTS)}")
        if not self.chunk_s > 0:
            raise SpecError("chunk_s", "must be > 0")
        if self.initial_buffer_s < 0:
            raise SpecError("initial_buffer_s", "must be >= 0")
        if self.chunks < 1:
            raise SpecError("chunks", "must be >= 1")

    # -- inputs ---------------------------------------------------------------------------
    def on_chunk(self, index: int, now: float) -> list[PlayEvent]:
        """Chunk ``index`` is in the player's hands at ``now``."""
        if not 0 <= index < self.chunks:
            raise SpecError("index", f"{index} is not in 0..{self.chunks - 1}")
        start = len(self.events)
        self._advance(now)
        if index in self.arrivals:
            return self.events[start:]
        self.arrivals[index] = now
        if self._slot is None:
            self._slot = self._start_at(now)
        if index < self._next:
            self.events.append(Drop(now, index))
        elif self._stalled_since is not None and index == self._next:
            stall = now - self._stalled_since
            self.events.append(StallEnd(now, index, stall))
            self._stalled_since = None
            self._slot = now
        self._advance(now)
        return self.events[start:]

    def poll(self, now: float) -> list[PlayEvent]:
        """The clock reached ``now``: play what is due."""
        start = len(self.events)
        self._advance(now)
        return self.events[start:]

    def next_wake(self) -> float | None:
        """When :meth:`poll` has something to do next (None: only an arrival can help)."""
        if self._slot is None or self._stalled_since is not None or self.finished:
            return None
        return self._slot

    # -- state ------------------------------------------------------------------------------
    @property
    def chunks_to_fill(self) -> int:
        """``filled``: the chunks that hold the initial buffer's audio (at least one)."""
        return min(self.chunks, max(1, math.ceil(self.initial_buffer_s / self.chunk_s - 1e-9)))

    def _start_at(self, now: float) -> float | None:
        """When the first slot starts, as of an arrival at ``now`` (None: not yet)."""
        if self.start == START_AFTER:
            return now + self.initial_buffer_s if 0 in self.arrivals else None
        filled = all(i in self.arrivals for i in range(self.chunks_to_fill))
        return now if filled else None

    @property
    def finished(self) -> bool:
        return self._next >= self.chunks

    def _advance(self, now: float) -> None:
        while self._slot is not None and not self.finished and self._stalled_since is None:
            if self._slot > now:
                return
            index = self._next
            arrived = self.arrivals.get(index)
            if arrived is not None and arrived <= self._slot:
                self.events.append(Play(self._slot, index))
            elif arrived is not None:  # arrived after its slot but before now
                if self.rule == RULE_WAIT:
                    self.events.append(StallStart(self._slot, index))
                    self.events.append(StallEnd(arrived, index, arrived - self._slot))
                    self._slot = arrived
                    self.events.append(Play(arrived, index))
                else:
                    self.events.append(Conceal(self._slot, index))
            elif self.rule == RULE_WAIT:
                self._stalled_since = self._slot
                self.events.append(StallStart(self._slot, index))
                return
            else:
                self.events.append(Conceal(self._slot, index))
            self._next += 1
            self._slot += self.chunk_s
            if self.finished:
                self.events.append(End(self._slot, index))

    # -- summary ----------------------------------------------------------------------------
    def summary(self) -> PlaybackSummary:
        first = self.arrivals.get(0)
        plays = [e for e in self.events if isinstance(e, Play)]
        stalls = [e for e in self.events if isinstance(e, StallEnd)]
        conceals = [e for e in self.events if isinstance(e, Conceal)]
        starts = [e for e in self.events if isinstance(e, StallStart)]
        return PlaybackSummary(
            rule=self.rule,
            initial_buffer_s=self.initial_buffer_s,
            start_delay_s=(plays[0].t - first) if plays and first is not None else None,
            stall_count=len(stalls) if self.rule == RULE_WAIT else len(conceals),
            stall_s=(
                sum(e.stall_s for e in stalls)
                if self.rule == RULE_WAIT
                else len(conceals) * self.chunk_s
            ),
            dropped=sum(1 for e in self.events if isinstance(e, Drop)),
            played=len(plays),
            first_stall_s=(starts[0].t - plays[0].t) if starts and plays else None,
        )


@dataclass(frozen=True)
class PlaybackSummary:
    """WebRTC names: ``stall_count`` = concealment events, ``stall_s`` = concealed duration."""

    rule: str
    initial_buffer_s: float
    start_delay_s: float | None
    stall_count: int
    stall_s: float
    dropped: int
    played: int
    first_stall_s: float | None = None
    """Wait rule: from the first sample played to the first stall (the buffer ran dry)."""


def replay(
    arrivals_s: list[float],
    chunk_s: float,
    initial_buffer_s: float,
    rule: str = RULE_WAIT,
    start: str = START_AFTER,
) -> Player:
    """Feed measured arrivals (chunk ``i`` at ``arrivals_s[i]``) through a player on a fake
    clock and return it (events and summary)."""
    player = Player(chunk_s, initial_buffer_s, len(arrivals_s), rule, start)
    for index, t in sorted(enumerate(arrivals_s), key=lambda item: item[1]):
        wake = player.next_wake()
        while wake is not None and wake < t:
            player.poll(wake)
            wake = player.next_wake()
        player.on_chunk(index, t)
    while not player.finished:
        wake = player.next_wake()
        if wake is None:
            break
        player.poll(wake)
    return player
