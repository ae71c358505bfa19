"""The relay's request bound: a new near hop, a warm long haul (docs/models.md sections 1 and 4)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.base import BITS_PER_BYTE, INITCWND_SEGMENTS, _non_negative, _positive
from harness.bounds.request import Parts, _transfer, direction_rounds
from harness.bounds.setup import setup_rtts


@dataclass(frozen=True)
class RelayBound(Parts):
    """A request through a relay that keeps a warm, tuned connection over the long haul.

    The client opens a new connection over the near hop only; the relay forwards the
    request on its long-haul connection, which is open and its window grown (no set-up, no
    slow start: section 1's serial time on an established connection). Parts: the near
    hop's set-up (section 4 on the near round trip) and its slow-start idle time (section 6;
    the near hop's windows overlap nothing), the propagation of both hops one way and back,
    the serialisation of all bytes once at the bottleneck rate (the relay streams: the two
    hops' serialisations overlap), and processing.
    """

    protocol: str
    near_rtt_s: float
    long_rtt_s: float
    up_bps: float
    down_bps: float
    upload_bytes: int
    download_bytes: int
    setup_s: float
    """The near hop's set-up: ``setup_rtts(protocol, 'new') * near_rtt_s``."""
    feedback_s: float
    """Slow-start idle time of the new connection on the near hop (both directions)."""
    propagation_s: float
    """``near_rtt_s + long_rtt_s``: the one long-haul round trip and the near hop's."""
    serialisation_s: float
    """``S_u / B_u + S_d / B_d`` at the bottleneck rates."""
    processing_s: float
    total_s: float = field(init=False)

    PARTS = ("setup_s", "feedback_s", "propagation_s", "serialisation_s", "processing_s")

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_s", self._sum_parts())


def relay_request_time(
    *,
    protocol: str,
    near_rtt_s: float,
    long_rtt_s: float,
    up_bps: float,
    down_bps: float,
    upload_bytes: int,
    download_bytes: int,
    processing_s: float = 0.0,
    near_up_bps: float | None = None,
    near_down_bps: float | None = None,
    initcwnd_segments: int = INITCWND_SEGMENTS,
    mss_bytes: int | None = None,
) -> RelayBound:
    """The lower bound of one request over a new near-hop connection and a warm long haul
    (:class:`RelayBound`). ``up_bps``/``down_bps`` are the bottleneck rates (the long haul's
    when the near hop is faster); ``near_*_bps`` the near hop's (None: unlimited)."""
    rounds_setup = setup_rtts(protocol, "new")
    near = _non_negative("near_rtt_s", near_rtt_s)
    far = _non_negative("long_rtt_s", long_rtt_s)
    up, down, upload, download, processing, iw, mss = _transfer(
        protocol, up_bps, down_bps, upload_bytes, download_bytes, processing_s,
        initcwnd_segments, mss_bytes,
    )  # fmt: skip
    feedback = 0.0
    for size, rate in ((upload, near_up_bps), (download, near_down_bps)):
        near_rate = math.inf if rate is None else _positive("near rate", rate)
        rate_bps = near_rate if math.isfinite(near_rate) else 1e18
        feedback += direction_rounds(
            size, rate_bps, near, initial_window_bytes=float(iw * mss), mss_bytes=mss
        ).feedback_s
    return RelayBound(
        protocol=protocol,
        near_rtt_s=near,
        long_rtt_s=far,
        up_bps=up,
        down_bps=down,
        upload_bytes=upload,
        download_bytes=download,
        setup_s=rounds_setup * near,
        feedback_s=feedback,
        propagation_s=near + far,
        serialisation_s=upload * BITS_PER_BYTE / up + download * BITS_PER_BYTE / down,
        processing_s=processing,
    )
