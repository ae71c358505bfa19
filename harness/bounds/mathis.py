"""docs/models.md section 8: loss as a congestion signal (Mathis)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.base import BITS_PER_BYTE, _loss, _positive


def mathis_throughput_bps(mss_bytes: float, rtt_s: float, loss: float, c: float = 1.0) -> float:
    """Section 8: ``(MSS / R) * C / sqrt(p)`` in bit/s; ``math.inf`` at zero loss.

    ``c = 1`` is the simplified bound; :data:`MATHIS_C_PERIODIC` the periodic-loss one.
    """
    mss = _positive("mss_bytes", mss_bytes)
    rtt = _positive("rtt_s", rtt_s)
    p = _loss("loss", loss)
    constant = _positive("c", c)
    if p == 0:
        return math.inf
    return mss * BITS_PER_BYTE / rtt * constant / math.sqrt(p)
