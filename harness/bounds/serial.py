"""docs/models.md section 1: the serial request (upload, propagation, processing, download)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.base import BITS_PER_BYTE, _non_negative, _positive


def serial_time(
    upload_bytes: float,
    download_bytes: float,
    up_bps: float,
    down_bps: float,
    rtt_s: float,
    processing_s: float = 0.0,
) -> float:
    """Section 1: ``S_u/B_u + R + T_c + S_d/B_d`` on an established connection, in seconds."""
    upload = _non_negative("upload_bytes", upload_bytes)
    download = _non_negative("download_bytes", download_bytes)
    up = _positive("up_bps", up_bps)
    down = _positive("down_bps", down_bps)
    rtt = _non_negative("rtt_s", rtt_s)
    processing = _non_negative("processing_s", processing_s)
    return upload * BITS_PER_BYTE / up + rtt + processing + download * BITS_PER_BYTE / down
