"""The transport flags `testbed serve` and `testbed client` share: same flags, same values,
same one-line errors on both ends."""

from __future__ import annotations

import argparse

import pytest

from clients import cli as client_cli
from clients.config import ClientConfig
from servers import cli as server_cli
from servers.config import ServerConfig
from servers.knobs import (
    add_transport_arguments,
    check_quic_pacing,
    check_transport_fields,
    parse_pacing,
    tcp_options_of,
    transport_fields,
)
from servers.sockopts import TcpOptions
from tbcore.errors import SpecError

KNOBS = [
    "--cc", "bbr", "--window-clamp", "64kb", "--sndbuf", "1MiB", "--rcvbuf", "2MiB",
    "--max-pacing-rate", "333mbit", "--notsent-lowat", "16kb", "--quickack",
    "--quic-cc", "cubic", "--max-datagram-size", "1452", "--quic-pacing", "100mbit",
    "--no-batching", "--quic-max-data", "1MiB", "--h2-window", "65535",
    "--quic-ack-delay", "5ms",
]  # fmt: skip


def parsed(add: object, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add(parser)  # type: ignore[operator]
    return parser.parse_args(argv)


def test_both_ends_take_the_same_knobs() -> None:
    expected = {
        "cc": "bbr",
        "window_clamp_bytes": 64_000,
        "sndbuf_bytes": 1024 * 1024,
        "rcvbuf_bytes": 2 * 1024 * 1024,
        "max_pacing_rate_bps": 333e6,
        "notsent_lowat_bytes": 16_000,
        "quickack": True,
        "quic_cc": "cubic",
        "max_datagram_size": 1452,
        "quic_batching": False,
        "quic_pacing": 100e6,
        "quic_max_data_bytes": 1024 * 1024,
        "quic_ack_delay_s": 0.005,
        "h2_window_bytes": 65_535,
    }
    assert transport_fields(parsed(add_transport_arguments, KNOBS)) == expected
    server = server_cli.config_from_args(parsed(server_cli.add_arguments, KNOBS))
    client = client_cli.config_from_args(parsed(client_cli.add_arguments, KNOBS))
    for name, value in expected.items():
        assert getattr(server, name) == getattr(client, name) == value, name
    assert tcp_options_of(server) == tcp_options_of(client)


def test_defaults_leave_the_kernel_alone() -> None:
    fields = transport_fields(parsed(add_transport_arguments, []))
    assert all(fields[name] is None for name in ("cc", "window_clamp_bytes", "sndbuf_bytes"))
    assert fields["quic_pacing"] == "cwnd" and fields["quic_batching"]
    assert fields["max_datagram_size"] == 1200 and fields["h2_window_bytes"] == 16 * 1024 * 1024


def test_pacing_words_and_rates() -> None:
    assert parse_pacing("cwnd") == "cwnd" and parse_pacing("off") == "off"
    assert parse_pacing("1gbit") == 1e9
    with pytest.raises(SpecError, match="quic-pacing"):
        parse_pacing("fast")
    check_quic_pacing(5.0)
    for bad in ("fast", 0.0, -1.0):
        with pytest.raises(SpecError, match="quic-pacing"):
            check_quic_pacing(bad)


def knobs(config_class: type, **changes: object) -> object:
    """A valid server or client config with fields set afterwards (past its own checks)."""
    config = config_class()
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize("config_class", [ServerConfig, ClientConfig])
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cc": "vegas"}, "cc: 'vegas' is not one of reno, cubic, bbr"),
        ({"quic_cc": "bbr"}, "quic-cc: 'bbr' is not one of reno, cubic"),
        ({"max_datagram_size": 1199}, "max-datagram-size: 1199 is not in 1200..65527"),
        ({"max_datagram_size": 65_528}, "max-datagram-size: 65528 is not in 1200..65527"),
        ({"notsent_lowat_bytes": 0}, "notsent-lowat: must be > 0 bytes"),
        ({"quic_max_data_bytes": -1}, "quic-max-data: must be > 0 bytes"),
        ({"max_pacing_rate_bps": 0.0}, "max-pacing-rate: must be > 0 bit/s"),
        ({"h2_window_bytes": 65_534}, "h2-window: 65534 is not in 65535..2^31-1"),
        ({"h2_window_bytes": 2**31}, "h2-window: 2147483648 is not in 65535..2^31-1"),
    ],
)
def test_bad_knobs_are_refused_in_one_line(
    config_class: type, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(SpecError) as info:
        check_transport_fields(knobs(config_class, **changes))
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(SpecError, match=message.split(":")[0]):
        config_class(**changes)  # the config's own checks are these


def test_good_knobs_pass_and_become_tcp_options() -> None:
    config = ClientConfig(
        cc="cubic", window_clamp_bytes=65_536, max_pacing_rate_bps=1e8, quickack=True
    )
    check_transport_fields(config)
    assert tcp_options_of(config) == TcpOptions(
        cc="cubic", window_clamp_bytes=65_536, max_pacing_rate_bps=1e8, quickack=True
    )
