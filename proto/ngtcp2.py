"""What both ends of ngtcp2 share (servers/ngtcp2.py, clients/ngtcp2.py): the flags that
apply the run's settings to Debian's ngtcp2 0.12.1 example binaries, and views of one
connection's qlog (proto.qlogseq) that the records are made of. Sans-I/O.

The settings as flags (:func:`common_flags`), one factor at a time against aioquic:

- ``--cc``: the level's control (tbcore.quicstack.control_of);
- ``--max-udp-payload-size`` = ``max_datagram_size`` and ``--no-pmtud``: the same datagram
  size as aioquic (1200 bytes unless a level says otherwise) for the whole connection;
  ngtcp2 would otherwise probe its path MTU up to 1452 bytes;
- ``quic_max_data`` (if set): every initial flow-control window and its auto-tuning ceiling
  at that size (aioquic's fixed windows); otherwise ngtcp2's own (client 15 MiB / 6 MiB,
  growing to 24 MiB / 16 MiB; server 1 MiB / 256 KiB, growing to 6 MiB);
- ``-q``: no debug output (it triples gtlsclient's CPU per packet, measured).

ngtcp2's own defaults that stay: an initial RTT of 333 ms (RFC 9002 section 6.2.2; aioquic
uses 100 ms), its ACK threshold of 2 packets; no pacing (its windows leave as bursts,
tbcore.quicstack.paces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tbcore import quicstack

CLIENT_BINARY = "gtlsclient"
SERVER_BINARY = "gtlsserver"
"""Debian packages ngtcp2-client (/usr/bin) and ngtcp2-server (/usr/sbin), ngtcp2 0.12.1."""
REQUEST_STREAM_ID = 0
"""The first client-initiated bidirectional stream (RFC 9000 section 2.1): the request of a
new connection."""
MS_PER_S = 1e3
US_PER_MS = 1e3


def duration_flag(seconds: float) -> str:
    """An ngtcp2 ``<DURATION>``: whole milliseconds with their unit (at least 1 ms)."""
    return f"{max(1, round(seconds * MS_PER_S))}ms"


def common_flags(settings: Any, qlog_dir: str) -> list[str]:
    """The flags both binaries take for this run's settings (module docstring)."""
    flags = [
        "-q",
        f"--cc={quicstack.control_of(settings)}",
        f"--max-udp-payload-size={settings.max_datagram_size_bytes}",
        "--no-pmtud",
        f"--qlog-dir={qlog_dir}",
    ]
    window = settings.quic_max_data_bytes
    if window is not None:
        flags += [
            f"--max-data={window}",
            f"--max-stream-data-bidi-local={window}",
            f"--max-stream-data-bidi-remote={window}",
            f"--max-stream-data-uni={window}",
            f"--max-window={window}",
            f"--max-stream-window={window}",
        ]
    return flags


# --- views of one connection's qlog events (relative ms, as ngtcp2 writes them) ----------------


def _frames(event: dict[str, Any]) -> list[dict[str, Any]]:
    return list((event.get("data") or {}).get("frames") or [])


def _stream_frames(event: dict[str, Any], stream_id: int) -> list[dict[str, Any]]:
    return [
        f
        for f in _frames(event)
        if f.get("frame_type") == "stream" and f.get("stream_id") == stream_id
    ]


@dataclass(frozen=True)
class StreamFlow:
    """One direction of one stream in a qlog: when its bytes first and last moved."""

    first_ms: float | None = None
    """The first packet carrying a frame of it (sent) or its offset 0 (received)."""
    complete_ms: float | None = None
    """Sent: when the frames first reached the final size. Received: when the bytes
    received first covered [0, final size) (retransmissions filled in)."""
    final_size: int | None = None
    """The stream's length in this direction (the frame with fin), HTTP/3 framing included."""


def sent_flow(events: list[dict[str, Any]], stream_id: int) -> StreamFlow:
    """The stream as its sender's qlog shows it (``transport:packet_sent``)."""
    first = final = None
    reached: list[tuple[float, int]] = []
    for event in events:
        if event.get("name") != "transport:packet_sent":
            continue
        for frame in _stream_frames(event, stream_id):
            end = int(frame.get("offset", 0)) + int(frame.get("length", 0))
            first = event["time"] if first is None else first
            reached.append((event["time"], end))
            if frame.get("fin"):
                final = end if final is None else final
    if final is None:
        return StreamFlow(first_ms=first)
    complete = min((t for t, end in reached if end >= final), default=None)
    return StreamFlow(first_ms=first, complete_ms=complete, final_size=final)


def received_flow(events: list[dict[str, Any]], stream_id: int) -> StreamFlow:
    """The stream as its receiver's qlog shows it (``transport:packet_received``)."""
    first = final = complete = None
    ranges = RangeSet()
    for event in events:
        if event.get("name") != "transport:packet_received":
            continue
        for frame in _stream_frames(event, stream_id):
            offset, length = int(frame.get("offset", 0)), int(frame.get("length", 0))
            if offset == 0 and first is None:
                first = event["time"]
            ranges.add(offset, offset + length)
            if frame.get("fin"):
                final = offset + length
        if complete is None and final is not None and ranges.covers(final):
            complete = event["time"]
    return StreamFlow(first_ms=first, complete_ms=complete, final_size=final)


class RangeSet:
    """Byte ranges [start, end) received, merged; whether [0, n) is all there."""

    def __init__(self) -> None:
        self.ranges: list[list[int]] = []

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        merged: list[list[int]] = []
        for lo, hi in sorted([*self.ranges, [start, end]]):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.ranges = merged

    def covers(self, size: int) -> bool:
        """[0, size) is received (a zero-length stream always is)."""
        if size == 0:
            return True
        return bool(self.ranges) and self.ranges[0][0] == 0 and self.ranges[0][1] >= size


def client_handshake_done_ms(events: list[dict[str, Any]]) -> float | None:
    """When the client's handshake completed: it sends its Finished (the first CRYPTO frame
    it puts in a Handshake packet, RFC 9001 section 4.1.2) once the server's is verified,
    which is the moment aioquic's client reports HandshakeCompleted."""
    for event in events:
        if event.get("name") != "transport:packet_sent":
            continue
        header = (event.get("data") or {}).get("header") or {}
        if header.get("packet_type") == "handshake" and any(
            f.get("frame_type") == "crypto" for f in _frames(event)
        ):
            return float(event["time"])
    return None


RECOVERY_METRICS = (
    ("bytes_in_flight", "bytes_in_flight", 1.0),
    ("cwnd", "congestion_window", 1.0),
    ("ssthresh", "ssthresh", 1.0),
    ("smoothed_rtt_us", "smoothed_rtt", US_PER_MS),
    ("latest_rtt_us", "latest_rtt", US_PER_MS),
    ("min_rtt_us", "min_rtt", US_PER_MS),
    ("pto_count", "pto_count", 1.0),
)
"""QuicRecovery / QuicSample field, ngtcp2's metrics_updated field, scale (qlog RTTs are
whole milliseconds; the testbed's are µs)."""


def recovery_at(events: list[dict[str, Any]], until_ms: float | None) -> dict[str, int | None]:
    """The sender state as of ``until_ms`` (every event when None): each metric's last
    logged value (ngtcp2 logs only the ones that changed), packets sent and declared lost."""
    values: dict[str, int | None] = {name: None for name, _, _ in RECOVERY_METRICS}
    sent = lost = 0
    for event in events:
        if until_ms is not None and event["time"] > until_ms:
            break
        name = event.get("name")
        if name == "transport:packet_sent":
            sent += 1
        elif name == "recovery:packet_lost":
            lost += 1
        elif name == "recovery:metrics_updated":
            data = event.get("data") or {}
            for mine, theirs, scale in RECOVERY_METRICS:
                if theirs in data:
                    values[mine] = round(float(data[theirs]) * scale)
    return {**values, "packets_sent": sent, "packets_lost": lost}


def metric_samples(events: list[dict[str, Any]]) -> list[tuple[float, dict[str, int | None]]]:
    """(time ms, the sender state then) at every ``recovery:metrics_updated``."""
    out = []
    state: dict[str, int | None] = {name: None for name, _, _ in RECOVERY_METRICS}
    for event in events:
        if event.get("name") != "recovery:metrics_updated":
            continue
        data = event.get("data") or {}
        for mine, theirs, scale in RECOVERY_METRICS:
            if theirs in data:
                state[mine] = round(float(data[theirs]) * scale)
        out.append((float(event["time"]), dict(state)))
    return out
