"""Transport knobs that ``testbed serve`` and ``testbed client`` share: one flag definition,
one parser and one validation for the socket, QUIC and HTTP/2 window settings that the
harness passes to both ends alike (``harness.runner.socket_flags``).

Both :class:`servers.config.ServerConfig` and :class:`clients.config.ClientConfig` carry
these fields under the same names; checks specific to one end stay in its config.
"""

from __future__ import annotations

import argparse
from typing import Any

from servers.sockopts import TcpOptions
from tbcore import units
from tbcore.errors import SpecError

H2_MIN_WINDOW_BYTES = 65_535
"""HTTP/2's initial flow-control window; a smaller one would stall the peer (RFC 9113 6.9.2)."""
H2_MAX_WINDOW_BYTES = 2**31 - 1
"""The largest HTTP/2 flow-control window (RFC 9113 section 6.9.1)."""

TCP_CONGESTION_CONTROLS = ("reno", "cubic", "bbr")
"""What ``TCP_CONGESTION`` accepts on these kernels (NOTES-machine.md)."""
QUIC_CONGESTION_CONTROLS = ("reno", "cubic")
"""What aioquic 1.7 registers (``QuicConfiguration.congestion_control_algorithm``)."""
QUIC_MIN_DATAGRAM_BYTES = 1200
"""RFC 9000 section 14: the smallest maximum datagram size a QUIC endpoint may use."""
QUIC_MAX_DATAGRAM_BYTES = 65_527
"""Largest UDP payload (RFC 9000 max_udp_payload_size upper bound is 65527)."""
QUIC_PACING_MODES = ("cwnd", "off")
"""``--quic-pacing`` words; anything else is a rate."""
OPTIONAL_SIZE_FIELDS = (
    "window_clamp_bytes",
    "sndbuf_bytes",
    "rcvbuf_bytes",
    "notsent_lowat_bytes",
    "quic_max_data_bytes",
)
"""Sizes that may be None (kernel or library default) and are > 0 bytes otherwise."""


def add_transport_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of every field in this module, as both ``serve`` and ``client`` take them."""
    parser.add_argument("--cc", choices=TCP_CONGESTION_CONTROLS, default=None)
    parser.add_argument("--window-clamp", default=None, help="TCP_WINDOW_CLAMP, bytes")
    parser.add_argument("--sndbuf", default=None, help="SO_SNDBUF, bytes")
    parser.add_argument("--rcvbuf", default=None, help="SO_RCVBUF, bytes")
    parser.add_argument("--max-pacing-rate", default=None, help="SO_MAX_PACING_RATE, e.g. 333mbit")
    parser.add_argument("--notsent-lowat", default=None, help="TCP_NOTSENT_LOWAT, bytes")
    parser.add_argument("--quickack", action="store_true", help="TCP_QUICKACK after each read")
    parser.add_argument("--quic-cc", choices=QUIC_CONGESTION_CONTROLS, default="reno")
    parser.add_argument("--max-datagram-size", type=int, default=QUIC_MIN_DATAGRAM_BYTES)
    parser.add_argument(
        "--quic-pacing",
        default="cwnd",
        help="QUIC pacing: cwnd (aioquic: cwnd/srtt), off, or a rate such as 333mbit",
    )
    parser.add_argument(
        "--no-batching",
        action="store_true",
        help="QUIC: one sendto per datagram, one transmit per datagram read (aioquic's way)",
    )
    parser.add_argument("--quic-max-data", default=None, help="fixed QUIC windows, bytes")
    parser.add_argument("--h2-window", default="16MiB", help="HTTP/2 windows, bytes")
    parser.add_argument(
        "--fec-rate", default=None, help="FEC: the path's rate, a cap on the sender (333mbit)"
    )
    parser.add_argument(
        "--fec-redundancy", default="adaptive", help="FEC: adaptive or a percentage (25.7%%)"
    )
    parser.add_argument("--fec-target", type=float, default=0.999, help="FEC: success target")


def parse_pacing(text: str) -> str | float:
    """``cwnd``, ``off`` or a rate (``333mbit``) for ``--quic-pacing``."""
    if text in QUIC_PACING_MODES:
        return text
    return units.parse_rate_bps("quic-pacing", text)


def transport_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields of :func:`add_transport_arguments`' flags, parsed (SpecError on
    a bad size or rate, naming the flag)."""

    def size(value: str | None, flag: str) -> int | None:
        return None if value is None else units.parse_size_bytes(flag, value)

    return {
        "cc": args.cc,
        "window_clamp_bytes": size(args.window_clamp, "window-clamp"),
        "sndbuf_bytes": size(args.sndbuf, "sndbuf"),
        "rcvbuf_bytes": size(args.rcvbuf, "rcvbuf"),
        "max_pacing_rate_bps": (
            None
            if args.max_pacing_rate is None
            else units.parse_rate_bps("max-pacing-rate", args.max_pacing_rate)
        ),
        "notsent_lowat_bytes": size(args.notsent_lowat, "notsent-lowat"),
        "quickack": args.quickack,
        "quic_cc": args.quic_cc,
        "max_datagram_size": args.max_datagram_size,
        "quic_batching": not args.no_batching,
        "quic_pacing": parse_pacing(args.quic_pacing),
        "quic_max_data_bytes": size(args.quic_max_data, "quic-max-data"),
        "h2_window_bytes": units.parse_size_bytes("h2-window", args.h2_window),
        "fec_rate_bps": (
            None if args.fec_rate is None else units.parse_rate_bps("fec-rate", args.fec_rate)
        ),
        "fec_redundancy": args.fec_redundancy,
        "fec_target": args.fec_target,
    }


def check_quic_pacing(pacing: str | float) -> None:
    if isinstance(pacing, str) and pacing not in QUIC_PACING_MODES:
        raise SpecError("quic-pacing", f"{pacing!r}: use cwnd, off or a rate")
    if not isinstance(pacing, str) and not pacing > 0:
        raise SpecError("quic-pacing", "a pacing rate must be > 0 bit/s")


def check_transport_fields(config: Any) -> None:
    """Validate the shared fields of a server or client config (SpecError naming the flag)."""
    if config.cc is not None and config.cc not in TCP_CONGESTION_CONTROLS:
        raise SpecError("cc", f"{config.cc!r} is not one of {', '.join(TCP_CONGESTION_CONTROLS)}")
    if config.quic_cc not in QUIC_CONGESTION_CONTROLS:
        raise SpecError(
            "quic-cc", f"{config.quic_cc!r} is not one of {', '.join(QUIC_CONGESTION_CONTROLS)}"
        )
    if not QUIC_MIN_DATAGRAM_BYTES <= config.max_datagram_size <= QUIC_MAX_DATAGRAM_BYTES:
        raise SpecError(
            "max-datagram-size",
            f"{config.max_datagram_size} is not in {QUIC_MIN_DATAGRAM_BYTES}.."
            f"{QUIC_MAX_DATAGRAM_BYTES} (RFC 9000 section 14)",
        )
    for name in OPTIONAL_SIZE_FIELDS:
        value = getattr(config, name)
        if value is not None and value <= 0:
            raise SpecError(name.removesuffix("_bytes").replace("_", "-"), "must be > 0 bytes")
    if config.max_pacing_rate_bps is not None and config.max_pacing_rate_bps <= 0:
        raise SpecError("max-pacing-rate", "must be > 0 bit/s")
    if config.fec_rate_bps is not None and not config.fec_rate_bps > 0:
        raise SpecError("fec-rate", "must be > 0 bit/s")
    from servers.fecloss import Redundancy  # the FEC settings' one parser

    Redundancy.parse(config.fec_redundancy, config.fec_target)
    if not H2_MIN_WINDOW_BYTES <= config.h2_window_bytes <= H2_MAX_WINDOW_BYTES:
        raise SpecError(
            "h2-window", f"{config.h2_window_bytes} is not in 65535..2^31-1 (RFC 9113 6.9.1)"
        )


def tcp_options_of(config: Any) -> TcpOptions:
    """The TCP socket knobs of a server or client config."""
    return TcpOptions(
        cc=config.cc,
        window_clamp_bytes=config.window_clamp_bytes,
        sndbuf_bytes=config.sndbuf_bytes,
        rcvbuf_bytes=config.rcvbuf_bytes,
        max_pacing_rate_bps=config.max_pacing_rate_bps,
        notsent_lowat_bytes=config.notsent_lowat_bytes,
        quickack=config.quickack,
    )
