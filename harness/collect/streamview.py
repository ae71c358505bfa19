"""The receiver's transport view of each stream: when its bytes reached the transport.

HTTP/3: from the receiver's qlog: ``transport:packet_received`` STREAM frames (stream id,
offset, length) give when each stream byte first arrived; ``http:frame_parsed`` (HEADERS
and DATA lengths, in stream order) maps body bytes to stream offsets.

HTTP/2 over TLS: from a full-payload capture at the receiver and the run's key log: the TCP
segments (sequence numbers, arrival times) rebuild the server's byte stream, the TLS
records in it are decrypted (:mod:`harness.collect.tlsview`), the HTTP/2 frames in the plaintext
give each stream's DATA payload, and every payload byte maps back to its TCP byte, whose
first arrival is the answer. Delivery (the client's records) can only be later: the
difference is the head-of-line wait (docs/models.md section 11).

All times are on the capture's clock; subtract the run's ``clock_offset_s`` (realtime -
monotonic) to get CLOCK_MONOTONIC, as :mod:`harness.collect.acks` does.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.collect import tlsview
from tbcore.errors import SpecError

LINK_HEADER_BYTES = {101: 0, 1: 14, 113: 16, 276: 20, 228: 0}
"""pcap link types -> bytes before the IP header (raw, Ethernet, Linux SLL, SLL2, IPv4)."""
IPPROTO_TCP = 6
TCP_SYN = 0x02
H2_FRAME_HEADER_BYTES = 9
"""RFC 9113 section 4.1."""
H2_DATA = 0x0
H2_FLAG_PADDED = 0x8
SEQ_MOD = 2**32


# --- pcap ------------------------------------------------------------------------------


def read_pcap(path: Path) -> list[tuple[float, bytes]]:
    """(time_s, IP packet) of every record of a pcap (microsecond or nanosecond) or pcapng
    file."""
    from netem.pcapng import read_capture

    capture = read_capture(Path(path))
    skip = LINK_HEADER_BYTES.get(capture.linktype)
    if skip is None:
        raise SpecError(str(path), f"link type {capture.linktype} not supported")
    return [(ts_ns * 1e-9, data[skip:]) for ts_ns, data, _ in capture.packets]


TCP_MIN_HEADER_BYTES = 20
"""A TCP header without options (RFC 9293 section 3.1)."""


@dataclass(frozen=True)
class Segment:
    """One captured IPv4 TCP segment."""

    time_s: float
    src: tuple[bytes, int]
    """(IPv4 address, port) of the sender."""
    dst: tuple[bytes, int]
    seq: int
    flags: int
    payload: bytes
    """The payload the capture holds: fewer than ``payload_bytes`` when the snap length cut it."""
    payload_bytes: int
    """The payload length the headers declare (IP total length less the IP and TCP headers)."""
    wire_bytes: int
    """The IP total length: headers and the whole payload, as the packet was on the wire."""

    @property
    def truncated(self) -> bool:
        """The capture holds less of the payload than the packet carried."""
        return len(self.payload) < self.payload_bytes


def tcp_segments(packets: Iterable[tuple[float, bytes]]) -> list[Segment]:
    """The IPv4 TCP segments among (time_s, IP packet) pairs; other and cut-off packets are
    skipped."""
    segments = []
    for time_s, ip in packets:
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != IPPROTO_TCP:
            continue
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack_from("!H", ip, 2)[0]
        if len(ip) < ihl + TCP_MIN_HEADER_BYTES:
            continue
        sport, dport, seq = struct.unpack_from("!HHI", ip, ihl)
        offset_flags = struct.unpack_from("!H", ip, ihl + 12)[0]
        header = (offset_flags >> 12) * 4
        payload = ip[ihl + header : total]
        segments.append(
            Segment(
                time_s=time_s,
                src=(ip[12:16], sport),
                dst=(ip[16:20], dport),
                seq=seq,
                flags=offset_flags & 0x3F,
                payload=payload,
                payload_bytes=max(0, total - ihl - header),
                wire_bytes=total,
            )
        )
    return segments


# --- arrival of byte ranges ---------------------------------------------------------------


@dataclass
class ArrivalMap:
    """When each byte of a stream first arrived: disjoint pieces ``[start, end)`` with the
    time they were first covered."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def add(self, start: int, end: int, time_s: float) -> None:
        """Bytes ``[start, end)`` arrived at ``time_s`` (call in time order): only the parts
        not seen before are new."""
        new: list[tuple[int, int]] = []
        cursor = start
        index = bisect.bisect_right(self.ends, start)
        while cursor < end and index < len(self.starts):
            if self.starts[index] >= end:
                break
            if self.starts[index] > cursor:
                new.append((cursor, self.starts[index]))
            cursor = max(cursor, self.ends[index])
            index += 1
        if cursor < end:
            new.append((cursor, end))
        for a, b in new:
            at = bisect.bisect_left(self.starts, a)
            self.starts.insert(at, a)
            self.ends.insert(at, b)
            self.times.insert(at, time_s)

    def complete_at(self, start: int, end: int) -> float | None:
        """When every byte of ``[start, end)`` had arrived; None if some never did."""
        if end <= start:
            return None
        index = max(0, bisect.bisect_right(self.ends, start))
        cursor = start
        latest = None
        while cursor < end:
            if index >= len(self.starts) or self.starts[index] > cursor:
                return None
            latest = self.times[index] if latest is None else max(latest, self.times[index])
            cursor = self.ends[index]
            index += 1
        return latest


@dataclass(frozen=True)
class StreamArrival:
    """One response stream as its receiver's transport saw it."""

    stream_id: int
    body_bytes: int
    last_byte_arrived_s: float | None
    """When every body byte had arrived at the transport (capture clock)."""
    chunk_arrived_s: list[float | None]
    """Per ``chunk_bytes`` of body: when all of its bytes had arrived."""
    in_order_s: float | None = None
    """When the transport could hand the stream's last byte over in order: every byte up
    to it had arrived, other streams' included on one TCP byte stream (HTTP/2); the
    stream's own bytes for QUIC (= ``last_byte_arrived_s``). ``in_order_s -
    last_byte_arrived_s`` is the head-of-line wait of docs/models.md section 11, free of the
    receiver's own processing."""
    cross_waits_s: tuple[float, ...] = ()
    """Per :data:`HOL_CHUNK_BYTES` of body: how long after the stream's own bytes up to the
    chunk's end had all arrived the transport could hand them over, i.e. the wait for
    *other* streams' bytes (HTTP/2's one byte stream); 0 for each chunk of a QUIC stream,
    which its transport orders alone. Empty when not computed."""


HOL_CHUNK_BYTES = 16_384
"""The granularity of the cross-stream wait: HTTP/2's initial SETTINGS_MAX_FRAME_SIZE (RFC 9113
section 6.5.2), so that a chunk is about one of the sender's DATA frames."""


def _body_complete_at(
    body_map: Sequence[tuple[int, int, int]], arrivals: ArrivalMap, a: int, b: int
) -> float | None:
    """When every byte of body ``[a, b)`` had arrived (None if some never did)."""
    latest = None
    for body_at, wire_at, size in body_map:
        lo, hi = max(a, body_at), min(b, body_at + size)
        if lo >= hi:
            continue
        t = arrivals.complete_at(wire_at + lo - body_at, wire_at + hi - body_at)
        if t is None:
            return None
        latest = t if latest is None else max(latest, t)
    return latest


def _wire_end(body_map: Sequence[tuple[int, int, int]], b: int) -> int:
    """The transport offset just past body byte ``b - 1``."""
    for body_at, wire_at, size in body_map:
        if body_at < b <= body_at + size:
            return wire_at + b - body_at
    raise ValueError(f"body byte {b - 1} is not in the map")


def cross_waits(
    body_map: Sequence[tuple[int, int, int]],
    arrivals: ArrivalMap,
    chunk_bytes: int = HOL_CHUNK_BYTES,
) -> tuple[float, ...]:
    """Per ``chunk_bytes`` of a stream sharing one ordered byte stream with others: in
    order (every transport byte before the chunk's end) less own (every byte of this
    stream up to the chunk's end), at least 0: the wait for the other streams' bytes.
    Both are running maxima over the chunks, so the whole is linear in the pieces."""
    total = sum(size for _, _, size in body_map)
    waits: list[float] = []
    own = every = None
    start = wire_start = 0
    for end in range(chunk_bytes, total + chunk_bytes, chunk_bytes):
        end = min(end, total)
        wire_end = _wire_end(body_map, end)
        own_part = _body_complete_at(body_map, arrivals, start, end)
        every_part = arrivals.complete_at(wire_start, wire_end)
        if own_part is None or every_part is None:
            break  # a byte that never arrived: no later chunk was handed over either
        own = own_part if own is None else max(own, own_part)
        every = every_part if every is None else max(every, every_part)
        waits.append(max(0.0, every - own))
        start, wire_start = end, wire_end
    return tuple(waits)


def _in_order(body_map: Sequence[tuple[int, int, int]], arrivals: ArrivalMap) -> float | None:
    """When every transport byte up to the stream's last one had arrived."""
    if not body_map:
        return None
    end = max(wire_at + size for _, wire_at, size in body_map)
    return arrivals.complete_at(0, end)


def _chunks(
    body_map: Sequence[tuple[int, int, int]], arrivals: ArrivalMap, chunk_bytes: int | None
) -> tuple[int, float | None, list[float | None]]:
    """``body_map``: (body offset, transport offset, size) pieces in body order."""
    total = sum(size for _, _, size in body_map)

    def when(a: int, b: int) -> float | None:
        return _body_complete_at(body_map, arrivals, a, b)

    last = when(0, total) if total else None
    chunks: list[float | None] = []
    if chunk_bytes:
        for start in range(0, total - total % chunk_bytes, chunk_bytes):
            chunks.append(when(start, start + chunk_bytes))
    return total, last, chunks


# --- HTTP/2 over TLS ------------------------------------------------------------------------


def _direction(segments: Sequence[Segment]) -> tuple[bytes, ArrivalMap]:
    """Rebuild one direction's byte stream (from its SYN's ISN) and its arrival map."""
    isn = None
    for seg in segments:
        if seg.flags & TCP_SYN:
            isn = (seg.seq + 1) % SEQ_MOD
            break
    if isn is None:
        raise SpecError("capture", "no SYN in the capture: the connection's start is missing")
    data = bytearray()
    arrivals = ArrivalMap()
    for seg in sorted(segments, key=lambda s: s.time_s):
        if not seg.payload:
            continue
        if seg.truncated:
            raise SpecError("capture", 'payload cut by the snap length: use capture = "full"')
        offset = (seg.seq - isn) % SEQ_MOD
        end = offset + len(seg.payload)
        if end > len(data):
            data.extend(b"\x00" * (end - len(data)))
        data[offset:end] = seg.payload
        arrivals.add(offset, end, seg.time_s)
    return bytes(data), arrivals


def h2_data_pieces(plain: bytes) -> dict[int, list[tuple[int, int]]]:
    """HTTP/2 frames of the server's plaintext: per stream, its DATA payload pieces as
    (plaintext offset, size), in order."""
    pieces: dict[int, list[tuple[int, int]]] = {}
    at = 0
    while at + H2_FRAME_HEADER_BYTES <= len(plain):
        length = int.from_bytes(plain[at : at + 3], "big")
        frame_type, flags = plain[at + 3], plain[at + 4]
        stream_id = int.from_bytes(plain[at + 5 : at + 9], "big") & 0x7FFFFFFF
        body = at + H2_FRAME_HEADER_BYTES
        if frame_type == H2_DATA and length:
            start, size = body, length
            if flags & H2_FLAG_PADDED:
                pad = plain[body]
                start, size = body + 1, length - 1 - pad
            if size > 0:
                pieces.setdefault(stream_id, []).append((start, size))
        at = body + length
    return pieces


def h2_stream_arrivals(
    packets: Iterable[tuple[float, bytes]], keylog: str, chunk_bytes: int | None = None
) -> dict[int, StreamArrival]:
    """Per HTTP/2 stream of every TLS connection in a receiver-side capture: when its
    response bytes arrived at the receiver's TCP (capture clock)."""
    secrets = tlsview.parse_keylog(keylog)
    flows: dict[tuple, list[Segment]] = {}
    for seg in tcp_segments(packets):
        flows.setdefault((seg.src, seg.dst), []).append(seg)
    result: dict[int, StreamArrival] = {}
    for (src, dst), segments in flows.items():
        stream, arrivals = _direction(segments)
        records = tlsview.split_records(stream)
        if not records or records[0].content_type != tlsview.CONTENT_HANDSHAKE:
            continue
        body = stream[records[0].body_offset : records[0].end]
        if not body or body[0] != tlsview.HANDSHAKE_SERVER_HELLO:
            continue
        _, suite = tlsview.hello_random_and_suite(stream, records[0])
        reverse = flows.get((dst, src))
        if reverse is None or suite is None:
            continue
        client_stream, _ = _direction(reverse)
        client_records = tlsview.split_records(client_stream)
        client_random, _ = tlsview.hello_random_and_suite(client_stream, client_records[0])
        keys = secrets.get(client_random.hex())
        if keys is None or "SERVER_TRAFFIC_SECRET_0" not in keys:
            raise SpecError("keylog", "no SERVER_TRAFFIC_SECRET_0 for this connection")
        plain, plain_pieces = tlsview.decrypt_direction(
            stream,
            suite,
            keys.get("SERVER_HANDSHAKE_TRAFFIC_SECRET"),
            keys["SERVER_TRAFFIC_SECRET_0"],
        )
        for stream_id, data_pieces in h2_data_pieces(plain).items():
            body_map = []
            body_at = 0
            for plain_at, size in data_pieces:
                # a DATA payload may span records: map it piece by piece
                done = 0
                while done < size:
                    wire = tlsview.plain_to_stream(plain_pieces, plain_at + done)
                    piece = _piece_containing(plain_pieces, plain_at + done)
                    run = min(size - done, piece.plain_offset + piece.size - plain_at - done)
                    body_map.append((body_at + done, wire, run))
                    done += run
                body_at += size
            total, last, chunks = _chunks(body_map, arrivals, chunk_bytes)
            in_order = _in_order(body_map, arrivals)
            waits = cross_waits(body_map, arrivals) if body_map else ()
            result[stream_id] = StreamArrival(stream_id, total, last, chunks, in_order, waits)
    return result


def _piece_containing(pieces: list[tlsview.PlainPiece], plain_offset: int) -> tlsview.PlainPiece:
    starts = [p.plain_offset for p in pieces]
    return pieces[bisect.bisect_right(starts, plain_offset) - 1]


# --- HTTP/3 (qlog) ---------------------------------------------------------------------------


def _varint_bytes(value: int) -> int:
    """RFC 9000 section 16: length of a variable-length integer."""
    if value < 2**6:
        return 1
    if value < 2**14:
        return 2
    if value < 2**30:
        return 4
    return 8


def h3_stream_arrivals(
    traces: Iterable[dict[str, Any]], chunk_bytes: int | None = None, vantage: str = "client"
) -> dict[int, StreamArrival]:
    """Per request stream, from the receiver's qlog: when its response body bytes arrived
    (qlog clock: realtime, seconds)."""
    result: dict[int, StreamArrival] = {}
    for trace in traces:
        if trace.get("vantage_point", {}).get("type", vantage) != vantage:
            continue
        arrivals: dict[int, ArrivalMap] = {}
        frames: dict[int, list[tuple[str, int]]] = {}
        for event in trace.get("events", []):
            name = event.get("name")
            data = event.get("data", {})
            if name == "transport:packet_received":
                t = float(event["time"]) / 1e3
                for frame in data.get("frames", []):
                    if frame.get("frame_type") == "stream" and frame.get("length"):
                        sid = int(frame["stream_id"])
                        start = int(frame["offset"])
                        arrivals.setdefault(sid, ArrivalMap()).add(
                            start, start + int(frame["length"]), t
                        )
            elif name == "http:frame_parsed":
                kind = data.get("frame", {}).get("frame_type")
                if kind in ("headers", "data") and "stream_id" in data:
                    frames.setdefault(int(data["stream_id"]), []).append(
                        (kind, int(data.get("length", 0)))
                    )
        for sid, parsed in frames.items():
            if sid not in arrivals:
                continue
            body_map = []
            wire_at = body_at = 0
            for kind, length in parsed:
                header = 1 + _varint_bytes(length)  # HEADERS (0x01) and DATA (0x00) types
                if kind == "data" and length:
                    body_map.append((body_at, wire_at + header, length))
                    body_at += length
                wire_at += header + length
            total, last, chunks = _chunks(body_map, arrivals[sid], chunk_bytes)
            # QUIC orders each stream alone: in order = its own bytes in, and no chunk ever
            # waits for another stream's bytes in the transport
            held = (0.0,) * -(-total // HOL_CHUNK_BYTES)
            result[sid] = StreamArrival(sid, total, last, chunks, last, held)
    return result
