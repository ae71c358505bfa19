"""The 802.11a exchange arithmetic and the air= link keys (netem.air)."""

from __future__ import annotations

import pytest
from support_inputs import assert_spec_error

from netem.air import AirSpec, ppdu_ns
from netem.linkspec import LinkSpec, parse_link

QUIC_IP_BYTES = 1228
"""A 1,200-byte QUIC datagram + UDP (8) + IPv4 (20): the frame of the chapter's 208 µs."""
ACK_IP_BYTES = 78
"""A small ACK-only IP packet (e.g. a 50-byte QUIC ACK datagram): 5 symbols at 54 Mbit/s."""


def test_mac_ack_at_6_mbit_is_44_us() -> None:
    # 16 + 8 * 14 + 6 = 134 bits, 24 bits per symbol: 6 symbols; 16 + 4 + 6 * 4 = 44 µs
    assert AirSpec().ack_ppdu_ns == 44_000


def test_the_chapters_data_ppdu_and_exchange() -> None:
    air = AirSpec()
    assert air.data_ppdu_ns(QUIC_IP_BYTES) == 208_000
    assert air.exchange_ns(QUIC_IP_BYTES) == 34_000 + 208_000 + 16_000 + 44_000 == 302_000
    assert air.exchange_s(QUIC_IP_BYTES) == 302e-6


def test_the_chapters_ack_exchange() -> None:
    air = AirSpec()
    assert air.data_ppdu_ns(ACK_IP_BYTES) == 40_000
    assert air.exchange_ns(ACK_IP_BYTES) == 134_000


def test_208_us_is_a_frame_of_1240_to_1266_bytes_not_1500() -> None:
    # 47 symbols hold 47 * 216 - 22 = 10,130 bits = 1,266 bytes; 46 hold 1,239 bytes
    assert ppdu_ns(1266, 54e6) == 208_000
    assert ppdu_ns(1267, 54e6) == 212_000
    assert ppdu_ns(1240, 54e6) == 208_000
    assert ppdu_ns(1239, 54e6) == 204_000
    # a full 1,500-byte IP packet + 36 bytes of MAC/LLC/FCS: 57 symbols
    assert AirSpec().data_ppdu_ns(1500) == 248_000
    assert AirSpec().exchange_ns(1500) == 342_000


def test_tcp_pure_ack_with_timestamps_is_36_us() -> None:
    assert AirSpec().data_ppdu_ns(52) == 36_000


def test_image_exchange_counts_take_13_4_s() -> None:
    air = AirSpec()
    total_s = 30_800 * air.exchange_s(QUIC_IP_BYTES) + 30_800 * air.exchange_s(ACK_IP_BYTES)
    assert total_s == pytest.approx(13.4288, abs=1e-9)


def test_backoff_and_difs_defaults() -> None:
    air = AirSpec()
    assert (air.difs_s, air.sifs_s, air.slot_s, air.cw_min) == (34e-6, 16e-6, 9e-6, 15)
    assert air.exchange_ns(QUIC_IP_BYTES, backoff_slots=3) == 302_000 + 27_000
    assert not air.backoff and air.ampdu_frames == 1


def test_ampdu_pads_and_delimits_subframes() -> None:
    air = AirSpec()
    # two 1,500-byte packets: 2 * (4 + 1536) = 3,080 bytes -> 115 symbols
    assert air.ampdu_ppdu_ns([1500, 1500]) == 20_000 + 115 * 4_000
    assert air.block_ack_ppdu_ns == 68_000  # 32 bytes at 6 Mbit/s: 11 symbols


def test_link_string_round_trip() -> None:
    spec = parse_link("rtt=4ms,air=54mbit/6mbit,air.order=alternate,air.backoff=on,air.ampdu=8")
    assert spec.air == AirSpec(order="alternate", backoff=True, ampdu_frames=8)
    assert parse_link(str(spec)) == spec
    assert LinkSpec.from_dict(spec.to_dict()) == spec
    assert parse_link("rtt=4ms").air is None


def test_link_string_options() -> None:
    air = parse_link("air=24mbit/6mbit,air.difs=50us,air.mac=26,air.queue=50p").air
    assert air is not None
    assert (air.data_rate_bps, air.access_ns, air.mac_header_bytes, air.queue_packets) == (
        24e6,
        50_000,
        26,
        50,
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("air=54mbit", "air"),
        ("air=54mbit/", "air"),
        ("air=54.3mbit/6mbit", "air.data_rate_bps"),
        ("air.order=fifo", "air"),
        ("air=54mbit/6mbit,air.order=lifo", "air.order"),
        ("air=54mbit/6mbit,air.colour=red", "air.colour"),
        ("air=54mbit/6mbit,air.ampdu=0", "air.ampdu_frames"),
        ("air=54mbit/6mbit,air.backoff=maybe", "air.backoff"),
        ("air=54mbit/6mbit,air.queue=many", "air.queue"),
        ("air=54mbit/6mbit,air.difs=-1us", "air.difs"),
        ("up.air=54mbit/6mbit", "up.air"),
    ],
)
def test_bad_air_keys_name_the_field(text: str, field: str) -> None:
    assert_spec_error(lambda: parse_link(text), field)


def test_from_dict_refuses_unknown_air_keys() -> None:
    assert_spec_error(lambda: LinkSpec.from_dict({"air": {"rate": 1}}), "air.rate")
