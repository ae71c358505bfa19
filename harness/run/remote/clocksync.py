"""The offset between the client's clock and a remote server's clock (issue 18).

A run between two hosts has client events on this host's CLOCK_MONOTONIC and server events
on the remote host's. The offset is estimated per run from NTP-style exchanges over the
control channel (RFC 5905 section 8, the on-wire protocol): the client stamps a request
when it leaves (``sent_s``) and when the answer comes back (``returned_s``), the remote
stamps it when it arrives (``received_s``) and when it answers (``replied_s``). With the
round trip ``delta = (returned - sent) - (replied - received)``, the offset of the remote
clock is ``theta = ((received - sent) + (replied - returned)) / 2``, and the true offset
lies within ``theta +- delta / 2`` whatever the asymmetry of the path (RFC 5905 section
8; the minimum-delay sample is the best one, section 10's clock filter).

Sans-I/O: plain functions of the four stamps; the control channel (harness.run.remote.channel) makes
the exchanges. A one-way delay computed across the two clocks carries the offset's error
and is flagged when it comes out negative (Pantheon's issue 71: negative one-way delays
from unsynchronised clocks, silently averaged in).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tbcore.errors import SpecError

PHI_S_PER_S = 15e-6
"""RFC 5905 section 7.3: PHI, the frequency tolerance of a clock (15 ppm). The offset's
error grows by this much per second away from the exchange it came from."""

MIN_EXCHANGES = 1
"""One exchange gives an offset and its bound; more narrow the bound (the minimum round
trip wins)."""


@dataclass(frozen=True)
class Exchange:
    """One request/answer over the control channel: ``sent_s`` and ``returned_s`` on the
    client's clock, ``received_s`` and ``replied_s`` on the remote's."""

    sent_s: float
    received_s: float
    replied_s: float
    returned_s: float

    @property
    def rtt_s(self) -> float:
        """The round trip less the remote's time holding the request (RFC 5905 delta)."""
        return (self.returned_s - self.sent_s) - (self.replied_s - self.received_s)

    @property
    def offset_s(self) -> float:
        """Remote clock minus client clock, assuming a symmetric path (RFC 5905 theta)."""
        return ((self.received_s - self.sent_s) + (self.replied_s - self.returned_s)) / 2


@dataclass(frozen=True)
class ClockOffset:
    """The remote clock minus the client clock, ``offset_s``, true within ``error_s`` at
    ``at_client_s`` (the client time of the exchange it comes from)."""

    offset_s: float
    error_s: float
    min_rtt_s: float
    samples: int
    at_client_s: float

    def error_at(self, client_s: float) -> float:
        """The bound at another client time: it widens by PHI per second of age."""
        return self.error_s + PHI_S_PER_S * abs(client_s - self.at_client_s)

    def to_client_s(self, remote_s: float) -> float:
        """A remote clock reading on the client's clock."""
        return remote_s - self.offset_s


def check_exchange(exchange: Exchange) -> None:
    """Refuse stamps no clock can give: time running backwards on either side, or a remote
    that held the request longer than the round trip it sat in."""
    if exchange.returned_s < exchange.sent_s:
        raise SpecError("exchange", "the answer came back before the request left")
    if exchange.replied_s < exchange.received_s:
        raise SpecError("exchange", "the remote answered before the request arrived")
    if exchange.rtt_s < 0:
        raise SpecError("exchange", "the remote held the request longer than its round trip")


def estimate(exchanges: Iterable[Exchange]) -> ClockOffset:
    """The offset from the exchange with the smallest round trip, bounded by half of it
    plus the PHI drift over that exchange (RFC 5905 sections 8 and 10)."""
    usable = list(exchanges)
    for exchange in usable:
        check_exchange(exchange)
    if len(usable) < MIN_EXCHANGES:
        raise SpecError("exchanges", "no exchange to estimate a clock offset from")
    best = min(usable, key=lambda e: e.rtt_s)
    span_s = best.returned_s - best.sent_s
    return ClockOffset(
        offset_s=best.offset_s,
        error_s=best.rtt_s / 2 + PHI_S_PER_S * span_s,
        min_rtt_s=best.rtt_s,
        samples=len(usable),
        at_client_s=(best.sent_s + best.returned_s) / 2,
    )


@dataclass(frozen=True)
class OneWayDelay:
    """A delay from a client send to a remote receive (or the reverse), on one clock.

    ``negative``: it came out below zero; ``impossible``: below zero by more than the
    offset's error, so the clocks or the estimate are wrong, not just uncertain."""

    delay_s: float
    error_s: float

    @property
    def negative(self) -> bool:
        return self.delay_s < 0

    @property
    def impossible(self) -> bool:
        return self.delay_s + self.error_s < 0


def one_way_delay(sent_s: float, received_s: float, offset: ClockOffset) -> OneWayDelay:
    """A one-way delay between two times already on the client's clock (the remote one moved
    there through ``offset``), with the offset's error at the send as its error."""
    return OneWayDelay(delay_s=received_s - sent_s, error_s=offset.error_at(sent_s))
