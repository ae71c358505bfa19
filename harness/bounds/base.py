"""Constants and argument checks every model of docs/models.md shares."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Required, TypedDict

from tbcore.errors import SpecError
from tbcore.settings import TCP_DEFAULT_MSS_BYTES

if TYPE_CHECKING:
    pass


BITS_PER_BYTE = 8

INITCWND_SEGMENTS = 10
"""Initial congestion window in segments: RFC 6928 (TCP); RFC 9002 section 7.2 gives QUIC
min(10 * max_datagram_size, max(14720, 2 * max_datagram_size)), the same 10 segments for
datagrams up to 1472 bytes."""

TCP_MSS_BYTES = TCP_DEFAULT_MSS_BYTES
"""TCP payload per segment on a 1500-byte Ethernet MTU with IPv4 and the timestamp option:
1500 - 20 (IPv4) - 20 (TCP) - 12 (RFC 7323 timestamps). Linux enables timestamps by default."""

MODELS_MSS_BYTES = 1460
"""The MSS of docs/models.md section 6 (1500 - 40, no TCP options): the default of
:func:`slow_start_rounds`, as the issue specifies it."""

QUIC_MAX_DATAGRAM_BYTES = 1200
"""QUIC's max_datagram_size: the RFC 9000 section 14 minimum, and aioquic's default. The
request bound counts the whole datagram as payload for QUIC: its frames, packet header and
AEAD tag make the real payload smaller, so this errs on the low side, as a bound must."""

FEC_NEW_SESSION_RTTS = 3
"""A new FEC session: TCP and TLS 1.3 for the keys (2 RTT), then the path probe (1 RTT)."""

TLS13_TCP_SETUP_RTTS = 2
"""TCP handshake (1 RTT) then the TLS 1.3 full handshake (1 RTT) before the request: section 4."""

SETUP_RTTS: dict[tuple[str, str], int] = {
    ("h2", "new"): TLS13_TCP_SETUP_RTTS,
    # TLS 1.3 early data still waits for TCP's SYN/SYN-ACK (TCP Fast Open is not modelled).
    ("h2", "0rtt"): 1,
    ("h2", "reused"): 0,
    # HTTP/2 in cleartext (settings.tls false, RFC 9113 section 3.3): TCP's handshake only,
    # the seed's plain-TCP request of the chapter's §12.3.1
    ("h2c", "new"): 1,
    ("h2c", "reused"): 0,
    ("h3", "new"): 1,  # QUIC combines transport and TLS 1.3 in one round trip (RFC 9000 s7)
    ("h3", "0rtt"): 0,  # resumed session, accepted 0-RTT data (RFC 9001 section 4.6)
    ("h3", "reused"): 0,
    # FEC: TCP + TLS 1.3 control channel (2 RTT), then the path probe (1 RTT and a train)
    ("fec", "new"): FEC_NEW_SESSION_RTTS,
    ("fec", "reused"): 0,
}
"""Round trips before the first request byte may leave, by (protocol, connection)."""

PROTOCOLS = ("h2", "h3", "h2c")
"""Protocols of :func:`request_time` (the FEC protocol has its own, :func:`fec_request_time`);
``h2c`` is ``h2`` without TLS."""
CLEARTEXT_OF = {"h2c": "h2"}
"""A bound's cleartext protocol and the registered protocol (tbcore.kinds) it runs on
(tbcore.kinds.setup_name: a run of h2 with tls = false)."""


CONNECTIONS = ("new", "reused", "0rtt")

MATHIS_C_PERIODIC = math.sqrt(3.0 / 2.0)
"""Mathis et al. (1997) constant for periodic loss with an ACK per packet (~1.22)."""


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, f"must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise SpecError(name, f"must be finite, got {value!r}")
    return number


def _non_negative(name: str, value: object) -> float:
    number = _number(name, value)
    if number < 0:
        raise SpecError(name, f"must be >= 0, got {value!r}")
    return number


def _positive(name: str, value: object) -> float:
    number = _number(name, value)
    if number <= 0:
        raise SpecError(name, f"must be > 0, got {value!r}")
    return number


def _count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        # numpy integers and whole floats are common in notebooks: accept them when exact
        try:
            as_int = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            raise SpecError(name, f"must be a whole number, got {value!r}") from None
        if isinstance(value, bool) or as_int != value:
            raise SpecError(name, f"must be a whole number, got {value!r}")
        value = as_int
    if value < minimum:
        raise SpecError(name, f"must be >= {minimum}, got {value!r}")
    return value


def _loss(name: str, value: object) -> float:
    number = _number(name, value)
    if not 0.0 <= number < 1.0:
        raise SpecError(name, f"must lie in [0, 1), got {value!r}")
    return number


def _probability(name: str, value: object) -> float:
    number = _number(name, value)
    if not 0.0 <= number <= 1.0:
        raise SpecError(name, f"must lie in [0, 1], got {value!r}")
    return number


def _open_unit(name: str, value: object) -> float:
    number = _number(name, value)
    if not 0.0 < number < 1.0:
        raise SpecError(name, f"must lie in (0, 1), got {value!r}")
    return number


def _sequence(name: str, values: object, check: Any) -> list[float]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise SpecError(name, f"must be a sequence of numbers, got {type(values).__name__}")
    if len(values) == 0:  # type: ignore[arg-type]
        raise SpecError(name, "must not be empty")
    return [check(f"{name}[{i}]", v) for i, v in enumerate(values)]  # type: ignore[attr-defined]


class RequestArgs(TypedDict, total=False):
    """The arguments of :func:`harness.bounds.request.request_time` other than the path's
    (round trip, rates and losses), as :func:`harness.bounds.onlink.request_time_for_link` and
    :func:`harness.bounds.trace.trace_request_time` take them; the defaults are
    request_time's."""

    upload_bytes: Required[int]
    download_bytes: Required[int]
    protocol: Required[str]
    connection: Required[str]
    processing_s: float
    initcwnd_segments: int
    mss_bytes: int | None
    window_bytes: int | None
