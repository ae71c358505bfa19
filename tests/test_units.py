"""tbcore.units: human quantities into SI numbers, and back; every bad input names its field."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support_inputs import assert_spec_error

from tbcore.errors import SpecError
from tbcore.units import (
    MAX_DURATION_S,
    MAX_RATE_BPS,
    MAX_SIZE_BYTES,
    MIN_RATE_BPS,
    format_duration,
    format_percent,
    format_rate,
    parse_count,
    parse_duration_s,
    parse_fraction,
    parse_probability,
    parse_queue,
    parse_rate_bps,
    parse_size_bytes,
)

pytestmark = pytest.mark.timeout(60)


# --- durations, rates and fractions: human spellings into SI numbers ---------------------


@pytest.mark.parametrize(
    ("parse", "field", "text", "si_value"),
    [
        (parse_duration_s, "delay", "200ms", 0.2),
        (parse_duration_s, "delay", "200 ms", 0.2),
        (parse_duration_s, "delay", "200MS", 0.2),
        (parse_duration_s, "delay", "1s", 1.0),
        (parse_duration_s, "delay", "1.5sec", 1.5),
        (parse_duration_s, "delay", "2msec", 0.002),
        (parse_duration_s, "delay", "250us", 250e-6),
        (parse_duration_s, "delay", "250usec", 250e-6),
        (parse_duration_s, "delay", "250µs", 250e-6),
        (parse_duration_s, "delay", "10ns", 10e-9),
        (parse_duration_s, "delay", "10nsec", 10e-9),
        (parse_duration_s, "delay", ".5s", 0.5),
        (parse_duration_s, "delay", "1e3ms", 1.0),
        (parse_duration_s, "delay", "+5ms", 0.005),
        (parse_duration_s, "delay", "0ms", 0.0),
        (parse_rate_bps, "rate", "333mbit", 333e6),
        (parse_rate_bps, "rate", "333Mbit", 333e6),
        (parse_rate_bps, "rate", "333mbit/s", 333e6),
        (parse_rate_bps, "rate", "14.5mbit", 14.5e6),
        (parse_rate_bps, "rate", "1gbit", 1e9),
        (parse_rate_bps, "rate", "0.1tbit", 1e11),
        (parse_rate_bps, "rate", "64kbit", 64e3),
        (parse_rate_bps, "rate", "1000bit", 1000.0),
        (parse_rate_bps, "rate", "1mibit", 2.0**20),
        (parse_rate_bps, "rate", "1kibit", 1024.0),
        (parse_rate_bps, "rate", "1gibit", 2.0**30),
        (parse_rate_bps, "rate", "5e2kbit", 5e5),
        (parse_fraction, "loss", "14%", 0.14),
        (parse_fraction, "loss", "14 %", 0.14),
        (parse_fraction, "loss", "0.14", 0.14),
        (parse_fraction, "loss", "0%", 0.0),
        (parse_fraction, "loss", "0", 0.0),
        (parse_fraction, "loss", "99.9%", 0.999),
    ],
)
def test_spelled_quantity_parses_into_si_units(
    parse: Callable[[str, object], float], field: str, text: str, si_value: float
) -> None:
    assert parse(field, text) == pytest.approx(si_value, rel=1e-12)


@pytest.mark.parametrize(
    ("parse", "field", "number", "si_value"),
    [
        (parse_duration_s, "delay", 0.2, 0.2),
        (parse_duration_s, "delay", 3, 3.0),
        (parse_rate_bps, "rate", 333e6, 333e6),
        (parse_rate_bps, "rate", 1000, 1000.0),
        (parse_fraction, "loss", 0.42, 0.42),
        (parse_fraction, "loss", 0, 0.0),
    ],
)
def test_a_number_is_already_in_si_units(
    parse: Callable[[str, object], float], field: str, number: float, si_value: float
) -> None:
    """Seconds, bit/s, a fraction: a number given as a number is taken as it is."""
    assert parse(field, number) == pytest.approx(si_value, rel=1e-12)


@pytest.mark.parametrize("unit", ["bps", "kbps", "mbps", "gbps", "Mbps", "mbps/s"])
def test_ambiguous_bps_is_refused_with_a_hint(unit: str) -> None:
    err = assert_spec_error(lambda: parse_rate_bps("rate", f"333{unit}"), "rate", "ambiguous")
    assert "bit" in err.reason


# --- sizes and queues --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("354640", 354_640),
        ("354640b", 354_640),
        ("10 bytes", 10),
        ("1byte", 1),
        ("64kb", 64_000),
        ("64KB", 64_000),
        ("64k", 64_000),
        ("30mb", 30_000_000),
        ("30m", 30_000_000),
        ("1gb", 10**9),
        ("1g", 10**9),
        ("1kib", 1024),
        ("1MiB", 2**20),
        ("1gib", 2**30),
        ("1.5kb", 1500),
        ("1e3", 1000),
        (0, 0),
        (1500, 1500),
    ],
)
def test_parse_size(text: str | int, size: int) -> None:
    value = parse_size_bytes("size", text)
    assert value == size
    assert isinstance(value, int)


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("1000p", (None, 1000)),
        ("1000 packets", (None, 1000)),
        ("1pkt", (None, 1)),
        ("20pkts", (None, 20)),
        ("5packet", (None, 5)),
        ("1mb", (1_000_000, None)),
        ("64000", (64_000, None)),
        (3000, (3000, None)),
    ],
)
def test_parse_queue(text: str | int, limit: tuple[int | None, int | None]) -> None:
    assert parse_queue("queue", text) == limit


@pytest.mark.parametrize("text", ["0p", "1.5p", "-3p"])
def test_bad_queue_packet_count(text: str) -> None:
    assert_spec_error(lambda: parse_queue("queue", text), "queue", "packet count")


# --- bad durations, rates and sizes: each names its field and says what is wrong --------


@pytest.mark.parametrize(
    ("parse", "field", "text", "word"),
    [
        # the unit of a delay is never implied
        (parse_duration_s, "delay", "200", "needs a unit"),
        (parse_duration_s, "delay", "-5ms", "negative"),
        (parse_duration_s, "delay", "5 parsecs", "unknown duration unit"),
        (parse_duration_s, "delay", "5 m s", "not a number"),
        (parse_duration_s, "delay", "5h", "unknown duration unit"),
        (parse_duration_s, "delay", "ms", "not a number"),
        (parse_duration_s, "delay", "", "not a number"),
        (parse_duration_s, "delay", "1e999s", "not finite"),
        (parse_duration_s, "delay", -1.0, "finite duration >= 0"),
        (parse_duration_s, "delay", math.nan, "finite duration >= 0"),
        (parse_duration_s, "delay", math.inf, "finite duration >= 0"),
        (parse_duration_s, "delay", True, "expected a string"),
        (parse_duration_s, "delay", None, "expected a string"),
        (parse_rate_bps, "rate", "0mbit", "> 0"),
        (parse_rate_bps, "rate", "-1mbit", "> 0"),
        (parse_rate_bps, "rate", 0, "> 0"),
        (parse_rate_bps, "rate", -5.0, "> 0"),
        (parse_rate_bps, "rate", math.inf, "> 0"),
        (parse_rate_bps, "rate", "333", "unknown rate unit"),
        (parse_rate_bps, "rate", "333mb", "unknown rate unit"),
        (parse_rate_bps, "rate", "fast", "not a number"),
        (parse_rate_bps, "rate", "1e999mbit", "not finite"),
        (parse_rate_bps, "rate", True, "expected a string"),
        (parse_size_bytes, "size", "-1", ">= 0"),
        (parse_size_bytes, "size", -1, ">= 0"),
        (parse_size_bytes, "size", "1.5", "whole number"),
        (parse_size_bytes, "size", "1.0001kb", "whole number"),
        (parse_size_bytes, "size", "5 furlongs", "unknown size unit"),
        (parse_size_bytes, "size", "5mbit", "unknown size unit"),
        (parse_size_bytes, "size", "lots", "not a number"),
        (parse_size_bytes, "size", 1500.0, "expected a string"),
        (parse_size_bytes, "size", True, "expected a string"),
    ],
)
def test_bad_quantity_names_the_field(
    parse: Callable[[str, object], float], field: str, text: object, word: str
) -> None:
    assert_spec_error(lambda: parse(field, text), field, word)


# --- fractions and probabilities --------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["100%", "1", "1.0", 1, 1.0, "-1%", -0.1, "150%", math.nan, "14 percent", "14x"]
)
def test_bad_fraction_names_the_field(text: object) -> None:
    assert_spec_error(lambda: parse_fraction("loss", text), "loss")


@pytest.mark.parametrize(("text", "value"), [("1", 1.0), ("1.0", 1.0), ("100%", 1.0), (1, 1.0)])
def test_probability_allows_one(text: str | int, value: float) -> None:
    assert parse_probability("gemodel.r", text) == value


@pytest.mark.parametrize(("text", "value"), [("30%", 0.3), ("0", 0.0), (0.5, 0.5)])
def test_probability_below_one_is_a_fraction(text: str | float, value: float) -> None:
    assert parse_probability("gemodel.r", text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["1.00", "1e0", "100.0%", " 100 % "])
def test_probability_accepts_every_spelling_of_one(text: str) -> None:
    assert parse_probability("gemodel.r", text) == 1.0


def test_probability_refuses_a_bool() -> None:
    with pytest.raises(SpecError):
        parse_probability("gemodel.r", True)


@pytest.mark.parametrize("text", ["101%", "1.5", -0.1, 2])
def test_bad_probability_names_the_field(text: object) -> None:
    assert_spec_error(lambda: parse_probability("gemodel.r", text), "gemodel.r")


# --- formatting, and the round trip -----------------------------------------------------


def test_formats() -> None:
    assert format_duration(0.0) == "0ms"
    assert format_duration(0.2) == "200ms"
    assert format_duration(1.5) == "1.5s"
    assert format_duration(250e-6) == "250us"
    assert format_rate(333e6) == "333mbit"
    assert format_rate(14.5e6) == "14.5mbit"
    assert format_rate(1e9) == "1gbit"
    assert format_rate(64e3) == "64kbit"
    assert format_rate(500.0) == "500bit"
    assert format_percent(0.14) == "14%"
    assert format_percent(0.0) == "0%"


@given(st.floats(min_value=0.0, max_value=MAX_DURATION_S, allow_nan=False))
def test_duration_round_trip(seconds: float) -> None:
    back = parse_duration_s("delay", format_duration(seconds))
    assert back == pytest.approx(seconds, rel=1e-5, abs=1e-12)


@given(st.floats(min_value=MIN_RATE_BPS, max_value=MAX_RATE_BPS, allow_nan=False))
def test_rate_round_trip(bps: float) -> None:
    assert parse_rate_bps("rate", format_rate(bps)) == pytest.approx(bps, rel=1e-5)


@given(st.floats(min_value=0.0, max_value=0.9999, allow_nan=False))
def test_percent_round_trip(fraction: float) -> None:
    text = format_percent(fraction)
    if text == "100%":  # 0.99999951 prints as 100% at six digits: not a valid fraction
        return
    assert parse_fraction("loss", text) == pytest.approx(fraction, rel=1e-5, abs=1e-12)


@given(st.integers(min_value=0, max_value=MAX_SIZE_BYTES))
def test_size_of_a_plain_number_is_itself(size: int) -> None:
    assert parse_size_bytes("size", str(size)) == size
    assert parse_size_bytes("size", size) == size


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("10", 10), (7, 7)])
def test_count_is_a_whole_number_of_at_least_one(text: str | int, value: int) -> None:
    assert parse_count("reps", text) == value


@pytest.mark.parametrize("text", ["0", "-3", "2.5", "ten", True])
def test_bad_count_names_the_field(text: object) -> None:
    with pytest.raises(SpecError) as info:
        parse_count("reps", text)  # type: ignore[arg-type]
    assert info.value.field == "reps" and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_rate_bps, "0.5bit"),
        (parse_rate_bps, "1e-30bit"),
        (parse_rate_bps, "101gbit"),
        (parse_duration_s, "1e300s"),
        (parse_duration_s, "90000s"),
        (parse_size_bytes, "1e30b"),
        (parse_size_bytes, "2000gb"),
        (parse_duration_s, "２００ms"),
        (parse_count, "２"),
        (parse_count, "1_000"),
    ],
)
def test_out_of_range_and_non_ascii_quantities_are_refused(parse, text: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError):
        parse("field", text)


def test_errors_are_one_line_and_cut_to_a_readable_length() -> None:
    err = SpecError("k" * 100_000, "bad value " + "v" * 100_000 + "\nsecond line")
    text = str(err)
    assert "\n" not in text and len(text) < 1000 and "100000 characters" in text
