"""Header and ACK overhead of a run from its capture, next to docs/models.md section 7.

Counts, per direction of every TCP connection in a capture (headers are enough): data
packets (payload > 0), pure ACKs (no payload, no SYN/FIN/RST), payload bytes and bytes on
the wire (IP total length). The model: ``wire_bytes(payload, P, H, A)`` with ``P`` the
MSS, ``H`` the IPv4 + TCP header with timestamps and ``A`` the same header as a pure ACK,
one ACK per data packet; a delayed ACK (RFC 9293 section 3.8.6.3: at least every second
full-sized segment) halves the ACKs. Beside it, the chapter's example sizes (1,168-byte
payloads, 60-byte headers, 92-byte ACKs) for the same payload.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from harness import bounds
from harness.collect import streamview

TCP_FLAGS_NOT_PURE_ACK = 0x01 | 0x02 | 0x04
"""FIN, SYN, RST: such a segment is not a pure ACK even without payload."""
TCP_ACK = 0x10
HEADER_BYTES = 20 + 32
"""IPv4 (20) + TCP with the timestamp option (20 + 12), what Linux sends by default."""
ACK_BYTES = HEADER_BYTES
"""A pure ACK: the same headers, no payload (SACK blocks add 8-32 bytes under loss)."""
CHAPTER_PAYLOAD_BYTES = 1168
"""The chapter's example (§12.3.2): payload per packet..."""
CHAPTER_HEADER_BYTES = 60
"""... headers per data packet ..."""
CHAPTER_ACK_BYTES = 92
"""... and bytes per ACK: with them the image round trip takes 14.4 s on the wire and half the
ACKs save 1.38 MB. Linux here sends 1,448-byte payloads with 52-byte headers and ACKs, so the
measured bytes are not the same quantity: the chapter's model runs beside them."""


@dataclass
class DirectionCount:
    """One direction of the connection(s), as the capture saw it."""

    direction: str
    """``up`` (client to server) or ``down``."""
    data_packets: int = 0
    ack_packets: int = 0
    """Pure ACKs sent in this direction (acknowledging the other direction's data)."""
    payload_bytes: int = 0
    wire_bytes: int = 0
    """IP bytes of every packet in this direction (data and pure ACKs)."""
    data_wire_bytes: int = 0
    """IP bytes of the data packets alone."""


def count(packets: Iterable[tuple[float, bytes]], client_addr: bytes) -> dict[str, DirectionCount]:
    """Per direction counts of the TCP packets of a capture (``client_addr``: 4 bytes)."""
    counts = {d: DirectionCount(d) for d in ("up", "down")}
    for segment in streamview.tcp_segments(packets):
        direction = counts["up" if segment.src[0] == client_addr else "down"]
        direction.wire_bytes += segment.wire_bytes
        if segment.payload_bytes > 0:
            direction.data_wire_bytes += segment.wire_bytes
            direction.data_packets += 1
            direction.payload_bytes += segment.payload_bytes
        elif segment.flags & TCP_ACK and not segment.flags & TCP_FLAGS_NOT_PURE_ACK:
            direction.ack_packets += 1
    return counts


def modelled(payload_bytes: int, mss_bytes: int, acks_per_packet: float) -> dict[str, float]:
    """Section 7 for one direction's payload: packets, the data direction's wire bytes
    (payload + n * H) and the ACK direction's (n * A * acks per packet)."""
    packets, _ = bounds.wire_bytes(payload_bytes, mss_bytes, HEADER_BYTES, 0)
    return {
        "model_data_packets": packets,
        "model_ack_packets": packets * acks_per_packet,
        "model_wire_bytes": payload_bytes + packets * HEADER_BYTES,
        "model_ack_wire_bytes": packets * acks_per_packet * ACK_BYTES,
    }


def chapter_modelled(payload_bytes: int, acks_per_packet: float) -> dict[str, float]:
    """Section 7 with the chapter's packet sizes for the same payload (beside the measured)."""
    packets, _ = bounds.wire_bytes(payload_bytes, CHAPTER_PAYLOAD_BYTES, CHAPTER_HEADER_BYTES, 0)
    return {
        "chapter_data_packets": packets,
        "chapter_wire_bytes": payload_bytes + packets * CHAPTER_HEADER_BYTES,
        "chapter_ack_wire_bytes": packets * acks_per_packet * CHAPTER_ACK_BYTES,
    }


def overhead_rows(
    counts: dict[str, DirectionCount], base: dict[str, Any], mss_bytes: int, quickack: bool
) -> list[dict[str, Any]]:
    """One row per data direction: measured data packets, the ACKs the other direction sent
    for them, wire bytes of both, next to the model (an ACK per packet, or per two)."""
    rows = []
    acks_per_packet = 1.0 if quickack else bounds.policy_acks_per_packet("default", "tcp")
    for direction, other in (("up", "down"), ("down", "up")):
        data, acks = counts[direction], counts[other]
        if data.payload_bytes == 0:
            continue
        rows.append(
            {
                **base,
                "direction": direction,
                **{k: v for k, v in asdict(data).items() if k != "direction"},
                "acks_for_it": acks.ack_packets,
                "ack_wire_bytes": acks.ack_packets * ACK_BYTES,
                "ack_wire_bytes_at_chapter_size": acks.ack_packets * CHAPTER_ACK_BYTES,
                **modelled(data.payload_bytes, mss_bytes, acks_per_packet),
                **chapter_modelled(data.payload_bytes, acks_per_packet),
            }
        )
    return rows
