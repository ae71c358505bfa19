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
- ``ack-frequency``: draft-ietf-quic-ack-frequency-10. Each end advertises the
  ``min_ack_delay`` transport parameter; the *data sender* chooses the receiver's threshold and
  delay (:func:`requested_frequency`: about :data:`AF_ACKS_PER_WINDOW` ACKs per congestion
  window and per smoothed RTT, never fewer than one per two packets) and sends them in
  ACK_FREQUENCY frames whenever its choice changes, and IMMEDIATE_ACK with its probes; the
  receiver follows the newest frame (:meth:`AckScheduler.apply_frequency`) and, until the
  first, the stack's own rule. The frames are the adapter's (proto.quic.adapter).
- ``tack``: TACK's rule (Li et al., "TACK: Improving Wireless Transport Performance by
  Taming Acknowledgments", SIGCOMM 2020, section 4): ACK frequency
  ``min(bw / (L * MSS), beta / RTT_min)`` with ``L`` = :data:`TACK_L` and ``beta`` =
  :data:`TACK_BETA`, i.e. an ACK once ``L`` full packets are unacknowledged *and*
  ``RTT_min / beta`` has passed since the last; an immediate ACK (TACK's IACK) for a
  packet out of order. The period is capped at the advertised max_ack_delay (25 ms), which
  the sender's probe timeout counts on: at RTT_min above 100 ms that is more than
  ``beta`` ACKs per RTT (a difference from the paper, stated in the row's policy).

Whatever the policy, a packet that arrives out of order (a gap before it, or below the
largest received) is acknowledged at once, as RFC 9000 section 13.2.1 recommends, so that
the sender's loss detection is not delayed by the policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from tbcore.errors import SpecError
from tbcore.units import parse_duration_s

MAX_ACK_DELAY_S = 0.025
"""The max_ack_delay aioquic advertises (its transport parameter, 25 ms; RFC 9000 section
18.2's default): a policy may not hold an ACK longer."""
MAX_EVERY_PACKETS = 256
"""A sanity bound on N: more unacknowledged packets than this is a window, not a policy."""
POLICIES = ("default", "immediate", "every:N,max:T", "ack-frequency", "tack")
"""The written forms ``ack_policy`` takes."""
KINDS = ("default", "immediate", "every", "ack-frequency", "tack")
"""The policies by name (:attr:`AckPolicy.name`): what a protocol's receivers can give."""
TCP_DELACK_MIN_S = 0.002
"""The shortest delayed-ACK ceiling Linux takes (TCP_TIMEOUT_MIN: two jiffies at HZ=1000);
its own ceiling is TCP_DELACK_MAX, 200 ms (include/net/tcp.h)."""
TACK_L = 2
"""TACK's byte-counting parameter L: full-sized packets per ACK at low rates (the paper's
default, section 4.1)."""
TACK_BETA = 4
"""TACK's periodic parameter beta: ACKs per RTT_min at high rates (the paper's default)."""
AF_ACKS_PER_WINDOW = 8
"""ack-frequency: the ACKs per congestion window (and per smoothed RTT) the data sender asks
for; the draft leaves the number to the sender (draft-ietf-quic-ack-frequency-10 section
9), RFC 9000's rule is about half a window's worth."""
AF_MIN_ACK_DELAY_S = 0.001
"""The min_ack_delay each end advertises (microseconds on the wire): aioquic's timer
granularity (its K_GRANULARITY, 1 ms)."""
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
ACK_FREQUENCY = AckPolicy("ack-frequency")
TACK = AckPolicy("tack", every_packets=TACK_L, max_delay_s=MAX_ACK_DELAY_S)
_NAMED = {p.name: p for p in (DEFAULT, IMMEDIATE, ACK_FREQUENCY, TACK)}


def parse_ack_policy(field: str, text: object) -> AckPolicy:
    """``default``, ``immediate`` or ``every:N,max:T`` (N >= 1 packets, T a duration within
    the advertised max_ack_delay); anything else is refused in one line naming ``field``."""
    if not isinstance(text, str):
        raise SpecError(field, f"must be one of {', '.join(POLICIES)}, got {text!r}")
    written = text.strip().lower()
    if written in _NAMED:
        return _NAMED[written]
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
    number, arrival time, size and whether it elicits an ACK) and of every ACK sent, it
    answers when the next ACK is due (None: the policy leaves it to the stack, or nothing is
    due)."""

    def __init__(
        self, policy: AckPolicy, rtt_min_s: Callable[[], float | None] = lambda: None
    ) -> None:
        self.policy = policy
        self.rule = policy if policy.name != "ack-frequency" else DEFAULT
        """What acts now: the policy, or for ack-frequency the newest frame's (the stack's
        rule until one arrives)."""
        self.reordering_threshold = 1
        """How far out of order a packet may arrive without an immediate ACK (RFC 9000
        section 13.2.1's 1: any gap; 0: never, draft-ietf-quic-ack-frequency-10 section 4)."""
        self.rtt_min_s = rtt_min_s
        """TACK's RTT_min, read when needed (the receiver's own estimate)."""
        self.unacked = 0
        """Ack-eliciting packets received since the last ACK was sent."""
        self.first_unacked_s: float | None = None
        self.last_ack_s: float | None = None
        self.largest: int = -1
        self.acks_sent = 0
        self.eliciting_received = 0
        self.frequency_seq = -1
        """The sequence number of the newest ACK_FREQUENCY frame followed."""
        self.followed: list[str] = []
        """The rules ACK_FREQUENCY frames set, in order (written forms)."""

    def apply_frequency(
        self, seq: int, threshold: int, max_delay_s: float, reordering: int
    ) -> bool:
        """An ACK_FREQUENCY frame (draft-ietf-quic-ack-frequency-10 section 4): from now on an
        ACK after more than ``threshold`` ack-eliciting packets or ``max_delay_s`` after the
        first; an older frame than one followed is ignored (False)."""
        if seq <= self.frequency_seq:
            return False
        self.frequency_seq = seq
        self.rule = AckPolicy("every", every_packets=threshold + 1, max_delay_s=max_delay_s)
        self.reordering_threshold = reordering
        self.followed.append(self.rule.text)
        return True

    def on_packet(self, number: int, now: float, ack_eliciting: bool = True) -> float | None:
        """Packet ``number`` arrived at ``now``: the time the next ACK is due (``now``: at
        once), or None to leave it to the stack (``default``; a packet that elicits none)."""
        gap = number - self.largest - 1 if number > self.largest else self.largest - number
        self.largest = max(self.largest, number)
        if not ack_eliciting:
            return None
        self.eliciting_received += 1
        if self.rule.name == "default":
            return None
        self.unacked += 1
        if self.first_unacked_s is None:
            self.first_unacked_s = now
        out_of_order = self.reordering_threshold > 0 and gap >= self.reordering_threshold
        if self.rule.name == "immediate" or out_of_order:
            return now
        if self.rule.name == "tack":
            return self._tack_due(now)
        if self.unacked >= self.rule.every_packets:
            return now
        return self.first_unacked_s + self.rule.max_delay_s

    def tack_period_s(self) -> float:
        """RTT_min / beta, at most the advertised max_ack_delay (module docstring)."""
        rtt = self.rtt_min_s()
        if rtt is None or not 0 < rtt < math.inf:
            return MAX_ACK_DELAY_S
        return min(rtt / TACK_BETA, MAX_ACK_DELAY_S)

    def _tack_due(self, now: float) -> float:
        """L full packets unacknowledged and a period since the last ACK; fewer: at most
        max_ack_delay after the first of them."""
        assert self.first_unacked_s is not None
        if self.unacked < TACK_L:
            return self.first_unacked_s + MAX_ACK_DELAY_S
        if self.last_ack_s is None:
            return now
        return max(now, self.last_ack_s + self.tack_period_s())

    def on_ack_sent(self, now: float | None = None) -> None:
        """An ACK left: what it acknowledged is no longer pending."""
        self.acks_sent += 1
        self.unacked = 0
        self.first_unacked_s = None
        if now is not None:
            self.last_ack_s = now

    @property
    def acks_per_packet(self) -> float:
        """ACKs sent per ack-eliciting packet received (NaN before the first)."""
        if not self.eliciting_received:
            return math.nan
        return self.acks_sent / self.eliciting_received


def requested_frequency(
    cwnd_bytes: int, mss_bytes: int, srtt_s: float, peer_min_ack_delay_s: float
) -> tuple[int, float]:
    """The data sender's choice for ack-frequency: (Ack-Eliciting Threshold, Requested Max Ack
    Delay in seconds) for about :data:`AF_ACKS_PER_WINDOW` ACKs per congestion window and per
    smoothed RTT, an ACK at least every second packet, the delay within the peer's
    min_ack_delay and the advertised max_ack_delay. Both are rounded (packets to a power of
    two, the delay to a millisecond) so that a growing window changes them a few times, not
    with every ACK."""
    share = cwnd_bytes // max(1, mss_bytes) // AF_ACKS_PER_WINDOW
    every = max(2, 1 << max(0, share.bit_length() - 1))
    delay = min(max(srtt_s / AF_ACKS_PER_WINDOW, peer_min_ack_delay_s), MAX_ACK_DELAY_S)
    return every - 1, round(delay, 3)
