"""docs/models.md section 7: header and ACK overhead."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.base import _count


def wire_bytes(
    payload_bytes: int, packet_payload_bytes: int, header_bytes: int, ack_bytes: int
) -> tuple[int, int]:
    """Section 7: (data packets, bytes on the wire) = ``(n, payload + n * (H + A))``."""
    payload = _count("payload_bytes", payload_bytes)
    per_packet = _count("packet_payload_bytes", packet_payload_bytes, minimum=1)
    header = _count("header_bytes", header_bytes)
    ack = _count("ack_bytes", ack_bytes)
    packets = -(-payload // per_packet)
    return packets, payload + packets * (header + ack)
