"""docs/models.md section 5: the window bound and the bandwidth-delay product."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.base import BITS_PER_BYTE, _non_negative, _positive


def window_throughput_bps(window_bytes: float, rtt_s: float, path_bps: float) -> float:
    """Section 5: ``min(B_path, W / R)`` in bit/s (``R = 0`` leaves only the path rate)."""
    window = _positive("window_bytes", window_bytes)
    rtt = _non_negative("rtt_s", rtt_s)
    path = _positive("path_bps", path_bps)
    if rtt == 0:
        return path
    return min(path, window * BITS_PER_BYTE / rtt)


def bdp_bytes(rate_bps: float, rtt_s: float) -> float:
    """Section 5: the bandwidth-delay product, the window that fills the path."""
    rate = _positive("rate_bps", rate_bps)
    rtt = _non_negative("rtt_s", rtt_s)
    return rate / BITS_PER_BYTE * rtt
