"""The FEC protocol's datagrams: layout, authentication and the replay window (no I/O).

Every datagram is::

    type (1) | session id (8) | sequence number (4) | body | tag (16)

``tag`` is HMAC-SHA256 (RFC 2104, FIPS 180-4) over everything before it, truncated to 128
bits (RFC 2104 section 5 allows truncation to no less than half the hash; RFC 4868 uses
the same 128-bit truncation for IPsec), under the key of the sending direction. The two
direction keys are derived from one 32-byte session secret that the server hands the client
over the TLS 1.3 control channel (HMAC-SHA256(secret, label)), so a datagram reflected back
to its sender does not authenticate. The sequence number counts the sender's datagrams of
the session (every type): the receiver's replay window (RFC 4303 section 3.4.3, the IPsec
anti-replay window) drops any number it has seen or that is older than the window, and the
loss estimator reads the gaps.

Why not QUIC DATAGRAM frames (RFC 9221) over aioquic: aioquic counts DATAGRAM frames as
in flight and sends them only within the congestion window (its datagrams wait in
``_datagrams_pending`` while ``cwnd`` is full), so on 14 % random loss reno/cubic would
shrink the window and throttle exactly the transfer FEC is meant to keep at the path rate.
Our own framing over UDP, paced at a measured rate, keeps the rate a decision of this
protocol; the authentication is the same strength (a 128-bit tag per datagram).

Bodies by type (big-endian):

- ``DATA``: transfer (4) | transfer bytes (4) | block (2) | round (1) | round end (4) |
  loss estimate (2) | RaptorQ packet (PayloadId 4 + one symbol).
- ``PROBE``: train index (2) | train length (2) | padding to a full datagram.
- ``REPORT``: probe rate bit/s (8) | probe received (2) | probe train length (2) | time us (4):
  the server's hold time of the client's train, or the client's measured round trip.
- ``FEEDBACK``: transfer (4) | kind (1: done, 2: need) | rate bit/s (8) | loss (4 floats:
  p, P(lost | previous lost), packets in window, rounds asked) | block (2) | needed (4).
"""

from __future__ import annotations

import hmac
import struct
from dataclasses import dataclass

IPV4_UDP_HEADER_BYTES = 28
"""IPv4 (20, RFC 791) + UDP (8, RFC 768)."""
PATH_MTU_BYTES = 1500
"""Ethernet MTU of the emulated path."""
MAX_DATAGRAM_BYTES = PATH_MTU_BYTES - IPV4_UDP_HEADER_BYTES
"""1472: the largest UDP payload that is not fragmented."""
TAG_BYTES = 16
"""HMAC-SHA256 truncated to 128 bits (RFC 2104 section 5, RFC 4868 section 2.3)."""
SECRET_BYTES = 32
SESSION_ID_BYTES = 8

ALPN_FEC = "tb-fec"
"""The FEC protocol's control channel: TLS 1.3 with this ALPN (one session per connection)."""

TYPE_DATA = 1
TYPE_PROBE = 2
TYPE_REPORT = 3
TYPE_FEEDBACK = 4
TYPES = (TYPE_DATA, TYPE_PROBE, TYPE_REPORT, TYPE_FEEDBACK)

FEEDBACK_DONE = 1
FEEDBACK_NEED = 2

_COMMON = struct.Struct("!B8sI")
_DATA = struct.Struct("!IIHBIH")
_PROBE = struct.Struct("!HH")
_REPORT = struct.Struct("!QHHI")
_FEEDBACK = struct.Struct("!IBQddddHI")
RAPTORQ_PAYLOAD_ID_BYTES = 4
"""RFC 6330 section 3.2: source block number (1) + encoding symbol id (3)."""

COMMON_BYTES = _COMMON.size
DATA_OVERHEAD_BYTES = COMMON_BYTES + _DATA.size + RAPTORQ_PAYLOAD_ID_BYTES + TAG_BYTES
SYMBOL_ALIGNMENT_BYTES = 8
"""RaptorQ symbol sizes are a multiple of the alignment Al (RFC 6330 section 4.3; the
``raptorq`` package uses 8)."""
SYMBOL_BYTES = (
    (MAX_DATAGRAM_BYTES - DATA_OVERHEAD_BYTES) // SYMBOL_ALIGNMENT_BYTES * (SYMBOL_ALIGNMENT_BYTES)
)
"""1416: the largest aligned symbol whose DATA datagram fits one unfragmented packet."""
DATA_DATAGRAM_BYTES = DATA_OVERHEAD_BYTES + SYMBOL_BYTES
LOSS_SCALE = 65535
"""The sender's loss estimate travels as an integer fraction of this."""


def derive_keys(secret: bytes) -> tuple[bytes, bytes]:
    """(client-to-server key, server-to-client key) from the session secret."""
    c2s = hmac.digest(secret, b"tb-fec c2s", "sha256")
    s2c = hmac.digest(secret, b"tb-fec s2c", "sha256")
    return c2s, s2c


def seal(key: bytes, head_and_body: bytes) -> bytes:
    return head_and_body + hmac.digest(key, head_and_body, "sha256")[:TAG_BYTES]


def verify(key: bytes, datagram: bytes) -> bytes | None:
    """The datagram without its tag when the tag is right, else None."""
    if len(datagram) <= COMMON_BYTES + TAG_BYTES:
        return None
    body = datagram[:-TAG_BYTES]
    expected = hmac.digest(key, body, "sha256")[:TAG_BYTES]
    return body if hmac.compare_digest(expected, datagram[-TAG_BYTES:]) else None


def peek_session(datagram: bytes) -> tuple[int, bytes, int] | None:
    """(type, session id, sequence) of a datagram long enough to have them, else None."""
    if len(datagram) < COMMON_BYTES + TAG_BYTES:
        return None
    return _COMMON.unpack_from(datagram)


# --- bodies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataHeader:
    transfer: int
    transfer_bytes: int
    block: int
    round: int
    """0 for the first round of the block; +1 for every repair round."""
    round_end: int
    """Symbols of this block the sender will have sent when this round is out."""
    loss_estimate: float
    """The loss rate the sender sized its redundancy with."""


def pack_data(key: bytes, session: bytes, seq: int, header: DataHeader, rq_packet: bytes) -> bytes:
    loss = round(min(max(header.loss_estimate, 0.0), 1.0) * LOSS_SCALE)
    head = _COMMON.pack(TYPE_DATA, session, seq) + _DATA.pack(
        header.transfer,
        header.transfer_bytes,
        header.block,
        min(header.round, 255),
        header.round_end,
        loss,
    )
    return seal(key, head + rq_packet)


def unpack_data(body: bytes) -> tuple[DataHeader, bytes]:
    """(header, RaptorQ packet) of a verified DATA datagram; ValueError when too short."""
    start = COMMON_BYTES
    if len(body) < start + _DATA.size + RAPTORQ_PAYLOAD_ID_BYTES + 1:
        raise ValueError("DATA too short")
    transfer, size, block, round_, end, loss = _DATA.unpack_from(body, start)
    header = DataHeader(transfer, size, block, round_, end, loss / LOSS_SCALE)
    return header, body[start + _DATA.size :]


def pack_probe(key: bytes, session: bytes, seq: int, index: int, count: int) -> bytes:
    head = _COMMON.pack(TYPE_PROBE, session, seq) + _PROBE.pack(index, count)
    return seal(key, head + bytes(DATA_DATAGRAM_BYTES - len(head) - TAG_BYTES))


def unpack_probe(body: bytes) -> tuple[int, int]:
    if len(body) < COMMON_BYTES + _PROBE.size:
        raise ValueError("PROBE too short")
    return _PROBE.unpack_from(body, COMMON_BYTES)


@dataclass(frozen=True)
class Report:
    rate_bps: float
    """Arrival rate of the probe train (0: could not be measured)."""
    received: int
    count: int
    """Datagrams of the train that arrived, of how many."""
    time_s: float
    """Server to client: how long the server held the train before reporting; client to
    server: the round trip the client measured."""


def pack_report(key: bytes, session: bytes, seq: int, report: Report) -> bytes:
    head = _COMMON.pack(TYPE_REPORT, session, seq)
    micros = min(0xFFFFFFFF, max(0, round(report.time_s * 1e6)))
    return seal(
        key, head + _REPORT.pack(int(report.rate_bps), report.received, report.count, micros)
    )


def unpack_report(body: bytes) -> Report:
    if len(body) < COMMON_BYTES + _REPORT.size:
        raise ValueError("REPORT too short")
    rate, got, count, micros = _REPORT.unpack_from(body, COMMON_BYTES)
    if got > count:
        raise ValueError("REPORT received > count")
    return Report(float(rate), got, count, micros / 1e6)


@dataclass(frozen=True)
class Feedback:
    transfer: int
    kind: int
    """FEEDBACK_DONE or FEEDBACK_NEED."""
    rate_bps: float
    """Arrival rate of the transfer's datagrams at the receiver (0: not measured)."""
    loss: float
    """Windowed loss estimate of the receiver."""
    loss_after_loss: float
    """P(lost | previous lost) in the same window (equals ``loss`` for independent loss)."""
    window_packets: float
    """Packets the estimate is over."""
    ask: float
    """NEED: the receiver's round of asking (a repeated ask has a higher number)."""
    block: int = 0
    needed: int = 0
    """NEED: how many more symbols the block needs to decode."""


def pack_feedback(key: bytes, session: bytes, seq: int, fb: Feedback) -> bytes:
    head = _COMMON.pack(TYPE_FEEDBACK, session, seq)
    body = _FEEDBACK.pack(
        fb.transfer,
        fb.kind,
        int(fb.rate_bps),
        fb.loss,
        fb.loss_after_loss,
        fb.window_packets,
        fb.ask,
        fb.block,
        fb.needed,
    )
    return seal(key, head + body)


def unpack_feedback(body: bytes) -> Feedback:
    if len(body) < COMMON_BYTES + _FEEDBACK.size:
        raise ValueError("FEEDBACK too short")
    values = _FEEDBACK.unpack_from(body, COMMON_BYTES)
    fb = Feedback(values[0], values[1], float(values[2]), *values[3:])
    if fb.kind not in (FEEDBACK_DONE, FEEDBACK_NEED):
        raise ValueError(f"FEEDBACK kind {fb.kind}")
    return fb


# --- replay window ------------------------------------------------------------------------

REPLAY_WINDOW_PACKETS = 4096
"""Sequence numbers remembered behind the highest one (RFC 4303 section 3.4.3 suggests 64 as
a minimum; 4096 covers the reordering a 333 Mbit/s path can have in 17 ms)."""


class ReplayWindow:
    """Accepts each sequence number once; numbers older than the window are refused."""

    def __init__(self, size: int = REPLAY_WINDOW_PACKETS) -> None:
        self.size = size
        self.highest = -1
        self._seen = bytearray(size)

    def check(self, seq: int) -> bool:
        """True (and remembered) for a new number, False for a replay or a too-old one."""
        if seq > self.highest:
            gap = seq - self.highest
            if gap >= self.size:
                self._seen = bytearray(self.size)
            else:
                for s in range(self.highest + 1, seq):
                    self._seen[s % self.size] = 0
            self.highest = seq
            self._seen[seq % self.size] = 1
            return True
        if self.highest - seq >= self.size or self._seen[seq % self.size]:
            return False
        self._seen[seq % self.size] = 1
        return True
