"""Competing traffic on a run's bottleneck, as an experiment writes it (sans-I/O).

``cross = "tcp:N:CC"``: ``N`` bulk TCP flows of congestion control ``CC`` (one iperf3 test
with ``-P N -C CC``); ``cross = "udp:RATE"``: one constant-rate UDP stream (iperf3 ``-u -b``).
The flows cross the same bottleneck as the measured request, in the direction its data
goes, and start before it (harness.run.cross runs them; harness.collect.cross measures
them; docs/models.md section 15 is their bound).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from tbcore import units
from tbcore.errors import SpecError

KINDS = ("tcp", "udp")
MAX_FLOWS = 16
"""iperf3 takes up to 128 parallel streams; beyond 16 bulk flows two shared cores spend
the run moving the competitors' packets, not the request's."""
MAX_UDP_RATE_BPS = 1e9
"""One iperf3 UDP sender: about what one core sends here (NOTES-machine: the emulator tops
out near 333 Mbit/s anyway)."""
MIN_UDP_RATE_BPS = units.MIN_RATE_BPS
SYNTAX = "tcp:N:cc (e.g. tcp:2:cubic) or udp:RATE (e.g. udp:10mbit)"


@dataclass(frozen=True)
class CrossTraffic:
    """What competes with the measured request."""

    kind: str
    """``tcp`` (bulk flows) or ``udp`` (one constant-rate stream)."""
    flows: int
    """Bulk TCP flows, or 1 for the UDP stream."""
    cc: str | None = None
    """The TCP flows' congestion control."""
    rate_bps: float | None = None
    """The UDP stream's rate (iperf3 counts its payload; the wire carries 28 bytes more per
    datagram)."""

    @property
    def label(self) -> str:
        if self.kind == "tcp":
            return f"{self.flows} {self.cc} flow{'s' if self.flows != 1 else ''}"
        assert self.rate_bps is not None
        return f"UDP at {self.rate_bps / 1e6:g} Mbit/s"


def parse_cross(name: str, value: object, controls: Collection[str]) -> CrossTraffic:
    """The written form (``tcp:2:cubic``, ``udp:10mbit``) -> :class:`CrossTraffic`;
    ``controls``: the congestion controls this host's TCP accepts."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(name, f"must be {SYNTAX}, got {value!r}")
    parts = [p.strip() for p in value.strip().lower().split(":")]
    if parts[0] not in KINDS:
        raise SpecError(name, f"{value!r}: must be {SYNTAX}")
    if parts[0] == "udp":
        if len(parts) != 2:
            raise SpecError(name, f"{value!r}: a UDP stream is udp:RATE (e.g. udp:10mbit)")
        rate = units.parse_rate_bps(name, parts[1])
        if not MIN_UDP_RATE_BPS <= rate <= MAX_UDP_RATE_BPS:
            raise SpecError(name, f"{value!r}: the UDP rate must lie in 1 kbit/s .. 1 Gbit/s")
        return CrossTraffic("udp", 1, rate_bps=rate)
    if len(parts) != 3:
        raise SpecError(name, f"{value!r}: TCP flows are tcp:N:cc (e.g. tcp:2:cubic)")
    if not parts[1].isascii() or not parts[1].isdigit():
        raise SpecError(name, f"{value!r}: N must be a whole number of flows")
    flows = int(parts[1])
    if not 1 <= flows <= MAX_FLOWS:
        raise SpecError(name, f"{value!r}: N must lie in 1..{MAX_FLOWS}")
    if parts[2] not in controls:
        raise SpecError(name, f"{value!r}: cc must be one of {', '.join(controls)}")
    return CrossTraffic("tcp", flows, cc=parts[2])
