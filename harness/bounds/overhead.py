"""docs/models.md section 7: header and ACK overhead."""

from __future__ import annotations

from harness.bounds.base import _count
from tbcore import ackpolicy


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


DELAYED_ACK_SEGMENTS = 2
"""RFC 9293 section 3.8.6.3 (RFC 1122): an ACK for at least every second full segment."""


def policy_acks_per_packet(
    policy: str, transport: str, packets_per_s: float | None = None, rtt_min_s: float | None = None
) -> float | None:
    """Section 7's ACKs per data packet under a receiver's ``ack_policy`` (tbcore.ackpolicy):
    1 for ``immediate``; 1/N for ``every:N,max:T`` when packets come faster than N per T (the
    timer only adds ACKs: a floor); TCP's ``default`` 1/2; ``tack`` min(1/L, beta / (RTT_min
    x packet rate)) with its period capped as the policy caps it; None where the count
    depends on what the stack's timer or the sender decides (aioquic's default,
    ack-frequency) or the rate is not known."""
    parsed = ackpolicy.parse_ack_policy("ack_policy", policy)
    if parsed.name == "immediate":
        return 1.0
    if parsed.name == "every":
        return 1.0 / parsed.every_packets
    if parsed.name == "default":
        return 1.0 / DELAYED_ACK_SEGMENTS if transport == "tcp" else None
    if parsed.name == "tack" and packets_per_s and rtt_min_s:
        period = min(rtt_min_s / ackpolicy.TACK_BETA, ackpolicy.MAX_ACK_DELAY_S)
        return min(1.0 / ackpolicy.TACK_L, 1.0 / (period * packets_per_s))
    return None
