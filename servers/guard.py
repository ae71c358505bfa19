"""Abuse limits of the servers, without I/O: counters over a time window, admission of
connections per source and in total, and the HTTP/2 per-connection abuse verdicts
(CVE-2023-44487 rapid reset, a peer that keeps sending on a reset stream, a request head
that never completes).

Every method takes ``now`` (CLOCK_MONOTONIC seconds); the asyncio edges in
:mod:`servers.h2server` and :mod:`servers.h3server` call them and act on the verdict
(GOAWAY(ENHANCE_YOUR_CALM) and close, Retry, refusal). Memory is bounded: a window counter
keeps at most ``limit + 1`` timestamps, admission one counter per source with a connection.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

RESET_WINDOW_S = 10.0
"""The window over which resets and new streams are counted (as nginx/h2o count them per
connection after CVE-2023-44487: a rate, not a lifetime total)."""
MAX_PEER_RESETS_PER_WINDOW = 200
"""RST_STREAM frames a client may send per window. The testbed's clients reset a stream only
when a request times out or is abandoned: a handful per connection. 200 in 10 s is 20/s,
two orders of magnitude below a rapid-reset attack (28,000/s in the issue's test)."""
MAX_STREAMS_PER_WINDOW = 2_000
"""Streams a client may open per window (200/s): a request on a 200 ms path takes at least
one RTT, and no workload keeps more than a few streams open at once."""
RESET_STREAM_GRACE_BYTES = 1024 * 1024
"""DATA a peer may send on one stream after the server reset it, beyond the stream's
flow-control window: what was in flight before the RST_STREAM arrived is at most a window
(RFC 9113 section 6.4: frames in flight are to be expected); more is a peer ignoring it."""
RESET_STREAMS_TRACKED = 128
"""Reset streams whose late DATA is counted (the most recent ones; older ones drop out)."""
DEFAULT_HEAD_TIMEOUT_S = 10.0
"""Deadline for a request head (and the connection preface) once its first byte arrived:
a head is a few hundred bytes, one segment; 10 s is an RTT at the longest link allowed
(netem.linkspec MAX_DELAY) and stops slowloris, which trickles a byte at a time."""
DEFAULT_MAX_CONNECTIONS = 2_048
"""Concurrent connections per protocol in total (each costs ~50-100 KB of TLS state)."""
DEFAULT_MAX_CONNECTIONS_PER_SOURCE = 256
"""Concurrent connections from one source address: one host cannot take the whole table."""
DEFAULT_LISTEN_BACKLOG = 4_096
"""listen() backlog (the kernel caps it at net.core.somaxconn, 4096 on these kernels); 128
refused most of a 2,000-connection burst."""
DEFAULT_RETRY_THRESHOLD = 64
"""QUIC: connections in handshake (or new connection attempts per second) above which every
new Initial without a valid token gets a Retry (RFC 9000 section 8.1.2)."""
MAX_INITIALS_PER_SOURCE_PER_S = 100.0
"""QUIC Initials for new connections one source address may send per second (burst: twice
that); beyond it they are dropped before any cryptography. A client sends one or two per
connection; this is a hundred new connections a second from one address. A flood from one
source then costs a dictionary lookup per datagram, little enough for the socket to keep up
(at ~35 us of Retry work per datagram a 50,000-datagram/s flood overflows the receive buffer
and the normal clients' Initials are lost with it)."""
RATE_LIMITED_SOURCES = 4_096
"""Source addresses whose Initial rate is tracked (least recently seen ones drop out)."""
RETRY_MODES = ("auto", "always", "off")
"""QUIC address validation: Retry under load (``auto``), for every connection, or never."""


class WindowCounter:
    """Events over the last ``window_s`` seconds; ``add`` says whether ``limit`` is passed.

    Keeps at most ``limit + 1`` timestamps, so memory is bounded whatever the peer sends."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self._times: deque[float] = deque(maxlen=limit + 1)

    def add(self, now: float) -> bool:
        """Count one event at ``now``; True when more than ``limit`` fall in the window."""
        self._times.append(now)
        return self.over(now)

    def over(self, now: float) -> bool:
        times = self._times
        horizon = now - self.window_s
        while times and times[0] <= horizon:
            times.popleft()
        return len(times) > self.limit

    def count(self, now: float) -> int:
        self.over(now)
        return len(self._times)


@dataclass
class Admission:
    """Connections admitted per source address and in total."""

    max_total: int = DEFAULT_MAX_CONNECTIONS
    max_per_source: int = DEFAULT_MAX_CONNECTIONS_PER_SOURCE
    total: int = 0
    refused: int = 0

    def __post_init__(self) -> None:
        self._per_source: dict[str, int] = {}

    def admit(self, source: str) -> str | None:
        """Take a slot for ``source``; None if admitted, else the reason for refusing."""
        if self.total >= self.max_total:
            self.refused += 1
            return f"connection cap reached ({self.max_total} in total)"
        held = self._per_source.get(source, 0)
        if held >= self.max_per_source:
            self.refused += 1
            return f"connection cap reached ({self.max_per_source} from {source})"
        self._per_source[source] = held + 1
        self.total += 1
        return None

    def release(self, source: str) -> None:
        held = self._per_source.get(source, 0)
        if held <= 0:
            return
        self.total -= 1
        if held == 1:
            del self._per_source[source]
        else:
            self._per_source[source] = held - 1

    def held(self, source: str) -> int:
        return self._per_source.get(source, 0)


@dataclass(frozen=True)
class H2Limits:
    """Per-connection HTTP/2 limits (see the module constants for each reason)."""

    window_s: float = RESET_WINDOW_S
    max_peer_resets: int = MAX_PEER_RESETS_PER_WINDOW
    max_streams: int = MAX_STREAMS_PER_WINDOW
    reset_stream_grace_bytes: int = RESET_STREAM_GRACE_BYTES


class H2AbuseGuard:
    """The abuse verdicts of one HTTP/2 connection: each ``on_*`` returns None, or the
    reason to send GOAWAY(ENHANCE_YOUR_CALM) and close."""

    def __init__(self, limits: H2Limits, stream_window_bytes: int) -> None:
        self.limits = limits
        self.stream_window_bytes = stream_window_bytes
        self._resets = WindowCounter(limits.max_peer_resets, limits.window_s)
        self._streams = WindowCounter(limits.max_streams, limits.window_s)
        self._late_bytes: OrderedDict[int, int] = OrderedDict()
        self.resets_seen = 0
        self.streams_seen = 0

    def on_stream_opened(self, now: float) -> str | None:
        self.streams_seen += 1
        if self._streams.add(now):
            return (
                f"more than {self.limits.max_streams} streams opened in {self.limits.window_s:g} s"
            )
        return None

    def on_peer_reset(self, now: float) -> str | None:
        self.resets_seen += 1
        if self._resets.add(now):
            return (
                f"more than {self.limits.max_peer_resets} RST_STREAM in "
                f"{self.limits.window_s:g} s (rapid reset, CVE-2023-44487)"
            )
        return None

    def on_data_after_reset(self, stream_id: int, size_bytes: int) -> str | None:
        """DATA arrived on a stream already closed (by a reset or a finished exchange)."""
        late = self._late_bytes
        total = late.pop(stream_id, 0) + size_bytes
        late[stream_id] = total
        while len(late) > RESET_STREAMS_TRACKED:
            late.popitem(last=False)
        bound = self.stream_window_bytes + self.limits.reset_stream_grace_bytes
        if total > bound:
            return f"{total} bytes sent on closed stream {stream_id} (bound {bound})"
        return None


class HeadDeadline:
    """A request head (or the connection preface) must be complete within ``timeout_s`` of
    its first byte: slowloris sends one byte at a time to hold a connection forever."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.started_at: float | None = None

    def update(self, partial: bool, now: float) -> None:
        """After each read: ``partial`` says whether an incomplete frame or header block is
        buffered."""
        if not partial:
            self.started_at = None
        elif self.started_at is None:
            self.started_at = now

    def expired(self, now: float) -> bool:
        return self.started_at is not None and now - self.started_at > self.timeout_s

    def due_at(self) -> float | None:
        return None if self.started_at is None else self.started_at + self.timeout_s


@dataclass
class RetryPolicy:
    """When a new QUIC connection must prove its address with a Retry first: always, never,
    or (``auto``) when more than ``threshold`` connections are in handshake or more than
    ``threshold`` new connections were attempted in the last second."""

    mode: str = "auto"
    threshold: int = DEFAULT_RETRY_THRESHOLD
    window_s: float = 1.0

    def __post_init__(self) -> None:
        self._attempts = WindowCounter(self.threshold, self.window_s)

    def note_attempt(self, now: float) -> None:
        self._attempts.add(now)

    def required(self, handshaking: int, now: float) -> bool:
        if self.mode == "always":
            return True
        if self.mode == "off":
            return False
        return handshaking >= self.threshold or self._attempts.over(now)


class SourceRateLimiter:
    """A token bucket per source address, for at most ``max_sources`` addresses (the least
    recently seen are forgotten, so memory is bounded under spoofing)."""

    def __init__(
        self,
        rate_per_s: float = MAX_INITIALS_PER_SOURCE_PER_S,
        burst: float | None = None,
        max_sources: int = RATE_LIMITED_SOURCES,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = 2 * rate_per_s if burst is None else burst
        self.max_sources = max_sources
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.dropped = 0

    def allow(self, source: str, now: float) -> bool:
        tokens, last = self._buckets.pop(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate_per_s)
        allowed = tokens >= 1.0
        if allowed:
            tokens -= 1.0
        else:
            self.dropped += 1
        self._buckets[source] = (tokens, now)
        if len(self._buckets) > self.max_sources:
            self._buckets.popitem(last=False)
        return allowed
