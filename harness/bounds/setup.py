"""docs/models.md section 4: connection set-up in round trips."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tbcore.errors import SpecError

if TYPE_CHECKING:
    pass

from harness.bounds.base import PROTOCOLS, SETUP_RTTS, _count, _non_negative


def setup_rtts(protocol: str, connection: str) -> int:
    """Section 4: round trips before the request may leave (see :data:`SETUP_RTTS`)."""
    if all(known != protocol for known, _ in SETUP_RTTS):
        raise SpecError("protocol", f"must be one of {', '.join(PROTOCOLS)}, fec, got {protocol!r}")
    if (protocol, connection) not in SETUP_RTTS:
        known = sorted(c for p, c in SETUP_RTTS if p == protocol)
        raise SpecError("connection", f"must be one of {', '.join(known)}, got {connection!r}")
    return SETUP_RTTS[(protocol, connection)]


def setup_time_s(protocol: str, connection: str, rtt_s: float, requests: int = 1) -> float:
    """Section 4: set-up time of ``requests`` requests, each on the connection state given."""
    rtt = _non_negative("rtt_s", rtt_s)
    count = _count("requests", requests)
    return setup_rtts(protocol, connection) * rtt * count
