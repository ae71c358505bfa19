"""The HTTP/3 implementations a level can run (``quic_stack``) and what each can carry.

``aioquic`` is the testbed's own stack (servers/h3server.py, clients/h3client.py, Python):
every h3 workload and knob. ``ngtcp2`` is Debian's ngtcp2 0.12.1 example server and client
(``gtlsserver`` / ``gtlsclient``, C, GnuTLS; servers/ngtcp2.py and clients/ngtcp2.py run
them): a static file server and a client that GETs a file, or POSTs one with ``--data``.
That carries the fixed workloads whose answer is a file (their registrations say so:
tbcore.kinds.WorkloadKind.stacks, their route tbcore.routes.HttpRoute), with no
server processing time (a file server cannot wait 30 ms), on a new connection per request
(gtlsclient sends all its requests at once on one connection, not one after another).

A level that asks ngtcp2 for what it cannot do is refused in one line (:func:`check`), so
that the bound and the run agree; a knob that only aioquic applies is refused rather than
ignored. Pure data and checks: no I/O, no import of tbcore.settings (which calls
:func:`check` on every Settings it builds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tbcore.errors import SpecError
from tbcore.routes import HttpRoute

QUIC_STACKS = ("aioquic", "ngtcp2")
"""The values of ``quic_stack``."""
DEFAULT_QUIC_STACK = "aioquic"

NGTCP2_CONGESTION_CONTROLS = ("reno", "cubic", "bbr", "bbr2")
"""gtlsclient/gtlsserver ``--cc`` in ngtcp2 0.12.1 (``--help``): bbr is its BBR v1, bbr2 its
BBR v2."""
AIOQUIC_CONGESTION_CONTROLS = ("reno", "cubic", "bbr")
"""What aioquic 1.7 registers (``QuicConfiguration.congestion_control_algorithm``): its own
reno and cubic, and the testbed's bbr (proto.quic.bbr: Linux tcp_bbr.c, BBR version 1)."""

NGTCP2_ACK_BODY = b"received\n"
"""The answer of a POST whose response is no workload (asr, sink): the file gtlsserver
serves at that path, checked byte for byte by the client."""


@dataclass(frozen=True)
class FixedKnob:
    """A knob ngtcp2 has no way to apply: it must keep this value on an ngtcp2 level."""

    key: str
    attr: str
    value: Any
    reason: str


NGTCP2_FIXED = (
    FixedKnob("quic_pacing", "quic_pacing", "cwnd", "gtlsclient/gtlsserver have no pacing "
              "option (and send each window at once: tbcore.quicstack.paces)"),
    FixedKnob("quic_ack_delay", "quic_ack_delay_s", None, "aioquic's ACK delay; gtlsclient has "
              "only --ack-thresh"),
    FixedKnob("ack_policy", "ack_policy", "default", "the ACK policy is the testbed's, in "
              "its aioquic connection; gtlsclient has only --ack-thresh"),
    FixedKnob("quic_batching", "quic_batching", True, "aioquic's datagram batching; "
              "gtlsserver batches with GSO on its own"),
    FixedKnob("max_pacing_rate", "max_pacing_rate_bps", None, "ngtcp2 has no pacer to cap"),
    FixedKnob("pace_at_path_rate", "pace_at_path_rate", False, "ngtcp2 has no pacer to cap"),
    FixedKnob("sndbuf", "sndbuf_bytes", None, "gtlsclient/gtlsserver set no socket buffers"),
    FixedKnob("rcvbuf", "rcvbuf_bytes", None, "gtlsclient/gtlsserver set no socket buffers"),
    FixedKnob("send_policy", "send_policy", "none", "gtlsserver schedules its own streams"),
    FixedKnob("resume", "resume", False, "TLS resumption is not wired for gtlsclient"),
    FixedKnob("topology", "topology", "direct", "the relay and two paths run aioquic and h2"),
    FixedKnob("multipath", "multipath", "single", "one path only"),
    FixedKnob("qlog", "qlog", True, "ngtcp2's times come from its qlog"),
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
    """Whether the level's QUIC sender spreads a window over time: aioquic unless
    ``quic_pacing`` is off (its pacer, cwnd/srtt); ngtcp2's example binaries never. Measured
    at the server's end of the 200 ms link (the capture, before the bottleneck): gtlsserver
    sent its slow-start rounds as bursts of 11, 22, 44 and 88 datagrams within 0.0-1.2 ms
    under bbr, and of 11, 20, 23, 24 within one capture tick under cubic."""
    if settings.quic_stack == "ngtcp2":
        return False
    return bool(settings.quic_pacing != "off")


def _check_processing(settings: Any, route: HttpRoute) -> None:
    if route.processing is None:
        return
    value = getattr(settings, f"{route.processing}_s")
    if value != 0:
        raise SpecError(
            route.processing,
            f"{value * 1e3:g} ms: gtlsserver serves a static file and cannot wait; an "
            f'ngtcp2 level needs {route.processing} = "0ms"',
        )


def check(settings: Any, *, has_stacks: bool, routes: Mapping[str, HttpRoute]) -> None:
    """Refuse, in one line naming the knob, a ``quic_stack`` that would have no effect (on a
    protocol with no choice of stack: ``has_stacks`` False, from its kind's ``stack_of``) and
    an ngtcp2 level that asks for what gtlsclient/gtlsserver cannot do."""
    if settings.quic_stack == DEFAULT_QUIC_STACK:
        return
    if not has_stacks:
        raise SpecError(
            "quic_stack",
            f"{settings.quic_stack} is an HTTP/3 stack: it takes effect on protocol h3 only, "
            f"not {settings.protocol}",
        )
    route = routes.get(settings.workload)
    if route is None:
        raise SpecError(
            "workload",
            f"ngtcp2 (a static file server) carries {', '.join(routes)}, not {settings.workload}",
        )
    if settings.connection != "new":
        raise SpecError(
            "connection",
            f"ngtcp2 runs a new connection per request, not {settings.connection} "
            "(gtlsclient sends all its requests at once on one connection)",
        )
    _check_processing(settings, route)
    for item in NGTCP2_FIXED:
        if getattr(settings, item.attr) != item.value:
            raise SpecError(item.key, f"not applied by ngtcp2: {item.reason}")
    control = control_of(settings)
    if control not in NGTCP2_CONGESTION_CONTROLS:
        raise SpecError("cc", f"ngtcp2 has {', '.join(NGTCP2_CONGESTION_CONTROLS)}, not {control}")
