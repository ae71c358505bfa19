"""The receiver's ACK policy (``ack_policy``), sans-I/O: when to acknowledge, given the
ack-eliciting packets that arrived and a clock. The adapter (proto.quic.adapter) applies it
to aioquic's 1-RTT packet number space; this module only decides (plain data: the settings
read the written form with it).

- ``default``: aioquic's own rule, untouched (an ACK ``quic_ack_delay`` after the first
  unacknowledged ack-eliciting packet, 1 ms unless set).
- ``immediate``: an ACK for every ack-eliciting packet, as soon as it is received (the
  chapter's baseline in §12.3.2: one ACK per packet).
- ``every:N,max:T``: an ACK once N ack-eliciting packets are unacknowledged, or T after the
  first of them arrived, whichever comes first (the chapter's aggregated arm: every 2
  packets or at most 10 ms, ``every:2,max:10ms``). T is at most the 25 ms ``max_ack_delay``
  aioquic advertises (RFC 9000 section 18.2: a peer's loss recovery counts on it).

Whatever the policy, a packet that arrives out of order (a gap before it, or below the
largest received) is acknowledged at once, as RFC 9000 section 13.2.1 recommends, so that
the sender's loss detection is not delayed by the policy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tbcore.errors import SpecError
from tbcore.units import parse_duration_s

MAX_ACK_DELAY_S = 0.025
"""The max_ack_delay aioquic advertises (its transport parameter, 25 ms; RFC 9000 section
18.2's default): a policy may not hold an ACK longer."""
MAX_EVERY_PACKETS = 256
"""A sanity bound on N: more unacknowledged packets than this is a window, not a policy."""
POLICIES = ("default", "immediate", "every:N,max:T")
"""The written forms ``ack_policy`` takes."""
_EVERY = re.compile(r"every:(?P<n>[0-9]+),max:(?P<t>[^,]+)")


@dataclass(frozen=True)
class AckPolicy:
    """A parsed ``ack_policy``: ``every_packets`` ack-eliciting packets or ``max_delay_s``
    after the first, whichever first; ``default`` leaves aioquic's rule."""

    name: str
    every_packets: int = 1
    max_delay_s: float = 0.0

    @property
    def text(self) -> str:
        if self.name == "every":
            return f"every:{self.every_packets},max:{self.max_delay_s * 1e3:g}ms"
        return self.name


DEFAULT = AckPolicy("default")
IMMEDIATE = AckPolicy("immediate")


def parse_ack_policy(field: str, text: object) -> AckPolicy:
    """``default``, ``immediate`` or ``every:N,max:T`` (N >= 1 packets, T a duration within
    the advertised max_ack_delay); anything else is refused in one line naming ``field``."""
    if not isinstance(text, str):
        raise SpecError(field, f"must be one of {', '.join(POLICIES)}, got {text!r}")
    written = text.strip().lower()
    if written == "default":
        return DEFAULT
    if written == "immediate":
        return IMMEDIATE
    match = _EVERY.fullmatch(written)
    if match is None:
        raise SpecError(field, f"{text!r}: must be one of {', '.join(POLICIES)}")
    every = int(match["n"])
    if not 1 <= every <= MAX_EVERY_PACKETS:
        raise SpecError(field, f"every:{every}: N must be in 1..{MAX_EVERY_PACKETS} packets")
    delay = parse_duration_s(field, match["t"])
    if not 0 < delay <= MAX_ACK_DELAY_S:
        raise SpecError(
            field,
            f"max:{match['t']}: T must be in (0, {MAX_ACK_DELAY_S * 1e3:g} ms], the "
            "max_ack_delay the receiver advertises (RFC 9000 section 18.2)",
        )
    return AckPolicy("every", every_packets=every, max_delay_s=delay)


class AckScheduler:
    """The policy's state on one connection: told of every packet received in the space (its
    number, arrival time and whether it elicits an ACK) and of every ACK sent, it answers
    when the next ACK is due (None: the policy leaves it to the stack, or nothing is due)."""

    def __init__(self, policy: AckPolicy) -> None:
        self.policy = policy
        self.unacked = 0
        """Ack-eliciting packets received since the last ACK was sent."""
        self.first_unacked_s: float | None = None
        self.largest: int = -1
        self.acks_sent = 0
        self.eliciting_received = 0

    def on_packet(self, number: int, now: float, ack_eliciting: bool = True) -> float | None:
        """Packet ``number`` arrived at ``now``: the time the next ACK is due (``now``: at
        once), or None to leave it to the stack (``default``; a packet that elicits none)."""
        out_of_order = number != self.largest + 1
        self.largest = max(self.largest, number)
        if not ack_eliciting:
            return None
        self.eliciting_received += 1
        if self.policy.name == "default":
            return None
        self.unacked += 1
        if self.first_unacked_s is None:
            self.first_unacked_s = now
        if self.policy.name == "immediate" or out_of_order:
            return now
        if self.unacked >= self.policy.every_packets:
            return now
        return self.first_unacked_s + self.policy.max_delay_s

    def on_ack_sent(self) -> None:
        """An ACK left: what it acknowledged is no longer pending."""
        self.acks_sent += 1
        self.unacked = 0
        self.first_unacked_s = None

    @property
    def acks_per_packet(self) -> float:
        """ACKs sent per ack-eliciting packet received (NaN before the first)."""
        if not self.eliciting_received:
            return math.nan
        return self.acks_sent / self.eliciting_received
