"""Hostile input to the parsers of tbcore and the link parser (issue 26): a hypothesis fuzz
over every knob of the settings registry (arbitrary text as a flag gives it, arbitrary TOML
values as an experiment file does, arbitrary JSON values as the settings document does) and
over ``netem.linkspec.parse_link``, failing on any exception other than the one-line
:class:`SpecError`; and a corpus of the inputs once accepted or once a traceback, each
refused. A bug fixed adds its input to the corpus."""

from __future__ import annotations

import datetime
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.store.resultdir import read_json_object
from netem.linkspec import LINK_KEYS, parse_link
from netem.sysctl import to_set
from tbcore.errors import MAX_FIELD_CHARS, MAX_REASON_CHARS, SpecError
from tbcore.sampler import check_sample_hz
from tbcore.settings import KNOBS, Settings

pytestmark = pytest.mark.timeout(300)

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
"""Deterministic (the same examples every run, so CI does not flicker) and bounded."""

DIGITS_NOT_ASCII = ["²", "٥", "５", "١٥٠٠", "𝟓", "⑤", "Ⅴ", "༥"]
"""Characters Python's int() or float() or str.isdigit() take for digits; the README says
digits are ASCII."""
NUMBER_TEXT = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="0123456789.eE+-_ %kmgbitsnaf" + "".join(DIGITS_NOT_ASCII), max_size=12),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "-0", "-0ms", "1_000", "0x10",
                     "1e309", "9" * 400, "1e-400", " 5 ", "5\n", "\t5"]),
)  # fmt: skip
"""Text that is nearly a number: what a flag or a quoted TOML value may hold."""
TOML_SCALARS = st.one_of(
    st.text(max_size=30),
    NUMBER_TEXT,
    st.integers(),
    st.integers(min_value=2**63, max_value=10**400),
    st.floats(),  # NaN, the infinities, -0.0, subnormals: TOML has them all
    st.booleans(),
    st.datetimes(),
    st.dates(),
    st.times(),
)
TOML_VALUES = st.recursive(
    TOML_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=20), inner, max_size=3)
    ),
    max_leaves=6,
)
"""Any value tomllib can return."""
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=6,
)
"""Any value json.loads can return (Python's json reads NaN and Infinity too)."""
KNOB_KEYS = st.sampled_from(sorted(KNOBS))


def _one_line(err: SpecError) -> None:
    text = str(err)
    assert "\n" not in text and len(text) <= MAX_FIELD_CHARS + MAX_REASON_CHARS + 60, text


def _refused_or_accepted(call: Any) -> Any:
    """``call()``'s value, or None when it raised SpecError (one line); any other exception
    fails the test."""
    try:
        return call()
    except SpecError as err:
        _one_line(err)
        return None


def _assert_sane(result: Any) -> None:
    """What was accepted holds no NaN or infinity anywhere."""
    if result is None:
        return
    for value in result.to_dict().values():
        if isinstance(value, float):
            assert math.isfinite(value) and str(value) != "-0.0", value


@FUZZ
@given(key=KNOB_KEYS, text=NUMBER_TEXT)
def test_fuzz_every_knob_as_a_flag(key: str, text: str) -> None:
    knob = KNOBS[key]
    typed = _refused_or_accepted(lambda: knob.parse(knob.flag[2:], text))
    if isinstance(typed, float):
        assert math.isfinite(typed), (key, text, typed)


@FUZZ
@given(key=KNOB_KEYS, value=TOML_VALUES)
def test_fuzz_every_knob_in_an_experiment_file(key: str, value: Any) -> None:
    _assert_sane(_refused_or_accepted(lambda: Settings.from_table({key: value}, "fixed")))


@FUZZ
@given(key=KNOB_KEYS, value=JSON_VALUES)
def test_fuzz_every_knob_in_the_settings_document(key: str, value: Any) -> None:
    attr = KNOBS[key].attr
    data = {**Settings().to_dict(), attr: value}
    _assert_sane(_refused_or_accepted(lambda: Settings.from_dict(data)))


LINK_ALPHABET = "rtlosqudwnpeyibkmgMGa.=,%/ _-0123456789eE+µ" + "".join(DIGITS_NOT_ASCII)
LINK_STRINGS = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=LINK_ALPHABET, max_size=60),
    st.lists(
        st.tuples(
            st.sampled_from([*LINK_KEYS, *(f"up.{k}" for k in LINK_KEYS), "air", "air.ampdu"]),
            st.one_of(NUMBER_TEXT, st.text(alphabet=LINK_ALPHABET, max_size=12)),
        ),
        max_size=6,
    ).map(lambda items: ",".join(f"{k}={v}" for k, v in items)),
)


@FUZZ
@given(text=LINK_STRINGS)
def test_fuzz_the_link_parser(text: str) -> None:
    spec = _refused_or_accepted(lambda: parse_link(text))
    if spec is not None:
        assert math.isfinite(spec.up.delay_s) and math.isfinite(spec.down.rate_bps or 0.0)


# -- the corpus: inputs that were accepted, or a traceback, each refused now ----------------

KNOB_CORPUS: list[tuple[str, Any]] = [
    *(("requests", digit) for digit in DIGITS_NOT_ASCII),  # "²" a traceback, "٥" taken as 5
    ("chunks", "５０"),
    ("initcwnd", "١٠"),
    ("requests", "1_0"),
    ("fec_target", math.nan),  # TOML `fec_target = nan` passed `value < low` checks
    ("fec_target", math.inf),
    ("fec_target", "nan"),
    ("fec_target", "inf"),
    ("fec_target", "0.9_99"),
    ("fec_target", 10**400),  # a float() overflow
    ("fec_target", "٠.٩٩٩"),
    ("quic_ack_delay", "-0ms"),  # accepted as 0 (-0.0 < 0 is false)
    ("processing_audio", "-0s"),
    ("sndbuf", "-0"),
    ("sysctls", {"net.ipv4.tcp_sack": "1\n2"}),  # "1" applied, "2" dropped unsaid
    ("sysctls", {"net.ipv4.tcp_sack": "1\r"}),
    ("sysctls", {"net.ipv4.tcp_sack": "1\x00"}),
    ("sysctls", {"net.ipv4.tcp_sack": "1\u2028"}),
    ("sysctls", {"net.ipv4.tcp_sack": ""}),
    ("timeout", datetime.time(1, 2)),
]


@pytest.mark.parametrize(("key", "value"), KNOB_CORPUS, ids=[repr(c) for c in KNOB_CORPUS])
def test_the_knob_corpus_is_refused_in_one_line(key: str, value: Any) -> None:
    with pytest.raises(SpecError) as err:
        Settings.from_table({key: value}, "fixed")
    _one_line(err.value)
    assert err.value.field.startswith(f"fixed.{key}")
    if isinstance(value, str):
        with pytest.raises(SpecError):
            KNOBS[key].parse(key, value)  # the flag's path too


DOCUMENT_CORPUS: list[tuple[str, Any]] = [
    ("fec_target", math.nan),  # json.loads reads NaN
    ("timeout_s", math.inf),
    ("player_buffer_s", math.nan),
    ("chunks", 10**400),
]


@pytest.mark.parametrize(("attr", "value"), DOCUMENT_CORPUS)
def test_the_settings_document_corpus_is_refused(attr: str, value: Any) -> None:
    with pytest.raises(SpecError):
        Settings.from_dict({**Settings().to_dict(), attr: value})


LINK_CORPUS = [
    "rtt=200ms,mtu=١٥٠٠",  # int() took Arabic-Indic digits: MTU 1500
    "rtt=200ms,mtu=１５００",
    "rtt=200ms,mtu=1_500",
    "rtt=200ms,seed=٥",
    "rtt=200ms,seed=²",  # a traceback: isdigit() but not int()
    "rtt=٢٠٠ms",
    "rtt=-0ms",
    "rtt=200ms,loss=nan%",
    "rtt=200ms,rate=infmbit",
]


@pytest.mark.parametrize("text", LINK_CORPUS)
def test_the_link_corpus_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_link(text)
    _one_line(err.value)


@pytest.mark.parametrize("value", ["1\n2", "1\r\n", "\n", "", "1\x0b2"])
def test_a_sysctl_value_that_is_not_one_line_is_refused_where_links_take_it(value: str) -> None:
    with pytest.raises(SpecError, match=r"net\.ipv4\.tcp_sack"):
        to_set("net.ipv4.tcp_sack", value)
    assert to_set("net.ipv4.tcp_rmem", "4096\t131072  6291456") == "4096 131072 6291456"


@pytest.mark.parametrize("hz", [math.nan, math.inf, -math.inf, 0.0, 0.5, 1e9])
def test_sample_rates_that_are_not_finite_or_out_of_range_are_refused(hz: float) -> None:
    with pytest.raises(SpecError, match="sample-hz"):
        check_sample_hz("sample-hz", hz)


# -- testbed report's reader: a manifest or a run's row of any bytes ------------------------

JSON_CORPUS = [b"[1, 2]", b"[" * 100_000 + b"]" * 100_000, b"{garbage", b"\xff\xfe{}", b"null",
               b'"text"', b"1e999", b'{"a": ' * 5_000 + b"1" + b"}" * 5_000]  # fmt: skip


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.sampled_from(JSON_CORPUS)))
def test_fuzz_the_result_readers_json(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.json"
        path.write_bytes(raw)
        try:
            data = read_json_object(path, "manifest")
        except SpecError as err:
            _one_line(err)
        else:
            assert isinstance(data, dict)
