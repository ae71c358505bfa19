"""The HTTP/3 implementations a level can run (``quic_stack``) and what each can carry.

``aioquic`` is the testbed's Python stack (servers/h3server.py, clients/h3client.py): every
h3 workload and knob. ``ngtcp2`` is the testbed's native stack: its own HTTP/3 client and
server in C on Debian's libngtcp2 0.12 (GnuTLS crypto) and libnghttp3 0.8
(proto/native/tbh3.c), driven by the same Python edges of routes and records
(servers/h3native.py, clients/h3native.py). It carries every workload aioquic carries but
the two-path upload (their registrations say so: tbcore.kinds.WorkloadKind.stacks), with
the server's processing, several streams with RFC 9218 priorities, agent rounds, 0-RTT
with resumption and connection reuse. Debian's example binaries (gtlsserver, gtlsclient:
servers/ngtcp2.py, clients/ngtcp2.py) stay as an interoperability peer, not as an arm.

A level that asks ngtcp2 for what it cannot do is refused in one line (:func:`check`), so
that the bound and the run agree; a knob that only aioquic applies is refused rather than
ignored. Pure data and checks: no I/O, no import of tbcore.settings (which calls
:func:`check` on every Settings it builds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tbcore import ackpolicy
from tbcore.errors import SpecError

QUIC_STACKS = ("aioquic", "ngtcp2")
"""The values of ``quic_stack``."""
DEFAULT_QUIC_STACK = "aioquic"

NGTCP2_CONGESTION_CONTROLS = ("reno", "cubic", "bbr", "bbr2")
"""ngtcp2 0.12.1's ``ngtcp2_cc_algo``: bbr is its BBR v1, bbr2 its BBR v2."""
AIOQUIC_CONGESTION_CONTROLS = ("reno", "cubic", "bbr")
"""What aioquic 1.7 registers (``QuicConfiguration.congestion_control_algorithm``): its own
reno and cubic, and the testbed's bbr (proto.quic.bbr: Linux tcp_bbr.c, BBR version 1)."""
NGTCP2_PACING = ("cwnd", "off")
"""``quic_pacing`` on ngtcp2: its own pacer (``cwnd``, the default name of "the stack's
pacer") or none; ngtcp2 0.12 has no fixed-rate pacer."""
NGTCP2_ACK_POLICIES = ("default", "immediate", "every")
"""The ACK policies (tbcore.ackpolicy) ngtcp2 0.12's settings can express: its own rule
(an ACK every 2 ack-eliciting packets or after max_ack_delay, 25 ms), ``immediate``
(ack_thresh 1) and ``every:N,max:T`` (ack_thresh N, max_ack_delay T: ngtcp2 holds an ACK
at most its own advertised max_ack_delay). It has no ACK_FREQUENCY frame
(draft-ietf-quic-ack-frequency) and no TACK."""
NGTCP2_ACK_BODY = b"received\n"
"""The answer of a POST whose response is no workload (asr, sink) when Debian's gtlsserver
(the interoperability peer) serves it: the file at that path, checked byte for byte."""


@dataclass(frozen=True)
class FixedKnob:
    """A knob ngtcp2 has no way to apply: it must keep this value on an ngtcp2 level."""

    key: str
    attr: str
    value: Any
    reason: str


NGTCP2_FIXED = (
    FixedKnob("max_pacing_rate", "max_pacing_rate_bps", None, "ngtcp2 0.12's pacer has no cap"),
    FixedKnob("pace_at_path_rate", "pace_at_path_rate", False, "ngtcp2 0.12's pacer has no cap"),
    FixedKnob("sndbuf", "sndbuf_bytes", None, "TCP socket buffers: no TCP on an HTTP/3 level"),
    FixedKnob("rcvbuf", "rcvbuf_bytes", None, "TCP socket buffers: no TCP on an HTTP/3 level"),
    FixedKnob("multipath", "multipath", "single", "one path only"),
)  # fmt: skip
"""Knobs an ngtcp2 level must leave at these values (each with why)."""


def control_of(settings: Any) -> str:
    """The congestion control the level's QUIC stack runs: ``quic_cc`` when given, else
    ``cc`` (one control named for both stacks, issue 25), for either stack."""
    return str(settings.quic_cc or settings.cc)


def controls_of(settings: Any) -> tuple[str, ...]:
    """The controls the level's QUIC stack has."""
    if settings.quic_stack == "ngtcp2":
        return NGTCP2_CONGESTION_CONTROLS
    return AIOQUIC_CONGESTION_CONTROLS


def paces(settings: Any) -> bool:
    """Whether the level's QUIC sender spreads a window over time: both stacks unless
    ``quic_pacing`` is off (aioquic's pacer, cwnd/srtt; ngtcp2's, one send quantum at a
    time: tb-h3 calls ngtcp2_conn_update_pkt_tx_time after each quantum)."""
    return bool(settings.quic_pacing != "off")


def check(settings: Any, *, has_stacks: bool, carried: tuple[str, ...]) -> None:
    """Refuse, in one line naming the knob, a ``quic_stack`` that would have no effect (on a
    protocol with no choice of stack: ``has_stacks`` False, from its kind's ``stack_of``), a
    workload the stack does not carry (``carried``: its kind's stacks) and an ngtcp2 level
    that asks for what ngtcp2 cannot do."""
    if settings.quic_stack == DEFAULT_QUIC_STACK:
        return
    if not has_stacks:
        raise SpecError(
            "quic_stack",
            f"{settings.quic_stack} is an HTTP/3 stack: it takes effect on protocol h3 only, "
            f"not {settings.protocol}",
        )
    if settings.topology == "dual":
        raise SpecError("topology", "not applied by ngtcp2: two paths run aioquic's multipath "
                        "client and h2")  # fmt: skip
    if settings.quic_stack not in carried:
        stacks = ", ".join(carried)
        raise SpecError(
            "workload", f"{settings.workload} runs on {stacks}, not {settings.quic_stack}"
        )
    for item in NGTCP2_FIXED:
        if getattr(settings, item.attr) != item.value:
            raise SpecError(item.key, f"not applied by ngtcp2: {item.reason}")
    policy = ackpolicy.parse_ack_policy("ack_policy", settings.ack_policy)
    if policy.name not in NGTCP2_ACK_POLICIES:
        raise SpecError(
            "ack_policy",
            f"{policy.text}: not applied by ngtcp2 (0.12 takes an ACK threshold "
            "and max_ack_delay: default, immediate, every:N,max:T)",
        )
    if policy.name != "default" and settings.quic_ack_delay_s is not None:
        raise SpecError(
            "quic_ack_delay",
            f"ngtcp2 holds ACKs by max_ack_delay, which ack_policy "
            f"{policy.text} sets: give one of the two",
        )
    if settings.quic_pacing not in NGTCP2_PACING:
        raise SpecError(
            "quic_pacing",
            f"{settings.quic_pacing}: ngtcp2 paces with its own pacer (cwnd) or "
            "not at all (off); it has no fixed-rate pacer",
        )
    control = control_of(settings)
    if control not in NGTCP2_CONGESTION_CONTROLS:
        raise SpecError("cc", f"ngtcp2 has {', '.join(NGTCP2_CONGESTION_CONTROLS)}, not {control}")
