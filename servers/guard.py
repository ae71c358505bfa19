"""Abuse limits of the servers, without I/O: counters over a time window, admission of
connections per source and in total, and the HTTP/2 per-connection abuse verdicts
(CVE-2023-44487 rapid reset, a peer that keeps sending on a reset stream, a request head
that never completes, and the control-frame floods of the 2019 advisories: CVE-2019-9512
ping, 9513 priority, 9514 reset, 9515 settings, 9518 empty frames, and replies the peer
never reads).

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
MAX_SETTINGS_PER_WINDOW = 50
"""SETTINGS frames (and their ACKs) a client may send per window (CVE-2019-9515): a client
sends its SETTINGS once and acknowledges the server's once (RFC 9113 section 6.5); a change
mid-connection is rare. Every one costs the server an ACK."""
MAX_PINGS_PER_WINDOW = 100
"""PING frames per window (CVE-2019-9512): 10/s, ten times a client that measures its RTT
every 100 ms; the testbed's relay sends one every 10 s. Every PING costs a PING ACK."""
MAX_EMPTY_FRAMES_PER_WINDOW = 100
"""DATA or HEADERS frames with nothing in them and without END_STREAM, and empty
CONTINUATION frames without END_HEADERS, per window (CVE-2019-9518): they carry nothing, so
a correct sender has no reason for them; a few are tolerated."""
MAX_PRIORITY_PER_WINDOW = MAX_STREAMS_PER_WINDOW
"""PRIORITY frames per window (CVE-2019-9513's priority churn): one for every stream a
client may open in the window (browsers send one per request, or a few at the start)."""
MAX_WINDOW_UPDATES_PER_WINDOW = 1_000
"""WINDOW_UPDATE frames per window beyond :data:`WINDOW_UPDATES_PER_DATA_FRAME` for every DATA
frame the server sent: a client credits what it received (a stream and the connection per
frame at most); updates for nothing cost the server a parse and a wake-up of its sender."""
WINDOW_UPDATES_PER_DATA_FRAME = 2
"""A stream's and the connection's update for each DATA frame received (RFC 9113 6.9)."""
MAX_SERVER_RESETS_PER_WINDOW = MAX_STREAMS_PER_WINDOW
"""RST_STREAM frames the server may be made to send per window (CVE-2019-9514: frames on
closed streams and refused requests each draw one): one for every stream a client may open."""
MAX_UNREAD_REPLIES = 1_000
"""Replies (SETTINGS ACK, PING ACK, RST_STREAM) the server may queue while the peer does not
read (the transport's writing paused: kernel and write buffers full). A client that reads
nothing while it makes the server answer a thousand frames is not reading at all; Go's
server closes at 10,000 queued control frames (its fix of CVE-2019-9512/9515)."""
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


H2_DATA, H2_HEADERS, H2_PRIORITY, H2_RST_STREAM, H2_SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
H2_PUSH_PROMISE, H2_PING, H2_GOAWAY, H2_WINDOW_UPDATE, H2_CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
"""Frame types (RFC 9113 section 6)."""
H2_PRIORITY_UPDATE = 0x10
"""RFC 9218 section 7.1."""
H2_KNOWN_TYPES = frozenset(range(0x0, 0xA)) | {H2_PRIORITY_UPDATE}
MAX_UNKNOWN_FRAMES_PER_WINDOW = 100
"""Frames of a type this server does not know, per window: RFC 9113 section 5.5 says to
ignore them, and ignoring still costs a parse and an event each; an extension the testbed does
not speak has no reason to send a hundred in 10 s."""
MAX_PRIORITY_UPDATES_PER_WINDOW = MAX_STREAMS_PER_WINDOW
"""PRIORITY_UPDATE frames per window (RFC 9218): one for every stream a client may open in
the window, as for PRIORITY (CVE-2019-9513)."""
MAX_HEADER_BLOCK_BYTES = 64 * 1024
"""A request's whole header block (HEADERS and its CONTINUATIONs, compressed) at most, checked
as each frame header arrives, before its body: the decoded list is held to 64 KiB too
(h2's SETTINGS_MAX_HEADER_LIST_SIZE, RFC 9113 section 10.5.1), and a compressed block is
rarely larger than its list. hpack copies the rest of the block for every literal it
decodes, so the decoding time grows with the square of the block: 1 MiB took 0.2 s and
63 MiB 107 s here; 64 KiB takes under a millisecond."""
MIN_FRAME_RATE_BYTES_PER_S = 4096
"""A partial frame must arrive at least this fast (bytes per second, after the head deadline):
a 1 MiB DATA frame may take 256 s, a byte every 20 s of it is a trickle (32 kbit/s is below
every link the testbed emulates)."""
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""RFC 9113 section 3.4: the client's connection preface."""
H2_FRAME_HEADER_BYTES = 9
H2_FLAG_ACK = H2_FLAG_END_STREAM = 0x1
H2_FLAG_END_HEADERS = 0x4
"""Frame flags (RFC 9113 sections 6.1, 6.2, 6.5, 6.7)."""


@dataclass(frozen=True)
class H2Limits:
    """Per-connection HTTP/2 limits (see the module constants for each reason)."""

    window_s: float = RESET_WINDOW_S
    max_peer_resets: int = MAX_PEER_RESETS_PER_WINDOW
    max_streams: int = MAX_STREAMS_PER_WINDOW
    reset_stream_grace_bytes: int = RESET_STREAM_GRACE_BYTES
    max_settings: int = MAX_SETTINGS_PER_WINDOW
    max_pings: int = MAX_PINGS_PER_WINDOW
    max_empty_frames: int = MAX_EMPTY_FRAMES_PER_WINDOW
    max_priority: int = MAX_PRIORITY_PER_WINDOW
    max_priority_updates: int = MAX_PRIORITY_UPDATES_PER_WINDOW
    max_unknown_frames: int = MAX_UNKNOWN_FRAMES_PER_WINDOW
    max_window_updates: int = MAX_WINDOW_UPDATES_PER_WINDOW
    max_server_resets: int = MAX_SERVER_RESETS_PER_WINDOW
    max_unread_replies: int = MAX_UNREAD_REPLIES


def is_empty_frame(frame_type: int, flags: int, content_bytes: int) -> bool:
    """CVE-2019-9518's frames: DATA or HEADERS with no content and without END_STREAM, or a
    CONTINUATION with no content and without END_HEADERS (``content_bytes``: the data or the
    header block fragment, padding excluded)."""
    if content_bytes:
        return False
    if frame_type in (H2_DATA, H2_HEADERS):
        return not flags & H2_FLAG_END_STREAM
    return frame_type == H2_CONTINUATION and not flags & H2_FLAG_END_HEADERS


class _Budget:
    """One kind of frame counted over the window, and what the verdict calls it."""

    def __init__(self, limit: int, window_s: float, name: str, advisory: str) -> None:
        self.counter = WindowCounter(limit, window_s)
        self.name = name
        self.advisory = advisory

    def add(self, now: float) -> str | None:
        if not self.counter.add(now):
            return None
        counter = self.counter
        return f"more than {counter.limit} {self.name} in {counter.window_s:g} s ({self.advisory})"


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
        window = limits.window_s
        self._received = {
            H2_SETTINGS: _Budget(limits.max_settings, window, "SETTINGS", "CVE-2019-9515"),
            H2_PING: _Budget(limits.max_pings, window, "PING", "CVE-2019-9512"),
            H2_PRIORITY: _Budget(limits.max_priority, window, "PRIORITY", "CVE-2019-9513"),
            H2_PRIORITY_UPDATE: _Budget(
                limits.max_priority_updates, window, "PRIORITY_UPDATE", "RFC 9218 churn"
            ),
        }
        self._unknown = _Budget(
            limits.max_unknown_frames, window, "frames of unknown types", "RFC 9113 5.5 flood"
        )
        self._empty = _Budget(limits.max_empty_frames, window, "empty frames", "CVE-2019-9518")
        self._window_updates = _Budget(
            limits.max_window_updates, window, "WINDOW_UPDATE beyond the DATA sent", "flood"
        )
        self._server_resets = _Budget(
            limits.max_server_resets, window, "RST_STREAM drawn from the server", "CVE-2019-9514"
        )
        self._update_credit = 0
        """WINDOW_UPDATE frames the DATA sent so far entitle the peer to."""
        self.writing_paused = False
        self.unread_replies = 0
        """Replies queued since the transport last stopped taking writes."""

    # -- frames as they arrive and leave (the control-frame floods) ------------------------
    def on_frame_received(
        self, frame_type: int, flags: int, content_bytes: int, now: float
    ) -> str | None:
        """Every frame the peer sent, before it is processed."""
        if frame_type == H2_RST_STREAM:
            return self.on_peer_reset(now)
        if is_empty_frame(frame_type, flags, content_bytes):
            return self._empty.add(now)
        if frame_type == H2_WINDOW_UPDATE:
            if self._update_credit > 0:
                self._update_credit -= 1
                return None
            return self._window_updates.add(now)
        if frame_type not in H2_KNOWN_TYPES:
            return self._unknown.add(now)
        budget = self._received.get(frame_type)
        return None if budget is None else budget.add(now)

    def on_frame_sent(self, frame_type: int, flags: int, now: float) -> str | None:
        """Every frame the server queues for sending."""
        if frame_type == H2_DATA:
            self._update_credit += WINDOW_UPDATES_PER_DATA_FRAME
            return None
        reply = frame_type == H2_RST_STREAM or (
            frame_type in (H2_SETTINGS, H2_PING) and flags & H2_FLAG_ACK
        )
        if not reply:
            return None
        if self.writing_paused:
            self.unread_replies += 1
            if self.unread_replies > self.limits.max_unread_replies:
                return (
                    f"{self.unread_replies} replies queued while the peer reads nothing "
                    "(CVE-2019-9512/9515: ACKs never read)"
                )
        if frame_type == H2_RST_STREAM:
            return self._server_resets.add(now)
        return None

    def on_writing_paused(self) -> None:
        """The transport's buffer is full: what is queued now waits for the peer to read."""
        self.writing_paused = True

    def on_writing_resumed(self) -> None:
        """The peer read: the buffer drained below its low-water mark."""
        self.writing_paused = False
        self.unread_replies = 0

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


class H2WireScanner:
    """Frame headers read off the wire before h2 parses anything: a frame longer than the
    SETTINGS_MAX_FRAME_SIZE we advertised, or a header block longer than
    :data:`MAX_HEADER_BLOCK_BYTES`, is refused when its 9-byte header arrives, before a byte
    of its body is buffered (h2 checks a frame's length only once it is whole, and a header
    block only once it ends); a partial frame has a deadline that grows with its length
    (:meth:`partial_due_at`)."""

    def __init__(
        self,
        max_frame_bytes: int,
        max_block_bytes: int = MAX_HEADER_BLOCK_BYTES,
        head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S,
        min_rate_Bps: float = MIN_FRAME_RATE_BYTES_PER_S,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.max_block_bytes = max_block_bytes
        self.head_timeout_s = head_timeout_s
        self.min_rate_Bps = min_rate_Bps
        self._preface_left = len(H2_PREFACE)
        self._header = bytearray()
        self._body_left = 0
        self._block_bytes: int | None = None
        """Bytes of the header block being received (None: no block open)."""
        self._partial_due: float | None = None
        self.frames = 0
        """Frame headers read."""
        self.protocol_error: str | None = None
        """A violation that is not abuse (a frame above SETTINGS_MAX_FRAME_SIZE: RFC 9113
        section 4.2, FRAME_SIZE_ERROR); once set, nothing more is scanned."""
        self._broken = False

    def feed(self, data: bytes | memoryview, now: float) -> str | None:
        """Scan ``data``; the reason to refuse the connection for abuse, or None (see also
        :attr:`protocol_error`). Bytes that are not HTTP/2 (a wrong preface) are left to h2's
        own error."""
        view = memoryview(data)
        at, end = 0, len(view)
        if self._broken or self.protocol_error is not None:
            return None
        if self._preface_left:
            taken = min(self._preface_left, end)
            done = len(H2_PREFACE) - self._preface_left
            if bytes(view[:taken]) != H2_PREFACE[done : done + taken]:
                self._broken = True
                return None
            self._preface_left -= taken
            at = taken
        while at < end and self.protocol_error is None:
            if self._body_left:
                taken = min(self._body_left, end - at)
                self._body_left -= taken
                at += taken
                if not self._body_left:
                    self._partial_due = None
                continue
            need = H2_FRAME_HEADER_BYTES - len(self._header)
            self._header += view[at : at + need]
            at += min(need, end - at)
            if len(self._header) < H2_FRAME_HEADER_BYTES:
                break
            reason = self._on_header(bytes(self._header), now)
            self._header.clear()
            if reason is not None:
                return reason
        return None

    def _on_header(self, header: bytes, now: float) -> str | None:
        length = int.from_bytes(header[:3], "big")
        frame_type, flags = header[3], header[4]
        self.frames += 1
        if length > self.max_frame_bytes:
            self.protocol_error = (
                f"a frame of {length} bytes above our SETTINGS_MAX_FRAME_SIZE "
                f"{self.max_frame_bytes} (RFC 9113 section 4.2)"
            )
            return None
        if frame_type in (H2_HEADERS, H2_PUSH_PROMISE):
            self._block_bytes = length
        elif frame_type == H2_CONTINUATION and self._block_bytes is not None:
            self._block_bytes += length
        if self._block_bytes is not None and self._block_bytes > self.max_block_bytes:
            return f"a header block of {self._block_bytes}+ bytes (bound {self.max_block_bytes})"
        if frame_type in (H2_HEADERS, H2_PUSH_PROMISE, H2_CONTINUATION) and (
            flags & H2_FLAG_END_HEADERS
        ):
            self._block_bytes = None
        self._body_left = length
        if length:
            self._partial_due = now + self.head_timeout_s + length / self.min_rate_Bps
        return None

    def partial_due_at(self) -> float | None:
        """When the frame being received must be whole (None: none is partial)."""
        return self._partial_due

    @property
    def in_header_block(self) -> bool:
        return self._block_bytes is not None


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
