"""Send scheduling of the streams that share one connection, without I/O.

Two parts:

- :func:`parse_priority`: the RFC 9218 Priority field value (``u=0, i``), as carried by the
  ``priority`` request header (RFC 9218 section 5) or a PRIORITY_UPDATE frame (section 7).
- :class:`SendPolicy` and :data:`POLICIES`: which stream with data to send goes next. The
  HTTP/2 server's send pump and the HTTP/3 server's QUIC stream queue both ask
  :func:`order` for the service order of their streams.

Policies (by name):

- ``fifo``: arrival order of the requests; the first stream sends everything it has before
  the next one gets a byte. Priority signals are ignored.
- ``rfc9218``: the lowest urgency first (RFC 9218 section 4.1: 0 is the most urgent, 3 the
  default); within one urgency, non-incremental streams one after the other in arrival
  order, incremental ones round robin (section 4.2).
- ``rr``: round robin whatever the signals (aioquic's own order), one slice at a time.
- ``none``: no scheduling of the server's own: aioquic's round robin for HTTP/3, and HTTP/2
  responses write into the socket as fast as it takes them (the order is then whatever the
  socket buffer holds). The default: single-stream runs keep their full speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tbcore.errors import SpecError

URGENCY_DEFAULT = 3
"""RFC 9218 section 4.1: the default urgency."""
URGENCY_MAX = 7
"""RFC 9218 section 4.1: urgencies are 0 (highest) to 7 (lowest)."""
INCREMENTAL_DEFAULT = False
"""RFC 9218 section 4.2: the default of the incremental parameter."""
PRIORITY_UPDATE_H3 = 0xF0700
"""RFC 9218 section 7.2: HTTP/3 PRIORITY_UPDATE frame for a request stream."""
PRIORITY_UPDATE_H2 = 0x10
"""RFC 9218 section 7.1: HTTP/2 PRIORITY_UPDATE frame type."""

POLICY_FIFO = "fifo"
POLICY_RFC9218 = "rfc9218"
POLICY_RR = "rr"
POLICY_NONE = "none"
POLICIES = (POLICY_NONE, POLICY_FIFO, POLICY_RFC9218, POLICY_RR)


@dataclass(frozen=True)
class Priority:
    """An RFC 9218 priority: urgency 0..7 and the incremental flag."""

    urgency: int = URGENCY_DEFAULT
    incremental: bool = INCREMENTAL_DEFAULT

    def field_value(self) -> str:
        """The Priority field value (structured-field dictionary, RFC 8941)."""
        return f"u={self.urgency}, i" if self.incremental else f"u={self.urgency}"


def parse_priority(text: str | bytes | None) -> Priority:
    """Parse a Priority field value; unknown or malformed members keep their defaults
    (RFC 9218 section 4: a parameter that fails to parse is ignored)."""
    if text is None:
        return Priority()
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    urgency = URGENCY_DEFAULT
    incremental = INCREMENTAL_DEFAULT
    for member in text.split(","):
        key, _, value = member.strip().partition("=")
        key = key.split(";")[0].strip()
        value = value.split(";")[0].strip()
        if key == "u" and value.isdigit() and int(value) <= URGENCY_MAX:
            urgency = int(value)
        elif key == "i":
            if value in ("", "?1"):
                incremental = True
            elif value == "?0":
                incremental = False
    return Priority(urgency=urgency, incremental=incremental)


@dataclass(frozen=True)
class StreamState:
    """What a policy knows about one stream with data to send."""

    stream_id: int
    arrival: int
    """Arrival rank of the request on its connection (0 = first)."""
    priority: Priority


def check_policy(name: str) -> str:
    if name not in POLICIES:
        raise SpecError("send-policy", f"{name!r} is not one of {', '.join(POLICIES)}")
    return name


def order(policy: str, streams: Sequence[StreamState]) -> list[int]:
    """Stream ids in the order the policy serves them now (the first goes next).

    ``streams`` comes in round-robin rotation order (the stream served last at the end):
    the sort is stable, so round robin (``rr``, and incremental streams of one urgency
    under ``rfc9218``) keeps that order."""
    check_policy(policy)
    if policy in (POLICY_RR, POLICY_NONE):
        return [s.stream_id for s in streams]
    if policy == POLICY_FIFO:
        return [s.stream_id for s in sorted(streams, key=lambda s: s.arrival)]

    def key(s: StreamState) -> tuple[int, int, int]:
        if s.priority.incremental:
            return (s.priority.urgency, 1, 0)
        return (s.priority.urgency, 0, s.arrival)

    return [s.stream_id for s in sorted(streams, key=key)]


MAX_PENDING_PRIORITIES = 64
"""PRIORITY_UPDATEs kept for streams not yet opened (a client may send one just before its
request; no workload has more than a few requests in flight)."""


class Scheduler:
    """Per-connection bookkeeping for :func:`order`: arrival ranks and priorities."""

    def __init__(self, policy: str) -> None:
        self.policy = check_policy(policy)
        self._arrival: dict[int, int] = {}
        self._priority: dict[int, Priority] = {}
        self._next = 0

    def add(self, stream_id: int, priority: Priority | None = None) -> None:
        """A request stream arrived (its rank is the next one)."""
        if stream_id not in self._arrival:
            self._arrival[stream_id] = self._next
            self._next += 1
        if priority is not None:
            self._priority[stream_id] = priority

    def update(self, stream_id: int, priority: Priority) -> bool:
        """A PRIORITY_UPDATE: takes effect for the next decision (RFC 9218 section 7). One for
        a stream not yet opened is kept only while fewer than
        :data:`MAX_PENDING_PRIORITIES` are (RFC 9218 section 7 lets a server bound what it
        buffers), so a peer naming every stream id cannot grow the table; returns whether it
        was kept."""
        if stream_id not in self._arrival and stream_id not in self._priority:
            pending = len(self._priority) - sum(1 for s in self._priority if s in self._arrival)
            if pending >= MAX_PENDING_PRIORITIES:
                return False
        self._priority[stream_id] = priority
        return True

    def priority(self, stream_id: int) -> Priority:
        return self._priority.get(stream_id, Priority())

    def remove(self, stream_id: int) -> None:
        self._arrival.pop(stream_id, None)
        self._priority.pop(stream_id, None)

    def order(self, stream_ids: Sequence[int]) -> list[int]:
        """Service order: streams the scheduler does not know (HTTP/3 control and QPACK
        streams) first, in the order given, then the request streams by policy."""
        unknown = [sid for sid in stream_ids if sid not in self._arrival]
        states = [
            StreamState(stream_id=sid, arrival=self._arrival[sid], priority=self.priority(sid))
            for sid in stream_ids
            if sid in self._arrival
        ]
        return unknown + order(self.policy, states)
