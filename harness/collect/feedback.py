"""What the data receiver's ACK policy did in a run (``ack_policy``), measured at the
receiver: ACKs sent per data packet, how long each ACK waited after the packet it
acknowledged arrived, and the wire bytes of data and of ACKs (docs/models.md section 7).

Read from the receiver's own records, never from the settings:

- **QUIC**: the receiver's qlog. A 1-RTT packet received that carries any frame but ACK and
  PADDING elicits an ACK (RFC 9000 section 13.2.1); a packet the receiver sent that carries
  an ACK frame is an ACK, an *ACK-only* packet when it carries nothing else. Its delay: the
  time it was sent minus the time the packet it newly acknowledges as largest arrived (one
  endpoint, one clock). Wire bytes: the packet's length plus 28 (IPv4 20 + UDP 8; after the
  handshake a datagram carries one packet).
- **TCP**: the capture at the receiver's end of the link. Data segments (payload > 0) from
  the sender, pure ACKs (no payload, no SYN/FIN/RST) from the receiver; an ACK's delay: its
  time minus the arrival of the latest data segment before it (the one that set it off; a
  cumulative ACK released by a retransmission filling a hole is not counted as waiting
  since the data beyond the hole arrived). Wire bytes: the IP total length.

Only the run's request window counts (the harness's measured request, CLOCK_MONOTONIC).
Sans-I/O: it takes parsed qlog traces or segments.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from harness.collect.acks import TcpSegment

IPV4_UDP_HEADER_BYTES = 20 + 8
"""What a QUIC packet's length leaves out of its IP bytes (RFC 791, RFC 768)."""
TCP_ACK = 0x10
TCP_SYN = 0x02
TCP_FLAGS_NOT_PURE_ACK = 0x01 | 0x02 | 0x04
"""FIN, SYN, RST: a segment with one of them is not a pure ACK."""
NOT_ELICITING = frozenset({"ack", "padding", "connection_close"})
"""Frames that do not elicit an ACK (RFC 9000 section 13.2.1 and 19.19)."""
PACKET_EVENTS = ("transport:packet_received", "transport:packet_sent")
"""The qlog events of one packet each (RFC 9000's 1-RTT ones are counted)."""
QUANTILES = 100
"""Cut points of the ACK delay distribution (percentiles)."""


@dataclass
class Feedback:
    """A run's ACK policy as it acted, in the request's window: the ack-eliciting packets
    (QUIC) or data segments (TCP) the receiver got (``data_packets``, their IP bytes
    ``wire_bytes_data``), the packets it sent carrying an ACK (``acks``; TCP: pure ACKs), those
    that carried nothing else (``ack_only_packets``, their IP bytes ``wire_bytes_ack``), per
    ACK that newly acknowledged a largest packet its wait since that packet arrived
    (``ack_delays_s``), and the ACK_FREQUENCY frames it got (``frequency_frames``: how often
    the sender set its rate, draft-ietf-quic-ack-frequency)."""

    data_packets: int = 0
    acks: int = 0
    ack_only_packets: int = 0
    wire_bytes_data: int = 0
    wire_bytes_ack: int = 0
    frequency_frames: int = 0
    ack_delays_s: list[float] = field(default_factory=list)

    def add(self, other: Feedback) -> Feedback:
        """Both directions of an exchange as one (each direction's receiver counted)."""
        return Feedback(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def columns(self) -> dict[str, Any]:
        """runs.csv's ``acks_per_packet``, ``ack_delay_p50_s``, ``ack_delay_p99_s``,
        ``wire_bytes_data``, ``wire_bytes_ack`` and the counts behind them."""
        return {
            "acks_per_packet": self.acks / self.data_packets if self.data_packets else None,
            "ack_delay_p50_s": _quantile(self.ack_delays_s, 50),
            "ack_delay_p99_s": _quantile(self.ack_delays_s, 99),
            "wire_bytes_data": self.wire_bytes_data if self.data_packets else None,
            "wire_bytes_ack": self.wire_bytes_ack if self.data_packets else None,
            "ack_frequency_frames": self.frequency_frames,
            "data_packets": self.data_packets if self.data_packets else None,
            "ack_only_packets": self.ack_only_packets if self.data_packets else None,
        }


def _quantile(values: Sequence[float], percent: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=QUANTILES, method="inclusive")[percent - 1]


def _inside(time_s: float, window: tuple[float | None, float | None]) -> bool:
    start, end = window
    return (start is None or time_s >= start) and (end is None or time_s <= end)


def quic_feedback(
    traces: Iterable[dict[str, Any]],
    *,
    vantage: str,
    clock_offset_s: float = 0.0,
    window: tuple[float | None, float | None] = (None, None),
) -> Feedback:
    """:class:`Feedback` from the qlog traces of the data receiver ``vantage`` (``client``
    for a download); qlog times are milliseconds, ``clock_offset_s`` maps them onto
    CLOCK_MONOTONIC."""
    out = Feedback()
    for trace in traces:
        if trace.get("vantage_point", {}).get("type") != vantage:
            continue
        arrived: dict[int, float] = {}
        largest = -1
        events = sorted(trace.get("events", []), key=lambda e: e.get("time", 0.0))
        for event in events:
            name = event.get("name", "")
            data = event.get("data") or {}
            if name not in PACKET_EVENTS or data.get("header", {}).get("packet_type") != "1RTT":
                continue
            time_s = float(event.get("time", 0.0)) / 1e3 - clock_offset_s
            kinds = {f.get("frame_type") for f in data.get("frames") or []}
            size = int((data.get("raw") or {}).get("length") or 0) + IPV4_UDP_HEADER_BYTES
            if name == "transport:packet_received":
                number = data.get("header", {}).get("packet_number")
                if number is not None:
                    arrived[int(number)] = time_s
                out.frequency_frames += "ack_frequency" in kinds
                if kinds - NOT_ELICITING and _inside(time_s, window):
                    out.data_packets += 1
                    out.wire_bytes_data += size
            elif name == "transport:packet_sent" and "ack" in kinds and _inside(time_s, window):
                out.acks += 1
                if kinds <= {"ack", "padding"}:
                    out.ack_only_packets += 1
                    out.wire_bytes_ack += size
                top = _largest_acked(data.get("frames") or [])
                if top > largest and top in arrived:
                    out.ack_delays_s.append(max(0.0, time_s - arrived[top]))
                largest = max(largest, top)
    return out


def _largest_acked(frames: Sequence[dict[str, Any]]) -> int:
    acks = [f for f in frames if f.get("frame_type") == "ack"]
    return max((int(r[-1]) for f in acks for r in f.get("acked_ranges") or []), default=-1)


def tcp_feedback(
    segments: Sequence[TcpSegment],
    *,
    receiver: str,
    clock_offset_s: float = 0.0,
    window: tuple[float | None, float | None] = (None, None),
) -> Feedback:
    """:class:`Feedback` from the segments captured at the receiver's end, in time order:
    every connection's data toward the ``receiver`` (``client`` or ``server``: the end that
    sent the first SYN, or the one it went to) and its pure ACKs; ``clock_offset_s`` maps
    the capture's times onto CLOCK_MONOTONIC."""
    out = Feedback()
    syn = next((s for s in segments if s.flags & TCP_SYN and not s.flags & TCP_ACK), None)
    if syn is None:
        return out  # the capture began after the handshake: who is who is not known
    address = syn.src if receiver == "client" else syn.dst
    latest: dict[tuple, float] = {}
    """Per connection (as the receiver sees it): when its latest data segment arrived."""
    acked: dict[tuple, int] = {}
    for seg in segments:
        time_s = seg.time_s - clock_offset_s
        if seg.dst == address and seg.payload_bytes > 0:
            latest[(seg.src, seg.sport, seg.dport)] = time_s
            if _inside(time_s, window):
                out.data_packets += 1
                out.wire_bytes_data += seg.wire_bytes
        elif seg.src == address and seg.payload_bytes == 0 and _pure_ack(seg):
            if not _inside(time_s, window):
                continue
            key = (seg.dst, seg.dport, seg.sport)
            out.acks += 1
            out.ack_only_packets += 1
            out.wire_bytes_ack += seg.wire_bytes
            if acked.get(key) != seg.ack and key in latest:
                # the segment that set it off is the latest to arrive: a delayed ACK waited
                # since then; one that a retransmission filling a hole released did not
                out.ack_delays_s.append(time_s - latest[key])
            acked[key] = seg.ack
    return out


def _pure_ack(seg: TcpSegment) -> bool:
    return bool(seg.flags & TCP_ACK) and not seg.flags & TCP_FLAGS_NOT_PURE_ACK
