"""The control protocol between ``tb-h3`` (tbh3.c) and its Python edge, sans-I/O.

Every frame, both ways: a 48-byte header (payload length u32, type u8, 3 bytes of padding,
connection i64, stream i64, CLOCK_MONOTONIC time in ns u64, two integers ``a`` and ``b``
u64; little-endian, as both ends run on this host) then the payload. One frame per HTTP
event (a request's head, a batch of body bytes, an end, a reset...), never one per datagram:
the datagrams stay in C. tbh3.c's ``EV_*`` and ``CMD_*`` enums hold the same numbers.

:class:`Decoder` turns the engine's bytes into typed events (one dataclass per kind);
:func:`command` encodes what the edge asks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

HEADER = struct.Struct("<IB3xqqQQQ")
"""tbh3.c's ``frame_hdr``."""
NS_PER_S = 1e9
NO_VALUE = (1 << 64) - 1
"""A u64 the engine sends for "not known yet" (ngtcp2's UINT64_MAX: ssthresh before any loss,
min RTT before any sample)."""
STAT_FIELDS = (
    "bytes_in_flight",
    "cwnd",
    "ssthresh",
    "smoothed_rtt_us",
    "latest_rtt_us",
    "min_rtt_us",
    "packets_sent",
    "packets_received",
    "pto_count",
    "pacing_rate",
    "delivery_rate",
    "send_quantum",
)
"""An ``EV_STATS`` payload, u64 each (tbh3.c ``sample``): ngtcp2_conn_stat in TCP_INFO's
units (bytes, µs, bytes/s) and the engine's own datagram counts."""
STATS = struct.Struct(f"<{len(STAT_FIELDS)}Q")


class Ev(IntEnum):
    READY = 1
    CONN_OPEN = 2
    HANDSHAKE = 3
    HEADERS = 4
    DATA = 5
    END = 6
    RESET = 7
    STOP_SENDING = 8
    SENT = 9
    CLOSED = 10
    STATS = 11
    TICKET = 12
    STREAM = 13
    QLOG = 14
    ERROR = 15
    ACKED = 16
    DROPPED = 17


class Cmd(IntEnum):
    CONNECT = 101
    REQUEST = 102
    BODY = 103
    RESPOND = 104
    STOP = 105
    PRIORITY = 106
    CLOSE = 107
    QUIT = 108


STOP_READING = 1
"""``Cmd.STOP`` ``b``: STOP_SENDING (RFC 9000 section 19.5) for the peer's side."""
STOP_WRITING = 2
"""``Cmd.STOP`` ``b``: RESET_STREAM (RFC 9000 section 19.4) of our side."""


@dataclass(frozen=True)
class Event:
    conn: int
    t: float
    """CLOCK_MONOTONIC seconds (``time.monotonic()``'s clock) when the engine saw it."""


@dataclass(frozen=True)
class Ready(Event):
    port: int


@dataclass(frozen=True)
class ConnOpen(Event):
    peer: str


@dataclass(frozen=True)
class Handshake(Event):
    resumed: bool
    early_data_accepted: bool


@dataclass(frozen=True)
class Headers(Event):
    stream: int
    headers: list[tuple[str, str]]
    ended: bool


@dataclass(frozen=True)
class Data(Event):
    stream: int
    data: bytes


@dataclass(frozen=True)
class End(Event):
    stream: int


@dataclass(frozen=True)
class Reset(Event):
    stream: int
    error_code: int


@dataclass(frozen=True)
class StopSending(Event):
    stream: int
    error_code: int


@dataclass(frozen=True)
class Sent(Event):
    """Every byte of our side of the stream, and its FIN, put in packets once."""

    stream: int
    body_bytes: int


@dataclass(frozen=True)
class Acked(Event):
    """Every body byte of our side of the stream acknowledged."""

    stream: int
    body_bytes: int


@dataclass(frozen=True)
class Dropped(Event):
    """A datagram the server's guard dropped (the first ones of a flood only are reported;
    ``count`` is every one so far)."""

    peer: str
    reason: str
    count: int


@dataclass(frozen=True)
class Closed(Event):
    error_code: int
    by_peer: bool
    reason: str


@dataclass(frozen=True)
class Stats(Event):
    values: dict[str, int | None]


@dataclass(frozen=True)
class Ticket(Event):
    blob: bytes
    """The TLS session and the server's transport parameters, as CONNECT takes them back."""


@dataclass(frozen=True)
class StreamOpened(Event):
    stream: int
    tag: int


@dataclass(frozen=True)
class Qlog(Event):
    path: str


@dataclass(frozen=True)
class Error(Event):
    reason: str


def decode_headers(payload: bytes) -> list[tuple[str, str]]:
    """``name\\0value\\0...`` as pairs (names are lowercase on HTTP/3's wire)."""
    parts = payload.split(b"\0")
    return [
        (parts[i].decode("latin-1"), parts[i + 1].decode("latin-1"))
        for i in range(0, len(parts) - 1, 2)
    ]


def encode_headers(headers: list[tuple[str, str]]) -> bytes:
    out = bytearray()
    for name, value in headers:
        for text in (name, value):
            raw = text.encode("latin-1")
            if b"\0" in raw:
                raise ValueError(f"header {name!r}: a NUL byte")
            out += raw + b"\0"
    return bytes(out)


def decode_stats(payload: bytes) -> dict[str, int | None]:
    values = STATS.unpack(payload[: STATS.size])
    return {k: (None if v == NO_VALUE else v) for k, v in zip(STAT_FIELDS, values, strict=True)}


def _event(kind: int, conn: int, stream: int, t: float, a: int, b: int, p: bytes) -> Event:
    if kind == Ev.READY:
        return Ready(conn, t, port=a)
    if kind == Ev.CONN_OPEN:
        return ConnOpen(conn, t, peer=p.decode())
    if kind == Ev.HANDSHAKE:
        return Handshake(conn, t, resumed=bool(a), early_data_accepted=bool(b))
    if kind == Ev.HEADERS:
        return Headers(conn, t, stream=stream, headers=decode_headers(p), ended=bool(a))
    if kind == Ev.DATA:
        return Data(conn, t, stream=stream, data=p)
    if kind == Ev.END:
        return End(conn, t, stream=stream)
    if kind == Ev.RESET:
        return Reset(conn, t, stream=stream, error_code=a)
    if kind == Ev.STOP_SENDING:
        return StopSending(conn, t, stream=stream, error_code=a)
    if kind == Ev.SENT:
        return Sent(conn, t, stream=stream, body_bytes=a)
    if kind == Ev.ACKED:
        return Acked(conn, t, stream=stream, body_bytes=a)
    if kind == Ev.DROPPED:
        peer, _, reason = p.decode(errors="replace").partition(" ")
        return Dropped(conn, t, peer=peer, reason=reason, count=a)
    if kind == Ev.CLOSED:
        return Closed(conn, t, error_code=a, by_peer=bool(b), reason=p.decode(errors="replace"))
    if kind == Ev.STATS:
        return Stats(conn, t, values=decode_stats(p))
    if kind == Ev.TICKET:
        return Ticket(conn, t, blob=p)
    if kind == Ev.STREAM:
        return StreamOpened(conn, t, stream=stream, tag=a)
    if kind == Ev.QLOG:
        return Qlog(conn, t, path=p.decode())
    if kind == Ev.ERROR:
        return Error(conn, t, reason=p.decode(errors="replace"))
    raise ValueError(f"tb-h3 sent a frame of unknown type {kind}")


class Decoder:
    """Bytes from the engine in, whole events out (a frame may arrive in pieces)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Event]:
        self._buf += data
        events = []
        offset = 0
        buf = self._buf
        while len(buf) - offset >= HEADER.size:
            length, kind, conn, stream, t_ns, a, b = HEADER.unpack_from(buf, offset)
            end = offset + HEADER.size + length
            if end > len(buf):
                break
            payload = bytes(buf[offset + HEADER.size : end])
            events.append(_event(kind, conn, stream, t_ns / NS_PER_S, a, b, payload))
            offset = end
        del buf[:offset]
        return events


def command(
    kind: Cmd, conn: int, stream: int = -1, a: int = 0, b: int = 0, payload: bytes = b""
) -> bytes:
    """One frame to the engine (its time field is unused: 0)."""
    return HEADER.pack(len(payload), int(kind), conn, stream, 0, a, b) + payload


def describe(event: Event) -> dict[str, Any]:
    """An event as a plain dict (diagnostics and tests)."""
    return {"kind": type(event).__name__, **event.__dict__}
