"""HTTP/3 stream bytes read as they arrive, before aioquic parses them (plain code, no I/O).

aioquic buffers a control-stream or request-stream frame until it is whole and parses the
whole buffer again on every packet: an 8 MB reserved frame on the control stream, or an 8 MB
HEADERS frame on a request stream, cost seconds of CPU (and the server's own second reading
of the control stream, for RFC 9218's PRIORITY_UPDATE, copied the buffer every packet too).
This scanner keeps per stream only what an unfinished varint needs (at most 16 bytes) and the
payload of a PRIORITY_UPDATE (bounded), skips every other payload as it arrives, and caps each
frame's length by its type (:data:`MAX_FRAME_BYTES`): a longer frame closes the connection
with H3_EXCESSIVE_LOAD before a byte of its payload is held.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proto.priority import PRIORITY_UPDATE_H3
from servers.guard import MAX_HEADER_BLOCK_BYTES

H3_DATA, H3_HEADERS, H3_CANCEL_PUSH, H3_SETTINGS = 0x0, 0x1, 0x3, 0x4
H3_PUSH_PROMISE, H3_GOAWAY, H3_MAX_PUSH_ID = 0x5, 0x7, 0xD
"""Frame types (RFC 9114 section 7.2)."""
H3_PRIORITY_UPDATE_PUSH = PRIORITY_UPDATE_H3 + 1
"""RFC 9218 section 7.2: PRIORITY_UPDATE for a push stream (0xF0701)."""
H3_CONTROL_STREAM_TYPE = 0x00
"""RFC 9114 section 6.2.1."""
H3_EXCESSIVE_LOAD = 0x0107
"""RFC 9114 section 8.1: the peer is exhibiting a behavior that might be generating
excessive load."""
MAX_UNKNOWN_FRAME_BYTES = 16 * 1024
"""A frame of a type this server does not know (RFC 9114 section 9: ignored) at most."""
MAX_FRAME_BYTES = {
    H3_HEADERS: MAX_HEADER_BLOCK_BYTES,
    H3_SETTINGS: 4096,
    H3_CANCEL_PUSH: 16,
    H3_GOAWAY: 16,
    H3_MAX_PUSH_ID: 16,
    PRIORITY_UPDATE_H3: 1024,
    H3_PRIORITY_UPDATE_PUSH: 1024,
}
"""A frame's length at most, by type (DATA is streamed, so unbounded; anything else
:data:`MAX_UNKNOWN_FRAME_BYTES`): a header block as HTTP/2's, a SETTINGS frame of a few
dozen settings, a PRIORITY_UPDATE of a stream id and a short field value, a single varint for
the rest."""
HEAD_BYTES = 16
"""A frame head (two varints) or a stream type needs at most this many bytes."""
CLIENT_BIDI, CLIENT_UNI = 0, 2
"""RFC 9000 section 2.1: the low two bits of a client-initiated stream's id."""


def varint_length(first: int) -> int:
    """RFC 9000 section 16: the two high bits give 1, 2, 4 or 8 bytes."""
    return 1 << (first >> 6)


def read_varint(data: bytes | bytearray, at: int) -> tuple[int, int] | None:
    """The varint at ``at`` and the offset after it; None when it is not whole yet."""
    if at >= len(data):
        return None
    size = varint_length(data[at])
    if at + size > len(data):
        return None
    value = data[at] & 0x3F
    for byte in data[at + 1 : at + size]:
        value = (value << 8) | byte
    return value, at + size


@dataclass
class _Stream:
    frames: bool
    """Frames follow (a request stream, or a control stream once its type is read)."""
    skip: bool = False
    """A unidirectional stream that is not the control stream: not read further."""
    pending: bytearray = field(default_factory=bytearray)
    frame_type: int | None = None
    left: int = 0
    payload: bytearray | None = None


@dataclass(frozen=True)
class Verdict:
    error_code: int
    reason: str


@dataclass
class ScanResult:
    priority_updates: list[tuple[int, bytes]] = field(default_factory=list)
    """(prioritized element id, field value) of each whole PRIORITY_UPDATE read."""
    verdict: Verdict | None = None


class H3StreamScanner:
    """The client's request and control streams of one connection, frame by frame. State is
    kept per open stream (an ended or reset one is forgotten), a few bytes each."""

    def __init__(self) -> None:
        self._streams: dict[int, _Stream] = {}

    def feed(self, stream_id: int, data: bytes, end_stream: bool) -> ScanResult:
        result = ScanResult()
        kind = stream_id % 4
        if kind not in (CLIENT_BIDI, CLIENT_UNI):
            return result
        state = self._streams.setdefault(stream_id, _Stream(frames=kind == CLIENT_BIDI))
        if not state.skip:
            self._scan(state, data, result)
        if end_stream or result.verdict is not None:
            self._streams.pop(stream_id, None)
        return result

    def _scan(self, state: _Stream, data: bytes, result: ScanResult) -> None:
        at = 0
        while at < len(data) and result.verdict is None and not state.skip:
            if state.left:
                take = min(state.left, len(data) - at)
                if state.payload is not None:
                    state.payload += data[at : at + take]
                state.left -= take
                at += take
                if not state.left:
                    self._frame_done(state, result)
                continue
            held = len(state.pending)
            chunk = data[at : at + HEAD_BYTES - held]
            state.pending += chunk
            used = self._parse_head(state, result)
            if used is None:
                at += len(chunk)
                continue
            at += used - held  # what it used beyond the bytes it already held
            state.pending.clear()

    def _parse_head(self, state: _Stream, result: ScanResult) -> int | None:
        """Parse a stream type or a frame head from ``state.pending``; the bytes it used, or
        None while it is incomplete."""
        buf = state.pending
        if not state.frames:
            got = read_varint(buf, 0)
            if got is None:
                return None
            state.frames = got[0] == H3_CONTROL_STREAM_TYPE
            state.skip = not state.frames  # QPACK and push streams: aioquic reads them
            return got[1]
        kind = read_varint(buf, 0)
        if kind is None:
            return None
        length = read_varint(buf, kind[1])
        if length is None:
            return None
        frame_type, size = kind[0], length[0]
        bound = MAX_FRAME_BYTES.get(frame_type, MAX_UNKNOWN_FRAME_BYTES)
        if frame_type != H3_DATA and size > bound:
            result.verdict = Verdict(
                H3_EXCESSIVE_LOAD, f"frame type 0x{frame_type:x} of {size} bytes (bound {bound})"
            )
            return length[1]
        state.frame_type, state.left = frame_type, size
        state.payload = bytearray() if frame_type == PRIORITY_UPDATE_H3 else None
        if not size:
            self._frame_done(state, result)
        return length[1]

    @staticmethod
    def _frame_done(state: _Stream, result: ScanResult) -> None:
        if state.frame_type == PRIORITY_UPDATE_H3 and state.payload is not None:
            got = read_varint(state.payload, 0)
            if got is not None:
                result.priority_updates.append((got[0], bytes(state.payload[got[1] :])))
        state.frame_type, state.payload = None, None

    def forget(self, stream_id: int) -> None:
        """The stream is gone (reset): nothing of it is kept."""
        self._streams.pop(stream_id, None)

    @property
    def streams_held(self) -> int:
        return len(self._streams)
