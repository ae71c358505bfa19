"""tbcore.cross: the written forms of competing traffic, and every bad one refused in one line."""

from __future__ import annotations

import pytest

from tbcore.cross import MAX_FLOWS, CrossTraffic, parse_cross
from tbcore.errors import SpecError
from tbcore.settings import TCP_CONGESTION_CONTROLS, Settings

CCS = TCP_CONGESTION_CONTROLS


def test_tcp_flows_of_a_congestion_control() -> None:
    assert parse_cross("cross", "tcp:2:cubic", CCS) == CrossTraffic("tcp", 2, cc="cubic")
    assert parse_cross("cross", " TCP:4:BBR ", CCS) == CrossTraffic("tcp", 4, cc="bbr")
    assert parse_cross("cross", "tcp:1:reno", CCS).label == "1 reno flow"


def test_a_udp_stream_at_a_rate() -> None:
    udp = parse_cross("cross", "udp:10mbit", CCS)
    assert udp == CrossTraffic("udp", 1, rate_bps=10e6)
    assert udp.label == "UDP at 10 Mbit/s"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "must be tcp:N:cc"),
        ("quic:1:cubic", "must be tcp:N:cc"),
        ("tcp:2", "tcp:N:cc"),
        ("tcp:2:cubic:up", "tcp:N:cc"),
        ("tcp:0:cubic", f"1..{MAX_FLOWS}"),
        (f"tcp:{MAX_FLOWS + 1}:cubic", f"1..{MAX_FLOWS}"),
        ("tcp:-1:cubic", "whole number"),
        ("tcp:２:cubic", "whole number"),
        ("tcp:2:vegas", "cc must be one of"),
        ("udp", "udp:RATE"),
        ("udp:10mbit:x", "udp:RATE"),
        ("udp:fast", "cross"),
        ("udp:2gbit", "1 Gbit/s"),
    ],
)
def test_bad_forms_are_one_line_errors_naming_the_field(text: str, reason: str) -> None:
    with pytest.raises(SpecError, match=reason) as caught:
        parse_cross("fixed.cross", text, CCS)
    assert str(caught.value).startswith("fixed.cross")
    assert "\n" not in str(caught.value)


def test_the_knob_checks_the_form_and_none_means_alone() -> None:
    assert Settings.from_table({"cross": "tcp:2:cubic"}, "fixed").cross == "tcp:2:cubic"
    assert Settings.from_table({"cross": "none"}, "fixed").cross is None
    with pytest.raises(SpecError, match=r"fixed\.cross"):
        Settings.from_table({"cross": "tcp:2:vegas"}, "fixed")
    with pytest.raises(SpecError, match="cross"):
        Settings(cross="tcp:x:cubic")  # the typed form is checked too (a run.json)
