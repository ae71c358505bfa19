"""docs/models.md section 6: slow start rounds."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.base import INITCWND_SEGMENTS, MODELS_MSS_BYTES, _count


def slow_start_rounds(
    size_bytes: int, mss_bytes: int = MODELS_MSS_BYTES, initcwnd_segments: int = INITCWND_SEGMENTS
) -> int:
    """Section 6: the smallest k with ``IW * MSS * (2^k - 1) >= size``: windows a cold
    connection needs to send ``size_bytes`` (0 for nothing to send)."""
    size = _count("size_bytes", size_bytes)
    mss = _count("mss_bytes", mss_bytes, minimum=1)
    iw = _count("initcwnd_segments", initcwnd_segments, minimum=1)
    first = iw * mss
    rounds = 0
    while first * ((1 << rounds) - 1) < size:
        rounds += 1
    return rounds
