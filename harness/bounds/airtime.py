"""Shared airtime: docs/models.md section 7 on one medium for both directions (netem.air)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from netem.air import AirSpec
from tbcore.errors import SpecError

if TYPE_CHECKING:
    pass

from harness.bounds.base import _count, _non_negative, _positive

CHAPTER_DATA_IP_BYTES = 1228
"""The IP packet of the chapter's 302 µs data exchange: 208 µs of PPDU at 54 Mbit/s holds a
MAC frame of 1,240-1,266 bytes, i.e. 1,228 IP bytes (a 1,200-byte QUIC datagram + UDP/IPv4)
+ 36 bytes of MAC header, LLC/SNAP and FCS. (A 1,500-byte packet takes 248 µs.)"""
CHAPTER_ACK_IP_BYTES = 78
"""An ACK-only packet of the chapter's 134 µs exchange (40 µs of PPDU: 70-96 IP bytes)."""
IMAGE_EXCHANGES = 30_800
"""The chapter's count of data (and of feedback) exchanges for the 30 MB / 5 MB image."""


def airtime_s(frames: int, ip_bytes: float, air: AirSpec | None = None) -> float:
    """Medium time of ``frames`` exchanges of ``ip_bytes`` each: access + data PPDU + SIFS +
    MAC ACK (802.11a arithmetic of :mod:`netem.air`; a mean size is rounded to whole bytes)."""
    count = _count("frames", frames)
    size = _non_negative("ip_bytes", ip_bytes)
    air = air or AirSpec()
    return count * air.exchange_ns(round(size)) / 1e9


def airtime_exchanges(
    upload_bytes: int, download_bytes: int, payload_bytes: int, segments_per_ack: float
) -> tuple[int, int]:
    """(data exchanges, feedback exchanges) of a transfer: every ``payload_bytes`` a data
    frame, every ``segments_per_ack`` data frames an ACK-only frame the other way."""
    up = _count("upload_bytes", upload_bytes)
    down = _count("download_bytes", download_bytes)
    payload = _positive("payload_bytes", payload_bytes)
    per_ack = _positive("segments_per_ack", segments_per_ack)
    data = math.ceil(up / payload) + math.ceil(down / payload)
    return data, math.ceil(data / per_ack)


@dataclass(frozen=True)
class AirtimeBound:
    """The exchange model applied to the frames a run carried, and the completion bound."""

    frames: dict[str, int]
    """Frames per ``direction.kind`` (:data:`netem.stats.AIR_KEYS`)."""
    medium_s: dict[str, float]
    """Modelled medium time per ``direction.kind``."""
    data_s: float
    """Medium time of the data frames, both directions."""
    ack_s: float
    """Medium time of the ACK-only frames, both directions."""
    busy_s: float
    """All of it: what the medium must have been occupied for."""
    processing_s: float
    rtt_s: float
    """Wired round-trip propagation."""
    total_s: float
    """Lower bound of the completion: ``max(busy_s, data_s + processing_s + rtt_s)``. The
    medium carries every exchange one at a time, and no data frame can overlap the server's
    processing (the upload precedes it, the download follows it) nor the propagation."""


def airtime_bound(
    frames: dict[str, int],
    ip_bytes: dict[str, int],
    *,
    processing_s: float = 0.0,
    rtt_s: float = 0.0,
    air: AirSpec | None = None,
) -> AirtimeBound:
    """Section 7 on a shared medium: each frame costs one exchange of its size; the frames of
    one kind are taken at their mean size (``ip_bytes / frames``)."""
    air = air or AirSpec()
    medium: dict[str, float] = {}
    for key, count in frames.items():
        kind = key.rpartition(".")[2]
        if kind not in ("data", "ack"):
            raise SpecError("frames", f"{key!r}: a key is direction.kind, kind data or ack")
        n = _count(f"frames[{key}]", count)
        size = _non_negative(f"ip_bytes[{key}]", ip_bytes.get(key, 0))
        medium[key] = airtime_s(n, size / n, air) if n else 0.0
    data = math.fsum(v for k, v in medium.items() if k.endswith(".data"))
    ack = math.fsum(v for k, v in medium.items() if k.endswith(".ack"))
    processing = _non_negative("processing_s", processing_s)
    rtt = _non_negative("rtt_s", rtt_s)
    return AirtimeBound(
        frames=dict(frames),
        medium_s=medium,
        data_s=data,
        ack_s=ack,
        busy_s=data + ack,
        processing_s=processing,
        rtt_s=rtt,
        total_s=max(data + ack, data + processing + rtt),
    )
